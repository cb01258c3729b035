// cuBLAS and cuBLASLt are loaded on first use, not at program start (kernels/cublas_lazy_cuda.c):
// neither is loaded before a call; the first cuBLASLt call loads cuBLASLt alone and answers what the
// library answers; the first cuBLAS call loads cuBLAS; a library that cannot be loaded makes every
// call fail with the loader's reason (in CUBLAS_CHECK's message too), never a crash; and `memopt
// --help` or a dry run loads neither library (the dynamic loader's own log of the child says
// which files it loaded, so a build that still linked cuBLAS fails here). No GPU needed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/testlib.h"

#ifdef MEMOPT_HAVE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kernels/cublas_lazy.h"
#include "kernels/cuda_check.h"

#define STR_(x) #x
#define STR(x) STR_(x)
static const char *const LT_SONAME = "libcublasLt.so." STR(CUBLAS_VER_MAJOR);
static const char *const BLAS_SONAME = "libcublas.so." STR(CUBLAS_VER_MAJOR);
static const char *const NOT_LOADED = "cuBLAS library not loaded: ";
static const char *const MISSING = "libmemopt_no_such_cublasLt.so";

static int is_loaded(const char *soname) {
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD); // never loads: only finds one already there
    if (h) dlclose(h);
    return h != NULL;
}

static mo_status create_handle(cublasHandle_t *h) {
    CUBLAS_CHECK(cublasCreate(h));
    return MO_OK;
}

// In a child, before anything is loaded: cuBLASLt under a name that does not exist.
static void missing_library_fails_with_the_reason(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        mo_cublas_lazy_use_names(MISSING, NULL);
        CHECK(cublasLtGetVersion() == 0);
        cublasLtHandle_t lt = NULL;
        CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_NOT_INITIALIZED);
        cublasHandle_t h = NULL;
        // cuBLAS needs cuBLASLt: it is refused too, with cuBLASLt's reason
        CHECK(cublasCreate(&h) == CUBLAS_STATUS_NOT_INITIALIZED);
        const char *s = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
        CHECK_MSG(strncmp(s, NOT_LOADED, strlen(NOT_LOADED)) == 0 && strstr(s, MISSING), "status string: %s", s);
        CHECK(strcmp(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED") == 0);
        const char *why = mo_cublas_load_error();
        CHECK_MSG(why && strstr(why, MISSING), "load error: %s", why ? why : "(null)");
        CHECK(create_handle(&h) == MO_ERR_CUBLAS);
        CHECK_MSG(strstr(mo_errmsg(), "cublasCreate") && strstr(mo_errmsg(), MISSING), "CUBLAS_CHECK: %s", mo_errmsg());
        CHECK(!is_loaded(LT_SONAME) && !is_loaded(BLAS_SONAME));
        fflush(stdout);
        _exit(test_failed ? 1 : 0);
    }
    int ws = 0;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
    CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child with no cuBLASLt: status %#x", ws);
}

static void first_calls_load_each_library(void) {
    CHECK_MSG(!is_loaded(LT_SONAME), "%s loaded before any cuBLASLt call", LT_SONAME);
    CHECK_MSG(!is_loaded(BLAS_SONAME), "%s loaded before any cuBLAS call", BLAS_SONAME);
    // cuBLASLt carries cuBLAS's version (the headers define CUBLAS_VERSION only)
    CHECK_EQ_U64(cublasLtGetVersion(), CUBLAS_VERSION);
    CHECK(is_loaded(LT_SONAME));
    CHECK_MSG(!is_loaded(BLAS_SONAME), "a cuBLASLt call loaded %s too", BLAS_SONAME);
    const char *s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    CHECK_MSG(s && s[0] && strncmp(s, NOT_LOADED, strlen(NOT_LOADED)) != 0, "status string: %s", s ? s : "(null)");
    CHECK(strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0);
    CHECK(is_loaded(BLAS_SONAME));
    const char *why = mo_cublas_load_error();
    CHECK_MSG(why == NULL, "load error: %s", why ? why : "");
}

// The files the dynamic loader opened for `memopt ARGS` (LD_DEBUG=files logs each one on stderr)
// contain libcudart (the log works) and not `absent`.
static void memopt_does_not_load(const char *args, const char *absent) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    if (n <= 0) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) slash[1] = '\0';
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "LD_DEBUG=files '%smemopt' %s 2>&1 >/dev/null", exe, args);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f) return;
    int cudart = 0, found = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "file=libcudart.so")) cudart = 1;
        if (strstr(line, absent)) found = 1;
    }
    int rc = pclose(f);
    CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: exit status %#x (memopt built next to this test?)", cmd, rc);
    CHECK_MSG(cudart, "%s: no libcudart in the loader's log", cmd);
    CHECK_MSG(!found, "%s loaded %s", cmd, absent);
}

int main(void) {
    missing_library_fails_with_the_reason();
    first_calls_load_each_library();
    memopt_does_not_load("--help", "libcublas"); // neither library
    // nor a dry run, whose row records the CUDA driver and runtime versions only
    memopt_does_not_load("run --backend dry --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64 "
                         "--steps 1 --warmup 0",
                         "libcublas");
    return test_finish();
}
#else
int main(void) {
    printf("SKIPPED: a build without CUDA (-DMEMOPT_CUDA=OFF) has no cuBLAS to load\n");
    return 77;
}
#endif
