// Probe: what a kernel launch costs under compute-sanitizer as a function of the device memory the
// process holds. Session 18 measured a forward and backward of a 3-block GPT (width 128, T 64) at about
// 3 ms natively, 0.1-0.5 s under memcheck and about 40 s under initcheck, the same with cuBLAS/cuDNN's
// kernels left unchecked; leaving groups of the suite's own kernels unchecked could not place the cost.
// This asks the question without the suite: is it per launch, per byte the kernel touches, or per byte
// (or per allocation) the process holds?
// For each row: ALLOC bytes held besides the kernel's own buffer (in CHUNKS cudaMallocs, written with
// cudaMemset or left unwritten), then LAUNCHES launches of a kernel over N floats (one read and one write
// each), timed by the wall clock around the launches and one cudaDeviceSynchronize; prints the time per
// launch. Then the ways to clear a region (lib_writes.h's mark for initcheck: rows x width bytes at a
// pitch, the shapes of a small GPT's GEMM outputs): cudaMemsetAsync (one run of rows x pitch),
// cudaMemset2DAsync, and the suite's kernel (mo_lib_write_zero_cuda), LAUNCHES of each, ms per call.
// Run it natively and under each tool: compute-sanitizer --tool initcheck memopt_probe_...
// Usage: memopt_probe_sanitizer_launch_cost [LAUNCHES]   (default 50; GPU only, exits 77 without one)
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/probes/probe_check.h"
#include "kernels/lib_writes.h"


// (n,) in place: one read and one write a float
__global__ void bump(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * 0.5f + 1.0f;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

typedef struct row {
    size_t held_mib;  // held besides the kernel's buffer
    int chunks;       // in this many cudaMallocs
    int written;      // cudaMemset (initialized) or not
    int n;            // floats the kernel touches
} row;

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 50;
    if (launches < 1 || launches > 100000) {
        fprintf(stderr, "memopt_probe_sanitizer_launch_cost: LAUNCHES: '%s' is not a count 1-100000\n", argv[1]);
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    static const row rows[] = {
        {0, 0, 0, 256},         {0, 0, 0, 1 << 20},        {256, 1, 1, 256},     {4096, 1, 1, 256},
        {4096, 1, 0, 256},      {4096, 2048, 1, 256},      {4096, 1, 1, 1 << 20}, {0, 0, 0, 256},
    };
    printf("launches %d each; ms per launch (wall, launches + one sync)\n", launches);
    printf("%10s %7s %8s %9s %12s %12s\n", "held_MiB", "chunks", "written", "n", "alloc_ms", "ms/launch");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const row *w = &rows[r];
        float *a = NULL;
        CK(cudaMalloc((void **)&a, (size_t)w->n * sizeof(float)));
        CK(cudaMemset(a, 0, (size_t)w->n * sizeof(float)));
        void **held = (void **)calloc(w->chunks > 0 ? w->chunks : 1, sizeof(void *));
        const size_t per = w->chunks ? (w->held_mib << 20) / w->chunks : 0;
        double t0 = now_ms();
        for (int c = 0; c < w->chunks; c++) {
            CK(cudaMalloc(&held[c], per));
            if (w->written) CK(cudaMemset(held[c], 0, per));
        }
        CK(cudaDeviceSynchronize());
        double t1 = now_ms();
        bump<<<(w->n + 255) / 256, 256>>>(a, w->n); // warm: the module's first launch
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        double t2 = now_ms();
        for (int k = 0; k < launches; k++) {
            bump<<<(w->n + 255) / 256, 256>>>(a, w->n);
            CK(cudaGetLastError());
        }
        CK(cudaDeviceSynchronize());
        double t3 = now_ms();
        printf("%10zu %7d %8s %9d %12.1f %12.3f\n", w->held_mib, w->chunks, w->written ? "yes" : "no", w->n, t1 - t0,
               (t3 - t2) / launches);
        fflush(stdout);
        for (int c = 0; c < w->chunks; c++) CK(cudaFree(held[c]));
        free(held);
        CK(cudaFree(a));
    }
    // (rows, width, pitch): the fc output (B*T 256, 4C 512 fp16), the qkv one (256, 3C 384 fp16), the
    // logits (256, V 1000 fp16: 2000 B), attention scores (B*H*T 1024 rows of T 64 fp16) and a padded one
    static const size_t shapes[][3] = {{256, 1024, 1024}, {256, 768, 768}, {256, 2000, 2000}, {1024, 128, 128}, {1024, 128, 256}};
    printf("%7s %7s %7s %14s %14s %14s\n", "rows", "width", "pitch", "memset_ms", "memset2d_ms", "kernel_ms");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const size_t rows = shapes[i][0], width = shapes[i][1], pitch = shapes[i][2];
        unsigned char *d = NULL;
        CK(cudaMalloc((void **)&d, rows * pitch));
        double ms[3], t0 = 0;
        for (int way = 0; way < 3; way++) {
            // one untimed call first: a way's first use (the kernel's module, the tool's setup) is not its cost
            for (int k = 0; k <= launches; k++) {
                if (k == 1) {
                    CK(cudaDeviceSynchronize());
                    t0 = now_ms();
                }
                if (way == 0) CK(cudaMemsetAsync(d, 0, rows * pitch, 0));
                else if (way == 1) CK(cudaMemset2DAsync(d, pitch, 0, width, rows, 0));
                else if (mo_lib_write_zero_cuda(0, d, pitch, width, rows) != MO_OK) {
                    fprintf(stderr, "mo_lib_write_zero_cuda: %s\n", mo_errmsg());
                    return 1;
                }
            }
            CK(cudaDeviceSynchronize());
            ms[way] = (now_ms() - t0) / launches;
        }
        printf("%7zu %7zu %7zu %14.3f %14.3f %14.3f\n", rows, width, pitch, ms[0], ms[1], ms[2]);
        fflush(stdout);
        CK(cudaFree(d));
    }
    return 0;
}
