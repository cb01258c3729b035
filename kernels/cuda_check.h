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

// The same, setting st and jumping to a cleanup label instead of returning.
#define CUDA_CHECK_GOTO(st, call, label)                                               \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            (st) = MO_FAIL(e_ == cudaErrorMemoryAllocation ? MO_ERR_OOM : MO_ERR_CUDA, \
                           "%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
            goto label;                                                                \
        }                                                                              \
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
// cuDNN: the status's own string and cudnnGetLastErrorString (which says which descriptor or attribute
// was refused, and why). CUDNN_CHECK_GOTO sets st and jumps to a cleanup label instead of returning.
static inline mo_status mo_cudnn_status_(cudnnStatus_t s, const char *call, const char *file, int line) {
    char last[512];
    last[0] = '\0';
    cudnnGetLastErrorString(last, sizeof last);
    return mo_fail_at(s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ? MO_ERR_OOM : MO_ERR_CUDNN, file,
                      line, "%s: %s %s", call, cudnnGetErrorString(s), last);
}
#define CUDNN_CHECK(call)                                                              \
    do {                                                                               \
        cudnnStatus_t s_ = (call);                                                     \
        if (s_ != CUDNN_STATUS_SUCCESS) return mo_cudnn_status_(s_, #call, __FILE__, __LINE__); \
    } while (0)
#define CUDNN_CHECK_GOTO(st, call, label)                                              \
    do {                                                                               \
        cudnnStatus_t s_ = (call);                                                     \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                              \
            (st) = mo_cudnn_status_(s_, #call, __FILE__, __LINE__);                    \
            goto label;                                                                \
        }                                                                              \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
