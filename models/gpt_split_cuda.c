// The CUDA device of a split GPT's rank threads (gpt_split.c): each thread makes its device current
// before it touches its allocator, context or communicators (nccl: rank r on device r).
#include <cuda_runtime_api.h>
#include "kernels/status.h"

mo_status gpt_split_get_device(int *dev);
mo_status gpt_split_set_device(int dev);

mo_status gpt_split_get_device(int *dev) {
    cudaError_t e = cudaGetDevice(dev);
    if (e != cudaSuccess) return MO_FAIL(MO_ERR_CUDA, "cudaGetDevice: %s", cudaGetErrorString(e));
    return MO_OK;
}

mo_status gpt_split_set_device(int dev) {
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return MO_FAIL(MO_ERR_CUDA, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
    return MO_OK;
}
