// The cuBLASLt GEMM runner of lt_gemm.h (adapted from karpathy/llm.c, llmc/matmul.cuh), with a
// per-context cache of plans: descriptors, layouts and the heuristic's algorithm per plan key.
//
// Why reusing a plan is correct: cublasLtMatmul reads the descriptors on the host when it enqueues
// (the descriptors can be destroyed right after it returns, which the uncached runner did), so a
// descriptor may be changed for the next call while earlier GEMMs are still running. The only
// attributes that vary between calls of one key are the pointers: BIAS_POINTER (bias input or BGRADB
// output) and EPILOGUE_AUX_POINTER, set on every call. Everything else the descriptors or the
// heuristic's choice depend on is in the key (lt_key below); the algorithm was chosen for the
// alignment class of each pointer, so it is valid for every pointer of the same class.
// Thread safety: none; a context (and so its cache) is used by one thread at a time.
#include "lt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include "cuda_check.h"

#define LT_CACHE_SLOTS 128 // a GPT step has ~20 distinct keys per precision

typedef struct lt_key {
    cublasOperation_t ta, tb;
    int m, n, k;
    int64_t lda, ldb, ldd, aux_ld;
    cudaDataType_t ab_type, d_type;
    cublasLtEpilogue_t epilogue;
    int tf32, beta_zero, has_bias, has_aux, has_c;
    uint32_t al_a, al_b, al_c, al_d, al_bias, al_aux;
    size_t ws_bytes;
} lt_key;

typedef struct lt_plan {
    lt_key key;
    int no_algo; // the heuristic had no algorithm: nothing else is kept
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

struct mo_lt_cache {
    int n;      // slots in use
    int victim; // next slot to replace once all are in use (round robin)
    long hits, misses;
    lt_plan slot[LT_CACHE_SLOTS];
};

// The largest power of two (2..256) dividing the address: the heuristic's default assumes 256-byte
// aligned buffers, and sub-tensors (e.g. a row offset into a larger buffer) can be less aligned.
// NULL counts as 256 (absent pointers are keyed by has_bias / has_aux).
static uint32_t ptr_alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 2 && (v % a) != 0) a >>= 1;
    return a;
}

static lt_key make_key(const mo_ctx *c, const mo_lt_gemm *g) {
    lt_key k;
    k.ta = g->ta;
    k.tb = g->tb;
    k.m = g->m;
    k.n = g->n;
    k.k = g->k;
    k.lda = g->lda;
    k.ldb = g->ldb;
    k.ldd = g->ldd;
    k.has_aux = g->aux != NULL;
    k.aux_ld = k.has_aux ? g->aux_ld : 0;
    k.ab_type = g->ab_type;
    k.d_type = g->d_type;
    k.epilogue = g->epilogue;
    k.tf32 = g->tf32 != 0;
    k.beta_zero = g->beta == 0.0f;
    k.has_bias = g->bias != NULL;
    k.has_c = g->Cin != NULL;
    k.al_c = ptr_alignment(g->Cin);
    k.al_a = ptr_alignment(g->A);
    k.al_b = ptr_alignment(g->B);
    k.al_d = ptr_alignment(g->D);
    k.al_bias = ptr_alignment(g->bias);
    k.al_aux = ptr_alignment(g->aux);
    k.ws_bytes = c->gemm_ws_bytes;
    return k;
}

// Field by field (no memcmp: padding bytes are unspecified).
static int key_eq(const lt_key *x, const lt_key *y) {
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda &&
           x->ldb == y->ldb && x->ldd == y->ldd && x->aux_ld == y->aux_ld && x->ab_type == y->ab_type &&
           x->d_type == y->d_type && x->epilogue == y->epilogue && x->tf32 == y->tf32 &&
           x->beta_zero == y->beta_zero && x->has_bias == y->has_bias && x->has_aux == y->has_aux &&
           x->has_c == y->has_c && x->al_c == y->al_c && x->al_a == y->al_a && x->al_b == y->al_b &&
           x->al_d == y->al_d && x->al_bias == y->al_bias &&
           x->al_aux == y->al_aux && x->ws_bytes == y->ws_bytes;
}

// Destroys whatever p holds; the first destroy error is returned (after destroying the rest).
static cublasStatus_t plan_release(lt_plan *p) {
    cublasStatus_t e[4] = {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS,
                           CUBLAS_STATUS_SUCCESS};
    if (p->d) e[0] = cublasLtMatrixLayoutDestroy(p->d);
    if (p->b) e[1] = cublasLtMatrixLayoutDestroy(p->b);
    if (p->a) e[2] = cublasLtMatrixLayoutDestroy(p->a);
    if (p->op) e[3] = cublasLtMatmulDescDestroy(p->op);
    p->op = NULL;
    p->a = p->b = p->d = NULL;
    for (int i = 0; i < 4; i++)
        if (e[i] != CUBLAS_STATUS_SUCCESS) return e[i];
    return CUBLAS_STATUS_SUCCESS;
}

// Builds p for g (descriptors with g's pointers set, layouts, the heuristic's algorithm) into p, whose
// key is already set; p->no_algo = 1 (descriptors released) when there is no algorithm. On failure the
// caller releases p.
static mo_status plan_build(mo_ctx *c, const mo_lt_gemm *g, lt_plan *p) {
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    const lt_key *k = &p->key;
    cublasComputeType_t compute = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &k->ta, sizeof k->ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &k->tb, sizeof k->tb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &k->epilogue,
                                                sizeof k->epilogue));
    // the pointers of this first call (the heuristic may look at them); reset on every later call
    if (k->has_bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                    sizeof g->bias));
    if (k->has_aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                                    sizeof g->aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->aux_ld,
                                                    sizeof k->aux_ld));
    }

    // layouts of the stored matrices: op(A) is (m, k), so A is stored (m, k) or, transposed, (k, m)
    int tA = k->ta == CUBLAS_OP_T, tB = k->tb == CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, k->ab_type, tA ? k->k : k->m, tA ? k->m : k->k, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, k->ab_type, tB ? k->n : k->k, tB ? k->k : k->n, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, k->d_type, k->m, k->n, k->ldd));

    // the preference is needed by the heuristic only
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = k->ws_bytes;
    cublasStatus_t e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al_a,
                                                 sizeof k->al_a);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al_b,
                                                 sizeof k->al_b);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 k->has_c ? &k->al_c : &k->al_d, sizeof k->al_d);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al_d,
                                                 sizeof k->al_d);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    if (e == CUBLAS_STATUS_SUCCESS)
        hs = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &heur, &found);
    cublasStatus_t pe = cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(e);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0)) {
        CUBLAS_CHECK(pe);
        CUBLAS_CHECK(plan_release(p));
        p->no_algo = 1;
        return MO_OK;
    }
    CUBLAS_CHECK(hs);
    CUBLAS_CHECK(pe);
    CUBLAS_CHECK(heur.state);
    p->algo = heur.algo;
    p->no_algo = 0;
    return MO_OK;
}

// The cached plan for key (built for g on a miss), or an error. A full cache replaces its slots in
// round-robin order.
static mo_status plan_get(mo_ctx *c, const mo_lt_gemm *g, const lt_key *key, lt_plan **out) {
    *out = NULL;
    mo_lt_cache *lc = c->lt_cache;
    if (!lc) {
        lc = calloc(1, sizeof *lc);
        if (!lc) return MO_FAIL(MO_ERR_OOM, "host out of memory for the cuBLASLt plan cache");
        c->lt_cache = lc;
    }
    for (int i = 0; i < lc->n; i++)
        if (key_eq(&lc->slot[i].key, key)) {
            lc->hits++;
            *out = &lc->slot[i];
            return MO_OK;
        }
    lt_plan fresh = {0};
    fresh.key = *key;
    mo_status st = plan_build(c, g, &fresh);
    if (st != MO_OK) {
        plan_release(&fresh); // the build's error is the one reported
        return st;
    }
    lc->misses++;
    lt_plan *slot;
    if (lc->n < LT_CACHE_SLOTS) {
        slot = &lc->slot[lc->n++];
    } else {
        slot = &lc->slot[lc->victim];
        lc->victim = (lc->victim + 1) % LT_CACHE_SLOTS;
        cublasStatus_t e = plan_release(slot);
        *slot = fresh; // the slot holds the new plan whether or not the old one's destroy failed
        CUBLAS_CHECK(e);
        *out = slot;
        return MO_OK;
    }
    *slot = fresh;
    *out = slot;
    return MO_OK;
}

mo_status mo_lt_matmul(mo_ctx *c, const mo_lt_gemm *g, int *no_algo) {
    *no_algo = 0;
    const lt_key key = make_key(c, g);
    lt_plan *p = NULL;
    MO_TRY(plan_get(c, g, &key, &p));
    if (p->no_algo) {
        *no_algo = 1;
        return MO_OK;
    }
    // this call's pointers (a reused descriptor still holds the previous call's)
    if (key.has_bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                    sizeof g->bias));
    if (key.has_aux)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                                    sizeof g->aux));
    const float alpha = 1.0f;
    const void *cin = g->Cin ? g->Cin : g->D;
    CUBLAS_CHECK(cublasLtMatmul((cublasLtHandle_t)c->cublaslt, p->op, &alpha, g->A, p->a, g->B, p->b, &g->beta, cin,
                                p->d, g->D, p->d, &p->algo, c->gemm_ws, c->gemm_ws_bytes, (cudaStream_t)c->stream));
    return MO_OK;
}

void mo_lt_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    *hits = c->lt_cache ? c->lt_cache->hits : 0;
    *misses = c->lt_cache ? c->lt_cache->misses : 0;
}

void mo_lt_cache_destroy(mo_ctx *c) {
    mo_lt_cache *lc = c->lt_cache;
    if (!lc) return;
    for (int i = 0; i < lc->n; i++) plan_release(&lc->slot[i]); // void: teardown has no caller to tell
    free(lc);
    c->lt_cache = NULL;
}
