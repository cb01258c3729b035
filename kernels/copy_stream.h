// Copies between device and host memory on a stream of their own (--offload activations): the schedule
// moves a checkpointed segment's input to pinned host memory during forward and back before the
// segment's recompute. Each copy starts after the work enqueued on the compute stream (c->stream) so
// far and is joined into it where its result is needed (or, device -> host, before its source is freed),
// so compute and copies overlap in between. Per step it measures the copy stream's busy time and the
// time the compute stream stalled at the joins: overlap = 1 - stall / copy.
//   cuda: a non-blocking stream and CUDA events (created at the first copy, kept with the context)
//   cpu:  memcpy at once, timed on the host clock; nothing overlaps (the stall is the copy time)
//   dry:  nothing is copied; the bytes are counted
#ifndef MEMOPT_COPY_STREAM_H
#define MEMOPT_COPY_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include "ctx.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

// What the copies since the last collect cost.
typedef struct mo_copy_stats {
    double copy_ms;  // summed busy time of the copies (cuda: events on the copy stream)
    double stall_ms; // summed time the compute stream waited at the joins
    uint64_t bytes;  // bytes copied, both directions
    int copies;
} mo_copy_stats;

// Enqueues bytes from src to dst (to_host 1: device -> host, 0: host -> device) on the copy stream,
// ordered after everything enqueued on c->stream so far; *ticket names it for mo_copy_join. On cuda the
// host side must be pinned (the host allocator's memory is).
mo_status mo_copy_async(mo_ctx *c, void *dst, const void *src, size_t bytes, int to_host, int *ticket);
// The same for the offloaded optimizer's update (strategies/offload_update.c): recorded in the cost trace
// as a host copy (MO_COST_HOST_COPY) named `name`, which the planner times apart from the copy stream's
// activation copies (those are hidden behind the compute between copy and join; the update's behind
// the host's work).
mo_status mo_copy_async_update(mo_ctx *c, void *dst, const void *src, size_t bytes, int to_host, const char *name,
                               int *ticket);
// The compute stream waits for copy `ticket` from here on (its wait is timed as stall).
mo_status mo_copy_join(mo_ctx *c, int ticket);
// The host waits for copy `ticket` (its wait, on the host clock, is added to the stall): the offloaded
// update reads a chunk's gradients on the host once they have arrived.
mo_status mo_copy_wait_host(mo_ctx *c, int ticket);
// Waits for every copy and drops the records since the last collect (after a failure: nothing may still
// write into memory about to be freed, and the failed step's figures are not wanted).
mo_status mo_copy_sync(mo_ctx *c);
// Adds the figures of the copies since the last collect to *out (waits for them) and starts afresh;
// tickets are not valid across a collect.
mo_status mo_copy_collect(mo_ctx *c, mo_copy_stats *out);
// mo_ctx_destroy calls it, before the compute stream goes.
void mo_copy_destroy(mo_ctx *c);

// Test hooks (tests/gpu_offload_act.c; cuda only, all 0 in every run of memopt): delay_us spins the copy
// stream that long before each copy, so copies land late; poison fills each host -> device destination
// with 0xFF bytes (NaN in every float type) on the compute stream before its copy, so reading it before
// the copy is joined gives NaN; skip_out_joins makes mo_copy_join a no-op for device -> host copies (the
// negative control: the device block is then freed and reused while its late copy still reads it, so the
// host gets other bytes and the test must see wrong numbers; host -> device joins stay, so no late copy
// writes into a block that was freed and given to another tensor).
typedef struct mo_copy_test {
    int delay_us, poison, skip_out_joins;
} mo_copy_test;
extern mo_copy_test mo_copy_testing;
#ifdef MEMOPT_HAVE_CUDA
mo_status mo_copy_spin_cuda(void *stream, int us); // copy_stream_spin.cu
#endif

#ifdef __cplusplus
}
#endif
#endif
