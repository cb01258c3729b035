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
#include "lib_writes.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_check.h"

#define LT_CACHE_SLOTS 256 // a GPT step has ~20 distinct keys per precision, a fp32 ResNet-50 step ~100
#define LT_TOP 16          // heuristic candidates asked for when a stored choice or tuning needs them
#define LT_TUNE_WARM 2
#define LT_TUNE_REPS 9     // median of
#define LT_TUNE_MIN_GAIN 0.01 // a tuned choice is printed (and used) when at least 1% faster than the first
#define LT_WIDE_IDS 64        // MEMOPT_GEMM_TUNE=2: the algorithm ids asked for (cublasLtMatmulAlgoGetIds)
#define LT_WIDE_PER_ID 8      // and each one's own top configurations (the heuristic limited to that id)
#define LT_WIDE_MAX 160       // candidates timed at most, the heuristic's list first
#define LT_ENUM_MAX 480       // MEMOPT_GEMM_TUNE=3: candidates timed at most, tune 2's first
#define LT_ENUM_TRY 6000      // configurations built and checked at most per GEMM (a strided sample of
#define LT_ENUM_LIST 400000   // at most this many listed)
#define LT_TUNE_BUDGET_MS 60e3 // a GEMM's searched candidates timed for at most this long (wall clock)
#define LT_TUNE_REJECT 1.25f  // a candidate whose first timed run is this much slower than the best so far stops there

typedef mo_lt_key lt_key; // lt_table.h

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
    long table_used, table_missing;
    char device[256]; // cudaDeviceProp.name of the context's device, "" until first needed
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
    k.ta = (int)g->ta;
    k.tb = (int)g->tb;
    k.m = g->m;
    k.n = g->n;
    k.k = g->k;
    k.lda = g->lda;
    k.ldb = g->ldb;
    k.ldd = g->ldd;
    k.has_aux = g->aux != NULL;
    k.aux_ld = k.has_aux ? g->aux_ld : 0;
    k.ab_type = (int)g->ab_type;
    k.d_type = (int)g->d_type;
    k.epilogue = (int)g->epilogue;
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

static int key_eq(const lt_key *x, const lt_key *y) { return mo_lt_key_eq(x, y); }

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

// ---- stored choices (lt_table.h) and tuning ----
static mo_status device_name(mo_ctx *c, const char **name) {
    mo_lt_cache *lc = c->lt_cache;
    if (!lc->device[0]) {
        int dev = 0;
        struct cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        snprintf(lc->device, sizeof lc->device, "%s", prop.name);
    }
    *name = lc->device;
    return MO_OK;
}

// The table's entry for key on this device and cuBLASLt version, or NULL.
static mo_status table_find(mo_ctx *c, const lt_key *key, const mo_lt_choice **out) {
    *out = NULL;
    if (mo_lt_table_n == 0) return MO_OK;
    const char *dev;
    MO_TRY(device_name(c, &dev));
    const long ver = (long)cublasLtGetVersion();
    for (int i = 0; i < mo_lt_table_n; i++) {
        const mo_lt_choice *t = &mo_lt_table[i];
        if (t->cublaslt_version == ver && strcmp(t->device, dev) == 0 && mo_lt_key_eq(&t->key, key)) {
            *out = t;
            return MO_OK;
        }
    }
    return MO_OK;
}

static cublasStatus_t algo_cfg(const cublasLtMatmulAlgo_t *a, mo_lt_algo_cfg *cfg) {
    int32_t id = 0, splitk = 0;
    uint32_t tile = 0, red = 0, swz = 0, custom = 0, stages = 0;
    uint16_t inner = 0, cluster = 0;
    size_t w;
    cublasStatus_t e[9];
    e[0] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    e[1] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    e[2] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    e[3] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
    e[4] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
    e[5] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom, &w);
    e[6] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    e[7] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof inner, &w);
    e[8] = cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                                &w);
    for (int i = 0; i < 9; i++)
        if (e[i] != CUBLAS_STATUS_SUCCESS) return e[i];
    mo_lt_algo_cfg r = {id, (int)tile, splitk, (int)red, (int)swz, (int)custom, (int)stages, inner, cluster};
    *cfg = r;
    return CUBLAS_STATUS_SUCCESS;
}

static int cfg_eq(const mo_lt_algo_cfg *x, const mo_lt_algo_cfg *y) {
    return x->id == y->id && x->tile == y->tile && x->splitk == y->splitk && x->reduction == y->reduction &&
           x->swizzle == y->swizzle && x->custom == y->custom && x->stages == y->stages && x->inner == y->inner &&
           x->cluster == y->cluster;
}

// Whether g may run several times with the same result: D overwritten (beta 0, or beta reading a separate
// Cin) and no operand aliasing D. (A tuning run times an in-place accumulation on a scratch D instead.)
static int lt_d_aliased(const mo_lt_gemm *g) {
    return g->A == g->D || g->B == g->D || (g->bias && g->bias == g->D) || (g->aux && g->aux == g->D);
}
static int lt_reads_own_d(const mo_lt_gemm *g) { return g->beta != 0.0f && (g->Cin == NULL || g->Cin == g->D); }
static int lt_rerunnable(const mo_lt_gemm *g) { return !lt_d_aliased(g) && !lt_reads_own_d(g); }

// Whether g accumulates into D in place (beta != 0, C is D) with no operand aliasing D: a tuning run can
// time it on a scratch copy of D instead (lt_scratch_d), leaving the real D alone.
static int lt_inplace_only(const mo_lt_gemm *g) { return !lt_d_aliased(g) && lt_reads_own_d(g); }

// For timing an in-place accumulation: gt's D (and C) become a zeroed scratch buffer from the allocator of
// D's size and alignment class (*base: what to free). Only a tuning run does this.
static mo_status lt_scratch_d(mo_ctx *c, const lt_key *k, mo_lt_gemm *gt, void **base) {
    const size_t e = k->d_type == CUDA_R_32F ? 4 : 2, off = k->al_d < 256 ? k->al_d : 0;
    const size_t bytes = (size_t)k->ldd * (size_t)k->n * e + off;
    MO_TRY(mo_scratch_alloc(c, bytes, base));
    const cudaError_t ce = cudaMemsetAsync(*base, 0, bytes, (cudaStream_t)c->stream);
    if (ce != cudaSuccess) {
        mo_scratch_free(c, *base); // the memset's error is the one reported
        *base = NULL;
        CUDA_CHECK(ce);
    }
    gt->D = (char *)*base + off;
    gt->Cin = NULL;
    return MO_OK;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Median ms of one candidate on g's own operands (-1 when cuBLASLt refuses it at launch). With bound > 0
// (the best median so far), a first timed run over LT_TUNE_REJECT x bound ends the timing: *ms is that run.
static mo_status lt_time(mo_ctx *c, const mo_lt_gemm *g, const lt_plan *p, const cublasLtMatmulAlgo_t *algo,
                         float bound, float *ms) {
    cudaStream_t st = (cudaStream_t)c->stream;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    const cudaError_t ce1 = cudaEventCreate(&e1);
    if (ce1 != cudaSuccess) {
        cudaEventDestroy(e0);
        CUDA_CHECK(ce1);
    }
    const float alpha = 1.0f;
    const void *cin = g->Cin ? g->Cin : g->D;
    float t[LT_TUNE_REPS];
    *ms = -1.0f;
    mo_status rs = MO_OK;
    for (int r = 0; r < LT_TUNE_WARM + LT_TUNE_REPS; r++) {
        cudaError_t ce = cudaEventRecord(e0, st);
        cublasStatus_t ls = cublasLtMatmul((cublasLtHandle_t)c->cublaslt, p->op, &alpha, g->A, p->a, g->B, p->b,
                                           &g->beta, cin, p->d, g->D, p->d, algo, c->gemm_ws, c->gemm_ws_bytes, st);
        if (ls != CUBLAS_STATUS_SUCCESS) break; // refused: not a candidate
        if (ce == cudaSuccess) ce = cudaEventRecord(e1, st);
        if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
        if (ce == cudaSuccess && r >= LT_TUNE_WARM) ce = cudaEventElapsedTime(&t[r - LT_TUNE_WARM], e0, e1);
        if (ce != cudaSuccess) {
            rs = MO_FAIL(MO_ERR_CUDA, "lt_time: %s", cudaGetErrorString(ce));
            break;
        }
        if (r == LT_TUNE_WARM && bound > 0 && t[0] > LT_TUNE_REJECT * bound) {
            *ms = t[0]; // clearly slower: not worth the other runs
            break;
        }
        if (r == LT_TUNE_WARM + LT_TUNE_REPS - 1) {
            qsort(t, LT_TUNE_REPS, sizeof t[0], cmp_float);
            *ms = t[LT_TUNE_REPS / 2];
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rs;
}

// A candidate of a tuning run: the algorithm and its place in the heuristic's list (-1: found by the
// per-algorithm search of MEMOPT_GEMM_TUNE=2, outside that list).
typedef struct lt_cand {
    cublasLtMatmulAlgo_t algo;
    int rank;
} lt_cand;

// Times the candidates (the heuristic's first is cand[0]); *pick becomes the fastest when it beats the
// first by LT_TUNE_MIN_GAIN, and a table line (or, when the first stays, a comment) goes to stderr.
static mo_status lt_tune(mo_ctx *c, const mo_lt_gemm *g, const lt_plan *p, const lt_cand *cand, int found,
                         int *pick) {
    float t0 = -1.0f, tb = -1.0f;
    int best = 0;
    const double end_ms = mo_host_ms() + LT_TUNE_BUDGET_MS;
    for (int i = 0; i < found; i++) {
        // the searched candidates (rank -1: tune 2's and 3's) only while the GEMM's budget lasts
        if (cand[i].rank < 0 && mo_host_ms() > end_ms) {
            fprintf(stderr, "lt-tune: // m %d n %d k %d: the budget of %.0f s ended the timing at #%d of %d\n",
                    p->key.m, p->key.n, p->key.k, LT_TUNE_BUDGET_MS / 1e3, i, found);
            break;
        }
        float ms = -1.0f;
        MO_TRY(lt_time(c, g, p, &cand[i].algo, i == 0 ? 0.0f : tb, &ms));
        if (i == 0) t0 = ms;
        if (ms > 0 && (tb < 0 || ms < tb)) tb = ms, best = i;
    }
    const lt_key *k = &p->key;
    const char *dev;
    MO_TRY(device_name(c, &dev));
    if (t0 <= 0 && tb > 0) {
        // the first was refused at launch: run the fastest that ran (no table line: there is no first to beat)
        fprintf(stderr, "lt-tune: // m %d n %d k %d ta %d tb %d epilogue %d: the first was refused; #%d of %d used "
                        "(%.4f ms)\n",
                k->m, k->n, k->k, k->ta, k->tb, k->epilogue, best, found, tb);
        *pick = best;
        return MO_OK;
    }
    if (t0 <= 0 || best == 0 || (t0 - tb) / t0 < LT_TUNE_MIN_GAIN) {
        fprintf(stderr, "lt-tune: // m %d n %d k %d ta %d tb %d epilogue %d tf32 %d ab %d d %d: the first stays "
                        "(%.4f ms; best #%d of %d %.4f ms)\n",
                k->m, k->n, k->k, k->ta, k->tb, k->epilogue, k->tf32, k->ab_type, k->d_type, t0, best, found, tb);
        return MO_OK;
    }
    mo_lt_algo_cfg cf;
    CUBLAS_CHECK(algo_cfg(&cand[best].algo, &cf));
    fprintf(stderr,
            "lt-tune: {\"%s\", %ld, {%d, %d, %d, %d, %d, %lld, %lld, %lld, %lld, %d, %d, %d, %d, %d, %d, %d, %d, %u, %u, "
            "%u, %u, %u, %u, %zu}, {%d, %d, %d, %d, %d, %d, %d, %d, %d}, %d, %.4ff, %.4ff}, // %.1f%% faster\n",
            dev, (long)cublasLtGetVersion(), k->ta, k->tb, k->m, k->n, k->k, (long long)k->lda, (long long)k->ldb,
            (long long)k->ldd, (long long)k->aux_ld, k->ab_type, k->d_type, k->epilogue, k->tf32, k->beta_zero,
            k->has_bias, k->has_aux, k->has_c, k->al_a, k->al_b, k->al_c, k->al_d, k->al_bias, k->al_aux, k->ws_bytes,
            cf.id, cf.tile, cf.splitk, cf.reduction, cf.swizzle, cf.custom, cf.stages, cf.inner, cf.cluster,
            cand[best].rank, t0, tb, 100.0 * (t0 - tb) / t0);
    *pick = best;
    return MO_OK;
}

// Algorithm id of the plan's types (A and B ab_type, C and D d_type, fp32 scale) initialised into *a.
static cublasStatus_t algo_init(mo_ctx *c, const lt_key *k, cublasComputeType_t compute, int id,
                                cublasLtMatmulAlgo_t *a) {
    const cudaDataType_t ab = (cudaDataType_t)k->ab_type, d = (cudaDataType_t)k->d_type;
    return cublasLtMatmulAlgoInit((cublasLtHandle_t)c->cublaslt, compute, CUDA_R_32F, ab, ab, d, d, id, a);
}

// The algorithm of a stored configuration built directly (cublasLtMatmulAlgoInit, then every config
// attribute), for a stored choice the heuristic's list does not hold (found by MEMOPT_GEMM_TUNE=2).
// *ok = 0 when cuBLASLt refuses it here (cublasLtMatmulAlgoCheck) or it needs more workspace than the
// plan's budget, or the built algorithm does not read back as the stored configuration.
static mo_status algo_from_cfg(mo_ctx *c, const lt_plan *p, cublasComputeType_t compute, const mo_lt_algo_cfg *cf,
                               cublasLtMatmulAlgo_t *out, int *ok) {
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    const lt_key *k = &p->key;
    *ok = 0;
    cublasLtMatmulAlgo_t a;
    memset(&a, 0, sizeof a);
    cublasStatus_t e = algo_init(c, k, compute, cf->id, &a);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE) return MO_OK; // not here
    CUBLAS_CHECK(e);
    const uint32_t tile = (uint32_t)cf->tile, red = (uint32_t)cf->reduction, swz = (uint32_t)cf->swizzle,
                   custom = (uint32_t)cf->custom, stages = (uint32_t)cf->stages;
    const int32_t splitk = cf->splitk;
    const uint16_t inner = (uint16_t)cf->inner, cluster = (uint16_t)cf->cluster;
    const struct { cublasLtMatmulAlgoConfigAttributes_t attr; const void *v; size_t n; } set[8] = {
        {CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile},
        {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk},
        {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red},
        {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz},
        {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom},
        {CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages},
        {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof inner},
        {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster},
    };
    for (int i = 0; i < 8; i++) {
        e = cublasLtMatmulAlgoConfigSetAttribute(&a, set[i].attr, set[i].v, set[i].n);
        if (e == CUBLAS_STATUS_INVALID_VALUE || e == CUBLAS_STATUS_NOT_SUPPORTED) return MO_OK; // a value it does not take
        CUBLAS_CHECK(e);
    }
    // cublasLtMatmulAlgoCheck does not see the pointers ("will fail if e.g. buffers are not correctly
    // aligned", cublasLt.h): an algorithm needing more alignment than the key's pointers have is refused here,
    // as the heuristic refuses it through the preference's MIN_ALIGNMENT attributes
    static const cublasLtMatmulAlgoCapAttributes_t al_cap[4] = {
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES};
    const uint32_t al_have[4] = {k->al_a, k->al_b, k->has_c ? k->al_c : k->al_d, k->al_d};
    for (int i = 0; i < 4; i++) {
        uint32_t need = 0;
        size_t w = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&a, al_cap[i], &need, sizeof need, &w) == CUBLAS_STATUS_SUCCESS &&
            need > al_have[i])
            return MO_OK;
    }
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    e = cublasLtMatmulAlgoCheck(lt, p->op, p->a, p->b, p->d, p->d, &a, &r);
    if (e != CUBLAS_STATUS_SUCCESS || r.workspaceSize > k->ws_bytes) return MO_OK;
    mo_lt_algo_cfg back;
    CUBLAS_CHECK(algo_cfg(&a, &back));
    if (!cfg_eq(&back, cf)) return MO_OK;
    *out = a;
    *ok = 1;
    return MO_OK;
}

// MEMOPT_GEMM_TUNE=2: beyond the heuristic's list, each algorithm id's own top configurations (the
// heuristic limited to that id: CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID), appended to cand (rank -1) where
// their configuration is not there yet, up to LT_WIDE_MAX in all. pref: the plan's preference
// (workspace budget, alignments), whose search mode this changes.
static mo_status wide_candidates(mo_ctx *c, const lt_plan *p, cublasComputeType_t compute,
                                 cublasLtMatmulPreference_t pref, lt_cand *cand, int *n) {
    cublasLtHandle_t lt = (cublasLtHandle_t)c->cublaslt;
    const lt_key *k = &p->key;
    const cudaDataType_t ab = (cudaDataType_t)k->ab_type, d = (cudaDataType_t)k->d_type;
    int ids[LT_WIDE_IDS], nid = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(lt, compute, CUDA_R_32F, ab, ab, d, d, LT_WIDE_IDS, ids, &nid));
    const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof mode));
    mo_lt_algo_cfg have[LT_WIDE_MAX];
    for (int i = 0; i < *n; i++) CUBLAS_CHECK(algo_cfg(&cand[i].algo, &have[i]));
    for (int j = 0; j < nid && *n < LT_WIDE_MAX; j++) {
        cublasLtMatmulHeuristicResult_t h[LT_WIDE_PER_ID];
        memset(h, 0, sizeof h);
        int bad = 0;
        for (int i = 0; i < LT_WIDE_PER_ID && !bad; i++)
            bad = algo_init(c, k, compute, ids[j], &h[i].algo) != CUBLAS_STATUS_SUCCESS;
        if (bad) continue; // an id the data types do not take
        int f = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, LT_WIDE_PER_ID,
                                                           h, &f);
        if (hs != CUBLAS_STATUS_SUCCESS) continue; // none of this id fits the GEMM
        for (int i = 0; i < f && *n < LT_WIDE_MAX; i++) {
            if (h[i].state != CUBLAS_STATUS_SUCCESS) continue;
            mo_lt_algo_cfg cf;
            CUBLAS_CHECK(algo_cfg(&h[i].algo, &cf));
            int dup = 0;
            for (int q = 0; q < *n && !dup; q++) dup = cfg_eq(&cf, &have[q]);
            if (dup) continue;
            have[*n] = cf;
            cand[*n].algo = h[i].algo;
            cand[*n].rank = -1;
            ++*n;
        }
    }
    return MO_OK;
}

// The ids of an array capability of algorithm a (uint32: CUBLASLT_ALGO_CAP_TILE_IDS, STAGES_IDS), its
// length asked for first (sizeInBytes 0), in *ids (malloc'd; the caller frees); 0 when it has none or
// cannot be read (*ids NULL).
static int cap_ids(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t attr, uint32_t **ids) {
    *ids = NULL;
    size_t need = 0, w = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(a, attr, NULL, 0, &need) != CUBLAS_STATUS_SUCCESS || need == 0 ||
        need % sizeof **ids)
        return 0;
    uint32_t *v = malloc(need);
    if (!v || cublasLtMatmulAlgoCapGetAttribute(a, attr, v, need, &w) != CUBLAS_STATUS_SUCCESS || w > need) {
        free(v);
        return 0;
    }
    *ids = v;
    return (int)(w / sizeof *v); // the bytes written (sizeWritten), not the bytes asked for
}

// MEMOPT_GEMM_TUNE=3: beyond tune 2's candidates, configurations built directly. For each distinct
// rest-of-configuration tuple among the candidates (algorithm id, split-K and reduction, swizzle, custom
// option, inner and cluster shape; again with the swizzle flipped where the id supports it), every tile
// and stage count that id's capabilities list (CUBLASLT_ALGO_CAP_TILE_IDS, STAGES_IDS; the tuple's own
// where it lists none). Of that list a strided sample of at most LT_ENUM_TRY is built and checked
// (algo_from_cfg: cublasLtMatmulAlgoCheck, the workspace budget), so every tuple and tile gets its share;
// those accepted are appended (rank -1), spread evenly over them when more than LT_ENUM_MAX in all would
// be timed. cand has room for LT_ENUM_MAX. A cuBLASLt error other than a refusal ends the building there
// (what was built is kept) and is named in the lt-enum line.
static mo_status enum_candidates(mo_ctx *c, const lt_plan *p, cublasComputeType_t compute, lt_cand *cand, int *n) {
    const lt_key *k = &p->key;
    const int n0 = *n;
    mo_lt_algo_cfg *have = malloc((size_t)(n0 ? n0 : 1) * sizeof *have);
    mo_lt_algo_cfg *tup = malloc((size_t)(2 * n0 + 1) * sizeof *tup); // distinct tuples (tile, stages unset)
    mo_lt_algo_cfg *list = malloc((size_t)LT_ENUM_LIST * sizeof *list);
    lt_cand *pool = malloc((size_t)LT_ENUM_TRY * sizeof *pool);
    if (!have || !tup || !list || !pool) {
        free(have), free(tup), free(list), free(pool);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the GEMM configurations");
    }
    for (int i = 0; i < n0; i++) {
        cublasStatus_t e = algo_cfg(&cand[i].algo, &have[i]);
        if (e != CUBLAS_STATUS_SUCCESS) {
            free(have), free(tup), free(list), free(pool);
            CUBLAS_CHECK(e);
        }
    }
    int nlist = 0, ntup = 0;
    for (int i = 0; i < n0; i++) {
        cublasLtMatmulAlgo_t a;
        memset(&a, 0, sizeof a);
        if (algo_init(c, k, compute, have[i].id, &a) != CUBLAS_STATUS_SUCCESS) continue;
        int32_t swz_ok = 0;
        size_t w = 0;
        const cublasLtMatmulAlgoCapAttributes_t swz_cap = CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT;
        if (cublasLtMatmulAlgoCapGetAttribute(&a, swz_cap, &swz_ok, sizeof swz_ok, &w) != CUBLAS_STATUS_SUCCESS) swz_ok = 0;
        uint32_t *tiles = NULL, *stages = NULL;
        int nt = cap_ids(&a, CUBLASLT_ALGO_CAP_TILE_IDS, &tiles), ns = cap_ids(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, &stages);
        for (int sw = 0; sw < (swz_ok ? 2 : 1); sw++) {
            mo_lt_algo_cfg t = have[i];
            if (sw) t.swizzle = !t.swizzle;
            const int own_tile = t.tile, own_stages = t.stages;
            t.tile = t.stages = 0;
            int dup = 0;
            for (int q = 0; q < ntup && !dup; q++) dup = cfg_eq(&t, &tup[q]);
            if (dup) continue;
            tup[ntup++] = t;
            // every tuple its share of the list (at most 2 n0 tuples): a strided sample of its own tile x
            // stage grid where that is longer, so that the first tuples cannot fill the list alone
            const long NS = ns ? ns : 1, G = (long)(nt ? nt : 1) * NS, quota = LT_ENUM_LIST / (2L * n0);
            for (long x = 0; x < (G < quota ? G : quota) && nlist < LT_ENUM_LIST; x++) {
                const long g = G <= quota ? x : x * G / quota;
                mo_lt_algo_cfg cf = t;
                cf.tile = nt ? (int)tiles[g / NS] : own_tile;
                cf.stages = ns ? (int)stages[g % NS] : own_stages;
                list[nlist++] = cf;
            }
        }
        free(tiles), free(stages);
    }
    // a strided sample of the list (all of it when short enough), less the candidates already there
    int npool = 0, tried = 0;
    const char *stopped = NULL;
    char why[160] = "";
    const int take = nlist < LT_ENUM_TRY ? nlist : LT_ENUM_TRY;
    for (int j = 0; j < take && !stopped; j++) {
        const mo_lt_algo_cfg *cf = &list[nlist <= LT_ENUM_TRY ? j : (int)((long)j * nlist / LT_ENUM_TRY)];
        int dup = 0;
        for (int h = 0; h < n0 && !dup; h++) dup = cfg_eq(cf, &have[h]);
        if (dup) continue;
        tried++;
        int ok = 0;
        // algo_from_cfg returns MO_OK with ok 0 for a configuration cuBLASLt refuses; another error (a
        // broken handle, memory) ends the building here
        if (algo_from_cfg(c, p, compute, cf, &pool[npool].algo, &ok) != MO_OK) {
            snprintf(why, sizeof why, "%s", mo_errmsg());
            mo_clear_error();
            stopped = why;
        } else if (ok) {
            pool[npool].rank = -1;
            npool++;
        }
    }
    // spread evenly over what was accepted
    const int room = LT_ENUM_MAX - n0;
    for (int j = 0; j < room && j < npool; j++) cand[(*n)++] = pool[npool <= room ? j : (int)((long)j * npool / room)];
    fprintf(stderr, "lt-enum: m %d n %d k %d ta %d tb %d epilogue %d: %d tuples, %d configurations listed, %d built, "
                    "%d accepted, %d timed in all%s%s\n",
            k->m, k->n, k->k, k->ta, k->tb, k->epilogue, ntup, nlist, tried, npool, *n,
            stopped ? "; stopped at: " : "", stopped ? stopped : "");
    free(have), free(tup), free(list), free(pool);
    return MO_OK;
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
    // a stored choice for this key on this device, or a tuning run: the top candidates, not only the first
    const mo_lt_choice *want = NULL;
    if (c->gemm_table && e == CUBLAS_STATUS_SUCCESS) {
        mo_status ts = table_find(c, k, &want);
        if (ts != MO_OK) {
            cublasLtMatmulPreferenceDestroy(pref); // the lookup's error is the one reported
            return ts;
        }
    }
    const int tune = c->gemm_tune && (lt_rerunnable(g) || lt_inplace_only(g));
    const int nreq = want || tune ? LT_TOP : 1;
    cublasLtMatmulHeuristicResult_t heur[LT_TOP];
    int found = 0;
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    if (e == CUBLAS_STATUS_SUCCESS)
        hs = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, nreq, heur, &found);
    // An epilogue's type combination cuBLASLt does not take may come back as INVALID_VALUE instead of
    // NOT_SUPPORTED (DGELU_BGRAD with an fp32 bias gradient beside a bf16 D, results/h200-probe-gemm-algos.log):
    // for a fused GEMM that is "no algorithm" too, so its caller's unfused path runs (epilogue_fallbacks).
    const int epi_refused = hs == CUBLAS_STATUS_INVALID_VALUE && k->epilogue != CUBLASLT_EPILOGUE_DEFAULT;
    if (e != CUBLAS_STATUS_SUCCESS || hs == CUBLAS_STATUS_NOT_SUPPORTED || epi_refused ||
        (hs == CUBLAS_STATUS_SUCCESS && found == 0)) {
        cublasStatus_t pe = cublasLtMatmulPreferenceDestroy(pref);
        CUBLAS_CHECK(e);
        CUBLAS_CHECK(pe);
        CUBLAS_CHECK(plan_release(p));
        p->no_algo = 1;
        return MO_OK;
    }
    if (hs != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref); // the heuristic's error is the one reported
        CUBLAS_CHECK(hs);
    }
    if (heur[0].state != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref); // the first's own status is the one reported
        CUBLAS_CHECK(heur[0].state);
    }
    p->algo = heur[0].algo;
    if (want) {
        int hit = 0;
        for (int i = 0; i < found && !hit; i++) {
            mo_lt_algo_cfg cfg;
            if (heur[i].state != CUBLAS_STATUS_SUCCESS) continue;
            const cublasStatus_t cs = algo_cfg(&heur[i].algo, &cfg);
            if (cs != CUBLAS_STATUS_SUCCESS) {
                cublasLtMatmulPreferenceDestroy(pref); // the read's error is the one reported
                CUBLAS_CHECK(cs);
            }
            if (cfg_eq(&cfg, &want->cfg)) p->algo = heur[i].algo, hit = 1;
        }
        if (!hit) { // a choice of the per-algorithm search: built from its configuration
            mo_status as = algo_from_cfg(c, p, compute, &want->cfg, &p->algo, &hit);
            if (as != MO_OK) { cublasLtMatmulPreferenceDestroy(pref); return as; }
            if (!hit) p->algo = heur[0].algo;
        }
        if (hit) c->lt_cache->table_used++;
        else c->lt_cache->table_missing++; // cuBLASLt no longer offers it here: the heuristic's first
    }
    if (tune && (found > 1 || c->gemm_tune >= 2)) {
        lt_cand *cand = malloc(LT_ENUM_MAX * sizeof *cand); // LT_ENUM_MAX >= LT_WIDE_MAX
        if (!cand) {
            cublasLtMatmulPreferenceDestroy(pref);
            return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the GEMM candidates");
        }
        int n = 0;
        for (int i = 0; i < found; i++)
            if (heur[i].state == CUBLAS_STATUS_SUCCESS) cand[n].algo = heur[i].algo, cand[n].rank = i, n++;
        mo_status wst = c->gemm_tune >= 2 ? wide_candidates(c, p, compute, pref, cand, &n) : MO_OK;
        if (wst == MO_OK && c->gemm_tune == 3) wst = enum_candidates(c, p, compute, cand, &n);
        if (wst != MO_OK) { free(cand); cublasLtMatmulPreferenceDestroy(pref); return wst; }
        int pick = 0;
        mo_lt_gemm gt = *g; // an in-place accumulation is timed on a scratch D
        void *scratch = NULL;
        mo_status ts = lt_rerunnable(g) ? MO_OK : lt_scratch_d(c, k, &gt, &scratch);
        if (ts == MO_OK) ts = lt_tune(c, &gt, p, cand, n, &pick);
        mo_status fs = scratch ? mo_scratch_free(c, scratch) : MO_OK;
        if (ts == MO_OK) ts = fs;
        if (ts == MO_OK) p->algo = cand[pick].algo;
        free(cand);
        if (ts != MO_OK) { cublasLtMatmulPreferenceDestroy(pref); return ts; }
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
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

// MEMOPT_MARK_LIB_WRITES (lib_writes.h): what the GEMM writes whole: D (m, n) at ld ldd when beta is 0 or
// its input is apart (Cin), the GELU_AUX* pre-activation (m, n) at aux_ld, BGRADB's bias gradient (n),
// DGELU_BGRAD's (m, D's type).
// D is left alone when it is also an input (A, B, or C in place), which no caller does today.
static mo_status lt_mark(mo_ctx *c, void *stream, const mo_lt_gemm *g) {
    const size_t e = g->d_type == CUDA_R_32F ? 4 : 2;
    const int d_read = g->D == g->A || g->D == g->B || (g->beta != 0.0f && (!g->Cin || g->Cin == g->D));
    if (!d_read) MO_TRY(mo_mark_lib_write_on(c, stream, g->D, (size_t)g->ldd * e, (size_t)g->m * e, (size_t)g->n));
    if (g->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || g->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        MO_TRY(mo_mark_lib_write_on(c, stream, g->aux, (size_t)g->aux_ld * e, (size_t)g->m * e, (size_t)g->n));
    if (g->epilogue == CUBLASLT_EPILOGUE_BGRADB) MO_TRY(mo_mark_lib_write_on(c, stream, g->bias, 0, (size_t)g->n * e, 1));
    if (g->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) MO_TRY(mo_mark_lib_write_on(c, stream, g->bias, 0, (size_t)g->m * e, 1));
    return MO_OK;
}

mo_status mo_lt_matmul(mo_ctx *c, const mo_lt_gemm *g, int *no_algo) {
    return mo_lt_matmul_on(c, g, no_algo, c->stream, c->gemm_ws);
}

mo_status mo_lt_matmul_on(mo_ctx *c, const mo_lt_gemm *g, int *no_algo, void *stream, void *ws) {
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
    if (c->mark_lib_writes) MO_TRY(lt_mark(c, stream, g)); // on the GEMM's own stream, ahead of it
    CUBLAS_CHECK(cublasLtMatmul((cublasLtHandle_t)c->cublaslt, p->op, &alpha, g->A, p->a, g->B, p->b, &g->beta, cin,
                                p->d, g->D, p->d, &p->algo, ws, c->gemm_ws_bytes, (cudaStream_t)stream));
    return MO_OK;
}

void mo_lt_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    *hits = c->lt_cache ? c->lt_cache->hits : 0;
    *misses = c->lt_cache ? c->lt_cache->misses : 0;
}

void mo_lt_table_stats(const mo_ctx *c, long *used, long *missing) {
    *used = c->lt_cache ? c->lt_cache->table_used : 0;
    *missing = c->lt_cache ? c->lt_cache->table_missing : 0;
}

void mo_lt_cache_destroy(mo_ctx *c) {
    mo_lt_cache *lc = c->lt_cache;
    if (!lc) return;
    for (int i = 0; i < lc->n; i++) plan_release(&lc->slot[i]); // void: teardown has no caller to tell
    free(lc);
    c->lt_cache = NULL;
}
