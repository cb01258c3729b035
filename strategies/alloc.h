// The suite's device allocator. Every device byte the suite uses (tensors, cuBLASLt and cuDNN
// workspaces, kernel scratch) comes from here, so peaks are exact and a cap is enforced the way
// torch.cuda.set_per_process_memory_fraction enforces it: against reserved bytes, not requests.
//
// kinds:
//   caching  block pool with split and merge within segments, small/large pools, best fit,
//            requests rounded to 512 B (PyTorch's CUDACachingAllocator design);
//   async    cudaMallocAsync on a dedicated pool with its release threshold set (cuda backend);
//            on cpu/dry it is modelled (see alloc.c);
//   raw      one cudaMalloc / cudaFree per request (reserved == allocated, rounded to 512 B).
// Memory comes from the backend: cudaMalloc (cuda), aligned malloc (cpu), a fake address space
// that is never touched (dry). The caching logic is the same on all three, so dry peaks are real.
#ifndef MEMOPT_ALLOC_H
#define MEMOPT_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include "../kernels/backend.h"
#include "../kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_alloc_kind { MO_ALLOC_CACHING = 0, MO_ALLOC_ASYNC, MO_ALLOC_RAW } mo_alloc_kind;

// What a tensor is for: the memory-by-category columns of the CSV.
typedef enum mo_category {
    MO_CAT_PARAM = 0,
    MO_CAT_GRAD,
    MO_CAT_OPTIM,
    MO_CAT_MASTER,
    MO_CAT_ACTIVATION,
    MO_CAT_WORKSPACE,
    MO_CAT_COUNT
} mo_category;

const char *mo_alloc_kind_name(mo_alloc_kind k);
mo_status mo_alloc_kind_parse(const char *s, mo_alloc_kind *out);
const char *mo_category_name(mo_category c);

// A memory cap as given on the command line: none, a fraction of device memory, or bytes.
typedef struct mo_cap {
    int kind;        // 0 none, 1 fraction, 2 bytes
    double fraction; // kind 1: in (0, 1]
    uint64_t bytes;  // kind 2
} mo_cap;

// "none", "0.5", "24GiB", "512MiB", "1.5GB", "123456" (bytes). Error names --cap.
mo_status mo_cap_parse(const char *s, mo_cap *out);
// Resolve against the device's total memory: 0 means no cap.
uint64_t mo_cap_resolve(const mo_cap *cap, uint64_t device_total_bytes);
// Sizes: "24GiB" "512MiB" "4KiB" "1.5GB" "100" (bytes); flag names the flag in the message.
mo_status mo_size_parse(const char *s, const char *flag, uint64_t *out);
// Human form into buf, e.g. "1.50 GiB".
const char *mo_format_bytes(uint64_t bytes, char *buf, size_t n);

typedef struct mo_alloc_stats {
    uint64_t allocated_bytes;      // sum of live block sizes (rounded)
    uint64_t reserved_bytes;       // sum of segment sizes held from the backend
    uint64_t peak_allocated_bytes;
    uint64_t peak_reserved_bytes;
    uint64_t requested_bytes;      // sum of live request sizes (unrounded)
    uint64_t allocated_by_cat[MO_CAT_COUNT];
    uint64_t peak_by_cat[MO_CAT_COUNT]; // each category's own peak
    uint64_t at_peak_by_cat[MO_CAT_COUNT]; // each category's bytes at the moment of peak_allocated_bytes
    uint64_t num_allocs, num_frees;
    uint64_t num_segments;         // current
    uint64_t num_segment_allocs, num_segment_frees; // calls to the backend
    uint64_t num_ooms;
    uint64_t num_alloc_retries;    // cache flushed and retried after a failed segment allocation
    uint64_t inactive_split_bytes; // free bytes inside segments that also hold live blocks
    uint64_t largest_free_block;   // largest free block in the cache (0 for raw)
    uint64_t cap_bytes;            // 0: no cap
} mo_alloc_stats;

typedef struct mo_allocator mo_allocator;

// cap_bytes 0 means no cap. stream: the cudaStream_t for async (NULL: the default stream).
mo_status mo_allocator_create(mo_allocator **out, mo_alloc_kind kind, mo_backend_kind backend,
                              uint64_t cap_bytes, void *stream);
// Host memory for offloaded state (--offload optimizer): a raw allocator (one block per request,
// rounded to 512 B as the device's) whose memory is pinned host memory on cuda (cudaHostAlloc, so the
// copies run at full PCIe speed), aligned malloc on cpu and fake addresses on dry, as for the device.
// Its categories are the tensors' own (optim, master, grad staging); its peak is the run's host_bytes.
mo_status mo_allocator_create_host(mo_allocator **out, mo_backend_kind backend);
// The same of another kind: caching for --offload activations, whose blocks come and go every step
// (pinned segments kept, as the device's, instead of a cudaHostAlloc per block). Not async.
mo_status mo_allocator_create_host_kind(mo_allocator **out, mo_alloc_kind kind, mo_backend_kind backend);
// The bytes a live block was requested with (0 for a pointer not allocated here).
size_t mo_alloc_requested_bytes(const mo_allocator *a, const void *ptr);
void mo_allocator_destroy(mo_allocator *a); // frees every segment; live blocks are a leak and are reported

// 256-byte aligned device pointer for at least `bytes` (bytes 0 gives a valid 512-byte block).
// On failure: MO_ERR_OOM with "tried to allocate X; cap Y; allocated A; reserved R; largest free block L"
// and the allocator unchanged but for num_ooms (and cache flushes, counted in num_alloc_retries).
mo_status mo_alloc(mo_allocator *a, size_t bytes, mo_category cat, void **ptr);
mo_status mo_free(mo_allocator *a, void *ptr); // NULL is a no-op; an unknown pointer is MO_ERR_INTERNAL
mo_status mo_empty_cache(mo_allocator *a);     // return every wholly free segment to the backend

void mo_allocator_stats(const mo_allocator *a, mo_alloc_stats *out);
void mo_allocator_reset_peaks(mo_allocator *a); // peaks := current values
mo_backend_kind mo_allocator_backend(const mo_allocator *a);
mo_alloc_kind mo_allocator_kind(const mo_allocator *a);
// The stream whose order frees follow (async): the context sets its own stream here.
void mo_allocator_set_stream(mo_allocator *a, void *stream);

// Allocation trace (what torch.cuda.memory._record_memory_history records): with a hook set, every
// successful mo_alloc and mo_free calls it once, after the allocator's books are updated, so
// allocated_after / reserved_after include the event. The model labels the events: the op about to
// run and the step's phase (mo_alloc_trace_mark), the tensor the next mo_alloc is for
// (mo_alloc_trace_tensor). Off (hook NULL) by default: then the labels cost a NULL test.
typedef enum mo_trace_kind { MO_TRACE_ALLOC = 0, MO_TRACE_FREE, MO_TRACE_OP, MO_TRACE_OP_END, MO_TRACE_PHASE } mo_trace_kind;
typedef struct mo_alloc_event {
    mo_trace_kind kind;
    const char *label;        // alloc: the tensor ("" unnamed); op: "mo_layernorm_forward_mixed(x, ...)"
                              // as written at the call; phase: "forward", "backward", "recompute", "optimizer"
    uintptr_t ptr;            // alloc, free
    uint64_t bytes;           // alloc, free: the block's size (the request rounded to 512 B), as allocated counts it
    int cat;                  // alloc, free: mo_category
    uint64_t allocated_after, reserved_after;
} mo_alloc_event;
typedef void (*mo_alloc_trace_fn)(void *user, const mo_alloc_event *e);
void mo_allocator_set_trace(mo_allocator *a, mo_alloc_trace_fn fn, void *user); // fn NULL: off
int mo_allocator_tracing(const mo_allocator *a);
// label must outlive the call only (the hook copies what it keeps).
void mo_alloc_trace_mark(mo_allocator *a, mo_trace_kind kind, const char *label);
void mo_alloc_trace_tensor(mo_allocator *a, const char *name); // names the next mo_alloc's block

// A torch.cuda.memory_summary()-style text report into buf (always NUL-terminated).
void mo_memory_summary(const mo_allocator *a, char *buf, size_t n);

// Debug walk for tests: calls fn for every block (segment base, block ptr, size, in use, category).
typedef void (*mo_block_visitor)(void *user, uintptr_t seg_base, uint64_t seg_size, uintptr_t ptr,
                                 uint64_t size, int in_use, int cat);
void mo_allocator_visit(const mo_allocator *a, mo_block_visitor fn, void *user);

// Fault injection, for the tests and MEMOPT_FAIL_ALLOC=k (README, knobs): the k-th mo_alloc call
// (1-based) counted over every allocator of the process from this call fails with MO_ERR_OOM and the
// allocator's own out-of-memory message ("... (injected fault: allocation k)"), as the cap would;
// the calls before and after it are served. k 0 disarms. The counter is atomic: with the ranks of a
// split as threads, exactly one rank gets the failure. MEMOPT_FAIL_ALLOC is read by the first
// mo_allocator_create of the process.
void mo_alloc_fail_at(uint64_t k);
uint64_t mo_alloc_calls(void);          // mo_alloc calls since the last mo_alloc_fail_at (or start)
uint64_t mo_alloc_faults_injected(void); // faults injected since the process started

// Process-wide accounting over every allocator, live or destroyed, for leak tests: bytes allocated
// and reserved now (a destroyed allocator gives its segments back), and the bytes of live blocks
// that mo_allocator_destroy found (a leak; 0 when every tensor was freed).
typedef struct mo_alloc_global {
    uint64_t allocated_bytes, reserved_bytes, leaked_bytes;
    uint64_t live_allocators;
} mo_alloc_global;
void mo_alloc_global_stats(mo_alloc_global *out);

#ifdef __cplusplus
}
#endif

#endif
