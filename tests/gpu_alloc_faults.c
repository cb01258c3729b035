// Fault injection at every allocation of a tiny training run on the cuda backend (tests/alloc_faults.h):
// the plain model in fp32, tf32, bf16 and fp16 (the cuBLASLt paths and their 32 MiB workspace, which is
// the context's first allocation), checkpointing, accumulation, the async (cudaMallocAsync) and raw
// allocators, and split runs of tp 2 and pp 2 over the local communicator. Besides the checks of the
// cpu test, the device's own used memory (cudaMemGetInfo) must be back to where it was before each
// run once the run is torn down: cudaFree / cudaMemPoolDestroy really gave everything back.
// (The suite calls no cuDNN: its workspaces are the allocator's like every other byte.)
// MEMOPT_TEST_FAULT_STRIDE=s tries every s-th k only (the compute-sanitizer stage).
#include "tests/testlib.h"

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "tests/alloc_faults.h"

static size_t used_at_start;

static size_t used_now(void) {
    size_t f = 0, t = 0;
    cudaDeviceSynchronize();
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) return 0;
    return t - f;
}

static void rebase(void) { used_at_start = used_now(); }

static int device_back(const char *what) {
    if (test_device_wide_skip("the device's used memory back to where it was after each fault")) return 1;
    size_t u = used_now();
    return CHECK_MSG(u == used_at_start, "%s: device memory in use %zu bytes, %zu before the run (%+lld)", what, u,
                     used_at_start, (long long)u - (long long)used_at_start);
}

int main(void) {
    test_require_gpu();
    fault_case cases[20];
    int n = fault_cases(cases, 16);
    // cuda only: tf32 and the async allocator.
    cases[n] = cases[0];
    cases[n].name = "tf32";
    cases[n].cfg.tf32 = 1;
    n++;
    cases[n] = cases[0];
    cases[n].name = "fp32 alloc async";
    cases[n].alloc = MO_ALLOC_ASYNC;
    n++;
    cases[n] = cases[4];
    cases[n].name = "bf16 accum 2 alloc async";
    cases[n].alloc = MO_ALLOC_ASYNC;
    cases[n].cfg.accum = 2;
    n++;
    fault_totals tot = {0};
    for (int i = 0; i < n; i++) {
        if (!fault_case_wanted(cases[i].name) || !test_part_take(cases[i].name)) continue;
        // The first, unarmed run of a case loads its kernels (lazy module loading takes device memory
        // once) and makes the CUDA context's own pools: the baseline is taken after it.
        char msg[1024];
        double loss;
        fault_after = NULL;
        CHECK_MSG(fault_run(&cases[i], MO_BACKEND_CUDA, 0, msg, sizeof msg, &loss, &tot) == MO_OK, "%s warm-up: %s",
                  cases[i].name, msg);
        used_at_start = used_now();
        fault_after = device_back;
        fault_sweep(&cases[i], MO_BACKEND_CUDA, &tot);
        fflush(stdout);
    }
    // The run engine (memopt run) on cuda, plain and with --offload activations (pinned host blocks,
    // copies on the copy stream in flight when the fault comes): every 4th allocation failed
    fault_rebase = rebase;
    fault_after = device_back; // also when MEMOPT_TEST_PART gave this process none of the cases above
    if (test_part_take("engine")) test_engine(MO_BACKEND_CUDA, 1, 0, 4, &tot);
    if (test_part_take("engine, offload activations")) test_engine(MO_BACKEND_CUDA, 1, 1, 4, &tot);
    if (test_part_take("engine, resnet offload activations")) test_engine(MO_BACKEND_CUDA, 1, 2, 4, &tot);
    printf("fault injection total (cuda): %llu faults injected, %llu survived (unwound as oom, next run normal, device "
           "memory back), %llu bytes leaked\n",
           (unsigned long long)tot.injected, (unsigned long long)tot.survived, (unsigned long long)tot.leaked_bytes);
    CHECK_EQ_U64(tot.leaked_bytes, 0);
    CHECK_EQ_U64(tot.survived, tot.injected);
    return test_finish();
}

#else
int main(void) {
    test_require_gpu(); // built without CUDA: prints the reason and exits 77 (skipped)
    return 0;
}
#endif
