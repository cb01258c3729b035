// Probe: how far the cuBLASLt heuristic's first algorithm is from the fastest of its top candidates,
// for every GEMM of one GPT-2 124M training step (B*T = 8192 rows, C 768, V 50304), in fp32 (no TF32)
// and in bf16. Answers "would timing the candidates (autotuning) pay?" before any of it is built.
// For each GEMM: up to MAX_ALGOS heuristic results, each timed (CUDA events, median of REPS launches
// after WARM) on random data; prints the first's time, the best's time and rank, and the step-weighted
// sum (count = how many times the GEMM runs per step). Also times the DGELU epilogue on the fc-proj
// backward GEMM (would fusing the GELU backward into it pay?).
// Usage: memopt_probe_gemm_algos [fp32|bf16 ...]   (GPU only; exits 77 without one)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/probes/probe_check.h"

#define MAX_ALGOS 16
#define WARM 3
#define REPS 15

#define LK(call)                                                                            \
    do {                                                                                    \
        cublasStatus_t s_ = (call);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

typedef struct gemm {
    const char *name;
    int count; // per step
    cublasOperation_t ta, tb;
    int m, n, k;
    int beta_one;
    cublasLtEpilogue_t epi;
    int bf16_d; // D in the 16-bit type (forward, dinp); fp32 D otherwise (dweight)
} gemm;

static cublasLtHandle_t lt;
static cudaStream_t st;
static void *ws;
static const size_t ws_bytes = (size_t)32 << 20;

static void *dev_random(size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes));
    size_t n = bytes / 2;
    unsigned short *h = malloc(n * 2);
    unsigned s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = (unsigned short)(0x3c00 + ((s >> 16) & 0x3ff)); // ~[-1,1]-ish small fp16/bf16 bit patterns
        if (i % 2) h[i] = 0x3a00 + (s >> 22);
    }
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// Median ms of REPS launches of one algorithm.
static float time_algo(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                       cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, const void *A, const void *B,
                       void *D, float beta) {
    const float alpha = 1.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[REPS];
    for (int r = 0; r < WARM + REPS; r++) {
        CK(cudaEventRecord(e0, st));
        cublasStatus_t s = cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo, ws, ws_bytes, st);
        if (s != CUBLAS_STATUS_SUCCESS) return -1.0f;
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        if (r >= WARM) CK(cudaEventElapsedTime(&t[r - WARM], e0, e1));
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    qsort(t, REPS, sizeof t[0], cmpf);
    return t[REPS / 2];
}

// Returns the heuristic-first and best times (ms) of g.
static void probe(const gemm *g, int bf16, void *A, void *B, void *D, void *bias, void *aux, double *first,
                  double *best) {
    cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType_t dt = bf16 && g->bf16_d ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t op;
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epi, sizeof g->epi));
    if (g->epi != CUBLASLT_EPILOGUE_DEFAULT)
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (g->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || g->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
        g->epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ald = g->m;
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof ald));
    }
    if (g->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD || g->epi == CUBLASLT_EPILOGUE_BGRADB) {
        cudaDataType_t bt = CUDA_R_32F; // the fp32 gradient of the bias
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    int tA = g->ta == CUBLAS_OP_T, tB = g->tb == CUBLAS_OP_T;
    cublasLtMatrixLayout_t la, lb, ld;
    LK(cublasLtMatrixLayoutCreate(&la, ab, tA ? g->k : g->m, tA ? g->m : g->k, tA ? g->k : g->m));
    LK(cublasLtMatrixLayoutCreate(&lb, ab, tB ? g->n : g->k, tB ? g->k : g->n, tB ? g->n : g->k));
    LK(cublasLtMatrixLayoutCreate(&ld, dt, g->m, g->n, g->m));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    size_t w = ws_bytes;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
    cublasLtMatmulHeuristicResult_t h[MAX_ALGOS];
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, MAX_ALGOS, h, &found);
    *first = *best = -1;
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        printf("  %-22s %s: no algorithm (%s)\n", g->name, bf16 ? "bf16" : "fp32", cublasGetStatusString(s));
    } else {
        int best_i = 0;
        float tb = 1e30f, t0 = -1;
        for (int i = 0; i < found; i++) {
            float t = time_algo(op, la, lb, ld, &h[i].algo, A, B, D, g->beta_one ? 1.0f : 0.0f);
            if (i == 0) t0 = t;
            if (t > 0 && t < tb) tb = t, best_i = i;
        }
        double fl = 2.0 * g->m * g->n * g->k;
        printf("  %-22s %s x%-3d m %5d n %5d k %5d: first %.4f ms (%.1f TFLOP/s), best %.4f ms (#%d of %d, %.1f TFLOP/s), "
               "gain %.1f%%\n",
               g->name, bf16 ? "bf16" : "fp32", g->count, g->m, g->n, g->k, t0, fl / t0 / 1e9, tb, best_i, found,
               fl / tb / 1e9, 100.0 * (t0 - tb) / t0);
        *first = t0;
        *best = tb;
    }
    LK(cublasLtMatmulPreferenceDestroy(pref));
    LK(cublasLtMatrixLayoutDestroy(la));
    LK(cublasLtMatrixLayoutDestroy(lb));
    LK(cublasLtMatrixLayoutDestroy(ld));
    LK(cublasLtMatmulDescDestroy(op));
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    CK(cudaStreamCreate(&st));
    LK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, ws_bytes));
    const int N = 8192, C = 768, V = 50304;
    // Column-major view of llm.c's row-major GEMMs (as kernels/matmul_cuda.c):
    //   forward  D (OC, N) = op_T(W^T (C, OC)) @ X^T (C, N)
    //   dinp     D (C, N)  = W^T (C, OC) @ dY^T (OC, N)
    //   dweight  D (C, OC) += X^T (C, N) @ op_T(dY^T (OC, N))
    const gemm G[] = {
        {"qkv fwd", 12, CUBLAS_OP_T, CUBLAS_OP_N, 3 * C, N, C, 0, CUBLASLT_EPILOGUE_BIAS, 1},
        {"proj fwd", 12, CUBLAS_OP_T, CUBLAS_OP_N, C, N, C, 0, CUBLASLT_EPILOGUE_BIAS, 1},
        {"fc fwd gelu", 12, CUBLAS_OP_T, CUBLAS_OP_N, 4 * C, N, C, 0, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 1},
        {"fcproj fwd", 12, CUBLAS_OP_T, CUBLAS_OP_N, C, N, 4 * C, 0, CUBLASLT_EPILOGUE_BIAS, 1},
        {"lm head fwd", 1, CUBLAS_OP_T, CUBLAS_OP_N, V, N, C, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"qkv dinp", 12, CUBLAS_OP_N, CUBLAS_OP_N, C, N, 3 * C, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"proj dinp", 12, CUBLAS_OP_N, CUBLAS_OP_N, C, N, C, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"fc dinp", 12, CUBLAS_OP_N, CUBLAS_OP_N, C, N, 4 * C, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"fcproj dinp", 12, CUBLAS_OP_N, CUBLAS_OP_N, 4 * C, N, C, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"fcproj dinp+dgelu", 0, CUBLAS_OP_N, CUBLAS_OP_N, 4 * C, N, C, 0, CUBLASLT_EPILOGUE_DGELU_BGRAD, 1},
        {"lm head dinp", 1, CUBLAS_OP_N, CUBLAS_OP_N, C, N, V, 0, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"qkv dw+bgrad", 12, CUBLAS_OP_N, CUBLAS_OP_T, C, 3 * C, N, 1, CUBLASLT_EPILOGUE_BGRADB, 0},
        {"proj dw+bgrad", 12, CUBLAS_OP_N, CUBLAS_OP_T, C, C, N, 1, CUBLASLT_EPILOGUE_BGRADB, 0},
        {"fc dw+bgrad", 12, CUBLAS_OP_N, CUBLAS_OP_T, C, 4 * C, N, 1, CUBLASLT_EPILOGUE_BGRADB, 0},
        {"fcproj dw+bgrad", 12, CUBLAS_OP_N, CUBLAS_OP_T, 4 * C, C, N, 1, CUBLASLT_EPILOGUE_BGRADB, 0},
        {"fc dw (no bgrad)", 0, CUBLAS_OP_N, CUBLAS_OP_T, C, 4 * C, N, 1, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"qkv dw (no bgrad)", 0, CUBLAS_OP_N, CUBLAS_OP_T, C, 3 * C, N, 1, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"fcproj dw (no bgrad)", 0, CUBLAS_OP_N, CUBLAS_OP_T, 4 * C, C, N, 1, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"lm head dw", 1, CUBLAS_OP_N, CUBLAS_OP_T, C, V, N, 1, CUBLASLT_EPILOGUE_DEFAULT, 0},
    };
    const int ng = (int)(sizeof G / sizeof G[0]);
    // buffers big enough for every operand: the largest is V x N
    const size_t big = (size_t)V * N * 4;
    void *A = dev_random(big), *B = dev_random(big), *D = dev_random(big), *aux = dev_random((size_t)4 * C * N * 4);
    void *bias = dev_random((size_t)V * 4);
    for (int a = 1; a <= (argc > 1 ? argc - 1 : 2); a++) {
        const char *p = argc > 1 ? argv[a] : (a == 1 ? "fp32" : "bf16");
        int bf16 = strcmp(p, "bf16") == 0;
        if (!bf16 && strcmp(p, "fp32") != 0) {
            fprintf(stderr, "memopt_probe_gemm_algos: precision '%s': expected fp32 or bf16\n", p);
            return 2;
        }
        printf("== %s (heuristic top %d, median of %d)\n", p, MAX_ALGOS, REPS);
        double sum_first = 0, sum_best = 0;
        for (int i = 0; i < ng; i++) {
            gemm g = G[i];
            // bf16: the suite computes the bias gradient apart (matmul_mixed.cu); BGRADB with an fp32
            // bias is probed here to see whether it could replace that pass
            double f, b;
            probe(&g, bf16, A, B, D, bias, aux, &f, &b);
            if (f > 0) sum_first += g.count * f, sum_best += g.count * b;
        }
        printf("  step total (counted GEMMs): first %.2f ms, best %.2f ms, gain %.2f ms\n", sum_first, sum_best,
               sum_first - sum_best);
    }
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(D));
    CK(cudaFree(aux));
    CK(cudaFree(bias));
    CK(cudaFree(ws));
    LK(cublasLtDestroy(lt));
    CK(cudaStreamDestroy(st));
    return 0;
}
