// The planner's time side: a roofline of the training step, op by op, and its calibration against
// measured rows. The op list mirrors models/gpt_step.c (forward, backward, the recompute of each
// checkpoint policy, the optimizer); each op's FLOPs and bytes come from its shapes. It is a model of
// time only: memory is always the dry run's.
#include "bench/planner.h"
#include "kernels/attention.h" // which shapes the fp32 score kernel takes, its tile
#include "kernels/ctx.h" // the attention's causal chunk counts

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct acc {
    mo_roofline *r;
    double gemm_rate, vec_rate, bw; // FLOP/s, FLOP/s, B/s
    double flash_rate;              // the 16-bit fused attention's FLOP/s (MO_PLAN_EFF_FLASH16 of the peak)
} acc;

#define OP_FLASH 2 // op class: the 16-bit fused attention kernels (kern_s, not fitted)

// One op: at least its compute at the rate of its class (1 GEMM, 0 vector, OP_FLASH), its traffic at
// the bandwidth, a launch.
static void op(acc *a, int gemm, double flops, double bytes) {
    double rate = gemm == OP_FLASH ? a->flash_rate : gemm ? a->gemm_rate : a->vec_rate;
    double t = fmax(flops / rate, bytes / a->bw);
    t = fmax(t, MO_PLAN_KERNEL_FLOOR_S);
    if (gemm == OP_FLASH) {
        a->r->kern_s += t;
    } else if (gemm) {
        a->r->gemm_s += t;
        a->r->gemm_flops += flops;
    } else {
        a->r->mem_s += t;
        a->r->mem_bytes += bytes;
    }
    a->r->flops += flops;
    a->r->kernels++;
}

typedef struct shape {
    double Bm, T, C, NH, V, N, e; // micro-batch, seq, channels, heads, vocab, rows Bm*T, activation bytes
    int fused;
    int own_scores; // fp32 without TF32, HS 64: the score GEMMs on attention_scores.cu's 128-row tiles
} shape;

// out (N,O) = in (N,K) W^T (+ extra bytes written by a fused epilogue)
static void linear_fwd(acc *a, const shape *s, double K, double O, double extra) {
    op(a, 1, 2 * s->N * K * O, s->e * (s->N * K + K * O + s->N * O) + extra);
}

// dinp = dout W; dW += dout^T inp (fp32 gradient read and written); dbias over the rows of dout.
static void linear_bwd(acc *a, const shape *s, double K, double O, int bias) {
    op(a, 1, 2 * s->N * K * O, s->e * (s->N * O + O * K + s->N * K));
    op(a, 1, 2 * s->N * K * O, s->e * (s->N * O + s->N * K) + 8 * O * K);
    if (bias) op(a, 0, s->N * O, s->e * s->N * O + 8 * O);
}

static void layernorm_fwd(acc *a, const shape *s) { op(a, 0, 8 * s->N * s->C, s->e * 2 * s->N * s->C + 8 * s->N); }
static void layernorm_bwd(acc *a, const shape *s) { op(a, 0, 12 * s->N * s->C, s->e * 4 * s->N * s->C + 8 * s->N); }
static void residual(acc *a, const shape *s) { op(a, 0, s->N * s->C, s->e * 3 * s->N * s->C); }

// The share of the T x T products computed when the queries run in blocks of r rows, the block
// [i0, i1) over keys [0, i1): sum of rows * i1 over T^2.
static double block_share(int T, int r) {
    double sum = 0;
    for (int i0 = 0; i0 < T; i0 += r) {
        int i1 = i0 + r < T ? i0 + r : T;
        sum += (double)(i1 - i0) * i1;
    }
    return T > 0 ? sum / ((double)T * T) : 1.0;
}
// The materialized attention's GEMMs: chunks of mo_attn_chunk_rows rows (kernels/ctx.h: its default
// count for the precision and GEMM form, scaled by B*NH / 96, rounded up to 64 rows).
static double causal_share(const shape *s) {
    mo_ctx c;
    memset(&c, 0, sizeof c); // attn_chunk_rows 0, attn_gemm 0: the defaults
    return block_share((int)s->T, mo_attn_chunk_rows(&c, (int)s->T, (int)s->e, (int)(s->Bm * s->NH)));
}
// The share of the T x T scores the score and datt GEMMs compute: the causal chunks' share on cuBLAS,
// the tiles on and below the diagonal (128 x 128) on attention_scores.cu's kernel.
static double scores_share(const shape *s) {
    return s->own_scores ? block_share((int)s->T, ATTENTION_SCORES_TILE) : causal_share(s);
}
// Whether the default form permutes q, k, v (and the outputs) to head-major copies around its GEMMs;
// the in-place forms read and write qkv / out / dqkv where they are.
static int attn_permutes(const shape *s) {
    mo_ctx c;
    memset(&c, 0, sizeof c);
    return mo_attn_gemm_mode(&c, (int)s->e) == MO_ATTN_GEMM_STRIDED;
}

static void attention_fwd(acc *a, const shape *s) {
    double NC = s->N * s->C, S = s->Bm * s->NH * s->T * s->T, qk = 2 * s->Bm * s->T * s->T * s->C;
    if (s->fused) {
        // One kernel over the causal tiles (about half of the T x T scores), keeping lse: CUDA cores in
        // fp32 (attention_fused.cu), tensor cores (mma.sync) in 16 bits (attention_fused_mixed.cu).
        op(a, s->e < 4 ? OP_FLASH : 0, 0.5 * 2 * qk, s->e * 4 * NC + 4 * s->Bm * s->NH * s->T);
        return;
    }
    const double f = causal_share(s), fs = scores_share(s);
    const int pm = attn_permutes(s);
    if (pm) op(a, 0, 0, s->e * 6 * NC);             // permute qkv to per-head q, k, v
    op(a, 1, qk * fs, s->e * (2 * NC + fs * S));    // scores q k^T (the chunks' keys, or the tiles)
    qk *= f;
    op(a, 0, 5 * S, s->e * 2 * S);                  // scale, mask, softmax in place
    op(a, 1, qk, s->e * (f * S + 2 * NC));          // att v
    if (pm) op(a, 0, 0, s->e * 2 * NC);             // heads side by side
}

static void attention_bwd(acc *a, const shape *s) {
    double NC = s->N * s->C, S = s->Bm * s->NH * s->T * s->T, qk = 2 * s->Bm * s->T * s->T * s->C;
    if (s->fused) {
        op(a, 0, 2 * NC, s->e * 2 * NC);            // D = rowsum(dout * out)
        // dk/dv kernel and dq kernel each recompute the scores and dP: 8 products of the forward's 2.
        op(a, s->e < 4 ? OP_FLASH : 0, 0.5 * 4 * qk, s->e * 6 * NC);
        op(a, s->e < 4 ? OP_FLASH : 0, 0.5 * 4 * qk, s->e * 6 * NC);
        return;
    }
    const double f = causal_share(s), fs = scores_share(s);
    const int pm = attn_permutes(s);
    if (pm) op(a, 0, 0, s->e * 8 * NC);             // permute q, k, v and dout
    if (s->own_scores) {
        // dpreatt from the datt kernel's epilogue (attention_dpreatt_cuda): it reads att on its tiles,
        // after D = rowsum(dy * out); no softmax-backward pass
        op(a, 0, 2 * NC, s->e * 2 * NC);
        op(a, 1, qk * fs, s->e * (2 * NC + 2 * fs * S));
    } else {
        op(a, 1, qk * fs, s->e * (2 * NC + fs * S)); // datt = dy v^T
    }
    qk *= f;
    op(a, 1, qk, s->e * (f * S + 2 * NC));          // dv = att^T dy
    if (!s->own_scores) op(a, 0, 4 * S, s->e * 3 * S); // softmax backward in place
    op(a, 1, qk, s->e * (f * S + 2 * NC));          // dq
    op(a, 1, qk, s->e * (f * S + 2 * NC));          // dk
    if (pm) op(a, 0, 0, s->e * 6 * NC);             // back to (B, T, 3C)
}

static void block_fwd(acc *a, const shape *s) {
    double C = s->C, NC = s->N * s->C;
    layernorm_fwd(a, s);
    linear_fwd(a, s, C, 3 * C, 0);
    attention_fwd(a, s);
    linear_fwd(a, s, C, C, 0);
    residual(a, s);
    layernorm_fwd(a, s);
    linear_fwd(a, s, C, 4 * C, s->e * 4 * NC); // GELU epilogue writes the activation too
    linear_fwd(a, s, 4 * C, C, 0);
    residual(a, s);
}

static void block_bwd(acc *a, const shape *s, int recompute_attention) {
    double C = s->C, NC = s->N * s->C;
    linear_bwd(a, s, 4 * C, C, 1);
    op(a, 0, 8 * 4 * NC, s->e * 3 * 4 * NC); // GELU backward
    linear_bwd(a, s, C, 4 * C, 1);
    layernorm_bwd(a, s);
    linear_bwd(a, s, C, C, 1);
    if (recompute_attention) attention_fwd(a, s);
    attention_bwd(a, s);
    linear_bwd(a, s, C, 3 * C, 1);
    layernorm_bwd(a, s);
}

// The parts of the step a split does not divide evenly (seconds at the datasheet rates).
typedef struct split_part {
    double head_gemm, head_mem; // lnf, LM head, loss and their backward: all micro-batches
    double opt_gemm, opt_mem;   // the optimizer, once per step
} split_part;

// A split's time per rank, first order, for the critical rank: a tp rank of the last stage (it runs
// the LM head, replicated on every tp rank, besides its share of the blocks). Per micro-batch its
// compute is the blocks / (tp*pp) plus the whole head; the 1F1B pipeline stretches the micro-batch
// part by (accum + pp - 1) / accum; the optimizer (not pipelined) is divided by tp*pp (optimistic: the
// replicated LayerNorms and the tied wte copies are updated on several ranks). The link carries, per
// micro-batch and block of the stage, 4 tp all-reduces of (B/accum, T, C) in fp32 (16-bit runs widen
// to fp32 before the sum; a ring moves 2 (tp-1)/tp of each), one activation forward and one gradient
// back per stage boundary (16 bits when mixed), and once per step the tied wte gradient's all-reduce
// between the first and last stage (V*C fp32); recompute's extra forward all-reduces are ignored.
static void split_step(const mo_run_config *rc, const mo_gpu_spec *g, const shape *s, const split_part *pt,
                       mo_roofline *out) {
    int tp = rc->tp, pp = rc->pp, W = tp * pp;
    if (W <= 1) return;
    double bubble = (double)(rc->accum + pp - 1) / rc->accum;
    double blocks_gemm = out->gemm_s - pt->head_gemm - pt->opt_gemm, blocks_mem = out->mem_s - pt->head_mem - pt->opt_mem;
    // the head is on one stage, in full on each of its tp ranks: not divided
    out->gemm_s = (blocks_gemm / W + pt->head_gemm) * bubble + pt->opt_gemm / W;
    out->mem_s = (blocks_mem / W + pt->head_mem) * bubble + pt->opt_mem / W;
    out->bubble = bubble;
    double act32 = s->N * s->C * 4, act = s->N * s->C * s->e; // one (B/accum, T, C) activation, bytes
    double bytes = 0;
    if (tp > 1) bytes += rc->accum * (double)(rc->layers / pp) * 4 * act32 * 2.0 * (tp - 1) / tp;
    if (pp > 1) bytes += rc->accum * 2 * act + s->V * s->C * 4.0; // boundaries; the wte tie (2 ranks: ring factor 1)
    double link = g->link_gbs > 0 ? 0.5e9 * g->link_gbs : 0; // the vendor states both directions together
    out->comm_s = link > 0 ? bytes / link : 0;
}

void mo_roofline_step(const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out) {
    memset(out, 0, sizeof *out);
    int half = rc->precision == MO_PREC_FP16 || rc->precision == MO_PREC_BF16;
    const double peak = 1e12 * mo_gpu_gemm_tflops(g, rc->precision, NULL);
    acc a = {out, peak, 1e12 * g->fp32, 1e9 * g->mem_bw_gbs, MO_PLAN_EFF_FLASH16 * peak};
    shape s;
    s.Bm = (double)(rc->batch / rc->accum);
    s.T = rc->seq;
    s.C = rc->hidden;
    s.NH = rc->heads;
    s.V = rc->vocab;
    s.N = s.Bm * s.T;
    s.e = half ? 2 : 4; // activations in 16 bits under mixed precision (docs/DESIGN.md)
    s.fused = rc->attn == MO_ATTN_FUSED;
    // the operands in place in qkv (ld 3C); a tp rank has fewer heads of the same size
    s.own_scores = rc->precision == MO_PREC_FP32 && rc->heads > 0 && rc->hidden % rc->heads == 0 &&
                   attention_scores_cuda_supported((int)(s.Bm * s.NH), rc->seq, rc->hidden / rc->heads,
                                                   3 * rc->hidden, 3 * rc->hidden, NULL, NULL, NULL);
    int L = rc->layers;
    double NC = s.N * s.C, NV = s.N * s.V;
    int recompute_blocks = rc->ckpt.kind == MO_CKPT_FULL || rc->ckpt.kind == MO_CKPT_EVERY || rc->ckpt.kind == MO_CKPT_SQRT;
    int recompute_attention = rc->ckpt.kind == MO_CKPT_SELECTIVE && !s.fused;
    double head_gemm = 0, head_mem = 0;
    for (int micro = 0; micro < rc->accum; micro++) {
        op(&a, 0, 0, s.e * NC + 8 * NC);                 // embedding: wte and wpe rows (fp32) to the stream
        for (int l = 0; l < L; l++) block_fwd(&a, &s);
        double g0 = out->gemm_s, m0 = out->mem_s;        // the head: on every tp rank of the last stage
        layernorm_fwd(&a, &s);
        linear_fwd(&a, &s, s.C, s.V, 0);                  // logits
        op(&a, 0, 5 * NV, s.e * 2 * NV);                  // softmax cross-entropy, dlogits in place
        linear_bwd(&a, &s, s.C, s.V, 0);
        op(&a, 0, 0, s.e * NC);                           // zero the residual gradient
        layernorm_bwd(&a, &s);
        head_gemm += out->gemm_s - g0;
        head_mem += out->mem_s - m0;
        for (int l = L - 1; l >= 0; l--) {
            if (recompute_blocks) block_fwd(&a, &s);      // every block's forward once more, by segments
            block_bwd(&a, &s, recompute_attention);
        }
        op(&a, 0, 0, s.e * NC + 16 * NC);                 // embedding backward into dwte, dwpe
    }
    // The optimizer, once per step, on fp32 state: zero grads, the clipping norm, AdamW.
    size_t P = 0;
    {
        mo_gpt_config gc;
        memset(&gc, 0, sizeof gc);
        gc.layers = rc->layers; gc.hidden = rc->hidden; gc.heads = rc->heads; gc.seq = rc->seq;
        gc.batch = rc->batch; gc.vocab = rc->vocab; gc.accum = rc->accum;
        P = mo_gpt_num_params(&gc);
    }
    double og0 = out->gemm_s, om0 = out->mem_s;
    op(&a, 0, 0, 4.0 * P);
    op(&a, 0, 2.0 * P, 4.0 * P);
    op(&a, 0, 12.0 * P, 28.0 * P + (half ? 6.0 * P : 0)); // p, g, m, v read; p, m, v written (+16-bit copy)
    out->bubble = 1.0;
    split_part parts = {head_gemm, head_mem, out->gemm_s - og0, out->mem_s - om0};
    split_step(rc, g, &s, &parts, out);
}

// ---------------------------------------------------------------- calibration

void mo_plan_calib_defaults(mo_plan_calib *c) {
    memset(c, 0, sizeof *c);
    for (int p = 0; p < 4; p++) {
        c->eff_gemm[p] = MO_PLAN_EFF_GEMM;
        c->eff_mem[p] = MO_PLAN_EFF_MEM;
        snprintf(c->how[p], sizeof c->how[p], "defaults %.1f GEMM, %.1f memory", MO_PLAN_EFF_GEMM, MO_PLAN_EFF_MEM);
    }
}

double mo_plan_step_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p) {
    return 1e3 * (r->gemm_s / c->eff_gemm[p] + r->mem_s / c->eff_mem[p] + r->comm_s + r->kern_s);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static int usable_row(const mo_csv_row *r, const mo_gpu_spec *g, const mo_gpu_catalog *one) {
    if (strcmp(r->backend, "cuda") || strcmp(r->status, "ok") || !(r->step_ms > 0) || !isfinite(r->step_ms)) return 0;
    if (r->tp * r->pp > 1) return 0; // the roofline models the unsplit step only
    // ... and no allocator cost: a raw-allocator row (cudaMalloc/cudaFree per tensor, 2x slower on the
    // H200) would drag its precision's fitted efficiency down for every other row.
    if (strcmp(r->alloc, "raw") == 0) return 0;
    return mo_gpu_catalog_match_device(one, r->device_name) == g;
}

void mo_plan_calib_fit(mo_plan_calib *c, const mo_gpu_spec *g, const mo_csv_row *rows, size_t n, long skip) {
    mo_plan_calib_defaults(c);
    // Match device names against this one GPU's entry only: a one-entry catalog view.
    mo_gpu_catalog one = {(mo_gpu_spec *)g, 1, ""};
    for (int p = 0; p < 4; p++) {
        // Fit t_i - kern_i = gemm_i / eg + mem_i / em with relative residuals (a 2-parameter least
        // squares in a = 1/eg, b = 1/em, each row divided by t_i), so a 20 ms row weighs as much as a
        // 2 s one; kern_i (the 16-bit fused attention) is taken at its stated rate.
        double suu = 0, suv = 0, svv = 0, su = 0, sv = 0;
        double *ratio = malloc((n ? n : 1) * sizeof *ratio);
        int k = 0;
        for (size_t i = 0; i < n; i++) {
            if ((long)i == skip || !usable_row(&rows[i], g, &one)) continue;
            mo_precision rp;
            if (mo_precision_parse(rows[i].precision, &rp) != MO_OK || (int)rp != p) continue;
            mo_run_config rc;
            if (mo_plan_config_from_row(&rows[i], &rc) != MO_OK) continue;
            mo_roofline r;
            mo_roofline_step(&rc, g, &r);
            double t = rows[i].step_ms / 1e3, u = r.gemm_s / t, v = r.mem_s / t, y = (t - r.kern_s) / t;
            if (!(y > 0)) continue; // the fused kernels alone would take longer than the step
            suu += u * u; suv += u * v; svv += v * v; su += u * y; sv += v * y;
            if (ratio) ratio[k] = (t - r.kern_s) / (r.gemm_s / MO_PLAN_EFF_GEMM + r.mem_s / MO_PLAN_EFF_MEM);
            k++;
        }
        mo_clear_error(); // rows the fit could not use leave no message behind
        if (k == 0 || !ratio) { free(ratio); continue; }
        c->rows[p] = k;
        double det = suu * svv - suv * suv;
        int two = 0;
        if (k >= 3 && det > 1e-6 * suu * svv) {
            double ia = (su * svv - sv * suv) / det, ib = (sv * suu - su * suv) / det;
            if (ia > 0 && ib > 0 && 1 / ia <= 1.5 && 1 / ib <= 1.5 && 1 / ia >= 0.01 && 1 / ib >= 0.01) {
                c->eff_gemm[p] = 1 / ia;
                c->eff_mem[p] = 1 / ib;
                snprintf(c->how[p], sizeof c->how[p], "fitted to %d rows: %.2f GEMM, %.2f memory", k, c->eff_gemm[p], c->eff_mem[p]);
                two = 1;
            }
        }
        if (!two) {
            // One scale on the defaults: the median of measured / predicted (robust to an outlier row).
            qsort(ratio, (size_t)k, sizeof *ratio, cmp_double);
            double s = k % 2 ? ratio[k / 2] : 0.5 * (ratio[k / 2 - 1] + ratio[k / 2]);
            c->eff_gemm[p] = MO_PLAN_EFF_GEMM / s;
            c->eff_mem[p] = MO_PLAN_EFF_MEM / s;
            snprintf(c->how[p], sizeof c->how[p], "scaled to %d row%s: %.2f GEMM, %.2f memory", k, k == 1 ? "" : "s", c->eff_gemm[p],
                     c->eff_mem[p]);
        }
        free(ratio);
    }
}

mo_status mo_plan_calib_load(mo_plan_calib *c, const mo_gpu_spec *g, const char *dir, FILE *notes) {
    mo_plan_calib_defaults(c);
    DIR *d = opendir(dir);
    if (!d) return MO_OK; // no results yet: the defaults
    mo_csv_row *all = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".csv")) continue;
        char path[MO_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        mo_csv_row *rows = NULL;
        size_t k = 0;
        if (mo_csv_read(path, &rows, &k) != MO_OK) {
            if (notes) fprintf(notes, "  calibration: skipped %s: %s\n", path, mo_errmsg_plain());
            mo_clear_error();
            continue;
        }
        mo_csv_row *na = k ? realloc(all, (n + k) * sizeof *na) : all;
        if (k && !na) { free(rows); break; }
        all = na;
        if (k) memcpy(all + n, rows, k * sizeof *rows);
        n += k;
        free(rows);
    }
    closedir(d);
    mo_plan_calib_fit(c, g, all, n, -1);
    free(all);
    return MO_OK;
}
