// Encoder kernels. Forward adapted from karpathy/llm.c (train_gpt2_fp32.cu, encoder_forward_kernel3:
// float4 loads of wte/wpe rows). Backward replaces llm.c's atomicAdd kernel with a deterministic one:
// positions are grouped by token on the host, then one block per distinct token sums its dout rows in
// increasing position order, which is exactly the cpu reference's order of float additions.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
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
// encoder.h). Returns the number of distinct tokens in *U.
static mo_status encoder_group_tokens(int *host, const int *inp_host, int BT, int V, int *U) {
    int *order = host, *start = host + BT, *token = host + 2 * BT + 1;
    int *next = (int *)calloc((size_t)V + 1, sizeof(int)); // counts, then the next free slot per token
    if (!next) return MO_FAIL(MO_ERR_OOM, "encoder_backward: host out of memory for %d token counts", V);
    for (int p = 0; p < BT; p++) {
        int tok = inp_host[p];
        if (tok < 0 || tok >= V) {
            free(next);
            return MO_FAIL(MO_ERR_INVALID, "encoder_backward: token %d at position %d is outside [0, %d)", tok, p, V);
        }
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
    free(next);
    *U = u;
    return MO_OK;
}

static mo_status encoder_upload(mo_ctx *c, void *dst, const int *host, size_t ints) {
    cudaStream_t s = (cudaStream_t)c->stream;
    CUDA_CHECK(cudaMemcpyAsync(dst, host, ints * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s)); // host[] is freed next
    return MO_OK;
}

// The host grouping and its upload alone, for the mixed-precision backward (encoder_mixed.cu): fills
// scratch as encoder_backward_cuda does and returns the number of distinct tokens in *U.
extern "C" mo_status encoder_backward_group_cuda(mo_ctx *c, void *scratch, const int *inp_host, int B, int T, int V,
                                                 int *U) {
    if (!inp_host) return MO_FAIL(MO_ERR_INVALID, "encoder_backward: the cuda kernel needs inp_host");
    if ((size_t)B * T > (size_t)INT32_MAX / 3)
        return MO_FAIL(MO_ERR_INVALID, "encoder_backward: B*T=%zu too large", (size_t)B * T);
    size_t ints = encoder_backward_scratch_ints(B, T);
    int *host = (int *)malloc(ints * sizeof(int));
    if (!host) return MO_FAIL(MO_ERR_OOM, "encoder_backward: host out of memory for the token grouping");
    mo_status st = encoder_group_tokens(host, inp_host, B * T, V, U);
    if (st == MO_OK) st = encoder_upload(c, scratch, host, ints);
    free(host);
    return st;
}

extern "C" mo_status encoder_backward_cuda(mo_ctx *c, float *dwte, float *dwpe, const float *dout,
                                           const int *inp_host, void *scratch, int B, int T, int C, int V) {
    if (!inp_host) return MO_FAIL(MO_ERR_INVALID, "encoder_backward: the cuda kernel needs inp_host");
    if ((size_t)B * T > (size_t)INT32_MAX / 3)
        return MO_FAIL(MO_ERR_INVALID, "encoder_backward: B*T=%zu too large", (size_t)B * T);
    int BT = B * T;
    size_t ints = encoder_backward_scratch_ints(B, T);
    int *host = (int *)malloc(ints * sizeof(int));
    if (!host) return MO_FAIL(MO_ERR_OOM, "encoder_backward: host out of memory for the token grouping");
    int U = 0;
    mo_status st = encoder_group_tokens(host, inp_host, BT, V, &U);
    if (st == MO_OK) st = encoder_upload(c, scratch, host, ints);
    free(host);
    if (st != MO_OK) return st;

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
