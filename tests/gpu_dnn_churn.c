// Device memory over many short cuDNN lifetimes: the probe behind gpu_alloc_faults' ResNet engine case,
// whose failing runs read one 2 MiB page above the baseline from about the 107th fault on (session 10,
// an H100, cuDNN 9.14: the same iteration for a ResNet of 8 and of 4 blocks, so a growth per run; the
// GPT cases before it, which call no cuDNN, thousands of runs, grew nothing).
//   1. cudnnCreate / cudnnSetStream / cudnnDestroy, MEMOPT_TEST_CHURN_N times (default 1000), on a stream
//      made and destroyed each time as a context's is: printed, not checked (the library's, not ours).
//   2. the ResNet engine run of gpu_alloc_faults (memopt run, tiny ResNet, ckpt full, offload activations)
//      MEMOPT_TEST_CHURN_RUNS times (default 300), each context taking its handle from the process's pool
//      (conv_cuda.c): device memory in use must end where it was after two warm-up runs.
//   3. the same runs with the pool drained after each (a cudnnCreate and cudnnDestroy per run, as before
//      the pool): printed, not checked.
// Every change of the used bytes is printed with its cycle, so the next GPU session sees which one grows.
// It reads device-wide memory (cudaMemGetInfo): it must run alone on the GPU (ctest's RESOURCE_LOCK gpu,
// tools/gpu_session.sh runs it after the others). Beside gpu_offload and gpu_resnet_ops (session 11, an H100)
// its check saw their allocations come and go: -691601408 bytes over the 300 runs.
#include "tests/testlib.h"

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/run_engine.h"
#include "kernels/resnet_ops_impl.h"

static long long used_now(void) {
    size_t f = 0, t = 0;
    cudaDeviceSynchronize();
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) return -1;
    return (long long)(t - f);
}

static int env_int(const char *name, int def) {
    const char *e = getenv(name);
    int v = e ? atoi(e) : 0;
    return v > 0 ? v : def;
}

// Prints a change of the used bytes at cycle i; returns the new figure.
static long long note(const char *what, int i, long long prev) {
    long long u = used_now();
    if (u != prev) printf("  %s: cycle %d: device memory in use %lld bytes (%+lld)\n", what, i, u, u - prev);
    return u;
}

static void raw_handles(int n) {
    cudnnHandle_t h;
    cudaStream_t s;
    // one warm cycle: the library's one-time loads
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
        CHECK_MSG(0, "raw handles: the warm cycle could not make a stream and a handle");
        return;
    }
    cudnnSetStream(h, s);
    cudnnDestroy(h);
    cudaStreamDestroy(s);
    const long long u0 = used_now();
    long long u = u0;
    int ok = 1;
    for (int i = 1; i <= n && ok; i++) {
        ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
        if (ok) ok = cudnnCreate(&h) == CUDNN_STATUS_SUCCESS;
        if (ok) {
            cudnnSetStream(h, s);
            cudnnDestroy(h);
        }
        cudaStreamDestroy(s);
        u = note("raw cudnnCreate/cudnnDestroy", i, u);
    }
    CHECK_MSG(ok, "raw handles: a create failed");
    printf("raw cudnnCreate/cudnnSetStream/cudnnDestroy x %d: device memory in use %+lld bytes (%.1f per cycle)\n", n,
           u - u0, (double)(u - u0) / n);
}

static void engine_runs(int n, int drain, mo_run_config *rc, const mo_run_env *env) {
    const char *what = drain ? "engine runs, pool drained after each" : "engine runs, pooled handles";
    mo_csv_row row;
    for (int w = 0; w < 2; w++) CHECK_OK(mo_run_execute(rc, env, &row, NULL));
    if (drain) mo_dnn_pool_drain();
    long created0 = 0;
    mo_dnn_pool_stats(NULL, &created0);
    const long long u0 = used_now();
    long long u = u0;
    int bad = 0;
    for (int i = 1; i <= n; i++) {
        CHECK_OK(mo_run_execute(rc, env, &row, NULL));
        if (strcmp(row.status, "ok") && bad++ < 3) CHECK_MSG(0, "%s: run %d: %s %s", what, i, row.status, row.detail);
        if (drain) mo_dnn_pool_drain();
        u = note(what, i, u);
    }
    long created = 0;
    int pooled = 0;
    mo_dnn_pool_stats(&pooled, &created);
    printf("%s x %d: device memory in use %+lld bytes (%.1f per run); %ld cuDNN handles created, %d pooled now\n", what,
           n, u - u0, (double)(u - u0) / n, created - created0, pooled);
    if (!drain) {
        if (!test_device_wide_skip("device memory in use unchanged after the warm-up"))
            CHECK_MSG(u == u0, "%s: device memory in use %lld bytes after %d runs, %lld after the warm-up (%+lld)", what,
                      u, n, u0, u - u0);
        CHECK_MSG(created - created0 == 0, "%s: %ld cuDNN handles created after the warm-up (the pool reuses one)",
                  what, created - created0);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_require_gpu();
    // Under compute-sanitizer (MEMOPT_TEST_REDUCED) a few cycles: every path once, not the growth.
    const int reduced = test_is_reduced();
    raw_handles(env_int("MEMOPT_TEST_CHURN_N", reduced ? 20 : 1000));
    static mo_config c;
    mo_config_defaults(&c, MO_CMD_RUN);
    static const char *const kv[] = {"--model", "resnet", "--layers", "10", "--hidden", "4", "--input", "32",
                                     "--classes", "5", "--batch", "4", "--accum", "2", "--ckpt", "full",
                                     "--offload", "activations", NULL};
    for (int i = 0; kv[i]; i += 2) CHECK_OK(mo_config_set(&c, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_finish(&c));
    mo_run_config rc = c.base;
    CHECK_OK(mo_config_combination(&c, 0, &rc));
    rc.backend = MO_BACKEND_CUDA;
    rc.steps = 2;
    rc.warmup = 1;
    mo_run_env env;
    if (!CHECK_OK(mo_run_env_init(&env, &rc))) return test_finish();
    const int runs = env_int("MEMOPT_TEST_CHURN_RUNS", reduced ? 5 : 300);
    engine_runs(runs, 0, &rc, &env);
    engine_runs(runs, 1, &rc, &env);
    return test_finish();
}

#else
int main(void) {
    test_require_gpu(); // built without CUDA: prints the reason and exits 77 (skipped)
    return 0;
}
#endif
