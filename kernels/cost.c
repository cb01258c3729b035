// The cost trace (cost.h): recording, and the costs of the composite ops. The counts are first order:
// a GEMM (M,K) x (K,N) is 2MNK FLOPs and its three operands once at the activation width e (fp32
// gradients of weights at 4 bytes, read and written: 8 per element); a memory-bound op its reads and
// writes. They are what the planner's roofline takes (bench/planner_roofline.c).
#include "cost.h"
#include "attention_fused_gemm.h"

#include <stdlib.h>
#include "attention.h" // which shapes the fp32 score kernel takes, its tile

const char *mo_cost_class_name(mo_cost_class c) {
    static const char *n[MO_COST_COUNT] = {"gemm", "conv",     "attention", "attention_lib", "memory",
                                           "host_copy", "host", "copy_out",  "copy_back",     "copy_join"};
    return (unsigned)c < MO_COST_COUNT ? n[c] : "?";
}

void mo_cost_trace_attach(mo_ctx *c, mo_cost_trace *t) { c->trace = t; }
void mo_cost_trace_reset(mo_cost_trace *t) {
    t->n = 0;
    t->overflow = 0;
}
void mo_cost_trace_free(mo_cost_trace *t) {
    free(t->ops);
    t->ops = NULL;
    t->n = t->cap = 0;
}

void mo_cost_record_(mo_ctx *c, const char *name, mo_cost_class cls, double flops, double bytes, int ref) {
    mo_cost_trace *t = c->trace;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        mo_cost_op *ops = realloc(t->ops, cap * sizeof *ops);
        if (!ops) { t->overflow = 1; return; }
        t->ops = ops;
        t->cap = cap;
    }
    mo_cost_op *o = &t->ops[t->n++];
    o->name = name;
    o->cls = (unsigned char)cls;
    o->prof = (unsigned char)c->prof_cat;
    o->region = (unsigned char)c->cost_region;
    o->ref = ref;
    o->flops = flops;
    o->bytes = bytes;
}

// dinp / dweight / dbias of out = inp W^T: dinp = dout W (N,OC)x(OC,C); dW += dout^T inp, the fp32
// gradient read and written; dbias a column sum of dout (its own small kernel on every path: cuBLASLt's
// BGRADB writes scratch that an axpy adds, the 16-bit path reduces in a kernel of its own).
void mo_cost_matmul_forward(mo_ctx *c, int e, int N, int C, int OC, int gelu_out, int add) {
    if (!c->trace) return;
    double n = N, k = C, o = OC;
    double bytes = e * (n * k + k * o + n * o);
    if (gelu_out) bytes += e * n * o; // the GELU_AUX epilogue writes the activation too
    if (add) bytes += e * n * o;      // the residual read as the GEMM's C
    mo_cost_record(c, gelu_out ? "matmul_fwd_gelu" : add ? "matmul_fwd_add" : "matmul_fwd", MO_COST_GEMM, 2 * n * k * o, bytes);
}

void mo_cost_matmul_backward(mo_ctx *c, int e, int N, int C, int OC, int has_dinp, int has_dbias, int dgelu) {
    if (!c->trace) return;
    double n = N, k = C, o = OC;
    if (has_dinp)
        mo_cost_record(c, dgelu ? "matmul_bwd_dinp_dgelu" : "matmul_bwd_dinp", MO_COST_GEMM, 2 * n * k * o,
                       e * (n * o + o * k + n * k) + (dgelu ? e * n * k : 0));
    mo_cost_record(c, "matmul_bwd_dweight", MO_COST_GEMM, 2 * n * k * o, e * (n * o + n * k) + 8 * o * k);
    if (has_dbias) mo_cost_record(c, "matmul_bwd_dbias", MO_COST_MEMORY, n * o, e * n * o + 8 * o);
}

double mo_cost_block_share(int T, int r) {
    double sum = 0;
    if (r < 1) r = T;
    for (int i0 = 0; i0 < T; i0 += r) {
        int i1 = i0 + r < T ? i0 + r : T;
        sum += (double)(i1 - i0) * i1;
    }
    return T > 0 ? sum / ((double)T * T) : 1.0;
}

// The materialized attention's GEMMs on cuBLAS compute the causal chunks' share f of the T x T
// products; the fp32 score kernel (the score GEMM forward, datt backward) its 128-row diagonal tiles.
// The pointer-free part of attention_materialized.cu's rules: dry pointers are aligned, and the batched
// form's pointer arrays fit the scratch at the shapes the model runs.
typedef struct attn_shape {
    double NC, S, qk;  // B*T*C, B*NH*T*T, 2*B*T*T*C
    double f;          // the causal chunks' share
    int strided;       // q, k, v permuted to head-major copies
    int HS, BH;
} attn_shape;

static void attn_shape_of(const mo_ctx *c, int e, int B, int T, int C, int NH, attn_shape *a) {
    a->NC = (double)B * T * C;
    a->S = (double)B * NH * T * T;
    a->qk = 2.0 * B * T * T * C;
    a->BH = B * NH;
    a->HS = C / NH;
    a->f = mo_cost_block_share(T, mo_attn_chunk_rows(c, T, e, a->BH));
    a->strided = mo_attn_gemm_mode(c, e) == MO_ATTN_GEMM_STRIDED;
}

// Whether the fp32 score kernel runs a scores / datt GEMM with rows of X at stride ldx, of Y at ldy.
static int own_scores(const mo_ctx *c, int e, const attn_shape *a, int T, int ldx, int ldy) {
    return e == 4 && !c->tf32 && c->attn_own_scores && attention_scores_cuda_supported(a->BH, T, a->HS, ldx, ldy, NULL, NULL, NULL);
}

void mo_cost_attention_forward(mo_ctx *c, int e, int B, int T, int C, int NH) {
    if (!c->trace) return;
    attn_shape a;
    attn_shape_of(c, e, B, T, C, NH, &a);
    // scores = q k^T: q and k rows in place in qkv (ld 3C) or head-major copies (ld HS)
    const int ld = a.strided ? a.HS : 3 * C;
    const double fs = own_scores(c, e, &a, T, ld, ld) ? mo_cost_block_share(T, ATTENTION_SCORES_TILE) : a.f;
    if (a.strided) mo_cost_record(c, "attn_permute_in", MO_COST_MEMORY, 0, e * 6 * a.NC);
    mo_cost_record(c, "attn_scores", MO_COST_GEMM, a.qk * fs, e * (2 * a.NC + fs * a.S));
    mo_cost_record(c, "attn_softmax", MO_COST_MEMORY, 5 * a.S, e * 2 * a.S);
    mo_cost_record(c, "attn_av", MO_COST_GEMM, a.qk * a.f, e * (a.f * a.S + 2 * a.NC));
    if (a.strided) mo_cost_record(c, "attn_permute_out", MO_COST_MEMORY, 0, e * 2 * a.NC);
}

void mo_cost_attention_backward(mo_ctx *c, int e, int B, int T, int C, int NH, int have_out) {
    if (!c->trace) return;
    attn_shape a;
    attn_shape_of(c, e, B, T, C, NH, &a);
    // datt = dy v^T: dy rows in dout (ld C) or head-major (HS), v in qkv (3C) or head-major
    const int own = own_scores(c, e, &a, T, a.strided ? a.HS : C, a.strided ? a.HS : 3 * C);
    const double fs = own ? mo_cost_block_share(T, ATTENTION_SCORES_TILE) : a.f;
    const int fuse_dpre = own && have_out && c->attn_fuse_dpre;
    if (a.strided) mo_cost_record(c, "attn_permute_in", MO_COST_MEMORY, 0, e * 8 * a.NC);
    if (fuse_dpre) {
        // D = rowdot(dy, out), then dpreatt from the datt kernel's epilogue (it reads att on its tiles)
        mo_cost_record(c, "attn_rowdot", MO_COST_MEMORY, 2 * a.NC, e * 2 * a.NC);
        mo_cost_record(c, "attn_datt_dpre", MO_COST_GEMM, a.qk * fs, e * (2 * a.NC + 2 * fs * a.S));
    } else {
        mo_cost_record(c, "attn_datt", MO_COST_GEMM, a.qk * fs, e * (2 * a.NC + fs * a.S));
    }
    mo_cost_record(c, "attn_dv", MO_COST_GEMM, a.qk * a.f, e * (a.f * a.S + 2 * a.NC));
    if (!fuse_dpre) mo_cost_record(c, "attn_softmax_bwd", MO_COST_MEMORY, 4 * a.S, e * 3 * a.S);
    mo_cost_record(c, "attn_dq", MO_COST_GEMM, a.qk * a.f, e * (a.f * a.S + 2 * a.NC));
    mo_cost_record(c, "attn_dk", MO_COST_GEMM, a.qk * a.f, e * (a.f * a.S + 2 * a.NC));
    if (a.strided) mo_cost_record(c, "attn_permute_out", MO_COST_MEMORY, 0, e * 6 * a.NC);
}

// One kernel over the causal tiles (about half of the T x T scores), keeping lse (fp32).
void mo_cost_attention_fused_forward(mo_ctx *c, int e, int B, int T, int C, int NH) {
    if (!c->trace) return;
    double NC = (double)B * T * C, qk = 2.0 * B * T * T * C;
    mo_cost_record(c, "attn_fused_fwd", MO_COST_ATTENTION, 0.5 * 2 * qk, e * 4 * NC + 4.0 * B * NH * T);
}

// The blocked GEMMs over query chunks of L rows compute the chunks' share f of the T x T products (as
// the materialized attention's causal chunks); each chunk's score rows round-trip through the scratch
// buffer (written by a GEMM, read and written by a row kernel, read by the next GEMMs).
void mo_cost_attention_fused_gemm(mo_ctx *c, int backward, int B, int T, int C, int NH) {
    if (!c->trace) return;
    const double NC = (double)B * T * C, qk = 2.0 * B * T * T * C, S = (double)B * NH * T * T;
    const double f = mo_cost_block_share(T, mo_attn_fused_gemm_rows(c, B, T, NH));
    if (!backward) {
        mo_cost_record(c, "attn_fg_scores", MO_COST_GEMM, qk * f, 4 * (2 * NC + f * S));
        mo_cost_record(c, "attn_fg_softmax", MO_COST_MEMORY, 5 * f * S, 4 * 2 * f * S);
        mo_cost_record(c, "attn_fg_pv", MO_COST_GEMM, qk * f, 4 * (f * S + 2 * NC));
        return;
    }
    mo_cost_record(c, "attn_fg_rowdot", MO_COST_MEMORY, 2 * NC, 4 * 2 * NC);
    mo_cost_record(c, "attn_fg_scores", MO_COST_GEMM, qk * f, 4 * (2 * NC + f * S));
    mo_cost_record(c, "attn_fg_dp", MO_COST_GEMM, qk * f, 4 * (2 * NC + f * S));
    mo_cost_record(c, "attn_fg_dsoftmax", MO_COST_MEMORY, 6 * f * S, 4 * 4 * f * S);
    mo_cost_record(c, "attn_fg_dv", MO_COST_GEMM, qk * f, 4 * (f * S + 2 * NC));
    mo_cost_record(c, "attn_fg_dq", MO_COST_GEMM, qk * f, 4 * (f * S + 2 * NC));
    mo_cost_record(c, "attn_fg_dk", MO_COST_GEMM, qk * f, 4 * (f * S + 2 * NC));
}

// cuDNN's fused SDPA, causal: the forward one kernel of the causal half's 2 products (lse kept, fp32);
// the backward one kernel of FlashAttention-2's 5 products (the scores recomputed, dV, dP, dQ, dK; D
// inside it), dQ accumulated in the fp32 scratch (mo_attention_cudnn_backward_scratch_bytes)
void mo_cost_attention_cudnn_forward(mo_ctx *c, int e, int B, int T, int C, int NH) {
    if (!c->trace) return;
    double NC = (double)B * T * C, qk = 2.0 * B * T * T * C;
    mo_cost_record(c, "attn_cudnn_fwd", MO_COST_ATTENTION_LIB, 0.5 * 2 * qk, e * 4 * NC + 4.0 * B * NH * T);
}
void mo_cost_attention_cudnn_backward(mo_ctx *c, int e, int B, int T, int C, int NH) {
    if (!c->trace) return;
    double NC = (double)B * T * C, qk = 2.0 * B * T * T * C;
    mo_cost_record(c, "attn_cudnn_bwd", MO_COST_ATTENTION_LIB, 0.5 * 5 * qk, e * 8 * NC + 4.0 * (2 * NC + B * NH * T));
}

// D = rowsum(dout * out); the dk/dv kernel and the dq kernel each recompute the scores and dP (8
// products of the forward's 2 over the two).
void mo_cost_attention_fused_backward(mo_ctx *c, int e, int B, int T, int C, int NH) {
    if (!c->trace) return;
    (void)NH;
    double NC = (double)B * T * C, qk = 2.0 * B * T * T * C;
    mo_cost_record(c, "attn_fused_D", MO_COST_MEMORY, 2 * NC, e * 2 * NC);
    mo_cost_record(c, "attn_fused_dkdv", MO_COST_ATTENTION, 0.5 * 4 * qk, e * 6 * NC);
    mo_cost_record(c, "attn_fused_dq", MO_COST_ATTENTION, 0.5 * 4 * qk, e * 6 * NC);
}
