// The cost trace: every op dispatch (kernels/ops.h, ops_mixed*.h, the memsets of ctx.h) records its
// name, class, FLOPs and bytes into the context, on every backend (cuda, cpu, dry), so the dry run of
// a step yields the step's exact op list, recompute included, for the planner's roofline
// (bench/planner_roofline.c sums over it). The decisions that change what runs (which attention
// kernel, how many causal chunks, fused epilogues) are taken by the dispatchers and the model, and
// recorded by them as they take them: nothing restates the schedule.
//
// Off unless asked (mo_cost_trace_attach): then each dispatch costs one test of ctx->trace. On, an op
// appends one entry (a few stores; the array grows by doubling).
//
// FLOPs and bytes are first-order counts from the shapes (each op's comment in cost.c says what it
// counts): for a GEMM 2*M*N*K and its operands once; for a memory-bound op what it reads and writes.
#ifndef MEMOPT_COST_H
#define MEMOPT_COST_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// What rate an op runs at: GEMM (cuBLAS / tensor cores, the score kernel), convolution, the fused
// attention kernels (their own rate: tensor cores in 16 bits, CUDA cores in fp32), a library's fused
// attention kernel (ATTENTION_LIB: cuDNN's SDPA, at a rate of its own), memory-bound
// (elementwise, norms, softmax, loss, optimizer, device copies). The rest is not device compute but what
// --offload adds to the step, which the planner times at the host link and host rates:
//   HOST_COPY  a synchronous copy between device and host memory (the compute stream waits for all of
//              it): bytes over the host link (the offloaded update's gradients down, weights back up);
//   HOST       work done by the CPU (the offloaded AdamW and its cast): bytes of host memory traffic;
//   COPY_OUT, COPY_BACK  a copy on the copy stream (kernels/copy_stream.h), device to host and back:
//              bytes over the host link, beside the compute stream; ref is its ticket;
//   COPY_JOIN  where the compute stream waits for copy ref (no bytes): the ops between a copy and its
//              join are the compute it can hide behind.
typedef enum mo_cost_class {
    MO_COST_GEMM = 0, MO_COST_CONV, MO_COST_ATTENTION, MO_COST_ATTENTION_LIB, MO_COST_MEMORY, MO_COST_HOST_COPY,
    MO_COST_HOST, MO_COST_COPY_OUT, MO_COST_COPY_BACK, MO_COST_COPY_JOIN, MO_COST_COUNT
} mo_cost_class;
const char *mo_cost_class_name(mo_cost_class c);

// Which part of the step an op belongs to, as the model says (ctx->cost_region): the planner's split
// model divides the body over the ranks and keeps the head (on the last stage, replicated over its tp
// ranks) and the optimizer apart.
typedef enum mo_cost_region { MO_COST_BODY = 0, MO_COST_HEAD, MO_COST_OPTIMIZER, MO_COST_REGIONS } mo_cost_region;

typedef struct mo_cost_op {
    const char *name;     // static string: "matmul_fwd", "attn_scores", ...
    unsigned char cls;    // mo_cost_class
    unsigned char prof;   // mo_prof_cat the model had begun (ctx->prof_cat): --profile's category
    unsigned char region; // mo_cost_region
    int ref;              // COPY_OUT, COPY_BACK, COPY_JOIN: the copy's ticket (mo_copy_async); else -1
    double flops, bytes;
} mo_cost_op;

typedef struct mo_cost_trace {
    mo_cost_op *ops;
    size_t n, cap;
    int overflow; // host memory ran out: entries were dropped (the trace is incomplete)
} mo_cost_trace;

// t (owned by the caller, zeroed or reset) receives c's ops from now on; NULL detaches.
void mo_cost_trace_attach(mo_ctx *c, mo_cost_trace *t);
void mo_cost_trace_reset(mo_cost_trace *t); // n = 0, keeps the memory
void mo_cost_trace_free(mo_cost_trace *t);

void mo_cost_record_(mo_ctx *c, const char *name, mo_cost_class cls, double flops, double bytes, int ref);
static inline void mo_cost_record(mo_ctx *c, const char *name, mo_cost_class cls, double flops, double bytes) {
    if (c->trace) mo_cost_record_(c, name, cls, flops, bytes, -1);
}
// A copy on the copy stream or its join (COPY_OUT, COPY_BACK, COPY_JOIN), naming the copy's ticket.
static inline void mo_cost_record_copy(mo_ctx *c, const char *name, mo_cost_class cls, double bytes, int ticket) {
    if (c->trace) mo_cost_record_(c, name, cls, 0, bytes, ticket);
}
static inline void mo_cost_set_region(mo_ctx *c, mo_cost_region r) { c->cost_region = (int)r; }

// ---- the composite ops' costs (cost.c), called by their dispatchers; e = bytes per activation ----
// out (N,OC) = inp (N,C) W^T (+ gelu_out written, + add read)
void mo_cost_matmul_forward(mo_ctx *c, int e, int N, int C, int OC, int gelu_out, int add);
// dinp (when has_dinp; + gelu_pre read when dgelu), dweight (fp32 +=), dbias (when has_dbias)
void mo_cost_matmul_backward(mo_ctx *c, int e, int N, int C, int OC, int has_dinp, int has_dbias, int dgelu);
// The materialized attention as attention_materialized.cu runs it for this context: the GEMM form
// (mo_attn_gemm_mode), the causal chunks (mo_attn_chunk_rows), the fp32 score kernel on its tiles
// (attention_scores_cuda_supported) and, backward, the softmax backward in the datt kernel (given the
// forward's out).
void mo_cost_attention_forward(mo_ctx *c, int e, int B, int T, int C, int NH);
void mo_cost_attention_backward(mo_ctx *c, int e, int B, int T, int C, int NH, int have_out);
// The fused (flash-style) kernels: one forward over the causal tiles; backward D, then the dk/dv and
// the dq kernels, each recomputing the scores.
void mo_cost_attention_fused_forward(mo_ctx *c, int e, int B, int T, int C, int NH);
void mo_cost_attention_fused_backward(mo_ctx *c, int e, int B, int T, int C, int NH);
// cuDNN's fused SDPA (attention_cudnn.h): one forward kernel, one backward kernel
void mo_cost_attention_cudnn_forward(mo_ctx *c, int e, int B, int T, int C, int NH);
void mo_cost_attention_cudnn_backward(mo_ctx *c, int e, int B, int T, int C, int NH);
// the blocked-GEMM fused attention on fp32 data (attention_fused_gemm.h), forward (backward 0) or backward
void mo_cost_attention_fused_gemm(mo_ctx *c, int backward, int B, int T, int C, int NH);

// The share of the T x T products computed when the queries run in blocks of r rows, block [i0, i1)
// over keys [0, i1): sum of rows * i1 over T^2.
double mo_cost_block_share(int T, int r);

#ifdef __cplusplus
}
#endif

#endif
