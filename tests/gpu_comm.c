// The communicators on the GPU.
//   local kind, W = 2 and 4 ranks on the one GPU, each rank a thread with its own allocator (caching,
//   async, raw, caching: stream-ordered frees of every kind) and its own mo_ctx (stream): all-reduce
//   equal bit for bit to the host's rank-ordered fp32 sum ((x0 + x1) + x2) + x3 on every rank (aligned
//   buffers take the float4 kernel, a buffer offset by one float the scalar one), repeated runs give the
//   same bits; all-gather and reduce-scatter contents (out of place and in place); send/recv and
//   sendrecv rings; barrier; byte accounting against the formulas; no device memory taken by the comm.
//   A pipelined stress: 8 all-reduces back to back with no host sync, each rank overwriting its buffer
//   with the next input right after the call and one rank (a different one each time) slowed by a
//   large copy first, so a missing event wait would let a fast rank overwrite data a slow rank still
//   reads.
//   nccl kind, W = 1: all-reduce (NCCL's own and the ordered path) is the identity, all-gather and
//   reduce-scatter copies, barrier, stats measured = 1; two ranks on one GPU are refused on both ranks
//   (no hang); with 2 or more GPUs (W = min(GPUs, 8)), ordered all-reduce and reduce-scatter equal the
//   host's rank-ordered sums bit for bit (also across several 4 MiB segments), NCCL's own all-reduce
//   is identical on every rank and within 1e-6 of it, all-gather and a sendrecv ring exact.
// Random data from test_rng (seed printed); exits 77 without a GPU.
#include "tests/testlib.h"
#ifndef MEMOPT_HAVE_CUDA
int main(void) {
    test_require_gpu(); // a build without CUDA: prints the reason and exits 77 (skipped)
    return 77;
}
#else
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/ctx.h"
#include "strategies/alloc.h"
#include "strategies/comm.h"
#include "tests/testlib.h"

static uint64_t seed;
static pthread_mutex_t tl_mu = PTHREAD_MUTEX_INITIALIZER;

#define TCHECK(cond, ...)               \
    do {                                \
        int tc_ok_ = (cond);            \
        pthread_mutex_lock(&tl_mu);     \
        CHECK_MSG(tc_ok_, __VA_ARGS__); \
        pthread_mutex_unlock(&tl_mu);   \
    } while (0)
#define TCHECK_OK(expr)             \
    do {                            \
        mo_status tc_st_ = (expr);  \
        pthread_mutex_lock(&tl_mu); \
        CHECK_OK(tc_st_);           \
        pthread_mutex_unlock(&tl_mu); \
    } while (0)

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static float *fnew(size_t n) { return xmalloc(n * sizeof(float)); }

static void gen(float *x, size_t n, int test, int W, int r, int salt) {
    test_rng g;
    test_rng_seed(&g, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(1 + test * 1000003 + W * 1009 + r * 31 + salt * 7919)));
    for (size_t i = 0; i < n; i++) {
        float u = test_rng_uniform(&g, -1, 1);
        int k = (int)(test_rng_u64(&g) % 25) - 12;
        x[i] = ldexpf(u, k);
    }
}

// Rank-ordered host sum of slice [off, off + n) of every rank's input of length total.
static void ordered_ref(float *ref, size_t n, int test, int W, int salt, size_t total, size_t off) {
    float *x = fnew(total);
    for (int p = 0; p < W; p++) {
        gen(x, total, test, W, p, salt);
        for (size_t i = 0; i < n; i++) ref[i] = p == 0 ? x[off + i] : ref[i] + x[off + i];
    }
    free(x);
}

static size_t mismatches(const float *a, const float *b, size_t n) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return m;
}

// ---------------------------------------------------------------------------------------------

typedef struct rank_env rank_env;
typedef void (*rank_fn)(rank_env *e);
struct rank_env {
    mo_comm_kind kind;
    int W, r, device;
    mo_alloc_kind akind;
    mo_comm_group *g;
    mo_allocator *alloc;
    mo_ctx *ctx;
    mo_comm *c;
    mo_status join;
    char join_msg[512];
    rank_fn fn;
    uint64_t ops, bytes; // expected accounting
    float *result;       // host copy of a result, for comparisons across ranks (nccl multi)
};

static float *dnew(rank_env *e, size_t n) {
    void *p = NULL;
    mo_status st = mo_alloc(e->alloc, n * sizeof(float) + 64, MO_CAT_ACTIVATION, &p);
    TCHECK_OK(st);
    if (st != MO_OK) exit(test_finish());
    return p;
}
static void dfree(rank_env *e, void *p) { TCHECK_OK(mo_free(e->alloc, p)); }
static void up(rank_env *e, void *d, const float *h, size_t n) { TCHECK_OK(mo_memcpy_h2d(e->ctx, d, h, n * sizeof(float))); }
static void down(rank_env *e, float *h, const void *d, size_t n) { TCHECK_OK(mo_memcpy_d2h(e->ctx, h, d, n * sizeof(float))); }
static void poison_dev(rank_env *e, float *d, size_t n) {
    float *h = fnew(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    up(e, d, h, n);
    free(h);
}

static void *rank_main(void *arg) {
    rank_env *e = arg;
    if (cudaSetDevice(e->device) != cudaSuccess) {
        TCHECK(0, "cudaSetDevice(%d) failed", e->device);
        return NULL;
    }
    TCHECK_OK(mo_allocator_create(&e->alloc, e->akind, MO_BACKEND_CUDA, 0, NULL));
    if (!e->alloc) return NULL;
    TCHECK_OK(mo_ctx_create(&e->ctx, MO_BACKEND_CUDA, e->alloc));
    if (!e->ctx) return NULL;
    e->join = mo_comm_rank(e->g, e->r, e->ctx, &e->c);
    snprintf(e->join_msg, sizeof e->join_msg, "%s", e->join == MO_OK ? "" : mo_errmsg());
    if (e->c && e->fn) e->fn(e);
    mo_comm_destroy(e->c);
    mo_ctx_destroy(e->ctx);
    mo_allocator_destroy(e->alloc);
    return NULL;
}

// W threads; rank r on device devices[r] (NULL: all on device 0); fn may be NULL (join only).
static void run_ranks(mo_comm_kind kind, mo_comm_group *g, int W, const int *devices, rank_fn fn, rank_env *env) {
    static const mo_alloc_kind kinds[3] = {MO_ALLOC_CACHING, MO_ALLOC_ASYNC, MO_ALLOC_RAW};
    pthread_t th[MO_COMM_MAX_WORLD];
    for (int r = 0; r < W; r++) {
        memset(&env[r], 0, sizeof env[r]);
        env[r].kind = kind;
        env[r].W = W;
        env[r].r = r;
        env[r].device = devices ? devices[r] : 0;
        // nccl: caching only (a raw cudaFree synchronizes the device under running NCCL kernels)
        env[r].akind = kind == MO_COMM_LOCAL ? kinds[r % 3] : MO_ALLOC_CACHING;
        env[r].g = g;
        env[r].fn = fn;
        if (pthread_create(&th[r], NULL, rank_main, &env[r]) != 0) { fprintf(stderr, "pthread_create failed\n"); exit(1); }
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
}

// ---------------------------------------------------------------------------------------------
// local kind on one GPU

enum { T_AR = 1, T_AG, T_RS, T_P2P, T_PIPE, T_NCCL };
static const size_t sizes[] = {1, 65, 4099, ((size_t)1 << 20) + 37, (size_t)3 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void account(rank_env *e, mo_comm_op op, uint64_t payload) {
    e->ops++;
    uint64_t W = (uint64_t)e->W;
    switch (op) {
    case MO_COMM_OP_ALLREDUCE: e->bytes += 2 * (W - 1) * payload / W; break;
    case MO_COMM_OP_ALLGATHER:
    case MO_COMM_OP_REDUCE_SCATTER: e->bytes += (W - 1) * payload / W; break;
    case MO_COMM_OP_BARRIER: break;
    default: e->bytes += payload; break;
    }
}

static void local_collectives(rank_env *e) {
    int W = e->W, r = e->r;
    mo_comm *c = e->c;
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = sizes[si];
        int salt = (int)si;
        float *h = fnew(n), *got = fnew(n), *ref = fnew(n);
        ordered_ref(ref, n, T_AR, W, salt, n, 0);
        float *d = dnew(e, n + 1);
        for (int shift = 0; shift < 2; shift++) { // aligned (float4 kernel), then offset by one float (scalar)
            for (int rep = 0; rep < 2; rep++) {   // and the same again: the same bits every run
                gen(h, n, T_AR, W, r, salt);
                up(e, d + shift, h, n);
                TCHECK_OK(mo_comm_allreduce_sum(c, d + shift, n));
                account(e, MO_COMM_OP_ALLREDUCE, n * 4);
                down(e, got, d + shift, n);
                size_t bad = mismatches(got, ref, n);
                TCHECK(bad == 0, "local W=%d rank %d n=%zu shift %d run %d: all-reduce differs from the rank-ordered sum in %zu elements",
                       W, r, n, shift, rep, bad);
            }
        }
        // all-gather out of place, then in place
        float *recv = dnew(e, (size_t)W * n), *hr = fnew((size_t)W * n), *x = fnew(n);
        gen(h, n, T_AG, W, r, salt);
        up(e, d, h, n);
        poison_dev(e, recv, (size_t)W * n);
        TCHECK_OK(mo_comm_allgather(c, d, recv, n));
        down(e, hr, recv, (size_t)W * n);
        size_t bad = 0;
        for (int p = 0; p < W; p++) {
            gen(x, n, T_AG, W, p, salt);
            bad += mismatches(hr + (size_t)p * n, x, n);
        }
        TCHECK(bad == 0, "local W=%d rank %d n=%zu: all-gather, %zu wrong", W, r, n, bad);
        poison_dev(e, recv, (size_t)W * n);
        up(e, recv + (size_t)r * n, h, n);
        TCHECK_OK(mo_comm_allgather(c, recv + (size_t)r * n, recv, n));
        down(e, hr, recv, (size_t)W * n);
        bad = 0;
        for (int p = 0; p < W; p++) {
            gen(x, n, T_AG, W, p, salt);
            bad += mismatches(hr + (size_t)p * n, x, n);
        }
        TCHECK(bad == 0, "local W=%d rank %d n=%zu: all-gather in place, %zu wrong", W, r, n, bad);
        account(e, MO_COMM_OP_ALLGATHER, (uint64_t)W * n * 4);
        account(e, MO_COMM_OP_ALLGATHER, (uint64_t)W * n * 4);
        // reduce-scatter out of place, then in place (recv = send + r*n)
        gen(hr, (size_t)W * n, T_RS, W, r, salt);
        up(e, recv, hr, (size_t)W * n);
        poison_dev(e, d, n);
        TCHECK_OK(mo_comm_reduce_scatter_sum(c, recv, d, n));
        ordered_ref(ref, n, T_RS, W, salt, (size_t)W * n, (size_t)r * n);
        down(e, got, d, n);
        bad = mismatches(got, ref, n);
        TCHECK(bad == 0, "local W=%d rank %d n=%zu: reduce-scatter, %zu wrong", W, r, n, bad);
        TCHECK_OK(mo_comm_reduce_scatter_sum(c, recv, recv + (size_t)r * n, n));
        down(e, got, recv + (size_t)r * n, n);
        bad = mismatches(got, ref, n);
        TCHECK(bad == 0, "local W=%d rank %d n=%zu: reduce-scatter in place, %zu wrong", W, r, n, bad);
        account(e, MO_COMM_OP_REDUCE_SCATTER, (uint64_t)W * n * 4);
        account(e, MO_COMM_OP_REDUCE_SCATTER, (uint64_t)W * n * 4);
        dfree(e, recv);
        dfree(e, d);
        free(h); free(got); free(ref); free(hr); free(x);
    }
}

static void local_p2p(rank_env *e) {
    int W = e->W, r = e->r, right = (r + 1) % W, left = (r + W - 1) % W;
    size_t n = 100003;
    float *mine = fnew(n), *want = fnew(n), *got = fnew(n);
    float *ds = dnew(e, n), *dr = dnew(e, n);
    gen(mine, n, T_P2P, W, r, 0);
    gen(want, n, T_P2P, W, left, 0);
    up(e, ds, mine, n);
    poison_dev(e, dr, n);
    if (r % 2 == 0) {
        TCHECK_OK(mo_comm_send(e->c, ds, n * 4, right));
        TCHECK_OK(mo_comm_recv(e->c, dr, n * 4, left));
    } else {
        TCHECK_OK(mo_comm_recv(e->c, dr, n * 4, left));
        TCHECK_OK(mo_comm_send(e->c, ds, n * 4, right));
    }
    account(e, MO_COMM_OP_SEND, n * 4);
    account(e, MO_COMM_OP_RECV, n * 4);
    down(e, got, dr, n);
    TCHECK(mismatches(got, want, n) == 0, "local W=%d rank %d: send/recv ring contents", W, r);
    poison_dev(e, dr, n);
    TCHECK_OK(mo_comm_sendrecv(e->c, ds, n * 4, right, dr, n * 4, left));
    e->ops++;
    e->bytes += 2 * n * 4;
    down(e, got, dr, n);
    TCHECK(mismatches(got, want, n) == 0, "local W=%d rank %d: sendrecv ring contents", W, r);
    TCHECK_OK(mo_comm_barrier(e->c));
    account(e, MO_COMM_OP_BARRIER, 0);
    dfree(e, ds);
    dfree(e, dr);
    free(mine); free(want); free(got);
}

// Back to back, nothing waits on the host between the ops.
#define PIPE_K 8
static void local_pipeline(rank_env *e) {
    int W = e->W, r = e->r;
    size_t n = ((size_t)1 << 20) + 4097, big = (size_t)64 << 20; // 256 MiB of delay copy
    float *stage[PIPE_K], *out[PIPE_K], *h = fnew(n), *ref = fnew(n);
    for (int j = 0; j < PIPE_K; j++) {
        stage[j] = dnew(e, n);
        out[j] = dnew(e, n);
        gen(h, n, T_PIPE, W, r, j);
        up(e, stage[j], h, n);
    }
    float *buf = dnew(e, n), *slow_a = dnew(e, big), *slow_b = dnew(e, big);
    TCHECK_OK(mo_memset_zero(e->ctx, slow_a, big * sizeof(float)));
    TCHECK_OK(mo_comm_barrier(e->c)); // everyone staged
    account(e, MO_COMM_OP_BARRIER, 0);
    for (int j = 0; j < PIPE_K; j++) {
        if (j % W == r) TCHECK_OK(mo_memcpy_d2d(e->ctx, slow_b, slow_a, big * sizeof(float)));
        TCHECK_OK(mo_memcpy_d2d(e->ctx, buf, stage[j], n * sizeof(float))); // overwrite at once
        TCHECK_OK(mo_comm_allreduce_sum(e->c, buf, n));
        account(e, MO_COMM_OP_ALLREDUCE, n * 4);
        TCHECK_OK(mo_memcpy_d2d(e->ctx, out[j], buf, n * sizeof(float)));
    }
    TCHECK_OK(mo_ctx_sync(e->ctx));
    for (int j = 0; j < PIPE_K; j++) {
        ordered_ref(ref, n, T_PIPE, W, j, n, 0);
        down(e, h, out[j], n);
        size_t bad = mismatches(h, ref, n);
        TCHECK(bad == 0, "local W=%d rank %d: pipelined all-reduce %d, %zu wrong elements", W, r, j, bad);
    }
    for (int j = 0; j < PIPE_K; j++) { dfree(e, stage[j]); dfree(e, out[j]); }
    dfree(e, buf); dfree(e, slow_a); dfree(e, slow_b);
    free(h); free(ref);
}

static void body_local(rank_env *e) {
    mo_alloc_stats a0, a1;
    local_collectives(e);
    // comm ops take no device memory: count the allocations around a few of them
    size_t n = 5000;
    float *d = dnew(e, n), *h = fnew(n);
    gen(h, n, T_AR, e->W, e->r, 99);
    up(e, d, h, n);
    mo_allocator_stats(e->alloc, &a0);
    TCHECK_OK(mo_comm_allreduce_sum(e->c, d, n));
    account(e, MO_COMM_OP_ALLREDUCE, n * 4);
    TCHECK_OK(mo_comm_barrier(e->c));
    account(e, MO_COMM_OP_BARRIER, 0);
    mo_allocator_stats(e->alloc, &a1);
    TCHECK(a1.num_allocs == a0.num_allocs && a1.peak_allocated_bytes == a0.peak_allocated_bytes,
           "local W=%d rank %d: the communicator took device memory", e->W, e->r);
    dfree(e, d);
    free(h);
    local_p2p(e);
    local_pipeline(e);
    mo_comm_stat s;
    TCHECK_OK(mo_comm_stats(e->c, &s));
    TCHECK(s.measured == 0 && s.ops == e->ops && s.bytes == e->bytes,
           "local W=%d rank %d: stats ops %llu bytes %llu measured %d, want ops %llu bytes %llu, modelled", e->W, e->r,
           (unsigned long long)s.ops, (unsigned long long)s.bytes, s.measured, (unsigned long long)e->ops,
           (unsigned long long)e->bytes);
    TCHECK(s.time_ms > 0, "local W=%d: modelled time %.6f ms", e->W, s.time_ms);
    if (e->r == 0) printf("  local W=%d rank 0: %llu ops, %llu bytes, modelled %.3f ms\n", e->W,
                          (unsigned long long)s.ops, (unsigned long long)s.bytes, s.time_ms);
}

static void test_local(int W) {
    printf("local kind, W = %d ranks on one GPU\n", W);
    mo_comm_group *g = NULL;
    if (!CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, W, MO_BACKEND_CUDA, &g))) return;
    rank_env env[MO_COMM_MAX_WORLD];
    run_ranks(MO_COMM_LOCAL, g, W, NULL, body_local, env);
    for (int r = 0; r < W; r++) CHECK_MSG(env[r].join == MO_OK, "local rank %d join: %s", r, env[r].join_msg);
    mo_comm_group_destroy(g);
}

// ---------------------------------------------------------------------------------------------
// nccl kind

// Returns 0 when this build has no NCCL (the rest of the nccl tests are skipped, with the reason).
static int test_nccl_w1(void) {
    printf("nccl kind, W = 1\n");
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    mo_comm_group *g = NULL;
    mo_comm *c = NULL;
    mo_status gst = mo_comm_group_create(MO_COMM_NCCL, 1, MO_BACKEND_CUDA, &g);
    if (gst == MO_ERR_UNSUPPORTED) {
        printf("  nccl tests skipped: %s\n", mo_errmsg());
        return 0;
    }
    if (!CHECK_OK(gst)) return 0;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL))) goto done;
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CUDA, a));
    if (!x || !CHECK_OK(mo_comm_rank(g, 0, x, &c))) goto done;
    CHECK(mo_comm_kind_of(c) == MO_COMM_NCCL && mo_comm_world(c) == 1);
    size_t n = ((size_t)1 << 20) + 4099;
    float *h = fnew(n), *got = fnew(2 * n);
    void *d = NULL, *d2 = NULL;
    CHECK_OK(mo_alloc(a, n * sizeof(float), MO_CAT_ACTIVATION, &d));
    CHECK_OK(mo_alloc(a, 2 * n * sizeof(float), MO_CAT_ACTIVATION, &d2));
    gen(h, n, T_NCCL, 1, 0, 0);
    uint64_t ops = 0;
    for (int ordered = 0; ordered < 2; ordered++) {
        CHECK_OK(mo_comm_set_ordered(g, ordered));
        CHECK_OK(mo_memcpy_h2d(x, d, h, n * sizeof(float)));
        CHECK_OK(mo_comm_allreduce_sum(c, d, n));
        ops++;
        CHECK_OK(mo_memcpy_d2h(x, got, d, n * sizeof(float)));
        CHECK_MSG(mismatches(got, h, n) == 0, "nccl W=1 all-reduce (ordered %d) is not the identity", ordered);
        CHECK_OK(mo_memset_zero(x, d2, 2 * n * sizeof(float)));
        CHECK_OK(mo_comm_reduce_scatter_sum(c, d, d2, n));
        ops++;
        CHECK_OK(mo_memcpy_d2h(x, got, d2, n * sizeof(float)));
        CHECK_MSG(mismatches(got, h, n) == 0, "nccl W=1 reduce-scatter (ordered %d) is not a copy", ordered);
    }
    CHECK_OK(mo_memset_zero(x, d2, 2 * n * sizeof(float)));
    CHECK_OK(mo_comm_allgather(c, d, d2, n));
    ops++;
    CHECK_OK(mo_memcpy_d2h(x, got, d2, n * sizeof(float)));
    CHECK_MSG(mismatches(got, h, n) == 0, "nccl W=1 all-gather is not a copy");
    CHECK_OK(mo_comm_allgather(c, d, d, n)); // in place
    ops++;
    CHECK_OK(mo_comm_reduce_scatter_sum(c, d, d, n));
    ops++;
    CHECK_OK(mo_memcpy_d2h(x, got, d, n * sizeof(float)));
    CHECK_MSG(mismatches(got, h, n) == 0, "nccl W=1 in-place all-gather/reduce-scatter changed the data");
    CHECK_OK(mo_comm_barrier(c));
    ops++;
    CHECK(mo_comm_send(c, d, 16, 0) == MO_ERR_INVALID); // no peer
    mo_comm_stat s;
    CHECK_OK(mo_comm_stats(c, &s));
    CHECK_MSG(s.measured == 1 && s.ops == ops && s.bytes == 0 && s.time_ms >= 0 && isfinite(s.time_ms),
              "nccl W=1 stats: measured %d ops %llu (want %llu) bytes %llu time %.6f", s.measured,
              (unsigned long long)s.ops, (unsigned long long)ops, (unsigned long long)s.bytes, s.time_ms);
    CHECK(s.op_count[MO_COMM_OP_ALLREDUCE] == 2 && s.op_count[MO_COMM_OP_BARRIER] == 1);
    printf("  nccl W=1: %llu ops, measured %.3f ms (all-reduce %.3f ms)\n", (unsigned long long)s.ops, s.time_ms,
           s.op_ms[MO_COMM_OP_ALLREDUCE]);
    CHECK_OK(mo_comm_stats_reset(c));
    CHECK_OK(mo_comm_stats(c, &s));
    CHECK(s.ops == 0 && s.time_ms == 0 && s.measured == 1);
    CHECK_OK(mo_free(a, d));
    CHECK_OK(mo_free(a, d2));
    free(h);
    free(got);
done:
    mo_comm_destroy(c);
    mo_comm_group_destroy(g);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return 1;
}

// Two nccl ranks on one GPU: refused on both, neither hangs in ncclCommInitRank.
static void test_nccl_same_device(void) {
    printf("nccl kind, two ranks on one GPU (refused)\n");
    mo_comm_group *g = NULL;
    if (!CHECK_OK(mo_comm_group_create(MO_COMM_NCCL, 2, MO_BACKEND_CUDA, &g))) return;
    rank_env env[2];
    int devs[2] = {0, 0};
    run_ranks(MO_COMM_NCCL, g, 2, devs, NULL, env);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(env[r].join == MO_ERR_INVALID, "rank %d: %s (%s), want invalid", r, mo_status_name(env[r].join), env[r].join_msg);
    mo_comm_group_destroy(g);
}

static size_t nccl_multi_n(int W) { return (size_t)W * ((size_t)1 << 20) * 2 + 12345; } // three ordered segments

static void body_nccl_multi(rank_env *e) {
    int W = e->W, r = e->r;
    mo_comm *c = e->c;
    size_t n = nccl_multi_n(W);
    float *h = fnew(n), *got = fnew(n), *ref = fnew(n);
    float *d = dnew(e, n);
    ordered_ref(ref, n, T_NCCL, W, 0, n, 0);
    // ordered (default): the local kind's bits
    gen(h, n, T_NCCL, W, r, 0);
    up(e, d, h, n);
    TCHECK_OK(mo_comm_allreduce_sum(c, d, n));
    account(e, MO_COMM_OP_ALLREDUCE, n * 4);
    down(e, got, d, n);
    size_t bad = mismatches(got, ref, n);
    TCHECK(bad == 0, "nccl W=%d rank %d: ordered all-reduce, %zu elements differ from the rank-ordered sum", W, r, bad);
    // NCCL's own order: within rounding of it, and the same on every rank (compared in the main thread)
    TCHECK_OK(mo_comm_barrier(c));
    account(e, MO_COMM_OP_BARRIER, 0);
    if (r == 0) TCHECK_OK(mo_comm_set_ordered(e->g, 0));
    TCHECK_OK(mo_comm_barrier(c));
    account(e, MO_COMM_OP_BARRIER, 0);
    up(e, d, h, n);
    TCHECK_OK(mo_comm_allreduce_sum(c, d, n));
    account(e, MO_COMM_OP_ALLREDUCE, n * 4);
    e->result = fnew(n);
    down(e, e->result, d, n);
    double rel = test_rel_error(e->result, ref, n);
    TCHECK(rel <= 1e-6, "nccl W=%d rank %d: NCCL's all-reduce rel err %.3e vs the ordered sum", W, r, rel);
    TCHECK_OK(mo_comm_barrier(c));
    account(e, MO_COMM_OP_BARRIER, 0);
    if (r == 0) TCHECK_OK(mo_comm_set_ordered(e->g, 1));
    TCHECK_OK(mo_comm_barrier(c));
    account(e, MO_COMM_OP_BARRIER, 0);
    // ordered reduce-scatter, per-rank slice of m
    size_t m = ((size_t)1 << 20) + 333; // two pieces
    float *rs = dnew(e, (size_t)W * m), *hr = fnew((size_t)W * m), *out = dnew(e, m);
    gen(hr, (size_t)W * m, T_RS, W, r, 1);
    up(e, rs, hr, (size_t)W * m);
    TCHECK_OK(mo_comm_reduce_scatter_sum(c, rs, out, m));
    account(e, MO_COMM_OP_REDUCE_SCATTER, (uint64_t)W * m * 4);
    float *rref = fnew(m), *rgot = fnew(m);
    ordered_ref(rref, m, T_RS, W, 1, (size_t)W * m, (size_t)r * m);
    down(e, rgot, out, m);
    TCHECK(mismatches(rgot, rref, m) == 0, "nccl W=%d rank %d: ordered reduce-scatter", W, r);
    // all-gather exact
    gen(hr, m, T_AG, W, r, 2);
    up(e, out, hr, m);
    TCHECK_OK(mo_comm_allgather(c, out, rs, m));
    account(e, MO_COMM_OP_ALLGATHER, (uint64_t)W * m * 4);
    float *all = fnew((size_t)W * m);
    down(e, all, rs, (size_t)W * m);
    bad = 0;
    for (int p = 0; p < W; p++) {
        gen(hr, m, T_AG, W, p, 2);
        bad += mismatches(all + (size_t)p * m, hr, m);
    }
    TCHECK(bad == 0, "nccl W=%d rank %d: all-gather, %zu wrong", W, r, bad);
    // sendrecv ring
    int right = (r + 1) % W, left = (r + W - 1) % W;
    gen(hr, m, T_P2P, W, r, 3);
    up(e, out, hr, m);
    TCHECK_OK(mo_comm_sendrecv(c, out, m * 4, right, rs, m * 4, left));
    e->ops++;
    e->bytes += 2 * m * 4;
    gen(hr, m, T_P2P, W, left, 3);
    down(e, rgot, rs, m);
    TCHECK(mismatches(rgot, hr, m) == 0, "nccl W=%d rank %d: sendrecv ring", W, r);
    mo_comm_stat s;
    TCHECK_OK(mo_comm_stats(c, &s));
    TCHECK(s.measured == 1 && s.ops == e->ops && s.bytes == e->bytes && s.time_ms > 0,
           "nccl W=%d rank %d: stats ops %llu bytes %llu measured %d time %.3f", W, r, (unsigned long long)s.ops,
           (unsigned long long)s.bytes, s.measured, s.time_ms);
    if (r == 0) printf("  nccl W=%d rank 0: %llu ops, %llu bytes, measured %.3f ms\n", W, (unsigned long long)s.ops,
                       (unsigned long long)s.bytes, s.time_ms);
    dfree(e, d); dfree(e, rs); dfree(e, out);
    free(h); free(got); free(ref); free(hr); free(rref); free(rgot); free(all);
}

static void test_nccl_multi(int ndev) {
    int W = ndev < 8 ? ndev : 8;
    if (W < 2) {
        printf("nccl kind, W >= 2: skipped (%d GPU visible; run on a machine with 2 or more)\n", ndev);
        return;
    }
    printf("nccl kind, W = %d (one rank per GPU)\n", W);
    mo_comm_group *g = NULL;
    if (!CHECK_OK(mo_comm_group_create(MO_COMM_NCCL, W, MO_BACKEND_CUDA, &g))) return;
    rank_env env[8];
    int devs[8];
    for (int r = 0; r < W; r++) devs[r] = r;
    run_ranks(MO_COMM_NCCL, g, W, devs, body_nccl_multi, env);
    size_t n = nccl_multi_n(W);
    for (int r = 0; r < W; r++) {
        CHECK_MSG(env[r].join == MO_OK, "nccl rank %d join: %s", r, env[r].join_msg);
        if (r > 0 && env[r].result && env[0].result)
            CHECK_MSG(mismatches(env[r].result, env[0].result, n) == 0, "NCCL's all-reduce differs between rank 0 and rank %d", r);
    }
    for (int r = 0; r < W; r++) free(env[r].result);
    mo_comm_group_destroy(g);
}

int main(void) {
    // NVLink multicast (NVLS) off unless the caller chose otherwise: on shared hosts a program using it
    // can take the GPUs out of service; the communicators never need it.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    test_require_gpu();
    seed = test_seed_from_time();
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    test_local(2);
    test_local(4);
    if (test_nccl_w1()) {
        test_nccl_same_device();
        test_nccl_multi(ndev);
    }
    return test_finish();
}
#endif // MEMOPT_HAVE_CUDA
