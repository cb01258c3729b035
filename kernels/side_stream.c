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
    void *stream;   // cudaStream_t, non-blocking
    void *ev_fork;  // on the compute stream: where it stood at the fork
    void *ev_join;  // on the side stream: where it stood at the join
    int open;       // forked, not joined yet
};

#ifdef MEMOPT_HAVE_CUDA
// Made at the first fork; attached to the context only once all three exist.
static mo_status side_make(mo_ctx *c) {
    if (c->side) return MO_OK;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&e0, cudaEventDisableTiming);
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&e1, cudaEventDisableTiming);
    struct mo_side_stream *z = r == cudaSuccess ? calloc(1, sizeof *z) : NULL;
    if (!z) {
        if (e1) cudaEventDestroy(e1);
        if (e0) cudaEventDestroy(e0);
        if (s) cudaStreamDestroy(s);
        if (r != cudaSuccess) return MO_FAIL(MO_ERR_CUDA, "the side stream and its events: %s", cudaGetErrorString(r));
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the side stream");
    }
    z->stream = s, z->ev_fork = e0, z->ev_join = e1;
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
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)z->ev_fork, (cudaStream_t)c->stream));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)z->stream, (cudaEvent_t)z->ev_fork, 0));
    if (mo_side_testing.delay_us > 0) MO_TRY(mo_copy_spin_cuda(z->stream, mo_side_testing.delay_us)); // before open: a failure leaves no fork behind
    z->open = 1;
    *stream = z->stream;
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
    cudaError_t r = cudaEventRecord((cudaEvent_t)z->ev_join, (cudaStream_t)z->stream);
    if (r == cudaSuccess) r = cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)z->ev_join, 0);
    if (r != cudaSuccess) {
        // the host waits for the side stream instead, so the order holds whatever the error
        cudaError_t r2 = cudaStreamSynchronize((cudaStream_t)z->stream);
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
    if (z->stream) {
        cudaStreamSynchronize((cudaStream_t)z->stream);
        cudaStreamDestroy((cudaStream_t)z->stream);
    }
    if (z->ev_fork) cudaEventDestroy((cudaEvent_t)z->ev_fork);
    if (z->ev_join) cudaEventDestroy((cudaEvent_t)z->ev_join);
#endif
    free(z);
    c->side = NULL;
}
