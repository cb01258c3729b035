// Kernels of the mixed-precision GEMMs (matmul_mixed_cuda.c): the dbias column reduction and an
// elementwise 16-bit GELU for the unfused path.
//
// dbias (OC) += sum over the N rows of dout (N, OC) dt, in fp32, in a fixed order (no atomics):
//   pass 1: block (32 columns x 8 row lanes) per (column group, chunk of MO_MM_MIXED_DBIAS_ROWS rows);
//           lane ty sums rows ty, ty+8, .. of its chunk in order, then lane 0 adds the 8 lane sums in
//           order; partial[chunk][col].
//   pass 2: one thread per column adds the chunks 0, 1, .. in order, then to dbias.
// Pass 1 has two kernels that make the same sums in the same order, so the same bits (gpu_ops_gemm_attn_mixed):
//   wide (the default since session 36; OC % 8 == 0, dout 16-byte aligned, else narrow): a block of 64 threads,
//     8 column threads x 8 row lanes, each thread 8 columns through one 16-byte load a row, so that 8 threads
//     read a row's 128 contiguous bytes, 16 rows copied to shared memory by cp.async before they are added; the
//     64 columns' 8 lane sums then go through shared memory, one thread a column. Its pass 2 copies 16 chunks'
//     partials the same way before adding them.
//   narrow (MEMOPT_DBIAS=narrow): 32 columns x 8 row lanes, one 2-byte load a thread a row.
//   MEMOPT_DBIAS=lt takes neither: cuBLASLt's BGRADB epilogue sums dout's columns inside the dweight GEMM
//     (matmul_mixed_cuda.c), which reads dout anyway; matmul_mixed_dbias_add_cuda adds its sums to dbias.
//   MEMOPT_DBIAS=gelu: GPT's fc bias from the fcproj dinp GEMM's DGELU_BGRAD epilogue (bf16 sums, added by
//     mm_dbias_add16_kernel); every other bias on narrow. Slower: 18.09 ms against narrow's 16.74 on an H100
//     (GPT-2 124M bf16, session 35): the DGELU_BGRAD GEMM costs more than the pass it saves.
//   Why wide: the narrow kernel took 0.73 ms of the bf16 GPT-2 124M step on an H100 (48 calls a step, ncu,
//   session 32), about 60% of what its bytes allow. Session 33's wide kernel (16-byte loads, no cp.async) and
//   lt moved no step on an H100 or an H200. The cp.async one did (H100, session 36, results/h100-lndsum-ab-b2a4237.csv,
//   with GPT's projection biases already summed by the LayerNorm backward): its 24 partial passes 0.448 ms against
//   narrow's 0.563 (ncu), GPT-2 350M B 4 24.90 / 24.96 ms against 25.09 / 25.14, T 2048 B 4 17.70 / 17.68
//   against 17.90 / 17.79, GPT-2 124M level (16.46 / 16.47 against 16.52 / 16.43).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "matmul_mixed.h"
#include "mixed_dev.cuh"

static __device__ __forceinline__ float mm_ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ float mm_ld(const __half *p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ void mm_st(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void mm_st(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

template <typename T>
__global__ void mm_dbias_partial_kernel(float *__restrict__ partial, const T *__restrict__ dout, int N, int OC) {
    __shared__ float lane_sum[8][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int col = blockIdx.x * 32 + tx, chunk = blockIdx.y;
    const int r0 = chunk * MO_MM_MIXED_DBIAS_ROWS;
    const int r1 = min(N, r0 + MO_MM_MIXED_DBIAS_ROWS);
    float s = 0.0f;
    if (col < OC)
        for (int r = r0 + ty; r < r1; r += 8) s += mm_ld(dout, (size_t)r * OC + col);
    lane_sum[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < OC) {
        float t = lane_sum[0][tx];
        for (int i = 1; i < 8; i++) t += lane_sum[i][tx];
        partial[(size_t)chunk * OC + col] = t;
    }
}

#define MM_DBIAS_WIDE_COLS 64 // columns a block of the wide kernel: 8 threads x 8 columns
#define MM_DBIAS_WIDE_BATCH 16 // rows a thread of the wide kernel loads before it adds them
// The wide pass 1 (see the top): block (64 columns, chunk); thread (tx, ty) = (threadIdx.x % 8, / 8) sums
// rows ty, ty+8, .. of the chunk for columns col0 + tx*8 .. +7, as the narrow kernel's lane ty does.
// Each thread first copies MM_DBIAS_WIDE_BATCH of its rows (16 bytes each) into shared memory with cp.async,
// 256 bytes in flight a thread that hold no registers, and only then adds them in order. Why: with plain
// loads written first ptxas gave 16 loads 34 registers a thread, so it did not keep them in flight; session 33's
// kernel, one load a row, had about 12 KB in flight an SM, as the narrow kernel has, where the H100 takes
// about twice that (Little's law: 3.35 TB/s x ~0.8 us over 132 SMs); both ran at about 56% of its bandwidth
// (ncu, session 32). A row past the chunk copies the chunk's last row (a valid address) and is not added:
// adding +0.0 instead would not be exact under --use_fast_math, whose flush to zero can leave s at -0.
// D: mx_bf16 or mx_f16 (mixed_dev.cuh), dout as raw 16-bit storage.
template <class D>
__global__ void __launch_bounds__(64) mm_dbias_partial_wide_kernel(float *__restrict__ partial,
                                                                   const uint16_t *__restrict__ dout, int N, int OC) {
    __shared__ float lane_sum[8][MM_DBIAS_WIDE_COLS + 1];
    __shared__ uint4 rows[MM_DBIAS_WIDE_BATCH][64]; // a thread's own slots [k][threadIdx.x]: no block sync
    const int tx = threadIdx.x % 8, ty = threadIdx.x / 8;
    const int c8 = blockIdx.x * MM_DBIAS_WIDE_COLS + tx * 8, chunk = blockIdx.y; // OC % 8 == 0: all 8 or none
    const int r0 = chunk * MO_MM_MIXED_DBIAS_ROWS;
    const int r1 = min(N, r0 + MO_MM_MIXED_DBIAS_ROWS);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c8 < OC) {
        for (int rb = r0 + ty; rb < r1; rb += 8 * MM_DBIAS_WIDE_BATCH) {
#pragma unroll
            for (int k = 0; k < MM_DBIAS_WIDE_BATCH; k++)
                mx_cp_async16(&rows[k][threadIdx.x], dout + (size_t)min(rb + 8 * k, r1 - 1) * OC + c8);
            mx_cp_async_commit();
            mx_cp_async_wait_all();
#pragma unroll
            for (int k = 0; k < MM_DBIAS_WIDE_BATCH; k++) {
                if (rb + 8 * k >= r1) break; // a row past the chunk: copied (clamped), not added
                float v[8];
                mx_cvt8<D>(v, rows[k][threadIdx.x]);
#pragma unroll
                for (int j = 0; j < 8; j++) s[j] += v[j];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) lane_sum[ty][tx * 8 + j] = s[j];
    __syncthreads();
    const int col = blockIdx.x * MM_DBIAS_WIDE_COLS + threadIdx.x;
    if (col < OC) {
        float t = lane_sum[0][threadIdx.x];
        for (int i = 1; i < 8; i++) t += lane_sum[i][threadIdx.x];
        partial[(size_t)chunk * OC + col] = t;
    }
}

__global__ void mm_dbias_final_kernel(float *__restrict__ dbias, const float *__restrict__ partial, int chunks,
                                      int OC) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += partial[(size_t)k * OC + col];
    dbias[col] += s;
}

// Pass 2 of the wide engine: the same sums in the same order, 16 chunks' partials copied to shared memory
// (cp.async, as the wide pass 1) before they are added: 32 chunks at GPT-2's 8192 rows were 32 trips to L2
// a thread with few in flight (ncu put the 48 launches a step of the kernel above at 0.17 ms on an H100,
// session 32). Chunks past the last copy the last one and are not added (as rows in the wide pass 1).
#define MM_DBIAS_FINAL_BATCH 16
__global__ void __launch_bounds__(256) mm_dbias_final_batched_kernel(float *__restrict__ dbias,
                                                                     const float *__restrict__ partial, int chunks,
                                                                     int OC) {
    __shared__ float part[MM_DBIAS_FINAL_BATCH][256]; // a thread's own slots [k][threadIdx.x]: no block sync
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int k0 = 0; k0 < chunks; k0 += MM_DBIAS_FINAL_BATCH) {
#pragma unroll
        for (int k = 0; k < MM_DBIAS_FINAL_BATCH; k++)
            mx_cp_async4(&part[k][threadIdx.x], partial + (size_t)min(k0 + k, chunks - 1) * OC + col);
        mx_cp_async_commit();
        mx_cp_async_wait_all();
#pragma unroll
        for (int k = 0; k < MM_DBIAS_FINAL_BATCH; k++)
            if (k0 + k < chunks) s += part[k][threadIdx.x];
    }
    dbias[col] += s;
}

// dbias += the DGELU_BGRAD epilogue's bf16 sums (MEMOPT_DBIAS=gelu), in fp32
__global__ void mm_dbias_add16_kernel(float *__restrict__ dbias, const __nv_bfloat16 *__restrict__ sums, int OC) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < OC) dbias[col] += __bfloat162float(sums[col]);
}

template <typename T>
__global__ void mm_gelu_kernel(T *__restrict__ g, const T *__restrict__ x, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = mm_ld(x, i);
    const float s = 0.7978845608028654f; // sqrt(2/pi)
    mm_st(g, i, 0.5f * v * (1.0f + tanhf(s * (v + 0.044715f * v * v * v))));
}

// out (N, OC) += bias (OC), fp32 inside, rounded once
template <typename T>
__global__ void mm_bias_kernel(T *__restrict__ out, const T *__restrict__ bias, size_t n, int OC) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mm_st(out, i, mm_ld(out, i) + mm_ld(bias, i % OC));
}

mo_status matmul_mixed_bias_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *bias, int N, int OC) {
    const size_t n = (size_t)N * OC;
    cudaStream_t s = (cudaStream_t)c->stream;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    if (dt == MO_BF16)
        mm_bias_kernel<<<blocks, 256, 0, s>>>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)bias, n, OC);
    else
        mm_bias_kernel<<<blocks, 256, 0, s>>>((__half *)out, (const __half *)bias, n, OC);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status matmul_mixed_dbias_cuda(mo_ctx *c, mo_dtype dt, float *dbias, const void *dout, float *partial, int N,
                                  int OC) {
    return matmul_mixed_dbias_on_cuda(c, c->stream, dt, dbias, dout, partial, N, OC);
}

mo_status matmul_mixed_dbias_on_cuda(mo_ctx *c, void *stream, mo_dtype dt, float *dbias, const void *dout,
                                     float *partial, int N, int OC) {
    cudaStream_t s = (cudaStream_t)stream;
    const int chunks = mo_mm_mixed_dbias_chunks(N);
    if (c->dbias_mode == MO_DBIAS_WIDE && OC % 8 == 0 && mx_aligned16(dout)) {
        const dim3 grid((unsigned)((OC + MM_DBIAS_WIDE_COLS - 1) / MM_DBIAS_WIDE_COLS), (unsigned)chunks);
        if (dt == MO_BF16)
            mm_dbias_partial_wide_kernel<mx_bf16><<<grid, 64, 0, s>>>(partial, (const uint16_t *)dout, N, OC);
        else
            mm_dbias_partial_wide_kernel<mx_f16><<<grid, 64, 0, s>>>(partial, (const uint16_t *)dout, N, OC);
    } else {
        const dim3 grid((unsigned)((OC + 31) / 32), (unsigned)chunks);
        if (dt == MO_BF16)
            mm_dbias_partial_kernel<<<grid, 256, 0, s>>>(partial, (const __nv_bfloat16 *)dout, N, OC);
        else
            mm_dbias_partial_kernel<<<grid, 256, 0, s>>>(partial, (const __half *)dout, N, OC);
    }
    CUDA_CHECK_LAUNCH();
    if (c->dbias_mode == MO_DBIAS_WIDE)
        mm_dbias_final_batched_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, s>>>(dbias, partial, chunks, OC);
    else
        mm_dbias_final_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, s>>>(dbias, partial, chunks, OC);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status matmul_mixed_dbias_add_cuda(mo_ctx *c, float *dbias, const float *sums, int OC) {
    // pass 2 with one chunk: dbias += sums, elementwise
    mm_dbias_final_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, (cudaStream_t)c->stream>>>(dbias, sums, 1, OC);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status matmul_mixed_dbias_add16_cuda(mo_ctx *c, float *dbias, const void *sums, int OC) {
    mm_dbias_add16_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, (cudaStream_t)c->stream>>>(
        dbias, (const __nv_bfloat16 *)sums, OC);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status matmul_mixed_gelu_cuda(mo_ctx *c, mo_dtype dt, void *gelu_out, const void *out, size_t n) {
    if (n == 0) return MO_OK;
    cudaStream_t s = (cudaStream_t)c->stream;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    if (dt == MO_BF16)
        mm_gelu_kernel<<<blocks, 256, 0, s>>>((__nv_bfloat16 *)gelu_out, (const __nv_bfloat16 *)out, n);
    else
        mm_gelu_kernel<<<blocks, 256, 0, s>>>((__half *)gelu_out, (const __half *)out, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
