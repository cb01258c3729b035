// The table of knobs (knobs.h). Keep it sorted by name: mo_knobs_text writes them in table order.
#include "knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mo_knob knobs[] = {
    {"MEMOPT_ATTN_CHUNK_ROWS", "N: the materialized attention's causal chunk length (ctx.c)"},
    {"MEMOPT_ATTN_DPRE", "0: the fp32 softmax backward as its own pass, not in the datt GEMM's epilogue"},
    {"MEMOPT_ATTN_FUSED32", "gemm|own: the fp32/tf32 fused attention's engine, blocked cuBLAS GEMMs (default) or the flash kernels"},
    {"MEMOPT_ATTN_GEMM", "strided|batched: how the materialized attention's GEMMs get their operands"},
    {"MEMOPT_ATTN_IMPL", "own|cudnn: the 16-bit fused attention's engine, the suite's kernels or cuDNN's fused SDPA"},
    {"MEMOPT_ATTN_SCORES", "cublas|own: the fp32 score GEMMs' engine"},
    {"MEMOPT_ATTN_TF32", "0: the fused fp32 attention on CUDA cores under --precision tf32 (default: TF32 tensor cores)"},
    {"MEMOPT_BN", "cudnn: the batch norm on cuDNN's calls, not the suite's own kernels"},
    {"MEMOPT_CE", "loop: the fp32 cross-entropy on the kernel that reads each row twice"},
    {"MEMOPT_CONV_DGRAD", "cudnn: fp32 input gradients on cuDNN's backward-data engine, not as GEMMs or forward convolutions"},
    {"MEMOPT_CONV_GEMM", "auto|all|1x1|0: fp32 convolutions as cuBLASLt GEMMs: where faster (default), all (im2col), 1x1 stride-1 only, none"},
    {"MEMOPT_CONV_IMPLICIT", "0: fp32 3x3 forwards (and stride-1 input gradients) as im2col GEMMs, not the implicit-GEMM kernel"},
    {"MEMOPT_CONV_TABLE", "0: the stored cuDNN convolution engine choices ignored"},
    {"MEMOPT_CONV_TUNE", "1: every new convolution plan times its deterministic candidates that fit"},
    {"MEMOPT_CONV_WGRAD_SPLIT", "0: im2col weight gradients as one GEMM a chunk, not split over row slabs"},
    {"MEMOPT_DBIAS", "narrow|lt|gelu: the 16-bit GEMMs' bias gradients on the kernel of 2-byte loads (the same bits), or in the dweight GEMM's BGRADB epilogue, not on the default kernel of 16-byte loads staged by cp.async (lt moved no step on an H100 or an H200: docs/perf-notes.md); gelu: GPT's fc bias summed in the fcproj dinp GEMM's DGELU_BGRAD epilogue, the others as the default (slower on an H100)"},
    {"MEMOPT_DBIAS_SIDE", "1|2|3: the 16-bit GEMM backward's bias-gradient kernels on a side stream under its dinp and dweight GEMMs, launched before (1) or after (2) them, not after them on the compute stream; 3: the dweight GEMM on the side too, on a second GEMM workspace (the peak grows by it); the same bits"},
    {"MEMOPT_DGRAD_ADD", "0: the ResNet's shortcut gradient added by a pass of its own, not in a conv's input gradient"},
    {"MEMOPT_FAIL_ALLOC", "k: the k-th device allocation of the process fails as out of memory (alloc.c)"},
    {"MEMOPT_FUSE_EPILOGUES", "1|0: the GEMM epilogue fusions forced on or off (default: 16-bit only)"},
    {"MEMOPT_GEMM_TABLE", "0: the stored cuBLASLt choices ignored"},
    {"MEMOPT_GEMM_TUNE", "1: every GEMM that can be rerun is tuned over the heuristic's top 16; 2: also over each cuBLASLt algorithm's own top 8; 3: also every tile and stage count of those algorithms"},
    {"MEMOPT_LN", "loop: the 16-bit LayerNorm on the kernels that loop over a row's groups, not the ones that hold them in registers"},
    {"MEMOPT_LN_DSUM", "0: GPT's 16-bit projection bias gradients (attproj, fcproj) summed by the GEMMs' bias-gradient kernels, not by the LayerNorm backward that makes their output gradient (other bits for those two)"},
    {"MEMOPT_LN_WAVE", "0: the 16-bit LayerNorm backward in layernorm_backward_blocks(N) blocks (512 at N >= 4089), not one wave of resident blocks (other dweight/dbias bits)"},
    {"MEMOPT_MARK_LIB_WRITES", "1: what cuBLAS, cuBLASLt and cuDNN write is cleared first (for compute-sanitizer initcheck)"},
    {"MEMOPT_OFFLOAD_CHUNK", "N: --offload optimizer's update in chunks of N parameters, pipelined on the copy stream"},
    {"MEMOPT_OFFLOAD_THREADS", "T: --offload optimizer's host AdamW and cast over T threads (default 8)"},
    {"MEMOPT_POISON_ALLOC", "1: every new block but cuda's pinned host ones filled with 0xff bytes (NaN, -1): a read of unwritten memory changes results"},
    {"MEMOPT_RECOMPUTE_TAIL", "0: the ResNet's checkpointed segment rebuilds its last block's output in its recompute, not kept from forward"},
    {"MEMOPT_WORKSPACE_MIB", "N: the libraries' workspace (cuBLASLt, cuDNN, im2col chunks) N MiB instead of the model's default (32; the ResNet's 256) (32 to 65536)"},
    {"MEMOPT_ZERO_SIDE", "1: the schedule's gradient buffer (GPT, MLP) cleared on a side stream under the first forward, not on the compute stream before it"},
};

const mo_knob *mo_knobs(size_t *n) {
    *n = sizeof knobs / sizeof knobs[0];
    return knobs;
}

const char *mo_knobs_text(char *buf, size_t n) {
    if (!n) return buf;
    buf[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *v = getenv(knobs[i].name);
        if (!v || !*v) continue;
        int k = snprintf(buf + len, n - len, "%s%s=%s", len ? ";" : "", knobs[i].name, v);
        if (k < 0 || (size_t)k >= n - len) { buf[len] = '\0'; break; }
        len += (size_t)k;
    }
    return buf;
}

// The value of name in a knobs text, copied into v (n bytes); 0 when it is not there
static int knob_value(const char *text, const char *name, char *v, size_t n) {
    const size_t len = strlen(name);
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ';');
        const size_t item = end ? (size_t)(end - p) : strlen(p);
        if (item > len && !strncmp(p, name, len) && p[len] == '=') {
            size_t k = item - len - 1 < n - 1 ? item - len - 1 : n - 1;
            memcpy(v, p + len + 1, k);
            v[k] = '\0';
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

// Appends ";" (unless first) and s[0, sl) to out (cap bytes, *len used, NUL-terminated); 0, or -1 when
// it would not fit (out unchanged).
static int kn_append(char *out, size_t cap, size_t *len, const char *s, size_t sl) {
    const size_t sep = *len ? 1 : 0;
    if (*len + sep + sl + 1 > cap) return -1;
    if (sep) out[(*len)++] = ';';
    memcpy(out + *len, s, sl);
    *len += sl;
    out[*len] = '\0';
    return 0;
}

int mo_knobs_insert(char *text, size_t n, const char *name, const char *value) {
    char v[8];
    if (knob_value(text, name, v, sizeof v)) return 0;
    const size_t nl = strlen(name), vl = strlen(value);
    char *entry = malloc(nl + vl + 2), *out = malloc(n ? n : 1);
    if (!entry || !out) {
        free(entry);
        free(out);
        return -1;
    }
    memcpy(entry, name, nl);
    entry[nl] = '=';
    memcpy(entry + nl + 1, value, vl + 1);
    size_t len = 0;
    int done = 0, bad = 0;
    out[0] = '\0';
    for (const char *p = text; p && *p && !bad;) {
        const char *end = strchr(p, ';');
        const size_t item = end ? (size_t)(end - p) : strlen(p);
        const size_t el = strcspn(p, "=;"); // this entry's name, p[0, el)
        int cmp = memcmp(p, name, el < nl ? el : nl); // strcmp of the entry's name with name
        if (cmp == 0) cmp = (el > nl) - (el < nl);
        if (!done && cmp > 0) { // the first entry past name: it goes here
            bad |= kn_append(out, n, &len, entry, nl + vl + 1);
            done = 1;
        }
        bad |= kn_append(out, n, &len, p, item);
        p = end ? end + 1 : NULL;
    }
    if (!done && !bad) bad |= kn_append(out, n, &len, entry, nl + vl + 1);
    if (!bad) memcpy(text, out, len + 1);
    free(entry);
    free(out);
    return bad ? -1 : 0;
}

int mo_knobs_apply(const char *text, char *saved, size_t saved_n) {
    char now[512];
    mo_knobs_text(now, sizeof now);
    if (strlen(now) + 1 > saved_n) return -1;
    memcpy(saved, now, strlen(now) + 1);
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        // fault injection is read once a process (alloc.c) and would fail the replaying process's own
        // allocations, not the row's: left as it is
        if (!strcmp(knobs[i].name, "MEMOPT_FAIL_ALLOC")) continue;
        char v[256];
        if (knob_value(text, knobs[i].name, v, sizeof v)) setenv(knobs[i].name, v, 1);
        else unsetenv(knobs[i].name);
    }
    return 0;
}
