// cuBLAS and cuBLASLt are loaded on first use (kernels/cublas_lazy_cuda.c), not linked: their static
// initialisation costs ~0.45 s at every start of a program linked with them, and most runs (every
// CLI test, the dry and cpu backends) never call them. The API is cuBLAS's own, from <cublas_v2.h>
// and <cublasLt.h>; this header only says why a library could not be loaded.
#ifndef MEMOPT_CUBLAS_LAZY_H
#define MEMOPT_CUBLAS_LAZY_H

#ifdef __cplusplus
extern "C" {
#endif

// NULL if cuBLAS and cuBLASLt are loaded (loading them now if no call has yet), else why not: the
// dynamic loader's messages. After a failed load every cuBLAS call answers
// CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString "cuBLAS library not loaded: " and this
// text, so CUBLAS_CHECK's message names the reason.
const char *mo_cublas_load_error(void);

// Tests only: load these file names (sonames or paths) instead of libcublasLt.so.N and
// libcublas.so.N. Takes effect only before the first cuBLAS call of the process; NULL keeps the
// default.
void mo_cublas_lazy_use_names(const char *cublaslt, const char *cublas);

#ifdef __cplusplus
}
#endif

#endif
