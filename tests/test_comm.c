// The communicators on the cpu and dry backends (the local kind; ranks are pthreads):
//   all-reduce equals the rank-ordered fp32 sum ((x0 + x1) + x2) + ... bit for bit on every rank, for
//   W = 1..4 and counts that leave chunks empty or ragged (0, 1, 3, 63, 64, 65, 1000, 4099), and gives
//   the same bits when repeated; the data spans 2^-12..2^12 so that another order would change bits
//   (checked: the reverse order differs);
//   all-gather and reduce-scatter contents, out of place and in place;
//   the _axis forms (sequence parallelism): per outer block, contents, rank-ordered sums, 2-byte
//   elements for the gather, accounting, and mismatched blocks or overlapping buffers refused;
//   send/recv around a ring (even ranks send first) and sendrecv around a ring (all at once);
//   the barrier really waits (no rank leaves round k before every rank entered it);
//   back-to-back all-reduces that overwrite their buffer at once (the lifetime argument);
//   byte accounting and modelled time equal the formulas of comm.h, written out here again;
//   bad arguments give MO_ERR_INVALID (on every rank for a collective, without hanging);
//   dry: nothing is read or written, nothing waits (one thread can drive all ranks), bytes are counted.
// Random data from test_rng; the seed is printed.
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ctx.h"
#include "strategies/alloc.h"
#include "strategies/comm.h"
#include "tests/testlib.h"

static uint64_t seed;
static pthread_mutex_t tl_mu = PTHREAD_MUTEX_INITIALIZER; // testlib's counters are not thread safe

// Checks from rank threads: the condition is evaluated outside the lock (it may be a comm call).
#define TCHECK(cond, ...)                                  \
    do {                                                   \
        int tc_ok_ = (cond);                               \
        pthread_mutex_lock(&tl_mu);                        \
        CHECK_MSG(tc_ok_, __VA_ARGS__);                    \
        pthread_mutex_unlock(&tl_mu);                      \
    } while (0)
#define TCHECK_OK(expr)                                    \
    do {                                                   \
        mo_status tc_st_ = (expr);                         \
        pthread_mutex_lock(&tl_mu);                        \
        CHECK_OK(tc_st_);                                  \
        pthread_mutex_unlock(&tl_mu);                      \
    } while (0)
#define TCHECK_ST(expr, want)                                                                   \
    do {                                                                                        \
        mo_status tc_st_ = (expr);                                                              \
        TCHECK(tc_st_ == (want), "%s: got %s (%s), want %s", #expr, mo_status_name(tc_st_),     \
               tc_st_ == MO_OK ? "" : mo_errmsg(), mo_status_name(want));                       \
    } while (0)

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(1); }
    return p;
}
static float *fnew(size_t n) { return xmalloc(n * sizeof(float)); }

// Rank r's input for (test, W, salt): uniform in [-1, 1] scaled by 2^k, k in [-12, 12], so sums in
// another order round differently.
static void gen(float *x, size_t n, int test, int W, int r, int salt) {
    test_rng g;
    test_rng_seed(&g, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(1 + test * 1000003 + W * 1009 + r * 31 + salt * 7919)));
    for (size_t i = 0; i < n; i++) {
        float u = test_rng_uniform(&g, -1, 1);
        int k = (int)(test_rng_u64(&g) % 25) - 12;
        x[i] = ldexpf(u, k);
    }
}

static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static int same_bits(const float *a, const float *b, size_t n) { return n == 0 || memcmp(a, b, n * sizeof(float)) == 0; }

// The expected bytes and modelled time, from comm.h's formulas (independently of comm_local.c).
static uint64_t want_bytes(mo_comm_op op, int W, uint64_t n_or_bytes) {
    switch (op) {
    case MO_COMM_OP_ALLREDUCE: return 2 * (uint64_t)(W - 1) * n_or_bytes * 4 / (uint64_t)W;
    case MO_COMM_OP_ALLGATHER:
    case MO_COMM_OP_REDUCE_SCATTER: return (uint64_t)(W - 1) * n_or_bytes * 4;
    case MO_COMM_OP_BARRIER: return 0;
    default: return n_or_bytes;
    }
}
static double want_ms(mo_comm_op op, int W, uint64_t wire, double gbps, double base, double step) {
    if (W == 1 || (wire == 0 && op != MO_COMM_OP_BARRIER)) return 0;
    double steps = op == MO_COMM_OP_ALLREDUCE || op == MO_COMM_OP_BARRIER ? 2.0 * (W - 1)
                   : op == MO_COMM_OP_ALLGATHER || op == MO_COMM_OP_REDUCE_SCATTER ? W - 1 : 1;
    return wire / (gbps * 1e9) * 1e3 + (base + steps * step) / 1e3;
}

// ---------------------------------------------------------------------------------------------
// Running W rank threads, each with its own allocator, context and comm.

typedef struct rank_env rank_env;
typedef void (*rank_fn)(rank_env *e);
struct rank_env {
    int W, r;
    mo_backend_kind be;
    mo_comm_group *g;
    mo_allocator *alloc;
    mo_ctx *ctx;
    mo_comm *c;
    rank_fn fn;
    void *user;
    // expected accounting, accumulated by the body
    uint64_t ops, bytes;
    double ms;
};

static void expect(rank_env *e, mo_comm_op op, uint64_t bytes, uint64_t wire) {
    e->ops++;
    e->bytes += bytes;
    e->ms += want_ms(op, e->W, wire, MO_COMM_DEFAULT_LINK_GBPS, MO_COMM_DEFAULT_BASE_US, MO_COMM_DEFAULT_STEP_US);
}

static void *rank_main(void *arg) {
    rank_env *e = arg;
    TCHECK_OK(mo_allocator_create(&e->alloc, MO_ALLOC_CACHING, e->be, 0, NULL));
    TCHECK_OK(mo_ctx_create(&e->ctx, e->be, e->alloc));
    TCHECK_OK(mo_comm_rank(e->g, e->r, e->ctx, &e->c));
    if (e->c) {
        TCHECK(mo_comm_world(e->c) == e->W && mo_comm_rank_of(e->c) == e->r && mo_comm_kind_of(e->c) == MO_COMM_LOCAL,
               "rank %d: accessors", e->r);
        e->fn(e);
    }
    mo_comm_destroy(e->c);
    mo_ctx_destroy(e->ctx);
    mo_allocator_destroy(e->alloc);
    return NULL;
}

static void run_ranks_in(int W, mo_backend_kind be, rank_fn fn, void *user, int guarded) {
    mo_comm_group *g = NULL;
    if (!CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, W, be, &g))) return;
    if (guarded && !CHECK_OK(mo_comm_group_guard(g))) { mo_comm_group_destroy(g); return; }
    rank_env env[MO_COMM_MAX_WORLD];
    pthread_t th[MO_COMM_MAX_WORLD];
    memset(env, 0, sizeof env);
    for (int r = 0; r < W; r++) {
        env[r] = (rank_env){.W = W, .r = r, .be = be, .g = g, .fn = fn, .user = user};
        if (pthread_create(&th[r], NULL, rank_main, &env[r]) != 0) { fprintf(stderr, "pthread_create failed\n"); exit(1); }
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    mo_comm_group_destroy(g);
}
static void run_ranks(int W, mo_backend_kind be, rank_fn fn, void *user) { run_ranks_in(W, be, fn, user, 0); }

// ---------------------------------------------------------------------------------------------
// Collectives against host references.

static const size_t sizes[] = {0, 1, 3, 63, 64, 65, 1000, 4099};
#define NSIZES (sizeof sizes / sizeof sizes[0])
enum { T_AR = 1, T_AG, T_RS, T_P2P, T_STRESS };

// ref[i] = x_0[i] + x_1[i] + ... in rank order (reverse: x_{W-1} first), from regenerated inputs;
// for reduce-scatter the inputs are W*n long and the slice is [r*n, r*n + n).
static void ordered_ref(float *ref, size_t n, int test, int W, int salt, size_t total, size_t off, int reverse) {
    float *x = fnew(total);
    for (size_t i = 0; i < n; i++) ref[i] = 0;
    for (int k = 0; k < W; k++) {
        int p = reverse ? W - 1 - k : k;
        gen(x, total, test, W, p, salt);
        for (size_t i = 0; i < n; i++) ref[i] = k == 0 ? x[off + i] : ref[i] + x[off + i];
    }
    free(x);
}

static void body_collectives(rank_env *e) {
    int W = e->W, r = e->r;
    mo_comm *c = e->c;
    mo_alloc_stats a0, a1;
    mo_allocator_stats(e->alloc, &a0);
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = sizes[si];
        int salt = (int)si;
        float *buf = fnew(n), *again = fnew(n), *ref = fnew(n), *rev = fnew(n);
        // all-reduce, twice on the same input
        gen(buf, n, T_AR, W, r, salt);
        TCHECK_OK(mo_comm_allreduce_sum(c, buf, n));
        expect(e, MO_COMM_OP_ALLREDUCE, want_bytes(MO_COMM_OP_ALLREDUCE, W, n), want_bytes(MO_COMM_OP_ALLREDUCE, W, n));
        ordered_ref(ref, n, T_AR, W, salt, n, 0, 0);
        TCHECK(same_bits(buf, ref, n), "W=%d rank %d n=%zu: all-reduce != rank-ordered sum (bitwise)", W, r, n);
        gen(again, n, T_AR, W, r, salt);
        TCHECK_OK(mo_comm_allreduce_sum(c, again, n));
        expect(e, MO_COMM_OP_ALLREDUCE, want_bytes(MO_COMM_OP_ALLREDUCE, W, n), want_bytes(MO_COMM_OP_ALLREDUCE, W, n));
        TCHECK(same_bits(buf, again, n), "W=%d rank %d n=%zu: all-reduce repeated gives other bits", W, r, n);
        if (W >= 3 && n >= 1000 && r == 0) { // the test can tell orders apart
            ordered_ref(rev, n, T_AR, W, salt, n, 0, 1);
            TCHECK(!same_bits(rev, ref, n), "W=%d n=%zu: reverse-order sum has the same bits: data too tame", W, n);
        }

        // all-gather, out of place then in place
        float *send = fnew(n), *recv = fnew((size_t)W * n), *x = fnew(n);
        gen(send, n, T_AG, W, r, salt);
        poison(recv, (size_t)W * n);
        TCHECK_OK(mo_comm_allgather(c, send, recv, n));
        int ok = 1;
        for (int p = 0; p < W; p++) {
            gen(x, n, T_AG, W, p, salt);
            ok &= same_bits(recv + (size_t)p * n, x, n);
        }
        TCHECK(ok, "W=%d rank %d n=%zu: all-gather contents", W, r, n);
        poison(recv, (size_t)W * n);
        gen(recv + (size_t)r * n, n, T_AG, W, r, salt);
        TCHECK_OK(mo_comm_allgather(c, recv + (size_t)r * n, recv, n));
        ok = 1;
        for (int p = 0; p < W; p++) {
            gen(x, n, T_AG, W, p, salt);
            ok &= same_bits(recv + (size_t)p * n, x, n);
        }
        TCHECK(ok, "W=%d rank %d n=%zu: all-gather in place contents", W, r, n);
        for (int k = 0; k < 2; k++)
            expect(e, MO_COMM_OP_ALLGATHER, want_bytes(MO_COMM_OP_ALLGATHER, W, n), want_bytes(MO_COMM_OP_ALLGATHER, W, n));

        // reduce-scatter, out of place then in place
        float *rs = fnew((size_t)W * n), *out = fnew(n);
        gen(rs, (size_t)W * n, T_RS, W, r, salt);
        poison(out, n);
        TCHECK_OK(mo_comm_reduce_scatter_sum(c, rs, out, n));
        ordered_ref(ref, n, T_RS, W, salt, (size_t)W * n, (size_t)r * n, 0);
        TCHECK(same_bits(out, ref, n), "W=%d rank %d n=%zu: reduce-scatter != rank-ordered sum", W, r, n);
        TCHECK_OK(mo_comm_reduce_scatter_sum(c, rs, rs + (size_t)r * n, n));
        TCHECK(same_bits(rs + (size_t)r * n, ref, n), "W=%d rank %d n=%zu: reduce-scatter in place", W, r, n);
        for (int k = 0; k < 2; k++)
            expect(e, MO_COMM_OP_REDUCE_SCATTER, want_bytes(MO_COMM_OP_REDUCE_SCATTER, W, n),
                   want_bytes(MO_COMM_OP_REDUCE_SCATTER, W, n));
        free(buf); free(again); free(ref); free(rev); free(send); free(recv); free(x); free(rs); free(out);
    }

    // send/recv around the ring: even ranks send first, odd ranks receive first
    if (W > 1) {
        size_t n = 777;
        int right = (r + 1) % W, left = (r + W - 1) % W;
        float *mine = fnew(n), *got = fnew(n), *want = fnew(n);
        gen(mine, n, T_P2P, W, r, 0);
        gen(want, n, T_P2P, W, left, 0);
        poison(got, n);
        if (r % 2 == 0) {
            TCHECK_OK(mo_comm_send(c, mine, n * sizeof(float), right));
            TCHECK_OK(mo_comm_recv(c, got, n * sizeof(float), left));
        } else {
            TCHECK_OK(mo_comm_recv(c, got, n * sizeof(float), left));
            TCHECK_OK(mo_comm_send(c, mine, n * sizeof(float), right));
        }
        TCHECK(same_bits(got, want, n), "W=%d rank %d: ring send/recv contents", W, r);
        expect(e, MO_COMM_OP_SEND, n * 4, n * 4);
        expect(e, MO_COMM_OP_RECV, n * 4, n * 4);
        // sendrecv: everyone at once, a different size each way
        size_t m = 300 + (size_t)left; // what the left neighbour sends (its own 300 + rank)
        float *big = fnew(300 + (size_t)r), *in = fnew(m), *win = fnew(m);
        gen(big, 300 + (size_t)r, T_P2P, W, r, 1);
        gen(win, m, T_P2P, W, left, 1);
        poison(in, m);
        TCHECK_OK(mo_comm_sendrecv(c, big, (300 + (size_t)r) * sizeof(float), right, in, m * sizeof(float), left));
        TCHECK(same_bits(in, win, m), "W=%d rank %d: ring sendrecv contents", W, r);
        e->ops++;
        e->bytes += (300 + (uint64_t)r) * 4 + m * 4;
        uint64_t wire = (300 + (uint64_t)r) * 4 > m * 4 ? (300 + (uint64_t)r) * 4 : m * 4;
        e->ms += want_ms(MO_COMM_OP_SENDRECV, W, wire, MO_COMM_DEFAULT_LINK_GBPS, MO_COMM_DEFAULT_BASE_US,
                         MO_COMM_DEFAULT_STEP_US);
        free(mine); free(got); free(want); free(big); free(in); free(win);
    }
    TCHECK_OK(mo_comm_barrier(c));
    expect(e, MO_COMM_OP_BARRIER, 0, 0);

    // no scratch: the local kind allocates nothing
    mo_allocator_stats(e->alloc, &a1);
    TCHECK(a1.peak_allocated_bytes == a0.peak_allocated_bytes && a1.num_allocs == a0.num_allocs,
           "W=%d rank %d: the local communicator allocated memory", W, r);

    // accounting
    mo_comm_stat s;
    TCHECK_OK(mo_comm_stats(c, &s));
    TCHECK(s.measured == 0, "local: time must be modelled");
    TCHECK(s.ops == e->ops, "W=%d rank %d: ops %llu, want %llu", W, r, (unsigned long long)s.ops, (unsigned long long)e->ops);
    TCHECK(s.bytes == e->bytes, "W=%d rank %d: bytes %llu, want %llu", W, r, (unsigned long long)s.bytes,
           (unsigned long long)e->bytes);
    TCHECK(fabs(s.time_ms - e->ms) <= 1e-9 * (1 + e->ms), "W=%d rank %d: time %.9f ms, want %.9f", W, r, s.time_ms, e->ms);
    uint64_t ops = 0, bytes = 0;
    double ms = 0;
    for (int k = 0; k < MO_COMM_OP_COUNT; k++) { ops += s.op_count[k]; bytes += s.op_bytes[k]; ms += s.op_ms[k]; }
    TCHECK(ops == s.ops && bytes == s.bytes && fabs(ms - s.time_ms) <= 1e-9 * (1 + ms), "W=%d: per-op sums", W);
    TCHECK(s.op_count[MO_COMM_OP_ALLREDUCE] == 2 * NSIZES && s.op_count[MO_COMM_OP_BARRIER] == 1, "W=%d: op counts", W);
    TCHECK_OK(mo_comm_stats_reset(c));
    TCHECK_OK(mo_comm_stats(c, &s));
    TCHECK(s.ops == 0 && s.bytes == 0 && s.time_ms == 0, "stats reset");
}

static void test_collectives(void) {
    for (int W = 1; W <= 4; W++) {
        printf("local cpu collectives, W = %d\n", W);
        run_ranks(W, MO_BACKEND_CPU, body_collectives, NULL);
    }
}

// ---------------------------------------------------------------------------------------------
// Along an axis: a (outer, W * n) tensor of which rank p holds (outer, n), as a (B, T, C) tensor
// sharded along T. Checked against references built here from the regenerated inputs.

enum { T_AXG = 11, T_AXS };
static const size_t ax_outer[] = {1, 3}, ax_n[] = {0, 1, 5, 64};

static void body_axis(rank_env *e) {
    int W = e->W, r = e->r;
    mo_comm *c = e->c;
    for (size_t oi = 0; oi < 2; oi++)
        for (size_t ni = 0; ni < 4; ni++) {
            size_t outer = ax_outer[oi], n = ax_n[ni], whole = outer * (size_t)W * n;
            int salt = (int)(oi * 4 + ni);
            // gather of fp32 elements
            float *send = fnew(outer * n), *recv = fnew(whole), *x = fnew(outer * n);
            gen(send, outer * n, T_AXG, W, r, salt);
            poison(recv, whole);
            TCHECK_OK(mo_comm_allgather_axis(c, send, recv, outer, n, sizeof(float)));
            int ok = 1;
            for (int p = 0; p < W; p++) {
                gen(x, outer * n, T_AXG, W, p, salt);
                for (size_t o = 0; o < outer; o++) ok &= same_bits(recv + (o * (size_t)W + (size_t)p) * n, x + o * n, n);
            }
            TCHECK(ok, "W=%d rank %d outer %zu n=%zu: all-gather along the axis, contents", W, r, outer, n);
            expect(e, MO_COMM_OP_ALLGATHER, (uint64_t)(W - 1) * outer * n * 4, (uint64_t)(W - 1) * outer * n * 4);
            // gather of 2-byte elements (a 16-bit activation): the bits move as they are
            uint16_t *s16 = xmalloc(outer * n * 2 + 2), *r16 = xmalloc(whole * 2 + 2);
            for (size_t i = 0; i < outer * n; i++) s16[i] = (uint16_t)(0x3c00u + (unsigned)r * 977u + (unsigned)i);
            memset(r16, 0xff, whole * 2);
            TCHECK_OK(mo_comm_allgather_axis(c, s16, r16, outer, n, 2));
            ok = 1;
            for (int p = 0; p < W; p++)
                for (size_t o = 0; o < outer; o++)
                    for (size_t i = 0; i < n; i++)
                        ok &= r16[(o * (size_t)W + (size_t)p) * n + i] == (uint16_t)(0x3c00u + (unsigned)p * 977u + (unsigned)(o * n + i));
            TCHECK(ok, "W=%d rank %d outer %zu n=%zu: 2-byte all-gather along the axis, contents", W, r, outer, n);
            expect(e, MO_COMM_OP_ALLGATHER, (uint64_t)(W - 1) * outer * n * 2, (uint64_t)(W - 1) * outer * n * 2);
            // reduce-scatter: rank r's block o is the rank-ordered sum of every rank's [o][r]
            float *rs = fnew(whole), *out = fnew(outer * n), *ref = fnew(outer * n), *y = fnew(whole);
            gen(rs, whole, T_AXS, W, r, salt);
            poison(out, outer * n);
            TCHECK_OK(mo_comm_reduce_scatter_axis(c, rs, out, outer, n));
            for (int p = 0; p < W; p++) {
                gen(y, whole, T_AXS, W, p, salt);
                for (size_t o = 0; o < outer; o++)
                    for (size_t i = 0; i < n; i++) {
                        float v = y[(o * (size_t)W + (size_t)r) * n + i];
                        ref[o * n + i] = p == 0 ? v : ref[o * n + i] + v;
                    }
            }
            TCHECK(same_bits(out, ref, outer * n), "W=%d rank %d outer %zu n=%zu: reduce-scatter along the axis != rank-ordered sum",
                   W, r, outer, n);
            expect(e, MO_COMM_OP_REDUCE_SCATTER, (uint64_t)(W - 1) * outer * n * 4, (uint64_t)(W - 1) * outer * n * 4);
            free(send); free(recv); free(x); free(s16); free(r16); free(rs); free(out); free(ref); free(y);
        }
    mo_comm_stat st;
    TCHECK_OK(mo_comm_stats(c, &st));
    TCHECK(st.ops == e->ops && st.bytes == e->bytes && fabs(st.time_ms - e->ms) <= 1e-9 * (1 + e->ms),
           "W=%d rank %d: axis ops accounting: ops %llu bytes %llu (want %llu, %llu)", W, r, (unsigned long long)st.ops,
           (unsigned long long)st.bytes, (unsigned long long)e->ops, (unsigned long long)e->bytes);
    TCHECK(st.op_count[MO_COMM_OP_ALLGATHER] == 16 && st.op_count[MO_COMM_OP_REDUCE_SCATTER] == 8 &&
               st.op_count[MO_COMM_OP_ALLREDUCE] == 0, "W=%d rank %d: axis op counts", W, r);
    // Bad arguments fail on every rank, none hangs: blocks that differ between ranks (W > 1), send
    // overlapping recv, element size out of range; then a good op still works.
    float buf[64];
    for (int i = 0; i < 64; i++) buf[i] = (float)(r + 1);
    if (W > 1) TCHECK_ST(mo_comm_allgather_axis(c, buf, buf + 32, r == 0 ? 2 : 1, 4, 4), MO_ERR_INVALID);
    TCHECK_ST(mo_comm_allgather_axis(c, buf, buf + 2, 1, 4, 4), MO_ERR_INVALID);
    TCHECK_ST(mo_comm_reduce_scatter_axis(c, buf, buf + 1, 1, 4), MO_ERR_INVALID);
    TCHECK_ST(mo_comm_allgather_axis(c, buf, buf + 32, 1, 1, 17), MO_ERR_INVALID);
    float one[4] = {0, 0, 0, 0};
    TCHECK_OK(mo_comm_reduce_scatter_axis(c, buf, one, 1, 4 / (size_t)W > 0 ? 4 / (size_t)W : 1));
    TCHECK(one[0] == (float)(W * (W + 1) / 2), "W=%d rank %d: reduce-scatter along the axis after the failures: %g", W, r,
           (double)one[0]);
}

static void test_axis(void) {
    for (int W = 1; W <= 4; W++) {
        printf("local cpu collectives along an axis, W = %d\n", W);
        run_ranks(W, MO_BACKEND_CPU, body_axis, NULL);
    }
    // dry: nothing read or written, the bytes counted the same
    mo_comm_group *g = NULL;
    CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, 2, MO_BACKEND_DRY, &g));
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    mo_comm *c = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_DRY, a));
    CHECK_OK(mo_comm_rank(g, 1, x, &c));
    CHECK_OK(mo_comm_allgather_axis(c, (void *)16, (void *)4096, 3, 10, 2));
    CHECK_OK(mo_comm_reduce_scatter_axis(c, (const float *)4096, (float *)16, 3, 10));
    mo_comm_stat st;
    CHECK_OK(mo_comm_stats(c, &st));
    CHECK_MSG(st.ops == 2 && st.bytes == 3 * 10 * 2 + 3 * 10 * 4, "dry axis ops: %llu ops, %llu bytes (want 2, %d)",
              (unsigned long long)st.ops, (unsigned long long)st.bytes, 3 * 10 * 2 + 3 * 10 * 4);
    mo_comm_destroy(c);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    mo_comm_group_destroy(g);
}

// ---------------------------------------------------------------------------------------------
// Back-to-back all-reduces that rewrite their buffer the moment each returns: any rank that left
// before its peers had read its chunk would corrupt them.

static void body_stress(rank_env *e) {
    int W = e->W, r = e->r;
    size_t n = 1000 + (size_t)W;
    float *buf = fnew(n), *ref = fnew(n);
    int ok = 1;
    test_rng jit;
    test_rng_seed(&jit, seed + 17 * (uint64_t)r);
    for (int it = 0; it < 200; it++) {
        gen(buf, n, T_STRESS, W, r, it);
        if (test_rng_u64(&jit) % 4 == 0) {
            struct timespec ts = {0, (long)(test_rng_u64(&jit) % 200000)};
            nanosleep(&ts, NULL);
        }
        mo_status st = mo_comm_allreduce_sum(e->c, buf, n);
        ok &= st == MO_OK;
        ordered_ref(ref, n, T_STRESS, W, it, n, 0, 0);
        ok &= same_bits(buf, ref, n);
    }
    TCHECK(ok, "W=%d rank %d: back-to-back all-reduces gave wrong bits", W, r);
    free(buf);
    free(ref);
}

// The barrier waits: nobody leaves round k before everyone has entered it.
static atomic_int arrived[MO_COMM_MAX_WORLD];

static void body_barrier(rank_env *e) {
    int W = e->W, ok = 1;
    test_rng jit;
    test_rng_seed(&jit, seed + 101 * (uint64_t)e->r);
    for (int k = 1; k <= 30; k++) {
        struct timespec ts = {0, (long)(test_rng_u64(&jit) % 300000)};
        nanosleep(&ts, NULL);
        atomic_store(&arrived[e->r], k);
        ok &= mo_comm_barrier(e->c) == MO_OK;
        for (int p = 0; p < W; p++) {
            int a = atomic_load(&arrived[p]);
            ok &= a == k || a == k + 1;
        }
    }
    TCHECK(ok, "W=%d rank %d: a rank left the barrier before every rank entered it", W, e->r);
}

static void test_sync(void) {
    for (int W = 2; W <= 4; W++) {
        printf("local cpu stress and barrier, W = %d\n", W);
        run_ranks(W, MO_BACKEND_CPU, body_stress, NULL);
        for (int p = 0; p < MO_COMM_MAX_WORLD; p++) atomic_store(&arrived[p], 0);
        run_ranks(W, MO_BACKEND_CPU, body_barrier, NULL);
    }
}

// ---------------------------------------------------------------------------------------------
// The model's settings.

static void body_model(rank_env *e) {
    mo_comm *c = e->c;
    size_t n = 1 << 16;
    float *buf = fnew(n);
    gen(buf, n, 9, e->W, e->r, 0);
    mo_comm_stat s;
    TCHECK_OK(mo_comm_allreduce_sum(c, buf, n));
    TCHECK_OK(mo_comm_stats(c, &s));
    uint64_t b = 2 * (uint64_t)(e->W - 1) * n * 4 / (uint64_t)e->W;
    double want = (double)b / 450e9 * 1e3 + (8.4 + 2 * (e->W - 1) * 3.4) / 1e3;
    TCHECK(s.bytes == b && fabs(s.time_ms - want) < 1e-12, "default model: %.9f ms, want %.9f", s.time_ms, want);
    TCHECK_OK(mo_comm_barrier(c)); // every rank has read the defaults
    if (e->r == 0) {
        TCHECK_OK(mo_comm_set_link_gbps(e->g, 100));
        TCHECK_OK(mo_comm_set_latency_us(e->g, 0, 0));
    }
    TCHECK_OK(mo_comm_barrier(c));
    TCHECK_OK(mo_comm_stats_reset(c));
    TCHECK_OK(mo_comm_allreduce_sum(c, buf, n));
    TCHECK_OK(mo_comm_stats(c, &s));
    want = (double)b / 100e9 * 1e3;
    TCHECK(fabs(s.time_ms - want) < 1e-12, "100 GB/s, no latency: %.9f ms, want %.9f", s.time_ms, want);
    free(buf);
}

static void test_formulas(void) {
    printf("formulas\n");
    for (int W = 1; W <= 8; W++) {
        uint64_t B = 4000004; // not a multiple of W for most W
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, W, B), 2 * (uint64_t)(W - 1) * B / (uint64_t)W);
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_ALLGATHER, W, B * (uint64_t)W), (uint64_t)(W - 1) * B);
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_REDUCE_SCATTER, W, B * (uint64_t)W), (uint64_t)(W - 1) * B);
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_SEND, W, B), B);
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_RECV, W, B), B);
        CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_BARRIER, W, B), 0);
    }
    // no overflow for a 1 TiB buffer on 64 ranks
    uint64_t T = (uint64_t)1 << 40;
    CHECK_EQ_U64(mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, 64, T), T / 64 * 126);
    double ms = mo_comm_model_ms(MO_COMM_OP_ALLREDUCE, 8, 1750000000ull, 450, 8.4, 3.4);
    CHECK_MSG(fabs(ms - (1750000000.0 / 450e6 + (8.4 + 14 * 3.4) / 1e3)) < 1e-9, "model ms %.9f", ms);
    CHECK(mo_comm_model_ms(MO_COMM_OP_ALLREDUCE, 1, 1000, 450, 8.4, 3.4) == 0);
    CHECK(mo_comm_model_ms(MO_COMM_OP_ALLGATHER, 4, 0, 450, 8.4, 3.4) == 0);
    CHECK(mo_comm_model_ms(MO_COMM_OP_BARRIER, 4, 0, 450, 8.4, 3.4) > 0);
    mo_comm_kind k;
    CHECK_OK(mo_comm_kind_parse("local", &k));
    CHECK(k == MO_COMM_LOCAL);
    CHECK_OK(mo_comm_kind_parse("nccl", &k));
    CHECK(k == MO_COMM_NCCL);
    CHECK(mo_comm_kind_parse("mpi", &k) == MO_ERR_INVALID && strstr(mo_errmsg(), "--comm"));
    for (int W = 2; W <= 3; W++) run_ranks(W, MO_BACKEND_CPU, body_model, NULL);
}

// ---------------------------------------------------------------------------------------------
// Bad arguments.

static void body_bad_local(rank_env *e) {
    mo_comm *c = e->c;
    int r = e->r, W = e->W;
    float buf[16] = {0}, recv[64];
    TCHECK_ST(mo_comm_send(c, buf, sizeof buf, r), MO_ERR_INVALID);      // peer == self
    TCHECK_ST(mo_comm_send(c, buf, sizeof buf, W), MO_ERR_INVALID);      // out of range
    TCHECK_ST(mo_comm_recv(c, buf, sizeof buf, -1), MO_ERR_INVALID);
    TCHECK_ST(mo_comm_sendrecv(c, buf, 4, r, recv, 4, (r + 1) % W), MO_ERR_INVALID);
    TCHECK_ST(mo_comm_send(c, NULL, 8, (r + 1) % W), MO_ERR_INVALID);
    // a NULL buffer on rank 1 fails the collective on every rank, and the group still works after
    TCHECK_ST(mo_comm_allreduce_sum(c, r == 1 ? NULL : buf, 16), MO_ERR_INVALID);
    if (r == 0) TCHECK(strstr(mo_errmsg(), "rank 1") != NULL, "peer failure names rank 1: %s", mo_errmsg());
    // counts that differ
    TCHECK_ST(mo_comm_allreduce_sum(c, buf, r == 0 ? 10 : 11), MO_ERR_INVALID);
    TCHECK(strstr(mo_errmsg(), "count") != NULL, "count mismatch message: %s", mo_errmsg());
    // different ops at the same point
    if (r == 0) TCHECK_ST(mo_comm_allreduce_sum(c, buf, 4), MO_ERR_INVALID);
    else TCHECK_ST(mo_comm_allgather(c, buf, recv, 4), MO_ERR_INVALID);
    // all-gather with send overlapping recv but not at recv + rank*n
    TCHECK_ST(mo_comm_allgather(c, recv + (r == 1 ? 1 : (size_t)r * 4), recv, 4), MO_ERR_INVALID);
    // reduce-scatter recv overlapping send elsewhere than send + rank*n
    TCHECK_ST(mo_comm_reduce_scatter_sum(c, recv, r == 0 ? recv + 1 : recv + (size_t)r * 4, 4), MO_ERR_INVALID);
    // send/recv sizes that differ fail both sides
    if (r == 0) TCHECK_ST(mo_comm_send(c, buf, 16, 1), MO_ERR_INVALID);
    if (r == 1) TCHECK_ST(mo_comm_recv(c, buf, 32, 0), MO_ERR_INVALID);
    // and everything still works
    for (int i = 0; i < 16; i++) buf[i] = (float)(r + 1);
    TCHECK_OK(mo_comm_allreduce_sum(c, buf, 16));
    TCHECK(buf[0] == (float)(W * (W + 1) / 2) && buf[15] == buf[0], "all-reduce after the failures");
    if (r == 0) TCHECK_OK(mo_comm_send(c, buf, 16, 1));
    if (r == 1) TCHECK_OK(mo_comm_recv(c, recv, 16, 0));
    mo_comm_stat s;
    TCHECK_OK(mo_comm_stats(c, &s));
    TCHECK(s.ops == (r <= 1 ? 2u : 1u), "rank %d: failed ops are not counted (ops %llu)", r, (unsigned long long)s.ops);
}

static void test_bad_args(void) {
    printf("bad arguments\n");
    mo_comm_group *g = NULL;
    CHECK(mo_comm_group_create(MO_COMM_LOCAL, 0, MO_BACKEND_CPU, &g) == MO_ERR_INVALID && !g);
    CHECK(mo_comm_group_create(MO_COMM_LOCAL, -1, MO_BACKEND_CPU, &g) == MO_ERR_INVALID && !g);
    CHECK(mo_comm_group_create(MO_COMM_LOCAL, MO_COMM_MAX_WORLD + 1, MO_BACKEND_CPU, &g) == MO_ERR_INVALID);
    CHECK(strstr(mo_errmsg(), "world size") != NULL);
    CHECK(mo_comm_group_create((mo_comm_kind)7, 2, MO_BACKEND_CPU, &g) == MO_ERR_INVALID);
    CHECK(mo_comm_group_create(MO_COMM_NCCL, 1, MO_BACKEND_CPU, &g) == MO_ERR_INVALID);
    CHECK(strstr(mo_errmsg(), "--backend cuda") != NULL);
    CHECK(mo_comm_group_create(MO_COMM_LOCAL, 2, MO_BACKEND_CPU, NULL) == MO_ERR_INVALID);

    CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, 2, MO_BACKEND_CPU, &g));
    CHECK(mo_comm_set_link_gbps(g, 0) == MO_ERR_INVALID);
    CHECK(mo_comm_set_link_gbps(g, -3) == MO_ERR_INVALID);
    CHECK(mo_comm_set_latency_us(g, -1, 0) == MO_ERR_INVALID);
    CHECK(mo_comm_set_latency_us(g, 0, NAN) == MO_ERR_INVALID);
    CHECK(mo_comm_set_ordered(g, 0) == MO_ERR_INVALID); // local is always ordered
    CHECK_OK(mo_comm_set_ordered(g, 1));
    mo_allocator *ha = NULL, *da = NULL;
    mo_ctx *hc = NULL, *dc = NULL;
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    CHECK_OK(mo_allocator_create(&da, MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
    CHECK_OK(mo_ctx_create(&dc, MO_BACKEND_DRY, da));
    mo_comm *c = NULL, *c2 = NULL;
    CHECK(mo_comm_rank(g, -1, hc, &c) == MO_ERR_INVALID && !c);
    CHECK(mo_comm_rank(g, 2, hc, &c) == MO_ERR_INVALID && !c);
    CHECK(strstr(mo_errmsg(), "out of range") != NULL);
    CHECK(mo_comm_rank(g, 0, dc, &c) == MO_ERR_INVALID && !c); // dry context, cpu group
    CHECK(mo_comm_rank(NULL, 0, hc, &c) == MO_ERR_INVALID);
    CHECK_OK(mo_comm_rank(g, 0, hc, &c));
    CHECK(mo_comm_rank(g, 0, hc, &c2) == MO_ERR_INVALID && !c2); // joined twice
    CHECK(strstr(mo_errmsg(), "twice") != NULL);
    mo_comm_destroy(c);
    CHECK_OK(mo_comm_rank(g, 0, hc, &c)); // leaving frees the rank
    mo_comm_destroy(c);
    CHECK(mo_comm_allreduce_sum(NULL, NULL, 0) == MO_ERR_INVALID);
    CHECK(mo_comm_stats(NULL, NULL) == MO_ERR_INVALID);
    mo_comm_group_destroy(g);
    mo_comm_group_destroy(NULL);
    mo_ctx_destroy(dc);
    mo_allocator_destroy(da);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);

    // W = 1: no peer exists
    CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, 1, MO_BACKEND_CPU, &g));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    CHECK_OK(mo_comm_rank(g, 0, hc, &c));
    float x[4] = {1, 2, 3, 4};
    CHECK(mo_comm_send(c, x, sizeof x, 0) == MO_ERR_INVALID);
    CHECK(mo_comm_recv(c, x, sizeof x, 0) == MO_ERR_INVALID);
    CHECK_OK(mo_comm_barrier(c));
    mo_comm_destroy(c);
    mo_comm_group_destroy(g);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);

    for (int W = 2; W <= 3; W++) run_ranks(W, MO_BACKEND_CPU, body_bad_local, NULL);
}

// ---------------------------------------------------------------------------------------------
// dry: nothing moves, nothing waits, bytes are counted.

#define DRY_N 96
static void dry_ops(mo_comm *c, int W, int r, float *buf, float *recv, uint64_t *bytes) {
    *bytes = 0;
    CHECK_OK(mo_comm_allreduce_sum(c, buf, DRY_N));
    *bytes += want_bytes(MO_COMM_OP_ALLREDUCE, W, DRY_N);
    CHECK_OK(mo_comm_allgather(c, buf, recv, DRY_N));
    *bytes += want_bytes(MO_COMM_OP_ALLGATHER, W, DRY_N);
    CHECK_OK(mo_comm_reduce_scatter_sum(c, recv, buf, DRY_N));
    *bytes += want_bytes(MO_COMM_OP_REDUCE_SCATTER, W, DRY_N);
    if (W > 1) {
        CHECK_OK(mo_comm_send(c, buf, 40, (r + 1) % W)); // nobody receives it: dry never waits
        CHECK_OK(mo_comm_recv(c, buf, 40, (r + W - 1) % W));
        CHECK_OK(mo_comm_sendrecv(c, buf, 8, (r + 1) % W, recv, 12, (r + W - 1) % W));
        *bytes += 40 + 40 + 20;
    }
    CHECK_OK(mo_comm_barrier(c));
}

static void test_dry(void) {
    printf("dry\n");
    for (int W = 1; W <= 4; W++) {
        // one thread drives every rank in turn: dry ops never wait for a peer
        mo_comm_group *g = NULL;
        CHECK_OK(mo_comm_group_create(MO_COMM_LOCAL, W, MO_BACKEND_DRY, &g));
        mo_allocator *a[4];
        mo_ctx *x[4];
        mo_comm *c[4];
        for (int r = 0; r < W; r++) {
            CHECK_OK(mo_allocator_create(&a[r], MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
            CHECK_OK(mo_ctx_create(&x[r], MO_BACKEND_DRY, a[r]));
            CHECK_OK(mo_comm_rank(g, r, x[r], &c[r]));
        }
        for (int r = 0; r < W; r++) {
            // real host memory with a pattern: dry must leave it alone
            float *buf = fnew(DRY_N * 4), *recv = fnew(DRY_N * 4), *pb = fnew(DRY_N * 4), *pr = fnew(DRY_N * 4);
            gen(buf, DRY_N * 4, 11, W, r, 0);
            gen(recv, DRY_N * 4, 11, W, r, 1);
            memcpy(pb, buf, DRY_N * 4 * sizeof(float));
            memcpy(pr, recv, DRY_N * 4 * sizeof(float));
            mo_alloc_stats s0, s1;
            mo_allocator_stats(a[r], &s0);
            uint64_t bytes = 0;
            dry_ops(c[r], W, r, buf, recv, &bytes);
            mo_allocator_stats(a[r], &s1);
            CHECK_MSG(same_bits(buf, pb, DRY_N * 4) && same_bits(recv, pr, DRY_N * 4), "dry W=%d rank %d: memory was written", W, r);
            CHECK(s1.num_allocs == s0.num_allocs);
            mo_comm_stat st;
            CHECK_OK(mo_comm_stats(c[r], &st));
            CHECK_MSG(st.bytes == bytes && st.measured == 0 && st.ops == (W > 1 ? 7u : 4u),
                      "dry W=%d rank %d: bytes %llu want %llu, ops %llu", W, r, (unsigned long long)st.bytes,
                      (unsigned long long)bytes, (unsigned long long)st.ops);
            free(buf); free(recv); free(pb); free(pr);
        }
        for (int r = 0; r < W; r++) {
            mo_comm_destroy(c[r]);
            mo_ctx_destroy(x[r]);
            mo_allocator_destroy(a[r]);
        }
        mo_comm_group_destroy(g);
    }
}

// ---------------------------------------------------------------------------------------------
// The group-wide abort: a guarded group's ops wait at an entry barrier, and an abort wakes them with
// an error instead of leaving them in an op the failed rank will never join.

static void guard_body(rank_env *e) {
    float buf[8];
    for (int i = 0; i < 8; i++) buf[i] = (float)(e->r + 1);
    // every rank, guarded: the sum as unguarded
    TCHECK_OK(mo_comm_allreduce_sum(e->c, buf, 8));
    if (e->be == MO_BACKEND_CPU) TCHECK(buf[0] == 6.0f && buf[7] == 6.0f, "guarded allreduce: %g, want 6", buf[0]);
    // a pair through its entry barrier
    if (e->r < 2) {
        float in[8];
        TCHECK_OK(mo_comm_sendrecv(e->c, buf, sizeof buf, 1 - e->r, in, sizeof in, 1 - e->r));
    }
    TCHECK_OK(mo_comm_barrier(e->c));
    if (e->r == 2) {
        // rank 2 "fails": it never joins the next all-reduce, nor the send of rank 0, and aborts the group
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        mo_comm_group_abort(e->g);
    } else {
        mo_status st = e->r == 0 ? mo_comm_send(e->c, buf, sizeof buf, 2) : mo_comm_allreduce_sum(e->c, buf, 8);
        TCHECK(st == MO_ERR_INTERNAL && strstr(mo_errmsg(), "another rank failed"),
               "rank %d: an op a failed rank will not join returned %s (%s), want internal 'stopped'", e->r,
               mo_status_name(st), st == MO_OK ? "" : mo_errmsg());
        // and so does any later op, at once
        TCHECK_ST(mo_comm_barrier(e->c), MO_ERR_INTERNAL);
    }
}

static void test_guard(void) {
    printf("guard\n");
    run_ranks_in(3, MO_BACKEND_CPU, guard_body, NULL, 1);
    run_ranks_in(3, MO_BACKEND_DRY, guard_body, NULL, 1); // dry waits at the entry barriers too
}

int main(void) {
    seed = test_seed_from_time(); // prints the seed
    test_formulas();
    test_bad_args();
    test_collectives();
    test_axis();
    test_sync();
    test_dry();
    test_guard();
    return test_finish();
}
