// Mixed-precision GEMMs: the plain-C references (16-bit inputs converted to fp32, then the fp32
// references of matmul.c, outputs rounded once) and the mo_matmul_*_mixed dispatchers.
#include "matmul_mixed.h"

#include <stdlib.h>
#include "gelu.h"
#include "matmul.h"
#include "ops_mixed_gemm.h"
#include "cost.h"

int mo_mmg_is_16bit(mo_dtype dt) { return dt == MO_F16 || dt == MO_BF16; }

float mo_mmg_load(mo_dtype dt, const void *p, size_t i) {
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == MO_BF16 ? mo_bf16_to_f32(h) : mo_f16_to_f32(h);
}

void mo_mmg_store(mo_dtype dt, void *p, size_t i, float v) {
    ((uint16_t *)p)[i] = dt == MO_BF16 ? mo_f32_to_bf16(v) : mo_f32_to_f16(v);
}

float *mo_mmg_to_f32_alloc(mo_dtype dt, const void *src, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (p && n) mo_convert_to_f32(dt, p, src, n);
    return p;
}

size_t mo_matmul_backward_mixed_scratch_bytes(int N, int OC, int has_dbias) {
    if (!has_dbias || N <= 0 || OC <= 0) return 0;
    return (size_t)mo_mm_mixed_dbias_chunks(N) * (size_t)OC * sizeof(float);
}

// the larger of dbias's (OC) and dinp's sums' (C: the epilogue's C 16-bit values, or the reduction's chunks):
// one after the other
size_t mo_matmul_backward_dgelu_bsum_mixed_scratch_bytes(int N, int C, int OC, int has_dbias) {
    size_t a = mo_matmul_backward_mixed_scratch_bytes(N, OC, has_dbias), b = mo_matmul_backward_mixed_scratch_bytes(N, C, 1);
    return a > b ? a : b;
}

mo_status matmul_forward_mixed_cpu(mo_dtype dt, void *out, void *gelu_out, const void *inp, const void *weight,
                                   const void *bias, int N, int C, int OC) {
    const size_t nout = (size_t)N * OC;
    float *x = mo_mmg_to_f32_alloc(dt, inp, (size_t)N * C);
    float *w = mo_mmg_to_f32_alloc(dt, weight, (size_t)OC * C);
    float *b = bias ? mo_mmg_to_f32_alloc(dt, bias, (size_t)OC) : NULL;
    float *y = malloc(nout * sizeof *y);
    float *g = gelu_out ? malloc(nout * sizeof *g) : NULL;
    mo_status st = MO_OK;
    if (!x || !w || (bias && !b) || !y || (gelu_out && !g))
        st = MO_FAIL(MO_ERR_OOM, "matmul_forward_mixed_cpu: host out of memory");
    if (st == MO_OK) st = matmul_forward_cpu(y, g, x, w, b, N, C, OC); // gelu from the unrounded fp32 out
    if (st == MO_OK) {
        mo_convert_from_f32(dt, out, y, nout);
        if (gelu_out) mo_convert_from_f32(dt, gelu_out, g, nout);
    }
    free(x); free(w); free(b); free(y); free(g);
    return st;
}

mo_status matmul_backward_mixed_cpu(mo_dtype dt, void *dinp, float *dweight, float *dbias, const void *dout,
                                    const void *inp, const void *weight, int N, int C, int OC) {
    const size_t nin = (size_t)N * C;
    float *dy = mo_mmg_to_f32_alloc(dt, dout, (size_t)N * OC);
    float *x = mo_mmg_to_f32_alloc(dt, inp, nin);
    float *w = mo_mmg_to_f32_alloc(dt, weight, (size_t)OC * C);
    float *dx = dinp ? malloc(nin * sizeof *dx) : NULL;
    mo_status st = MO_OK;
    if (!dy || !x || !w || (dinp && !dx)) st = MO_FAIL(MO_ERR_OOM, "matmul_backward_mixed_cpu: host out of memory");
    // dweight, dbias: fp32 += as the fp32 reference; dinp rounded once
    if (st == MO_OK) st = matmul_backward_cpu(dx, dweight, dbias, dy, x, w, N, C, OC);
    if (st == MO_OK && dinp) mo_convert_from_f32(dt, dinp, dx, nin);
    free(dy); free(x); free(w); free(dx);
    return st;
}

static mo_status check_args(const char *op, mo_dtype dt, int N, int C, int OC) {
    if (!mo_mmg_is_16bit(dt))
        return MO_FAIL(MO_ERR_INVALID, "%s: dtype %s is not a 16-bit type (fp16 or bf16)", op, mo_dtype_name(dt));
    if (N <= 0 || C <= 0 || OC <= 0) return MO_FAIL(MO_ERR_INVALID, "%s: bad shape N=%d C=%d OC=%d", op, N, C, OC);
    return MO_OK;
}

mo_status mo_matmul_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                  const void *weight, const void *bias, int N, int C, int OC) {
    MO_TRY(check_args("matmul_forward_mixed", dt, N, C, OC));
    mo_cost_matmul_forward(c, (int)mo_dtype_size(dt), N, C, OC, gelu_out != NULL, 0);
    switch (c->backend) {
    case MO_BACKEND_CPU: return matmul_forward_mixed_cpu(dt, out, gelu_out, inp, weight, bias, N, C, OC);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return matmul_forward_mixed_cuda(c, dt, out, gelu_out, inp, weight, bias, NULL, N, C, OC);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "matmul_forward_mixed: unknown backend %d", (int)c->backend);
}

mo_status mo_matmul_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                   const void *dout, const void *inp, const void *weight, int N, int C, int OC) {
    MO_TRY(check_args("matmul_backward_mixed", dt, N, C, OC));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_matmul_backward_mixed_scratch_bytes(N, OC, dbias != NULL), &scratch));
    mo_status st;
    mo_cost_matmul_backward(c, (int)mo_dtype_size(dt), N, C, OC, dinp != NULL, dbias != NULL, 0);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = matmul_backward_mixed_cpu(dt, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = matmul_backward_mixed_cuda(c, dt, dinp, dweight, dbias, dout, inp, weight, NULL, scratch, N, C, OC);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_backward_mixed: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "matmul_backward_mixed: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

// cpu: the fp32 GEMM, the add in fp32, one rounding
static mo_status matmul_forward_add_mixed_cpu(mo_dtype dt, void *out, const void *inp, const void *weight,
                                              const void *bias, const void *add, int N, int C, int OC) {
    const size_t nout = (size_t)N * OC;
    float *x = mo_mmg_to_f32_alloc(dt, inp, (size_t)N * C);
    float *w = mo_mmg_to_f32_alloc(dt, weight, (size_t)OC * C);
    float *b = bias ? mo_mmg_to_f32_alloc(dt, bias, (size_t)OC) : NULL;
    float *r = mo_mmg_to_f32_alloc(dt, add, nout);
    float *y = malloc(nout * sizeof *y);
    mo_status st = MO_OK;
    if (!x || !w || (bias && !b) || !r || !y) st = MO_FAIL(MO_ERR_OOM, "matmul_forward_add_mixed_cpu: host out of memory");
    if (st == MO_OK) st = matmul_forward_cpu(y, NULL, x, w, b, N, C, OC);
    if (st == MO_OK) {
        for (size_t i = 0; i < nout; i++) y[i] += r[i];
        mo_convert_from_f32(dt, out, y, nout);
    }
    free(x); free(w); free(b); free(r); free(y);
    return st;
}

// cpu: the fp32 dinp, the GELU backward in fp32, one rounding. dinp_dbias (C, may be NULL) += dinp's column
// sums as mo_matmul_backward_dgelu_bsum_mixed's cuda path makes them: bf16 the double sum of the unrounded
// values rounded to bf16; fp16 the double sum of the rounded values (matmul_backward_cpu's dbias)
static mo_status matmul_backward_dgelu_mixed_cpu(mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight, float *dbias,
                                                 const void *dout, const void *inp, const void *weight,
                                                 const void *gelu_pre, int N, int C, int OC) {
    const size_t nin = (size_t)N * C;
    float *dy = mo_mmg_to_f32_alloc(dt, dout, (size_t)N * OC);
    float *x = mo_mmg_to_f32_alloc(dt, inp, nin);
    float *w = mo_mmg_to_f32_alloc(dt, weight, (size_t)OC * C);
    float *pre = mo_mmg_to_f32_alloc(dt, gelu_pre, nin);
    float *dx = malloc(nin * sizeof *dx);
    mo_status st = MO_OK;
    if (!dy || !x || !w || !pre || !dx) st = MO_FAIL(MO_ERR_OOM, "matmul_backward_dgelu_mixed_cpu: host out of memory");
    if (st == MO_OK) st = matmul_backward_cpu(dx, dweight, dbias, dy, x, w, N, C, OC);
    if (st == MO_OK) st = gelu_backward_cpu(dx, pre, dx, nin);
    if (st == MO_OK && dinp_dbias && dt == MO_BF16)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int i = 0; i < N; i++) s += dx[(size_t)i * C + j];
            dinp_dbias[j] = (float)((double)dinp_dbias[j] + (double)mo_bf16_to_f32(mo_f32_to_bf16((float)s)));
        }
    if (st == MO_OK) mo_convert_from_f32(dt, dinp, dx, nin);
    if (st == MO_OK && dinp_dbias && dt != MO_BF16)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int i = 0; i < N; i++) s += mo_mmg_load(dt, dinp, (size_t)i * C + j);
            dinp_dbias[j] = (float)((double)dinp_dbias[j] + s);
        }
    free(dy); free(x); free(w); free(pre); free(dx);
    return st;
}

mo_status mo_matmul_forward_add_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *inp, const void *weight,
                                      const void *bias, const void *add, int N, int C, int OC) {
    MO_TRY(check_args("matmul_forward_add_mixed", dt, N, C, OC));
    if (!add) return MO_FAIL(MO_ERR_INVALID, "matmul_forward_add_mixed: add is required");
    mo_cost_matmul_forward(c, (int)mo_dtype_size(dt), N, C, OC, 0, 1);
    switch (c->backend) {
    case MO_BACKEND_CPU: return matmul_forward_add_mixed_cpu(dt, out, inp, weight, bias, add, N, C, OC);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return matmul_forward_mixed_cuda(c, dt, out, NULL, inp, weight, bias, add, N, C, OC);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_forward_add_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "matmul_forward_add_mixed: unknown backend %d", (int)c->backend);
}

// The dgelu backward, and dinp_dbias (may be NULL: the plain dgelu op, its scratch and cost unchanged) +=
// dinp's column sums (mo_matmul_backward_dgelu_bsum_mixed)
static mo_status backward_dgelu(const char *op, mo_ctx *c, mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight,
                                float *dbias, const void *dout, const void *inp, const void *weight,
                                const void *gelu_pre, int N, int C, int OC) {
    MO_TRY(check_args(op, dt, N, C, OC));
    if (!dinp || !gelu_pre) return MO_FAIL(MO_ERR_INVALID, "%s: dinp and gelu_pre are required", op);
    void *scratch = NULL;
    const size_t sb = dinp_dbias ? mo_matmul_backward_dgelu_bsum_mixed_scratch_bytes(N, C, OC, dbias != NULL)
                                 : mo_matmul_backward_mixed_scratch_bytes(N, OC, dbias != NULL);
    MO_TRY(mo_scratch_alloc(c, sb, &scratch));
    mo_status st;
    mo_cost_matmul_backward(c, (int)mo_dtype_size(dt), N, C, OC, 1, dbias != NULL, 1);
    // dinp's sums: in the epilogue (bf16, C % 8 == 0: counted in the GEMM), else the reduction's pass over dinp
    if (dinp_dbias && (dt != MO_BF16 || C % 8 != 0))
        mo_cost_record(c, "matmul_bwd_dbias", MO_COST_MEMORY, (double)N * C, 2.0 * N * C + 8.0 * C);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = matmul_backward_dgelu_mixed_cpu(dt, dinp, dinp_dbias, dweight, dbias, dout, inp, weight, gelu_pre, N, C, OC);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = dinp_dbias ? matmul_backward_dgelu_bsum_mixed_cuda(c, dt, dinp, dinp_dbias, dweight, dbias, dout, inp, weight,
                                                                gelu_pre, scratch, N, C, OC)
                        : matmul_backward_mixed_cuda(c, dt, dinp, dweight, dbias, dout, inp, weight, gelu_pre, scratch,
                                                     N, C, OC);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "%s: this build has no CUDA", op);
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "%s: unknown backend %d", op, (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

mo_status mo_matmul_backward_dgelu_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                         const void *dout, const void *inp, const void *weight, const void *gelu_pre,
                                         int N, int C, int OC) {
    return backward_dgelu("matmul_backward_dgelu_mixed", c, dt, dinp, NULL, dweight, dbias, dout, inp, weight, gelu_pre,
                          N, C, OC);
}

mo_status mo_matmul_backward_dgelu_bsum_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight,
                                              float *dbias, const void *dout, const void *inp, const void *weight,
                                              const void *gelu_pre, int N, int C, int OC) {
    if (!dinp_dbias) return MO_FAIL(MO_ERR_INVALID, "matmul_backward_dgelu_bsum_mixed: dinp_dbias is required");
    return backward_dgelu("matmul_backward_dgelu_bsum_mixed", c, dt, dinp, dinp_dbias, dweight, dbias, dout, inp,
                          weight, gelu_pre, N, C, OC);
}
