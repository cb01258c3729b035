// The stored cuBLASLt choices (lt_table.h) on the GPU: for every line of the table that names this
// device and this cuBLASLt, the GEMM of its key on fresh random operands runs with the stored algorithm
// (the table's use counter must move) and without it (the heuristic's first): both results agree within
// the fp32 / 16-bit GEMM tolerance, and two runs with the stored algorithm give the same bits (an in-place
// accumulation's runs each start from the same D). Lines for
// other devices or versions are counted and skipped (printed).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"
#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "kernels/lt_gemm.h"
#endif

static mo_allocator *ga;
static mo_ctx *gc;
static test_rng rng;
#include "tests/devmem.h"

#ifdef MEMOPT_HAVE_CUDA
static size_t tsize(int t) { return t == CUDA_R_32F ? 4 : 2; }

// n elements of type t, uniform in [-1, 1], at an address of exactly the alignment class al (< 256:
// offset from the allocator's 256-byte alignment); *base is what to free.
static void *dev_operand(int t, size_t n, uint32_t al, void **base) {
    const size_t e = tsize(t), off = al < 256 ? al : 0;
    float *f = malloc(n * sizeof(float));
    unsigned char *h = malloc(n * e);
    test_fill_uniform(&rng, f, n, -1.0f, 1.0f);
    if (t == CUDA_R_32F) memcpy(h, f, n * 4);
    else mo_convert_from_f32(t == CUDA_R_16BF ? MO_BF16 : MO_F16, h, f, n);
    *base = dnew(n * e + off);
    void *p = (char *)*base + off;
    h2d(p, h, n * e);
    free(f);
    free(h);
    return p;
}

static float *host_f32(int t, const void *d, size_t n) {
    unsigned char *h = malloc(n * tsize(t));
    float *f = malloc(n * sizeof(float));
    d2h(h, d, n * tsize(t));
    if (t == CUDA_R_32F) memcpy(f, h, n * 4);
    else mo_convert_to_f32(t == CUDA_R_16BF ? MO_BF16 : MO_F16, f, h, n);
    free(h);
    return f;
}

static void run_line(const mo_lt_choice *t, int line) {
    const mo_lt_key *k = &t->key;
    printf("line %d: m %d n %d k %d ta %d tb %d epilogue %d tf32 %d types %d/%d (stored rank %d, %.4f vs %.4f ms)\n",
           line, k->m, k->n, k->k, k->ta, k->tb, k->epilogue, k->tf32, k->ab_type, k->d_type, t->rank, t->best_ms,
           t->heur_ms);
    void *ba, *bb, *bd, *bbias = NULL, *baux = NULL, *bc = NULL;
    const size_t na = (size_t)k->lda * (k->ta ? k->m : k->k), nb = (size_t)k->ldb * (k->tb ? k->k : k->n);
    const size_t nd = (size_t)k->ldd * k->n;
    mo_lt_gemm g;
    memset(&g, 0, sizeof g);
    g.ta = (cublasOperation_t)k->ta;
    g.tb = (cublasOperation_t)k->tb;
    g.m = k->m; g.n = k->n; g.k = k->k;
    g.lda = k->lda; g.ldb = k->ldb; g.ldd = k->ldd;
    g.ab_type = (cudaDataType_t)k->ab_type;
    g.d_type = (cudaDataType_t)k->d_type;
    g.epilogue = (cublasLtEpilogue_t)k->epilogue;
    g.tf32 = k->tf32;
    g.beta = k->beta_zero ? 0.0f : 1.0f;
    g.A = dev_operand(k->ab_type, na, k->al_a, &ba);
    g.B = dev_operand(k->ab_type, nb, k->al_b, &bb);
    g.D = dev_operand(k->d_type, nd, k->al_d, &bd);
    // bias: an input of m (BIAS kinds) or the gradient output of n (BGRAD kinds); sized for either
    if (k->has_bias) g.bias = dev_operand(k->d_type, (size_t)(k->m > k->n ? k->m : k->n), k->al_bias, &bbias);
    if (k->has_aux) {
        g.aux = dev_operand(k->d_type, (size_t)k->aux_ld * k->n, k->al_aux, &baux);
        g.aux_ld = k->aux_ld;
    }
    if (k->has_c) g.Cin = dev_operand(k->d_type, nd, k->al_c, &bc);
    // an in-place accumulation (beta 1, C is D: the tuning run timed it on a scratch D) starts each run
    // from the same D
    const int inplace = !k->beta_zero && !k->has_c;
    unsigned char *d0 = NULL;
    if (inplace) {
        d0 = malloc(nd * tsize(k->d_type));
        d2h(d0, g.D, nd * tsize(k->d_type));
    }
    float *got[3];
    long used0, miss0, used1, miss1;
    for (int r = 0; r < 3; r++) {
        if (inplace) h2d(g.D, d0, nd * tsize(k->d_type));
        gc->gemm_table = r < 2;
        mo_lt_cache_destroy(gc); // a fresh plan each time: the lookup runs again
        mo_lt_table_stats(gc, &used0, &miss0);
        int no_algo = 0;
        CHECK_OK(mo_lt_matmul(gc, &g, &no_algo));
        CHECK_MSG(!no_algo, "line %d: no algorithm", line);
        mo_lt_table_stats(gc, &used1, &miss1);
        if (r < 2) CHECK_MSG(used1 == 1 && miss1 == 0, "line %d: stored choice used %ld, missing %ld", line, used1, miss1);
        else CHECK_MSG(used1 == 0, "line %d: table off but used", line);
        got[r] = host_f32(k->d_type, g.D, nd);
    }
    gc->gemm_table = 1;
    CHECK_MSG(memcmp(got[0], got[1], nd * sizeof(float)) == 0, "line %d: two runs of the stored algorithm differ",
              line);
    // the heuristic's first as the reference: same math, another summation order
    const double tol = k->d_type != CUDA_R_32F || k->ab_type != CUDA_R_32F ? 2e-2 : k->tf32 ? 5e-3 : 1e-5;
    char label[96];
    snprintf(label, sizeof label, "line %d stored vs first", line);
    test_check_rel(got[0], got[2], nd, tol, __FILE__, __LINE__, label);
    for (int r = 0; r < 3; r++) free(got[r]);
    free(d0);
    dfree(ba); dfree(bb); dfree(bd); dfree(bbias); dfree(baux); dfree(bc);
}
#endif

int main(void) {
    test_require_gpu();
    test_rng_seed(&rng, test_seed_from_time());
#ifdef MEMOPT_HAVE_CUDA
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    if (!ga) return test_finish();
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    if (!gc) return test_finish();
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    const long ver = (long)cublasLtGetVersion();
    int ran = 0, other = 0, thinned = 0;
    // MEMOPT_TEST_REDUCED (the sanitizer pass): every 4th stored choice, starting at a random one, so
    // that repeated passes cover them all
    const int stride = test_is_reduced() ? 4 : 1, start = (int)(test_rng_u64(&rng) % (uint64_t)stride);
    for (int i = 0; i < mo_lt_table_n; i++) {
        const mo_lt_choice *t = &mo_lt_table[i];
        if (strcmp(t->device, prop.name) != 0 || t->cublaslt_version != ver || t->key.ws_bytes != gc->gemm_ws_bytes) {
            other++;
            continue;
        }
        if (i % stride != start) { thinned++; continue; }
        run_line(t, i);
        ran++;
    }
    printf("stored choices: %d for this device (%s, cuBLASLt %ld) run, %d for others skipped, %d left out (MEMOPT_TEST_REDUCED)\n",
           ran, prop.name, ver, other, thinned);
    mo_ctx_destroy(gc);
    mo_allocator_destroy(ga);
#endif
    return test_finish();
}
