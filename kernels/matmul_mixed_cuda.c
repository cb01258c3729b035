// Mixed-precision GEMMs on cuBLASLt: A/B (and D for the forward and dinp) in CUDA_R_16F / CUDA_R_16BF,
// CUBLAS_COMPUTE_32F (fp32 accumulation on the tensor cores), scale type fp32. The same column-major
// view of row-major data as matmul_cuda.c (see there):
//   forward   out^T (OC, N)     = op_T(weight^T (C, OC)) @ inp^T (C, N)   D dt, beta 0
//   dinp      dinp^T (C, N)     = weight^T (C, OC) @ dout^T (OC, N)       D dt, beta 0
//   dweight   dweight^T (C, OC) = inp^T (C, N) @ op_T(dout^T (OC, N))     C = D fp32, beta 1
// Type combinations (cuBLASLt docs, cublasLtMatmul's table for CUBLAS_COMPUTE_32F / scale CUDA_R_32F):
// A/B CUDA_R_16BF with C/D CUDA_R_16BF or CUDA_R_32F, and A/B CUDA_R_16F with C/D CUDA_R_16F or
// CUDA_R_32F, are listed; so the dweight GEMM accumulates straight into the fp32 gradient with beta 1.
// Should the heuristic return no algorithm for a shape (odd leading dimensions), each GEMM falls back
// to cublasGemmEx with the same types (listed for cublasGemmEx too), the bias then added by a kernel
// - no scratch either way.
// Epilogues: BIAS / GELU_AUX_BIAS with the bias and aux in the type of D (their default data types);
// GELU from the fp32 accumulator, the pre-activation stored rounded to dt in aux = out.
// dbias: not BGRADB (its output type would follow D's), but a fixed-order fp32 column reduction of the
// 16-bit dout (matmul_mixed.cu). Everything on c->stream, the workspace is c->gemm_ws.
#include "matmul_mixed.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include "cuda_check.h"

typedef struct mx_gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    void *D; // also C (beta reads D in place)
    int64_t ldd;
    cudaDataType_t ab_type, d_type;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias; // input (m), type d_type
    void *aux;        // GELU_AUX*: the pre-activation (m, n), type d_type, ld aux_ld
    int64_t aux_ld;
} mx_gemm;

typedef struct mx_objs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
} mx_objs;

static cudaDataType_t mx_cuda_type(mo_dtype dt) { return dt == MO_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

// Largest power of two (2..256) dividing the address.
static uint32_t mx_alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 2 && (v % a) != 0) a >>= 1;
    return a;
}

static mo_status mx_run(mo_ctx *c, const mx_gemm *g, mx_objs *o, int *no_algo) {
    *no_algo = 0;
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&o->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
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
    const int tA = g->ta == CUBLAS_OP_T, tB = g->tb == CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->a, g->ab_type, tA ? g->k : g->m, tA ? g->m : g->k, g->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->b, g->ab_type, tB ? g->n : g->k, tB ? g->k : g->n, g->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->d, g->d_type, g->m, g->n, g->ldd));

    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&o->pref));
    size_t ws = c->gemm_ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof ws));
    uint32_t al_a = mx_alignment(g->A), al_b = mx_alignment(g->B), al_d = mx_alignment(g->D);
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

static mo_status mx_matmul(mo_ctx *c, const mx_gemm *g, int *no_algo) {
    mx_objs o = {0};
    mo_status st = mx_run(c, g, &o, no_algo);
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

// Fallback when cuBLASLt's heuristic has no algorithm (e.g. odd leading dimensions in 16 bits), on
// c->cublas (already bound to c->stream and to c->gemm_ws by mo_ctx_create; not re-set here, since
// cublasSetStream would reset the workspace to cuBLAS's own pool):
// cublasGemmEx with the same types and compute type, column-major D (m, n) = op(A) op(B) + beta D.
static mo_status mx_gemm_ex(mo_ctx *c, const mx_gemm *g) {
    cublasHandle_t hb = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
    CUBLAS_CHECK(cublasSetMathMode(hb, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(hb, g->ta, g->tb, g->m, g->n, g->k, &one, g->A, g->ab_type, (int)g->lda, g->B,
                              g->ab_type, (int)g->ldb, &g->beta, g->D, g->d_type, (int)g->ldd, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}

mo_status matmul_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                    const void *weight, const void *bias, int N, int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    mx_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, t, t, 0.0f,
                 bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0};
    int no_algo = 0;
    if (gelu_out && OC % 8 == 0) {
        mx_gemm fused = g;
        fused.D = gelu_out;
        fused.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        fused.aux = out;
        fused.aux_ld = OC;
        MO_TRY(mx_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
    }
    MO_TRY(mx_matmul(c, &g, &no_algo));
    if (no_algo) {
        // no Lt algorithm even without GELU: plain GEMM, then the bias added (one more rounding)
        mx_gemm plain = g;
        plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        plain.bias = NULL;
        MO_TRY(mx_gemm_ex(c, &plain));
        if (bias) MO_TRY(matmul_mixed_bias_cuda(c, dt, out, bias, N, OC));
    }
    // unfused GELU reads the pre-activation already rounded to dt (one more rounding than the epilogue)
    if (gelu_out) MO_TRY(matmul_mixed_gelu_cuda(c, dt, gelu_out, out, (size_t)N * OC));
    return MO_OK;
}

mo_status matmul_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                     const void *dout, const void *inp, const void *weight, void *scratch, int N,
                                     int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    int no_algo = 0;
    if (dinp) {
        mx_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, t, t, 0.0f,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
        MO_TRY(mx_matmul(c, &g, &no_algo));
        if (no_algo) MO_TRY(mx_gemm_ex(c, &g));
    }
    mx_gemm g = {CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, t, CUDA_R_32F, 1.0f,
                 CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
    MO_TRY(mx_matmul(c, &g, &no_algo));
    if (no_algo) MO_TRY(mx_gemm_ex(c, &g));
    if (dbias) MO_TRY(matmul_mixed_dbias_cuda(c, dt, dbias, dout, (float *)scratch, N, OC));
    return MO_OK;
}
