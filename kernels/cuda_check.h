// One checking macro per library. Each turns a failed call into an mo_status carrying
// file:line, the call's text and the library's own message, and returns it.
#ifndef MEMOPT_CUDA_CHECK_H
#define MEMOPT_CUDA_CHECK_H

#include "status.h"
#include <cuda_runtime_api.h>

#define CUDA_CHECK(call)                                                               \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess)                                                         \
            return MO_FAIL(e_ == cudaErrorMemoryAllocation ? MO_ERR_OOM : MO_ERR_CUDA, \
                           "%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
    } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#include <cublas_api.h>
#define CUBLAS_CHECK(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return MO_FAIL(s_ == CUBLAS_STATUS_ALLOC_FAILED ? MO_ERR_OOM : MO_ERR_CUBLAS,    \
                           "%s: %s (%s)", #call, cublasGetStatusString(s_), cublasGetStatusName(s_)); \
    } while (0)

#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif
#define CUDNN_CHECK(call)                                                        \
    do {                                                                         \
        cudnnStatus_t s_ = (call);                                               \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                        \
            char cudnn_last_[256];                                               \
            cudnnGetLastErrorString(cudnn_last_, sizeof cudnn_last_);            \
            return MO_FAIL(MO_ERR_CUDNN, "%s: %s %s", #call, cudnnGetErrorString(s_), cudnn_last_); \
        }                                                                        \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
