// The offloaded optimizer's update (--offload optimizer; mo_sched_optim's host_grads): the gradients go
// to the host, the CPU reference AdamW runs there on m, v (and a 16-bit run's fp32 master), the weights
// come back. The same code and data as the device update, so the weights come out bit-identical.
//
// By default the whole update runs in order: the copies synchronous on the context's stream, the host
// work on one thread (what the planner times: MO_PLAN_HOST_GBS is one core's rate). Two knobs, recorded
// in the row like every MEMOPT_* knob, try the overlapped form before it becomes the default (it is
// measured against this one on a GPU first):
//   MEMOPT_OFFLOAD_CHUNK=N    the update in chunks of N parameters, pipelined on the copy stream
//                             (kernels/copy_stream.c): chunk i+2's gradients (and fp32 weights) go down
//                             while the host updates chunk i, whose weights go back while it does i+1;
//                             the compute stream joins the last copy back. offload_copy_ms / _stall_ms of
//                             the row give the copies' busy time and the host's and stream's waits.
//   MEMOPT_OFFLOAD_THREADS=T  the host AdamW (and the cast of a 16-bit run) split over T threads, each a
//                             contiguous range: element-wise, so the same bits for any T.
#ifndef MEMOPT_OFFLOAD_UPDATE_H
#define MEMOPT_OFFLOAD_UPDATE_H

#include "strategies/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

// One AdamW step t of the offloaded state (o->host_grads set), gradients multiplied by scale.
mo_status mo_offload_update(const mo_sched_optim *o, int step, float scale);

// The knobs as read (for the summary and tests): chunk 0 = the whole update in order; threads >= 1.
// A value that is not a positive integer (threads: 1..256) is an error naming the variable.
mo_status mo_offload_knobs(size_t *chunk, int *threads);

#ifdef __cplusplus
}
#endif
#endif
