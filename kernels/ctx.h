// The runtime context every op takes: which backend, the allocator that serves every device byte,
// and (cuda) the stream and library handles. One context per rank.
#ifndef MEMOPT_CTX_H
#define MEMOPT_CTX_H

#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "status.h"
#include "../strategies/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MO_DBIAS_NARROW = 0, MO_DBIAS_WIDE = 1, MO_DBIAS_LT = 2, MO_DBIAS_GELU = 3 }; // mo_ctx.dbias_mode

// cuBLASLt workspace: taken from the allocator (category workspace) on every backend, so the dry
// backend's peak includes it exactly. 32 MiB is what cuBLASLt's heuristics want for Hopper GEMMs. It is
// also cuDNN's budget and the im2col chunks' (conv.h). A model may have another default budget
// (mo_model_ops.workspace_mib: the ResNet's convolutions want more), and MEMOPT_WORKSPACE_MIB sets
// another (ctx.c).
#define MO_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
#define MO_WORKSPACE_MIB_MAX 65536

typedef struct mo_profiler mo_profiler;
typedef struct mo_lt_cache mo_lt_cache; // lt_gemm_cuda.c
typedef struct mo_dnn_cache mo_dnn_cache; // conv_cuda.c
typedef struct mo_attn_dnn_cache mo_attn_dnn_cache; // attention_cudnn_cuda.c
struct mo_cost_trace;                    // cost.h

enum { MO_CONV_IMPLICIT_OFF = 0, MO_CONV_IMPLICIT_AUTO = 1, MO_CONV_IMPLICIT_ALWAYS = 2 }; // ctx->conv_implicit
enum { MO_CONV_TILE_DEFAULT = 0, MO_CONV_TILE_128X64 = 1, MO_CONV_TILE_128X128 = 2 }; // conv_implicit_tile

// One cached one-wave launch of the 16-bit LayerNorm backward (mo_ctx.ln_wave)
typedef struct mo_ln_wave {
    const void *kern;
    int threads;
    size_t smem;
    int blocks;
} mo_ln_wave;

typedef struct mo_ctx {
    mo_backend_kind backend;
    mo_allocator *alloc;  // not owned
    int tf32;             // fp32 GEMMs may use TF32 tensor cores
    void *stream;         // cudaStream_t (cuda)
    void *cublaslt;       // cublasLtHandle_t (cuda)
    void *cublas;         // cublasHandle_t (cuda), its workspace set to gemm_ws
    void *gemm_ws;        // gemm_ws_bytes (MO_GEMM_WORKSPACE_BYTES or the model's budget, unless
                          // MEMOPT_WORKSPACE_MIB) from alloc
    size_t gemm_ws_bytes;
    mo_profiler *prof;    // NULL unless profiling (mo_prof_enable)
    // ---- added fields (keep the ones above in place: other code relies on them) ----
    // A context and everything it caches belong to one thread at a time (the local communicator gives
    // each rank its own context): nothing below is locked.
    mo_lt_cache *lt_cache;        // cuBLASLt plans per GEMM shape (lt_gemm_cuda.c): lazily, cuda only
    mo_allocator *host_alloc;     // not owned; NULL unless offloading (mo_allocator_create_host)
    void *stage_host;             // pinned host buffer of mo_stage_* (cudaHostAlloc; malloc on cpu)
    size_t stage_bytes;
    void *stage_event;            // cudaEvent_t recorded after the last upload out of stage_host
    int attn_chunk_rows;          // materialized attention, causal skipping: query rows per chunk;
                                  // 0 = the default of mo_attn_chunk_rows (tests set others)
    int fuse_epilogues;           // whether the GPT step fuses the residual adds and the GELU backward into
                                  // its GEMMs (ops.h's mo_matmul_forward_add / _backward_dgelu): -1 (the
                                  // default) in 16 bits only, 1 always, 0 never; MEMOPT_FUSE_EPILOGUES=1 / 0
                                  // in the environment sets it (to measure). Why 16 bits only: on the H200
                                  // at 8527a69 the fused fp32 / tf32 GEMMs were slower than the kernels they
                                  // replaced (fp32 step 157.6 ms fused, 156.2 unfused; GEMM time 130.6 vs
                                  // 128.0), while in bf16 the GEMMs grew 0.6 ms and 1.0 ms of elementwise
                                  // kernels went (step 20.5 fused, 21.1 unfused): docs/perf-notes.md
    long epilogue_fallbacks;      // fused GEMMs (residual C input, DGELU, 16-bit BGRADB) that cuBLASLt had no algorithm
                                  // for and that ran unfused (tests read it to see which path ran)
    int attn_gemm;                // materialized attention, how its batched GEMMs run (MO_ATTN_GEMM_*):
                                  // 0 = the default of mo_attn_gemm_mode; MEMOPT_ATTN_GEMM=strided |
                                  // batched in the environment sets it (to measure)
    int attn_own_scores;          // materialized attention in fp32 without TF32: the score and datt GEMMs
                                  // run on attention_scores.cu's kernel (1, the default) or on cuBLAS (0);
                                  // MEMOPT_ATTN_SCORES=own | cublas in the environment sets it (to measure)
    int attn_fuse_dpre;           // with own scores and the forward's out: the softmax backward in the datt
                                  // kernel's epilogue (1, the default) or its own row kernel (0);
                                  // MEMOPT_ATTN_DPRE=0 in the environment sets 0 (to measure)
    int attn_tf32;                // fused fp32 attention under ctx->tf32: the TF32 tensor-core kernels
                                  // (attention_fused_tf32.h; 1, the default) or the fp32 CUDA-core ones (0);
                                  // MEMOPT_ATTN_TF32=0 in the environment sets 0 (to measure)
    int attn_fused32;             // fused attention on fp32 data (fp32 and tf32): blocked cuBLAS GEMMs
                                  // (MO_ATTN_FUSED32_GEMM, 0, the default: attention_fused_gemm.h) or the
                                  // flash kernels (MO_ATTN_FUSED32_OWN); MEMOPT_ATTN_FUSED32=gemm | own sets
                                  // it; another value fails mo_ctx_create
    int attn_fused_rows;          // tests: query rows a chunk of the blocked-GEMM fused attention (0: the
                                  // default of mo_attn_fused_gemm_rows)
    int ce_loop;                  // fp32 cross-entropy: 1 = the loop kernel (two reads of each row) even
                                  // where the register kernel fits; MEMOPT_CE=loop sets it (to measure)
    int gemm_table;               // cuBLASLt GEMMs take the stored algorithm choices (lt_table.h) where one
                                  // matches (1, the default); MEMOPT_GEMM_TABLE=0 sets 0 (to measure)
    int gemm_tune;                // MEMOPT_GEMM_TUNE=1: every new cuBLASLt plan that can be rerun without
                                  // changing its result times the heuristic's top candidates and prints a
                                  // table line for the fastest (lt_gemm_cuda.c); the run then uses it.
                                  // 2: also each algorithm id's own top configurations (a wider search);
                                  // 3: also every tile and stage count of those ids (an enumeration)
    struct mo_cost_trace *trace;  // the cost trace (cost.h): NULL (the default) records nothing
    int prof_cat;                 // the mo_prof_cat of the last mo_prof_begin (profiling on or off): the
                                  // trace's per-op category, for --profile's predicted time beside measured
    int cost_region;              // mo_cost_region the model is in (cost.h)
    mo_dnn_cache *dnn;            // the cuDNN handle and its execution plans per convolution (conv_cuda.c):
                                  // lazily, at the first cuDNN op; cuda only
    int conv_tune;                // MEMOPT_CONV_TUNE=1: every new convolution plan times its deterministic
                                  // candidates that fit the workspace and prints a table line (conv_cuda.c)
    int conv_table;               // convolutions take the stored engine choices (conv_table.h) where one
                                  // matches (1, the default); MEMOPT_CONV_TABLE=0 sets 0
    int conv_dgrad_cudnn;         // fp32 input gradients on cuDNN's backward-data engine (1;
                                  // MEMOPT_CONV_DGRAD=cudnn) instead of GEMMs or a forward convolution with
                                  // the flipped filter (0, the default: conv_cuda.c says why)
    int conv_gemm;                // which fp32 convolutions run as cuBLASLt GEMMs (conv_cuda.c says why):
                                  // MO_CONV_GEMM_AUTO (the default) the 1x1 stride-1 ones as they are and
                                  // the others' passes through im2col where that measured faster;
                                  // MO_CONV_GEMM_ALL (=all) every pass of them through im2col in the
                                  // workspace; MO_CONV_GEMM_1X1
                                  // (MEMOPT_CONV_GEMM=1x1) the 1x1 stride-1 ones only; MO_CONV_GEMM_NONE
                                  // (MEMOPT_CONV_GEMM=0) none, all on cuDNN
    int conv_wgrad_split;         // fp32 weight gradients through im2col split over row slabs, one strided
                                  // batched GEMM a chunk (1, the default; conv_cuda.c col_wgrad_slabs says
                                  // why); MEMOPT_CONV_WGRAD_SPLIT=0 sets 0 (one GEMM a chunk)
    int conv_implicit;            // fp32 convolutions other than 1x1 (no TF32): the forward, and the stride-1
                                  // input gradient as the flipped filter's forward, on the suite's implicit-
                                  // GEMM kernel: MO_CONV_IMPLICIT_AUTO (the default) where it measured faster
                                  // (conv_cuda.c conv_is_implicit), _ALWAYS (tests) wherever it takes the
                                  // shape; MEMOPT_CONV_IMPLICIT=0 sets _OFF (im2col GEMMs, as before)
    int conv_dgrad_chunk;         // tests: at most this many images a chunk of the fp32 input gradients that
                                  // run in chunks (im2col's and the strided ones; conv_cuda.c; 0: as many as
                                  // the workspace takes)
    int conv_col_rows;            // tests: at most this many rows a chunk of im2col's forward and weight
                                  // gradient (conv_cuda.c; 0: as many as the workspace takes)
    long conv_col_runs[3];        // tests: the convolution passes (MO_CONV_FWD, _BWD_DATA, _BWD_FILTER) that
                                  // ran as im2col GEMMs, so a silent fallback to cuDNN shows
    long conv_implicit_runs;      // tests: convolutions run on the implicit-GEMM kernel (conv_implicit.cu)
    int conv_implicit_tile;       // tests: the implicit-GEMM kernel's tiles (MO_CONV_TILE_*; 0, the default:
                                  // 128 x 128 where K % 128 == 0, else 128 x 64), to time and compare them
    long conv_dgrad_add_chunked;  // tests: input gradients added to din (mo_conv_backward_data_add) through
                                  // image chunks in the workspace, not in the pass's epilogue (conv_cuda.c)
    int conv_dgrad_add;           // the ResNet's shortcut gradient added in a convolution's input gradient
                                  // (1, the default: mo_conv_backward_data_add); MEMOPT_DGRAD_ADD=0 sets 0
                                  // (a residual-add pass of its own)
    int recompute_tail;           // the ResNet's checkpointed segment keeps its last block's output (the next
                                  // segment's input or the head's) through its recompute, which then runs only
                                  // the convolutions that block's backward reads (1, the default);
                                  // MEMOPT_RECOMPUTE_TAIL=0 sets 0 (freed, and rebuilt with the rest)
    int conv_add16_beta1;         // mo_conv_backward_data_add in 16 bits on cuDNN's beta-1 plans (1, the
                                  // default), or tests: 0, through chunks in the workspace (conv_cuda.c)
    int conv_force_rank;          // tests: every new cuDNN plan runs the kept candidate of this rank (the
                                  // stored choices and tuning ignored; MO_ERR_UNSUPPORTED when fewer are
                                  // kept); -1, the default: off
    long conv_last_engine;        // tests: the global index of the engine of the last cuDNN plan run (-1)
    long maxpool_two_pass_runs;   // tests: max pool backwards that ran the two-pass kernels (pool.cu)
    int maxpool_two_pass;         // the max pool's backward through argmax bytes in the workspace (1, the
                                  // default), or its one-pass scan (0; tests, to compare: pool.cu)
    int ln_loop;                  // 16-bit LayerNorm on the loop kernels (1; MEMOPT_LN=loop), not the register ones
    int ln_bwd_wave;              // 16-bit LayerNorm backward in one wave of resident blocks (1, the default), or in
                                  // layernorm_backward_blocks(N) blocks (0; MEMOPT_LN_WAVE=0): layernorm_mixed.cu
    // The last one-wave block count (blocks: blocks an SM fits x SMs) and the kernel, block size and shared
    // memory it was found for (layernorm_mixed.cu; the plain backward's, which the summing one takes too): the
    // occupancy query runs once a shape, not on every backward. Zeroed by mo_ctx_create.
    mo_ln_wave ln_wave;
    int ln_dsum;                  // GPT's 16-bit projection bias gradients summed by the LayerNorm backward that
                                  // makes their output gradient (1, the default; MEMOPT_LN_DSUM=0: by the GEMMs'
                                  // bias-gradient kernels): models/gpt_step.c, mo_layernorm_backward_sum_mixed
    long ln_dsum_runs;            // tests: summing LayerNorm backwards run (mo_layernorm_backward_sum_mixed, any backend)
    int dbias_mode;               // 16-bit GEMM bias gradients (MEMOPT_DBIAS): MO_DBIAS_WIDE (the default since
                                  // session 36) the kernel of 16-byte loads staged by cp.async, MO_DBIAS_NARROW
                                  // the 2-byte-load one (the same bits), MO_DBIAS_LT cuBLASLt's BGRADB epilogue on
                                  // the dweight GEMM (other bits: its own summation order), MO_DBIAS_GELU the
                                  // narrow kernel but for the GPT MLP's fc bias, summed in the fcproj dinp GEMM's
                                  // DGELU_BGRAD epilogue (mo_matmul_backward_dgelu_bsum_mixed)
    int bn_cudnn;                 // batch norm on cuDNN's legacy calls (1; MEMOPT_BN=cudnn) instead of the
                                  // suite's own kernels (0, the default: batchnorm.cu says why)
    int attn_impl;                // 16-bit fused attention: the suite's own kernels (MO_ATTN_IMPL_OWN, 0, the
                                  // default) or cuDNN's fused SDPA (MO_ATTN_IMPL_CUDNN: attention_cudnn.h);
                                  // MEMOPT_ATTN_IMPL=own | cudnn sets it (to measure); another value fails
                                  // mo_ctx_create
    int mark_lib_writes;          // MEMOPT_MARK_LIB_WRITES=1 (compute-sanitizer initcheck only): what a cuBLAS,
                                  // cuBLASLt or cuDNN call writes is cleared first (lib_writes.h says why)
    mo_attn_dnn_cache *attn_dnn;  // the cuDNN attention plans per shape (attention_cudnn_cuda.c): lazily, cuda only
    int offload_act;              // --offload activations: the schedule keeps checkpointed segments' inputs in
                                  // host_alloc between their forward and their recompute (schedule.h)
    struct mo_copy_engine *copy;  // the copy stream and its events (copy_stream.h): lazily, at the first copy
    struct mo_zero_side *zero_side; // the gradients' zeroing stream (zero_side.h): lazily, cuda only
    int zero_side_on;             // MEMOPT_ZERO_SIDE=1 (default 0: it gained nothing, session 32): the gradients cleared on a side stream
    struct mo_side_stream *side;  // the side stream of one op (side_stream.h): lazily, cuda only
    int dbias_side;               // MEMOPT_DBIAS_SIDE: the 16-bit GEMM backward's bias kernels on the side stream,
                                  // under its GEMMs: 0 no (the default), 1 launched before the GEMMs, 2 after them,
                                  // 3 with the dweight GEMM on the side too (on side_ws)
    void *side_ws;                // MEMOPT_DBIAS_SIDE=3: a second GEMM workspace of gemm_ws_bytes from alloc (every
                                  // backend, so the dry peak stays exact); NULL otherwise
} mo_ctx;

// mo_ctx.conv_gemm's values (MEMOPT_CONV_GEMM 0, 1x1, all, unset or auto).
#define MO_CONV_GEMM_NONE 0
#define MO_CONV_GEMM_1X1 1
#define MO_CONV_GEMM_ALL 2
#define MO_CONV_GEMM_AUTO 3

// How the materialized attention's batched GEMMs reach cuBLAS (attention_materialized.cu explains):
//   STRIDED  q, k, v (and dy, dq, dk, dv) permuted to head-major copies; strided batched, a launch per chunk
//   BATCHED  operands read and written in place in qkv, out, dqkv through per-problem pointer arrays
//            (no permutes); a launch per chunk
// Default BATCHED: on the H200 at 8ced659 (tools/gpu_session.sh stage attnab, GPT-2 124M B 8, medians of
// 10 steps, two interleaved rounds) the fp32 step took 154.73 / 154.79 ms batched against 156.30 /
// 156.41 strided, bf16 20.09 / 19.88 against 20.58 / 20.58.
#define MO_ATTN_GEMM_STRIDED 1
#define MO_ATTN_GEMM_BATCHED 2
#ifndef MO_ATTN_GEMM_DEFAULT_F32
#define MO_ATTN_GEMM_DEFAULT_F32 MO_ATTN_GEMM_BATCHED
#endif
#ifndef MO_ATTN_GEMM_DEFAULT_16
#define MO_ATTN_GEMM_DEFAULT_16 MO_ATTN_GEMM_BATCHED
#endif
static inline int mo_attn_gemm_mode(const mo_ctx *c, int elem_bytes) {
    if (c->attn_gemm == MO_ATTN_GEMM_STRIDED || c->attn_gemm == MO_ATTN_GEMM_BATCHED) return c->attn_gemm;
    return elem_bytes == 4 ? MO_ATTN_GEMM_DEFAULT_F32 : MO_ATTN_GEMM_DEFAULT_16;
}

// Causal skipping in the materialized attention (attention_materialized.cu): the T queries are
// cut into chunks of mo_attn_chunk_rows(c, T) rows, and the chunk [i0, i1) computes only keys [0, i1)
// (the probabilities of later keys are exact zeros). Default: MO_ATTN_CAUSAL_CHUNKS_F32 chunks for
// fp32 (elem_bytes 4), MO_ATTN_CAUSAL_CHUNKS_16 for fp16/bf16, their length rounded up to a multiple of
// MO_ATTN_CHUNK_ALIGN rows (so every sub-matrix pointer stays 16-byte aligned and the chunks match
// cuBLAS's 64/128 tiles; T <= 64 is one chunk, as before). Measured on the H200 at 5951f35bc59c (tests/
// gpu_attention_chunks.c, B 8, T 1024, NH 12, HS 64; forward + backward per layer, medians of 7;
// results/h200-gputest.log):
// fp32 1 chunk 2.63 ms, 2: 2.33, 4: 2.12, 8: 2.44, 16: 2.82; bf16 1: 0.868, 2: 0.817, 4: 0.843,
// 8: 0.912, 16: 1.152. Re-measured with the register row kernels (8527a69): fp32 2.46 / 2.13 / 1.96 /
// 2.26 / 2.66, bf16 0.671 / 0.624 / 0.653 / 0.709 / 1.148: the same best counts.
// Fewer FLOPs with more chunks, but each chunk's batched GEMMs fill the GPU less.
// Those counts are for B*NH = 96 matrices per batched GEMM; with fewer (a small micro-batch under
// --accum, a tp rank's share of the heads) each chunk's GEMM fills the GPU less, so the count is scaled
// by B*NH / 96 (rounded, at least 1: B 2 x NH 12 runs unchunked, as before chunking, where the
// 8-chunk version had made the accum-4 step 10% slower: 185.7 -> 204.9 ms).
// Build-time override: -DMO_ATTN_CAUSAL_CHUNKS_F32=N / _16=N in CMAKE_CUDA_FLAGS.
#ifndef MO_ATTN_CAUSAL_CHUNKS_F32
#define MO_ATTN_CAUSAL_CHUNKS_F32 4
#endif
#ifndef MO_ATTN_CAUSAL_CHUNKS_16
#define MO_ATTN_CAUSAL_CHUNKS_16 2
#endif
#define MO_ATTN_CHUNK_ALIGN 64
#define MO_ATTN_CHUNK_REF_BATCH 96
static inline int mo_attn_chunk_rows(const mo_ctx *c, int T, int elem_bytes, int batch) {
    int r;
    if (c->attn_chunk_rows > 0) {
        r = c->attn_chunk_rows;
    } else {
        int n = elem_bytes == 4 ? MO_ATTN_CAUSAL_CHUNKS_F32 : MO_ATTN_CAUSAL_CHUNKS_16;
        n = (int)(((long long)n * batch + MO_ATTN_CHUNK_REF_BATCH / 2) / MO_ATTN_CHUNK_REF_BATCH);
        if (n < 1) n = 1;
        if (n > T) n = T;
        r = (T + n - 1) / n;
        r = (r + MO_ATTN_CHUNK_ALIGN - 1) / MO_ATTN_CHUNK_ALIGN * MO_ATTN_CHUNK_ALIGN;
    }
    return r < T ? r : T;
}

// Creates the stream and handles (cuda) and takes the GEMM workspace from alloc: MO_GEMM_WORKSPACE_BYTES,
// or MEMOPT_WORKSPACE_MIB's.
mo_status mo_ctx_create(mo_ctx **out, mo_backend_kind backend, mo_allocator *alloc);
// The same with another default budget, ws_bytes (a model's: mo_model_ops.workspace_mib); MEMOPT_WORKSPACE_MIB
// still overrides it.
mo_status mo_ctx_create_ws(mo_ctx **out, mo_backend_kind backend, mo_allocator *alloc, size_t ws_bytes);
void mo_ctx_destroy(mo_ctx *c); // gives the workspace back to alloc

mo_status mo_ctx_sync(mo_ctx *c); // wait for the stream (cuda); no-op elsewhere

// Device memory helpers: no-ops on dry (there are no bytes), memcpy/memset on cpu.
mo_status mo_memcpy_h2d(mo_ctx *c, void *dst, const void *src, size_t bytes);
mo_status mo_memcpy_d2h(mo_ctx *c, void *dst, const void *src, size_t bytes); // synchronous
mo_status mo_memcpy_d2d(mo_ctx *c, void *dst, const void *src, size_t bytes);
mo_status mo_memset_zero(mo_ctx *c, void *dst, size_t bytes);

// Step timing: CUDA events on the stream (cuda), a monotonic host clock elsewhere.
typedef struct mo_timer {
    void *ev_start, *ev_stop; // cudaEvent_t
    double host_start;
    double host_ms; // elapsed, once stopped (non-cuda backends)
} mo_timer;
mo_status mo_timer_init(mo_ctx *c, mo_timer *t);
mo_status mo_timer_start(mo_ctx *c, mo_timer *t);
mo_status mo_timer_stop(mo_ctx *c, mo_timer *t, double *ms); // waits for the stream
// Marks the end without waiting (several intervals can be queued in one step), then reads it.
mo_status mo_timer_mark_stop(mo_ctx *c, mo_timer *t);
mo_status mo_timer_elapsed(mo_ctx *c, mo_timer *t, double *ms); // waits for the stop mark
void mo_timer_destroy(mo_timer *t);

double mo_host_ms(void); // monotonic clock, milliseconds

// Where the time goes: device time per class of op, from a pair of CUDA events around each op
// (host clock on cpu). Off by default; when on, each op costs two event records.
typedef enum mo_prof_cat {
    MO_PROF_GEMM = 0, MO_PROF_ATTENTION, MO_PROF_NORM, MO_PROF_ELEMENTWISE, MO_PROF_LOSS, MO_PROF_OPTIMIZER, MO_PROF_COUNT
} mo_prof_cat;
const char *mo_prof_name(mo_prof_cat c);
mo_status mo_prof_enable(mo_ctx *c);
mo_status mo_prof_begin(mo_ctx *c, mo_prof_cat cat); // no-op when profiling is off
mo_status mo_prof_end(mo_ctx *c);
// Adds the time recorded since the last collect to ms[] (waits for the device) and starts afresh.
mo_status mo_prof_collect(mo_ctx *c, double ms[MO_PROF_COUNT]);

// Asynchronous host-to-device upload through a staging buffer the context owns (pinned host memory on
// cuda, so the copy is truly asynchronous and nothing waits for the stream):
//   mo_stage_begin(c, bytes, &host)  a host buffer of at least bytes; it waits only until the previous
//                                    upload out of it has been copied (an event), never for the stream
//   ... fill host[0 .. bytes) ...
//   mo_stage_upload(c, dst, bytes)   enqueues the copy to device dst on c->stream and returns
// One buffer: each begin is followed by its upload before the next begin. cpu: upload is a memcpy;
// dry: nothing is copied. The buffer is freed by mo_ctx_destroy.
mo_status mo_stage_begin(mo_ctx *c, size_t bytes, void **host);
mo_status mo_stage_upload(mo_ctx *c, void *dst, size_t bytes);

// Scratch for an op: taken from the allocator as category workspace (on dry too, so peaks match).
// Dispatchers call these around the backend call; bytes 0 gives NULL and no allocation.
mo_status mo_scratch_alloc(mo_ctx *c, size_t bytes, void **ptr);
mo_status mo_scratch_free(mo_ctx *c, void *ptr);

#ifdef __cplusplus
}
#endif

#endif
