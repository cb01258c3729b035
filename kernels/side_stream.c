// A side stream forked from and joined to the compute stream (side_stream.h).
#include "side_stream.h"

#include <stdlib.h>
#include "copy_stream.h" // mo_copy_spin_cuda: the test hook
#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda_check.h"
#endif

mo_side_test mo_side_testing;

struct mo_side_stream {
    mo_stream_events se; // ev_begin on the compute stream at the fork, ev_end on the side stream at the join
    int open;            // forked, not joined yet
};

#ifdef MEMOPT_HAVE_CUDA
mo_status mo_stream_events_make(mo_stream_events *se, const char *what) {
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&e0, cudaEventDisableTiming);
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&e1, cudaEventDisableTiming);
    if (r != cudaSuccess) {
        if (e1) cudaEventDestroy(e1);
        if (e0) cudaEventDestroy(e0);
        if (s) cudaStreamDestroy(s);
        return MO_FAIL(MO_ERR_CUDA, "%s and its events: %s", what, cudaGetErrorString(r));
    }
    se->stream = s, se->ev_begin = e0, se->ev_end = e1;
    return MO_OK;
}

void mo_stream_events_destroy(mo_stream_events *se) {
    if (se->stream) {
        cudaStreamSynchronize((cudaStream_t)se->stream);
        cudaStreamDestroy((cudaStream_t)se->stream);
    }
    if (se->ev_begin) cudaEventDestroy((cudaEvent_t)se->ev_begin);
    if (se->ev_end) cudaEventDestroy((cudaEvent_t)se->ev_end);
    se->stream = se->ev_begin = se->ev_end = NULL;
}

// Made at the first fork; attached to the context only once the stream and events exist.
static mo_status side_make(mo_ctx *c) {
    if (c->side) return MO_OK;
    struct mo_side_stream *z = calloc(1, sizeof *z);
    if (!z) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the side stream");
    const mo_status st = mo_stream_events_make(&z->se, "the side stream");
    if (st != MO_OK) {
        free(z);
        return st;
    }
    c->side = z;
    return MO_OK;
}
#endif

mo_status mo_side_fork(mo_ctx *c, void **stream) {
    *stream = c->stream;
    if (c->backend != MO_BACKEND_CUDA) return MO_OK;
#ifdef MEMOPT_HAVE_CUDA
    MO_TRY(side_make(c));
    struct mo_side_stream *z = c->side;
    if (z->open) return MO_FAIL(MO_ERR_INVALID, "side stream: forked twice without a join");
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)z->se.ev_begin, (cudaStream_t)c->stream));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)z->se.stream, (cudaEvent_t)z->se.ev_begin, 0));
    // before open: a failure leaves no fork behind
    if (mo_side_testing.delay_us > 0) MO_TRY(mo_copy_spin_cuda(z->se.stream, mo_side_testing.delay_us));
    z->open = 1;
    *stream = z->se.stream;
    return MO_OK;
#else
    return MO_FAIL(MO_ERR_UNSUPPORTED, "side stream: this build has no CUDA");
#endif
}

mo_status mo_side_join(mo_ctx *c) {
#ifdef MEMOPT_HAVE_CUDA
    struct mo_side_stream *z = c->side;
    if (!z || !z->open) return MO_OK;
    z->open = 0;
    if (mo_side_testing.skip_join) return MO_OK;
    cudaError_t r = cudaEventRecord((cudaEvent_t)z->se.ev_end, (cudaStream_t)z->se.stream);
    if (r == cudaSuccess) r = cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)z->se.ev_end, 0);
    if (r != cudaSuccess) {
        // the host waits for the side stream instead, so the order holds whatever the error
        cudaError_t r2 = cudaStreamSynchronize((cudaStream_t)z->se.stream);
        return MO_FAIL(MO_ERR_CUDA, "side stream join: %s%s%s", cudaGetErrorString(r),
                       r2 != cudaSuccess ? "; its synchronize: " : "", r2 != cudaSuccess ? cudaGetErrorString(r2) : "");
    }
#else
    (void)c;
#endif
    return MO_OK;
}

void mo_side_destroy(mo_ctx *c) {
    struct mo_side_stream *z = c->side;
    if (!z) return;
#ifdef MEMOPT_HAVE_CUDA
    mo_stream_events_destroy(&z->se);
#endif
    free(z);
    c->side = NULL;
}
