// What the machine is: device properties and the versions of the libraries linked in, for
// `memopt devices` and the provenance columns of every CSV row.
#include "device.h"

#include <stdio.h>
#include <string.h>

#ifdef MEMOPT_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include "cuda_check.h"
#endif

static void set_none(char *dst, size_t n) { snprintf(dst, n, "none"); }

#ifdef MEMOPT_HAVE_CUDA
// cudaDriverGetVersion / cudaRuntimeGetVersion: 1000*major + 10*minor (13000 is 13.0).
static void cuda_version(char *dst, size_t n, int v) {
    if (v <= 0) set_none(dst, n);
    else snprintf(dst, n, "%d.%d", v / 1000, (v % 1000) / 10);
}
#endif

void mo_runtime_versions(mo_device_info *out) {
    memset(out, 0, sizeof *out);
    set_none(out->driver, sizeof out->driver);
    set_none(out->runtime, sizeof out->runtime);
    set_none(out->cublas, sizeof out->cublas);
    set_none(out->cudnn, sizeof out->cudnn);
#ifdef MEMOPT_HAVE_CUDA
    int v = 0;
    // Neither call needs a device; the driver's answers 0 when no driver is installed.
    if (cudaDriverGetVersion(&v) == cudaSuccess) cuda_version(out->driver, sizeof out->driver, v);
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) cuda_version(out->runtime, sizeof out->runtime, v);
#endif
}

void mo_library_versions(mo_device_info *out) {
    mo_runtime_versions(out);
#ifdef MEMOPT_HAVE_CUDA
    // cuBLASLt: major*10000 + minor*100 + patch; 0 when it could not be loaded (cublas_lazy.h).
    size_t lt = cublasLtGetVersion();
    if (lt > 0) snprintf(out->cublas, sizeof out->cublas, "%zu.%zu.%zu", lt / 10000, (lt / 100) % 100, lt % 100);
    // cuDNN 9+: major*10000 + minor*100 + patch; cuDNN 8: major*1000 + minor*100 + patch.
    size_t dnn = cudnnGetVersion();
    if (dnn >= 90000) snprintf(out->cudnn, sizeof out->cudnn, "%zu.%zu.%zu", dnn / 10000, (dnn / 100) % 100, dnn % 100);
    else snprintf(out->cudnn, sizeof out->cudnn, "%zu.%zu.%zu", dnn / 1000, (dnn / 100) % 10, dnn % 100);
#endif
}

mo_status mo_device_count(int *n) {
    *n = 0;
#ifdef MEMOPT_HAVE_CUDA
    int k = 0;
    // No driver, no device, or a driver too old all mean "0 devices" here; mo_cuda_available says why.
    if (cudaGetDeviceCount(&k) != cudaSuccess) {
        (void)cudaGetLastError(); // reset the last error, so a later launch check does not report this one
        return MO_OK;
    }
    *n = k;
#endif
    return MO_OK;
}

mo_status mo_device_query(int index, mo_device_info *out) {
    mo_library_versions(out);
#ifdef MEMOPT_HAVE_CUDA
    int n = 0;
    MO_TRY(mo_device_count(&n));
    if (index < 0 || index >= n)
        return MO_FAIL(MO_ERR_INVALID, "device %d: there are %d CUDA devices", index, n);
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    out->sm_count = p.multiProcessorCount;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->l2_bytes = (uint64_t)p.l2CacheSize;
    out->smem_block_optin = (int)p.sharedMemPerBlockOptin;
    out->total_mem_bytes = (uint64_t)p.totalGlobalMem;
    // cudaMemGetInfo answers for the current device: switch to index, then back.
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(index));
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    CUDA_CHECK(cudaSetDevice(prev));
    if (e != cudaSuccess)
        return MO_FAIL(MO_ERR_CUDA, "cudaMemGetInfo on device %d: %s (%s)", index, cudaGetErrorString(e), cudaGetErrorName(e));
    out->free_mem_bytes = free_b;
    out->total_mem_bytes = total_b; // what allocations can see; equals totalGlobalMem on current drivers
    return MO_OK;
#else
    (void)index;
    return MO_FAIL(MO_ERR_UNSUPPORTED, "device %d: built without CUDA (MEMOPT_CUDA=OFF)", index);
#endif
}
