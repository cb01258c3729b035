// One cuBLASLt GEMM, shared by the fp32 (matmul_cuda.c) and 16-bit (matmul_mixed_cuda.c) paths.
// Column-major: D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * C, then the epilogue, C = Cin when set
// (same type and layout as D: a residual added in the GEMM), else D itself; fp32 scale
// and accumulation (TF32 tensor cores when tf32 is set). Workspace c->gemm_ws, stream c->stream.
#ifndef MEMOPT_LT_GEMM_H
#define MEMOPT_LT_GEMM_H

#include <cublasLt.h>
#include <stdint.h>
#include "ctx.h"
#include "lt_table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_lt_gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    void *D; // also C when Cin is NULL: beta then reads D in place (same layout)
    int64_t ldd;
    cudaDataType_t ab_type, d_type;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias; // BIAS / GELU_AUX_BIAS: input (m), type d_type; BGRADB: output (n); DGELU_BGRAD: output (m), type d_type
    void *aux;        // GELU_AUX*: the pre-activation output (m, n), ld aux_ld, type d_type
    int64_t aux_ld;
    int tf32;         // CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F
    const void *Cin;  // beta's input when not D (NULL: D, in place); layout and type of D
} mo_lt_gemm;


// Runs g with the heuristic's best algorithm. *no_algo = 1 (and nothing runs) when cuBLASLt has no
// algorithm for the combination, so the caller may fall back; every other failure is an error.
//
// Plans are cached per context (c->lt_cache, created on first use, freed by mo_ctx_destroy): the
// matmul descriptor, the three layouts and the heuristic's algorithm (or its "no algorithm" answer)
// are kept per plan key, which is every field of g but the data pointers and beta's value: ops, m, n,
// k, lda, ldb, ldd, ab/d types, epilogue, aux_ld, tf32, beta == 0 or not, bias / aux / Cin present or
// not, the alignment class (largest power of two <= 256 dividing the address) of A, B, C, D, bias and aux,
// and the workspace size. A repeated GEMM then costs the per-call attribute sets of the bias and aux
// pointers and cublasLtMatmul itself: no descriptor creation, no heuristic query.
// Not thread-safe: a context is used by one thread at a time (see ctx.h).
mo_status mo_lt_matmul(mo_ctx *c, const mo_lt_gemm *g, int *no_algo);
// The same on another stream and workspace of gemm_ws_bytes (the side stream's, side_stream.h); a plan made
// here (a heuristic query, a tuning run) still runs on c->stream and c->gemm_ws before the launch.
mo_status mo_lt_matmul_on(mo_ctx *c, const mo_lt_gemm *g, int *no_algo, void *stream, void *ws);

// The stored table (mo_lt_table) is used unless c->gemm_table is 0 (MEMOPT_GEMM_TABLE=0); plans whose
// key, device and version match an entry take its algorithm when the heuristic still lists it among its
// top LT_TOP candidates (otherwise, and for every other key, the heuristic's first).
//
// Plan cache statistics of c (for tests): lookups that found a plan, and plans built.
void mo_lt_cache_stats(const mo_ctx *c, long *hits, long *misses);
// Plans built with a stored choice, and plans whose stored choice the heuristic no longer listed.
void mo_lt_table_stats(const mo_ctx *c, long *used, long *missing);
// Destroys c's plan cache (mo_ctx_destroy calls it); c->lt_cache is NULL afterwards.
void mo_lt_cache_destroy(mo_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
