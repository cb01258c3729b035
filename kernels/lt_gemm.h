// One cuBLASLt GEMM, shared by the fp32 (matmul_cuda.c) and 16-bit (matmul_mixed_cuda.c) paths.
// Column-major: D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * D, then the epilogue; fp32 scale
// and accumulation (TF32 tensor cores when tf32 is set). Workspace c->gemm_ws, stream c->stream.
#ifndef MEMOPT_LT_GEMM_H
#define MEMOPT_LT_GEMM_H

#include <cublasLt.h>
#include <stdint.h>
#include "ctx.h"

typedef struct mo_lt_gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    void *D; // also C: beta reads D in place (same layout)
    int64_t ldd;
    cudaDataType_t ab_type, d_type;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias; // BIAS / GELU_AUX_BIAS: input (m), type d_type; BGRADB: output (n)
    void *aux;        // GELU_AUX*: the pre-activation output (m, n), ld aux_ld, type d_type
    int64_t aux_ld;
    int tf32;         // CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F
} mo_lt_gemm;

// Runs g with the heuristic's best algorithm; the descriptors are destroyed on every path.
// *no_algo = 1 (and nothing runs) when cuBLASLt has no algorithm for the combination, so the caller
// may fall back; every other failure is an error.
mo_status mo_lt_matmul(mo_ctx *c, const mo_lt_gemm *g, int *no_algo);

#endif
