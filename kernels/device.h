// What `memopt devices` prints and every CSV row records about the machine.
#ifndef MEMOPT_DEVICE_H
#define MEMOPT_DEVICE_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_device_info {
    char name[128];
    uint64_t total_mem_bytes;
    uint64_t free_mem_bytes;
    int sm_count;
    int cc_major, cc_minor;
    uint64_t l2_bytes;
    int smem_block_optin;  // shared memory a block may opt in to (bytes): which kernels' slices fit
    char driver[32];       // e.g. "13.0" from cudaDriverGetVersion, or the NVML driver string if known
    char runtime[32];      // cudaRuntimeGetVersion
    char cublas[32];       // cublasLtGetVersion
    char cudnn[32];        // cudnnGetVersion
} mo_device_info;

mo_status mo_device_count(int *n); // 0 devices (or no CUDA build) is not an error
mo_status mo_device_query(int index, mo_device_info *out);
// Fills the fields that do not need a device (runtime, cuBLAS, cuDNN versions linked in). Asking
// cuBLASLt its version loads it (~0.3 s, kernels/cublas_lazy.h).
void mo_library_versions(mo_device_info *out);
// Only the driver and runtime versions (the rest "none"): what a run's CSV row records, without
// loading cuBLASLt.
void mo_runtime_versions(mo_device_info *out);

#ifdef __cplusplus
}
#endif

#endif
