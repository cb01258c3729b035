// Fault injection at every allocation of a tiny training run, cpu backend (tests/alloc_faults.h):
// the plain model under several strategies and split runs of tp 2 and pp 2 over the local
// communicator. Then the run engine behind memopt run / sweep (bench/run_engine.c) with the k-th
// allocation failing: a row of status oom with the allocator's message, nothing left allocated in the
// process, the next configuration's row ok; also with --offload activations (the host allocator's
// blocks and the copies fail and unwind too).
#include <stdlib.h>
#include "tests/alloc_faults.h"

int main(void) {
    fault_case cases[16];
    int n = fault_cases(cases, 16);
    fault_totals tot = {0};
    uint64_t allocs = 0;
    for (int i = 0; i < n; i++) allocs += fault_sweep(&cases[i], MO_BACKEND_CPU, &tot);
    test_engine(MO_BACKEND_CPU, 1, 0, 1, &tot);
    test_engine(MO_BACKEND_DRY, 1, 0, 1, &tot);
    test_engine(MO_BACKEND_DRY, 2, 0, 1, &tot);
    test_engine(MO_BACKEND_CPU, 1, 1, 1, &tot); // --offload activations: host blocks, copies in flight
    test_engine(MO_BACKEND_DRY, 1, 1, 1, &tot);
    test_engine(MO_BACKEND_CPU, 1, 2, 4, &tot); // the ResNet: every 4th (a run is ~0.1 s here)
    printf("fault injection total: %llu faults injected, %llu survived (unwound as oom, next run normal), %llu bytes leaked\n",
           (unsigned long long)tot.injected, (unsigned long long)tot.survived, (unsigned long long)tot.leaked_bytes);
    CHECK_EQ_U64(tot.leaked_bytes, 0);
    CHECK_EQ_U64(tot.survived, tot.injected);
    (void)allocs;
    return test_finish();
}
