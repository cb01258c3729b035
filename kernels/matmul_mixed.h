// Internals of the mixed-precision GEMMs (ops_mixed_gemm.h): the CPU references and the cuBLASLt
// implementation behind mo_matmul_forward_mixed / mo_matmul_backward_mixed.
//
// Backward scratch (fp32, the same on every backend; 0 without dbias): the dbias partial sums,
// MO_MM_MIXED_DBIAS_ROWS rows of dout per chunk, mo_mm_mixed_dbias_chunks(N) chunks of OC floats
// (MEMOPT_DBIAS=lt: the BGRADB epilogue's OC column sums in its first OC floats, N >= 1 so they fit).
// The dgelu op with dinp's sums (MEMOPT_DBIAS=gelu) takes the larger of that and the same for C columns
// (the DGELU_BGRAD epilogue's C bf16 sums in its first 2C bytes, or the reduction's partial sums of dinp).
// The cpu reference does not use it (it only takes it, so dry and cpu peaks match cuda's).
#ifndef MEMOPT_MATMUL_MIXED_H
#define MEMOPT_MATMUL_MIXED_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MO_MM_MIXED_DBIAS_ROWS 256
static inline int mo_mm_mixed_dbias_chunks(int N) { return (N + MO_MM_MIXED_DBIAS_ROWS - 1) / MO_MM_MIXED_DBIAS_ROWS; }

// 1 for MO_F16 / MO_BF16, else 0.
int mo_mmg_is_16bit(mo_dtype dt);
// Host conversions of one value (dt 16-bit).
float mo_mmg_load(mo_dtype dt, const void *p, size_t i);
void mo_mmg_store(mo_dtype dt, void *p, size_t i, float v);
// A host fp32 copy of n dt values (malloc; NULL if out of memory).
float *mo_mmg_to_f32_alloc(mo_dtype dt, const void *src, size_t n);

mo_status matmul_forward_mixed_cpu(mo_dtype dt, void *out, void *gelu_out, const void *inp, const void *weight,
                                   const void *bias, int N, int C, int OC);
mo_status matmul_backward_mixed_cpu(mo_dtype dt, void *dinp, float *dweight, float *dbias, const void *dout,
                                    const void *inp, const void *weight, int N, int C, int OC);

// cuda (matmul_mixed_cuda.c with the kernels of matmul_mixed.cu), on c->stream. add / gelu_pre as
// matmul.h's matmul_forward_cuda / matmul_backward_cuda (NULL: the plain GEMMs).
mo_status matmul_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                    const void *weight, const void *bias, const void *add, int N, int C, int OC);
mo_status matmul_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                     const void *dout, const void *inp, const void *weight, const void *gelu_pre,
                                     void *scratch, int N, int C, int OC);
// the dgelu backward above with dinp_dbias (C) fp32 += the column sums of dinp (ops_mixed_gemm.h's
// mo_matmul_backward_dgelu_bsum_mixed); scratch of mo_matmul_backward_dgelu_bsum_mixed_scratch_bytes
mo_status matmul_backward_dgelu_bsum_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight,
                                                float *dbias, const void *dout, const void *inp, const void *weight,
                                                const void *gelu_pre, void *scratch, int N, int C, int OC);
// kernels (matmul_mixed.cu): dbias (OC) += column sums of dout (N, OC) dt, via partial (chunks, OC) fp32;
// gelu_out = gelu(out) elementwise in dt (used when the GELU epilogue is unavailable).
mo_status matmul_mixed_dbias_cuda(mo_ctx *c, mo_dtype dt, float *dbias, const void *dout, float *partial, int N,
                                  int OC);
// the same on a stream of the caller's (c->stream or the side stream, side_stream.h)
mo_status matmul_mixed_dbias_on_cuda(mo_ctx *c, void *stream, mo_dtype dt, float *dbias, const void *dout,
                                     float *partial, int N, int OC);
// dbias (OC) += sums (OC), fp32 elementwise: after the BGRADB epilogue wrote the column sums (MEMOPT_DBIAS=lt)
mo_status matmul_mixed_dbias_add_cuda(mo_ctx *c, float *dbias, const float *sums, int OC);
// dbias (OC) += sums (OC, bf16), in fp32: after the DGELU_BGRAD epilogue wrote them (MEMOPT_DBIAS=gelu)
mo_status matmul_mixed_dbias_add16_cuda(mo_ctx *c, float *dbias, const void *sums, int OC);
// out (N, OC) += bias (OC) in dt (the fallback when no cuBLASLt algorithm takes the bias epilogue)
mo_status matmul_mixed_bias_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *bias, int N, int OC);
mo_status matmul_mixed_gelu_cuda(mo_ctx *c, mo_dtype dt, void *gelu_out, const void *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
