// argv to mo_config, the usage text (generated from the flag table so it cannot go stale), the
// weak default hooks, and `memopt devices`.
#include "cli.h"

#include <string.h>
#include "kernels/backend.h"
#include "kernels/device.h"
#include "models/model.h"
#include "strategies/alloc.h"

#ifndef MEMOPT_VERSION
#define MEMOPT_VERSION "unknown"
#endif

static const struct { mo_command cmd; const char *args; const char *what; } commands[] = {
    {MO_CMD_RUN, "", "one configuration: a summary on stdout, one CSV row with --csv FILE"},
    {MO_CMD_SWEEP, "", "every combination of the list-valued axes, or of --grid FILE"},
    {MO_CMD_CLAIMS, "", "the experiments behind each published claim: claimed vs measured, CSV + plot"},
    {MO_CMD_PLAN, "", "predicted memory by category, fits or not, largest batch, best combination"},
    {MO_CMD_MINCAP, "", "the smallest cap at which a configuration still trains (tightens from 80%)"},
    {MO_CMD_COMPARE, " BASE.csv NEW.csv", "regression verdict per row; exit 1 on a regression"},
    {MO_CMD_PLOT, " RESULTS.csv | TRACE.csv [TRACE2.csv]", "gnuplot figures into plots/ (or --out-dir); traces: the allocation timeline"},
    {MO_CMD_DEVICES, "", "GPUs, memory, driver, runtime, cuDNN and cuBLAS versions"},
};

// One flag line: name, argument, '*' when it takes a list, help.
static void usage_flag(FILE *f, const mo_flag_info *fl) {
    char head[96];
    snprintf(head, sizeof head, "%s%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "", fl->list ? " *" : "");
    if (strlen(head) > 26) fprintf(f, "  %s\n  %-26s %s\n", head, "", fl->help);
    else fprintf(f, "  %-26s %s\n", head, fl->help);
}

// The flags of one group that cmd takes (every command's when cmd is MO_CMD_NONE), each once.
static void usage_group(FILE *f, const char *group, mo_command cmd) {
    size_t n;
    const mo_flag_info *fl = mo_config_flags(&n);
    unsigned mask = 0; // the commands that take a flag of this group
    int shown = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fl[i].group, group) && (cmd == MO_CMD_NONE || (fl[i].commands & (1u << cmd)))) mask |= fl[i].commands;
    if (!mask) return;
    if (cmd == MO_CMD_NONE) {
        char cmds[128] = "";
        for (int c = 1; c < MO_CMD_COUNT; c++)
            if (mask & (1u << c)) {
                if (cmds[0]) strcat(cmds, ", ");
                strcat(cmds, mo_command_name((mo_command)c));
            }
        fprintf(f, "\n%s flags (%s):\n", group, cmds);
    } else {
        fprintf(f, "\n%s flags:\n", group);
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fl[i].group, group) && (cmd == MO_CMD_NONE || (fl[i].commands & (1u << cmd)))) {
            usage_flag(f, &fl[i]);
            shown++;
        }
    (void)shown;
}

static const char *const groups[] = {"model", "strategy", "run", "output", "sweep", "plan", "compare"};

// The registered models and their presets (the per-model part of the help).
static void usage_models(FILE *f) {
    fprintf(f, "\nmodels (--model NAME; a model refuses the flags it lacks) and their presets (--preset NAME):\n");
    for (int k = 0, nm = mo_model_count(); k < nm; k++) {
        const mo_model_ops *m = mo_model_at(k);
        fprintf(f, "  %s: flags %s\n", m->name, m->dims_help);
        for (int i = 0; i < m->n_presets; i++) {
            const mo_preset *p = &m->presets[i];
            fprintf(f, "    %-12s layers %2d, hidden %4d", p->name, p->layers, p->hidden);
            if (m->dims & MO_DIM_HEADS) fprintf(f, ", heads %2d", p->heads);
            if (m->dims & MO_DIM_SEQ) fprintf(f, ", seq %d", p->seq);
            if (m->dims & MO_DIM_VOCAB) fprintf(f, ", vocab %d", p->vocab);
            if (p->input) fprintf(f, ", input %d", p->input);
            if (p->classes) fprintf(f, ", classes %d", p->classes);
            fprintf(f, ", batch %d\n", p->batch);
        }
    }
}

void mo_cli_usage(FILE *f, mo_command cmd) {
    if (cmd != MO_CMD_NONE) {
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (commands[i].cmd == cmd)
                fprintf(f, "usage: memopt %s%s [flags]\n  %s\n", mo_command_name(cmd), commands[i].args, commands[i].what);
        if (cmd == MO_CMD_DEVICES) {
            fprintf(f, "\nno flags. Exit 0, also on a machine with no GPU (it says why).\n");
            return;
        }
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) usage_group(f, groups[g], cmd);
        if (cmd == MO_CMD_SWEEP || cmd == MO_CMD_PLAN)
            fprintf(f, "\n* takes a comma list (--precision fp32,bf16 --ckpt none,full --batch 4,8).\n");
        if (cmd == MO_CMD_RUN || cmd == MO_CMD_SWEEP || cmd == MO_CMD_PLAN || cmd == MO_CMD_CLAIMS || cmd == MO_CMD_MINCAP)
            usage_models(f);
        fprintf(f, "\nExit codes: 0 success; 1 a run or comparison failed; 2 bad input (a one-line reason on stderr).\n"
                   "Every command and flag: memopt --help\n");
        return;
    }
    fprintf(f, "usage: memopt <command> [flags]\n       memopt <command> --help\n       memopt --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s%s", mo_command_name(commands[i].cmd), commands[i].args);
        fprintf(f, "  %-26s %s\n", head, commands[i].what);
    }
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) usage_group(f, groups[g], MO_CMD_NONE);
    fprintf(f,
            "\n* takes a comma list in sweep and plan (--precision fp32,bf16 --ckpt none,full --batch 4,8);\n"
            "  run, mincap and claims take one value. Combinations are enumerated as nested loops, the\n"
            "  last varying fastest: preset, layers, hidden, heads, seq, vocab, batch, attn, precision,\n"
            "  tp, pp, accum, ckpt, alloc, cap, input, classes. Dimensions not given come from the preset.\n"
            "Rules: hidden %% heads == 0, batch %% accum == 0, heads %% tp == 0 (gpt), 4*hidden %% tp == 0,\n"
            "  layers %% pp == 0, every:K and segments:N with K, N <= layers, --comm nccl needs --backend cuda.\n"
            "  A model refuses the flags it lacks (mlp: --heads --seq --vocab --attn, selective; resnet: those\n"
            "  and --tp/--pp; gpt: --input --classes).\n"
            "A flag that a command does not use is refused (exit 2): memopt <command> --help lists its own.\n"
            "Flags: --flag value or --flag=value; -- ends the flags.\n"
            "Exit codes: 0 success; 1 a run or comparison failed (OOM with --on-oom fail, a regression);\n"
            "  2 bad input (a one-line reason on stderr).\n");
    usage_models(f);
}

void mo_cli_version(FILE *f) {
    mo_device_info v;
    mo_library_versions(&v);
    fprintf(f, "memopt %s\n", MEMOPT_VERSION);
#ifdef MEMOPT_HAVE_CUDA
    fprintf(f, "built with CUDA: runtime %s, cuBLASLt %s, cuDNN %s\n", v.runtime, v.cublas, v.cudnn);
#else
    fprintf(f, "built without CUDA (cpu and dry backends only)\n");
#endif
}

// ---------------------------------------------------------------- parsing

static const mo_flag_info *find_flag(const char *name) {
    size_t n;
    const mo_flag_info *fl = mo_config_flags(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fl[i].name, name)) return &fl[i];
    return NULL;
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help"); }
static int is_version(const char *a) { return !strcmp(a, "--version") || !strcmp(a, "-V") || !strcmp(a, "version"); }

mo_status mo_cli_parse(int argc, char **argv, mo_cli *out) {
    memset(out, 0, sizeof *out);
    mo_clear_error();
    if (argc < 2)
        return MO_FAIL(MO_ERR_INVALID, "missing subcommand (accepted: run, sweep, claims, plan, mincap, compare, plot, devices; see memopt --help)");
    const char *sub = argv[1];
    if (is_help(sub)) { out->action = MO_CLI_HELP; return MO_OK; }
    if (is_version(sub)) { out->action = MO_CLI_VERSION; return MO_OK; }
    if (sub[0] == '-')
        return MO_FAIL(MO_ERR_INVALID, "unknown flag '%s' before the subcommand (usage: memopt <command> [flags])", sub);
    mo_command cmd;
    MO_TRY(mo_command_parse(sub, &cmd));
    mo_config *c = &out->cfg;
    mo_config_defaults(c, cmd);

    int flags_done = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!flags_done && is_help(a) && a[0] == '-') { out->action = MO_CLI_HELP; return MO_OK; }
        if (!flags_done && !strcmp(a, "--")) { flags_done = 1; continue; }
        if (flags_done || a[0] != '-' || !strcmp(a, "-")) {
            MO_TRY(mo_config_add_arg(c, a));
            continue;
        }
        // --flag=value or --flag value
        char name[128];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) return MO_FAIL(MO_ERR_INVALID, "unknown flag '%.60s...'", a);
        memcpy(name, a, len);
        name[len] = '\0';
        const mo_flag_info *f = find_flag(name);
        const char *value = eq ? eq + 1 : NULL;
        if (f && f->arg && !eq) {
            if (i + 1 >= argc) return MO_FAIL(MO_ERR_INVALID, "%s: missing value (accepted: %s)", name, f->arg);
            if (!strncmp(argv[i + 1], "--", 2))
                return MO_FAIL(MO_ERR_INVALID, "%s: missing value before '%s' (accepted: %s)", name, argv[i + 1], f->arg);
            value = argv[++i];
        }
        MO_TRY(mo_config_set(c, name, value));
    }
    return mo_config_finish(c);
}

// ---------------------------------------------------------------- hooks

#define WEAK __attribute__((weak))
static mo_status not_implemented(void) { return MO_FAIL(MO_ERR_UNSUPPORTED, "not implemented yet"); }

WEAK mo_status mo_cmd_run(const mo_run_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_sweep(const mo_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_claims(const mo_run_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_plan(const mo_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_mincap(const mo_run_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_compare(const mo_config *cfg) { (void)cfg; return not_implemented(); }
WEAK mo_status mo_cmd_plot(const mo_config *cfg) { (void)cfg; return not_implemented(); }

// ---------------------------------------------------------------- devices

mo_status mo_cmd_devices(void) {
    mo_device_info v;
    mo_library_versions(&v);
    printf("memopt %s\nlibraries: CUDA runtime %s, driver API %s, cuBLASLt %s, cuDNN %s\n", MEMOPT_VERSION, v.runtime,
           v.driver, v.cublas, v.cudnn);
    const char *why = NULL;
    if (!mo_cuda_available(&why)) {
        // A machine without a GPU is a normal answer, not a failure.
        printf("%s%s\n", strncmp(why, "no CUDA device", 14) ? "no CUDA device: " : "", why);
        return MO_OK;
    }
    int n = 0;
    MO_TRY(mo_device_count(&n));
    for (int i = 0; i < n; i++) {
        mo_device_info d;
        MO_TRY(mo_device_query(i, &d));
        char total[32], freeb[32], l2[32];
        printf("GPU %d: %s, sm_%d%d, %d SMs, L2 %s, memory %s total, %s free\n", i, d.name, d.cc_major,
               d.cc_minor, d.sm_count, mo_format_bytes(d.l2_bytes, l2, sizeof l2),
               mo_format_bytes(d.total_mem_bytes, total, sizeof total),
               mo_format_bytes(d.free_mem_bytes, freeb, sizeof freeb));
        printf("       total %llu bytes, driver API %s, runtime %s\n", (unsigned long long)d.total_mem_bytes,
               d.driver, d.runtime);
    }
    return MO_OK;
}

// ---------------------------------------------------------------- dispatch

mo_status mo_cli_execute(const mo_cli *cli) {
    const mo_config *c = &cli->cfg;
    if (cli->action == MO_CLI_HELP) { mo_cli_usage(stdout, c->command); return MO_OK; }
    if (cli->action == MO_CLI_VERSION) { mo_cli_version(stdout); return MO_OK; }
    mo_run_config rc;
    if (mo_command_single(c->command)) MO_TRY(mo_config_combination(c, 0, &rc));
    switch (c->command) {
    case MO_CMD_RUN: return mo_cmd_run(&rc);
    case MO_CMD_MINCAP: return mo_cmd_mincap(&rc);
    case MO_CMD_CLAIMS: return mo_cmd_claims(&rc);
    case MO_CMD_SWEEP: return mo_cmd_sweep(c);
    case MO_CMD_PLAN: return mo_cmd_plan(c);
    case MO_CMD_COMPARE: return mo_cmd_compare(c);
    case MO_CMD_PLOT: return mo_cmd_plot(c);
    case MO_CMD_DEVICES: return mo_cmd_devices();
    default: return MO_FAIL(MO_ERR_INTERNAL, "no subcommand to execute");
    }
}
