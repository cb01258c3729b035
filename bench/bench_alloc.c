// Allocator micro-benchmarks for caching, async and raw (strategies/alloc.h), through the Google
// Benchmark shim:
//   alloc_pairs/<kind>/<size>   one mo_alloc + mo_free per iteration (host wall time), counter
//                               pairs_per_s; sizes 512 B, 64 KiB, 4 MiB, 64 MiB;
//   fragmentation/<kind>        a fixed-seed workload of 20000 random allocs/frees, sizes
//                               log-uniform in 512 B..64 MiB, at most 2 GiB live; counters
//                               reserved_bytes, allocated_bytes, ratio_end (reserved/allocated at
//                               the end), ratio_peak (peak reserved/peak allocated),
//                               largest_free_block.
// On the cuda backend when a GPU answers, else on the cpu backend (said on stderr).
// Google Benchmark's flags apply: --benchmark_filter=fragmentation --benchmark_out=f.json ...
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/gbench_shim.h"
#include "kernels/backend.h"
#include "strategies/alloc.h"

static mo_backend_kind g_backend = MO_BACKEND_CPU;

typedef struct pair_case {
    mo_alloc_kind kind;
    size_t bytes;
} pair_case;

static void bench_pairs(mo_gb_state *st, void *user) {
    const pair_case *pc = user;
    mo_allocator *a = NULL;
    if (mo_allocator_create(&a, pc->kind, g_backend, 0, NULL) != MO_OK) {
        mo_gb_skip_with_error(st, mo_errmsg());
        return;
    }
    void *p = NULL;
    // One pair first, untimed: the caching pool's segment exists before the loop, as in training.
    mo_status s = mo_alloc(a, pc->bytes, MO_CAT_ACTIVATION, &p);
    if (s == MO_OK) s = mo_free(a, p);
    while (s == MO_OK && mo_gb_keep_running(st)) {
        s = mo_alloc(a, pc->bytes, MO_CAT_ACTIVATION, &p);
        if (s == MO_OK) s = mo_free(a, p);
    }
    if (s != MO_OK) mo_gb_skip_with_error(st, mo_errmsg());
    else mo_gb_counter(st, "pairs_per_s", (double)mo_gb_iterations(st), MO_GB_COUNTER_RATE);
    mo_allocator_destroy(a);
}

// The fragmentation workload: deterministic (xorshift64*, fixed seed) so every kind sees the same
// sequence of requests.
#define FRAG_OPS 20000
#define FRAG_LIVE_MAX ((uint64_t)2 << 30)
#define FRAG_MIN_BYTES 512.0
#define FRAG_MAX_BYTES (64.0 * 1024 * 1024)

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct frag_result {
    mo_alloc_stats end;
} frag_result;

// Runs the workload on a fresh allocator; the stats are taken before the remaining blocks are freed.
static mo_status frag_workload(mo_alloc_kind kind, frag_result *r) {
    mo_allocator *a = NULL;
    MO_TRY(mo_allocator_create(&a, kind, g_backend, 0, NULL));
    void **ptrs = calloc(FRAG_OPS, sizeof *ptrs);
    size_t *sizes = calloc(FRAG_OPS, sizeof *sizes);
    mo_status st = MO_OK;
    if (!ptrs || !sizes) { st = MO_FAIL(MO_ERR_INTERNAL, "host out of memory"); goto done; }
    uint64_t seed = 0x9E3779B97F4A7C15ULL, live = 0;
    size_t n = 0;
    for (int op = 0; op < FRAG_OPS && st == MO_OK; op++) {
        size_t bytes = (size_t)(FRAG_MIN_BYTES * pow(FRAG_MAX_BYTES / FRAG_MIN_BYTES, rng_unit(&seed)));
        int do_alloc = n == 0 || (rng_unit(&seed) < 0.5 && live + bytes <= FRAG_LIVE_MAX);
        if (do_alloc) {
            st = mo_alloc(a, bytes, MO_CAT_ACTIVATION, &ptrs[n]);
            if (st == MO_OK) { sizes[n++] = bytes; live += bytes; }
        } else {
            size_t k = (size_t)(rng_next(&seed) % n); // free a random live block
            st = mo_free(a, ptrs[k]);
            live -= sizes[k];
            ptrs[k] = ptrs[n - 1];
            sizes[k] = sizes[n - 1];
            n--;
        }
    }
    if (st == MO_OK) mo_allocator_stats(a, &r->end);
    for (size_t k = 0; k < n; k++) {
        mo_status s2 = mo_free(a, ptrs[k]);
        if (st == MO_OK) st = s2;
    }
done:
    free(ptrs);
    free(sizes);
    mo_allocator_destroy(a);
    return st;
}

static void bench_frag(mo_gb_state *st, void *user) {
    mo_alloc_kind kind = *(const mo_alloc_kind *)user;
    frag_result r;
    memset(&r, 0, sizeof r);
    while (mo_gb_keep_running(st)) {
        if (frag_workload(kind, &r) != MO_OK) {
            mo_gb_skip_with_error(st, mo_errmsg());
            return;
        }
    }
    const mo_alloc_stats *s = &r.end;
    mo_gb_counter(st, "reserved_bytes", (double)s->reserved_bytes, MO_GB_COUNTER_DEFAULT);
    mo_gb_counter(st, "allocated_bytes", (double)s->allocated_bytes, MO_GB_COUNTER_DEFAULT);
    mo_gb_counter(st, "ratio_end", s->allocated_bytes ? (double)s->reserved_bytes / (double)s->allocated_bytes : NAN,
                  MO_GB_COUNTER_DEFAULT);
    mo_gb_counter(st, "ratio_peak",
                  s->peak_allocated_bytes ? (double)s->peak_reserved_bytes / (double)s->peak_allocated_bytes : NAN,
                  MO_GB_COUNTER_DEFAULT);
    mo_gb_counter(st, "largest_free_block", (double)s->largest_free_block, MO_GB_COUNTER_DEFAULT);
}

int main(int argc, char **argv) {
    const char *why = NULL;
    if (mo_cuda_available(&why)) g_backend = MO_BACKEND_CUDA;
    else fprintf(stderr, "bench_alloc: %s: benchmarking the cpu backend (host memory) instead\n", why);

    static const mo_alloc_kind kinds[] = {MO_ALLOC_CACHING, MO_ALLOC_ASYNC, MO_ALLOC_RAW};
    static const struct { size_t bytes; const char *name; } sizes[] = {
        {512, "512B"}, {64 << 10, "64KiB"}, {4 << 20, "4MiB"}, {64 << 20, "64MiB"}};
    static pair_case cases[3][4];
    for (int k = 0; k < 3; k++) {
        for (int s = 0; s < 4; s++) {
            cases[k][s] = (pair_case){kinds[k], sizes[s].bytes};
            char name[96];
            snprintf(name, sizeof name, "alloc_pairs/%s/%s/%s", mo_backend_name(g_backend),
                     mo_alloc_kind_name(kinds[k]), sizes[s].name);
            mo_gb_bench *b;
            if (mo_gb_register(name, bench_pairs, &cases[k][s], &b) != MO_OK) goto fail;
            mo_gb_use_real_time(b);
            mo_gb_set_unit(b, MO_GB_NS);
        }
    }
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "fragmentation/%s/%s", mo_backend_name(g_backend), mo_alloc_kind_name(kinds[k]));
        mo_gb_bench *b;
        if (mo_gb_register(name, bench_frag, (void *)&kinds[k], &b) != MO_OK) goto fail;
        mo_gb_use_real_time(b);
        mo_gb_set_unit(b, MO_GB_MS);
        mo_gb_set_iterations(b, 1); // one whole workload; --benchmark_repetitions repeats it
    }
    return mo_gb_run(&argc, argv) == MO_OK ? 0 : 2;
fail:
    fprintf(stderr, "bench_alloc: %s\n", mo_errmsg());
    return 1;
}
