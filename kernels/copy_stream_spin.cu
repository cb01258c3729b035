// The copy stream's test hook (copy_stream.h, mo_copy_testing.delay_us): one thread that spins on the
// global nanosecond timer, enqueued on the copy stream before a copy, so that a copy lands late on
// purpose and a missing join shows up as wrong numbers in tests/gpu_offload_act.c.
#include <cuda_runtime.h>
#include <stdint.h>

#include "copy_stream.h"
#include "cuda_check.h"

__global__ void copy_spin_kernel(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" mo_status mo_copy_spin_cuda(void *stream, int us) {
    copy_spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((uint64_t)us * 1000u);
    CUDA_CHECK(cudaGetLastError());
    return MO_OK;
}
