// Zeroing a buffer on a stream of its own: the gradient buffer of a step on the schedule (GPT's, the
// MLP's; fp32, as long as the rank's share of the gradients) is cleared at the step's start, a
// memory-bound pass the compute stream would otherwise wait for before the forward. On the side stream it runs under the forward (which never touches the gradients),
// ordered after everything enqueued on the compute stream before it (the last step's optimizer reads
// the gradients), and the compute stream joins it before the first gradient write (the first backward).
//   cuda: a non-blocking stream and two events, made at the first use and kept with the context
//   cpu / dry: mo_memset_zero at once; the join does nothing
// Off by default: measured on an H100 (session 32, results/h100-zeroside-fb3679b.csv), the bf16 GPT-2 124M step
// took 16.85 / 16.74 ms with it against 16.71 / 16.70 without (interleaved, medians of 20 steps): nothing
// gained. MEMOPT_ZERO_SIDE=1 (ctx.c reads it) turns it on; off, mo_zero_side_begin clears on the compute
// stream (mo_memset_zero) and the join does nothing.
#ifndef MEMOPT_ZERO_SIDE_H
#define MEMOPT_ZERO_SIDE_H

#include <stddef.h>
#include "ctx.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

// Clears bytes at dst; the cost trace records it as mo_memset_zero does. At most one is pending at a
// time: a second begin joins the first.
mo_status mo_zero_side_begin(mo_ctx *c, void *dst, size_t bytes);
// The compute stream waits for the pending clear from here on (nothing when none is pending).
mo_status mo_zero_side_join(mo_ctx *c);
// mo_ctx_destroy calls it: the side stream drained, its stream and events destroyed.
void mo_zero_side_destroy(mo_ctx *c);

// Test hooks (tests/gpu_gpt.c; cuda only, all 0 in every run of memopt): delay_us spins the side stream
// that long before each clear, so that it lands late on purpose; skip_join makes mo_zero_side_join a no-op
// (the negative control: the backward then accumulates into gradients the clear has not reached yet, and
// the clear lands in the middle of it, so the test must see other gradients); skip_ready lets the clear
// start without waiting for the compute stream (the negative control of the other order: a read of the
// gradients enqueued on the compute stream before the clear then sees zeros).
typedef struct mo_zero_side_test {
    int delay_us, skip_join, skip_ready;
} mo_zero_side_test;
extern mo_zero_side_test mo_zero_side_testing;

#ifdef __cplusplus
}
#endif

#endif
