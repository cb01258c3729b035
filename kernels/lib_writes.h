// MEMOPT_MARK_LIB_WRITES=1 (ctx->mark_lib_writes), for compute-sanitizer initcheck only
// (tools/gpu_sanitize.sh sets it there): before a cuBLAS, cuBLASLt or cuDNN call, the output it writes in
// full is cleared by a kernel of ours on the context's stream (lib_writes_zero.cu says why not
// cudaMemset2DAsync); the libraries' workspace once, when the context is made (ctx.c).
//
// Why: initcheck does not see the stores of those libraries' Hopper kernels (they store through TMA), so
// without the mark it reports every read of ours of their output as a read of uninitialized memory (the
// known class of docs/DESIGN.md), hundreds of thousands a run, at about 0.13 ms a report (session 13:
// 448319 reports in 59 s, 1088696 in 141 s). The mark covers exactly the
// call's output (the rows a column-major GEMM writes, not the gap up to its leading dimension), so a read
// of ours outside what the library wrote is still reported. The exception, said where it is made: the
// materialized attention's score rows are marked whole (the softmax loads the 16-byte vector holding the
// diagonal and uses only the columns up to it).
// Off (every timed run, the default), or on the cpu and dry backends, the calls cost a branch.
#ifndef MEMOPT_LIB_WRITES_H
#define MEMOPT_LIB_WRITES_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// Clears rows x width_bytes at p, rows pitch_bytes apart (pitch_bytes >= width_bytes; any pitch when rows
// is 1), when c->mark_lib_writes; nothing when p is NULL or the region is empty.
mo_status mo_mark_lib_write(mo_ctx *c, const void *p, size_t pitch_bytes, size_t width_bytes, size_t rows);
// The same on stream (a library call on another stream than c->stream: side_stream.h)
mo_status mo_mark_lib_write_on(mo_ctx *c, void *stream, const void *p, size_t pitch_bytes, size_t width_bytes,
                               size_t rows);

// The clearing kernel (lib_writes_zero.cu; cuda builds): rows x width bytes at p zeroed on stream, rows
// pitch bytes apart (any pitch when rows is 1; a pitch below the width is refused as invalid).
mo_status mo_lib_write_zero_cuda(void *stream, void *p, size_t pitch_bytes, size_t width_bytes, size_t rows);

#ifdef __cplusplus
}
#endif

#endif
