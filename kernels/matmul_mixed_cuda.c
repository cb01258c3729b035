// Mixed-precision GEMMs on cuBLASLt: A/B (and D for the forward and dinp) in CUDA_R_16F / CUDA_R_16BF,
// CUBLAS_COMPUTE_32F (fp32 accumulation on the tensor cores), scale type fp32. The same column-major
// view of row-major data as matmul_cuda.c (see there):
//   forward   out^T (OC, N)     = op_T(weight^T (C, OC)) @ inp^T (C, N)   D dt, beta 0
//   dinp      dinp^T (C, N)     = weight^T (C, OC) @ dout^T (OC, N)       D dt, beta 0
//   dweight   dweight^T (C, OC) = inp^T (C, N) @ op_T(dout^T (OC, N))     C = D fp32, beta 1
// Type combinations (cuBLASLt docs, cublasLtMatmul's table for CUBLAS_COMPUTE_32F / scale CUDA_R_32F):
// A/B CUDA_R_16BF with C/D CUDA_R_16BF or CUDA_R_32F, and A/B CUDA_R_16F with C/D CUDA_R_16F or
// CUDA_R_32F, are listed; so the dweight GEMM accumulates straight into the fp32 gradient with beta 1.
// Should the heuristic return no algorithm for a shape (odd leading dimensions), each GEMM falls back
// to cublasGemmEx with the same types (listed for cublasGemmEx too), the bias then added by a kernel
// - no scratch either way (the scratch is the bias gradient's: below).
// Epilogues: BIAS / GELU_AUX_BIAS with the bias and aux in the type of D (their default data types);
// GELU from the fp32 accumulator, the pre-activation stored rounded to dt in aux = out.
// dbias: by default a fixed-order fp32 column reduction of the 16-bit dout (matmul_mixed.cu), a pass of its
// own over dout. MEMOPT_DBIAS=lt has the dweight GEMM sum dout's columns in its BGRADB epilogue instead: the
// bias gradient takes D's type (cublasLt.h, BIAS_DATA_TYPE), fp32 here, and is overwritten, so it goes to
// the scratch's first OC floats and a kernel adds it to dbias; with no BGRADB algorithm for the shape it
// falls back to the plain GEMM and the reduction kernels (counted in epilogue_fallbacks; that path has not
// run on a device: every shape of gpu_ops_gemm_attn_mixed, the odd ones too, got a BGRADB algorithm on the
// H100 and H200 of session 33).
// Everything on c->stream, the workspace c->gemm_ws; MEMOPT_DBIAS_SIDE puts the backward's bias kernels (1, 2)
// and with 3 its dweight GEMM (on c->side_ws) on the side stream, joined before the backward returns.
#include "matmul_mixed.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include "cuda_check.h"
#include "lib_writes.h"
#include "lt_gemm.h"
#include "ops_mixed.h"
#include "side_stream.h"

static cudaDataType_t mx_cuda_type(mo_dtype dt) { return dt == MO_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

// Fallback when cuBLASLt's heuristic has no algorithm (e.g. odd leading dimensions in 16 bits), on
// c->cublas (already bound to c->stream and to c->gemm_ws by mo_ctx_create; not re-set here, since
// cublasSetStream would reset the workspace to cuBLAS's own pool):
// cublasGemmEx with the same types and compute type, column-major D (m, n) = op(A) op(B) + beta D.
static mo_status mx_gemm_ex(mo_ctx *c, const mo_lt_gemm *g) {
    cublasHandle_t hb = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));
    CUBLAS_CHECK(cublasSetMathMode(hb, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    const float one = 1.0f;
    // MEMOPT_MARK_LIB_WRITES (lib_writes.h): D (m, n) at ld ldd when beta does not read it
    const size_t e = g->d_type == CUDA_R_32F ? 4 : 2;
    if (g->beta == 0.0f) MO_TRY(mo_mark_lib_write(c, g->D, (size_t)g->ldd * e, (size_t)g->m * e, (size_t)g->n));
    CUBLAS_CHECK(cublasGemmEx(hb, g->ta, g->tb, g->m, g->n, g->k, &one, g->A, g->ab_type, (int)g->lda, g->B,
                              g->ab_type, (int)g->ldb, &g->beta, g->D, g->d_type, (int)g->ldd, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}

mo_status matmul_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                    const void *weight, const void *bias, const void *add, int N, int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    mo_lt_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, t, t, 0.0f,
                 bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0, 0, NULL};
    int no_algo = 0;
    if (add && gelu_out)
        return MO_FAIL(MO_ERR_INVALID, "matmul_forward_mixed: add and gelu_out together are not supported");
    if (add) {
        // the residual as C (dt, the layout of D), beta 1: added to the fp32 accumulator before the rounding
        mo_lt_gemm fused = g;
        fused.Cin = add;
        fused.beta = 1.0f;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
        c->epilogue_fallbacks++;
        // no algorithm: the plain GEMM, then the residual kernel (one more rounding)
        MO_TRY(matmul_forward_mixed_cuda(c, dt, out, NULL, inp, weight, bias, NULL, N, C, OC));
        return mo_residual_forward_mixed(c, dt, out, out, add, (size_t)N * OC);
    }
    if (gelu_out && OC % 8 == 0) {
        mo_lt_gemm fused = g;
        fused.D = gelu_out;
        fused.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        fused.aux = out;
        fused.aux_ld = OC;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return MO_OK;
    }
    MO_TRY(mo_lt_matmul(c, &g, &no_algo));
    if (no_algo) {
        // no Lt algorithm even without GELU: plain GEMM, then the bias added (one more rounding)
        mo_lt_gemm plain = g;
        plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        plain.bias = NULL;
        MO_TRY(mx_gemm_ex(c, &plain));
        if (bias) MO_TRY(matmul_mixed_bias_cuda(c, dt, out, bias, N, OC));
    }
    // unfused GELU reads the pre-activation already rounded to dt (one more rounding than the epilogue)
    if (gelu_out) MO_TRY(matmul_mixed_gelu_cuda(c, dt, gelu_out, out, (size_t)N * OC));
    return MO_OK;
}

// dinp (N, C) = dout (N, OC) @ weight (OC, C), times gelu'(gelu_pre) when given, on c->stream
static mo_status backward_dinp(mo_ctx *c, mo_dtype dt, void *dinp, const void *dout, const void *weight,
                               const void *gelu_pre, int N, int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    int no_algo = 0;
    {
        mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, t, t, 0.0f,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
        no_algo = 1;
        if (gelu_pre && C % 8 == 0) {
            // DGELU: D = round(gelu'(aux) * acc), aux = the dt pre-activation (C, N), ld C
            mo_lt_gemm fused = g;
            fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
            fused.aux = (void *)gelu_pre;
            fused.aux_ld = C;
            MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        }
        if (no_algo) {
            if (gelu_pre) c->epilogue_fallbacks++;
            MO_TRY(mo_lt_matmul(c, &g, &no_algo));
            if (no_algo) MO_TRY(mx_gemm_ex(c, &g));
            // unfused: dinp rounded to dt, then the GELU backward (one more rounding)
            if (gelu_pre) MO_TRY(mo_gelu_backward_mixed(c, dt, dinp, gelu_pre, dinp, (size_t)N * C));
        }
    }
    return MO_OK;
}

// dweight^T (C, OC) += inp^T (C, N) @ dout (N, OC), fp32, beta 1
static mo_lt_gemm dweight_gemm(mo_dtype dt, float *dweight, const void *dout, const void *inp, int N, int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, t, CUDA_R_32F, 1.0f,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
    return g;
}

// The GEMMs of the backward and, when dbias, its bias gradient after them on c->stream.
static mo_status backward_on_stream(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                    const void *dout, const void *inp, const void *weight, const void *gelu_pre,
                                    void *scratch, int N, int C, int OC) {
    int no_algo = 0;
    if (dinp) MO_TRY(backward_dinp(c, dt, dinp, dout, weight, gelu_pre, N, C, OC));
    mo_lt_gemm g = dweight_gemm(dt, dweight, dout, inp, N, C, OC);
    if (dbias && c->dbias_mode == MO_DBIAS_LT) {
        // BGRADB: the column sums of dout^T's op_T, i.e. of dout (N, OC) over k = N, fp32 (OC) into scratch
        mo_lt_gemm fused = g;
        fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        fused.bias = scratch;
        MO_TRY(mo_lt_matmul(c, &fused, &no_algo));
        if (!no_algo) return matmul_mixed_dbias_add_cuda(c, dbias, (const float *)scratch, OC);
        c->epilogue_fallbacks++;
    }
    MO_TRY(mo_lt_matmul(c, &g, &no_algo));
    if (no_algo) MO_TRY(mx_gemm_ex(c, &g));
    if (dbias) MO_TRY(matmul_mixed_dbias_cuda(c, dt, dbias, dout, (float *)scratch, N, OC));
    return MO_OK;
}

// MEMOPT_DBIAS_SIDE 1 or 2 (not with lt, whose sums come out of the dweight GEMM): the bias kernels, which
// only read dout and write dbias and the scratch, on the side stream forked here, launched before (1) or
// after (2) the GEMMs; 3: the dweight GEMM too, on the context's second workspace (side_ws, as large as the
// first, so the same plan and algorithm), under the dinp GEMM. The compute stream joins the side before this
// returns. The same kernels in the same order: the same bits.
mo_status matmul_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                     const void *dout, const void *inp, const void *weight, const void *gelu_pre,
                                     void *scratch, int N, int C, int OC) {
    // not while tuning (MEMOPT_GEMM_TUNE): a plan made inside the fork would be timed beside the side's work
    int side = c->dbias_mode != MO_DBIAS_LT && !c->gemm_tune ? c->dbias_side : 0;
    if (side == 3 && !c->side_ws) side = 2; // no second workspace (the knob set after the context was made)
    if (side == 3 && !dinp) side = dbias ? 2 : 0;
    if (side != 3 && !dbias) side = 0;
    if (!side)
        return backward_on_stream(c, dt, dinp, dweight, dbias, dout, inp, weight, gelu_pre, scratch, N, C, OC);
    void *ss = NULL;
    MO_TRY(mo_side_fork(c, &ss));
    mo_status st = MO_OK;
    if (side == 3) {
        mo_lt_gemm g = dweight_gemm(dt, dweight, dout, inp, N, C, OC);
        int no_algo = 0;
        st = mo_lt_matmul_on(c, &g, &no_algo, ss, c->side_ws);
        if (st == MO_OK && dbias) st = matmul_mixed_dbias_on_cuda(c, ss, dt, dbias, dout, (float *)scratch, N, OC);
        if (st == MO_OK) st = backward_dinp(c, dt, dinp, dout, weight, gelu_pre, N, C, OC);
        const mo_status sj = mo_side_join(c);
        if (st == MO_OK) st = sj;
        // no cuBLASLt algorithm for dweight (nothing was launched for it): cuBLAS on the compute stream
        if (st == MO_OK && no_algo) st = mx_gemm_ex(c, &g);
        return st;
    }
    if (side == 1) st = matmul_mixed_dbias_on_cuda(c, ss, dt, dbias, dout, (float *)scratch, N, OC);
    if (st == MO_OK)
        st = backward_on_stream(c, dt, dinp, dweight, NULL, dout, inp, weight, gelu_pre, scratch, N, C, OC);
    if (st == MO_OK && side == 2) st = matmul_mixed_dbias_on_cuda(c, ss, dt, dbias, dout, (float *)scratch, N, OC);
    const mo_status sj = mo_side_join(c); // also after a failure: nothing left forked
    return st != MO_OK ? st : sj;
}

// MEMOPT_DBIAS=gelu: bf16's dinp GEMM with DGELU_BGRAD, its bias gradient (the sums of D's rows over its n
// columns, i.e. of dinp (N, C) over N) in D's type into the scratch's first C values, then added to dinp_dbias
// in fp32; then dweight and dbias as the plain backward (the scratch reused after that add, in stream order).
// fp16, C % 8 != 0 or no DGELU_BGRAD algorithm (the last counted in epilogue_fallbacks): the dgelu backward
// above, then the reduction kernel adds dinp's column sums to dinp_dbias (the default's bits).
mo_status matmul_backward_dgelu_bsum_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight,
                                                float *dbias, const void *dout, const void *inp, const void *weight,
                                                const void *gelu_pre, void *scratch, int N, int C, int OC) {
    const cudaDataType_t t = mx_cuda_type(dt);
    if (dt == MO_BF16 && C % 8 == 0) {
        int no_algo = 0;
        mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, t, t, 0.0f,
                        CUBLASLT_EPILOGUE_DGELU_BGRAD, scratch, (void *)gelu_pre, C, 0, NULL};
        MO_TRY(mo_lt_matmul(c, &g, &no_algo));
        if (!no_algo) {
            MO_TRY(matmul_mixed_dbias_add16_cuda(c, dinp_dbias, scratch, C));
            return matmul_backward_mixed_cuda(c, dt, NULL, dweight, dbias, dout, inp, weight, NULL, scratch, N, C, OC);
        }
        c->epilogue_fallbacks++;
    }
    MO_TRY(matmul_backward_mixed_cuda(c, dt, dinp, dweight, dbias, dout, inp, weight, gelu_pre, scratch, N, C, OC));
    return matmul_mixed_dbias_cuda(c, dt, dinp_dbias, dinp, (float *)scratch, N, C);
}
