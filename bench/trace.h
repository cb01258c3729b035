// The allocation trace of one training step (memopt run --trace FILE): every allocation and free
// the step makes, in order, with the op it belongs to, the tensor, its category and bytes, and the
// allocator's allocated / reserved bytes after it. The memopt counterpart of PyTorch's
// torch.cuda.memory._record_memory_history + memory_viz; `memopt plot TRACE.csv [TRACE2.csv]` draws it.
//
// Attribution: an allocation inside an op (its scratch) is that op's; one between ops belongs to
// the op that runs next (the one that writes the tensor); a free to the op running or last run (the
// tensor's last reader). Ops are numbered from 1 in the step;
// op_index 0 is what happens before the first op. The phase (forward, backward, recompute,
// optimizer) is the model's own marking (models/gpt_step.c).
//
// The file: a comment line "# memopt trace: <configuration>; <device>; step <k>", then CSV with the
// header of mo_trace_header(): first one row per category with event 0 and action "live" (its bytes
// allocated when the step starts; allocated_after the total then), then the step's events, 1, 2, ... The same configuration gives the same file on every backend (cuda,
// cpu, dry), but for that first line: the allocator is the same and the model makes the same requests.
#ifndef MEMOPT_BENCH_TRACE_H
#define MEMOPT_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/status.h"
#include "strategies/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_trace mo_trace;

// Starts recording a's events (a's trace hook; one trace per allocator at a time).
mo_status mo_trace_begin(mo_allocator *a, mo_trace **out);
// Stops recording and frees the trace (NULL is a no-op).
void mo_trace_end(mo_trace *t);
size_t mo_trace_events(const mo_trace *t); // allocations and frees recorded
// Writes the trace to path (its folder created); title goes on the comment line.
mo_status mo_trace_write(const mo_trace *t, const char *path, const char *title);

const char *mo_trace_header(void);

#ifdef __cplusplus
}
#endif
#endif
