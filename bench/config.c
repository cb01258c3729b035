// Flags to mo_config, lists to combinations, and the rules a combination must satisfy.
// Every message is one line that starts with the flag's name, so the CLI can print it as is.
#include "config.h"
#include "models/model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

// ---------------------------------------------------------------- names

static const char *const command_names[MO_CMD_COUNT] = {
    [MO_CMD_NONE] = "", [MO_CMD_RUN] = "run", [MO_CMD_SWEEP] = "sweep", [MO_CMD_CLAIMS] = "claims",
    [MO_CMD_PLAN] = "plan", [MO_CMD_MINCAP] = "mincap", [MO_CMD_COMPARE] = "compare",
    [MO_CMD_PLOT] = "plot", [MO_CMD_DEVICES] = "devices",
};

const char *mo_command_name(mo_command c) { return (unsigned)c < MO_CMD_COUNT ? command_names[c] : "?"; }

mo_status mo_command_parse(const char *s, mo_command *out) {
    for (int i = 1; i < MO_CMD_COUNT; i++)
        if (!strcmp(s, command_names[i])) { *out = (mo_command)i; return MO_OK; }
    // A name is echoed up to 64 bytes: the line stays one readable line whatever was typed.
    return MO_FAIL(MO_ERR_INVALID,
                   "unknown subcommand '%.64s'%s (accepted: run, sweep, claims, plan, mincap, compare, plot, devices)", s,
                   strlen(s) > 64 ? "... (cut)" : "");
}

int mo_command_single(mo_command c) { return c == MO_CMD_RUN || c == MO_CMD_MINCAP || c == MO_CMD_CLAIMS; }

static const char *const attn_names[] = {"materialized", "fused"};
static const char *const precision_names[] = {"fp32", "tf32", "fp16", "bf16"};
static const char *const comm_names[] = {"local", "nccl"};
static const char *const on_oom_names[] = {"fail", "shrink"};
static const char *const offload_names[] = {"none", "optimizer", "activations"}; // MO_OFFLOAD_*
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *mo_attn_name(mo_attn_kind a) { return (unsigned)a < 2 ? attn_names[a] : "?"; }
const char *mo_precision_name(mo_precision p) { return (unsigned)p < 4 ? precision_names[p] : "?"; }
const char *mo_comm_name(mo_comm_kind c) { return (unsigned)c < 2 ? comm_names[c] : "?"; }
const char *mo_offload_name(int o) { return (unsigned)o < (unsigned)COUNT(offload_names) ? offload_names[o] : "?"; }
const char *mo_on_oom_name(mo_on_oom o) { return (unsigned)o < 2 ? on_oom_names[o] : "?"; }

// "FLAG: unknown value 'X' (accepted: a, b, c)"
static mo_status parse_enum(const char *flag, const char *s, const char *const *names, int n, int *out) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) { *out = i; return MO_OK; }
    char acc[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(acc, names[i], sizeof acc - strlen(acc) - 1);
        if (i + 1 < n) strncat(acc, ", ", sizeof acc - strlen(acc) - 1);
    }
    return MO_FAIL(MO_ERR_INVALID, "%s: unknown value '%s' (accepted: %s)", flag, s, acc);
}

mo_status mo_precision_parse(const char *s, mo_precision *out) {
    int i = 0;
    MO_TRY(parse_enum("--precision", s, precision_names, COUNT(precision_names), &i));
    *out = (mo_precision)i;
    return MO_OK;
}

// Digits only (no sign, no spaces), within [lo, hi].
static int parse_digits(const char *s, long long lo, long long hi, long long *out) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static mo_status parse_int(const char *flag, const char *s, long long lo, long long hi, int *out) {
    long long v;
    if (!parse_digits(s, lo, hi, &v))
        return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: an integer in %lld..%lld)", flag, s, lo, hi);
    *out = (int)v;
    return MO_OK;
}

static const char ckpt_accepted[] = "none, full, every:K with K a positive integer, sqrt, selective, segments:N with N a positive integer";

mo_status mo_ckpt_parse(const char *s, mo_ckpt *out) {
    static const struct { const char *name; mo_ckpt_kind kind; } kinds[] = {
        {"none", MO_CKPT_NONE}, {"full", MO_CKPT_FULL}, {"sqrt", MO_CKPT_SQRT}, {"selective", MO_CKPT_SELECTIVE}};
    for (int i = 0; i < COUNT(kinds); i++)
        if (!strcmp(s, kinds[i].name)) { *out = (mo_ckpt){kinds[i].kind, 0}; return MO_OK; }
    long long k;
    if (!strncmp(s, "every:", 6) && parse_digits(s + 6, 1, MO_MAX_LAYERS, &k)) {
        *out = (mo_ckpt){MO_CKPT_EVERY, (int)k};
        return MO_OK;
    }
    if (!strncmp(s, "segments:", 9) && parse_digits(s + 9, 1, MO_MAX_LAYERS, &k)) {
        *out = (mo_ckpt){MO_CKPT_SEGMENTS, (int)k};
        return MO_OK;
    }
    return MO_FAIL(MO_ERR_INVALID, "--ckpt: unknown value '%s' (accepted: %s)", s, ckpt_accepted);
}

const char *mo_ckpt_format(mo_ckpt c, char *buf, size_t n) {
    switch (c.kind) {
    case MO_CKPT_NONE: snprintf(buf, n, "none"); break;
    case MO_CKPT_FULL: snprintf(buf, n, "full"); break;
    case MO_CKPT_EVERY: snprintf(buf, n, "every:%d", c.every); break;
    case MO_CKPT_SQRT: snprintf(buf, n, "sqrt"); break;
    case MO_CKPT_SELECTIVE: snprintf(buf, n, "selective"); break;
    case MO_CKPT_SEGMENTS: snprintf(buf, n, "segments:%d", c.every); break;
    default: snprintf(buf, n, "?"); break;
    }
    return buf;
}

// ---------------------------------------------------------------- presets

// Presets are the models' own (models/model.h); their names are unique over all models.
const mo_preset *mo_presets(size_t *n) {
    const mo_model_ops *m = mo_model_default();
    *n = (size_t)m->n_presets;
    return m->presets;
}

const mo_preset *mo_preset_find(const char *name) {
    for (int i = 0, n = mo_model_count(); i < n; i++) {
        const mo_preset *p = mo_model_preset(mo_model_at(i), name);
        if (p) return p;
    }
    return NULL;
}

const char *mo_errmsg_plain(void) {
    // mo_fail_at writes "base.c:123: "; skip it when it is there.
    const char *m = mo_errmsg(), *p = m;
    while (*p && *p != ':' && *p != ' ') p++;
    if (*p != ':' || !isdigit((unsigned char)p[1])) return m;
    p++;
    while (isdigit((unsigned char)*p)) p++;
    return p[0] == ':' && p[1] == ' ' ? p + 2 : m;
}

// ---------------------------------------------------------------- defaults

void mo_config_defaults(mo_config *c, mo_command command) {
    memset(c, 0, sizeof *c);
    c->command = command;
    mo_run_config *b = &c->base;
    const mo_model_ops *model = mo_model_default();
    const mo_preset *p = &model->presets[0];
    snprintf(b->model, sizeof b->model, "%s", model->name);
    snprintf(b->preset, sizeof b->preset, "%s", p->name);
    b->layers = p->layers;
    b->hidden = p->hidden;
    b->heads = p->heads;
    b->seq = p->seq;
    b->batch = p->batch;
    b->vocab = p->vocab;
    b->attn = MO_ATTN_MATERIALIZED;
    snprintf(b->cap_text, sizeof b->cap_text, "none");
    b->alloc = MO_ALLOC_CACHING;
    b->ckpt = (mo_ckpt){MO_CKPT_NONE, 0};
    b->accum = 1;
    b->precision = MO_PREC_FP32;
    b->tp = b->pp = 1;
    b->dp = 1;
    b->zero = 0;
    b->sp = 0;
    b->comm = MO_COMM_LOCAL;
    b->on_oom = MO_ON_OOM_FAIL;
    b->backend = MO_BACKEND_CUDA;
    b->steps = 10;
    b->warmup = 3;
    b->seed = 1337;
    b->lr = 3e-4;
    b->device_mem_bytes = MO_DEFAULT_DEVICE_MEM;
    c->tolerance = 0.05;
    c->shard_count = 1;

    // The axis lists start with the defaults, so a combination is always well defined.
    c->n_preset = 1;
    snprintf(c->preset[0], sizeof c->preset[0], "%s", p->name);
    c->n_attn = 1;       c->attn[0] = b->attn;
    c->n_precision = 1;  c->precision[0] = b->precision;
    c->n_tp = 1;         c->tp[0] = 1;
    c->n_pp = 1;         c->pp[0] = 1;
    c->n_dp = 1;         c->dp[0] = 1;
    c->n_zero = 1;       c->zero[0] = 0;
    c->n_sp = 1;         c->sp[0] = 0;
    c->n_offload = 1;    c->offload[0] = MO_OFFLOAD_NONE;
    c->n_accum = 1;      c->accum[0] = 1;
    c->n_ckpt = 1;       c->ckpt[0] = b->ckpt;
    c->n_alloc = 1;      c->alloc[0] = b->alloc;
    c->n_cap = 1;        c->cap[0] = b->cap; snprintf(c->cap_text[0], sizeof c->cap_text[0], "none");
}

// ---------------------------------------------------------------- setters

// One value of a flag; idx is its position in the list (0 for scalar flags).
typedef mo_status (*setter)(mo_config *c, const char *flag, const char *v, int idx);

static mo_status set_path(const char *flag, const char *v, char *dst, size_t n) {
    if (!*v) return MO_FAIL(MO_ERR_INVALID, "%s: empty value (accepted: a path)", flag);
    if (strlen(v) >= n) return MO_FAIL(MO_ERR_INVALID, "%s: path longer than %zu characters", flag, n - 1);
    memcpy(dst, v, strlen(v) + 1);
    return MO_OK;
}

// The dimensions of a preset into the base configuration.
static void base_from_preset(mo_run_config *b, const mo_preset *p) {
    snprintf(b->preset, sizeof b->preset, "%s", p->name);
    b->layers = p->layers;
    b->hidden = p->hidden;
    b->heads = p->heads;
    b->seq = p->seq;
    b->batch = p->batch;
    b->vocab = p->vocab;
    b->input = p->input;
    b->classes = p->classes;
}

static mo_status set_model(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    const mo_model_ops *m = mo_model_find(v);
    if (!m) {
        char names[256];
        return MO_FAIL(MO_ERR_INVALID, "%s: unknown value '%s' (accepted: %s)", f, v, mo_model_names(names, sizeof names));
    }
    snprintf(c->base.model, sizeof c->base.model, "%s", m->name);
    // Without --preset the shape starts from the model's default preset.
    if (!c->preset_given) {
        c->n_preset = 1;
        snprintf(c->preset[0], sizeof c->preset[0], "%s", m->presets[0].name);
        base_from_preset(&c->base, &m->presets[0]);
    }
    return MO_OK;
}

static mo_status set_preset(mo_config *c, const char *f, const char *v, int idx) {
    if (!mo_preset_find(v)) {
        // The accepted names: every model's presets.
        char acc[512] = "";
        for (int i = 0, n = mo_model_count(); i < n; i++) {
            const mo_model_ops *m = mo_model_at(i);
            for (int k = 0; k < m->n_presets; k++) {
                if (acc[0]) strncat(acc, ", ", sizeof acc - strlen(acc) - 1);
                strncat(acc, m->presets[k].name, sizeof acc - strlen(acc) - 1);
            }
        }
        return MO_FAIL(MO_ERR_INVALID, "%s: unknown value '%s' (accepted: %s)", f, v, acc);
    }
    snprintf(c->preset[idx], sizeof c->preset[idx], "%s", v);
    c->preset_given = 1;
    return MO_OK;
}

#define INT_AXIS(field, lo, hi)                                                    \
    static mo_status set_##field(mo_config *c, const char *f, const char *v, int idx) { \
        return parse_int(f, v, (lo), (hi), &c->field[idx]);                        \
    }
INT_AXIS(layers, 1, MO_MAX_LAYERS)
INT_AXIS(hidden, 1, MO_MAX_HIDDEN)
INT_AXIS(heads, 1, MO_MAX_HEADS)
INT_AXIS(seq, 1, MO_MAX_SEQ)
INT_AXIS(batch, 1, MO_MAX_BATCH)
INT_AXIS(vocab, 1, MO_MAX_VOCAB)
INT_AXIS(input, 1, MO_MAX_INPUT)
INT_AXIS(classes, 2, MO_MAX_CLASSES)
INT_AXIS(accum, 1, MO_MAX_BATCH)
INT_AXIS(tp, 1, MO_MAX_TP)
INT_AXIS(pp, 1, MO_MAX_PP)
INT_AXIS(dp, 1, MO_MAX_DP)
INT_AXIS(zero, 0, 3)
INT_AXIS(sp, 0, 1)

static mo_status set_attn(mo_config *c, const char *f, const char *v, int idx) {
    int i = 0;
    MO_TRY(parse_enum(f, v, attn_names, COUNT(attn_names), &i));
    c->attn[idx] = (mo_attn_kind)i;
    c->attn_given = 1;
    return MO_OK;
}

static mo_status set_precision(mo_config *c, const char *f, const char *v, int idx) {
    (void)f;
    return mo_precision_parse(v, &c->precision[idx]);
}

static mo_status set_ckpt(mo_config *c, const char *f, const char *v, int idx) {
    (void)f;
    return mo_ckpt_parse(v, &c->ckpt[idx]);
}

static mo_status set_alloc(mo_config *c, const char *f, const char *v, int idx) {
    (void)f;
    return mo_alloc_kind_parse(v, &c->alloc[idx]);
}

static mo_status set_cap(mo_config *c, const char *f, const char *v, int idx) {
    if (strlen(v) >= sizeof c->cap_text[idx]) return MO_FAIL(MO_ERR_INVALID, "%s: value '%s' is too long", f, v);
    MO_TRY(mo_cap_parse(v, &c->cap[idx]));
    snprintf(c->cap_text[idx], sizeof c->cap_text[idx], "%s", v);
    return MO_OK;
}

static mo_status set_comm(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    int i = 0;
    MO_TRY(parse_enum(f, v, comm_names, COUNT(comm_names), &i));
    c->base.comm = (mo_comm_kind)i;
    return MO_OK;
}

mo_status mo_offload_parse(const char *s, int *out) { return parse_enum("--offload", s, offload_names, COUNT(offload_names), out); }

static mo_status set_offload(mo_config *c, const char *f, const char *v, int idx) {
    return parse_enum(f, v, offload_names, COUNT(offload_names), &c->offload[idx]);
}

static mo_status set_on_oom(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    int i = 0;
    MO_TRY(parse_enum(f, v, on_oom_names, COUNT(on_oom_names), &i));
    c->base.on_oom = (mo_on_oom)i;
    return MO_OK;
}

static mo_status set_backend(mo_config *c, const char *f, const char *v, int idx) {
    (void)f, (void)idx;
    return mo_backend_parse(v, &c->base.backend);
}

static mo_status set_steps(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_int(f, v, 1, MO_MAX_STEPS, &c->base.steps);
}

static mo_status set_warmup(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_int(f, v, 0, MO_MAX_STEPS, &c->base.warmup);
}

static mo_status set_monitor(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_int(f, v, 0, MO_MAX_STEPS, &c->base.monitor);
}

static mo_status set_seed(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    int digits = *v != '\0';
    for (const char *p = v; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
    errno = 0;
    unsigned long long s = digits ? strtoull(v, NULL, 10) : 0;
    if (!digits || errno)
        return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: an integer in 0..18446744073709551615)", f, v);
    c->base.seed = s;
    return MO_OK;
}

// A finite number in [lo, hi] (lo excluded when open_lo).
static mo_status parse_real(const char *f, const char *v, double lo, int open_lo, double hi, const char *what,
                            double *out) {
    char *end = NULL;
    errno = 0;
    // strtod also takes hex ("0x1") and "infinity": a decimal number only.
    double d = *v && !isspace((unsigned char)*v) && !strpbrk(v, "xXpP") ? strtod(v, &end) : NAN;
    if (!end || *end || errno || !isfinite(d) || d > hi || (open_lo ? d <= lo : d < lo))
        return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: %s)", f, v, what);
    *out = d;
    return MO_OK;
}

static mo_status set_lr(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_real(f, v, 0, 1, 10, "a number in (0, 10], like 3e-4", &c->base.lr);
}

static mo_status set_tolerance(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_real(f, v, 0, 0, 1, "a fraction in [0, 1], like 0.05", &c->tolerance);
}

static mo_status parse_mem(const char *f, const char *v, uint64_t *out) {
    MO_TRY(mo_size_parse(v, f, out));
    if (*out < ((uint64_t)1 << 20))
        return MO_FAIL(MO_ERR_INVALID, "%s: '%s' is below 1 MiB (accepted: a size like 80GiB)", f, v);
    return MO_OK;
}

static mo_status set_device_mem(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_mem(f, v, &c->base.device_mem_bytes);
}

static mo_status set_mem(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_mem(f, v, &c->mem_bytes);
}

static mo_status set_gpus(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return parse_int(f, v, 1, MO_MAX_DP, &c->gpus);
}

static mo_status set_csv(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return set_path(f, v, c->base.csv, sizeof c->base.csv);
}

static mo_status set_out_dir(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return set_path(f, v, c->base.out_dir, sizeof c->base.out_dir);
}

static mo_status set_gpu(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    size_t n = strlen(v);
    int ok = n > 0 && n < sizeof c->gpu;
    for (const char *p = v; *p; p++) ok &= isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.';
    if (!ok) return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: a GPU name like h200, see memopt plan --help)", f, v);
    memcpy(c->gpu, v, n + 1);
    return MO_OK;
}

static mo_status set_resume(mo_config *c, const char *f, const char *v, int idx) {
    (void)f, (void)v, (void)idx;
    c->resume = 1;
    return MO_OK;
}

static mo_status set_shard(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    // Digits only, each within range (sscanf's %d would wrap 99999999999 to 1215752191).
    char part[32];
    const char *slash = strchr(v, '/');
    long long i = -1, n = -1;
    int ok = slash && (size_t)(slash - v) < sizeof part;
    if (ok) {
        memcpy(part, v, (size_t)(slash - v));
        part[slash - v] = '\0';
        ok = parse_digits(part, 0, MO_COMBINATIONS_MAX - 1, &i) && parse_digits(slash + 1, 1, MO_COMBINATIONS_MAX, &n) && i < n;
    }
    if (!ok)
        return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: i/n with 0 <= i < n <= %d, like 0/4)", f, v,
                       MO_COMBINATIONS_MAX);
    c->shard_index = (int)i;
    c->shard_count = (int)n;
    return MO_OK;
}

static mo_status set_format(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    if (!strcmp(v, "md")) c->format_md = 1;
    else if (!strcmp(v, "text")) c->format_md = 0;
    else return MO_FAIL(MO_ERR_INVALID, "%s: invalid value '%s' (accepted: text, md)", f, v);
    return MO_OK;
}

static mo_status set_validate(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return set_path(f, v, c->validate, sizeof c->validate);
}

static mo_status set_profile(mo_config *c, const char *f, const char *v, int idx) {
    (void)f, (void)v, (void)idx;
    c->base.profile = 1;
    return MO_OK;
}

static mo_status set_trace(mo_config *c, const char *f, const char *v, int idx) {
    (void)idx;
    return set_path(f, v, c->base.trace, sizeof c->base.trace);
}

static mo_status set_summary(mo_config *c, const char *f, const char *v, int idx) {
    (void)f, (void)v, (void)idx;
    c->base.summary = 1;
    return MO_OK;
}

static mo_status set_grid(mo_config *c, const char *f, const char *v, int idx);

// ---------------------------------------------------------------- the flag table

#define B(cmd) (1u << (cmd))
// Each flag lists the commands that use it; any other command refuses it (exit 2), so a flag is never
// accepted and silently ignored. CMDS_CONFIG: the commands that take a model and a strategy.
#define CMDS_CONFIG (B(MO_CMD_RUN) | B(MO_CMD_SWEEP) | B(MO_CMD_CLAIMS) | B(MO_CMD_PLAN) | B(MO_CMD_MINCAP))
#define CMDS_EXEC (B(MO_CMD_RUN) | B(MO_CMD_SWEEP) | B(MO_CMD_CLAIMS) | B(MO_CMD_MINCAP)) // they train (plan: dry, 1+1 steps)

typedef struct flag_def {
    mo_flag_info info;
    setter set;
} flag_def;

// The list counter of an axis flag, found by name (scalar flags have none).
static int *list_count(mo_config *c, const char *name) {
    static const struct { const char *name; size_t off; } axes[] = {
        {"--preset", offsetof(mo_config, n_preset)},     {"--layers", offsetof(mo_config, n_layers)},
        {"--hidden", offsetof(mo_config, n_hidden)},     {"--heads", offsetof(mo_config, n_heads)},
        {"--seq", offsetof(mo_config, n_seq)},           {"--vocab", offsetof(mo_config, n_vocab)},
        {"--input", offsetof(mo_config, n_input)},       {"--classes", offsetof(mo_config, n_classes)},
        {"--batch", offsetof(mo_config, n_batch)},       {"--attn", offsetof(mo_config, n_attn)},
        {"--precision", offsetof(mo_config, n_precision)}, {"--tp", offsetof(mo_config, n_tp)},
        {"--pp", offsetof(mo_config, n_pp)},             {"--accum", offsetof(mo_config, n_accum)},
        {"--ckpt", offsetof(mo_config, n_ckpt)},         {"--alloc", offsetof(mo_config, n_alloc)},
        {"--cap", offsetof(mo_config, n_cap)},
        {"--dp", offsetof(mo_config, n_dp)},             {"--zero", offsetof(mo_config, n_zero)},
        {"--sp", offsetof(mo_config, n_sp)},
        {"--offload", offsetof(mo_config, n_offload)},
    };
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++)
        if (!strcmp(name, axes[i].name)) return (int *)((char *)c + axes[i].off);
    return NULL;
}

static const flag_def flags[] = {
    // model
    {{"--model", "NAME", "model family: gpt, mlp (default gpt)", "model", CMDS_CONFIG, 0}, set_model},
    {{"--preset", "NAME", "a model's preset dimensions (gpt: gpt2-124m, the default, ... gpt2-1558m; mlp: mlp-small, mlp-act, mlp-param; list below); explicit dims override", "model", CMDS_CONFIG, 1}, set_preset},
    {{"--layers", "N", "transformer blocks (1..1024)", "model", CMDS_CONFIG, 1}, set_layers},
    {{"--hidden", "N", "channels (1..65536), divisible by --heads", "model", CMDS_CONFIG, 1}, set_hidden},
    {{"--heads", "N", "attention heads (1..1024)", "model", CMDS_CONFIG, 1}, set_heads},
    {{"--seq", "N", "sequence length (1..65536)", "model", CMDS_CONFIG, 1}, set_seq},
    {{"--batch", "N", "global batch per optimizer step (1..65536; default 8)", "model", CMDS_CONFIG, 1}, set_batch},
    {{"--vocab", "N", "vocabulary size (1..2097152; presets 50304)", "model", CMDS_CONFIG, 1}, set_vocab},
    {{"--input", "N", "mlp: input width (1..1048576)", "model", CMDS_CONFIG, 1}, set_input},
    {{"--classes", "N", "mlp: classes of the softmax head (2..2097152)", "model", CMDS_CONFIG, 1}, set_classes},
    {{"--attn", "materialized|fused", "attention: keep (B,H,T,T) scores, or flash-style (default materialized)", "model", CMDS_CONFIG, 1}, set_attn},
    // strategy
    {{"--cap", "none|FRACTION|SIZE", "memory cap on reserved bytes: 0.5 of device memory, or 24GiB; none or 0: no cap (default none)", "strategy", CMDS_CONFIG, 1}, set_cap},
    {{"--alloc", "caching|async|raw", "allocator (default caching)", "strategy", CMDS_CONFIG, 1}, set_alloc},
    {{"--ckpt", "none|full|every:K|sqrt|selective|segments:N", "activation checkpointing (default none; K, N <= layers)", "strategy", CMDS_CONFIG, 1}, set_ckpt},
    {{"--accum", "K", "micro-batches per step, batch divisible by K (default 1)", "strategy", CMDS_CONFIG, 1}, set_accum},
    {{"--precision", "fp32|tf32|fp16|bf16", "compute precision, fp32 master weights (default fp32)", "strategy", CMDS_CONFIG, 1}, set_precision},
    {{"--tp", "T", "tensor-parallel degree, divides 4*hidden (and gpt's heads) (default 1)", "strategy", CMDS_CONFIG, 1}, set_tp},
    {{"--pp", "P", "pipeline stages, divides layers (default 1)", "strategy", CMDS_CONFIG, 1}, set_pp},
    {{"--dp", "D", "data-parallel ranks, each on batch/D; D x accum divides batch (default 1; gpt, with --tp 1 --pp 1)", "strategy", CMDS_CONFIG, 1}, set_dp},
    {{"--zero", "0|1|2|3", "ZeRO level over the --dp ranks: 1 shards AdamW state and master, 2 also gradients, 3 also parameters (default 0)", "strategy", CMDS_CONFIG, 1}, set_zero},
    {{"--sp", "0|1", "sequence parallelism over the --tp ranks: LayerNorms, residual stream, embedding and head sharded along seq, all-gathers and reduce-scatters in place of the all-reduces (default 0; gpt, --tp above 1 dividing seq)", "strategy", CMDS_CONFIG, 1}, set_sp},
    {{"--comm", "local|nccl", "communicator: ranks as threads, or one rank per GPU (default local)", "strategy", CMDS_EXEC, 0}, set_comm},
    {{"--offload", "none|optimizer|activations", "optimizer: AdamW's m, v and the 16-bit runs' fp32 master in host memory, AdamW on the host (gpt); activations: the checkpointed segments' inputs in host memory between forward and recompute, copied on a stream of their own (every model; needs --ckpt full, every:K, sqrt or segments:N). Default none; unsplit runs", "strategy", CMDS_CONFIG, 1}, set_offload},
    {{"--on-oom", "fail|shrink", "on out of memory: fail the run, or retry with a smaller micro-batch (default fail)", "strategy", B(MO_CMD_RUN) | B(MO_CMD_SWEEP) | B(MO_CMD_CLAIMS), 0}, set_on_oom},
    // run
    {{"--backend", "cuda|cpu|dry", "where it runs: GPU kernels, CPU reference, or allocator only (default cuda)", "run", CMDS_EXEC, 0}, set_backend},
    {{"--steps", "N", "timed steps (default 10)", "run", CMDS_EXEC, 0}, set_steps},
    {{"--warmup", "N", "untimed steps first (default 3)", "run", CMDS_EXEC, 0}, set_warmup},
    {{"--seed", "S", "random seed (default 1337)", "run", CMDS_EXEC, 0}, set_seed},
    {{"--csv", "FILE", "append one row per run to FILE (plan: write the ranked table to FILE)", "run", B(MO_CMD_RUN) | B(MO_CMD_SWEEP) | B(MO_CMD_MINCAP) | B(MO_CMD_PLAN), 0}, set_csv},
    {{"--monitor", "N", "print memory every N steps (default 0: off)", "run", B(MO_CMD_RUN), 0}, set_monitor},
    {{"--profile", NULL, "time each class of op (gemm, attention, layernorm, ...) over the timed steps", "run", B(MO_CMD_RUN), 0}, set_profile},
    {{"--summary", NULL, "print the allocator's memory summary (torch.cuda.memory_summary) after the run", "run", B(MO_CMD_RUN), 0}, set_summary},
    {{"--trace", "FILE|DIR", "every allocation and free of the first timed step, as CSV (sweep: DIR, a file per row)", "run", B(MO_CMD_RUN) | B(MO_CMD_SWEEP), 0}, set_trace},
    {{"--lr", "LR", "AdamW learning rate (default 3e-4)", "run", CMDS_EXEC, 0}, set_lr},
    {{"--device-mem", "SIZE", "device size dry/cpu pretend to have, resolves fractional caps (default 143771MiB)", "run", CMDS_CONFIG, 0}, set_device_mem},
    {{"--out-dir", "DIR", "where CSVs and figures go, created if missing (default results/, plots/)", "output", B(MO_CMD_CLAIMS) | B(MO_CMD_PLAN) | B(MO_CMD_PLOT), 0}, set_out_dir},
    // command-specific
    {{"--grid", "FILE", "sweep: flags from FILE, one per line ('--precision fp32,bf16'; # comments)", "sweep", B(MO_CMD_SWEEP), 0}, set_grid},
    {{"--resume", NULL, "sweep: skip combinations whose row is already in --csv", "sweep", B(MO_CMD_SWEEP), 0}, set_resume},
    {{"--gpu", "NAME", "plan: the target GPU by name", "plan", B(MO_CMD_PLAN), 0}, set_gpu},
    {{"--mem", "SIZE", "plan: the target device memory, like 80GiB", "plan", B(MO_CMD_PLAN), 0}, set_mem},
    {{"--gpus", "N", "plan: data parallelism over N GPUs: each ZeRO level 0..3 at dp N, its per-rank peak, fits, step time, and the fastest that fits (gpt)", "plan", B(MO_CMD_PLAN), 0}, set_gpus},
    {{"--shard", "i/n", "sweep: run only combinations i, i+n, i+2n, ... (CSVs of all shards concatenate)", "sweep", B(MO_CMD_SWEEP), 0}, set_shard},
    {{"--validate", "RESULTS.csv", "plan: predicted against measured peak and step time for every row", "plan", B(MO_CMD_PLAN), 0}, set_validate},
    {{"--format", "text|md", "compare: a text table or a Markdown one for CI summaries (default text)", "compare", B(MO_CMD_COMPARE), 0}, set_format},
    {{"--tolerance", "F", "compare: relative slack before a row is a regression (default 0.05)", "compare", B(MO_CMD_COMPARE), 0}, set_tolerance},
};
#define NFLAGS (sizeof flags / sizeof flags[0])

const mo_flag_info *mo_config_flags(size_t *n) {
    // flag_def begins with its mo_flag_info, but the array strides differ: hand out a copy.
    static mo_flag_info infos[NFLAGS];
    static int ready;
    if (!ready) {
        for (size_t i = 0; i < NFLAGS; i++) infos[i] = flags[i].info;
        ready = 1;
    }
    *n = NFLAGS;
    return infos;
}

static const char *commands_of(unsigned mask, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 1; i < MO_CMD_COUNT; i++) {
        if (!(mask & B(i))) continue;
        if (buf[0]) strncat(buf, ", ", n - strlen(buf) - 1);
        strncat(buf, command_names[i], n - strlen(buf) - 1);
    }
    return buf;
}

mo_status mo_config_set(mo_config *c, const char *flag, const char *value) {
    // Google Benchmark's own flags pass through to the library (sweep times through it).
    if (!strncmp(flag, "--benchmark_", 12)) {
        if (c->command != MO_CMD_SWEEP)
            return MO_FAIL(MO_ERR_INVALID, "%s: Google Benchmark flags are for memopt sweep", flag);
        // Known names only: Google Benchmark would print its own line for an unknown one, then ours.
        static const char *const gb_flags[] = {
            "color", "context", "counters_tabular", "display_aggregates_only", "enable_random_interleaving", "filter",
            "format", "list_tests", "min_time", "min_warmup_time", "out", "out_format", "perf_counters", "repetitions",
            "report_aggregates_only", "time_unit"};
        int known = 0;
        for (size_t i = 0; i < sizeof gb_flags / sizeof gb_flags[0] && !known; i++) known = !strcmp(flag + 12, gb_flags[i]);
        if (!known)
            return MO_FAIL(MO_ERR_INVALID,
                           "%.64s: not a Google Benchmark flag (accepted: --benchmark_ and one of repetitions, filter, "
                           "min_time, min_warmup_time, out, out_format, format, list_tests, report_aggregates_only, "
                           "display_aggregates_only, enable_random_interleaving, time_unit, counters_tabular, color, "
                           "context, perf_counters)",
                           flag);
        if (c->n_gbench >= 8) return MO_FAIL(MO_ERR_INVALID, "%s: at most 8 --benchmark_ flags", flag);
        int k = snprintf(c->gbench[c->n_gbench], sizeof c->gbench[0], "%s%s%s", flag, value ? "=" : "", value ? value : "");
        if (k < 0 || (size_t)k >= sizeof c->gbench[0]) return MO_FAIL(MO_ERR_INVALID, "%s: value too long", flag);
        c->n_gbench++;
        return MO_OK;
    }
    const flag_def *d = NULL;
    for (size_t i = 0; i < NFLAGS && !d; i++)
        if (!strcmp(flag, flags[i].info.name)) d = &flags[i];
    const char *cmd = mo_command_name(c->command);
    if (!d)
        return MO_FAIL(MO_ERR_INVALID, "unknown flag '%.64s'%s for memopt %s (see memopt --help)", flag,
                       strlen(flag) > 64 ? "... (cut)" : "", cmd);
    if (!(d->info.commands & B(c->command))) {
        char buf[128];
        return MO_FAIL(MO_ERR_INVALID, "%s: not a flag of memopt %s (it is for: %s)", flag, cmd,
                       commands_of(d->info.commands, buf, sizeof buf));
    }
    if (!d->info.arg) {
        if (value) return MO_FAIL(MO_ERR_INVALID, "%s: takes no value (got '%s')", flag, value);
        return d->set(c, flag, NULL, 0);
    }
    if (!value) return MO_FAIL(MO_ERR_INVALID, "%s: missing value (accepted: %s)", flag, d->info.arg);
    if (!d->info.list) return d->set(c, flag, value, 0);

    // An axis: a comma list, each value checked, no repeats.
    if (strchr(value, ',') && mo_command_single(c->command))
        return MO_FAIL(MO_ERR_INVALID, "%s: memopt %s takes one value, got the list '%s' (lists are for sweep and plan)",
                       flag, cmd, value);
    char buf[4096];
    if (strlen(value) >= sizeof buf) return MO_FAIL(MO_ERR_INVALID, "%s: value too long", flag);
    memcpy(buf, value, strlen(value) + 1);
    char *items[MO_LIST_MAX];
    int n = 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!*p) return MO_FAIL(MO_ERR_INVALID, "%s: empty value in '%s' (accepted: %s)", flag, value, d->info.arg);
        if (n == MO_LIST_MAX) return MO_FAIL(MO_ERR_INVALID, "%s: more than %d values in the list", flag, MO_LIST_MAX);
        for (int j = 0; j < n; j++)
            if (!strcmp(items[j], p)) return MO_FAIL(MO_ERR_INVALID, "%s: '%s' appears twice in '%s'", flag, p, value);
        items[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    // Parse into a scratch copy so a bad value leaves the config as it was.
    mo_config *tmp = malloc(sizeof *tmp);
    if (!tmp) return MO_FAIL(MO_ERR_INTERNAL, "host out of memory parsing %s", flag);
    memcpy(tmp, c, sizeof *tmp);
    mo_status st = MO_OK;
    for (int j = 0; j < n && st == MO_OK; j++) st = d->set(tmp, flag, items[j], j);
    if (st == MO_OK) {
        *list_count(tmp, flag) = n;
        memcpy(c, tmp, sizeof *c);
    }
    free(tmp);
    return st;
}

// ---------------------------------------------------------------- --grid FILE

// One line of a grid file, read whole up to GRID_LINE_MAX characters: a fixed buffer would split a
// long line and parse its tail as flags, and an unbounded one never ends on /dev/zero. Returns the
// length (NUL bytes included), or GRID_EOF, GRID_TOO_LONG, GRID_NOMEM.
enum { GRID_LINE_MAX = 65536 };
#define GRID_EOF ((ssize_t)-1)
#define GRID_TOO_LONG ((ssize_t)-2)
#define GRID_NOMEM ((ssize_t)-3)
static ssize_t grid_line(FILE *fp, char **buf, size_t *cap) {
    size_t n = 0;
    int ch;
    while ((ch = getc(fp)) != EOF) {
        if (n >= GRID_LINE_MAX) return GRID_TOO_LONG;
        if (n + 2 > *cap) {
            size_t nc = *cap ? 2 * *cap : 256;
            char *nb = realloc(*buf, nc);
            if (!nb) return GRID_NOMEM;
            *buf = nb;
            *cap = nc;
        }
        (*buf)[n++] = (char)ch;
        if (ch == '\n') break;
    }
    if (!n) return GRID_EOF;
    (*buf)[n] = '\0';
    return (ssize_t)n;
}

// Each line: "--flag value", "flag value", "flag=value" or a switch; '#' starts a comment.
static mo_status set_grid(mo_config *c, const char *f, const char *path, int idx) {
    (void)idx;
    MO_TRY(set_path(f, path, c->grid, sizeof c->grid));
    FILE *fp = fopen(path, "r");
    if (!fp) return MO_FAIL(MO_ERR_INVALID, "%s: cannot open '%s': %s", f, path, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int lineno = 0;
    mo_status st = MO_OK;
    while (st == MO_OK && (len = grid_line(fp, &line, &line_cap)) != GRID_EOF) {
        lineno++;
        if (len == GRID_TOO_LONG) {
            st = MO_FAIL(MO_ERR_INVALID, "--grid %s:%d: line longer than %d characters (accepted: a text file, one flag per line)",
                         path, lineno, GRID_LINE_MAX);
            break;
        }
        if (len == GRID_NOMEM) {
            st = MO_FAIL(MO_ERR_INTERNAL, "--grid %s:%d: host out of memory for the line", path, lineno);
            break;
        }
        if (memchr(line, '\0', (size_t)len)) {
            st = MO_FAIL(MO_ERR_INVALID, "--grid %s:%d: a NUL byte in the line (accepted: a text file of flags)", path, lineno);
            break;
        }
        if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3)) {
            st = MO_FAIL(MO_ERR_INVALID, "--grid %s:1: starts with a UTF-8 byte-order mark (accepted: plain text; save it without the BOM)", path);
            break;
        }
        char *cr = strchr(line, '\r');
        if (cr && cr[1] != '\n' && cr[1] != '\0') {
            st = MO_FAIL(MO_ERR_INVALID, "--grid %s:%d: a line ends in CR alone (accepted: LF or CRLF line endings)", path, lineno);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        char *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1])) *--end = '\0';
        if (!*p) continue;
        char *name = p;
        while (*p && !isspace((unsigned char)*p) && *p != '=') p++;
        char *value = NULL;
        if (*p) {
            *p++ = '\0';
            while (isspace((unsigned char)*p) || *p == '=') p++;
            value = *p ? p : NULL;
        }
        char flag[128];
        snprintf(flag, sizeof flag, "%s%s", strncmp(name, "--", 2) ? "--" : "", name);
        if (!strcmp(flag, "--grid")) {
            st = MO_FAIL(MO_ERR_INVALID, "--grid %s:%d: a grid file cannot include another", path, lineno);
            break;
        }
        st = mo_config_set(c, flag, value);
        if (st != MO_OK) {
            // Keep the flag's own message, and say where it came from.
            char inner[1024];
            snprintf(inner, sizeof inner, "%s", mo_errmsg_plain());
            st = MO_FAIL(st, "--grid %s:%d: %s", path, lineno, inner);
        }
    }
    if (st == MO_OK && ferror(fp)) st = MO_FAIL(MO_ERR_INVALID, "--grid: error reading '%s'", path);
    free(line);
    fclose(fp);
    return st;
}

// ---------------------------------------------------------------- combinations

// The list-valued axes in their documented nesting order, with their flags: one table for the count,
// the refusal's message and nothing else to keep in step.
// Axes added later come last (--dp, --zero, --sp, then --offload), so an older grid file keeps its order.
enum { N_AXES = 21 };
static const char *const axis_names[N_AXES] = {"--preset", "--layers", "--hidden", "--heads", "--seq", "--vocab",
                                               "--batch", "--attn", "--precision", "--tp", "--pp", "--accum",
                                               "--ckpt", "--alloc", "--cap", "--input", "--classes", "--dp", "--zero",
                                               "--sp", "--offload"};
static void axis_lens(const mo_config *c, int lens[N_AXES]) {
    const int l[N_AXES] = {c->n_preset, c->n_layers, c->n_hidden, c->n_heads, c->n_seq, c->n_vocab, c->n_batch,
                           c->n_attn, c->n_precision, c->n_tp, c->n_pp, c->n_accum, c->n_ckpt, c->n_alloc, c->n_cap,
                           c->n_input, c->n_classes, c->n_dp, c->n_zero, c->n_sp, c->n_offload};
    memcpy(lens, l, sizeof l);
}

size_t mo_config_count(const mo_config *c) {
    int lens[N_AXES];
    axis_lens(c, lens);
    size_t total = 1;
    for (size_t i = 0; i < N_AXES; i++) {
        size_t n = lens[i] > 0 ? (size_t)lens[i] : 1;
        if (total > (SIZE_MAX / 2) / n) return SIZE_MAX; // saturate: far beyond MO_COMBINATIONS_MAX
        total *= n;
    }
    return total;
}

// Takes this axis's index off the mixed-radix number i (last axis fastest, so decode it first).
static int take(size_t *i, int n) {
    if (n <= 1) return 0;
    int k = (int)(*i % (size_t)n);
    *i /= (size_t)n;
    return k;
}

mo_status mo_config_combination(const mo_config *c, size_t i, mo_run_config *out) {
    size_t count = mo_config_count(c);
    if (i >= count) return MO_FAIL(MO_ERR_INTERNAL, "combination %zu of %zu", i, count);
    // Decode in reverse order of the documented nesting.
    int k_offload = take(&i, c->n_offload); // appended last (after dp, zero, sp): older grids keep their order
    int k_sp = take(&i, c->n_sp); // appended after dp, zero
    int k_zero = take(&i, c->n_zero), k_dp = take(&i, c->n_dp);
    int k_classes = take(&i, c->n_classes), k_input = take(&i, c->n_input);
    int k_cap = take(&i, c->n_cap), k_alloc = take(&i, c->n_alloc), k_ckpt = take(&i, c->n_ckpt);
    int k_accum = take(&i, c->n_accum), k_pp = take(&i, c->n_pp), k_tp = take(&i, c->n_tp);
    int k_prec = take(&i, c->n_precision), k_attn = take(&i, c->n_attn), k_batch = take(&i, c->n_batch);
    int k_vocab = take(&i, c->n_vocab), k_seq = take(&i, c->n_seq), k_heads = take(&i, c->n_heads);
    int k_hidden = take(&i, c->n_hidden), k_layers = take(&i, c->n_layers), k_preset = take(&i, c->n_preset);

    *out = c->base;
    const mo_model_ops *model;
    MO_TRY(mo_model_of(&c->base, &model));
    const mo_preset *p = mo_model_preset(model, c->preset[k_preset]);
    if (!p) return MO_FAIL(MO_ERR_INVALID, "--preset %s: not a preset of model %s", c->preset[k_preset], model->name);
    snprintf(out->preset, sizeof out->preset, "%s", p->name);
    out->layers = c->n_layers ? c->layers[k_layers] : p->layers;
    out->hidden = c->n_hidden ? c->hidden[k_hidden] : p->hidden;
    out->heads = c->n_heads ? c->heads[k_heads] : p->heads;
    out->seq = c->n_seq ? c->seq[k_seq] : p->seq;
    out->vocab = c->n_vocab ? c->vocab[k_vocab] : p->vocab;
    out->input = c->n_input ? c->input[k_input] : p->input;
    out->classes = c->n_classes ? c->classes[k_classes] : p->classes;
    out->batch = c->n_batch ? c->batch[k_batch] : p->batch;
    out->attn = c->attn[k_attn];
    out->precision = c->precision[k_prec];
    out->tp = c->tp[k_tp];
    out->pp = c->pp[k_pp];
    out->dp = c->dp[k_dp];
    out->zero = c->zero[k_zero];
    out->sp = c->sp[k_sp];
    out->offload = c->offload[k_offload];
    out->accum = c->accum[k_accum];
    out->ckpt = c->ckpt[k_ckpt];
    out->alloc = c->alloc[k_alloc];
    out->cap = c->cap[k_cap];
    snprintf(out->cap_text, sizeof out->cap_text, "%s", c->cap_text[k_cap]);
    return MO_OK;
}

mo_status mo_run_config_validate(const mo_run_config *r) {
    const mo_model_ops *m;
    MO_TRY(mo_model_of(r, &m));
    // What the model lacks, with the reason.
    if (!(m->dims & MO_OPT_ATTN) && r->ckpt.kind == MO_CKPT_SELECTIVE)
        return MO_FAIL(MO_ERR_INVALID, "--ckpt selective: model %s has no attention (selective drops only the attention "
                       "probabilities; accepted for it: none, full, every:K, sqrt, segments:N)", m->name);
    if (!(m->dims & MO_OPT_ATTN) && r->attn != MO_ATTN_MATERIALIZED)
        return MO_FAIL(MO_ERR_INVALID, "--attn %s: model %s has no attention", mo_attn_name(r->attn), m->name);
    if (!m->split && r->tp * r->pp > 1)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d --pp %d: model %s cannot be split over ranks yet (accepted: --tp 1 --pp 1)%s%s",
                       r->tp, r->pp, m->name, m->no_split_reason ? ": " : "", m->no_split_reason ? m->no_split_reason : "");
    if (r->zero > 0 && r->dp <= 1)
        return MO_FAIL(MO_ERR_INVALID, "--zero %d: needs --dp above 1 (ZeRO shards the model state over data-parallel ranks; "
                       "accepted without --dp: --zero 0)", r->zero);
    if (r->offload == MO_OFFLOAD_OPTIMIZER && strcmp(m->name, "gpt"))
        return MO_FAIL(MO_ERR_INVALID, "--offload optimizer: model %s has no offloaded update yet (accepted: --offload none, activations)", m->name);
    if (r->offload && (r->dp > 1 || r->tp * r->pp > 1))
        return MO_FAIL(MO_ERR_INVALID, "--offload %s with --dp %d --tp %d --pp %d: offload runs on one unsplit rank "
                       "only for now (accepted: --offload none, or --dp 1 --tp 1 --pp 1)", mo_offload_name(r->offload), r->dp,
                       r->tp, r->pp);
    if (r->offload == MO_OFFLOAD_ACTIVATIONS && (r->ckpt.kind == MO_CKPT_NONE || r->ckpt.kind == MO_CKPT_SELECTIVE))
        return MO_FAIL(MO_ERR_INVALID, "--offload activations with --ckpt %s: it moves the checkpointed segments' inputs to "
                       "the host, and %s (accepted: --ckpt full, every:K, sqrt, segments:N)",
                       r->ckpt.kind == MO_CKPT_NONE ? "none" : "selective",
                       r->ckpt.kind == MO_CKPT_NONE ? "there are none" : "selective has no segments");
    if (r->sp && strcmp(m->name, "gpt"))
        return MO_FAIL(MO_ERR_INVALID, "--sp %d: model %s has no sequence-parallel split (accepted: --sp 0; --sp 1 is gpt's, "
                       "with --tp above 1)", r->sp, m->name);
    if (r->sp && r->tp < 2)
        return MO_FAIL(MO_ERR_INVALID, "--sp %d with --tp %d: sequence parallelism shards the tensor-parallel ranks' "
                       "LayerNorms and residual stream, so it needs --tp above 1 (accepted with --tp 1: --sp 0)", r->sp, r->tp);
    if (r->sp && r->seq % r->tp)
        return MO_FAIL(MO_ERR_INVALID, "--sp %d: seq %d is not divisible by --tp %d (each tp rank holds seq/tp positions; "
                       "accepted: a --tp that divides --seq, or --sp 0)", r->sp, r->seq, r->tp);
    if (r->dp > 1 && !m->split)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: model %s has no data-parallel ranks yet (accepted: --dp 1)", r->dp, m->name);
    if (r->dp > 1 && r->tp * r->pp > 1)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d with --tp %d --pp %d: data parallelism runs on unsplit models only for now "
                       "(accepted: --tp 1 --pp 1 with --dp)", r->dp, r->tp, r->pp);
    if (r->dp > 1 && (r->batch % r->dp || (r->batch / r->dp) % r->accum))
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: batch %d is not divisible by dp x accum = %d (each rank takes batch/dp "
                       "rows, in accum micro-batches)", r->dp, r->batch, r->dp * r->accum);
    MO_TRY(m->validate(r));
    MO_TRY(mo_run_config_check_accum(r));
    MO_TRY(mo_run_config_check_every(r));
    if (r->comm == MO_COMM_NCCL && r->backend != MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_INVALID, "--comm nccl: needs --backend cuda (got %s)", mo_backend_name(r->backend));
    return MO_OK;
}

mo_status mo_run_config_check_accum(const mo_run_config *r) {
    if (r->accum < 1 || r->batch % r->accum)
        return MO_FAIL(MO_ERR_INVALID, "--accum %d: batch %d is not divisible by %d", r->accum, r->batch, r->accum);
    return MO_OK;
}

mo_status mo_run_config_check_every(const mo_run_config *r) {
    if (r->ckpt.kind == MO_CKPT_EVERY && (r->ckpt.every < 1 || r->ckpt.every > r->layers))
        return MO_FAIL(MO_ERR_INVALID, "--ckpt every:%d: K must be in 1..layers (layers %d)", r->ckpt.every, r->layers);
    if (r->ckpt.kind == MO_CKPT_SEGMENTS && (r->ckpt.every < 1 || r->ckpt.every > r->layers))
        return MO_FAIL(MO_ERR_INVALID, "--ckpt segments:%d: N must be in 1..layers (layers %d)", r->ckpt.every, r->layers);
    return MO_OK;
}

// The dimension flags given that the model does not take.
static mo_status check_model_flags(const mo_config *c) {
    const mo_model_ops *m;
    MO_TRY(mo_model_of(&c->base, &m));
    static const struct { const char *flag; unsigned bit; size_t off; } dims[] = {
        {"--layers", MO_DIM_LAYERS, offsetof(mo_config, n_layers)}, {"--hidden", MO_DIM_HIDDEN, offsetof(mo_config, n_hidden)},
        {"--heads", MO_DIM_HEADS, offsetof(mo_config, n_heads)},    {"--seq", MO_DIM_SEQ, offsetof(mo_config, n_seq)},
        {"--vocab", MO_DIM_VOCAB, offsetof(mo_config, n_vocab)},    {"--attn", MO_OPT_ATTN, offsetof(mo_config, attn_given)},
        {"--input", MO_DIM_INPUT, offsetof(mo_config, n_input)},    {"--classes", MO_DIM_CLASSES, offsetof(mo_config, n_classes)},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (*(const int *)((const char *)c + dims[i].off) && !(m->dims & dims[i].bit))
            return MO_FAIL(MO_ERR_INVALID, "%s: not a flag of model %s (its flags: %s)", dims[i].flag, m->name, m->dims_help);
    for (int k = 0; k < c->n_preset; k++)
        if (!mo_model_preset(m, c->preset[k]))
            return MO_FAIL(MO_ERR_INVALID, "--preset %s: not a preset of model %s (its presets start with %s)", c->preset[k],
                           m->name, m->presets[0].name);
    return MO_OK;
}

mo_status mo_config_add_arg(mo_config *c, const char *arg) {
    int max = c->command == MO_CMD_COMPARE ? 2 : c->command == MO_CMD_PLOT ? 2 : 0; // plot: RESULTS.csv, or 1-2 traces
    const char *cmd = mo_command_name(c->command);
    if (c->n_args < 0 || c->n_args >= max)
        return MO_FAIL(MO_ERR_INVALID, "memopt %s: unexpected argument '%s'%s", cmd, arg,
                       max ? "" : " (flags start with --)");
    MO_TRY(set_path(c->command == MO_CMD_COMPARE ? "compare" : cmd, arg, c->args[c->n_args], sizeof c->args[0]));
    c->n_args++;
    return MO_OK;
}

mo_status mo_config_finish(mo_config *c) {
    if (c->command == MO_CMD_COMPARE && c->n_args != 2)
        return MO_FAIL(MO_ERR_INVALID, "memopt compare: needs two files, BASE.csv NEW.csv (got %d)", c->n_args);
    if (c->command == MO_CMD_PLOT && c->n_args < 1)
        return MO_FAIL(MO_ERR_INVALID, "memopt plot: needs one file, RESULTS.csv (or one or two traces of memopt run --trace)");
    if (c->gpu[0] && c->mem_bytes)
        return MO_FAIL(MO_ERR_INVALID, "--gpu and --mem: give one of them, not both");
    if (!(CMDS_CONFIG & B(c->command))) return MO_OK;
    MO_TRY(check_model_flags(c));

    size_t n = mo_config_count(c);
    if (n > MO_COMBINATIONS_MAX) {
        // The exact product (mo_config_count saturates): at most 32^17, well within a double's range.
        int lens[N_AXES];
        axis_lens(c, lens);
        double total = 1;
        char axes[512] = "";
        for (size_t i = 0; i < N_AXES; i++) {
            total *= lens[i] > 0 ? lens[i] : 1;
            size_t o = strlen(axes);
            if (lens[i] > 1) snprintf(axes + o, sizeof axes - o, "%s%s %d", o ? " x " : "", axis_names[i], lens[i]);
        }
        return MO_FAIL(MO_ERR_INVALID, "memopt %s: the axis lists make %.0f combinations (%s; at most %d: split the sweep or shorten a list)",
                       mo_command_name(c->command), total, axes, MO_COMBINATIONS_MAX);
    }
    // The first failing combination's message is the one reported when none is valid.
    mo_status first = MO_OK;
    char first_msg[1024] = "";
    for (size_t i = 0; i < n; i++) {
        mo_run_config rc;
        MO_TRY(mo_config_combination(c, i, &rc));
        // claims sets --ckpt per row and runs --offload activations only where there are segments
        // (bench/cmd_claims.c): its base is checked as one of its checkpointed rows
        if (c->command == MO_CMD_CLAIMS && rc.offload == MO_OFFLOAD_ACTIVATIONS &&
            (rc.ckpt.kind == MO_CKPT_NONE || rc.ckpt.kind == MO_CKPT_SELECTIVE))
            rc.ckpt.kind = MO_CKPT_FULL;
        mo_status st = mo_run_config_validate(&rc);
        if (st == MO_OK) return MO_OK;
        if (first == MO_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", mo_errmsg_plain());
        }
    }
    if (n == 1) return first; // its message is still the thread's current one
    return MO_FAIL(first, "no valid combination among %zu; the first: %s", n, first_msg);
}
