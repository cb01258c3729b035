#include "status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char mo_msg[1024];

mo_status mo_fail_at(mo_status code, const char *file, int line, const char *fmt, ...) {
    // Keep only the file's base name: messages stay short and stable across build trees.
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(mo_msg, sizeof mo_msg, "%s:%d: ", base, line);
    if (n < 0 || (size_t)n >= sizeof mo_msg) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mo_msg + n, sizeof mo_msg - (size_t)n, fmt, ap);
    va_end(ap);
    return code;
}

const char *mo_errmsg(void) { return mo_msg; }
void mo_clear_error(void) { mo_msg[0] = '\0'; }

const char *mo_status_name(mo_status s) {
    switch (s) {
    case MO_OK: return "ok";
    case MO_ERR_OOM: return "oom";
    case MO_ERR_INVALID: return "invalid";
    case MO_ERR_CUDA: return "cuda error";
    case MO_ERR_CUBLAS: return "cublas error";
    case MO_ERR_CUDNN: return "cudnn error";
    case MO_ERR_NCCL: return "nccl error";
    case MO_ERR_IO: return "io error";
    case MO_ERR_UNSUPPORTED: return "unsupported";
    case MO_ERR_INTERNAL: return "internal error";
    }
    return "unknown";
}
