// cuBLAS and cuBLASLt, loaded with dlopen on first use instead of linked (see cublas_lazy.h for why).
// This file defines every cuBLAS / cuBLASLt entry point the suite calls, under the symbol names the
// libraries export: the headers' own declarations are in scope, so a parameter list that differs
// from the real prototype does not compile. Each definition forwards through a pointer that dlsym
// filled when the first call of its library loaded it (pthread_once: any thread may be first).
//
// Where a library is found: plain dlopen first (LD_LIBRARY_PATH, this program's RUNPATH, the
// ld.so cache: where a linked library was found), then the directory of the libcudart this program
// loaded, for a toolkit outside the default search path. cuBLASLt is loaded before cuBLAS, which
// needs it: loaded from that second directory, it is what cuBLAS's dependency then resolves to.
//
// A library that cannot be loaded is no crash: its calls answer CUBLAS_STATUS_NOT_INITIALIZED
// (cublasLtGetVersion 0) and cublasGetStatusString "cuBLAS library not loaded: <the loader's
// message>", which CUBLAS_CHECK puts in its error. To add a function: one X line in its table.
#include "cublas_lazy.h"

#include <cublasLt.h>
#include <cublas_v2.h> // maps cublasCreate to cublasCreate_v2 etc.: the tables name the _v2 symbols
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NOT_LOADED CUBLAS_STATUS_NOT_INITIALIZED

// X(return type, exported symbol, (parameters, as declared in the header), (arguments),
//   the answer when the library is not loaded)
#define MO_CUBLASLT_API(X)                                                                              \
    X(size_t, cublasLtGetVersion, (void), (), 0)                                                        \
    X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle), NOT_LOADED)      \
    X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle), NOT_LOADED)       \
    X(cublasStatus_t, cublasLtMatmulDescCreate,                                                         \
      (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType),   \
      (matmulDesc, computeType, scaleType), NOT_LOADED)                                                 \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc),       \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                   \
      (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf,           \
       size_t sizeInBytes),                                                                             \
      (matmulDesc, attr, buf, sizeInBytes), NOT_LOADED)                                                 \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                                       \
      (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld), \
      (matLayout, type, rows, cols, ld), NOT_LOADED)                                                    \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout),     \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref),      \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref),       \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                             \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,     \
       size_t sizeInBytes),                                                                             \
      (pref, attr, buf, sizeInBytes), NOT_LOADED)                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                   \
      (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,  \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,        \
       cublasLtMatmulPreference_t preference, int requestedAlgoCount,                                   \
       cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount),                  \
      (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,          \
       heuristicResultsArray, returnAlgoCount),                                                         \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoConfigGetAttribute,                                             \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,          \
       size_t sizeInBytes, size_t *sizeWritten),                                                        \
      (algo, attr, buf, sizeInBytes, sizeWritten), NOT_LOADED)                                          \
    X(cublasStatus_t, cublasLtMatmulAlgoConfigSetAttribute,                                             \
      (cublasLtMatmulAlgo_t * algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,         \
       size_t sizeInBytes),                                                                             \
      (algo, attr, buf, sizeInBytes), NOT_LOADED)                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoGetIds,                                                         \
      (cublasLtHandle_t lightHandle, cublasComputeType_t computeType, cudaDataType_t scaleType,          \
       cudaDataType_t Atype, cudaDataType_t Btype, cudaDataType_t Ctype, cudaDataType_t Dtype,           \
       int requestedAlgoCount, int algoIdsArray[], int *returnAlgoCount),                               \
      (lightHandle, computeType, scaleType, Atype, Btype, Ctype, Dtype, requestedAlgoCount, algoIdsArray, \
       returnAlgoCount),                                                                                \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoInit,                                                           \
      (cublasLtHandle_t lightHandle, cublasComputeType_t computeType, cudaDataType_t scaleType,          \
       cudaDataType_t Atype, cudaDataType_t Btype, cudaDataType_t Ctype, cudaDataType_t Dtype, int algoId, \
       cublasLtMatmulAlgo_t *algo),                                                                     \
      (lightHandle, computeType, scaleType, Atype, Btype, Ctype, Dtype, algoId, algo), NOT_LOADED)      \
    X(cublasStatus_t, cublasLtMatmulAlgoCapGetAttribute,                                               \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr, void *buf,             \
       size_t sizeInBytes, size_t *sizeWritten),                                                        \
      (algo, attr, buf, sizeInBytes, sizeWritten), NOT_LOADED)                                          \
    X(cublasStatus_t, cublasLtMatmulAlgoCheck,                                                          \
      (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,  \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,        \
       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result),                      \
      (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, algo, result), NOT_LOADED)               \
    X(cublasStatus_t, cublasLtMatmul,                                                                   \
      (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha, const void *A, \
       cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,     \
       const void *C, cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,              \
       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSizeInBytes,                  \
       cudaStream_t stream),                                                                            \
      (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,  \
       workspaceSizeInBytes, stream),                                                                   \
      NOT_LOADED)

#define MO_CUBLAS_API(X)                                                                                \
    X(const char *, cublasGetStatusString, (cublasStatus_t status), (status), not_loaded_text())        \
    X(const char *, cublasGetStatusName, (cublasStatus_t status), (status), status_name(status))        \
    X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle), NOT_LOADED)                 \
    X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle), NOT_LOADED)                  \
    X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId),               \
      (handle, streamId), NOT_LOADED)                                                                   \
    X(cublasStatus_t, cublasSetWorkspace_v2,                                                            \
      (cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes),                            \
      (handle, workspace, workspaceSizeInBytes), NOT_LOADED)                                            \
    X(cublasStatus_t, cublasSetPointerMode_v2, (cublasHandle_t handle, cublasPointerMode_t mode),       \
      (handle, mode), NOT_LOADED)                                                                       \
    X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode),    \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasSaxpy_v2,                                                                   \
      (cublasHandle_t handle, int n, const float *alpha, const float *x, int incx, float *y, int incy), \
      (handle, n, alpha, x, incx, y, incy), NOT_LOADED)                                                 \
    X(cublasStatus_t, cublasSgemv_v2,                                                                   \
      (cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha, const float *A, \
       int lda, const float *x, int incx, const float *beta, float *y, int incy),                       \
      (handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy), NOT_LOADED)                         \
    X(cublasStatus_t, cublasGemmEx,                                                                     \
      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,  \
       const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B, cudaDataType Btype, \
       int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType, \
       cublasGemmAlgo_t algo),                                                                          \
      (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,       \
       computeType, algo),                                                                              \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasGemmBatchedEx,                                                              \
      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,  \
       const void *alpha, const void *const Aarray[], cudaDataType Atype, int lda,                      \
       const void *const Barray[], cudaDataType Btype, int ldb, const void *beta, void *const Carray[], \
       cudaDataType Ctype, int ldc, int batchCount, cublasComputeType_t computeType,                    \
       cublasGemmAlgo_t algo),                                                                          \
      (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray,    \
       Ctype, ldc, batchCount, computeType, algo),                                                      \
      NOT_LOADED)                                                                                       \
    X(cublasStatus_t, cublasGemmStridedBatchedEx,                                                       \
      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,  \
       const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,            \
       const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,    \
       cudaDataType Ctype, int ldc, long long int strideC, int batchCount,                              \
       cublasComputeType_t computeType, cublasGemmAlgo_t algo),                                         \
      (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, \
       Ctype, ldc, strideC, batchCount, computeType, algo),                                             \
      NOT_LOADED)

// The sonames: cuBLASLt ships in the same release as cuBLAS and carries the same major version.
#define MO_STR_(x) #x
#define MO_STR(x) MO_STR_(x)
static const char *lt_name = "libcublasLt.so." MO_STR(CUBLAS_VER_MAJOR);
static const char *blas_name = "libcublas.so." MO_STR(CUBLAS_VER_MAJOR);

// One library: loaded once, then either every pointer of its table is set (ok) or err says why not.
// Written only inside its pthread_once, read only after it: no lock needed.
typedef struct {
    pthread_once_t once;
    int ok;
    char err[1024];
} lazy_lib;
static lazy_lib lt = {PTHREAD_ONCE_INIT, 0, ""}, blas = {PTHREAD_ONCE_INIT, 0, ""};
static char blas_not_loaded[sizeof blas.err + 64]; // cublasGetStatusString's answer when not loaded

#define MO_LAZY_POINTER(ret, name, params, args, fallback) static ret(*p_##name) params;
MO_CUBLASLT_API(MO_LAZY_POINTER)
MO_CUBLAS_API(MO_LAZY_POINTER)

// The directory of the libcudart this program loaded (empty if it has none, e.g. linked statically).
static void cudart_dir(char dir[PATH_MAX]) {
    dir[0] = '\0';
    char soname[32];
    snprintf(soname, sizeof soname, "libcudart.so.%d", CUDART_VERSION / 1000);
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD); // only if already loaded: a new reference
    if (!h) return;
    if (dlinfo(h, RTLD_DI_ORIGIN, dir) != 0) dir[0] = '\0';
    dlclose(h); // gives back the reference RTLD_NOLOAD took
}

static const char *dl_message(void) {
    const char *e = dlerror();
    return e ? e : "unknown dynamic loader error";
}

// dlopen soname by the search order above; on failure err holds each attempt's message.
static void *open_lib(const char *soname, char *err, size_t n) {
    // RTLD_LOCAL: the symbols stay out of the global scope, as nothing else looks them up by name.
    void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (h) return h;
    int len = snprintf(err, n, "%s", dl_message());
    char dir[PATH_MAX];
    cudart_dir(dir);
    if (!dir[0] || strchr(soname, '/')) return NULL;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, soname);
    h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        err[0] = '\0';
        return h;
    }
    if (len >= 0 && (size_t)len < n) snprintf(err + len, n - (size_t)len, "; %s", dl_message());
    return NULL;
}

// Every symbol of the table, or none: a library without one of them is refused as a whole.
#define MO_LAZY_RESOLVE(ret, name, params, args, fallback)                                \
    if (!(p_##name = (ret(*) params)dlsym(h, #name))) {                                   \
        snprintf(l->err, sizeof l->err, "%s: %s", soname, dl_message());                 \
        return;                                                                           \
    }

static void load_lt(void) {
    lazy_lib *l = &lt;
    const char *soname = lt_name;
    void *h = open_lib(soname, l->err, sizeof l->err);
    if (!h) return;
    MO_CUBLASLT_API(MO_LAZY_RESOLVE)
    l->ok = 1;
}

static int lt_loaded(void) {
    pthread_once(&lt.once, load_lt);
    return lt.ok;
}

static void load_blas_symbols(void) {
    lazy_lib *l = &blas;
    const char *soname = blas_name;
    if (!lt_loaded()) { // cuBLAS needs cuBLASLt: its message is the reason
        snprintf(l->err, sizeof l->err, "%s", lt.err);
        return;
    }
    void *h = open_lib(soname, l->err, sizeof l->err);
    if (!h) return;
    MO_CUBLAS_API(MO_LAZY_RESOLVE)
    l->ok = 1;
}

static void load_blas(void) {
    load_blas_symbols();
    if (!blas.ok) snprintf(blas_not_loaded, sizeof blas_not_loaded, "cuBLAS library not loaded: %s", blas.err);
}

static int blas_loaded(void) {
    pthread_once(&blas.once, load_blas);
    return blas.ok;
}

static const char *not_loaded_text(void) { return blas_not_loaded; }

// cublasGetStatusName without the library: the names of cublas_api.h's statuses.
static const char *status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

#define MO_LAZY_DEFINE_LT(ret, name, params, args, fallback) \
    ret name params { return lt_loaded() ? p_##name args : (fallback); }
#define MO_LAZY_DEFINE_BLAS(ret, name, params, args, fallback) \
    ret name params { return blas_loaded() ? p_##name args : (fallback); }
MO_CUBLASLT_API(MO_LAZY_DEFINE_LT)
MO_CUBLAS_API(MO_LAZY_DEFINE_BLAS)

const char *mo_cublas_load_error(void) { return blas_loaded() ? NULL : blas.err; }

void mo_cublas_lazy_use_names(const char *cublaslt, const char *cublas) {
    if (cublaslt) lt_name = cublaslt;
    if (cublas) blas_name = cublas;
}
