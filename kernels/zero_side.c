// Zeroing on a side stream (zero_side.h).
#include "zero_side.h"
#include "copy_stream.h" // mo_copy_spin_cuda: the test hook
#include "cost.h"
#include "side_stream.h" // mo_stream_events

#include <stdlib.h>
#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda_check.h"
#endif

mo_zero_side_test mo_zero_side_testing;

struct mo_zero_side {
    mo_stream_events se; // ev_begin on the compute stream (where it stood at the begin), ev_end on the side
                         // stream (after the memset)
    int pending;         // a clear not joined yet
    int done_lost;       // ev_end's record failed: the join synchronizes the side stream instead
};

#ifdef MEMOPT_HAVE_CUDA
// The context's side stream and events (side_stream.h), made at the first use; attached to the context only
// once all three exist (a failure leaves nothing half made behind, and the next call tries again).
static mo_status side_of(mo_ctx *c, struct mo_zero_side **out) {
    if (!c->zero_side) {
        struct mo_zero_side *z = calloc(1, sizeof *z);
        if (!z) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the zeroing stream");
        const mo_status st = mo_stream_events_make(&z->se, "the zeroing stream");
        if (st != MO_OK) {
            free(z);
            return st;
        }
        c->zero_side = z;
    }
    *out = c->zero_side;
    return MO_OK;
}
#endif

mo_status mo_zero_side_begin(mo_ctx *c, void *dst, size_t bytes) {
    MO_TRY(mo_zero_side_join(c)); // first, also when the knob was turned off with a clear still pending
    if (c->backend != MO_BACKEND_CUDA || !c->zero_side_on) return mo_memset_zero(c, dst, bytes);
#ifdef MEMOPT_HAVE_CUDA
    mo_cost_record(c, "memset", MO_COST_MEMORY, 0, (double)bytes); // as mo_memset_zero records it
    struct mo_zero_side *z = NULL;
    MO_TRY(side_of(c, &z));
    cudaStream_t s = (cudaStream_t)z->se.stream;
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)z->se.ev_begin, (cudaStream_t)c->stream));
    if (!mo_zero_side_testing.skip_ready) CUDA_CHECK(cudaStreamWaitEvent(s, (cudaEvent_t)z->se.ev_begin, 0));
    if (mo_zero_side_testing.delay_us > 0) MO_TRY(mo_copy_spin_cuda(s, mo_zero_side_testing.delay_us));
    CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s));
    // pending from the memset on: a failed record below still leaves it to the join, which then waits for
    // the whole side stream (the event may not mark it)
    z->pending = 1;
    cudaError_t r = cudaEventRecord((cudaEvent_t)z->se.ev_end, s);
    if (r != cudaSuccess) {
        z->done_lost = 1;
        return MO_FAIL(MO_ERR_CUDA, "cudaEventRecord (the zeroing stream's end): %s", cudaGetErrorString(r));
    }
    return MO_OK;
#else
    return MO_FAIL(MO_ERR_UNSUPPORTED, "zeroing stream: this build has no CUDA");
#endif
}

mo_status mo_zero_side_join(mo_ctx *c) {
#ifdef MEMOPT_HAVE_CUDA
    struct mo_zero_side *z = c->zero_side;
    if (!z || !z->pending) return MO_OK;
    if (mo_zero_side_testing.skip_join) {
        z->pending = 0;
        return MO_OK;
    }
    // pending until the wait is in place: a failed one is tried again by the next join
    if (z->done_lost) CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)z->se.stream)); // the host waits instead
    else CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)z->se.ev_end, 0));
    z->pending = 0, z->done_lost = 0;
#else
    (void)c;
#endif
    return MO_OK;
}

void mo_zero_side_destroy(mo_ctx *c) {
    struct mo_zero_side *z = c->zero_side;
    if (!z) return;
#ifdef MEMOPT_HAVE_CUDA
    mo_stream_events_destroy(&z->se);
#endif
    free(z);
    c->zero_side = NULL;
}
