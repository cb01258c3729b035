#include "backend.h"

#include <string.h>
#include <stdio.h>
#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

const char *mo_backend_name(mo_backend_kind b) {
    switch (b) {
    case MO_BACKEND_CUDA: return "cuda";
    case MO_BACKEND_CPU: return "cpu";
    case MO_BACKEND_DRY: return "dry";
    }
    return "?";
}

mo_status mo_backend_parse(const char *s, mo_backend_kind *out) {
    if (!strcmp(s, "cuda")) { *out = MO_BACKEND_CUDA; return MO_OK; }
    if (!strcmp(s, "cpu")) { *out = MO_BACKEND_CPU; return MO_OK; }
    if (!strcmp(s, "dry")) { *out = MO_BACKEND_DRY; return MO_OK; }
    return MO_FAIL(MO_ERR_INVALID, "--backend: unknown backend '%s' (accepted: cuda, cpu, dry)", s);
}

int mo_cuda_available(const char **why) {
#ifdef MEMOPT_HAVE_CUDA
    static char reason[256];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        // With no driver at all the runtime says "CUDA driver version is insufficient"; the driver
        // version it finds (0: no libcuda) tells the two cases apart.
        int drv = 0;
        if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
        (void)cudaGetLastError();
        if (e != cudaSuccess && drv == 0)
            snprintf(reason, sizeof reason, "no CUDA device: no NVIDIA driver on this machine (libcuda not found)");
        else
            snprintf(reason, sizeof reason, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        if (why) *why = reason;
        return 0;
    }
    return 1;
#else
    if (why) *why = "built without CUDA (MEMOPT_CUDA=OFF)";
    return 0;
#endif
}
