// The cuBLASLt GEMM runner of lt_gemm.h (adapted from karpathy/llm.c, llmc/matmul.cuh).
#include "lt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include "cuda_check.h"

typedef struct lt_objs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
} lt_objs;

// The largest power of two (2..256) dividing the address: the heuristic's default assumes 256-byte
// aligned buffers, and sub-tensors (e.g. a row offset into a larger buffer) can be less aligned.
static uint32_t ptr_alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 2 && (v % a) != 0) a >>= 1;
    return a;
}

// Creates the descriptors into o (so the caller can destroy whatever was made), picks the heuristic's
// best algorithm and runs it. *no_algo = 1 (and nothing runs) when cuBLASLt has no algorithm for this
// combination (the caller may fall back); every other failure is an error.
static mo_status lt_run(mo_ctx *c, const mo_lt_gemm *g, lt_objs *o, int *no_algo) {
    *no_algo = 0;
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    cublasComputeType_t compute = g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
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
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->a, g->ab_type, tA ? g->k : g->m, tA ? g->m : g->k, g->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->b, g->ab_type, tB ? g->n : g->k, tB ? g->k : g->n, g->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o->d, g->d_type, g->m, g->n, g->ldd));

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

// The descriptors' destroy errors are reported if nothing else failed.
mo_status mo_lt_matmul(mo_ctx *c, const mo_lt_gemm *g, int *no_algo) {
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

