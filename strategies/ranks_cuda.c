// The CUDA device of a split's rank threads (strategies/ranks.c): each thread makes its device current
// before it touches its allocator, context or communicators (nccl: rank r on device r).
#include "kernels/cuda_check.h"

mo_status mo_ranks_get_device(int *dev);
mo_status mo_ranks_set_device(int dev);

mo_status mo_ranks_get_device(int *dev) {
    CUDA_CHECK(cudaGetDevice(dev));
    return MO_OK;
}

mo_status mo_ranks_set_device(int dev) {
    CUDA_CHECK(cudaSetDevice(dev));
    return MO_OK;
}
