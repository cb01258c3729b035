// A second stream for independent work inside one op: forked from the compute stream (it starts after
// everything enqueued there so far) and joined back before the op returns, so nothing after the op can
// see the side's work unfinished, and the allocator's stream-ordered reuse of the op's inputs stays safe.
// Used by the 16-bit GEMM backward (MEMOPT_DBIAS_SIDE): the bias gradients' column sums, memory-bound,
// under the dinp and dweight GEMMs, compute-bound, that read the same output gradient.
//   cuda: a non-blocking stream and two events, made at the first fork and kept with the context
//   cpu / dry: the fork hands back the compute stream (NULL) and the join does nothing
#ifndef MEMOPT_SIDE_STREAM_H
#define MEMOPT_SIDE_STREAM_H

#include "ctx.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

// A non-blocking stream and two events marking where work begins and ends on it (the side stream's fork and
// join here, the zeroing stream's ready and done in zero_side.c), made together: on failure nothing is left
// made, and *se stays zeroed. cuda builds only; destroy drains the stream first (teardown: its statuses have no
// caller to go to) and zeroes *se.
typedef struct mo_stream_events {
    void *stream, *ev_begin, *ev_end; // cudaStream_t, cudaEvent_t (timing off) x 2
} mo_stream_events;
mo_status mo_stream_events_make(mo_stream_events *se, const char *what);
void mo_stream_events_destroy(mo_stream_events *se);

// *stream (a cudaStream_t) waits for everything enqueued on c->stream so far. One fork at a time: a
// second fork before the join is refused (MO_ERR_INVALID).
mo_status mo_side_fork(mo_ctx *c, void **stream);
// c->stream waits for everything enqueued on the side stream so far (nothing when no fork is open).
mo_status mo_side_join(mo_ctx *c);
// mo_ctx_destroy calls it: the side stream drained, its stream and events destroyed.
void mo_side_destroy(mo_ctx *c);

// Test hooks (gpu_gpt_mixed): each fork holds the side stream back delay_us (a spin kernel) before the caller's
// work; skip_join leaves the compute stream not waiting (a negative control only).
typedef struct mo_side_test {
    int delay_us, skip_join;
} mo_side_test;
extern mo_side_test mo_side_testing;

#ifdef __cplusplus
}
#endif
#endif
