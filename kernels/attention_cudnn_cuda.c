// The cuDNN fused attention graphs of attention_cudnn.h on the backend graph API, with a per-context plan
// cache. cuDNN recognises flash attention from the shape of the operation graph, so the graphs below are
// cudnn-frontend's composite SDPA nodes (scaled_dot_product_flash_attention.h, CompositeSDPANode and
// CompositeSDPABackwardNode; the causal mask of its score modifiers; the composite softmax with stats)
// written out op by op for: no dropout, no bias, no padding mask, a scale passed by value, causal,
// stats kept, the fp32 dQ accumulator (not the dP-workspace) backward. Tensor types as the frontend
// infers them: the inputs and outputs dt, virtual intermediates fp32, the mask indices int32 and the
// mask boolean, the probabilities fed to a matmul as dt.
//
// Forward (Q, K, V -> O, Stats), every tensor (B, NH, rows, cols):
//   S = Q @ K^T; S *= scale; row, col = gen_index(S, axis 2 / 3); keep = row >= col;
//   S = keep ? S : lowest; M = max_cols(S); E = exp(S - M); L = sum_cols(E);
//   Stats = M + log(L)  (the caller's lse); P = E / L  (dt); O = P @ V
// Backward (dO, O, Stats, Q, K, V -> dQ, dK, dV):
//   ssum = sum_cols(dO * O) * 1  (softmax_sum, fp32, scratch); S = (Q @ K^T) * scale - Stats;
//   S = keep ? S : lowest (the same mask); P = exp(S); dV = reshape(P)^T (dt) @ dO;
//   dS = (dO @ V^T - ssum) * P * scale; dK = reshape(dS)^T (dt) @ Q;
//   dQacc (fp32, scratch) = dS @ reshape(K^T); dQ = identity(dQacc)
// Engines: the heuristics' list (mode A, then the fallback list), the first whose plan finalizes with a
// workspace within the context's GEMM workspace (shared with cuBLASLt and the convolutions: one stream).
// Plans are cached by (direction, dtype, B, T, C, NH, workspace budget); pointers are 16-byte aligned
// (checked), which the tensors declare.
#include "attention_cudnn.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_check.h"
#include "resnet_ops_impl.h" // mo_dnn_handle: the context's cuDNN handle, shared with the convolutions

#define ATT_SLOTS 32   // shapes cached per context (a run has one or two: its micro-batch, maybe a remainder)
#define ATT_KEEP 160   // descriptors a plan holds (the backward graph uses about 90)
#define ATT_MAX_OPS 32 // operations per graph (the backward has 22)
#define ATT_MAX_CAND 64
#define ATT_ALIGN 16   // byte alignment the tensors declare (and the pointers are checked for)

enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_LOWEST, UID_ONE, UID_SSUM, UID_DQACC,
    UID_VIRTUAL = 1000 // virtual tensors are numbered from here
};

typedef struct att_key { int bwd, dt, B, T, C, NH; size_t ws_bytes; } att_key;

typedef struct att_plan {
    att_key key;
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[ATT_KEEP]; // what the plan was built from, released with it
    int nkeep;
    int64_t ws;
    long engine;
} att_plan;

typedef struct mo_attn_dnn_cache {
    int n, victim;
    long hits, misses;
    att_plan slot[ATT_SLOTS];
} mo_attn_dnn_cache;

// The cache hangs off the context through its own field (ctx.h attn_dnn).
static void plan_release(att_plan *p) {
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--)
        if (p->keep[i]) cudnnBackendDestroyDescriptor(p->keep[i]);
    p->plan = NULL;
    p->nkeep = 0;
}

void mo_attention_cudnn_destroy(mo_ctx *c) {
    mo_attn_dnn_cache *d = c->attn_dnn;
    if (!d) return;
    if (c->stream) cudaStreamSynchronize((cudaStream_t)c->stream); // nothing in flight uses a plan
    for (int i = 0; i < d->n; i++) plan_release(&d->slot[i]);
    free(d);
    c->attn_dnn = NULL;
}

void mo_attention_cudnn_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    *hits = c->attn_dnn ? c->attn_dnn->hits : 0;
    *misses = c->attn_dnn ? c->attn_dnn->misses : 0;
}

// ---- graph building --------------------------------------------------------------------------------
typedef struct gb {
    att_plan *p;
    cudnnBackendDescriptor_t ops[ATT_MAX_OPS];
    int nops;
    int64_t next_uid;
} gb;

static mo_status new_desc(gb *g, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
    att_plan *p = g->p;
    if (p->nkeep == ATT_KEEP) return MO_FAIL(MO_ERR_INTERNAL, "attention plan: more than %d descriptors", ATT_KEEP);
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &p->keep[p->nkeep]));
    *out = p->keep[p->nkeep++];
    return MO_OK;
}

// uid 0: a virtual tensor (the next virtual uid). by_value: a host scalar passed in the variant pack.
static mo_status tensor(gb *g, cudnnBackendDescriptor_t *out, int64_t uid, cudnnDataType_t ty, const int64_t dim[4],
                        const int64_t str[4], int by_value) {
    cudnnBackendDescriptor_t t = NULL;
    MO_TRY(new_desc(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    const bool virt = uid == 0, byv = by_value != 0;
    if (virt) uid = g->next_uid++;
    const int64_t align = ATT_ALIGN;
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ty));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (virt) CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    if (byv) CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv));
    CUDNN_CHECK(cudnnBackendFinalize(t));
    *out = t;
    return MO_OK;
}

static mo_status add_op(gb *g, cudnnBackendDescriptor_t op) {
    if (g->nops == ATT_MAX_OPS) return MO_FAIL(MO_ERR_INTERNAL, "attention graph: more than %d ops", ATT_MAX_OPS);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    g->ops[g->nops++] = op;
    return MO_OK;
}

// y = mode(x, b, t); b, t NULL when the mode takes fewer inputs; axis >= 0 for GEN_INDEX
static mo_status pointwise(gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                           cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                           cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw = NULL, op = NULL;
    MO_TRY(new_desc(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    CUDNN_CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    CUDNN_CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (axis >= 0) CUDNN_CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    CUDNN_CHECK(cudnnBackendFinalize(pw));
    MO_TRY(new_desc(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, D, 1, &pw));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, D, 1, &x));
    if (b) CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, D, 1, &b));
    if (t) CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, D, 1, &t));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, D, 1, &y));
    return add_op(g, op);
}

// y (.., 1) = reduce over the last axis of x
static mo_status reduction(gb *g, cudnnReduceTensorOp_t rop, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t red = NULL, op = NULL;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    MO_TRY(new_desc(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &red));
    CUDNN_CHECK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
                                         &rop));
    CUDNN_CHECK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CUDNN_CHECK(cudnnBackendFinalize(red));
    MO_TRY(new_desc(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op));
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, D, 1, &x));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, D, 1, &y));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, D, 1, &red));
    return add_op(g, op);
}

// c = a @ b over the last two axes (fp32 compute)
static mo_status matmul(gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = NULL, op = NULL;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    MO_TRY(new_desc(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm));
    CUDNN_CHECK(cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CUDNN_CHECK(cudnnBackendFinalize(mm));
    MO_TRY(new_desc(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op));
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, D, 1, &a));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, D, 1, &b));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, D, 1, &c));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, D, 1, &mm));
    return add_op(g, op);
}

// y = x seen through y's dims and strides (a transpose by strides; no data moves)
static mo_status reshape(gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = NULL;
    MO_TRY(new_desc(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, &op));
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, D, 1, &x));
    CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, D, 1, &y));
    return add_op(g, op);
}

// The shapes and strides every graph uses (attention_cudnn.h: qkv, out read in place)
typedef struct att_geom {
    int64_t qkv[4], qkvT[4], o[4], stats[4], scores[4], scoresT[4], head_packed[4], one[4];
    int64_t d_head[4], d_headT[4], d_sc[4], d_row[4], d_one[4];
} att_geom;

static void geom(const att_key *k, att_geom *g) {
    const int64_t B = k->B, T = k->T, C = k->C, NH = k->NH, HS = C / NH, C3 = 3 * C;
    const int64_t dh[4] = {B, NH, T, HS}, dhT[4] = {B, NH, HS, T}, dsc[4] = {B, NH, T, T}, drow[4] = {B, NH, T, 1};
    const int64_t s_qkv[4] = {T * C3, HS, C3, 1}, s_qkvT[4] = {T * C3, HS, 1, C3}, s_o[4] = {T * C, HS, C, 1};
    const int64_t s_stats[4] = {NH * T, T, 1, 1}, s_sc[4] = {NH * T * T, T * T, T, 1};
    const int64_t s_scT[4] = {NH * T * T, T * T, 1, T}, s_hp[4] = {NH * T * HS, T * HS, HS, 1};
    for (int i = 0; i < 4; i++) {
        g->d_head[i] = dh[i], g->d_headT[i] = dhT[i], g->d_sc[i] = dsc[i], g->d_row[i] = drow[i], g->d_one[i] = 1;
        g->qkv[i] = s_qkv[i], g->qkvT[i] = s_qkvT[i], g->o[i] = s_o[i], g->stats[i] = s_stats[i];
        g->scores[i] = s_sc[i], g->scoresT[i] = s_scT[i], g->head_packed[i] = s_hp[i], g->one[i] = 1;
    }
}

static cudnnDataType_t dnn_type(int dt) { return dt == MO_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

// The causal mask of cudnn-frontend's score modifiers: *out = row >= col ? s : lowest
static mo_status causal_mask(gb *g, const att_geom *ge, cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t lowest,
                             cudnnBackendDescriptor_t *out) {
    cudnnBackendDescriptor_t row = NULL, col = NULL, keep = NULL, y = NULL;
    MO_TRY(tensor(g, &row, 0, CUDNN_DATA_INT32, ge->d_sc, ge->scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, s, NULL, NULL, row));
    MO_TRY(tensor(g, &col, 0, CUDNN_DATA_INT32, ge->d_sc, ge->scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, s, NULL, NULL, col));
    MO_TRY(tensor(g, &keep, 0, CUDNN_DATA_BOOLEAN, ge->d_sc, ge->scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep));
    MO_TRY(tensor(g, &y, 0, CUDNN_DATA_FLOAT, ge->d_sc, ge->scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s, lowest, keep, y));
    *out = y;
    return MO_OK;
}

static mo_status build_forward(gb *g, const att_key *k) {
    att_geom ge;
    geom(k, &ge);
    const cudnnDataType_t io = dnn_type(k->dt), F = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = NULL, kt = NULL, v = NULL, o = NULL, stats = NULL, scale = NULL, lowest = NULL;
    cudnnBackendDescriptor_t s1 = NULL, s2 = NULL, s3 = NULL, m = NULL, s4 = NULL, e = NULL, l = NULL, logl = NULL;
    cudnnBackendDescriptor_t p = NULL;
    MO_TRY(tensor(g, &q, UID_Q, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &kt, UID_K, io, ge.d_headT, ge.qkvT, 0));
    MO_TRY(tensor(g, &v, UID_V, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &o, UID_O, io, ge.d_head, ge.o, 0));
    MO_TRY(tensor(g, &stats, UID_STATS, F, ge.d_row, ge.stats, 0));
    MO_TRY(tensor(g, &scale, UID_SCALE, F, ge.d_one, ge.one, 1));
    MO_TRY(tensor(g, &lowest, UID_LOWEST, F, ge.d_one, ge.one, 1));
    MO_TRY(tensor(g, &s1, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(matmul(g, q, kt, s1));
    MO_TRY(tensor(g, &s2, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, s1, scale, NULL, s2));
    MO_TRY(causal_mask(g, &ge, s2, lowest, &s3));
    MO_TRY(tensor(g, &m, 0, F, ge.d_row, ge.stats, 0));
    MO_TRY(reduction(g, CUDNN_REDUCE_TENSOR_MAX, s3, m));
    MO_TRY(tensor(g, &s4, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_SUB, F, -1, s3, m, NULL, s4));
    MO_TRY(tensor(g, &e, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_EXP, F, -1, s4, NULL, NULL, e));
    MO_TRY(tensor(g, &l, 0, F, ge.d_row, ge.stats, 0));
    MO_TRY(reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, l));
    MO_TRY(tensor(g, &logl, 0, F, ge.d_row, ge.stats, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_LOG, F, -1, l, NULL, NULL, logl));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_ADD, F, -1, m, logl, NULL, stats));
    MO_TRY(tensor(g, &p, 0, io, ge.d_sc, ge.scores, 0)); // bmm2's A in the io type, as the backend requires
    MO_TRY(pointwise(g, CUDNN_POINTWISE_DIV, F, -1, e, l, NULL, p));
    return matmul(g, p, v, o);
}

static mo_status build_backward(gb *g, const att_key *k) {
    att_geom ge;
    geom(k, &ge);
    const cudnnDataType_t io = dnn_type(k->dt), F = CUDNN_DATA_FLOAT;
    const int64_t T = k->T, NH = k->NH, HS = k->C / k->NH;
    cudnnBackendDescriptor_t q = NULL, kt = NULL, vt = NULL, o = NULL, d_o = NULL, stats = NULL, dq = NULL;
    cudnnBackendDescriptor_t dk = NULL, dv = NULL, scale = NULL, lowest = NULL, one = NULL, ssum = NULL;
    cudnnBackendDescriptor_t dqacc = NULL;
    MO_TRY(tensor(g, &q, UID_Q, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &kt, UID_K, io, ge.d_headT, ge.qkvT, 0));
    MO_TRY(tensor(g, &vt, UID_V, io, ge.d_headT, ge.qkvT, 0));
    MO_TRY(tensor(g, &o, UID_O, io, ge.d_head, ge.o, 0));
    MO_TRY(tensor(g, &d_o, UID_DO, io, ge.d_head, ge.o, 0));
    MO_TRY(tensor(g, &stats, UID_STATS, F, ge.d_row, ge.stats, 0));
    MO_TRY(tensor(g, &dq, UID_DQ, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &dk, UID_DK, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &dv, UID_DV, io, ge.d_head, ge.qkv, 0));
    MO_TRY(tensor(g, &scale, UID_SCALE, F, ge.d_one, ge.one, 1));
    MO_TRY(tensor(g, &lowest, UID_LOWEST, F, ge.d_one, ge.one, 1));
    MO_TRY(tensor(g, &one, UID_ONE, F, ge.d_one, ge.one, 1));
    MO_TRY(tensor(g, &ssum, UID_SSUM, F, ge.d_row, ge.stats, 0));
    MO_TRY(tensor(g, &dqacc, UID_DQACC, F, ge.d_head, ge.head_packed, 0));

    // softmax_sum = sum(dO * O) * 1 (the frontend's strides for the product, virtual anyway)
    cudnnBackendDescriptor_t doo = NULL, sum1 = NULL;
    const int64_t s_doo[4] = {NH * T * HS, T * HS, NH * HS, 1};
    MO_TRY(tensor(g, &doo, 0, F, ge.d_head, s_doo, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, d_o, o, NULL, doo));
    MO_TRY(tensor(g, &sum1, 0, F, ge.d_row, ge.stats, 0));
    MO_TRY(reduction(g, CUDNN_REDUCE_TENSOR_ADD, doo, sum1));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, sum1, one, NULL, ssum));

    // P = exp(mask(S * scale - Stats)); dV = P^T @ dO
    cudnnBackendDescriptor_t s1 = NULL, s2 = NULL, s3 = NULL, s4 = NULL, p = NULL, pt = NULL;
    MO_TRY(tensor(g, &s1, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(matmul(g, q, kt, s1));
    MO_TRY(tensor(g, &s2, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, s1, scale, NULL, s2));
    MO_TRY(tensor(g, &s3, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_SUB, F, -1, s2, stats, NULL, s3));
    MO_TRY(causal_mask(g, &ge, s3, lowest, &s4));
    MO_TRY(tensor(g, &p, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_EXP, F, -1, s4, NULL, NULL, p));
    MO_TRY(tensor(g, &pt, 0, io, ge.d_sc, ge.scoresT, 0));
    MO_TRY(reshape(g, p, pt));
    MO_TRY(matmul(g, pt, d_o, dv));

    // dS = (dO @ V^T - softmax_sum) * P * scale; dK = dS^T @ Q
    cudnnBackendDescriptor_t dp = NULL, dp2 = NULL, ds1 = NULL, ds = NULL, dst = NULL;
    MO_TRY(tensor(g, &dp, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(matmul(g, d_o, vt, dp));
    MO_TRY(tensor(g, &dp2, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_SUB, F, -1, dp, ssum, NULL, dp2));
    MO_TRY(tensor(g, &ds1, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dp2, p, NULL, ds1));
    MO_TRY(tensor(g, &ds, 0, F, ge.d_sc, ge.scores, 0));
    MO_TRY(pointwise(g, CUDNN_POINTWISE_MUL, F, -1, ds1, scale, NULL, ds));
    MO_TRY(tensor(g, &dst, 0, io, ge.d_sc, ge.scoresT, 0));
    MO_TRY(reshape(g, ds, dst));
    MO_TRY(matmul(g, dst, q, dk));

    // dQ = identity(dQacc = dS @ K), K seen back through K^T's strides
    cudnnBackendDescriptor_t kk = NULL;
    MO_TRY(tensor(g, &kk, 0, F, ge.d_head, ge.qkv, 0));
    MO_TRY(reshape(g, kt, kk));
    MO_TRY(matmul(g, ds, kk, dqacc));
    return pointwise(g, CUDNN_POINTWISE_IDENTITY, F, -1, dqacc, NULL, NULL, dq);
}

// A cuDNN status from finalizing the graph, the heuristics or a plan: "not supported" (cuDNN refuses
// the graph on this device or version) becomes MO_ERR_UNSUPPORTED, keeping cuDNN's message.
static mo_status refusal(cudnnStatus_t s, const char *what, const char *file, int line) {
    mo_status st = mo_cudnn_status_(s, what, file, line);
    if ((int)s / 1000 != (int)CUDNN_STATUS_NOT_SUPPORTED / 1000) return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mo_errmsg());
    return mo_fail_at(MO_ERR_UNSUPPORTED, file, line, "cuDNN refused the attention graph: %s", msg);
}

static mo_status plan_build(mo_ctx *c, const att_key *k, att_plan *p) {
    void *hv = NULL;
    MO_TRY(mo_dnn_handle(c, &hv));
    cudnnHandle_t h = (cudnnHandle_t)hv;
    gb g;
    memset(&g, 0, sizeof g);
    g.p = p;
    g.next_uid = UID_VIRTUAL;
    MO_TRY(k->bwd ? build_backward(&g, k) : build_forward(&g, k));
    cudnnBackendDescriptor_t graph = NULL;
    MO_TRY(new_desc(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    CUDNN_CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops,
                                         g.ops));
    CUDNN_CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    cudnnStatus_t fs = cudnnBackendFinalize(graph);
    if (fs != CUDNN_STATUS_SUCCESS) return refusal(fs, "cudnnBackendFinalize(operation graph)", __FILE__, __LINE__);

    int seen = 0, refused = 0, too_big = 0;
    int64_t smallest_big = -1;
    char last_refusal[512] = "";
    mo_status st = MO_OK;
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2 && !p->plan; mi++) {
        cudnnBackendDescriptor_t heur = NULL, cfg[ATT_MAX_CAND] = {0};
        int64_t count = 0, got = 0;
        CUDNN_CHECK_GOTO(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur), mode_done);
        CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph), mode_done);
        CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                                      &modes[mi]), mode_done);
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) { // no list in this mode
            cudnnGetLastErrorString(last_refusal, sizeof last_refusal);
            goto mode_done;
        }
        CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL), mode_done);
        if (count > ATT_MAX_CAND) count = ATT_MAX_CAND;
        for (int64_t i = 0; i < count; i++)
            CUDNN_CHECK_GOTO(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]), mode_done);
        if (count > 0)
            CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg), mode_done);
        for (int64_t i = 0; i < got && !p->plan; i++) {
            seen++;
            cudnnBackendDescriptor_t pl = NULL;
            CUDNN_CHECK_GOTO(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &pl), mode_done);
            int64_t n = 0, ws = 0;
            if (cudnnBackendSetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) !=
                    CUDNN_STATUS_SUCCESS ||
                cudnnBackendSetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfg[i]) != CUDNN_STATUS_SUCCESS ||
                cudnnBackendFinalize(pl) != CUDNN_STATUS_SUCCESS) { // this engine cannot run the graph
                cudnnGetLastErrorString(last_refusal, sizeof last_refusal);
                refused++;
                cudnnBackendDestroyDescriptor(pl);
                continue;
            }
            CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                          CUDNN_TYPE_INT64, 1, &n, &ws), plan_fail);
            if (ws < 0 || (uint64_t)ws > (uint64_t)k->ws_bytes) {
                too_big++;
                if (smallest_big < 0 || ws < smallest_big) smallest_big = ws;
                cudnnBackendDestroyDescriptor(pl);
                continue;
            }
            // the engine's global index, for the log line of the tests
            cudnnBackendDescriptor_t eng = NULL;
            int64_t gi = -1;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS) {
                if (cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                             &eng) != CUDNN_STATUS_SUCCESS ||
                    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &gi) !=
                        CUDNN_STATUS_SUCCESS)
                    gi = -1;
                cudnnBackendDestroyDescriptor(eng);
            }
            if (p->nkeep == ATT_KEEP) {
                st = MO_FAIL(MO_ERR_INTERNAL, "attention plan: no room for the engine config");
                goto plan_fail;
            }
            p->keep[p->nkeep++] = cfg[i]; // the plan refers to it: held until the plan goes
            cfg[i] = NULL;
            p->plan = pl;
            p->ws = ws;
            p->engine = (long)gi;
            continue;
        plan_fail:
            cudnnBackendDestroyDescriptor(pl);
            goto mode_done;
        }
    mode_done:
        for (int64_t i = 0; i < count; i++)
            if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
        if (heur) cudnnBackendDestroyDescriptor(heur);
        if (st != MO_OK) return st;
    }
    if (!p->plan) {
        char big[64] = "";
        if (too_big) snprintf(big, sizeof big, " (the smallest wanted %lld B)", (long long)smallest_big);
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "cuDNN attention %s (%s, B %d T %d C %d NH %d): no engine runs it within the %zu-byte "
                       "workspace: %d candidates, %d refused the graph, %d needed more workspace%s; cuDNN: %s",
                       k->bwd ? "backward" : "forward", mo_dtype_name((mo_dtype)k->dt), k->B, k->T, k->C, k->NH,
                       k->ws_bytes, seen, refused, too_big, big, last_refusal[0] ? last_refusal : "(no message)");
    }
    return MO_OK;
}

static mo_status plan_get(mo_ctx *c, const att_key *k, att_plan **out) {
    if (!c->attn_dnn) {
        c->attn_dnn = calloc(1, sizeof *c->attn_dnn);
        if (!c->attn_dnn) return MO_FAIL(MO_ERR_OOM, "host out of memory for the cuDNN attention plan cache");
    }
    mo_attn_dnn_cache *d = c->attn_dnn;
    for (int i = 0; i < d->n; i++)
        if (memcmp(&d->slot[i].key, k, sizeof *k) == 0) {
            d->hits++;
            *out = &d->slot[i];
            return MO_OK;
        }
    att_plan *fresh = calloc(1, sizeof *fresh); // large (the descriptor list): not on the stack
    if (!fresh) return MO_FAIL(MO_ERR_OOM, "host out of memory for a cuDNN attention plan");
    fresh->key = *k;
    mo_status st = plan_build(c, k, fresh);
    if (st != MO_OK) {
        plan_release(fresh);
        free(fresh);
        return st;
    }
    d->misses++;
    att_plan *slot;
    if (d->n < ATT_SLOTS) {
        slot = &d->slot[d->n++];
    } else {
        // the evicted plan may still be in flight: wait for the stream before destroying it
        cudaError_t ce = cudaStreamSynchronize((cudaStream_t)c->stream);
        if (ce != cudaSuccess) {
            plan_release(fresh);
            free(fresh);
            CUDA_CHECK(ce);
        }
        slot = &d->slot[d->victim];
        d->victim = (d->victim + 1) % ATT_SLOTS;
        plan_release(slot);
    }
    *slot = *fresh;
    free(fresh);
    *out = slot;
    return MO_OK;
}

static att_key make_key(const mo_ctx *c, int bwd, mo_dtype dt, int B, int T, int C, int NH) {
    att_key k;
    memset(&k, 0, sizeof k); // the key is compared with memcmp: no stray padding bytes
    k.bwd = bwd, k.dt = (int)dt, k.B = B, k.T = T, k.C = C, k.NH = NH;
    k.ws_bytes = c->gemm_ws_bytes;
    return k;
}

static int aligned(const void *p) { return ((uintptr_t)p % ATT_ALIGN) == 0; }

static mo_status execute(mo_ctx *c, const att_plan *p, int n, const int64_t *uid, void **ptr) {
    void *hv = NULL;
    MO_TRY(mo_dnn_handle(c, &hv));
    cudnnBackendDescriptor_t vp = NULL;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    void *ws = c->gemm_ws;
    mo_status st = MO_OK;
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid),
                     done);
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                                                  ptr), done);
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
                     done);
    CUDNN_CHECK_GOTO(st, cudnnBackendFinalize(vp), done);
    CUDNN_CHECK_GOTO(st, cudnnBackendExecute((cudnnHandle_t)hv, p->plan, vp), done);
done:
    cudnnBackendDestroyDescriptor(vp);
    return st;
}

// Says which call failed around a failure of the plan or its execution.
static mo_status wrap(mo_status st, const att_key *k, const att_plan *p) {
    if (st == MO_OK) return st;
    char why[1024];
    snprintf(why, sizeof why, "%s", mo_errmsg());
    return MO_FAIL(st, "cuDNN attention %s (%s, B %d T %d C %d NH %d)%s: %s", k->bwd ? "backward" : "forward",
                   mo_dtype_name((mo_dtype)k->dt), k->B, k->T, k->C, k->NH,
                   p ? ", executing the plan" : ", building the plan", why);
}

mo_status attention_cudnn_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T,
                                       int C, int NH) {
    if (!aligned(out) || !aligned(lse) || !aligned(qkv))
        return MO_FAIL(MO_ERR_INVALID, "attention_cudnn_forward: tensors must be %d-byte aligned", ATT_ALIGN);
    const att_key k = make_key(c, 0, dt, B, T, C, NH);
    att_plan *p = NULL;
    mo_status st = plan_get(c, &k, &p);
    if (st != MO_OK) return st == MO_ERR_UNSUPPORTED ? st : wrap(st, &k, NULL);
    const size_t e = mo_dtype_size(dt);
    float scale = 1.0f / sqrtf((float)(C / NH)), lowest = -FLT_MAX; // by value: read at execute
    const char *base = qkv;
    const int64_t uid[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_LOWEST};
    void *ptr[7] = {(void *)base, (void *)(base + (size_t)C * e), (void *)(base + 2 * (size_t)C * e), out, lse,
                    &scale, &lowest};
    return wrap(execute(c, p, 7, uid, ptr), &k, p);
}

mo_status attention_cudnn_backward_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                        const void *out, const float *lse, void *scratch, int B, int T, int C,
                                        int NH) {
    if (!aligned(dqkv) || !aligned(dout) || !aligned(qkv) || !aligned(out) || !aligned(lse) || !aligned(scratch))
        return MO_FAIL(MO_ERR_INVALID, "attention_cudnn_backward: tensors must be %d-byte aligned", ATT_ALIGN);
    const att_key k = make_key(c, 1, dt, B, T, C, NH);
    att_plan *p = NULL;
    mo_status st = plan_get(c, &k, &p);
    if (st != MO_OK) return st == MO_ERR_UNSUPPORTED ? st : wrap(st, &k, NULL);
    const size_t e = mo_dtype_size(dt), nacc = (size_t)B * NH * T * (size_t)(C / NH);
    float *dqacc = scratch, *ssum = dqacc + nacc; // attention_cudnn.h: the accumulator, then softmax_sum
    if (cudnnGetVersion() < 90600) // before 9.6 the caller zeroes the accumulator (cudnn-frontend does)
        CUDA_CHECK(cudaMemsetAsync(dqacc, 0, nacc * sizeof(float), (cudaStream_t)c->stream));
    float scale = 1.0f / sqrtf((float)(C / NH)), lowest = -FLT_MAX, one = 1.0f;
    const char *q = qkv;
    char *dq = dqkv;
    const size_t ce = (size_t)C * e;
    const int64_t uid[14] = {UID_Q,  UID_K,  UID_V,     UID_O,      UID_DO,  UID_STATS, UID_DQ,
                             UID_DK, UID_DV, UID_SCALE, UID_LOWEST, UID_ONE, UID_SSUM,  UID_DQACC};
    void *ptr[14] = {(void *)q,        (void *)(q + ce), (void *)(q + 2 * ce), (void *)out, (void *)dout,
                     (void *)lse,      dq,               dq + ce,              dq + 2 * ce, &scale,
                     &lowest,          &one,             ssum,                 dqacc};
    return wrap(execute(c, p, 14, uid, ptr), &k, p);
}
