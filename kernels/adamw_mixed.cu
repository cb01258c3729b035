// AdamW for mixed precision (ops_mixed.h): adamw.cu's element update (adamw_dev.cuh, bit-identical to
// the cpu reference) on the fp32 master, m, v, plus the store of the rounded new master into the 16-bit
// working copy, in one pass. Vector path (8 elements: two float4 of each fp32 array, one 16-byte store
// of the copy) when every pointer is 16-byte aligned; the first n % 8 threads also take the tail.
#include <cuda_runtime.h>
#include <stdint.h>

#include "adamw_dev.cuh"
#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

template <class D, bool VEC>
__global__ void adamw_mixed_kernel(float *master, uint16_t *param16, const float *grad, float *m, float *v, size_t n,
                                   adamw_hp h) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        size_t n8 = n / 8;
        for (size_t i = id; i < n8; i += stride) {
            float p[8], g[8], mm[8], vv[8];
            mx_ld8f(p, master + 8 * i);
            mx_ld8f(g, grad + 8 * i);
            mx_ld8f(mm, m + 8 * i);
            mx_ld8f(vv, v + 8 * i);
#pragma unroll
            for (int k = 0; k < 8; k++) adamw_one(p[k], g[k], mm[k], vv[k], h);
            mx_st8f(master + 8 * i, p);
            mx_st8f(m + 8 * i, mm);
            mx_st8f(v + 8 * i, vv);
            mx_st8<D>(param16 + 8 * i, p);
        }
        if (id < n - n8 * 8) {
            size_t i = n8 * 8 + id;
            adamw_one(master[i], grad[i], m[i], v[i], h);
            param16[i] = D::from_f(master[i]);
        }
    } else {
        for (size_t i = id; i < n; i += stride) {
            adamw_one(master[i], grad[i], m[i], v[i], h);
            param16[i] = D::from_f(master[i]);
        }
    }
}

template <class D>
static mo_status adamw_mixed_launch(mo_ctx *c, float *master, void *param16, const float *grad, float *m, float *v,
                                    size_t n, const adamw_hp &h) {
    cudaStream_t s = (cudaStream_t)c->stream;
    uint16_t *p16 = (uint16_t *)param16;
    if (mx_aligned16(master) && mx_aligned16(param16) && mx_aligned16(grad) && mx_aligned16(m) && mx_aligned16(v))
        adamw_mixed_kernel<D, true><<<mx_grid(n / 8), MX_THREADS, 0, s>>>(master, p16, grad, m, v, n, h);
    else
        adamw_mixed_kernel<D, false><<<mx_grid(n), MX_THREADS, 0, s>>>(master, p16, grad, m, v, n, h);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status adamw_mixed_cuda(mo_ctx *c, mo_dtype dt, float *master, void *param16, const float *grad,
                                      float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                                      float weight_decay, int t, float grad_scale) {
    if (n == 0) return MO_OK;
    adamw_hp h = adamw_make_hp(lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    return dt == MO_F16 ? adamw_mixed_launch<mx_f16>(c, master, param16, grad, m, v, n, h)
                        : adamw_mixed_launch<mx_bf16>(c, master, param16, grad, m, v, n, h);
}
