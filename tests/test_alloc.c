// Allocator invariants on the cpu and dry backends (the same caching logic as on the GPU):
// no overlap, alignment, stats consistent with a walk of the blocks, reserved >= allocated,
// merging restores whole segments, empty_cache returns every free segment, the cap is enforced
// against reserved bytes with an informative out-of-memory status that leaves the allocator intact.
#include <stdlib.h>
#include <string.h>
#include "strategies/alloc.h"
#include "tests/testlib.h"

typedef struct {
    uint64_t in_use, free_bytes, segs_bytes, blocks;
    uintptr_t last_end, last_seg;
    int overlap, gap, misaligned;
} walk;

static void visit(void *u, uintptr_t seg, uint64_t seg_size, uintptr_t ptr, uint64_t size, int in_use, int cat) {
    (void)cat;
    walk *w = u;
    if (seg != w->last_seg) { // a new segment: its first block must start at its base
        if (ptr != seg) w->gap++;
        w->segs_bytes += seg_size;
        w->last_seg = seg;
    } else if (ptr != w->last_end) {
        if (ptr < w->last_end) w->overlap++; else w->gap++;
    }
    w->last_end = ptr + size;
    if (ptr % 256) w->misaligned++;
    if (in_use) w->in_use += size; else w->free_bytes += size;
    w->blocks++;
}

static void check_walk(mo_allocator *a, const char *when) {
    walk w;
    memset(&w, 0, sizeof w);
    mo_allocator_visit(a, visit, &w);
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_MSG(w.overlap == 0 && w.gap == 0, "%s: blocks must tile their segments (overlaps %d, gaps %d)", when, w.overlap, w.gap);
    CHECK_MSG(w.misaligned == 0, "%s: %d misaligned blocks", when, w.misaligned);
    CHECK_MSG(w.in_use == s.allocated_bytes, "%s: walk in-use %llu != allocated %llu", when,
              (unsigned long long)w.in_use, (unsigned long long)s.allocated_bytes);
    CHECK_MSG(w.segs_bytes == s.reserved_bytes, "%s: walk segments %llu != reserved %llu", when,
              (unsigned long long)w.segs_bytes, (unsigned long long)s.reserved_bytes);
    CHECK_MSG(s.reserved_bytes >= s.allocated_bytes, "%s: reserved < allocated", when);
    uint64_t cat_sum = 0;
    for (int c = 0; c < MO_CAT_COUNT; c++) cat_sum += s.allocated_by_cat[c];
    CHECK_MSG(cat_sum == s.allocated_bytes, "%s: categories sum %llu != allocated %llu", when,
              (unsigned long long)cat_sum, (unsigned long long)s.allocated_bytes);
    CHECK_MSG(s.peak_allocated_bytes >= s.allocated_bytes && s.peak_reserved_bytes >= s.reserved_bytes, "%s: peaks below current", when);
}

// Long random alloc/free sequence; on cpu the bytes are written and checked, so overlap would show.
static void random_workload(mo_backend_kind be, mo_alloc_kind kind, uint64_t seed) {
    mo_allocator *a = NULL;
    CHECK_OK(mo_allocator_create(&a, kind, be, 0, NULL));
    if (!a) return;
    enum { SLOTS = 256, OPS = 20000 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    test_rng r;
    test_rng_seed(&r, seed);
    int bad_contents = 0;
    for (int i = 0; i < OPS; i++) {
        int k = (int)(test_rng_u64(&r) % SLOTS);
        if (p[k]) {
            if (be == MO_BACKEND_CPU && ((unsigned char *)p[k])[0] != (unsigned char)k) bad_contents++;
            if (be == MO_BACKEND_CPU && ((unsigned char *)p[k])[sz[k] - 1] != (unsigned char)k) bad_contents++;
            CHECK_OK(mo_free(a, p[k]));
            p[k] = NULL;
        } else {
            // log-uniform sizes from 1 B to 32 MiB: both pools, splits and merges
            double e = test_rng_uniform(&r, 0.0f, 25.0f);
            sz[k] = (size_t)(1.0 + (double)(1ull << (int)e) * test_rng_uniform(&r, 0.5f, 1.0f));
            CHECK_OK(mo_alloc(a, sz[k], (mo_category)(k % MO_CAT_COUNT), &p[k]));
            if (be == MO_BACKEND_CPU && p[k]) { // mark both ends: another block over them would show
                memset(p[k], k, sz[k] < 4096 ? sz[k] : 4096);
                ((unsigned char *)p[k])[sz[k] - 1] = (unsigned char)k;
            }
        }
        if (i % 2000 == 0) check_walk(a, "random workload");
    }
    CHECK_MSG(bad_contents == 0, "%d blocks were overwritten by another allocation", bad_contents);
    check_walk(a, "after workload");
    for (int k = 0; k < SLOTS; k++) if (p[k]) CHECK_OK(mo_free(a, p[k]));
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.allocated_bytes, 0);
    if (kind == MO_ALLOC_CACHING) {
        // Merging must have restored every segment to a single free block.
        walk w;
        memset(&w, 0, sizeof w);
        mo_allocator_visit(a, visit, &w);
        CHECK_EQ_U64(w.blocks, s.num_segments);
        CHECK_EQ_U64(s.inactive_split_bytes, 0);
    }
    CHECK_OK(mo_empty_cache(a));
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.reserved_bytes, 0);
    CHECK_EQ_U64(s.num_segments, 0);
    CHECK_EQ_U64(s.num_allocs, s.num_frees);
    mo_allocator_destroy(a);
}

static void test_rounding_and_pools(void) {
    mo_allocator *a = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
    void *x = NULL, *y = NULL, *z = NULL;
    CHECK_OK(mo_alloc(a, 1, MO_CAT_ACTIVATION, &x));
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.allocated_bytes, 512);             // rounded to 512 B
    CHECK_EQ_U64(s.reserved_bytes, 2ull << 20);       // a 2 MiB small-pool segment
    CHECK_OK(mo_alloc(a, 1000, MO_CAT_ACTIVATION, &y)); // same segment, right after x
    CHECK((uintptr_t)y == (uintptr_t)x + 512);
    CHECK_OK(mo_alloc(a, 3u << 20, MO_CAT_PARAM, &z));  // large pool: a 20 MiB segment
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.reserved_bytes, (2ull << 20) + (20ull << 20));
    CHECK_EQ_U64(s.allocated_bytes, 512 + 1024 + (3ull << 20));
    CHECK_EQ_U64(s.allocated_by_cat[MO_CAT_PARAM], 3ull << 20);
    void *big = NULL;
    CHECK_OK(mo_alloc(a, (50ull << 20) + 1, MO_CAT_WORKSPACE, &big)); // >= 10 MiB: rounded to 2 MiB
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.reserved_bytes, (2ull << 20) + (20ull << 20) + (52ull << 20));
    // Freeing then re-requesting the same size reuses the cached block (no new segment).
    CHECK_OK(mo_free(a, z));
    void *z2 = NULL;
    CHECK_OK(mo_alloc(a, 3u << 20, MO_CAT_PARAM, &z2));
    CHECK(z2 == z);
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.num_segment_allocs, 3);
    // A freed pointer freed again is an error, not a crash.
    CHECK_OK(mo_free(a, z2));
    CHECK(mo_free(a, z2) == MO_ERR_INTERNAL);
    CHECK_OK(mo_free(a, x));
    CHECK_OK(mo_free(a, y));
    CHECK_OK(mo_free(a, big));
    CHECK_OK(mo_empty_cache(a));
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.reserved_bytes, 0);
    CHECK_EQ_U64(s.peak_allocated_bytes, 512 + 1024 + (3ull << 20) + (52ull << 20) - (2ull << 20) + 512);
    mo_allocator_destroy(a);
}

static void test_cap(mo_backend_kind be, mo_alloc_kind kind) {
    mo_allocator *a = NULL;
    uint64_t cap = 64ull << 20;
    CHECK_OK(mo_allocator_create(&a, kind, be, cap, NULL));
    void *x = NULL, *y = NULL, *z = NULL;
    CHECK_OK(mo_alloc(a, 40ull << 20, MO_CAT_ACTIVATION, &x));
    mo_clear_error();
    mo_status st = mo_alloc(a, 30ull << 20, MO_CAT_ACTIVATION, &y); // 40 + 30 > 64 MiB
    CHECK(st == MO_ERR_OOM);
    CHECK(y == NULL);
    const char *m = mo_errmsg();
    CHECK_MSG(strstr(m, "tried to allocate 30.00 MiB") && strstr(m, "cap 64.00 MiB") && strstr(m, "reserved 40.00 MiB") &&
                  strstr(m, "largest free block"),
              "OOM message lacks the figures: %s", m);
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.num_ooms, 1);
    CHECK_EQ_U64(s.allocated_bytes, 40ull << 20);
    CHECK_EQ_U64(s.reserved_bytes, 40ull << 20);
    check_walk(a, "after oom");
    CHECK_OK(mo_alloc(a, 20ull << 20, MO_CAT_ACTIVATION, &z)); // fits: 60 MiB <= 64 MiB
    CHECK_OK(mo_free(a, x));
    CHECK_OK(mo_free(a, z));
    // A request that only fits once the cache is flushed succeeds, counting a retry.
    if (kind == MO_ALLOC_CACHING) {
        CHECK_OK(mo_alloc(a, 60ull << 20, MO_CAT_ACTIVATION, &y));
        mo_allocator_stats(a, &s);
        CHECK(s.num_alloc_retries >= 1);
        CHECK_OK(mo_free(a, y));
    }
    CHECK_OK(mo_empty_cache(a));
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.allocated_bytes, 0);
    CHECK_EQ_U64(s.reserved_bytes, 0);
    mo_allocator_destroy(a);
}

static void test_parse(void) {
    uint64_t b = 0;
    CHECK_OK(mo_size_parse("24GiB", "--x", &b)); CHECK_EQ_U64(b, 24ull << 30);
    CHECK_OK(mo_size_parse("512MiB", "--x", &b)); CHECK_EQ_U64(b, 512ull << 20);
    CHECK_OK(mo_size_parse("1.5GB", "--x", &b)); CHECK_EQ_U64(b, 1500000000ull);
    CHECK_OK(mo_size_parse("4096", "--x", &b)); CHECK_EQ_U64(b, 4096);
    CHECK(mo_size_parse("12XB", "--x", &b) == MO_ERR_INVALID);
    CHECK(strstr(mo_errmsg(), "--x") != NULL);
    CHECK(mo_size_parse("abc", "--x", &b) == MO_ERR_INVALID);
    mo_cap c;
    CHECK_OK(mo_cap_parse("none", &c)); CHECK(c.kind == 0);
    CHECK_OK(mo_cap_parse("0.5", &c)); CHECK(c.kind == 1 && c.fraction == 0.5);
    CHECK_EQ_U64(mo_cap_resolve(&c, 1000), 500);
    CHECK_OK(mo_cap_parse("24GiB", &c)); CHECK(c.kind == 2 && c.bytes == (24ull << 30));
    CHECK(mo_cap_parse("2.0", &c) == MO_ERR_INVALID);
    CHECK(strstr(mo_errmsg(), "--cap") != NULL);
    CHECK(mo_cap_parse("-1", &c) == MO_ERR_INVALID);
    CHECK(mo_cap_parse("12XB", &c) == MO_ERR_INVALID);
    mo_alloc_kind k;
    CHECK_OK(mo_alloc_kind_parse("async", &k)); CHECK(k == MO_ALLOC_ASYNC);
    CHECK(mo_alloc_kind_parse("slab", &k) == MO_ERR_INVALID);
}

static void test_summary(void) {
    mo_allocator *a = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_DRY, 1ull << 30, NULL));
    void *p = NULL;
    CHECK_OK(mo_alloc(a, 123456, MO_CAT_GRAD, &p));
    char buf[4096];
    mo_memory_summary(a, buf, sizeof buf);
    CHECK(strstr(buf, "allocated") && strstr(buf, "reserved") && strstr(buf, "grad") && strstr(buf, "1.00 GiB"));
    CHECK_OK(mo_free(a, p));
    mo_allocator_destroy(a);
}

int main(void) {
    uint64_t seed = test_seed_from_time();
    test_parse();
    test_rounding_and_pools();
    test_summary();
    for (int be = MO_BACKEND_CPU; be <= MO_BACKEND_DRY; be++) {
        random_workload((mo_backend_kind)be, MO_ALLOC_CACHING, seed);
        random_workload((mo_backend_kind)be, MO_ALLOC_RAW, seed + 1);
        random_workload((mo_backend_kind)be, MO_ALLOC_ASYNC, seed + 2); // modelled as raw off the GPU
        test_cap((mo_backend_kind)be, MO_ALLOC_CACHING);
        test_cap((mo_backend_kind)be, MO_ALLOC_RAW);
    }
    return test_finish();
}
