// Encoder kernels with 16-bit activations / working weights (ops_mixed.h). Forward: one thread per 8
// columns (16-byte loads of wte, wpe rows, one 16-byte store), fp32 add, one rounding. Backward: the
// deterministic scheme of encoder.cu (positions grouped by token on the host and uploaded through the
// context's pinned staging buffer without a stream synchronization, one block per distinct token adding
// its dout rows in increasing position order), with dout converted exactly to fp32: the
// fp32 gradients get the cpu reference's additions in the cpu's order, bit for bit.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "encoder.h"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

static inline unsigned encm_block_for(int cols) {
    int b = (cols + 31) / 32 * 32;
    return (unsigned)(b > 256 ? 256 : b);
}

// grid (B*T rows, column chunks); VEC: thread c handles columns 8c..8c+7 (C8 = C/8 items), else column c.
template <class D, bool VEC>
__global__ void encoder_forward_mixed_kernel(uint16_t *out, const int *inp, const uint16_t *wte, const uint16_t *wpe,
                                             int T, int C) {
    size_t bt = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    int t = (int)(bt % (size_t)T);
    size_t tok = (size_t)inp[bt];
    if (VEC) {
        if (c >= C / 8) return;
        float w[8], p[8];
        mx_ld8<D>(w, wte + tok * C + 8 * c);
        mx_ld8<D>(p, wpe + (size_t)t * C + 8 * c);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] += p[k];
        mx_st8<D>(out + bt * C + 8 * c, w);
    } else {
        if (c >= C) return;
        out[bt * C + c] = D::from_f(D::to_f(wte[tok * C + c]) + D::to_f(wpe[(size_t)t * C + c]));
    }
}

template <class D>
static mo_status encoder_forward_mixed_launch(mo_ctx *c, void *out, const int *inp, const void *wte, const void *wpe,
                                              int B, int T, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 8 == 0 && mx_aligned16(out) && mx_aligned16(wte) && mx_aligned16(wpe);
    int cols = vec ? C / 8 : C;
    unsigned block = encm_block_for(cols);
    dim3 grid((unsigned)((size_t)B * T), (unsigned)((cols + (int)block - 1) / (int)block));
    uint16_t *o = (uint16_t *)out;
    const uint16_t *w = (const uint16_t *)wte, *p = (const uint16_t *)wpe;
    if (vec)
        encoder_forward_mixed_kernel<D, true><<<grid, block, 0, s>>>(o, inp, w, p, T, C);
    else
        encoder_forward_mixed_kernel<D, false><<<grid, block, 0, s>>>(o, inp, w, p, T, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status encoder_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const int *inp, const void *wte,
                                                const void *wpe, int B, int T, int C) {
    return dt == MO_F16 ? encoder_forward_mixed_launch<mx_f16>(c, out, inp, wte, wpe, B, T, C)
                        : encoder_forward_mixed_launch<mx_bf16>(c, out, inp, wte, wpe, B, T, C);
}

// dwte: grid (U distinct tokens, column chunks); block u adds rows order[start[u]..start[u+1]) of dout
// to row token[u] of dwte, in that order. VEC: 8 columns per thread (C % 8 == 0, aligned pointers).
template <class D, bool VEC>
__global__ void encoder_backward_wte_mixed(float *dwte, const uint16_t *dout, const int *order, const int *start,
                                           const int *token, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    int beg = start[u], end = start[u + 1];
    if (VEC) {
        if (c >= C / 8) return;
        float *dst = dwte + (size_t)token[u] * C + 8 * c;
        float acc[8], d[8];
        mx_ld8f(acc, dst);
        for (int k = beg; k < end; k++) {
            mx_ld8<D>(d, dout + (size_t)order[k] * C + 8 * c);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += d[j];
        }
        mx_st8f(dst, acc);
    } else {
        if (c >= C) return;
        float *dst = dwte + (size_t)token[u] * C + c;
        float acc = *dst;
#pragma unroll 4
        for (int k = beg; k < end; k++) acc += D::to_f(dout[(size_t)order[k] * C + c]);
        *dst = acc;
    }
}

// dwpe (T,C): grid (T, column chunks); dwpe[t] += dout[b,t] for b = 0..B-1 in order.
template <class D, bool VEC>
__global__ void encoder_backward_wpe_mixed(float *dwpe, const uint16_t *dout, int B, int T, int C) {
    int t = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (VEC) {
        if (c >= C / 8) return;
        float *dst = dwpe + (size_t)t * C + 8 * c;
        float acc[8], d[8];
        mx_ld8f(acc, dst);
        for (int b = 0; b < B; b++) {
            mx_ld8<D>(d, dout + ((size_t)b * T + t) * C + 8 * c);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += d[j];
        }
        mx_st8f(dst, acc);
    } else {
        if (c >= C) return;
        float *dst = dwpe + (size_t)t * C + c;
        float acc = *dst;
        for (int b = 0; b < B; b++) acc += D::to_f(dout[((size_t)b * T + t) * C + c]);
        *dst = acc;
    }
}

template <class D>
static mo_status encoder_backward_mixed_launch(mo_ctx *c, float *dwte, float *dwpe, const void *dout_,
                                               const int *inp_host, void *scratch, int B, int T, int C, int V) {
    int U = 0;
    MO_TRY(encoder_backward_group_cuda(c, scratch, inp_host, B, T, V, &U));
    int BT = B * T; // bounded by encoder_backward_group_cuda
    const int *order = (const int *)scratch, *start = order + BT, *token = order + 2 * BT + 1;
    const uint16_t *dout = (const uint16_t *)dout_;
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 8 == 0 && mx_aligned16(dwte) && mx_aligned16(dwpe) && mx_aligned16(dout);
    int cols = vec ? C / 8 : C;
    unsigned block = encm_block_for(cols);
    unsigned chunks = (unsigned)((cols + (int)block - 1) / (int)block);
    if (vec) {
        encoder_backward_wte_mixed<D, true><<<dim3((unsigned)U, chunks), block, 0, s>>>(dwte, dout, order, start,
                                                                                       token, C);
        CUDA_CHECK_LAUNCH();
        encoder_backward_wpe_mixed<D, true><<<dim3((unsigned)T, chunks), block, 0, s>>>(dwpe, dout, B, T, C);
    } else {
        encoder_backward_wte_mixed<D, false><<<dim3((unsigned)U, chunks), block, 0, s>>>(dwte, dout, order, start,
                                                                                        token, C);
        CUDA_CHECK_LAUNCH();
        encoder_backward_wpe_mixed<D, false><<<dim3((unsigned)T, chunks), block, 0, s>>>(dwpe, dout, B, T, C);
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status encoder_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, float *dwte, float *dwpe, const void *dout,
                                                 const int *inp_host, void *scratch, int B, int T, int C, int V) {
    return dt == MO_F16 ? encoder_backward_mixed_launch<mx_f16>(c, dwte, dwpe, dout, inp_host, scratch, B, T, C, V)
                        : encoder_backward_mixed_launch<mx_bf16>(c, dwte, dwpe, dout, inp_host, scratch, B, T, C, V);
}
