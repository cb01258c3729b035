// The caching allocator (and the raw and async kinds) over three sources of memory:
// cudaMalloc (cuda), posix_memalign (cpu), a fake address space never touched (dry).
//
// Caching follows PyTorch's CUDACachingAllocator: requests rounded up to 512 B; blocks of at most
// 1 MiB come from 2 MiB segments of the small pool, larger ones from the large pool (segments of
// 20 MiB for requests under 10 MiB, else the request rounded up to 2 MiB); best fit (smallest free
// block that fits, lowest address on ties, so the layout is deterministic); a block is split when
// the remainder is at least 512 B (small pool) or more than 1 MiB (large pool); freed blocks merge
// with free neighbours in their segment. When a segment cannot be had (the cap, or the device), every
// wholly free segment is released and the request retried once; then it is out of memory.
//
// The cap is counted against reserved bytes (segments held), as PyTorch counts its memory fraction.
#include "alloc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "../kernels/cuda_check.h"
#endif

#define ROUND 512ull
#define SMALL_SIZE (1ull << 20)     // blocks up to this come from the small pool
#define SMALL_SEGMENT (2ull << 20)  // small-pool segment
#define LARGE_SEGMENT (20ull << 20) // large-pool segment for requests under MIN_LARGE_ALLOC
#define MIN_LARGE_ALLOC (10ull << 20)
#define SEGMENT_ROUND (2ull << 20)
#define DRY_BASE 0x100000000000ull  // fake addresses start here (never dereferenced)

typedef struct segment segment;
typedef struct block block;

struct block {
    uintptr_t ptr;
    uint64_t size;      // rounded
    uint64_t requested; // what the caller asked for (in use only)
    segment *seg;
    block *prev, *next;         // address-order neighbours within the segment
    block *fl, *fr;             // the pool's free blocks: a treap ordered by (size, ptr)
    int in_use;
    int cat;
};

struct segment {
    uintptr_t base;
    uint64_t size;
    int pool; // 0 small, 1 large (raw/async: 1)
    segment *snext, *sprev;
    block *first;
    uint64_t in_use_blocks;
};

// Open-addressing map from live pointer to its block.
typedef struct {
    uintptr_t *keys;
    block **vals;
    size_t cap, count;
} ptr_map;

struct mo_allocator {
    mo_alloc_kind kind;
    mo_backend_kind backend;
    int host;                // mo_allocator_create_host: pinned host memory (cudaHostAlloc on cuda)
    uint64_t cap;
    void *stream;
    segment *segments;       // all segments
    block *free_tree[2];     // per pool: free blocks by (size, ptr), the best fit in O(log n)
    ptr_map live;
    uintptr_t dry_next;
    mo_alloc_stats st;
    mo_alloc_trace_fn trace; // NULL: not tracing (mo_allocator_set_trace)
    void *trace_user;
    const char *trace_tensor; // the next alloc's name (mo_alloc_trace_tensor), NULL: unnamed
#ifdef MEMOPT_HAVE_CUDA
    cudaMemPool_t pool;      // async
#endif
};

// ---------- process-wide: fault injection (mo_alloc_fail_at, MEMOPT_FAIL_ALLOC) and accounting ----------
static _Atomic uint64_t g_calls;    // mo_alloc calls since the last arming
static _Atomic uint64_t g_fail_at;  // the call that fails; 0 off
static _Atomic uint64_t g_injected; // faults injected
static _Atomic uint64_t g_allocated, g_reserved, g_leaked, g_allocators;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static int g_poison; // MEMOPT_POISON_ALLOC=1: every new block filled with 0xff bytes (alloc_poison)

// MEMOPT_FAIL_ALLOC and MEMOPT_POISON_ALLOC are knobs of kernels/knobs.c (recorded in the CSV row).
static void read_alloc_env(void) {
    const char *pz = getenv("MEMOPT_POISON_ALLOC");
    g_poison = pz && !strcmp(pz, "1");
    if (pz && *pz && strcmp(pz, "1") && strcmp(pz, "0"))
        fprintf(stderr, "memopt: MEMOPT_POISON_ALLOC='%s' ignored (accepted: 1 or 0)\n", pz);
    const char *e = getenv("MEMOPT_FAIL_ALLOC");
    if (!e || !*e) return;
    char *end = NULL;
    unsigned long long k = strtoull(e, &end, 10);
    if (*end || e[0] == '-') {
        fprintf(stderr, "memopt: MEMOPT_FAIL_ALLOC='%s' ignored (accepted: a positive integer k)\n", e);
        return;
    }
    mo_alloc_fail_at(k);
}

void mo_alloc_fail_at(uint64_t k) {
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, k);
}
uint64_t mo_alloc_calls(void) { return atomic_load(&g_calls); }
uint64_t mo_alloc_faults_injected(void) { return atomic_load(&g_injected); }

void mo_alloc_global_stats(mo_alloc_global *out) {
    out->allocated_bytes = atomic_load(&g_allocated);
    out->reserved_bytes = atomic_load(&g_reserved);
    out->leaked_bytes = atomic_load(&g_leaked);
    out->live_allocators = atomic_load(&g_allocators);
}

// ---------- pointer map ----------
// All bits mixed (splitmix64's finalizer): addresses are multiples of 512 B, dry ones of 2 MiB, and
// the low bits of a plain product of them are all zero, which piled every key into a few slots.
static size_t hash_ptr(uintptr_t p, size_t cap) {
    uint64_t z = (uint64_t)p;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(z ^ (z >> 31)) & (cap - 1);
}

static int map_grow(ptr_map *m) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    uintptr_t *nk = calloc(ncap, sizeof *nk);
    block **nv = calloc(ncap, sizeof *nv);
    if (!nk || !nv) { free(nk); free(nv); return -1; }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = hash_ptr(m->keys[i], ncap);
        while (nk[j]) j = (j + 1) & (ncap - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys); free(m->vals);
    m->keys = nk; m->vals = nv; m->cap = ncap;
    return 0;
}

static int map_put(ptr_map *m, uintptr_t k, block *v) {
    if ((m->count + 1) * 2 > m->cap && map_grow(m)) return -1;
    size_t j = hash_ptr(k, m->cap);
    while (m->keys[j]) j = (j + 1) & (m->cap - 1);
    m->keys[j] = k; m->vals[j] = v; m->count++;
    return 0;
}

static block *map_get(const ptr_map *m, uintptr_t k) {
    if (!m->cap) return NULL;
    for (size_t j = hash_ptr(k, m->cap); m->keys[j]; j = (j + 1) & (m->cap - 1))
        if (m->keys[j] == k) return m->vals[j];
    return NULL;
}

static block *map_take(ptr_map *m, uintptr_t k) {
    if (!m->cap) return NULL;
    size_t j = hash_ptr(k, m->cap);
    while (m->keys[j]) {
        if (m->keys[j] == k) {
            block *b = m->vals[j];
            // Backward-shift deletion keeps probe chains intact.
            size_t i = j;
            for (;;) {
                m->keys[i] = 0; m->vals[i] = NULL;
                size_t n = i;
                for (;;) {
                    n = (n + 1) & (m->cap - 1);
                    if (!m->keys[n]) { m->count--; return b; }
                    size_t h = hash_ptr(m->keys[n], m->cap);
                    // Move n back to i if its home h is not in (i, n] cyclically.
                    if ((i <= n) ? (h <= i || h > n) : (h <= i && h > n)) break;
                }
                m->keys[i] = m->keys[n]; m->vals[i] = m->vals[n];
                i = n;
            }
        }
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

// ---------- backend memory ----------
static mo_status backend_get(mo_allocator *a, uint64_t size, uintptr_t *out) {
    switch (a->backend) {
    case MO_BACKEND_DRY:
        // Fake addresses are never reused: a long run of huge segments could wrap them.
        if (size > UINTPTR_MAX - a->dry_next)
            return MO_FAIL(MO_ERR_INVALID, "dry backend: a segment of %" PRIu64 " bytes wraps its 64-bit fake address space "
                           "(%" PRIu64 " bytes handed out so far): the shape is too large", size, (uint64_t)(a->dry_next - DRY_BASE));
        *out = a->dry_next;
        a->dry_next += size;
        return MO_OK;
    case MO_BACKEND_CPU: {
        void *p = NULL;
        if (posix_memalign(&p, 512, size)) return MO_FAIL(MO_ERR_OOM, "host memory exhausted allocating %" PRIu64 " bytes", size);
        *out = (uintptr_t)p;
        return MO_OK;
    }
    case MO_BACKEND_CUDA: {
#ifdef MEMOPT_HAVE_CUDA
        void *p = NULL;
        cudaError_t e = a->host ? cudaHostAlloc(&p, size, cudaHostAllocDefault) : cudaMalloc(&p, size);
        if (e != cudaSuccess) {
            cudaGetLastError(); // clear the sticky-free error so later calls are not blamed
            return MO_FAIL(e == cudaErrorMemoryAllocation ? MO_ERR_OOM : MO_ERR_CUDA, "%s(%" PRIu64 "): %s",
                           a->host ? "cudaHostAlloc" : "cudaMalloc", size, cudaGetErrorString(e));
        }
        *out = (uintptr_t)p;
        return MO_OK;
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "built without CUDA");
#endif
    }
    }
    return MO_FAIL(MO_ERR_INTERNAL, "bad backend");
}

static mo_status backend_put(mo_allocator *a, uintptr_t p) {
    switch (a->backend) {
    case MO_BACKEND_DRY: return MO_OK;
    case MO_BACKEND_CPU: free((void *)p); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        if (a->host) CUDA_CHECK(cudaFreeHost((void *)p));
        else CUDA_CHECK(cudaFree((void *)p));
#endif
        return MO_OK;
    }
    return MO_OK;
}

// ---------- bookkeeping ----------
static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
static uint64_t round_size(uint64_t req) { return req < ROUND ? ROUND : round_up(req, ROUND); }
static uint64_t segment_size_for(uint64_t size) {
    if (size <= SMALL_SIZE) return SMALL_SEGMENT;
    if (size < MIN_LARGE_ALLOC) return LARGE_SEGMENT;
    return round_up(size, SEGMENT_ROUND);
}

static void note_alloc(mo_allocator *a, uint64_t size, uint64_t req, int cat) {
    mo_alloc_stats *s = &a->st;
    s->allocated_bytes += size;
    s->requested_bytes += req;
    s->allocated_by_cat[cat] += size;
    s->num_allocs++;
    atomic_fetch_add(&g_allocated, size);
    if (s->allocated_bytes > s->peak_allocated_bytes) {
        s->peak_allocated_bytes = s->allocated_bytes;
        memcpy(s->at_peak_by_cat, s->allocated_by_cat, sizeof s->at_peak_by_cat);
    }
    if (s->allocated_by_cat[cat] > s->peak_by_cat[cat]) s->peak_by_cat[cat] = s->allocated_by_cat[cat];
}

static void note_free(mo_allocator *a, uint64_t size, uint64_t req, int cat) {
    a->st.allocated_bytes -= size;
    a->st.requested_bytes -= req;
    a->st.allocated_by_cat[cat] -= size;
    a->st.num_frees++;
    atomic_fetch_sub(&g_allocated, size);
}

static void note_reserve(mo_allocator *a, int64_t delta) {
    a->st.reserved_bytes += (uint64_t)delta;
    atomic_fetch_add(&g_reserved, (uint64_t)delta);
    if (delta > 0) {
        a->st.num_segments++;
        a->st.num_segment_allocs++;
        if (a->st.reserved_bytes > a->st.peak_reserved_bytes) a->st.peak_reserved_bytes = a->st.reserved_bytes;
    } else {
        a->st.num_segments--;
        a->st.num_segment_frees++;
    }
}

// The free blocks of a pool, ordered by (size, ptr): the first block that fits is the best fit
// (smallest, lowest address on ties). A treap whose priorities hash the address, so its shape and
// every choice are deterministic: a model of a thousand layers caches thousands of free blocks,
// which a sorted list made quadratic (a plan of L1000 C65536 took minutes in list walks).
static uint64_t treap_prio(const block *b) { return (uint64_t)b->ptr * 0x9E3779B97F4A7C15ull; }
static int before(const block *x, const block *y) { return x->size < y->size || (x->size == y->size && x->ptr < y->ptr); }

static block *treap_insert(block *t, block *b) {
    if (!t) {
        b->fl = b->fr = NULL;
        return b;
    }
    if (before(b, t)) {
        t->fl = treap_insert(t->fl, b);
        if (treap_prio(t->fl) > treap_prio(t)) { block *l = t->fl; t->fl = l->fr; l->fr = t; t = l; }
    } else {
        t->fr = treap_insert(t->fr, b);
        if (treap_prio(t->fr) > treap_prio(t)) { block *r = t->fr; t->fr = r->fl; r->fl = t; t = r; }
    }
    return t;
}

// Joins two treaps, every key of l before every key of r.
static block *treap_join(block *l, block *r) {
    if (!l) return r;
    if (!r) return l;
    if (treap_prio(l) > treap_prio(r)) {
        l->fr = treap_join(l->fr, r);
        return l;
    }
    r->fl = treap_join(l, r->fl);
    return r;
}

static block *treap_remove(block *t, const block *b) {
    if (!t) return NULL;
    if (t == b) return treap_join(t->fl, t->fr);
    if (before(b, t)) t->fl = treap_remove(t->fl, b);
    else t->fr = treap_remove(t->fr, b);
    return t;
}

static void free_insert(mo_allocator *a, block *b) {
    int pool = b->seg->pool;
    a->free_tree[pool] = treap_insert(a->free_tree[pool], b);
}

static void free_remove(mo_allocator *a, block *b) {
    int pool = b->seg->pool;
    a->free_tree[pool] = treap_remove(a->free_tree[pool], b);
    b->fl = b->fr = NULL;
}

// The first free block of the pool with at least size bytes, or NULL.
static block *best_fit(const mo_allocator *a, int pool, uint64_t size) {
    block *best = NULL;
    for (block *t = a->free_tree[pool]; t;) {
        if (t->size >= size) {
            best = t;
            t = t->fl;
        } else {
            t = t->fr;
        }
    }
    return best;
}

static void segment_unlink(mo_allocator *a, segment *s) {
    if (s->sprev) s->sprev->snext = s->snext;
    else a->segments = s->snext;
    if (s->snext) s->snext->sprev = s->sprev;
}

// Release every wholly free segment (one free block spanning it) to the backend.
static mo_status release_free_segments(mo_allocator *a) {
    segment *s = a->segments;
    while (s) {
        segment *next = s->snext;
        if (s->in_use_blocks == 0) {
            block *b = s->first;
            free_remove(a, b);
            segment_unlink(a, s);
            mo_status st = backend_put(a, s->base);
            note_reserve(a, -(int64_t)s->size);
            free(b);
            free(s);
            if (st != MO_OK) return st;
        }
        s = next;
    }
    return MO_OK;
}

static uint64_t largest_free(const mo_allocator *a) {
    uint64_t m = 0;
    for (int p = 0; p < 2; p++) {
        const block *b = a->free_tree[p];
        while (b && b->fr) b = b->fr; // the last in (size, ptr) order is the largest
        if (b && b->size > m) m = b->size;
    }
    return m;
}

static mo_status oom(mo_allocator *a, uint64_t bytes, const char *why) {
    a->st.num_ooms++;
    char x[32], y[32], al[32], r[32], l[32];
    return MO_FAIL(MO_ERR_OOM,
                   "out of memory: tried to allocate %s; cap %s; allocated %s; reserved %s; largest free block %s (%s)",
                   mo_format_bytes(bytes, x, sizeof x), a->cap ? mo_format_bytes(a->cap, y, sizeof y) : "none",
                   mo_format_bytes(a->st.allocated_bytes, al, sizeof al),
                   mo_format_bytes(a->st.reserved_bytes, r, sizeof r), mo_format_bytes(largest_free(a), l, sizeof l),
                   why);
}

// A new segment of seg_bytes, under the cap; one retry after releasing the cache.
static mo_status new_segment(mo_allocator *a, uint64_t seg_bytes, int pool, uint64_t req, segment **out) {
    char why[300] = "";
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1) {
            a->st.num_alloc_retries++;
#ifdef MEMOPT_HAVE_CUDA
            // Blocks freed by the host may still be read or written by queued work (kernels, or copies on
            // another stream into pinned host blocks: --offload activations): wait, as mo_empty_cache does.
            if (a->backend == MO_BACKEND_CUDA) CUDA_CHECK(cudaDeviceSynchronize());
#endif
            MO_TRY(release_free_segments(a));
        }
        // The byte counts are int64 in the results: refuse what would pass 2^63 rather than wrap.
        if (seg_bytes > (uint64_t)INT64_MAX - a->st.reserved_bytes)
            return MO_FAIL(MO_ERR_INVALID, "a segment of %" PRIu64 " bytes for a request of %" PRIu64 " bytes, with %" PRIu64
                           " bytes reserved, overflows the 64-bit byte counts (at most 2^63-1): the shape is too large",
                           seg_bytes, req, a->st.reserved_bytes);
        if (a->cap && a->st.reserved_bytes + seg_bytes > a->cap) {
            snprintf(why, sizeof why, "the cap");
            continue;
        }
        uintptr_t base = 0;
        mo_status st = backend_get(a, seg_bytes, &base);
        if (st == MO_ERR_OOM) {
            snprintf(why, sizeof why, "%s", mo_errmsg());
            continue;
        }
        if (st != MO_OK) return st;
        segment *s = calloc(1, sizeof *s);
        block *b = calloc(1, sizeof *b);
        if (!s || !b) {
            free(s); free(b);
            backend_put(a, base);
            return MO_FAIL(MO_ERR_OOM, "host memory exhausted for allocator metadata");
        }
        s->base = base; s->size = seg_bytes; s->pool = pool; s->first = b;
        s->snext = a->segments;
        if (a->segments) a->segments->sprev = s;
        a->segments = s;
        b->ptr = base; b->size = seg_bytes; b->seg = s;
        free_insert(a, b);
        note_reserve(a, (int64_t)seg_bytes);
        *out = s;
        return MO_OK;
    }
    return oom(a, req, why);
}

static mo_status caching_alloc(mo_allocator *a, uint64_t req, int cat, uintptr_t *ptr) {
    uint64_t size = round_size(req);
    int pool = size <= SMALL_SIZE ? 0 : 1;
    block *b = best_fit(a, pool, size);
    if (!b) {
        segment *s = NULL;
        MO_TRY(new_segment(a, segment_size_for(size), pool, req, &s));
        b = s->first;
    }
    free_remove(a, b);
    uint64_t remaining = b->size - size;
    if (pool == 0 ? remaining >= ROUND : remaining > SMALL_SIZE) {
        block *rest = calloc(1, sizeof *rest);
        if (!rest) { free_insert(a, b); return MO_FAIL(MO_ERR_OOM, "host memory exhausted for allocator metadata"); }
        rest->ptr = b->ptr + size;
        rest->size = remaining;
        rest->seg = b->seg;
        rest->prev = b;
        rest->next = b->next;
        if (b->next) b->next->prev = rest;
        b->next = rest;
        b->size = size;
        free_insert(a, rest);
    }
    b->in_use = 1;
    b->requested = req;
    b->cat = cat;
    b->seg->in_use_blocks++;
    if (map_put(&a->live, b->ptr, b)) {
        // Undo: the block goes back to the free list unmerged split is harmless.
        b->in_use = 0; b->seg->in_use_blocks--; free_insert(a, b);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for allocator metadata");
    }
    note_alloc(a, b->size, req, cat);
    *ptr = b->ptr;
    return MO_OK;
}

static void caching_free(mo_allocator *a, block *b) {
    note_free(a, b->size, b->requested, b->cat);
    b->in_use = 0;
    b->requested = 0;
    b->seg->in_use_blocks--;
    // Merge with free neighbours.
    block *n = b->next;
    if (n && !n->in_use) {
        free_remove(a, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        free(n);
    }
    block *p = b->prev;
    if (p && !p->in_use) {
        free_remove(a, p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        free(b);
        b = p;
    }
    free_insert(a, b);
}

// raw: one backend allocation per request; the segment is the block.
static mo_status raw_alloc(mo_allocator *a, uint64_t req, int cat, uintptr_t *ptr) {
    uint64_t size = round_size(req);
    segment *s = NULL;
    MO_TRY(new_segment(a, size, 1, req, &s));
    block *b = s->first;
    free_remove(a, b);
    b->in_use = 1; b->requested = req; b->cat = cat;
    s->in_use_blocks = 1;
    if (map_put(&a->live, b->ptr, b)) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for allocator metadata");
    note_alloc(a, size, req, cat);
    *ptr = b->ptr;
    return MO_OK;
}

static mo_status raw_free(mo_allocator *a, block *b) {
    note_free(a, b->size, b->requested, b->cat);
    segment *s = b->seg;
    segment_unlink(a, s);
    note_reserve(a, -(int64_t)s->size);
    mo_status st = backend_put(a, s->base);
    free(b);
    free(s);
    return st;
}

#ifdef MEMOPT_HAVE_CUDA
// async: cudaMallocFromPoolAsync on a pool of our own whose release threshold keeps freed memory
// cached (UINT64_MAX), so it behaves as a caching pool; reserved bytes are the pool's own figure.
static mo_status async_reserved(mo_allocator *a, uint64_t *out) {
    uint64_t v = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(a->pool, cudaMemPoolAttrReservedMemCurrent, &v));
    *out = v;
    return MO_OK;
}

static mo_status async_sync_reserved(mo_allocator *a) {
    uint64_t r = 0;
    MO_TRY(async_reserved(a, &r));
    atomic_fetch_add(&g_reserved, r - a->st.reserved_bytes);
    a->st.reserved_bytes = r;
    if (r > a->st.peak_reserved_bytes) a->st.peak_reserved_bytes = r;
    return MO_OK;
}

static mo_status async_alloc(mo_allocator *a, uint64_t req, int cat, uintptr_t *ptr) {
    uint64_t size = round_size(req);
    cudaStream_t s = (cudaStream_t)a->stream;
    char why[300] = "";
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1) {
            a->st.num_alloc_retries++;
            CUDA_CHECK(cudaStreamSynchronize(s));
            CUDA_CHECK(cudaMemPoolTrimTo(a->pool, 0));
        }
        void *p = NULL;
        cudaError_t e = cudaMallocFromPoolAsync(&p, size, a->pool, s);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            snprintf(why, sizeof why, "cudaMallocFromPoolAsync: %s", cudaGetErrorString(e));
            continue;
        }
        if (e != cudaSuccess) return MO_FAIL(MO_ERR_CUDA, "cudaMallocFromPoolAsync(%" PRIu64 "): %s", size, cudaGetErrorString(e));
        uint64_t r = 0;
        MO_TRY(async_reserved(a, &r));
        if (a->cap && r > a->cap) {
            CUDA_CHECK(cudaFreeAsync(p, s));
            snprintf(why, sizeof why, "the cap");
            continue;
        }
        block *b = calloc(1, sizeof *b);
        if (!b || map_put(&a->live, (uintptr_t)p, b)) {
            free(b);
            cudaFreeAsync(p, s);
            return MO_FAIL(MO_ERR_OOM, "host memory exhausted for allocator metadata");
        }
        b->ptr = (uintptr_t)p; b->size = size; b->requested = req; b->cat = cat; b->in_use = 1;
        note_alloc(a, size, req, cat);
        MO_TRY(async_sync_reserved(a));
        *ptr = b->ptr;
        return MO_OK;
    }
    // The refused blocks went back to the pool, which keeps freed memory: trim it so a refused
    // request leaves reserved bytes where they were, under the cap.
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemPoolTrimTo(a->pool, 0));
    MO_TRY(async_sync_reserved(a));
    return oom(a, req, why);
}
#endif

// ---------- public ----------
mo_status mo_allocator_create(mo_allocator **out, mo_alloc_kind kind, mo_backend_kind backend, uint64_t cap_bytes,
                              void *stream) {
    *out = NULL;
    pthread_once(&g_env_once, read_alloc_env);
#ifndef MEMOPT_HAVE_CUDA
    if (backend == MO_BACKEND_CUDA) return MO_FAIL(MO_ERR_UNSUPPORTED, "--backend cuda: this build has no CUDA (MEMOPT_CUDA=OFF)");
#endif
    mo_allocator *a = calloc(1, sizeof *a);
    if (!a) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the allocator");
    a->kind = kind;
    a->backend = backend;
    a->cap = cap_bytes;
    a->stream = stream;
    a->dry_next = DRY_BASE;
    a->st.cap_bytes = cap_bytes;
#ifdef MEMOPT_HAVE_CUDA
    if (kind == MO_ALLOC_ASYNC && backend == MO_BACKEND_CUDA) {
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        struct cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        if (e == cudaSuccess) e = cudaMemPoolCreate(&a->pool, &props);
        if (e != cudaSuccess) {
            free(a);
            return MO_FAIL(MO_ERR_CUDA, "cudaMemPoolCreate: %s", cudaGetErrorString(e));
        }
        uint64_t keep = UINT64_MAX;
        e = cudaMemPoolSetAttribute(a->pool, cudaMemPoolAttrReleaseThreshold, &keep);
        if (e != cudaSuccess) {
            cudaMemPoolDestroy(a->pool);
            free(a);
            return MO_FAIL(MO_ERR_CUDA, "cudaMemPoolSetAttribute(ReleaseThreshold): %s", cudaGetErrorString(e));
        }
    }
#endif
    atomic_fetch_add(&g_allocators, 1);
    *out = a;
    return MO_OK;
}

static void trace_event(mo_allocator *a, int is_free, uintptr_t ptr, uint64_t bytes, int cat);
static mo_status free_block(mo_allocator *a, block *b, void *ptr);

// async on cpu/dry has no pool to ask: it is modelled as raw (reserved == allocated).
mo_status mo_allocator_create_host(mo_allocator **out, mo_backend_kind backend) {
    return mo_allocator_create_host_kind(out, MO_ALLOC_RAW, backend);
}

mo_status mo_allocator_create_host_kind(mo_allocator **out, mo_alloc_kind kind, mo_backend_kind backend) {
    if (kind == MO_ALLOC_ASYNC) return MO_FAIL(MO_ERR_INVALID, "a host allocator is raw or caching, not async");
    MO_TRY(mo_allocator_create(out, kind, backend, 0, NULL));
    (*out)->host = 1;
    return MO_OK;
}

size_t mo_alloc_requested_bytes(const mo_allocator *a, const void *ptr) {
    const block *b = ptr ? map_get(&a->live, (uintptr_t)ptr) : NULL;
    return b ? (size_t)b->requested : 0;
}

static int is_async_pool(const mo_allocator *a) { return a->kind == MO_ALLOC_ASYNC && a->backend == MO_BACKEND_CUDA; }

// MEMOPT_POISON_ALLOC=1: a new block's bytes all 0xff before the caller gets it: NaN in fp32, fp16 and
// bf16, -1 in an int. A kernel that reads memory nothing wrote then changes a result (a loss, a
// gradient, a token's row) where the tests compare it, on any tool or none: the check beside
// compute-sanitizer initcheck, whose reports it can confirm or refute. The requested bytes are filled
// (not the rounding past them). Device blocks are filled between two device synchronizations, so no
// kernel of this thread's queues still uses the block (it may have been another tensor's a moment ago on
// another stream); cuda's pinned host blocks are left alone (an asynchronous copy may still read a freed
// one); the cpu backend's blocks, host ones included, are memset.
static mo_status alloc_poison(mo_allocator *a, uintptr_t p, size_t bytes) {
    if (!bytes || a->backend == MO_BACKEND_DRY || (a->host && a->backend == MO_BACKEND_CUDA)) return MO_OK;
    if (a->backend == MO_BACKEND_CPU) {
        memset((void *)p, 0xff, bytes);
        return MO_OK;
    }
#ifdef MEMOPT_HAVE_CUDA
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemset((void *)p, 0xff, bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
#endif
    return MO_OK;
}

mo_status mo_alloc(mo_allocator *a, size_t bytes, mo_category cat, void **ptr) {
    *ptr = NULL;
    if ((unsigned)cat >= MO_CAT_COUNT) return MO_FAIL(MO_ERR_INTERNAL, "bad memory category %d", (int)cat);
    // Rounding a request this large to its segment would wrap (and no count can hold it).
    if ((uint64_t)bytes > (uint64_t)INT64_MAX - SEGMENT_ROUND)
        return MO_FAIL(MO_ERR_INVALID, "a request of %zu bytes (%s) overflows the 64-bit byte counts (at most 2^63-1): "
                       "the shape is too large", bytes, mo_category_name(cat));
    uint64_t call = atomic_fetch_add(&g_calls, 1) + 1, fail_at = atomic_load(&g_fail_at);
    if (fail_at && call == fail_at) {
        atomic_fetch_add(&g_injected, 1);
        char why[64];
        snprintf(why, sizeof why, "injected fault: allocation %" PRIu64, call);
        return oom(a, bytes, why);
    }
    uintptr_t p = 0;
    mo_status st;
    const uint64_t before = a->st.allocated_bytes; // the trace's block size: what allocated grew by
    if (a->kind == MO_ALLOC_CACHING) st = caching_alloc(a, bytes, cat, &p);
#ifdef MEMOPT_HAVE_CUDA
    else if (is_async_pool(a)) st = async_alloc(a, bytes, cat, &p);
#endif
    else st = raw_alloc(a, bytes, cat, &p);
    if (st == MO_OK && g_poison) {
        st = alloc_poison(a, p, bytes);
        if (st != MO_OK) { // the block back, as if never handed out
            block *b = map_take(&a->live, p);
            if (b) (void)free_block(a, b, (void *)p);
        }
    }
    if (st == MO_OK) *ptr = (void *)p;
    if (st == MO_OK && a->trace) trace_event(a, 0, p, a->st.allocated_bytes - before, cat);
    return st;
}

mo_status mo_free(mo_allocator *a, void *ptr) {
    if (!ptr) return MO_OK;
    block *b = map_take(&a->live, (uintptr_t)ptr);
    if (!b) return MO_FAIL(MO_ERR_INTERNAL, "mo_free: %p was not allocated here (or was freed twice)", ptr);
    if (!a->trace) return free_block(a, b, ptr);
    const uint64_t size = b->size;
    const int cat = b->cat;
    MO_TRY(free_block(a, b, ptr));
    trace_event(a, 1, (uintptr_t)ptr, size, cat);
    return MO_OK;
}

// The free itself (b already taken off the live map; b is gone after it).
static mo_status free_block(mo_allocator *a, block *b, void *ptr) {
    (void)ptr; // the async pool's cudaFreeAsync takes it
    if (a->kind == MO_ALLOC_CACHING) { caching_free(a, b); return MO_OK; }
#ifdef MEMOPT_HAVE_CUDA
    if (is_async_pool(a)) {
        note_free(a, b->size, b->requested, b->cat);
        free(b);
        CUDA_CHECK(cudaFreeAsync(ptr, (cudaStream_t)a->stream));
        return MO_OK;
    }
#endif
    return raw_free(a, b);
}

mo_status mo_empty_cache(mo_allocator *a) {
#ifdef MEMOPT_HAVE_CUDA
    if (is_async_pool(a)) {
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)a->stream));
        CUDA_CHECK(cudaMemPoolTrimTo(a->pool, 0));
        return async_sync_reserved(a);
    }
#endif
    if (a->kind != MO_ALLOC_CACHING) return MO_OK;
#ifdef MEMOPT_HAVE_CUDA
    // Blocks freed by the host may still be read by queued kernels: wait before giving them back.
    if (a->backend == MO_BACKEND_CUDA) CUDA_CHECK(cudaDeviceSynchronize());
#endif
    return release_free_segments(a);
}

void mo_allocator_destroy(mo_allocator *a) {
    if (!a) return;
    if (a->live.count)
        fprintf(stderr, "memopt: allocator destroyed with %zu live blocks (%" PRIu64 " bytes): a leak\n", a->live.count,
                a->st.allocated_bytes);
    atomic_fetch_add(&g_leaked, a->st.allocated_bytes);
    atomic_fetch_sub(&g_allocated, a->st.allocated_bytes);
    atomic_fetch_sub(&g_reserved, a->st.reserved_bytes);
    atomic_fetch_sub(&g_allocators, 1);
#ifdef MEMOPT_HAVE_CUDA
    if (a->backend == MO_BACKEND_CUDA) cudaDeviceSynchronize();
    if (is_async_pool(a)) {
        for (size_t i = 0; i < a->live.cap; i++)
            if (a->live.keys[i]) { cudaFreeAsync((void *)a->live.keys[i], (cudaStream_t)a->stream); free(a->live.vals[i]); }
        cudaStreamSynchronize((cudaStream_t)a->stream);
        cudaMemPoolDestroy(a->pool);
    }
#endif
    segment *s = a->segments;
    while (s) {
        segment *next = s->snext;
        block *b = s->first;
        while (b) { block *bn = b->next; free(b); b = bn; }
        backend_put(a, s->base);
        free(s);
        s = next;
    }
    free(a->live.keys);
    free(a->live.vals);
    free(a);
}

void mo_allocator_stats(const mo_allocator *a, mo_alloc_stats *out) {
    *out = a->st;
    out->largest_free_block = largest_free(a);
    uint64_t inactive = 0;
    for (const segment *s = a->segments; s; s = s->snext) {
        if (!s->in_use_blocks) continue;
        for (const block *b = s->first; b; b = b->next)
            if (!b->in_use) inactive += b->size;
    }
    out->inactive_split_bytes = inactive;
}

void mo_allocator_reset_peaks(mo_allocator *a) {
    a->st.peak_allocated_bytes = a->st.allocated_bytes;
    a->st.peak_reserved_bytes = a->st.reserved_bytes;
    for (int c = 0; c < MO_CAT_COUNT; c++) a->st.peak_by_cat[c] = a->st.at_peak_by_cat[c] = a->st.allocated_by_cat[c];
}

void mo_allocator_set_trace(mo_allocator *a, mo_alloc_trace_fn fn, void *user) {
    a->trace = fn;
    a->trace_user = user;
}

int mo_allocator_tracing(const mo_allocator *a) { return a->trace != NULL; }

static void trace_event(mo_allocator *a, int is_free, uintptr_t ptr, uint64_t bytes, int cat) {
    mo_alloc_event e = {is_free ? MO_TRACE_FREE : MO_TRACE_ALLOC, is_free || !a->trace_tensor ? "" : a->trace_tensor,
                        ptr, bytes, cat, a->st.allocated_bytes, a->st.reserved_bytes};
    a->trace_tensor = NULL;
    a->trace(a->trace_user, &e);
}

void mo_alloc_trace_mark(mo_allocator *a, mo_trace_kind kind, const char *label) {
    if (!a->trace) return;
    mo_alloc_event e = {kind, label ? label : "", 0, 0, 0, a->st.allocated_bytes, a->st.reserved_bytes};
    a->trace(a->trace_user, &e);
}

void mo_alloc_trace_tensor(mo_allocator *a, const char *name) {
    if (a->trace) a->trace_tensor = name;
}

mo_backend_kind mo_allocator_backend(const mo_allocator *a) { return a->backend; }
mo_alloc_kind mo_allocator_kind(const mo_allocator *a) { return a->kind; }
void mo_allocator_set_stream(mo_allocator *a, void *stream) { a->stream = stream; }

void mo_allocator_visit(const mo_allocator *a, mo_block_visitor fn, void *user) {
    for (const segment *s = a->segments; s; s = s->snext)
        for (const block *b = s->first; b; b = b->next) fn(user, s->base, s->size, b->ptr, b->size, b->in_use, b->cat);
    if (is_async_pool(a))
        for (size_t i = 0; i < a->live.cap; i++)
            if (a->live.keys[i]) fn(user, 0, 0, a->live.keys[i], a->live.vals[i]->size, 1, a->live.vals[i]->cat);
}

void mo_memory_summary(const mo_allocator *a, char *buf, size_t n) {
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    char b1[32], b2[32], b3[32];
    size_t o = 0;
#define P(...) do { int k_ = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__); if (k_ > 0) o += (size_t)k_; } while (0)
    P("|===========================================================|\n");
    P("|  memopt memory summary (%s allocator, %s backend)\n", mo_alloc_kind_name(a->kind), mo_backend_name(a->backend));
    P("|-----------------------------------------------------------|\n");
    P("| %-22s %14s %14s\n", "", "current", "peak");
    P("| %-22s %14s %14s\n", "allocated", mo_format_bytes(s.allocated_bytes, b1, 32), mo_format_bytes(s.peak_allocated_bytes, b2, 32));
    P("| %-22s %14s %14s\n", "reserved", mo_format_bytes(s.reserved_bytes, b1, 32), mo_format_bytes(s.peak_reserved_bytes, b2, 32));
    for (int c = 0; c < MO_CAT_COUNT; c++)
        P("|   %-20s %14s %14s\n", mo_category_name((mo_category)c), mo_format_bytes(s.allocated_by_cat[c], b1, 32),
          mo_format_bytes(s.peak_by_cat[c], b2, 32));
    P("| %-22s %14s\n", "requested (unrounded)", mo_format_bytes(s.requested_bytes, b1, 32));
    P("| %-22s %14s\n", "inactive split", mo_format_bytes(s.inactive_split_bytes, b1, 32));
    P("| %-22s %14s\n", "largest free block", mo_format_bytes(s.largest_free_block, b1, 32));
    P("| %-22s %14s\n", "cap", s.cap_bytes ? mo_format_bytes(s.cap_bytes, b3, 32) : "none");
    P("| allocs %" PRIu64 "  frees %" PRIu64 "  segments %" PRIu64 " (%" PRIu64 " made, %" PRIu64 " released)\n",
      s.num_allocs, s.num_frees, s.num_segments, s.num_segment_allocs, s.num_segment_frees);
    P("| ooms %" PRIu64 "  retries after flushing the cache %" PRIu64 "\n", s.num_ooms, s.num_alloc_retries);
    P("|===========================================================|\n");
#undef P
    if (n) buf[o < n ? o : n - 1] = '\0';
}
