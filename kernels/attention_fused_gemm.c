// The pure-C part of the blocked-GEMM fused attention (attention_fused_gemm.h): chunk rows and the
// scratch layout, the same on every backend so the dry backend allocates what cuda does.
#include "attention_fused_gemm.h"

static size_t fg_round(size_t b) { return (b + 255) / 256 * 256; }

int mo_attn_fused_gemm_rows(const mo_ctx *c, int B, int T, int NH) {
    if (B <= 0 || T <= 0 || NH <= 0) return 1;
    long long L;
    if (c->attn_fused_rows > 0) {
        L = c->attn_fused_rows;
    } else {
        const size_t row = 2 * (size_t)T * sizeof(float); // one query row of one head in both buffers
        long long most = (long long)(MO_ATTN_FUSED_GEMM_HEAD_BUDGET / row);
        most -= most % 64;
        if (most < 64) most = 64;
        // as few chunks as the budget allows, then even ones: 320 rows at most at B 8 T 1024 is 4 chunks
        // of 256, not 320, 320, 320, 64 (a last chunk of a few rows is a GEMM batch that is mostly launch)
        const long long G = (T + most - 1) / most;
        L = (T + G - 1) / G;
        L = (L + 63) / 64 * 64;
    }
    return L < T ? (int)L : T;
}

void mo_attn_fused_gemm_layout(const mo_ctx *c, int backward, int B, int T, int NH, mo_attn_fg_layout *l) {
    const size_t n = (size_t)B * NH;
    l->L = mo_attn_fused_gemm_rows(c, B, T, NH);
    l->G = (T + l->L - 1) / l->L;
    l->jobs = backward ? 5 : 2;
    const size_t buf = fg_round(n * l->L * T * sizeof(float));
    size_t at = 0;
    l->d = at;
    if (backward) at += fg_round(n * T * sizeof(float));
    l->s = at;
    at += buf;
    l->dp = at;
    if (backward) at += buf;
    l->ptrs = at;
    at += fg_round(3 * (size_t)l->jobs * l->G * n * sizeof(void *));
    l->total = at;
}

size_t mo_attn_fused_gemm_scratch_bytes(const mo_ctx *c, int backward, int B, int T, int C, int NH) {
    (void)C;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    mo_attn_fg_layout l;
    mo_attn_fused_gemm_layout(c, backward, B, T, NH, &l);
    return l.total;
}
