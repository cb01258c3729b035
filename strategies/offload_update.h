// The offloaded optimizer's update (--offload optimizer; mo_sched_optim's host_grads): the gradients go
// to the host, the CPU reference AdamW runs there on m, v (and a 16-bit run's fp32 master), the weights
// come back. The same code and data as the device update, so the weights come out bit-identical.
//
// By default the whole update runs in order: the copies synchronous on the context's stream, the host
// work over MO_OFFLOAD_THREADS_DEFAULT threads (the planner's host rate knows the count: bench/planner.h).
// Two knobs, recorded in the row like every MEMOPT_* knob (an offload optimizer row always records its
// thread count, the default's too: rows made before 8 became the default, in session 12, ran one thread
// and carry none):
//   MEMOPT_OFFLOAD_CHUNK=N    the update in chunks of N parameters, pipelined on the copy stream
//                             (kernels/copy_stream.c): chunk i+2's gradients (and fp32 weights) go down
//                             while the host updates chunk i, whose weights go back while it does i+1;
//                             the compute stream joins the last copy back. offload_copy_ms / _stall_ms of
//                             the row give the copies' busy time and the host's and stream's waits.
//   MEMOPT_OFFLOAD_THREADS=T  the host AdamW (and the cast of a 16-bit run) split over T threads, each a
//                             contiguous range: element-wise, so the same bits for any T. The default, 8,
//                             is what the H100 machine measured best: GPT-2 124M's offloaded step took
//                             842.9 / 765.3 ms in fp32 on one thread, 280.3 / 276.0 on 8; bf16 829.7 /
//                             836.8 and 179.1 / 185.3 (results/h100-offload-update-9c8d5df.csv).
#ifndef MEMOPT_OFFLOAD_UPDATE_H
#define MEMOPT_OFFLOAD_UPDATE_H

#include "strategies/schedule.h"

// MEMOPT_OFFLOAD_THREADS when unset
#define MO_OFFLOAD_THREADS_DEFAULT 8

#ifdef __cplusplus
extern "C" {
#endif

// One AdamW step t of the offloaded state (o->host_grads set), gradients multiplied by scale.
mo_status mo_offload_update(const mo_sched_optim *o, int step, float scale);

// The threads that run a host range of n elements at T asked: a count set by MEMOPT_OFFLOAD_THREADS
// (count_set) as it is, at most n; the default 8 only as far as each thread gets 64 Ki elements (a model
// under 512 Ki parameters runs fewer; its row still records the default's 8). Bits never depend on it.
int mo_offload_threads_for(size_t n, int T, int count_set);

// The knobs as read (for the summary and tests): chunk 0 = the whole update in order; threads >= 1.
// A value that is not a positive integer (threads: 1..256) is an error naming the variable.
mo_status mo_offload_knobs(size_t *chunk, int *threads);

#ifdef __cplusplus
}
#endif
#endif
