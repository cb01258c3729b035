// GEMMs on cuBLASLt, adapted from karpathy/llm.c (llmc/matmul.cuh, matmul_cublaslt; train_gpt2_fp32.cu,
// matmul_forward_cublaslt / matmul_backward).
//
// Row-major data seen column-major: a row-major (R, K) array is a column-major (K, R) matrix with ld K.
// With that, each GEMM computes the transpose of its row-major result (all matrices column-major):
//   forward   out^T (OC, N)     = op_T(weight^T (C, OC)) @ inp^T (C, N)       (beta 0)
//   dinp      dinp^T (C, N)     = weight^T (C, OC) @ dout^T (OC, N)           (beta 0: overwritten)
//   dweight   dweight^T (C, OC) = inp^T (C, N) @ op_T(dout^T (OC, N))         (beta 1: accumulated)
// Epilogues (cublasLt.h): BIAS adds a vector of length rows(D) = OC; GELU_AUX_BIAS adds the bias, writes
// the pre-activation to EPILOGUE_AUX_POINTER (ld EPILOGUE_AUX_LD, which must be a multiple of 8) and
// GELU(pre-activation) to D; BGRADB on the dweight GEMM writes (overwrites) the column sums of B over the
// GEMM's k = N, i.e. sum over rows of dout, a vector of length cols(D) = OC, to BIAS_POINTER.
//
// Every device byte cuBLASLt uses is c->gemm_ws (from the suite's allocator); all work is on c->stream.
// Determinism: cuBLAS(Lt) gives the same bits run to run for the same problem, handle settings,
// workspace and GPU (its split-K reductions are ordered); nothing here uses atomics.
// Heuristics are queried per call (cuBLASLt caches them internally); a per-shape descriptor cache can
// come later if profiles show host time here.
#include "matmul.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include "cuda_check.h"
#include "lt_gemm.h"
#include "ops.h"

static mo_status no_algo_error(const char *what, const mo_lt_gemm *g) {
    return MO_FAIL(MO_ERR_CUBLAS, "%s: cuBLASLt has no algorithm for m=%d n=%d k=%d epilogue=%d", what, g->m, g->n,
                   g->k, (int)g->epilogue);
}

mo_status matmul_forward_cuda(mo_ctx *c, float *out, float *gelu_out, const float *inp, const float *weight,
                              const float *bias, const float *add, int N, int C, int OC) {
    // D = out^T (OC, N): A = weight^T stored (C, OC), op T; B = inp^T (C, N)
    mo_lt_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, CUDA_R_32F, CUDA_R_32F, 0.0f,
                    bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0, c->tf32, NULL};
    int no_algo = 0;
    if (add && gelu_out) return MO_FAIL(MO_ERR_INVALID, "matmul_forward: add and gelu_out together are not supported");
    if (add) {
        // the residual as C (same (OC, N) layout as D), beta 1; else the GEMM, then the residual kernel
        mo_lt_gemm fused = g;
        fused.Cin = add;
        fused.beta = 1.0f;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
        c->epilogue_fallbacks++;
        MO_TRY(mo_lt_matmul(c, &g, &no_algo));
        if (no_algo) return no_algo_error("matmul_forward_add", &g);
        return mo_residual_forward(c, out, out, add, (size_t)N * OC);
    }
    // GELU fused: pre-activation to aux = out, GELU to D = gelu_out (aux ld must be a multiple of 8)
    if (gelu_out && OC % 8 == 0) {
        mo_lt_gemm fused = g;
        fused.D = gelu_out;
        fused.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        fused.aux = out;
        fused.aux_ld = OC;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
    }
    // plain GEMM (+ bias); GELU separately when it could not be fused
    MO_TRY(mo_lt_matmul(c, &g, &no_algo));
    if (no_algo) return no_algo_error("matmul_forward", &g);
    if (gelu_out) MO_TRY(mo_gelu_forward(c, gelu_out, out, (size_t)N * OC));
    return MO_OK;
}

// dbias (OC) += ones (N) through dout: a GEMV in cuBLAS's fixed order, for when BGRADB is unavailable.
static mo_status dbias_gemv(mo_ctx *c, float *dbias, const float *dout, float *ones, int N, int OC) {
    cudaStream_t s = (cudaStream_t)c->stream;
    // N ones: one staged host copy (this fallback is not the fast path)
    float *h = malloc((size_t)N * sizeof *h);
    if (!h) return MO_FAIL(MO_ERR_OOM, "matmul_backward: host out of memory (%d floats)", N);
    for (int i = 0; i < N; i++) h[i] = 1.0f;
    cudaError_t e = cudaMemcpyAsync(ones, h, (size_t)N * sizeof *h, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    free(h);
    CUDA_CHECK(e);
    cublasHandle_t hb = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
    const float one = 1.0f;
    // y (OC) = A (OC, N) @ x (N) + y, A = dout seen col-major (OC, N), ld OC
    CUBLAS_CHECK(cublasSgemv(hb, CUBLAS_OP_N, OC, N, &one, dout, OC, ones, 1, &one, dbias, 1));
    return MO_OK;
}

mo_status matmul_backward_cuda(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *gelu_pre, void *scratch, int N,
                               int C, int OC) {
    int no_algo = 0;
    if (dinp) {
        // D = dinp^T (C, N) = weight^T (C, OC) @ dout^T (OC, N), overwritten
        mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, CUDA_R_32F, CUDA_R_32F, 0.0f,
                        CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, c->tf32, NULL};
        no_algo = 1;
        if (gelu_pre && C % 8 == 0) {
            // DGELU: D = gelu'(aux) * (A @ B), aux = the pre-activation (C, N) with ld C (a multiple of 8)
            mo_lt_gemm fused = g;
            fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
            fused.aux = (void *)gelu_pre;
            fused.aux_ld = C;
            MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        }
        if (no_algo) {
            if (gelu_pre) c->epilogue_fallbacks++;
            MO_TRY(mo_lt_matmul(c, &g, &no_algo));
            if (no_algo) return no_algo_error("matmul_backward (dinp)", &g);
            if (gelu_pre) MO_TRY(mo_gelu_backward(c, dinp, gelu_pre, dinp, (size_t)N * C));
        }
    }
    // D = dweight^T (C, OC) += inp^T (C, N) @ op_T(dout^T (OC, N))
    mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, CUDA_R_32F, CUDA_R_32F, 1.0f,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, c->tf32, NULL};
    if (dbias) {
        // BGRADB overwrites its output: the column sums go to scratch (OC), then dbias += scratch
        float *bgrad = (float *)scratch;
        float *ones = bgrad + OC;
        mo_lt_gemm fused = g;
        fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        fused.bias = bgrad;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) {
            cublasHandle_t hb = (cublasHandle_t)c->cublas;
            CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
            const float one = 1.0f;
            CUBLAS_CHECK(cublasSaxpy(hb, OC, &one, bgrad, 1, dbias, 1)); // elementwise: order-free
            return MO_OK;
        }
        MO_TRY(dbias_gemv(c, dbias, dout, ones, N, OC));
    }
    MO_TRY(mo_lt_matmul(c, &g, &no_algo));
    if (no_algo) return no_algo_error("matmul_backward (dweight)", &g);
    return MO_OK;
}
