// The probes' checking macro for the CUDA runtime: a probe is a program of its own, so a failed call
// prints file:line, the call and CUDA's message, and exits 1 (the library's CUDA_CHECK returns an
// mo_status instead: kernels/cuda_check.h).
#ifndef MEMOPT_PROBE_CHECK_H
#define MEMOPT_PROBE_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#endif
