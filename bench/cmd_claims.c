// memopt claims: runs the experiments behind the two published claims on this machine, with the
// base configuration given (default gpt2-124m), and prints claimed against measured with a
// verdict and its reason.
//
//   1. activation checkpointing "cuts about 50% of activation memory for about 20% more time":
//      each policy (full, sqrt, selective, every:2) against ckpt none, everything else equal.
//      Holds when the activation saving is within [40%, 60%] and the time overhead is at most 30%.
//   2. mixed precision "cuts memory about 40% and trains 2-3x faster": fp16 and bf16 each against
//      fp32 and against tf32. Holds when the peak saving is within [30%, 50%] and the speedup
//      within [2x, 3x].
// Savings are 1 - measured/baseline, the overhead step_ms/step_ms(baseline) - 1 and the speedup
// its inverse ratio, all from bench/derive.c (the same numbers memopt plot draws).
//
// With no GPU (the cuda backend unavailable) or --backend dry, memory comes from the dry backend,
// which is exact, and the time half of each verdict is "not measured" (times need a GPU).
// Results: <out>/claims.csv (every run, the results schema, written fresh), <out>/claims_verdicts.csv,
// and the figure claims.png/.svg in plots/ (or --out-dir, where everything then goes).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/cli.h"
#include "bench/derive.h"
#include "bench/fallback.h"
#include "bench/plot.h"
#include "bench/sweep.h"
#include "kernels/backend.h"

#define MAX_RUNS 16

// The rule's numbers, stated once (the output prints them from here).
#define CKPT_SAVING_LO 0.40
#define CKPT_SAVING_HI 0.60
#define CKPT_OVERHEAD_MAX 0.30
#define MP_SAVING_LO 0.30
#define MP_SAVING_HI 0.50
#define MP_SPEEDUP_LO 2.0
#define MP_SPEEDUP_HI 3.0

typedef struct claims {
    mo_run_config base;
    mo_run_env env;
    int timed;                 // the backend measures times (not dry)
    mo_csv_row rows[MAX_RUNS];
    size_t n;
    mo_csv_writer *w;
    FILE *verdicts;
    char outdir[MO_PATH_MAX], plotdir[MO_PATH_MAX];
} claims;

// Runs rc unless the same configuration already ran; *at is its row index.
static mo_status run_once(claims *c, const mo_run_config *rc_in, size_t *at) {
    // --offload activations moves checkpointed segments' inputs: the rows without segments (ckpt none,
    // selective, and the precision rows at the base's ckpt) run without it
    mo_run_config rc_off = *rc_in;
    if (rc_off.offload == MO_OFFLOAD_ACTIVATIONS &&
        (rc_off.ckpt.kind == MO_CKPT_NONE || rc_off.ckpt.kind == MO_CKPT_SELECTIVE))
        rc_off.offload = MO_OFFLOAD_NONE;
    const mo_run_config *rc = &rc_off;
    mo_csv_row probe;
    mo_csv_row_init(&probe);
    uint64_t total = c->env.have_device ? c->env.dev.total_mem_bytes : rc->device_mem_bytes;
    mo_csv_row_from_config(&probe, rc, mo_cap_resolve(&rc->cap, total));
    char want[1024], have[1024];
    mo_csv_config_key(&probe, want, sizeof want);
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(mo_csv_config_key(&c->rows[i], have, sizeof have), want)) {
            *at = i;
            return MO_OK;
        }
    if (c->n == MAX_RUNS) return MO_FAIL(MO_ERR_INTERNAL, "claims: more than %d runs", MAX_RUNS);
    mo_csv_row *row = &c->rows[c->n];
    char name[256];
    mo_config_name(rc, name, sizeof name);
    if (mo_run_config_validate(rc) != MO_OK) {
        // Only every:2 on a one-layer model gets here: a row that says why, like sweep's.
        mo_csv_row_init(row);
        mo_csv_row_from_config(row, rc, 0);
        snprintf(row->status, sizeof row->status, "invalid");
        snprintf(row->detail, sizeof row->detail, "%s", mo_errmsg_plain());
    } else {
        MO_TRY(mo_fallback_execute(rc, &c->env, row, NULL));
    }
    MO_TRY(mo_derive_fill_overhead(c->rows, c->n, row));
    if (c->w) MO_TRY(mo_csv_append(c->w, row));
    printf("  ran %s: %s\n", name, row->status);
    fflush(stdout);
    *at = c->n++;
    return MO_OK;
}

static const char *pct(double x, char *buf, size_t n) {
    if (isfinite(x)) snprintf(buf, n, "%.1f%%", 100 * x);
    else snprintf(buf, n, "n/a");
    return buf;
}

static void csv_text(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, ",%.6g", x);
    else fputc(',', f);
}

static void write_verdict(claims *c, const char *claim, const char *variant, const char *baseline, const mo_derived *d,
                          const char *verdict, const char *reason) {
    if (!c->verdicts) return;
    fprintf(c->verdicts, "%s,%s,%s", claim, variant, baseline);
    csv_num(c->verdicts, d ? d->act_saving : NAN);
    csv_num(c->verdicts, d ? d->mem_saving : NAN);
    csv_num(c->verdicts, d ? d->time_ratio : NAN);
    fputc(',', c->verdicts);
    csv_text(c->verdicts, verdict);
    fputc(',', c->verdicts);
    csv_text(c->verdicts, reason);
    fputc('\n', c->verdicts);
}

// "not measured" when the row or its baseline did not train.
static int not_measured(const mo_csv_row *r, const mo_csv_row *b, const char *bname, char *reason, size_t n) {
    if (!mo_derive_measured(r)) {
        snprintf(reason, n, "%s", r->detail[0] ? r->detail : r->status);
        return 1;
    }
    if (!b || !mo_derive_measured(b)) {
        snprintf(reason, n, "the %s baseline did not train%s%s", bname, b && b->detail[0] ? ": " : "",
                 b ? b->detail : "");
        return 1;
    }
    return 0;
}

// ---------------------------------------------------------------- claim 1: checkpointing

static const char *const policies[] = {"none", "full", "sqrt", "selective", "every:2"};
#define NPOL (sizeof policies / sizeof policies[0])

static mo_status claim_ckpt(claims *c, size_t at[NPOL], mo_derived d[MAX_RUNS], char verdicts[NPOL][40]) {
    printf("\nClaim 1: activation checkpointing \"cuts about 50%% of activation memory for about 20%% more time\"\n");
    printf("  rule: holds when the activation saving (1 - activation peak / that of ckpt none) is within [%.0f%%, %.0f%%]\n"
           "        and the time overhead (step_ms / step_ms of ckpt none - 1) is at most %.0f%%; same configuration otherwise\n",
           100 * CKPT_SAVING_LO, 100 * CKPT_SAVING_HI, 100 * CKPT_OVERHEAD_MAX);
    printf("  %-10s %11s %12s %10s  %s\n", "policy", "act saving", "peak saving", "overhead", "verdict: reason");
    MO_TRY(mo_derive_all(c->rows, c->n, MO_VARY_CKPT, "none", d));
    for (size_t p = 1; p < NPOL; p++) {
        const mo_csv_row *r = &c->rows[at[p]];
        const mo_derived *x = &d[at[p]];
        char reason[1200], *verdict = verdicts[p], b1[16], b2[16], b3[16];
        if (not_measured(r, &c->rows[at[0]], "ckpt none", reason, sizeof reason)) {
            snprintf(verdict, 40, "not measured");
        } else {
            int mem_ok = x->act_saving >= CKPT_SAVING_LO && x->act_saving <= CKPT_SAVING_HI;
            int timed = isfinite(x->recompute_overhead);
            char mem[160], tm[160];
            snprintf(mem, sizeof mem, "activation saving %s is %s [%.0f%%, %.0f%%]", pct(x->act_saving, b1, 16),
                     mem_ok ? "within" : x->act_saving > CKPT_SAVING_HI ? "above" : "below", 100 * CKPT_SAVING_LO,
                     100 * CKPT_SAVING_HI);
            if (timed)
                snprintf(tm, sizeof tm, "overhead %s is %s %.0f%%", pct(x->recompute_overhead, b2, 16),
                         x->recompute_overhead <= CKPT_OVERHEAD_MAX ? "at most" : "above", 100 * CKPT_OVERHEAD_MAX);
            else
                snprintf(tm, sizeof tm, "time not measured (times need a GPU; %s backend)", r->backend);
            if (!mem_ok) snprintf(verdict, 40, "fails");
            else if (!timed) snprintf(verdict, 40, "memory holds, time not measured");
            else snprintf(verdict, 40, x->recompute_overhead <= CKPT_OVERHEAD_MAX ? "holds" : "fails");
            snprintf(reason, sizeof reason, "%s; %s", mem, tm);
        }
        printf("  %-10s %11s %12s %10s  %s: %s\n", policies[p], pct(x->act_saving, b1, 16), pct(x->mem_saving, b2, 16),
               pct(x->recompute_overhead, b3, 16), verdict, reason);
        write_verdict(c, "checkpointing", policies[p], "ckpt none", x, verdict, reason);
    }
    return MO_OK;
}

// ---------------------------------------------------------------- claim 2: mixed precision

static mo_status claim_mp(claims *c, const size_t at_prec[4], FILE *dat, int *n_measured, char *why, size_t why_n) {
    printf("\nClaim 2: mixed precision \"cuts memory about 40%% and trains 2-3x faster\"\n");
    printf("  rule: holds when the peak saving (1 - peak allocated / that of the baseline) is within [%.0f%%, %.0f%%]\n"
           "        and the speedup (baseline step_ms / step_ms) within [%.0fx, %.0fx]; baselines fp32 and tf32\n",
           100 * MP_SAVING_LO, 100 * MP_SAVING_HI, MP_SPEEDUP_LO, MP_SPEEDUP_HI);
    printf("  %-14s %12s %9s  %s\n", "comparison", "peak saving", "speedup", "verdict: reason");
    *n_measured = 0;
    why[0] = '\0';
    static const char *const bases[] = {"fp32", "tf32"};
    static const int half[] = {2, 3}; // indices of fp16, bf16 in at_prec (fp32, tf32, fp16, bf16)
    for (int b = 0; b < 2; b++) {
        mo_derived d[MAX_RUNS];
        MO_TRY(mo_derive_all(c->rows, c->n, MO_VARY_PRECISION, bases[b], d));
        for (int h = 0; h < 2; h++) {
            const mo_csv_row *r = &c->rows[at_prec[half[h]]];
            const mo_derived *x = &d[at_prec[half[h]]];
            char cmp[32], reason[1200], verdict[40], b1[16], sp[16];
            snprintf(cmp, sizeof cmp, "%s vs %s", r->precision, bases[b]);
            if (not_measured(r, &c->rows[at_prec[b]], bases[b], reason, sizeof reason)) {
                snprintf(verdict, 40, "not measured");
                if (!why[0]) snprintf(why, why_n, "%s", reason);
            } else {
                (*n_measured)++;
                int mem_ok = x->mem_saving >= MP_SAVING_LO && x->mem_saving <= MP_SAVING_HI;
                int timed = isfinite(x->speedup);
                int fast_ok = timed && x->speedup >= MP_SPEEDUP_LO && x->speedup <= MP_SPEEDUP_HI;
                char mem[160], tm[160];
                snprintf(mem, sizeof mem, "peak saving %s is %s [%.0f%%, %.0f%%]", pct(x->mem_saving, b1, 16),
                         mem_ok ? "within" : x->mem_saving > MP_SAVING_HI ? "above" : "below", 100 * MP_SAVING_LO,
                         100 * MP_SAVING_HI);
                if (timed)
                    snprintf(tm, sizeof tm, "speedup %.2fx is %s [%.0fx, %.0fx]", x->speedup,
                             fast_ok ? "within" : x->speedup > MP_SPEEDUP_HI ? "above" : "below", MP_SPEEDUP_LO, MP_SPEEDUP_HI);
                else
                    snprintf(tm, sizeof tm, "time not measured (times need a GPU; %s backend)", r->backend);
                if (!mem_ok) snprintf(verdict, 40, "fails");
                else if (!timed) snprintf(verdict, 40, "memory holds, time not measured");
                else snprintf(verdict, 40, fast_ok ? "holds" : "fails");
                snprintf(reason, sizeof reason, "%s; %s", mem, tm);
            }
            if (isfinite(x->speedup)) snprintf(sp, sizeof sp, "%.2fx", x->speedup);
            else snprintf(sp, sizeof sp, "n/a");
            printf("  %-14s %12s %9s  %s: %s\n", cmp, pct(x->mem_saving, b1, 16), sp, verdict, reason);
            write_verdict(c, "mixed precision", r->precision, bases[b], x, verdict, reason);
            if (dat) { // the verdict, short, for the figure: which side failed
                char v[64];
                if (strcmp(verdict, "fails")) snprintf(v, sizeof v, "%s", verdict);
                else if (!(x->mem_saving >= MP_SAVING_LO && x->mem_saving <= MP_SAVING_HI))
                    snprintf(v, sizeof v, "fails: saves %s", x->mem_saving > MP_SAVING_HI ? "more" : "less");
                else snprintf(v, sizeof v, "fails: %s", x->speedup > MP_SPEEDUP_HI ? "over 3x" : "under 2x");
                fprintf(dat, "\"%s\" %.3f %.4f \"%s\"\n", cmp, isfinite(x->mem_saving) ? 100 * x->mem_saving : NAN,
                        isfinite(x->speedup) ? x->speedup : NAN, v);
            }
        }
    }
    return MO_OK;
}

// ---------------------------------------------------------------- the figure

// Text for a gnuplot '...' string that a script shows as a label: quotes become backticks, and
// "\\n" (which the label's double-quoted string turns into a line break) every ~width characters.
static void gp_text(const char *s, char *out, size_t n, int width) {
    size_t k = 0;
    int col = 0;
    for (; *s && k + 4 < n; s++) {
        char ch = *s == '\'' || *s == '"' ? '`' : *s == '\n' ? ' ' : *s;
        if (ch == ' ' && width > 0 && col >= width) {
            out[k++] = '\\';
            out[k++] = 'n';
            col = 0;
            continue;
        }
        out[k++] = ch;
        col++;
    }
    out[k] = '\0';
}

static mo_status figure(claims *c, const size_t at[NPOL], const mo_derived d[MAX_RUNS], char verdicts[NPOL][40], int n_mp,
                        const char *mp_why) {
    // The data files are written either way, so a machine without gnuplot (the GPU one) still brings
    // back everything the figure needs (gnuplot plots/claims.gp elsewhere).
    MO_TRY(mo_plot_mkdir(c->plotdir));
    char path[MO_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/claims_ckpt.dat", c->plotdir);
    FILE *f = fopen(path, "w");
    if (!f) return MO_FAIL(MO_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "# policy activation_saving_pct peak_saving_pct overhead_pct verdict (against ckpt none)\n");
    int timed = 0;
    for (size_t p = 1; p < NPOL; p++) {
        const mo_derived *x = &d[at[p]];
        timed |= isfinite(x->recompute_overhead);
        char v[64]; // the verdict, short, for the figure: which side failed
        if (strcmp(verdicts[p], "fails")) snprintf(v, sizeof v, "%s", verdicts[p]);
        else if (!(x->act_saving >= CKPT_SAVING_LO && x->act_saving <= CKPT_SAVING_HI))
            snprintf(v, sizeof v, "fails: saves %s", x->act_saving > CKPT_SAVING_HI ? "more" : "less");
        else snprintf(v, sizeof v, "fails: over 30%%");
        fprintf(f, "\"%s\" %.3f %.3f %.3f \"%s\"\n", policies[p], isfinite(x->act_saving) ? 100 * x->act_saving : NAN,
                isfinite(x->mem_saving) ? 100 * x->mem_saving : NAN,
                isfinite(x->recompute_overhead) ? 100 * x->recompute_overhead : NAN, v);
    }
    fclose(f);
    if (mo_plot_check_gnuplot() != MO_OK) {
        printf("\nno figure: %s\n", mo_errmsg_plain());
        return MO_OK;
    }
    char name[256], title[400], why[600], vars[1400];
    mo_plot_subtitle(c->rows, c->n, name, sizeof name); // model and device, not the machine key
    gp_text(name, title, sizeof title, 0);
    gp_text(mp_why, why, sizeof why, 50);
    snprintf(vars, sizeof vars, "have_time=%d; n_mp=%d; mp_why='%s'; base='%s'; time_why='%s'", timed, n_mp, why, title,
             c->timed ? "the times did not come out" : "times need a GPU (dry backend: memory only)");
    MO_TRY(mo_plot_run("claims.gp", c->plotdir, vars));
    printf("\nfigure: %s/claims.png (and .svg)\n", c->plotdir);
    return MO_OK;
}

// ---------------------------------------------------------------- the command

mo_status mo_cmd_claims(const mo_run_config *cfg) {
    claims *c = calloc(1, sizeof *c);
    if (!c) return MO_FAIL(MO_ERR_INTERNAL, "host out of memory");
    mo_status st = MO_OK;
    c->base = *cfg;
    const char *why = NULL;
    const char *note = NULL;
    char note_buf[300];
    if (c->base.backend == MO_BACKEND_CUDA && !mo_cuda_available(&why)) {
        c->base.backend = MO_BACKEND_DRY;
        snprintf(note_buf, sizeof note_buf,
                 "no GPU here (%s): memory from the dry backend, which is exact; times need a GPU", why ? why : "no CUDA");
        note = note_buf;
    } else if (c->base.backend == MO_BACKEND_DRY) {
        note = "dry backend: memory is exact; times need a GPU";
    } else if (c->base.backend == MO_BACKEND_CPU) {
        note = "cpu backend: times are the plain-C reference's, not a GPU's: the time verdicts say nothing about GPUs";
    }
    c->timed = c->base.backend != MO_BACKEND_DRY;
    snprintf(c->outdir, sizeof c->outdir, "%s", cfg->out_dir[0] ? cfg->out_dir : "results");
    snprintf(c->plotdir, sizeof c->plotdir, "%s", cfg->out_dir[0] ? cfg->out_dir : "plots");
    MO_TRY_GOTO(st, mo_run_env_init(&c->env, &c->base), done);
    MO_TRY_GOTO(st, mo_plot_mkdir(c->outdir), done);
    char path[MO_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/claims.csv", c->outdir);
    unlink(path); // claims.csv is this command's own output: each run writes it afresh
    MO_TRY_GOTO(st, mo_csv_open(path, &c->w), done);
    char vpath[MO_PATH_MAX + 32];
    snprintf(vpath, sizeof vpath, "%s/claims_verdicts.csv", c->outdir);
    c->verdicts = fopen(vpath, "w");
    if (!c->verdicts) {
        st = MO_FAIL(MO_ERR_IO, "%s: cannot write: %s", vpath, strerror(errno));
        goto done;
    }
    fprintf(c->verdicts, "claim,variant,baseline,activation_saving,peak_saving,time_ratio,verdict,reason\n");

    char name[256];
    mo_config_name(&c->base, name, sizeof name);
    printf("memopt claims: base configuration %s on %s\n", name, c->env.dev.name);
    if (note) printf("  %s\n", note);
    if (c->base.offload == MO_OFFLOAD_ACTIVATIONS)
        printf("  --offload activations: the checkpointed rows (full, sqrt, every:2) offload their segments' inputs; "
               "ckpt none, selective and the precision rows have none to offload and run without it\n");

    size_t at[NPOL], at_prec[4];
    for (size_t p = 0; p < NPOL; p++) {
        mo_run_config rc = c->base;
        MO_TRY_GOTO(st, mo_ckpt_parse(policies[p], &rc.ckpt), done);
        MO_TRY_GOTO(st, run_once(c, &rc, &at[p]), done);
    }
    static const mo_precision precs[4] = {MO_PREC_FP32, MO_PREC_TF32, MO_PREC_FP16, MO_PREC_BF16};
    for (int p = 0; p < 4; p++) {
        mo_run_config rc = c->base;
        rc.precision = precs[p];
        MO_TRY_GOTO(st, run_once(c, &rc, &at_prec[p]), done);
    }

    mo_derived d[MAX_RUNS];
    char verdicts[NPOL][40] = {{0}};
    MO_TRY_GOTO(st, claim_ckpt(c, at, d, verdicts), done);
    char mp_path[MO_PATH_MAX + 32];
    snprintf(mp_path, sizeof mp_path, "%s/claims_precision.dat", c->plotdir);
    FILE *dat = NULL;
    if (mo_plot_mkdir(c->plotdir) == MO_OK && (dat = fopen(mp_path, "w")))
        fprintf(dat, "# comparison peak_saving_pct speedup\n");
    int n_mp = 0;
    char mp_why[1200];
    st = claim_mp(c, at_prec, dat, &n_mp, mp_why, sizeof mp_why);
    if (dat) fclose(dat);
    if (st != MO_OK) goto done;

    // The summary groups the policies by verdict: "holds for full; fails for sqrt, every:2".
    printf("\nSummary: checkpointing:");
    static const char *const kinds[] = {"holds", "memory holds, time not measured", "fails", "not measured"};
    int any = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int first = 1;
        for (size_t p = 1; p < NPOL; p++) {
            if (strcmp(verdicts[p], kinds[k])) continue;
            if (first) printf("%s %s for ", any ? ";" : "", kinds[k]);
            printf("%s%s", first ? "" : ", ", policies[p]);
            first = 0;
            any = 1;
        }
    }
    if (n_mp) printf(". Mixed precision: see the table above\n");
    else printf(". Mixed precision: not measured (%s)\n", mp_why);
    mo_csv_close(c->w);
    c->w = NULL;
    fclose(c->verdicts);
    c->verdicts = NULL;
    printf("rows: %s (%zu runs); verdicts: %s\n", path, c->n, vpath);
    st = figure(c, at, d, verdicts, n_mp, mp_why);
done:
    mo_csv_close(c->w);
    if (c->verdicts) fclose(c->verdicts);
    free(c);
    return st;
}
