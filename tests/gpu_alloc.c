// The allocator against the device's own accounting, for caching, async and raw on the cuda
// backend: reserved bytes must track cudaMemGetInfo's used-memory delta (within the CUDA
// allocation granularity, 2 MiB per segment), everything must come back after empty_cache and
// destroy, and a cap must make an allocation fail with MO_ERR_OOM and a message while a smaller
// one still succeeds.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "strategies/alloc.h"
#include "testlib.h"

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>

#define MiB ((uint64_t)1 << 20)
#define GRANULE (2 * MiB)
#define NBLOCKS 300

static int64_t used_bytes(void) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) return -1;
    return (int64_t)(t - f);
}

static int64_t absdiff(int64_t a, int64_t b) { return a > b ? a - b : b - a; }

// Reserved vs the device's used delta: at most one granule per segment apart (raw: each
// cudaMalloc may take a granule of its own; caching and async segments are granule multiples).
static void check_tracks(mo_allocator *a, int64_t used0, const char *kind, const char *when) {
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    if (test_device_wide_skip("reserved bytes against the device's used-memory delta")) return;
    int64_t delta = used_bytes() - used0;
    uint64_t segs = s.num_segments > 0 ? s.num_segments : 1;
    int64_t tol = (int64_t)(GRANULE * segs);
    CHECK_MSG(absdiff(delta, (int64_t)s.reserved_bytes) <= tol,
              "%s %s: device used delta %lld, allocator reserved %llu (%llu segments, tolerance %lld)", kind, when,
              (long long)delta, (unsigned long long)s.reserved_bytes, (unsigned long long)s.num_segments, (long long)tol);
}

// Returns the device-used delta left after destroy (-1 if the test could not run).
static int64_t test_tracking(mo_alloc_kind kind) {
    const char *name = mo_alloc_kind_name(kind);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    int64_t used0 = used_bytes();
    CHECK(used0 >= 0);
    mo_allocator *a = NULL;
    if (!CHECK_OK(mo_allocator_create(&a, kind, MO_BACKEND_CUDA, 0, NULL))) return -1;

    test_rng r;
    uint64_t seed = test_seed_from_time();
    test_rng_seed(&r, seed);
    printf("%s: seed %llu\n", name, (unsigned long long)seed);
    void *p[NBLOCKS] = {0};
    // Allocate, free a random half, allocate again: splits, merges and reuse all happen.
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NBLOCKS; i++) {
            if (p[i]) continue;
            // log-uniform in 512 B .. 16 MiB
            size_t bytes = (size_t)(512.0 * pow(32768.0, test_rng_uniform(&r, 0.0f, 1.0f)));
            if (!CHECK_OK(mo_alloc(a, bytes, MO_CAT_ACTIVATION, &p[i]))) goto out;
        }
        CHECK(cudaDeviceSynchronize() == cudaSuccess); // async: the pool grows in stream order
        check_tracks(a, used0, name, round == 0 ? "after allocating" : "after re-allocating");
        for (int i = 0; i < NBLOCKS; i++)
            if (test_rng_u64(&r) & 1) {
                CHECK_OK(mo_free(a, p[i]));
                p[i] = NULL;
            }
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        check_tracks(a, used0, name, "after freeing half");
    }
out:
    for (int i = 0; i < NBLOCKS; i++) CHECK_OK(mo_free(a, p[i]));
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.allocated_bytes, 0);
    CHECK_OK(mo_empty_cache(a));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.reserved_bytes, 0);
    int64_t after_empty = used_bytes() - used0;
    mo_allocator_destroy(a);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    int64_t after_destroy = used_bytes() - used0;
    printf("%s: device used delta after empty_cache %lld, after destroy %lld bytes\n", name, (long long)after_empty,
           (long long)after_destroy);
    // raw hands every block straight to cudaFree; the driver keeps the pages it sub-allocated
    // small cudaMallocs from (seen on the H200: ~30 MiB after 300 blocks). That is not ours to
    // return, so raw is checked by main for not growing on a repeat instead.
    if (kind != MO_ALLOC_RAW && !test_device_wide_skip("the device's used memory back after empty_cache and destroy")) {
        CHECK_MSG(absdiff(after_empty, 0) <= (int64_t)GRANULE, "%s: %lld bytes still used after empty_cache", name,
                  (long long)after_empty);
        CHECK_MSG(absdiff(after_destroy, 0) <= (int64_t)GRANULE, "%s: %lld bytes still used after destroy", name,
                  (long long)after_destroy);
    }
    return after_destroy;
}

static void test_cap(mo_alloc_kind kind) {
    const char *name = mo_alloc_kind_name(kind);
    mo_allocator *a = NULL;
    if (!CHECK_OK(mo_allocator_create(&a, kind, MO_BACKEND_CUDA, 256 * MiB, NULL))) return;
    void *big = NULL, *over = NULL, *small = NULL;
    CHECK_OK(mo_alloc(a, 200 * MiB, MO_CAT_PARAM, &big));
    mo_alloc_stats before, after;
    mo_allocator_stats(a, &before);
    mo_clear_error();
    mo_status st = mo_alloc(a, 100 * MiB, MO_CAT_ACTIVATION, &over);
    CHECK_MSG(st == MO_ERR_OOM, "%s: 100 MiB over a 256 MiB cap with 200 MiB live: %s, want oom", name, mo_status_name(st));
    CHECK(over == NULL);
    CHECK_MSG(strstr(mo_errmsg(), "tried to allocate") != NULL, "%s: OOM message '%s'", name, mo_errmsg());
    printf("%s: %s\n", name, mo_errmsg());
    mo_allocator_stats(a, &after);
    CHECK_EQ_U64(after.allocated_bytes, before.allocated_bytes);
    CHECK(after.num_ooms == before.num_ooms + 1);
    CHECK_MSG(after.reserved_bytes <= 256 * MiB, "%s: reserved %llu over the cap", name,
              (unsigned long long)after.reserved_bytes);
    CHECK_OK(mo_alloc(a, 16 * MiB, MO_CAT_ACTIVATION, &small));
    CHECK_OK(mo_free(a, small));
    CHECK_OK(mo_free(a, big));
    mo_allocator_destroy(a);
}

int main(void) {
    test_require_gpu();
    // The context and the runtime's own first-use allocations come before any baseline.
    CHECK(cudaFree(0) == cudaSuccess);
    static const mo_alloc_kind kinds[] = {MO_ALLOC_CACHING, MO_ALLOC_ASYNC, MO_ALLOC_RAW};
    for (int k = 0; k < 3; k++) {
        mo_allocator *a = NULL;
        void *p = NULL;
        if (CHECK_OK(mo_allocator_create(&a, kinds[k], MO_BACKEND_CUDA, 0, NULL))) {
            CHECK_OK(mo_alloc(a, 4096, MO_CAT_WORKSPACE, &p));
            CHECK_OK(mo_free(a, p));
            mo_allocator_destroy(a);
        }
    }
    for (int k = 0; k < 3; k++) test_tracking(kinds[k]);
    // raw again: a leak would add to what the driver kept the first time.
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    int64_t kept = used_bytes();
    int64_t again = test_tracking(MO_ALLOC_RAW);
    int64_t grown = used_bytes() - kept;
    printf("raw: the driver kept %lld bytes after the first round; the repeat left %lld more\n", (long long)again,
           (long long)grown);
    if (!test_device_wide_skip("raw: the device's used memory not growing on a repeat"))
        CHECK_MSG(grown <= (int64_t)GRANULE, "raw: device use grew by %lld bytes on a repeat: a leak", (long long)grown);
    for (int k = 0; k < 3; k++) test_cap(kinds[k]);
    return test_finish();
}

#else
int main(void) {
    test_require_gpu(); // built without CUDA: prints the reason and exits 77 (skipped)
    return 0;
}
#endif
