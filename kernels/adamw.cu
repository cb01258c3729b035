// AdamW kernel (after karpathy/llm.c train_gpt2_fp32.cu adamw_kernel2, but with the plain
// beta*m + (1-beta)*g form of the cpu reference instead of llm.c's lerp). Every float operation is an
// explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn): nvcc
// never fuses those into FMAs and --use_fast_math does not approximate them, so the kernel performs the
// cpu's operations in the cpu's order and matches it bit for bit (denormals aside: ftz on the GPU).
#include <cuda_runtime.h>
#include <stdint.h>

#include "adamw.h"
#include "adamw_dev.cuh"
#include "cuda_check.h"

#define ADAMW_THREADS 256
#define ADAMW_MAX_BLOCKS 65536

__global__ void adamw_vec4(float *param, const float *grad, float *m, float *v, size_t n, adamw_hp h) {
    size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = id; i < n4; i += stride) {
        float4 p = reinterpret_cast<float4 *>(param)[i];
        float4 g = reinterpret_cast<const float4 *>(grad)[i];
        float4 mm = reinterpret_cast<float4 *>(m)[i];
        float4 vv = reinterpret_cast<float4 *>(v)[i];
        adamw_one(p.x, g.x, mm.x, vv.x, h);
        adamw_one(p.y, g.y, mm.y, vv.y, h);
        adamw_one(p.z, g.z, mm.z, vv.z, h);
        adamw_one(p.w, g.w, mm.w, vv.w, h);
        reinterpret_cast<float4 *>(param)[i] = p;
        reinterpret_cast<float4 *>(m)[i] = mm;
        reinterpret_cast<float4 *>(v)[i] = vv;
    }
    if (id < n - n4 * 4) {
        size_t i = n4 * 4 + id;
        adamw_one(param[i], grad[i], m[i], v[i], h);
    }
}

__global__ void adamw_scalar(float *param, const float *grad, float *m, float *v, size_t n, adamw_hp h) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        adamw_one(param[i], grad[i], m[i], v[i], h);
}

extern "C" mo_status adamw_cuda(mo_ctx *c, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                                float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    if (n == 0) return MO_OK;
    adamw_hp h = adamw_make_hp(lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = (((uintptr_t)param | (uintptr_t)grad | (uintptr_t)m | (uintptr_t)v) & 15u) == 0;
    size_t work = vec ? n / 4 : n;
    size_t blocks = (work + ADAMW_THREADS - 1) / ADAMW_THREADS;
    if (blocks < 1) blocks = 1;
    if (blocks > ADAMW_MAX_BLOCKS) blocks = ADAMW_MAX_BLOCKS;
    if (vec)
        adamw_vec4<<<(unsigned)blocks, ADAMW_THREADS, 0, s>>>(param, grad, m, v, n, h);
    else
        adamw_scalar<<<(unsigned)blocks, ADAMW_THREADS, 0, s>>>(param, grad, m, v, n, h);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
