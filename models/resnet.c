// The ResNet behind the model interface (models/model.h): torchvision's ResNet v1.5 in NHWC on the
// suite's convolution, batch norm and pooling ops (kernels/conv.h, batchnorm.h, pool.h: plain C on the
// cpu backend, cuDNN on cuda) and its GEMM for the FC head (cuBLASLt on cuda). The layer list and the
// dimension flags: resnet_arch.h; the instance and the step: resnet_step.c.
// Strategies: checkpoint segments over the residual blocks (full, every:K, sqrt, segments:N as
// checkpoint_sequential), accumulation, fp32/tf32/fp16/bf16 (fp16 with the loss scaler), caps. It has no
// attention (--attn and selective are refused by its dims bits) and no split (split = NULL: --tp, since a
// ResNet has no heads and no channel split is built; --pp, since no stage split is built yet).
#include "models/model.h"

#include <stdio.h>
#include <string.h>
#include "kernels/conv.h"
#include "models/ckpt_layout.h"
#include "models/resnet.h"
#include "models/resnet_arch.h"

static mo_status rn_validate(const mo_run_config *r) {
    int nblk[4], bottleneck;
    MO_TRY(rn_depth_blocks(r->layers, nblk, &bottleneck));
    int L = nblk[0] + nblk[1] + nblk[2] + nblk[3];
    if (r->hidden < 1) return MO_FAIL(MO_ERR_INVALID, "--hidden: the base width must be a positive integer (got %d)", r->hidden);
    if (r->hidden > 4096) return MO_FAIL(MO_ERR_INVALID, "--hidden %d: the base width must be at most 4096", r->hidden);
    if (r->input < 32)
        return MO_FAIL(MO_ERR_INVALID, "--input %d: the image side must be at least 32 for resnet%d (its five stride-2 steps)",
                       r->input, r->layers);
    if (r->input > 8192) return MO_FAIL(MO_ERR_INVALID, "--input %d: the image side must be at most 8192", r->input);
    if (r->classes < 2) return MO_FAIL(MO_ERR_INVALID, "--classes: must be at least 2 (got %d)", r->classes);
    if (r->ckpt.kind == MO_CKPT_EVERY && r->ckpt.every > L)
        return MO_FAIL(MO_ERR_INVALID, "--ckpt every:%d: more than the %d residual blocks of resnet%d", r->ckpt.every, L,
                       r->layers);
    if (r->ckpt.kind == MO_CKPT_SEGMENTS && r->ckpt.every > L)
        return MO_FAIL(MO_ERR_INVALID, "--ckpt segments:%d: more than the %d residual blocks of resnet%d", r->ckpt.every, L,
                       r->layers);
    MO_TRY(mo_run_config_check_accum(r));
    // Batch norm in training needs more than one value per channel (PyTorch refuses it too).
    int N = r->batch / r->accum, P = r->input;
    for (int i = 0; i < 5; i++) P = (P - 1) / 2 + 1; // the side after the five stride-2 steps
    if ((long long)N * P * P < 2)
        return MO_FAIL(MO_ERR_INVALID, "--batch %d --accum %d: a micro-batch of %d image(s) of %dx%d at the last stage: "
                       "batch norm needs more than one value per channel", r->batch, r->accum, N, P, P);
    return MO_OK;
}

// The convolutions' shapes at the micro-batch must fit the ops' int element counts.
static mo_status rn_check(const mo_run_config *r) {
    MO_TRY(rn_validate(r));
    rn_arch a;
    MO_TRY(rn_arch_build(r, &a));
    mo_status st = MO_OK;
    for (int i = 0; i < a.nunits && st == MO_OK; i++) {
        const rn_unit *u = &a.units[i];
        mo_conv_shape s;
        mo_conv_shape_init(&s, r->batch / r->accum, u->H, u->H, u->cin, u->cout, u->R, u->R, u->stride, u->pad);
        st = mo_conv_shape_check(&s, "resnet");
    }
    rn_arch_free(&a);
    return st;
}

static const char *rn_dims_text(const mo_run_config *rc, char *buf, size_t n) {
    snprintf(buf, n, "D%d W%d S%d K%d", rc->layers, rc->hidden, rc->input, rc->classes);
    return buf;
}

static mo_status rn_dims_parse(const char *t, mo_run_config *rc) {
    int D, W, S, K, used = 0;
    if (sscanf(t, "D%d W%d S%d K%d%n", &D, &W, &S, &K, &used) != 4 || t[used] || D < 1 || W < 1 || S < 1 || K < 2)
        return MO_FAIL(MO_ERR_INVALID, "dims '%s': not the resnet's 'D50 W64 S224 K1000'", t);
    rc->layers = D; rc->hidden = W; rc->input = S; rc->classes = K;
    rc->heads = rc->seq = rc->vocab = 0;
    return MO_OK;
}

static size_t rn_num_params(const mo_run_config *rc) {
    rn_arch a;
    if (rn_arch_build(rc, &a) != MO_OK) return 0;
    size_t n = a.n_params;
    rn_arch_free(&a);
    return n;
}

static double rn_items(const mo_run_config *rc) { (void)rc; return 1; } // one image is one item

static double unit_fwd_flops(const rn_unit *u, int B) {
    return 2.0 * B * u->P * u->P * (double)u->cout * u->R * u->R * u->cin;
}

// Convolutions: forward, backward data and backward filter 2 N P Q K R S C each (the stem has no data
// gradient); the FC 6 B C K. Batch norm, pooling and the elementwise ops are not counted (as GPT's
// LayerNorm is not).
static double rn_step_flops(const mo_run_config *rc) {
    rn_arch a;
    if (rn_arch_build(rc, &a) != MO_OK) return 0;
    double f = 6.0 * rc->batch * a.Cf * a.K;
    for (int i = 0; i < a.nunits; i++) f += (i == 0 ? 2 : 3) * unit_fwd_flops(&a.units[i], rc->batch);
    rn_arch_free(&a);
    return f;
}

// Each checkpointed block's forward convolutions are re-run once.
static double rn_recompute_flops(const mo_run_config *rc) {
    rn_arch a;
    if (rn_arch_build(rc, &a) != MO_OK) return 0;
    mo_ckpt_layout y = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, a.nblocks);
    double f = 0;
    for (int l = 0; l < y.blocks; l++) {
        const rn_block *k = &a.blocks[l];
        for (int j = 0; j < k->nu; j++) f += unit_fwd_flops(&a.units[k->u[j]], rc->batch);
        if (k->ds >= 0) f += unit_fwd_flops(&a.units[k->ds], rc->batch);
    }
    rn_arch_free(&a);
    return f;
}

// The parameters by kind (conv weights, BN weights and biases, the FC's), then the BN running
// statistics (buffers: category param, not counted in num_params).
static int rn_tensor_table(const mo_run_config *rc, mo_tensor_info *rows, int max) {
    rn_arch a;
    if (rn_arch_build(rc, &a) != MO_OK) return 0;
    mo_dtype dt = rc->precision == MO_PREC_FP16 ? MO_F16 : rc->precision == MO_PREC_BF16 ? MO_BF16 : MO_F32;
    size_t conv = 0, bn = 0;
    for (int i = 0; i < a.nunits; i++) {
        conv += (size_t)a.units[i].cout * a.units[i].R * a.units[i].R * a.units[i].cin;
        bn += (size_t)a.units[i].cout;
    }
    struct { const char *name; size_t n; mo_dtype dt; } t[] = {
        {"conv.weight", conv, dt}, {"bn.weight", bn, MO_F32}, {"bn.bias", bn, MO_F32},
        {"fc.weight", (size_t)a.K * a.Cf, dt}, {"fc.bias", (size_t)a.K, dt}, {"bn.running_stats", a.n_running, MO_F32},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++, n++) {
        if (n >= max) continue;
        mo_tensor_info *r = &rows[n];
        memset(r, 0, sizeof *r);
        r->name = t[i].name;
        r->ndim = 1;
        r->shape[0] = (int64_t)t[i].n;
        r->dtype = t[i].dt;
        r->cat = MO_CAT_PARAM;
        r->numel = t[i].n;
    }
    rn_arch_free(&a);
    return n;
}

// torchvision's five depths at their ImageNet shape, and a tiny one for tests.
static const mo_preset rn_presets[] = {
    {.name = "resnet50", .layers = 50, .hidden = 64, .batch = 32, .input = 224, .classes = 1000},
    {.name = "resnet18", .layers = 18, .hidden = 64, .batch = 32, .input = 224, .classes = 1000},
    {.name = "resnet34", .layers = 34, .hidden = 64, .batch = 32, .input = 224, .classes = 1000},
    {.name = "resnet101", .layers = 101, .hidden = 64, .batch = 32, .input = 224, .classes = 1000},
    {.name = "resnet152", .layers = 152, .hidden = 64, .batch = 32, .input = 224, .classes = 1000},
    {.name = "resnet-tiny", .layers = 10, .hidden = 4, .batch = 4, .input = 32, .classes = 5},
};

const mo_model_ops mo_resnet_model = {
    .name = "resnet",
    .about = "ResNet v1.5 (torchvision's), NHWC: conv/BN/ReLU stem, basic or bottleneck blocks, average pool, FC head",
    .item = "images",
    .dims = MO_DIM_LAYERS | MO_DIM_HIDDEN | MO_DIM_INPUT | MO_DIM_CLASSES,
    .dims_help = "layers (depth), hidden (base width), input (image side), classes, batch",
    .presets = rn_presets,
    .n_presets = (int)(sizeof rn_presets / sizeof rn_presets[0]),
    .validate = rn_validate,
    .check = rn_check,
    .dims_text = rn_dims_text,
    .dims_parse = rn_dims_parse,
    .num_params = rn_num_params,
    .items_per_sample = rn_items,
    .step_flops = rn_step_flops,
    .recompute_flops = rn_recompute_flops,
    .tensor_table = rn_tensor_table,
    .create = mo_resnet_create,
    .destroy = mo_resnet_destroy,
    .set_synthetic_batch = mo_resnet_set_synthetic_batch,
    .step = mo_resnet_step,
    .info = mo_resnet_info,
    .split = NULL,
    .no_split_reason = "a ResNet has no attention heads to split over --tp and no channel split is built; no pipeline "
                       "split of its stages is built for --pp",
    // Its convolutions want more than the suite's 32 MiB: cuDNN's fastest 3x3 weight-gradient engines ask
    // 141-321 MiB in fp32, and the fp32 im2col chunks grow with the budget. Measured (ResNet-50 batch 128,
    // H100, session 19): fp32 132.7 ms at 32 MiB, 115.1 at 256; bf16 34.1 and 25.9. 256 MiB keeps every
    // peak of ResNet-50 batch 128 below PyTorch's (docs/DESIGN.md, "The workspace budget").
    .workspace_mib = 256,
};
