// One status type for the whole suite. Every public function returns mo_status;
// on failure a thread-local message holds "file:line: what failed: the library's own message".
#ifndef MEMOPT_STATUS_H
#define MEMOPT_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_status {
    MO_OK = 0,
    MO_ERR_OOM,         // the allocator could not serve a request (cap or device); recoverable
    MO_ERR_INVALID,     // bad input: a flag, a shape, a combination
    MO_ERR_CUDA,        // a CUDA runtime call failed
    MO_ERR_CUBLAS,      // a cuBLAS / cuBLASLt call failed
    MO_ERR_CUDNN,       // a cuDNN call failed
    MO_ERR_NCCL,        // an NCCL call failed
    MO_ERR_IO,          // a file could not be read or written
    MO_ERR_UNSUPPORTED, // not built in, or not available on this machine (no GPU, no CUDA)
    MO_ERR_INTERNAL     // a broken invariant: a bug
} mo_status;

// Record a failure (message formatted printf-style, prefixed by file:line) and return code.
mo_status mo_fail_at(mo_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define MO_FAIL(code, ...) mo_fail_at((code), __FILE__, __LINE__, __VA_ARGS__)

// The message of the last failure on this thread ("" when none).
const char *mo_errmsg(void);
void mo_clear_error(void);
const char *mo_status_name(mo_status s);

// Propagate a failure unchanged.
#define MO_TRY(expr)                         \
    do {                                     \
        mo_status mo_try_s_ = (expr);        \
        if (mo_try_s_ != MO_OK) return mo_try_s_; \
    } while (0)

// Propagate a failure after jumping to a cleanup label: `MO_TRY_GOTO(x, done)` with a local `st`.
#define MO_TRY_GOTO(st, expr, label) \
    do {                             \
        (st) = (expr);               \
        if ((st) != MO_OK) goto label; \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
