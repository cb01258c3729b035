// memopt plan --validate RESULTS.csv: the plan set against what was measured, row by row.
//   peak memory: the row's configuration re-run on the dry backend (cap and all), compared with the
//     row's peak_allocated_bytes. The goal is exact to the byte; any difference fails the command
//     (exit 1), since exactness is the planner's contract.
//   step time: the roofline for the row's device (its catalog entry, matched by device name),
//     calibrated leave-one-out on the file's other rows of that device and precision (a row never
//     calibrates its own prediction). A precision with no such rows borrows a near one's fit from the file
//     (mo_plan_calib_fit), and failing that takes what the committed results/ rows of its device give that
//     precision (their own fit, or a near one's), the validated file left out, as `memopt plan` would; the
//     stated defaults only when neither has one. The goal is within 15%; misses are reported, not failed.
// Writes <--out-dir or plots>/plan_validate.csv and, when gnuplot is installed, plan_validate.png
// from plots/plan_validate.gp.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/planner.h"
#include "kernels/knobs.h"
#include "bench/plot.h"
#include "models/model.h"

#define TIME_GOAL 0.15

typedef struct vrow {
    int compared_mem, compared_time;
    int64_t meas_peak, pred_peak;
    double meas_ms, pred_ms, err;
    char why[160];   // why something was not compared
    char calib[224];
} vrow;

// A GPT row (the default model's; an empty model cell is one) by its GPT columns, another model's by
// its name and dims text, without the attention form it does not have: "cpu mlp L4 H256 I256 K10 B64 fp32 none a1 caching".
static void short_config(const mo_csv_row *r, char *buf, size_t n) {
    char split[64] = "";
    if (r->tp * r->pp > 1)
        snprintf(split, sizeof split, " tp%lld pp%lld%s", (long long)r->tp, (long long)r->pp, r->sp > 0 ? " sp" : "");
    if (r->offload[0] && strcmp(r->offload, "none")) { // an offloaded row never looks like the same row without
        size_t k = strlen(split);
        snprintf(split + k, sizeof split - k, " offload %s", r->offload);
    }
    const char *ksep = r->knobs[0] ? " " : ""; // two rows that differ in knobs never look alike
    if (!r->model[0] || !strcmp(r->model, mo_model_default()->name))
        snprintf(buf, n, "%s L%lld C%lld T%lld B%lld %s %s %s a%lld %s%s%s%s", r->backend, (long long)r->layers,
                 (long long)r->hidden, (long long)r->seq, (long long)r->batch, r->precision,
                 !strcmp(r->attn, "fused") ? "fused" : "mat", r->ckpt, (long long)r->accum, r->alloc, split, ksep, r->knobs);
    else
        snprintf(buf, n, "%s %s %s B%lld %s%s%s %s a%lld %s%s%s%s", r->backend, r->model, r->dims, (long long)r->batch,
                 r->precision, r->attn[0] ? " " : "", r->attn, r->ckpt, (long long)r->accum, r->alloc, split, ksep, r->knobs);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

// Text cells without commas or quotes, so gnuplot's plain comma separator reads the file.
static void csv_text(FILE *f, const char *s) {
    for (; *s; s++) fputc(*s == ',' ? ';' : *s == '"' ? '\'' : *s, f);
}

static mo_status write_csv(const char *path, const mo_csv_row *rows, const vrow *v, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f) return MO_FAIL(MO_ERR_IO, "--validate: cannot write %s", path);
    fprintf(f, "row,backend,device_name,precision,attn,ckpt,accum,layers,hidden,seq,batch,status,measured_peak_bytes,"
               "predicted_peak_bytes,peak_diff_bytes,measured_step_ms,predicted_step_ms,step_error,calibration\n");
    for (size_t i = 0; i < n; i++) {
        const mo_csv_row *r = &rows[i];
        fprintf(f, "%zu,%s,", i + 1, r->backend);
        csv_text(f, r->device_name);
        fprintf(f, ",%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%s,", r->precision, r->attn, r->ckpt, (long long)r->accum, (long long)r->layers,
                (long long)r->hidden, (long long)r->seq, (long long)r->batch, r->status);
        if (v[i].compared_mem)
            fprintf(f, "%lld,%lld,%lld,", (long long)v[i].meas_peak, (long long)v[i].pred_peak, (long long)(v[i].pred_peak - v[i].meas_peak));
        else
            fprintf(f, ",,,");
        if (v[i].compared_time) fprintf(f, "%.4f,%.4f,%.5f,", v[i].meas_ms, v[i].pred_ms, v[i].err);
        else fprintf(f, ",,,");
        csv_text(f, v[i].calib);
        fputc('\n', f);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    return bad ? MO_FAIL(MO_ERR_IO, "--validate: error writing %s", path) : MO_OK;
}

static void draw(const char *csv, const char *png, const char *subtitle) {
    char gp[MO_PATH_MAX];
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("  gnuplot is not installed: no figure (plots/plan_validate.gp draws one from %s)\n", csv);
        return;
    }
    if (!mo_plan_find_file("plots/plan_validate.gp", gp, sizeof gp)) {
        printf("  plots/plan_validate.gp not found: no figure\n");
        return;
    }
    char cmd[4 * MO_PATH_MAX];
    snprintf(cmd, sizeof cmd, "gnuplot -e \"datafile='%s'; outfile='%s'; subtitle='%s'\" '%s'", csv, png, subtitle, gp);
    if (system(cmd) == 0) printf("  figure: %s\n", png);
    else printf("  gnuplot failed on %s: no figure\n", gp);
}

mo_status mo_plan_validate(const mo_config *cfg) {
    const char *path = cfg->validate;
    if (access(path, R_OK) != 0) return MO_FAIL(MO_ERR_INVALID, "--validate: cannot read '%s' (accepted: a memopt results CSV)", path);
    mo_csv_row *rows = NULL;
    size_t n = 0;
    if (mo_csv_read(path, &rows, &n) != MO_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mo_errmsg_plain());
        return MO_FAIL(MO_ERR_INVALID, "--validate: %s", msg);
    }
    mo_gpu_catalog cat;
    int have_cat = mo_gpu_catalog_load(NULL, &cat) == MO_OK;
    if (!have_cat) mo_clear_error();
    mo_run_env env;
    // Where the table goes: --csv FILE, else plan_validate.csv in --out-dir (created now, before any
    // work, so a bad folder is refused at once), else plots/.
    char dir[MO_PATH_MAX], csv[MO_PATH_MAX + 32], png[MO_PATH_MAX + 32];
    if (cfg->base.out_dir[0]) snprintf(dir, sizeof dir, "%s", cfg->base.out_dir);
    else if (!mo_plan_find_file("plots", dir, sizeof dir)) snprintf(dir, sizeof dir, ".");
    if (cfg->base.csv[0]) snprintf(csv, sizeof csv, "%s", cfg->base.csv);
    else snprintf(csv, sizeof csv, "%s/plan_validate.csv", dir);
    snprintf(png, sizeof png, "%s/plan_validate.png", dir);
    mo_status st = cfg->base.out_dir[0] ? mo_plot_mkdir(dir) : MO_OK;
    if (st == MO_OK && cfg->base.csv[0]) st = mo_mkdir_parent(csv, "--csv");
    if (st != MO_OK) { free(rows); if (have_cat) mo_gpu_catalog_free(&cat); return st; }
    st = mo_plan_env_init(&env);
    vrow *v = calloc(n ? n : 1, sizeof *v);
    if (!v) st = MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    double t0 = mo_plan_now();
    mo_plan_calib *results_cal = NULL; // the committed results' fit, for precisions the file cannot fit
    const mo_gpu_spec *results_g = NULL;
    printf("memopt plan --validate %s: %zu rows; peaks re-run on the dry backend, times from the roofline calibrated leave-one-out\n",
           path, n);
    printf("  %4s  %-62s %15s %15s %10s  %9s %9s %7s\n", "row", "configuration", "peak measured", "peak predicted", "diff B",
           "ms meas", "ms pred", "error");
    for (size_t i = 0; i < n && st == MO_OK; i++) {
        const mo_csv_row *r = &rows[i];
        vrow *x = &v[i];
        mo_run_config rc;
        if (mo_plan_config_from_row(r, &rc) != MO_OK) {
            snprintf(x->why, sizeof x->why, "not replayable: %s", mo_errmsg_plain());
            mo_clear_error();
        } else if ((!strcmp(r->status, "ok") || !strcmp(r->status, "oom")) && r->peak_allocated_bytes >= 0) {
            mo_csv_row d;
            char saved[512], ignored[512]; // the dry replay under the row's knobs (an engine's scratch)
            // ... and at its workspace budget, which a row from before its model's default was raised
            // ran at without the knob (mo_plan_row_workspace_mib)
            char knobs[sizeof r->knobs + 48], mib[24];
            snprintf(knobs, sizeof knobs, "%s", r->knobs);
            snprintf(mib, sizeof mib, "%ld", mo_plan_row_workspace_mib(r));
            (void)mo_knobs_insert(knobs, sizeof knobs, "MEMOPT_WORKSPACE_MIB", mib); // kept when already there
            const int applied = mo_knobs_apply(knobs, saved, sizeof saved) == 0;
            st = mo_plan_predict(&rc, &env, &d);
            if (applied) mo_knobs_apply(saved, ignored, sizeof ignored);
            if (st != MO_OK) break;
            if (strcmp(d.status, "ok") && strcmp(d.status, "oom")) {
                snprintf(x->why, sizeof x->why, "dry replay: %s: %.120s", d.status, d.detail);
            } else {
                x->compared_mem = 1;
                x->meas_peak = r->peak_allocated_bytes;
                x->pred_peak = d.peak_allocated_bytes;
            }
        } else {
            snprintf(x->why, sizeof x->why, "status %s: no peak to compare", r->status);
        }
        const mo_gpu_spec *g = have_cat ? mo_gpu_catalog_match_device(&cat, r->device_name) : NULL;
        if (x->why[0] == '\0' && r->tp * r->pp > 1) {
            snprintf(x->why, sizeof x->why, "split run: the roofline models the unsplit step (peak compared only)");
        } else if (x->why[0] == '\0' && mo_plan_row_other_workspace(r)) {
            snprintf(x->why, sizeof x->why, "another workspace budget (%ld MiB): the roofline models the model's default (peak compared only)",
                     mo_plan_row_workspace_mib(r));
        } else if (x->why[0] == '\0' && !strcmp(r->backend, "cuda") && !strcmp(r->status, "ok") && r->step_ms > 0 && g) {
            mo_plan_calib cal;
            mo_plan_calib_fit(&cal, g, rows, n, (long)i);
            // a precision on the defaults (no row of it or of a near one in the file, but this): the
            // committed results' fit for the device, the validated file left out (fitted once a device)
            const int p = (int)rc.precision;
            if (!strncmp(cal.how[p], "defaults", 8)) {
                if (!results_cal || results_g != g) {
                    if (!results_cal) results_cal = malloc(sizeof *results_cal);
                    if (results_cal) {
                        char rdir[MO_PATH_MAX];
                        if (!mo_plan_find_file("results", rdir, sizeof rdir)) snprintf(rdir, sizeof rdir, "results");
                        mo_plan_calib_load_except(results_cal, g, rdir, path, NULL);
                        results_g = g;
                    }
                }
                if (results_cal && strncmp(results_cal->how[p], "defaults", 8)) { // its own rows or a near one's
                    cal.eff_gemm[p] = results_cal->eff_gemm[p];
                    cal.eff_mem[p] = results_cal->eff_mem[p];
                    snprintf(cal.how[p], sizeof cal.how[p], "results/'s, %.80s", results_cal->how[p]);
                }
            }
            mo_roofline roof;
            mo_plan_row_roofline(r, &rc, g, &roof);
            // the host work at the row's own thread count, not this process's
            if (rc.offload == MO_OFFLOAD_OPTIMIZER) roof.host_s = mo_plan_host_s(&roof, mo_plan_row_host_threads(r->knobs));
            x->compared_time = 1;
            x->meas_ms = r->step_ms;
            x->pred_ms = mo_plan_step_ms(&roof, &cal, rc.precision);
            x->err = x->pred_ms / x->meas_ms - 1;
            snprintf(x->calib, sizeof x->calib, "%s %s%s%s", g->key, cal.how[rc.precision],
                     rc.offload == MO_OFFLOAD_OPTIMIZER ? "; " : "", rc.offload == MO_OFFLOAD_OPTIMIZER ? cal.host_how : "");
            for (char *p = x->calib; *p; p++)
                if (*p == ',') *p = ';';
        }
        char conf[1024], ms1[16] = "-", ms2[16] = "-", er[16] = "-", p1[24] = "-", p2[24] = "-", df[24] = "-";
        short_config(r, conf, sizeof conf);
        if (x->compared_mem) {
            snprintf(p1, sizeof p1, "%lld", (long long)x->meas_peak);
            snprintf(p2, sizeof p2, "%lld", (long long)x->pred_peak);
            snprintf(df, sizeof df, "%lld", (long long)(x->pred_peak - x->meas_peak));
        }
        if (x->compared_time) {
            snprintf(ms1, sizeof ms1, "%.2f", x->meas_ms);
            snprintf(ms2, sizeof ms2, "%.2f", x->pred_ms);
            snprintf(er, sizeof er, "%+.1f%%", 100 * x->err);
        }
        printf("  %4zu  %-62.62s %15s %15s %10s  %9s %9s %7s%s%s\n", i + 1, conf, p1, p2, df, ms1, ms2, er, x->why[0] ? "  " : "", x->why);
    }
    int nm = 0, exact = 0, nt = 0, within = 0;
    int64_t worst = 0;
    double *errs = malloc((n ? n : 1) * sizeof *errs);
    for (size_t i = 0; st == MO_OK && i < n; i++) {
        if (v[i].compared_mem) {
            nm++;
            int64_t d = v[i].pred_peak - v[i].meas_peak;
            exact += d == 0;
            if (llabs(d) > llabs(worst)) worst = d;
        }
        if (v[i].compared_time && errs) {
            errs[nt++] = fabs(v[i].err);
            within += fabs(v[i].err) <= TIME_GOAL;
        }
    }
    if (st == MO_OK) {
        printf("\nsummary\n  peak memory: %d rows compared, %d exact to the byte", nm, exact);
        if (nm > exact) printf(", %d differ (largest difference %+lld B)", nm - exact, (long long)worst);
        printf("\n");
        if (nt && errs) {
            qsort(errs, (size_t)nt, sizeof *errs, cmp_double);
            double med = nt % 2 ? errs[nt / 2] : 0.5 * (errs[nt / 2 - 1] + errs[nt / 2]);
            printf("  step time: %d rows compared, %d within %.0f%% (goal), median |error| %.1f%%, worst %.1f%%\n", nt, within,
                   100 * TIME_GOAL, 100 * med, 100 * errs[nt - 1]);
        } else {
            printf("  step time: no rows to compare (needs backend cuda rows with a step time on a GPU of the catalog%s)\n",
                   have_cat ? "" : "; the catalog bench/gpus.txt was not found");
        }
        st = write_csv(csv, rows, v, n);
        if (st == MO_OK) {
            printf("  table: %s\n", csv);
            char sub[300];
            mo_plot_subtitle(rows, n, sub, sizeof sub);
            draw(csv, png, sub);
        }
        printf("  validated in %.3f s\n", mo_plan_now() - t0);
    }
    if (st == MO_OK && nm > exact)
        st = MO_FAIL(MO_ERR_INTERNAL, "--validate: %d of %d rows' peaks differ from the dry prediction (largest %+lld B): the plan must be exact",
                     nm - exact, nm, (long long)worst);
    free(errs);
    free(v);
    free(results_cal);
    free(rows);
    if (have_cat) mo_gpu_catalog_free(&cat);
    return st;
}
