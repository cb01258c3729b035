// Fused causal attention in fp32 / TF32 as blocked batched cuBLAS GEMMs: attention_fused_gemm.h says what
// and why. The cpu reference is attention_fused.c's (the same math: out, lse, dqkv).
//
// The GEMMs, per chunk [r0, r1) of query rows (Lc = r1 - r0 rows), every matrix column-major with the
// row-major data seen transposed, as attention_materialized.cu: a row-major (T, HS) head at row stride ld
// is the column-major (HS, T) matrix with leading dimension ld, the chunk's row-major (Lc, T) score rows
// (ld T) the column-major (T, Lc) matrix.
//   FG_XYT   S (Lc, r1) = alpha X_c Y^T:  C = S^T (r1, Lc) = op_T(Y^T (HS, r1)) @ X_c^T (HS, Lc).
//            A = Y, B = X at row r0, C = buffer; m r1, n Lc, k HS.
//   FG_PX    out_c = P_c Y:  out_c^T (HS, Lc) = Y^T (HS, r1) @ P_c^T (r1, Lc).
//            A = Y, B = buffer, C = out at row r0; m HS, n Lc, k r1.
//   FG_PTX   out[0, r1) (+)= P_c^T X_c:  out^T (HS, r1) = X_c^T (HS, Lc) @ op_T(P_c^T (r1, Lc)).
//            A = X at row r0, B = buffer, C = out; m HS, n r1, k Lc; beta 0 on the last chunk (run first:
//            it covers every key), 1 on the others.
// Row kernels (one warp a row, fixed butterflies, fp32): the forward softmax over keys <= t writes P on
// columns [0, r1) (zeros after t: the P v GEMM reads up to r1) and lse; the backward's turns the
// recomputed scores and dP into P and dS in place, also on [0, r1). With T % 4 == 0 and T <= 1024 a lane
// keeps its part of the row in registers (float4 loads); other T take the loop kernels.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention.h"
#include "attention_fused_gemm.h"
#include "cuda_check.h"
#include "lib_writes.h"

#define FG_THREADS 256
#define FG_ROW_WARPS 8
#define FG_ROW_MAX_IT 8 // float4s per lane in the register kernels: T <= 1024

enum { FG_XYT = 0, FG_PX = 1, FG_PTX = 2 };

// An operand: head (b, h) at p + b * sb + h * sh floats, leading dimension ld; roff: it starts at the
// chunk's row r0 (r0 * ld floats further).
typedef struct fg_mat {
    float *p;
    long long sb, sh;
    int ld, roff;
} fg_mat;
typedef struct fg_job {
    int kind;
    fg_mat a, b, c;
    float alpha;
} fg_job;
#define FG_MAX_JOBS 5

typedef struct fg_ptr_args {
    fg_job j[FG_MAX_JOBS];
    int njobs, G, L, NH, n;
    float **pa, **pb, **pc;
} fg_ptr_args;

static __device__ __forceinline__ float *fg_at(const fg_mat &m, int b, int h, int r0) {
    return m.p + b * m.sb + h * m.sh + (m.roff ? (long long)r0 * m.ld : 0);
}

// One thread per (job, chunk, head): the problem's three pointers, at (job * G + chunk) * n + head.
__global__ void fg_fill_ptrs_kernel(fg_ptr_args a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.njobs * a.G * a.n) return;
    const int bh = i % a.n, g = (i / a.n) % a.G, jn = i / (a.n * a.G);
    const int b = bh / a.NH, h = bh % a.NH, r0 = g * a.L;
    a.pa[i] = fg_at(a.j[jn].a, b, h, r0);
    a.pb[i] = fg_at(a.j[jn].b, b, h, r0);
    a.pc[i] = fg_at(a.j[jn].c, b, h, r0);
}

static __device__ __forceinline__ float fg_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float fg_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The chunk's rows: row = bh * Lc + i is query t = r0 + i of head bh, at S + (bh * L + i) * T.
struct fg_rows {
    int Lc, L, T, r0, r1, rows;
};

// ---- forward softmax: S (scaled scores, keys < r1 written by the GEMM) -> P, lse ----
template <int IT>
__global__ void fg_softmax_reg_kernel(float *S, float *__restrict__ lse, fg_rows r) {
    const int row = blockIdx.x * FG_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= r.rows) return; // whole warps leave together
    const int bh = row / r.Lc, i = row % r.Lc, t = r.r0 + i;
    float *x = S + ((size_t)bh * r.L + i) * r.T;
    float4 v[IT];
    float mx = -INFINITY;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int c0 = (it * 32 + lane) * 4;
        v[it] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        if (c0 <= t) v[it] = *reinterpret_cast<const float4 *>(x + c0); // c0 + 3 < r1 rounded up to 4 <= T
        if (c0 + 0 > t) v[it].x = -INFINITY;
        if (c0 + 1 > t) v[it].y = -INFINITY;
        if (c0 + 2 > t) v[it].z = -INFINITY;
        if (c0 + 3 > t) v[it].w = -INFINITY;
        mx = fmaxf(mx, fmaxf(fmaxf(v[it].x, v[it].y), fmaxf(v[it].z, v[it].w)));
    }
    mx = fg_warp_max(mx); // finite: key 0 is always there
    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        v[it].x = expf(v[it].x - mx); // exp(-inf) = 0 past the diagonal
        v[it].y = expf(v[it].y - mx);
        v[it].z = expf(v[it].z - mx);
        v[it].w = expf(v[it].w - mx);
        sum += (v[it].x + v[it].y) + (v[it].z + v[it].w);
    }
    sum = fg_warp_sum(sum);
    const float inv = 1.0f / sum;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int c0 = (it * 32 + lane) * 4;
        if (c0 >= r.r1) break;
        float4 o = v[it];
        o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
        *reinterpret_cast<float4 *>(x + c0) = o;
    }
    if (lane == 0) lse[(size_t)bh * r.T + t] = mx + logf(sum);
}

__global__ void fg_softmax_loop_kernel(float *S, float *__restrict__ lse, fg_rows r) {
    const int row = blockIdx.x * FG_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= r.rows) return;
    const int bh = row / r.Lc, i = row % r.Lc, t = r.r0 + i;
    float *x = S + ((size_t)bh * r.L + i) * r.T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, x[j]);
    mx = fg_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf(x[j] - mx);
    sum = fg_warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int j = lane; j < r.r1; j += 32) x[j] = j <= t ? expf(x[j] - mx) * inv : 0.0f;
    if (lane == 0) lse[(size_t)bh * r.T + t] = mx + logf(sum);
}

// ---- backward: S (scaled scores again) -> P = exp(S - lse); dP -> dS = scale P (dP - D) ----
template <int IT>
__global__ void fg_dsoftmax_reg_kernel(float *S, float *dP, const float *__restrict__ lse,
                                       const float *__restrict__ D, float scale, fg_rows r) {
    const int row = blockIdx.x * FG_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= r.rows) return;
    const int bh = row / r.Lc, i = row % r.Lc, t = r.r0 + i;
    const size_t off = ((size_t)bh * r.L + i) * r.T;
    float *x = S + off, *g = dP + off;
    const float L = lse[(size_t)bh * r.T + t], d = D[(size_t)bh * r.T + t];
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int c0 = (it * 32 + lane) * 4;
        if (c0 >= r.r1) break;
        float4 p = make_float4(0.f, 0.f, 0.f, 0.f), ds = p;
        if (c0 <= t) {
            const float4 s = *reinterpret_cast<const float4 *>(x + c0);
            const float4 gp = *reinterpret_cast<const float4 *>(g + c0);
            if (c0 + 0 <= t) { p.x = expf(s.x - L); ds.x = scale * p.x * (gp.x - d); }
            if (c0 + 1 <= t) { p.y = expf(s.y - L); ds.y = scale * p.y * (gp.y - d); }
            if (c0 + 2 <= t) { p.z = expf(s.z - L); ds.z = scale * p.z * (gp.z - d); }
            if (c0 + 3 <= t) { p.w = expf(s.w - L); ds.w = scale * p.w * (gp.w - d); }
        }
        *reinterpret_cast<float4 *>(x + c0) = p;
        *reinterpret_cast<float4 *>(g + c0) = ds;
    }
}

__global__ void fg_dsoftmax_loop_kernel(float *S, float *dP, const float *__restrict__ lse, const float *__restrict__ D,
                                        float scale, fg_rows r) {
    const int row = blockIdx.x * FG_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= r.rows) return;
    const int bh = row / r.Lc, i = row % r.Lc, t = r.r0 + i;
    const size_t off = ((size_t)bh * r.L + i) * r.T;
    float *x = S + off, *g = dP + off;
    const float L = lse[(size_t)bh * r.T + t], d = D[(size_t)bh * r.T + t];
    for (int j = lane; j < r.r1; j += 32) {
        const float p = j <= t ? expf(x[j] - L) : 0.0f;
        g[j] = j <= t ? scale * p * (g[j] - d) : 0.0f;
        x[j] = p;
    }
}

// Register kernels need T % 4 == 0 (every row 16-byte aligned: buffers are 256-aligned) and T <= 1024.
static int fg_row_it(int T) {
    if (T % 4 != 0) return 0;
    for (int it = 1; it <= FG_ROW_MAX_IT; it *= 2)
        if (T <= 32 * 4 * it) return it;
    return 0;
}
static unsigned fg_blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

static mo_status fg_softmax(cudaStream_t s, float *S, float *lse, fg_rows r) {
    const unsigned g = fg_blocks((size_t)r.rows, FG_ROW_WARPS), b = FG_ROW_WARPS * 32;
    switch (fg_row_it(r.T)) {
    case 1: fg_softmax_reg_kernel<1><<<g, b, 0, s>>>(S, lse, r); break;
    case 2: fg_softmax_reg_kernel<2><<<g, b, 0, s>>>(S, lse, r); break;
    case 4: fg_softmax_reg_kernel<4><<<g, b, 0, s>>>(S, lse, r); break;
    case 8: fg_softmax_reg_kernel<8><<<g, b, 0, s>>>(S, lse, r); break;
    default: fg_softmax_loop_kernel<<<g, b, 0, s>>>(S, lse, r); break;
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

static mo_status fg_dsoftmax(cudaStream_t s, float *S, float *dP, const float *lse, const float *D, float scale,
                             fg_rows r) {
    const unsigned g = fg_blocks((size_t)r.rows, FG_ROW_WARPS), b = FG_ROW_WARPS * 32;
    switch (fg_row_it(r.T)) {
    case 1: fg_dsoftmax_reg_kernel<1><<<g, b, 0, s>>>(S, dP, lse, D, scale, r); break;
    case 2: fg_dsoftmax_reg_kernel<2><<<g, b, 0, s>>>(S, dP, lse, D, scale, r); break;
    case 4: fg_dsoftmax_reg_kernel<4><<<g, b, 0, s>>>(S, dP, lse, D, scale, r); break;
    case 8: fg_dsoftmax_reg_kernel<8><<<g, b, 0, s>>>(S, dP, lse, D, scale, r); break;
    default: fg_dsoftmax_loop_kernel<<<g, b, 0, s>>>(S, dP, lse, D, scale, r); break;
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// ---- the GEMMs ----
typedef struct fg_run {
    cublasHandle_t h;
    cublasComputeType_t compute;
    int T, HS, NH, n, L, G;
    float **pa, **pb, **pc;
} fg_run;

static void fg_shape(const fg_run *g, int kind, int gi, cublasOperation_t *ta, cublasOperation_t *tb, int *m, int *n,
                     int *k) {
    const int r0 = gi * g->L, r1 = r0 + g->L < g->T ? r0 + g->L : g->T;
    *ta = kind == FG_XYT ? CUBLAS_OP_T : CUBLAS_OP_N;
    *tb = kind == FG_PTX ? CUBLAS_OP_T : CUBLAS_OP_N;
    *m = kind == FG_XYT ? r1 : g->HS;
    *n = kind == FG_PTX ? r1 : r1 - r0;
    *k = kind == FG_XYT ? g->HS : kind == FG_PX ? r1 : r1 - r0;
}

// MEMOPT_MARK_LIB_WRITES (lib_writes.h): what chunk gi of job jb writes, head by head, where it is not
// also an input (beta 1): the column-major D (m, n) at ld; a score buffer's Lc rows whole (T each: the
// row kernels load the float4 holding the diagonal and use the columns up to it only)
static mo_status fg_mark(mo_ctx *c, const fg_run *g, const fg_job *jb, int gi, float beta) {
    if (beta != 0.0f) return MO_OK;
    cublasOperation_t ta, tb;
    int m, n, k;
    fg_shape(g, jb->kind, gi, &ta, &tb, &m, &n, &k);
    const size_t pitch = (size_t)jb->c.ld * sizeof(float);
    const size_t width = jb->kind == FG_XYT ? pitch : (size_t)m * sizeof(float);
    const long long r0 = (long long)gi * g->L;
    for (int bh = 0; bh < g->n; bh++) {
        const float *p = jb->c.p + (bh / g->NH) * jb->c.sb + (bh % g->NH) * jb->c.sh + (jb->c.roff ? r0 * jb->c.ld : 0);
        MO_TRY(mo_mark_lib_write(c, p, pitch, width, (size_t)n));
    }
    return MO_OK;
}

// Chunk gi of job jn (its pointers at (jn * G + gi) * n)
static mo_status fg_gemm(mo_ctx *c, const fg_run *g, const fg_job *jb, int jn, int gi) {
    cublasOperation_t ta, tb;
    int m, n, k;
    fg_shape(g, jb->kind, gi, &ta, &tb, &m, &n, &k);
    const float beta = jb->kind == FG_PTX && gi != g->G - 1 ? 1.0f : 0.0f;
    if (c->mark_lib_writes) MO_TRY(fg_mark(c, g, jb, gi, beta));
    const size_t o = ((size_t)jn * g->G + gi) * g->n;
    CUBLAS_CHECK(cublasGemmBatchedEx(g->h, ta, tb, m, n, k, &jb->alpha, (const void *const *)(g->pa + o), CUDA_R_32F,
                                     jb->a.ld, (const void *const *)(g->pb + o), CUDA_R_32F, jb->b.ld, &beta,
                                     (void *const *)(g->pc + o), CUDA_R_32F, jb->c.ld, g->n, g->compute,
                                     CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}

// c->cublas is shared: set what these GEMMs rely on, every call; then the pointer arrays of every
// (job, chunk, head) in one launch.
static mo_status fg_setup(mo_ctx *c, fg_run *g, const mo_attn_fg_layout *l, char *scratch, const fg_job *jobs,
                          int njobs, int B, int T, int C, int NH) {
    g->h = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetMathMode(g->h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUBLAS_CHECK(cublasSetPointerMode(g->h, CUBLAS_POINTER_MODE_HOST));
    g->compute = c->tf32 && c->attn_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    g->T = T;
    g->HS = C / NH;
    g->NH = NH;
    g->n = B * NH;
    g->L = l->L;
    g->G = l->G;
    const size_t np = (size_t)njobs * g->G * g->n;
    g->pa = (float **)(scratch + l->ptrs);
    g->pb = g->pa + np;
    g->pc = g->pb + np;
    fg_ptr_args a;
    memset(&a, 0, sizeof a);
    for (int j = 0; j < njobs; j++) a.j[j] = jobs[j];
    a.njobs = njobs;
    a.G = g->G;
    a.L = g->L;
    a.NH = NH;
    a.n = g->n;
    a.pa = g->pa;
    a.pb = g->pb;
    a.pc = g->pc;
    fg_fill_ptrs_kernel<<<fg_blocks(np, FG_THREADS), FG_THREADS, 0, (cudaStream_t)c->stream>>>(a);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

static fg_mat fg_rows_of(const float *p, int T, int HS, int ld, int col, int roff) { // in place, column offset col
    fg_mat m = {(float *)p + col, (long long)T * ld, HS, ld, roff};
    return m;
}
static fg_mat fg_buf(float *p, int L, int T, int NH) {
    fg_mat m = {p, (long long)NH * L * T, (long long)L * T, T, 0};
    return m;
}
static fg_job fg_mkjob(int kind, fg_mat a, fg_mat b, fg_mat c, float alpha) {
    fg_job j = {kind, a, b, c, alpha};
    return j;
}
static fg_rows fg_rows_at(const fg_run *g, int gi) {
    fg_rows r;
    r.r0 = gi * g->L;
    r.r1 = r.r0 + g->L < g->T ? r.r0 + g->L : g->T;
    r.Lc = r.r1 - r.r0;
    r.L = g->L;
    r.T = g->T;
    r.rows = g->n * r.Lc;
    return r;
}

extern "C" mo_status attention_fused_gemm_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv,
                                                       void *scratch, int B, int T, int C, int NH) {
    mo_attn_fg_layout l;
    mo_attn_fused_gemm_layout(c, 0, B, T, NH, &l);
    const int HS = C / NH;
    float *S = (float *)((char *)scratch + l.s); // (B*NH, L, T)
    const fg_mat q = fg_rows_of(qkv, T, HS, 3 * C, 0, 1), k = fg_rows_of(qkv, T, HS, 3 * C, C, 0);
    const fg_mat v = fg_rows_of(qkv, T, HS, 3 * C, 2 * C, 0), y = fg_rows_of(out, T, HS, C, 0, 1);
    const fg_mat Sb = fg_buf(S, l.L, T, NH);
    const fg_job jobs[2] = {
        fg_mkjob(FG_XYT, k, q, Sb, 1.0f / sqrtf((float)HS)), // S = q_c k^T / sqrt(HS)
        fg_mkjob(FG_PX, v, Sb, y, 1.0f),                     // y_c = P v
    };
    fg_run g;
    MO_TRY(fg_setup(c, &g, &l, (char *)scratch, jobs, 2, B, T, C, NH));
    for (int gi = 0; gi < g.G; gi++) {
        MO_TRY(fg_gemm(c, &g, &jobs[0], 0, gi));
        MO_TRY(fg_softmax((cudaStream_t)c->stream, S, lse, fg_rows_at(&g, gi)));
        MO_TRY(fg_gemm(c, &g, &jobs[1], 1, gi));
    }
    return MO_OK;
}

extern "C" mo_status attention_fused_gemm_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                                        const float *out, const float *lse, void *scratch, int B,
                                                        int T, int C, int NH) {
    mo_attn_fg_layout l;
    mo_attn_fused_gemm_layout(c, 1, B, T, NH, &l);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    float *D = (float *)((char *)scratch + l.d);   // (B, NH, T)
    float *S = (float *)((char *)scratch + l.s);   // (B*NH, L, T): scores, then P
    float *dP = (float *)((char *)scratch + l.dp); // (B*NH, L, T): dP, then dS
    // D = dy . y per row, per head (attention.h's row kernel, deterministic)
    MO_TRY(attention_rowdot_cuda(c, D, dout, (long long)T * C, HS, C, out, (long long)T * C, HS, C, B, NH, T, HS));
    const fg_mat q_c = fg_rows_of(qkv, T, HS, 3 * C, 0, 1);
    const fg_mat k = fg_rows_of(qkv, T, HS, 3 * C, C, 0), v = fg_rows_of(qkv, T, HS, 3 * C, 2 * C, 0);
    const fg_mat dy_c = fg_rows_of(dout, T, HS, C, 0, 1);
    const fg_mat dq_c = fg_rows_of(dqkv, T, HS, 3 * C, 0, 1), dk = fg_rows_of(dqkv, T, HS, 3 * C, C, 0);
    const fg_mat dv = fg_rows_of(dqkv, T, HS, 3 * C, 2 * C, 0);
    const fg_mat Sb = fg_buf(S, l.L, T, NH), dPb = fg_buf(dP, l.L, T, NH);
    const fg_job jobs[5] = {
        fg_mkjob(FG_XYT, k, q_c, Sb, scale), // S = q_c k^T / sqrt(HS), as in the forward
        fg_mkjob(FG_XYT, v, dy_c, dPb, 1.0f), // dP = dy_c v^T
        fg_mkjob(FG_PTX, dy_c, Sb, dv, 1.0f), // dv[0, r1) (+)= P^T dy_c
        fg_mkjob(FG_PX, k, dPb, dq_c, 1.0f),  // dq_c = dS k
        fg_mkjob(FG_PTX, q_c, dPb, dk, 1.0f), // dk[0, r1) (+)= dS^T q_c
    };
    fg_run g;
    MO_TRY(fg_setup(c, &g, &l, (char *)scratch, jobs, 5, B, T, C, NH));
    for (int gi = g.G - 1; gi >= 0; gi--) { // the last chunk first: its dk, dv GEMMs (beta 0) cover every key
        MO_TRY(fg_gemm(c, &g, &jobs[0], 0, gi));
        MO_TRY(fg_gemm(c, &g, &jobs[1], 1, gi));
        MO_TRY(fg_dsoftmax((cudaStream_t)c->stream, S, dP, lse, D, scale, fg_rows_at(&g, gi)));
        for (int j = 2; j < 5; j++) MO_TRY(fg_gemm(c, &g, &jobs[j], j, gi));
    }
    return MO_OK;
}
