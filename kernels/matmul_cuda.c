// GEMMs on cuBLASLt, adapted from karpathy/llm.c (llmc/matmul.cuh, matmul_cublaslt; train_gpt2_fp32.cu,
// matmul_forward_cublaslt / matmul_backward).
//
// Row-major data seen column-major: a row-major (R, K) array is a column-major (K, R) matrix with ld K.
// With that, each GEMM computes the transpose of its row-major result (all matrices column-major):
//   forward   out^T (OC, N)     = op_T(weight^T (C, OC)) @ inp^T (C, N)       (beta 0)
//   dinp      dinp^T (C, N)     = weight^T (C, OC) @ dout^T (OC, N)           (beta 0: overwritten)
//   dweight   dweight^T (C, OC) = inp^T (C, N) @ op_T(dout^T (OC, N))         (beta 1: accumulated)
// Epilogues (cublasLt.h): BIAS adds a vector of length rows(D) = OC; GELU_AUX_BIAS adds the bias, writes
// the pre-activation to EPILOGUE_AUX_POINTER (ld EPILOGUE_AUX_LD, which must be a multiple of 8) and
// GELU(pre-activation) to D; BGRADB on the dweight GEMM writes (overwrites) the column sums of B over the
// GEMM's k = N, i.e. sum over rows of dout, a vector of length cols(D) = OC, to BIAS_POINTER.
//
// Every device byte cuBLASLt uses is c->gemm_ws (from the suite's allocator); all work is on c->stream.
// Determinism: cuBLAS(Lt) gives the same bits run to run for the same problem, handle settings,
// workspace and GPU (its split-K reductions are ordered); nothing here uses atomics.
// Heuristics are queried per call (cuBLASLt caches them internally); a per-shape descriptor cache can
// come later if profiles show host time here.
#include "matmul.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include "cuda_check.h"
#include "ops.h"

// One cuBLASLt GEMM, column-major: D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * D, then the epilogue.
typedef struct lt_gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *D; // also C: beta reads D in place (same layout)
    int64_t ldd;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias; // BIAS / GELU_AUX_BIAS: input (m); BGRADB: output (n)
    void *aux;        // GELU_AUX*: the pre-activation output (m, n), ld aux_ld
    int64_t aux_ld;
} lt_gemm;

typedef struct lt_objs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
} lt_objs;

// The largest power of two (4..256) dividing the address: the heuristic's default assumes 256-byte
// aligned buffers, and sub-tensors (e.g. a row offset into a larger buffer) can be less aligned.
static uint32_t ptr_alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 4 && (v % a) != 0) a >>= 1;
    return a;
}

// Creates the descriptors into o (so the caller can destroy whatever was made), picks the heuristic's
// best algorithm and runs it. *no_algo = 1 (and nothing runs) when cuBLASLt has no algorithm for this
// combination (the caller may fall back); every other failure is an error.
static mo_status lt_run(mo_ctx *c, const lt_gemm *g, lt_objs *o, int *no_algo) {
    *no_algo = 0;
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    cublasComputeType_t compute = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&o->op, compute, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue,
                                                sizeof g->epilogue));
    if (g->bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                    sizeof g->bias));
    if (g->aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                                    sizeof g->aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->aux_ld,
                                                    sizeof g->aux_ld));
    }

    // layouts of the stored matrices: op(A) is (m, k), so A is stored (m, k) or, transposed, (k, m)
    int tA = g->ta == CUBLAS_OP_T, tB = g->tb == CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->a, CUDA_R_32F, tA ? g->k : g->m, tA ? g->m : g->k, g->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->b, CUDA_R_32F, tB ? g->n : g->k, tB ? g->k : g->n, g->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->d, CUDA_R_32F, g->m, g->n, g->ldd));

    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&o->pref));
    size_t ws = c->gemm_ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof ws));
    uint32_t al_a = ptr_alignment(g->A), al_b = ptr_alignment(g->B), al_d = ptr_alignment(g->D);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                      sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                      sizeof al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                      sizeof al_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                      sizeof al_d));

    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(lt, o->op, o->a, o->b, o->d, o->d, o->pref, 1, &heur, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0)) {
        *no_algo = 1;
        return MO_OK;
    }
    CUBLAS_CHECK(hs);
    CUBLAS_CHECK(heur.state);

    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt, o->op, &alpha, g->A, o->a, g->B, o->b, &g->beta, g->D, o->d, g->D, o->d,
                                &heur.algo, c->gemm_ws, c->gemm_ws_bytes, (cudaStream_t)c->stream));
    return MO_OK;
}

// Runs g; the descriptors are destroyed on every path (their destroy errors reported if nothing failed).
static mo_status lt_matmul(mo_ctx *c, const lt_gemm *g, int *no_algo) {
    lt_objs o = {0};
    mo_status st = lt_run(c, g, &o, no_algo);
    cublasStatus_t e[5] = {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS,
                           CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS};
    if (o.pref) e[0] = cublasLtMatmulPreferenceDestroy(o.pref);
    if (o.d) e[1] = cublasLtMatrixLayoutDestroy(o.d);
    if (o.b) e[2] = cublasLtMatrixLayoutDestroy(o.b);
    if (o.a) e[3] = cublasLtMatrixLayoutDestroy(o.a);
    if (o.op) e[4] = cublasLtMatmulDescDestroy(o.op);
    if (st != MO_OK) return st;
    for (int i = 0; i < 5; i++) CUBLAS_CHECK(e[i]);
    return MO_OK;
}

static mo_status no_algo_error(const char *what, const lt_gemm *g) {
    return MO_FAIL(MO_ERR_CUBLAS, "%s: cuBLASLt has no algorithm for m=%d n=%d k=%d epilogue=%d", what, g->m, g->n,
                   g->k, (int)g->epilogue);
}

mo_status matmul_forward_cuda(mo_ctx *c, float *out, float *gelu_out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC) {
    // D = out^T (OC, N): A = weight^T stored (C, OC), op T; B = inp^T (C, N)
    lt_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, 0.0f,
                 bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0};
    int no_algo = 0;
    // GELU fused: pre-activation to aux = out, GELU to D = gelu_out (aux ld must be a multiple of 8)
    if (gelu_out && OC % 8 == 0) {
        lt_gemm fused = g;
        fused.D = gelu_out;
        fused.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        fused.aux = out;
        fused.aux_ld = OC;
        MO_TRY(lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
    }
    // plain GEMM (+ bias); GELU separately when it could not be fused
    MO_TRY(lt_matmul(c, &g, &no_algo));
    if (no_algo) return no_algo_error("matmul_forward", &g);
    if (gelu_out) MO_TRY(mo_gelu_forward(c, gelu_out, out, (size_t)N * OC));
    return MO_OK;
}

// dbias (OC) += ones (N) through dout: a GEMV in cuBLAS's fixed order, for when BGRADB is unavailable.
static mo_status dbias_gemv(mo_ctx *c, float *dbias, const float *dout, float *ones, int N, int OC) {
    cudaStream_t s = (cudaStream_t)c->stream;
    // N ones: one staged host copy (this fallback is not the fast path)
    float *h = malloc((size_t)N * sizeof *h);
    if (!h) return MO_FAIL(MO_ERR_OOM, "matmul_backward: host out of memory (%d floats)", N);
    for (int i = 0; i < N; i++) h[i] = 1.0f;
    cudaError_t e = cudaMemcpyAsync(ones, h, (size_t)N * sizeof *h, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    free(h);
    CUDA_CHECK(e);
    cublasHandle_t hb = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
    const float one = 1.0f;
    // y (OC) = A (OC, N) @ x (N) + y, A = dout seen col-major (OC, N), ld OC
    CUBLAS_CHECK(cublasSgemv(hb, CUBLAS_OP_N, OC, N, &one, dout, OC, ones, 1, &one, dbias, 1));
    return MO_OK;
}

mo_status matmul_backward_cuda(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, void *scratch, int N, int C, int OC) {
    int no_algo = 0;
    if (dinp) {
        // D = dinp^T (C, N) = weight^T (C, OC) @ dout^T (OC, N), overwritten
        lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, 0.0f,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
        MO_TRY(lt_matmul(c, &g, &no_algo));
        if (no_algo) return no_algo_error("matmul_backward (dinp)", &g);
    }
    // D = dweight^T (C, OC) += inp^T (C, N) @ op_T(dout^T (OC, N))
    lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, 1.0f,
                 CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
    if (dbias) {
        // BGRADB overwrites its output: the column sums go to scratch (OC), then dbias += scratch
        float *bgrad = (float *)scratch;
        float *ones = bgrad + OC;
        lt_gemm fused = g;
        fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        fused.bias = bgrad;
        MO_TRY(lt_matmul(c, &fused, &no_algo));
        if (!no_algo) {
            cublasHandle_t hb = (cublasHandle_t)c->cublas;
            CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
            const float one = 1.0f;
            CUBLAS_CHECK(cublasSaxpy(hb, OC, &one, bgrad, 1, dbias, 1)); // elementwise: order-free
            return MO_OK;
        }
        MO_TRY(dbias_gemv(c, dbias, dout, ones, N, OC));
    }
    MO_TRY(lt_matmul(c, &g, &no_algo));
    if (no_algo) return no_algo_error("matmul_backward (dweight)", &g);
    return MO_OK;
}
