// Encoder kernels. Forward adapted from karpathy/llm.c (train_gpt2_fp32.cu, encoder_forward_kernel3:
// float4 loads of wte/wpe rows). Backward replaces llm.c's atomicAdd kernel with a deterministic one:
// positions are grouped by token on the host, then one block per distinct token sums its dout rows in
// increasing position order, which is exactly the cpu reference's order of float additions. The
// grouping goes up through the context's pinned staging buffer (mo_stage_begin / mo_stage_upload,
// ctx.h): an asynchronous copy, so the backward never waits for the stream.
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda_check.h"
#include "encoder.h"

static inline int enc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static inline unsigned enc_block_for(int cols) { // threads per block for a row of `cols` items
    int b = (cols + 31) / 32 * 32;
    return (unsigned)(b > 256 ? 256 : b);
}

// ---- forward: out (B,T,C); grid (B*T rows, column chunks), one thread per float4 (or float) ----
__global__ void encoder_forward_vec4(float4 *out, const int *inp, const float4 *wte, const float4 *wpe, int T,
                                     int C4) {
    size_t bt = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C4) return;
    int t = (int)(bt % (size_t)T);
    float4 w = wte[(size_t)inp[bt] * C4 + c];
    float4 p = wpe[(size_t)t * C4 + c];
    out[bt * C4 + c] = make_float4(w.x + p.x, w.y + p.y, w.z + p.z, w.w + p.w);
}

__global__ void encoder_forward_scalar(float *out, const int *inp, const float *wte, const float *wpe, int T, int C) {
    size_t bt = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int t = (int)(bt % (size_t)T);
    out[bt * C + c] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
}

extern "C" mo_status encoder_forward_cuda(mo_ctx *c, float *out, const int *inp, const float *wte, const float *wpe,
                                          int B, int T, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 4 == 0 && enc_aligned16(out) && enc_aligned16(wte) && enc_aligned16(wpe);
    int cols = vec ? C / 4 : C;
    unsigned block = enc_block_for(cols);
    dim3 grid((unsigned)((size_t)B * T), (unsigned)((cols + (int)block - 1) / (int)block));
    if (vec)
        encoder_forward_vec4<<<grid, block, 0, s>>>((float4 *)out, inp, (const float4 *)wte, (const float4 *)wpe, T,
                                                    cols);
    else
        encoder_forward_scalar<<<grid, block, 0, s>>>(out, inp, wte, wpe, T, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// ---- backward ----
// dwte: grid (U distinct tokens, column chunks). Block u adds the dout rows order[start[u]..start[u+1])
// to row token[u] of dwte, one add per row in that fixed order (no atomics, no race: each dwte row
// belongs to one block).
__global__ void encoder_backward_wte_vec4(float4 *dwte, const float4 *dout, const int *order, const int *start,
                                          const int *token, int C4) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C4) return;
    int beg = start[u], end = start[u + 1];
    float4 *dst = dwte + (size_t)token[u] * C4 + c;
    float4 acc = *dst;
#pragma unroll 4
    for (int k = beg; k < end; k++) {
        float4 d = dout[(size_t)order[k] * C4 + c];
        acc.x += d.x;
        acc.y += d.y;
        acc.z += d.z;
        acc.w += d.w;
    }
    *dst = acc;
}

__global__ void encoder_backward_wte_scalar(float *dwte, const float *dout, const int *order, const int *start,
                                            const int *token, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int beg = start[u], end = start[u + 1];
    float *dst = dwte + (size_t)token[u] * C + c;
    float acc = *dst;
#pragma unroll 4
    for (int k = beg; k < end; k++) acc += dout[(size_t)order[k] * C + c];
    *dst = acc;
}

// dwpe (T,C): grid (T, column chunks); dwpe[t] += dout[b,t] for b = 0..B-1 in order.
__global__ void encoder_backward_wpe_vec4(float4 *dwpe, const float4 *dout, int B, int T, int C4) {
    int t = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C4) return;
    float4 *dst = dwpe + (size_t)t * C4 + c;
    float4 acc = *dst;
    for (int b = 0; b < B; b++) {
        float4 d = dout[((size_t)b * T + t) * C4 + c];
        acc.x += d.x;
        acc.y += d.y;
        acc.z += d.z;
        acc.w += d.w;
    }
    *dst = acc;
}

__global__ void encoder_backward_wpe_scalar(float *dwpe, const float *dout, int B, int T, int C) {
    int t = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *dst = dwpe + (size_t)t * C + c;
    float acc = *dst;
    for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + c];
    *dst = acc;
}

// Host grouping: a stable counting sort of positions by token into host[] (the scratch layout of
// encoder.h), with next[] (V + 1 ints, zeroed here) for the counts. Returns the number of distinct
// tokens in *U.
static mo_status encoder_group_tokens(int *host, int *next, const int *inp_host, int BT, int V, int *U) {
    int *order = host, *start = host + BT, *token = host + 2 * BT + 1;
    memset(next, 0, ((size_t)V + 1) * sizeof(int)); // counts, then the next free slot per token
    for (int p = 0; p < BT; p++) {
        int tok = inp_host[p];
        if (tok < 0 || tok >= V)
            return MO_FAIL(MO_ERR_INVALID, "encoder_backward: token %d at position %d is outside [0, %d)", tok, p, V);
        next[tok + 1]++;
    }
    int u = 0;
    for (int v = 0; v < V; v++) {
        if (next[v + 1] > 0) {
            start[u] = next[v];
            token[u] = v;
            u++;
        }
        next[v + 1] += next[v]; // next[v] = first slot of token v
    }
    start[u] = BT;
    for (int p = 0; p < BT; p++) order[next[inp_host[p]]++] = p;
    *U = u;
    return MO_OK;
}

// Groups inp_host into the staging buffer and enqueues its upload into scratch (the layout of
// encoder.h) on c->stream, without waiting: the kernels that read scratch follow on the same stream,
// and the staging buffer is not rewritten before this copy has run (mo_stage_begin waits for it).
// *U = number of distinct tokens. Used by both backwards (fp32 here, 16-bit in encoder_mixed.cu).
extern "C" mo_status encoder_backward_group_cuda(mo_ctx *c, void *scratch, const int *inp_host, int B, int T, int V,
                                                 int *U) {
    if (!inp_host) return MO_FAIL(MO_ERR_INVALID, "encoder_backward: the cuda kernel needs inp_host");
    if ((size_t)B * T > (size_t)INT32_MAX / 3)
        return MO_FAIL(MO_ERR_INVALID, "encoder_backward: B*T=%zu too large", (size_t)B * T);
    const size_t ints = encoder_backward_scratch_ints(B, T);
    // staging: the grouping (uploaded), then the counts (host only)
    void *stage = NULL;
    MO_TRY(mo_stage_begin(c, (ints + (size_t)V + 1) * sizeof(int), &stage));
    int *host = (int *)stage;
    MO_TRY(encoder_group_tokens(host, host + ints, inp_host, B * T, V, U));
    return mo_stage_upload(c, scratch, ints * sizeof(int));
}

extern "C" mo_status encoder_backward_cuda(mo_ctx *c, float *dwte, float *dwpe, const float *dout,
                                           const int *inp_host, void *scratch, int B, int T, int C, int V) {
    int U = 0;
    MO_TRY(encoder_backward_group_cuda(c, scratch, inp_host, B, T, V, &U));
    const int BT = B * T; // bounded by encoder_backward_group_cuda
    const int *order = (const int *)scratch, *start = order + BT, *token = order + 2 * BT + 1;
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 4 == 0 && enc_aligned16(dwte) && enc_aligned16(dwpe) && enc_aligned16(dout);
    int cols = vec ? C / 4 : C;
    unsigned block = enc_block_for(cols);
    unsigned chunks = (unsigned)((cols + (int)block - 1) / (int)block);
    if (vec) {
        encoder_backward_wte_vec4<<<dim3((unsigned)U, chunks), block, 0, s>>>((float4 *)dwte, (const float4 *)dout,
                                                                              order, start, token, cols);
        CUDA_CHECK_LAUNCH();
        encoder_backward_wpe_vec4<<<dim3((unsigned)T, chunks), block, 0, s>>>((float4 *)dwpe, (const float4 *)dout, B,
                                                                              T, cols);
        CUDA_CHECK_LAUNCH();
    } else {
        encoder_backward_wte_scalar<<<dim3((unsigned)U, chunks), block, 0, s>>>(dwte, dout, order, start, token, C);
        CUDA_CHECK_LAUNCH();
        encoder_backward_wpe_scalar<<<dim3((unsigned)T, chunks), block, 0, s>>>(dwpe, dout, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
    return MO_OK;
}
