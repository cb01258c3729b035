// Device side of the communicators (comm_internal.h): events, copies, and the rank-ordered sum
// kernel shared by the local kind (peers' buffers on the one device) and the ordered nccl path.
//
// The sum: out[i] = (((in[0][i] + in[1][i]) + in[2][i]) + ...) + in[W-1][i], each add an explicit
// add.rn.f32 (IEEE round to nearest, no .ftz) so neither --use_fast_math (-ftz=true) nor FMA
// contraction can change a bit: the cpu's float sum in the same order gives the same bits.
#include <cuda_runtime.h>
#include <stdint.h>

#include "../kernels/cuda_check.h"
#include "comm_internal.h"

#define COMM_SUM_THREADS 256

struct comm_ptrs {
    const float *p[MO_COMM_MAX_WORLD]; // 512 bytes of kernel parameters
};

__device__ __forceinline__ float comm_add_rn(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// Each thread reads element i of every input before writing out[i]: in place (out == in[k]) is safe.
__global__ void comm_sum_scalar(float *out, comm_ptrs in, int W, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = in.p[0][i];
        for (int k = 1; k < W; k++) acc = comm_add_rn(acc, in.p[k][i]);
        out[i] = acc;
    }
}

// Every pointer 16-byte aligned: float4 loads and stores for n/4 groups, the tail by thread id.
__global__ void comm_sum_vec4(float *out, comm_ptrs in, int W, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n4 = n / 4;
    for (size_t i = id; i < n4; i += stride) {
        float4 acc = reinterpret_cast<const float4 *>(in.p[0])[i];
        for (int k = 1; k < W; k++) {
            float4 v = reinterpret_cast<const float4 *>(in.p[k])[i];
            acc.x = comm_add_rn(acc.x, v.x);
            acc.y = comm_add_rn(acc.y, v.y);
            acc.z = comm_add_rn(acc.z, v.z);
            acc.w = comm_add_rn(acc.w, v.w);
        }
        reinterpret_cast<float4 *>(out)[i] = acc;
    }
    size_t t = n4 * 4 + id;
    if (t < n) {
        float acc = in.p[0][t];
        for (int k = 1; k < W; k++) acc = comm_add_rn(acc, in.p[k][t]);
        out[t] = acc;
    }
}

extern "C" mo_status comm_dev_sum(void *stream, float *out, const float *const *in, int W, size_t n) {
    if (n == 0) return MO_OK;
    if (W < 1 || W > MO_COMM_MAX_WORLD) return MO_FAIL(MO_ERR_INTERNAL, "comm_dev_sum: W = %d", W);
    comm_ptrs p;
    uintptr_t align = (uintptr_t)out;
    for (int k = 0; k < W; k++) {
        p.p[k] = in[k];
        align |= (uintptr_t)in[k];
    }
    for (int k = W; k < MO_COMM_MAX_WORLD; k++) p.p[k] = nullptr;
    bool vec = (align & 15u) == 0;
    size_t work = vec ? (n + 3) / 4 : n;
    // Grid-stride: up to 132 SMs x 8 blocks of 256 threads, one wave on an H200.
    size_t blocks = (work + COMM_SUM_THREADS - 1) / COMM_SUM_THREADS;
    if (blocks > 1056) blocks = 1056;
    cudaStream_t s = (cudaStream_t)stream;
    if (vec)
        comm_sum_vec4<<<(unsigned)blocks, COMM_SUM_THREADS, 0, s>>>(out, p, W, n);
    else
        comm_sum_scalar<<<(unsigned)blocks, COMM_SUM_THREADS, 0, s>>>(out, p, W, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status comm_dev_event_create(void **ev) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *ev = e;
    return MO_OK;
}

extern "C" void comm_dev_event_destroy(void *ev) {
    if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" mo_status comm_dev_record(void *ev, void *stream) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return MO_OK;
}

extern "C" mo_status comm_dev_wait(void *stream, void *ev) {
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
    return MO_OK;
}

extern "C" mo_status comm_dev_stream_device(void *stream, int *device) {
    CUDA_CHECK(cudaStreamGetDevice((cudaStream_t)stream, device));
    return MO_OK;
}

extern "C" mo_status comm_dev_sync(void *stream) {
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return MO_OK;
}

extern "C" mo_status comm_dev_copy(void *stream, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return MO_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return MO_OK;
}
