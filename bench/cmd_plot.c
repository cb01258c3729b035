// memopt plot RESULTS.csv: four gnuplot figures (PNG and SVG) into plots/ or --out-dir. The C side
// chooses the rows, derives the savings and overheads (bench/derive.c, shared with claims) and
// writes one plain data file per figure beside it, so a figure can be redrawn or inspected
// without memopt; the drawing itself is plots/*.gp.
#include "bench/plot.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench/cli.h"
#include "bench/derive.h"
#include "bench/config.h"
#include "models/model.h"

#define KEY_MAX 1024
#define GIB (1024.0 * 1024.0 * 1024.0)

// ---------------------------------------------------------------- gnuplot and its scripts

static int on_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path || !*path) return 0;
    char dir[PATH_MAX], file[PATH_MAX + 64];
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)k, p);
        snprintf(file, sizeof file, "%s/%s", dir[0] ? dir : ".", prog);
        if (access(file, X_OK) == 0) return 1;
        p += k;
        if (*p == ':') p++;
    }
    return 0;
}

mo_status mo_plot_check_gnuplot(void) {
    if (on_path("gnuplot")) return MO_OK;
    return MO_FAIL(MO_ERR_UNSUPPORTED, "gnuplot not found on PATH: install the package gnuplot-nox (apt-get install gnuplot-nox)");
}

static int has_scripts(const char *dir) {
    char f[PATH_MAX + 32];
    snprintf(f, sizeof f, "%s/common.gp", dir);
    return access(f, R_OK) == 0;
}

mo_status mo_plot_scripts_dir(char *buf, size_t n) {
    const char *env = getenv("MEMOPT_PLOT_SCRIPTS");
    if (env && *env) {
        if (!has_scripts(env)) return MO_FAIL(MO_ERR_UNSUPPORTED, "MEMOPT_PLOT_SCRIPTS=%s holds no common.gp", env);
        snprintf(buf, n, "%s", env);
        return MO_OK;
    }
    if (has_scripts("plots")) {
        snprintf(buf, n, "plots");
        return MO_OK;
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *const up[] = {"/plots", "/../plots", "/../../plots"};
        for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
            char d[PATH_MAX + 16];
            snprintf(d, sizeof d, "%s%s", exe, up[i]);
            if (has_scripts(d)) {
                snprintf(buf, n, "%s", d);
                return MO_OK;
            }
        }
    }
    return MO_FAIL(MO_ERR_UNSUPPORTED,
                   "the gnuplot scripts (plots/*.gp) are not in ./plots nor beside the memopt binary: run from the source"
                   " tree or set MEMOPT_PLOT_SCRIPTS=DIR");
}

mo_status mo_plot_mkdir(const char *dir) { return mo_mkdir_p(dir, "--out-dir"); }

mo_status mo_plot_run(const char *script, const char *outdir, const char *vars) {
    MO_TRY(mo_plot_check_gnuplot());
    char dir[PATH_MAX];
    MO_TRY(mo_plot_scripts_dir(dir, sizeof dir));
    // The paths travel inside gnuplot string literals: a quote would end them.
    if (strchr(outdir, '\'') || strchr(dir, '\''))
        return MO_FAIL(MO_ERR_INVALID, "--out-dir: '%s' contains a single quote, which gnuplot cannot take", outdir);
    char defs[3 * PATH_MAX], file[PATH_MAX + 64];
    snprintf(defs, sizeof defs, "outdir='%s'; scriptdir='%s'; %s", outdir, dir, vars ? vars : "");
    snprintf(file, sizeof file, "%s/%s", dir, script);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return MO_FAIL(MO_ERR_IO, "gnuplot: fork failed: %s", strerror(errno));
    if (pid == 0) {
        char *argv[] = {"gnuplot", "-e", defs, file, NULL};
        execvp("gnuplot", argv);
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) return MO_FAIL(MO_ERR_IO, "gnuplot: wait failed: %s", strerror(errno));
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return MO_FAIL(MO_ERR_INTERNAL, "gnuplot failed on %s (exit %d; its messages are above)", file,
                       WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    return MO_OK;
}

// ---------------------------------------------------------------- labels

// The model of a row (an empty cell is the default model's, as csv.c reads schema 1) and its
// dimension text: the dims column, or for a row without one its GPT columns in GPT's dims form.
static const char *model_of(const mo_csv_row *r) { return r->model[0] ? r->model : mo_model_default()->name; }

static void dims_of(const mo_csv_row *r, char *buf, size_t n) {
    if (r->dims[0]) snprintf(buf, n, "%s", r->dims);
    else snprintf(buf, n, "L%lld C%lld H%lld T%lld V%lld", (long long)r->layers, (long long)r->hidden, (long long)r->heads,
                  (long long)r->seq, (long long)r->vocab);
}

// The configuration fields a label may show; a label shows only those that differ between the
// rows of the figure, so "fp32 ckpt:full acc4" rather than a 200-character key. The shape is the
// model and the words of its dims text, one field each ("L12", "C768", ... for GPT; "L4", "H256",
// "I256", "K10" for the MLP), so two rows that differ only in an MLP's input width get "I256" and
// "I65536", and a gpt row beside an mlp row gets the model name and the words that differ.
#define DIM_WORDS 8 // the last field holds the rest of a longer dims text
enum { F_BACKEND, F_MODEL, F_DIM0, F_BATCH = F_DIM0 + DIM_WORDS, F_PREC, F_ATTN, F_CKPT, F_ACCUM, F_TP, F_PP, F_ALLOC,
       F_CAP, F_COUNT };
#define FIELD_MAX 192 // a field's text: at most a whole dims text

// Word i of r's dims text ("" past its end).
static void dims_word(const mo_csv_row *r, int i, char *buf, size_t n) {
    char d[FIELD_MAX];
    dims_of(r, d, sizeof d);
    const char *p = d;
    for (int k = 0;; k++) {
        p += strspn(p, " ");
        size_t len = k == DIM_WORDS - 1 ? strlen(p) : strcspn(p, " ");
        if (!*p || k == i) { snprintf(buf, n, "%.*s", (int)len, p); return; }
        p += len;
    }
}

static void field(const mo_csv_row *r, int f, char *buf, size_t n) {
    if (f >= F_DIM0 && f < F_DIM0 + DIM_WORDS) { dims_word(r, f - F_DIM0, buf, n); return; }
    switch (f) {
    case F_BACKEND: snprintf(buf, n, "%s", r->backend); break;
    case F_MODEL: snprintf(buf, n, "%s", model_of(r)); break;
    case F_BATCH: snprintf(buf, n, "B%lld", (long long)r->batch); break;
    case F_PREC: snprintf(buf, n, "%s", r->precision); break;
    case F_ATTN: snprintf(buf, n, "%s", !strcmp(r->attn, "materialized") ? "mat" : r->attn); break; // "": no attention
    case F_CKPT: snprintf(buf, n, "ckpt:%s", r->ckpt); break;
    case F_ACCUM: snprintf(buf, n, "acc%lld", (long long)r->accum); break;
    case F_TP: snprintf(buf, n, "tp%lld", (long long)r->tp); break;
    case F_PP: snprintf(buf, n, "pp%lld", (long long)r->pp); break;
    case F_ALLOC: snprintf(buf, n, "%s", r->alloc); break;
    case F_CAP:
        if (r->cap_bytes <= 0) snprintf(buf, n, "cap:none");
        else snprintf(buf, n, "cap:%.2fGiB", (double)r->cap_bytes / GIB);
        break;
    default: buf[0] = '\0';
    }
}

typedef struct labeler {
    int show[F_COUNT];
} labeler;

// Which fields vary among rows[idx[0..m)]; skip_cap leaves the cap out (it is an axis itself).
static void labeler_init(labeler *L, const mo_csv_row *rows, const size_t *idx, size_t m, int skip_cap) {
    memset(L, 0, sizeof *L);
    int any = 0;
    for (int f = 0; f < F_COUNT && m >= 2; f++) {
        if (skip_cap && f == F_CAP) continue;
        char a[FIELD_MAX], b[FIELD_MAX];
        for (size_t k = 1; k < m && !L->show[f]; k++) {
            field(&rows[idx[0]], f, a, sizeof a);
            field(&rows[idx[k]], f, b, sizeof b);
            if (strcmp(a, b)) L->show[f] = 1;
        }
        any |= L->show[f];
    }
    if (!any) L->show[F_PREC] = L->show[F_CKPT] = 1; // one configuration: still say what it is
}

// An empty field (the attention form of a model without attention, a dims word past the end of a
// shorter dims text) prints nothing.
static void label(const labeler *L, const mo_csv_row *r, char *buf, size_t n) {
    buf[0] = '\0';
    for (int f = 0; f < F_COUNT; f++) {
        if (!L->show[f]) continue;
        char v[FIELD_MAX];
        field(r, f, v, sizeof v);
        if (!v[0]) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", len ? " " : "", v);
    }
    for (char *p = buf; *p; p++)
        if (*p == '"') *p = '\''; // the label is a quoted gnuplot data field
}

// ---------------------------------------------------------------- the title's second line

static void device_of(const mo_csv_row *r, char *buf, size_t n) {
    if (!strcmp(r->backend, "dry")) snprintf(buf, n, "dry backend (no GPU: memory exact, no times)");
    else if (!strcmp(r->backend, "cpu")) snprintf(buf, n, "cpu backend (the reference kernels)");
    else snprintf(buf, n, "%s", r->device_name[0] ? r->device_name : r->backend);
}

// The preset of model m whose dims text is dims; NULL when none is.
static const char *preset_of(const mo_model_ops *m, const char *dims) {
    for (int i = 0; m && m->dims_text && i < m->n_presets; i++) {
        const mo_preset *p = &m->presets[i];
        mo_run_config rc;
        memset(&rc, 0, sizeof rc);
        rc.layers = p->layers; rc.hidden = p->hidden; rc.heads = p->heads; rc.seq = p->seq; rc.vocab = p->vocab;
        rc.batch = p->batch; rc.input = p->input; rc.classes = p->classes;
        char t[FIELD_MAX];
        if (!strcmp(m->dims_text(&rc, t, sizeof t), dims)) return p->name;
    }
    return NULL;
}

// "GPT gpt2-124m, batch 8 on NVIDIA H200", "MLP L16 H1024 I1024 K1000, batch 16384 on NVIDIA H200": the
// model (its name in capitals) and its dimensions when all rows share them, "several MLP shapes" or
// "several models" when not. GPT's shape is named by its preset when it is one (the GPT-2 sizes are
// known by those names); another model's preset names say what the preset is for, not its size, so
// its title gives the dims text.
void mo_plot_subtitle(const mo_csv_row *rows, size_t n, char *buf, size_t bn) {
    if (n == 0) { snprintf(buf, bn, "no rows"); return; }
    const mo_csv_row *a = &rows[0];
    int same_model = 1, same_shape = 1, same_batch = 1, same_dev = 1;
    char d0[160], d[160], s0[FIELD_MAX], s[FIELD_MAX];
    device_of(a, d0, sizeof d0);
    dims_of(a, s0, sizeof s0);
    for (size_t i = 1; i < n; i++) {
        const mo_csv_row *r = &rows[i];
        same_model &= !strcmp(model_of(r), model_of(a));
        dims_of(r, s, sizeof s);
        same_shape &= same_model && !strcmp(s, s0);
        same_batch &= r->batch == a->batch;
        device_of(r, d, sizeof d);
        same_dev &= !strcmp(d, d0);
    }
    char name[32];
    snprintf(name, sizeof name, "%s", model_of(a));
    for (char *q = name; *q; q++)
        if (*q >= 'a' && *q <= 'z') *q = (char)(*q - 'a' + 'A');
    char model[256] = "several models";
    if (same_shape) {
        const mo_model_ops *m = mo_model_find(model_of(a));
        const char *hit = m && m == mo_model_default() ? preset_of(m, s0) : NULL;
        snprintf(model, sizeof model, "%s %s", name, hit ? hit : s0);
    } else if (same_model) {
        snprintf(model, sizeof model, "several %s shapes", name);
    }
    char batch[48] = "";
    if (same_batch) snprintf(batch, sizeof batch, ", batch %lld", (long long)a->batch);
    snprintf(buf, bn, "%s%s on %s", model, batch, same_dev ? d0 : "several devices");
    for (char *q = buf; *q; q++)
        if (*q == '\'' || *q == '"') *q = '`';
}

// ---------------------------------------------------------------- the rows to draw

typedef struct span {
    size_t first, last; // a key's first and last row
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

// The last row of each configuration key, in the order keys first appear.
static mo_status latest_rows(const mo_csv_row *rows, size_t n, size_t **out, size_t *m) {
    *out = malloc((n ? n : 1) * sizeof **out);
    mo_csv_keyed *k = malloc((n ? n : 1) * sizeof *k);
    span *g = malloc((n ? n : 1) * sizeof *g);
    if (!*out || !k || !g) {
        free(*out);
        free(k);
        free(g);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory for %zu rows", n);
    }
    for (size_t i = 0; i < n; i++) {
        mo_csv_config_key(&rows[i], k[i].key, KEY_MAX);
        k[i].index = i;
    }
    qsort(k, n, sizeof *k, mo_csv_keyed_cmp);
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(k[i].key, k[i - 1].key)) g[(*m)++].first = k[i].index;
        g[*m - 1].last = k[i].index;
    }
    qsort(g, *m, sizeof *g, cmp_span);
    for (size_t j = 0; j < *m; j++) (*out)[j] = g[j].last;
    free(k);
    free(g);
    return MO_OK;
}

static FILE *open_data(const char *outdir, const char *name, mo_status *st) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", outdir, name);
    FILE *f = fopen(p, "w");
    if (!f) *st = MO_FAIL(MO_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
    return f;
}

static double gib(int64_t b) { return b >= 0 ? (double)b / GIB : NAN; }

// (a) memory by category
static mo_status data_memory(const mo_csv_row *rows, const size_t *idx, size_t m, const char *outdir, int *count) {
    mo_status st = MO_OK;
    FILE *f = open_data(outdir, "memory_by_category.dat", &st);
    if (!f) return st;
    size_t *sel = calloc(m ? m : 1, sizeof *sel), k = 0;
    if (!sel) { fclose(f); return MO_FAIL(MO_ERR_INTERNAL, "host out of memory"); }
    for (size_t i = 0; i < m; i++)
        if (mo_derive_measured(&rows[idx[i]]) || !strcmp(rows[idx[i]].status, "oom")) sel[k++] = idx[i];
    labeler L;
    labeler_init(&L, rows, sel, k, 0);
    fprintf(f, "# label param grad optim master activation workspace peak_allocated oom cap (GiB; each category at its own"
               " peak; an oom row has no bars, oom 1 and the cap it did not fit)\n");
    for (size_t i = 0; i < k; i++) {
        const mo_csv_row *r = &rows[sel[i]];
        char lb[256], cap[32] = "none";
        label(&L, r, lb, sizeof lb);
        if (r->cap_bytes > 0) mo_format_bytes((uint64_t)r->cap_bytes, cap, sizeof cap);
        char *sp = strchr(cap, ' '); // "8.00 GiB" -> "8.00GiB": one field of the data file
        if (sp) memmove(sp, sp + 1, strlen(sp));
        if (strcmp(r->status, "oom"))
            fprintf(f, "\"%s\" %.6f %.6f %.6f %.6f %.6f %.6f %.6f 0 %s\n", lb, gib(r->param_bytes), gib(r->grad_bytes),
                    gib(r->optim_bytes), gib(r->master_bytes), gib(r->activation_bytes), gib(r->workspace_bytes),
                    gib(r->peak_allocated_bytes), cap);
        else
            fprintf(f, "\"%s\" 0 0 0 0 0 0 NaN 1 %s\n", lb, cap);
    }
    *count = (int)k;
    free(sel);
    fclose(f);
    return MO_OK;
}

static const mo_csv_row *sort_rows; // qsort's comparator has no user pointer

static int cmp_by_peak(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int64_t px = sort_rows[x].peak_allocated_bytes, py = sort_rows[y].peak_allocated_bytes;
    if (px != py) return (px > py) - (px < py);
    return (x > y) - (x < y);
}

// (b) peak against throughput, with the Pareto frontier: no other run has both less (or equal)
// peak memory and more (or equal) throughput, one of them strictly.
static mo_status data_throughput(const mo_csv_row *rows, const size_t *idx, size_t m, const char *outdir, int *count) {
    mo_status st = MO_OK;
    FILE *f = open_data(outdir, "peak_vs_throughput.dat", &st);
    if (!f) return st;
    FILE *pf = open_data(outdir, "pareto.dat", &st);
    if (!pf) { fclose(f); return st; }
    size_t *sel = calloc(m ? m : 1, sizeof *sel), k = 0;
    if (!sel) { fclose(f); fclose(pf); return MO_FAIL(MO_ERR_INTERNAL, "host out of memory"); }
    for (size_t i = 0; i < m; i++) {
        const mo_csv_row *r = &rows[idx[i]];
        if (mo_derive_measured(r) && isfinite(r->items_per_s) && r->peak_allocated_bytes >= 0) sel[k++] = idx[i];
    }
    labeler L;
    labeler_init(&L, rows, sel, k, 0);
    fprintf(f, "# label peak_allocated_GiB items_per_s on_frontier number point_label (the point's number; points that"
               " coincide share one label)\n");
    fprintf(pf, "# the Pareto frontier, by peak: peak_allocated_GiB items_per_s\n");
    // By peak (ties in row order), then one pass: a point is dominated when a smaller peak has at
    // least its throughput, or the same peak has more. n log n: a CSV may hold 100k rows.
    sort_rows = rows;
    qsort(sel, k, sizeof *sel, cmp_by_peak);
    // Number labels that would print over each other share one label. A label runs to the right of its
    // point, about 1.1% of the x axis a character at the committed size (the axis ends near 1.15x the
    // largest peak): a point joins the first label, of a point at a smaller or equal peak, whose text
    // (with the new number) reaches it on the same line (within 3% of the y axis). Points come by peak,
    // so a label's anchor is its group's leftmost point. Quadratic in the labels, and a figure of more
    // than MAX_NUMBERED points cannot be read point by point anyway: above it, points carry no number.
    enum { MAX_NUMBERED = 400 };
    double max_peak = 0, max_tps = 0;
    for (size_t a = 0; a < k; a++) {
        if ((double)rows[sel[a]].peak_allocated_bytes > max_peak) max_peak = (double)rows[sel[a]].peak_allocated_bytes;
        if (rows[sel[a]].items_per_s > max_tps) max_tps = rows[sel[a]].items_per_s;
    }
    size_t *anchor = malloc((k ? k : 1) * sizeof *anchor); // the point whose label carries point a's number
    size_t *chars = calloc(k ? k : 1, sizeof *chars);      // an anchor's label length so far
    if (!anchor || !chars) {
        free(anchor); free(chars); free(sel); fclose(f); fclose(pf);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory");
    }
    for (size_t a = 0; a < k; a++) {
        const mo_csv_row *r = &rows[sel[a]];
        char num[24];
        size_t w = (size_t)snprintf(num, sizeof num, "%zu", a + 1);
        anchor[a] = a;
        for (size_t b = 0; b < a && k <= MAX_NUMBERED; b++) {
            if (anchor[b] != b) continue; // only anchors carry labels
            const mo_csv_row *o = &rows[sel[b]];
            double reach = (double)(chars[b] + 1 + w + 1) * 0.011 * 1.15 * max_peak;
            if ((double)(r->peak_allocated_bytes - o->peak_allocated_bytes) <= reach &&
                fabs(o->items_per_s - r->items_per_s) <= 0.03 * max_tps) {
                anchor[a] = b;
                chars[b] += 1 + w;
                break;
            }
        }
        if (anchor[a] == a) chars[a] = w;
    }
    double best_below = -INFINITY; // the best throughput at a peak below the current group's
    for (size_t g0 = 0, g1; g0 < k; g0 = g1) {
        double group_best = -INFINITY;
        for (g1 = g0; g1 < k && rows[sel[g1]].peak_allocated_bytes == rows[sel[g0]].peak_allocated_bytes; g1++)
            if (rows[sel[g1]].items_per_s > group_best) group_best = rows[sel[g1]].items_per_s;
        for (size_t a = g0; a < g1; a++) {
            const mo_csv_row *r = &rows[sel[a]];
            int dominated = best_below >= r->items_per_s || group_best > r->items_per_s;
            char lb[256], pl[256] = "";
            label(&L, r, lb, sizeof lb);
            // The number label: on its group's anchor, every member's number (members follow their anchor).
            if (k <= MAX_NUMBERED && anchor[a] == a)
                for (size_t b = a; b < k; b++)
                    if (anchor[b] == a) {
                        size_t l = strlen(pl);
                        snprintf(pl + l, sizeof pl - l, "%s%zu", l ? "," : "", b + 1);
                    }
            fprintf(f, "\"%s\" %.6f %.3f %d %zu \"%s\"\n", lb, gib(r->peak_allocated_bytes), r->items_per_s, !dominated,
                    a + 1, pl);
            if (!dominated) fprintf(pf, "%.6f %.3f\n", gib(r->peak_allocated_bytes), r->items_per_s);
        }
        if (group_best > best_below) best_below = group_best;
    }
    *count = (int)k;
    free(anchor);
    free(chars);
    free(sel);
    fclose(f);
    fclose(pf);
    return MO_OK;
}

// (c) recompute overhead against memory saving, both against the same configuration with ckpt none.
static mo_status data_recompute(const mo_csv_row *rows, size_t n, const size_t *idx, size_t m, const char *outdir,
                                int *count) {
    mo_derived *d = malloc((n ? n : 1) * sizeof *d);
    size_t *sel = calloc(m ? m : 1, sizeof *sel), k = 0;
    if (!d || !sel) { free(d); free(sel); return MO_FAIL(MO_ERR_INTERNAL, "host out of memory"); }
    mo_status st = mo_derive_all(rows, n, MO_VARY_CKPT, "none", d);
    FILE *f = st == MO_OK ? open_data(outdir, "recompute_vs_saving.dat", &st) : NULL;
    if (f) {
        for (size_t i = 0; i < m; i++) {
            const mo_csv_row *r = &rows[idx[i]];
            if (strcmp(r->ckpt, "none") && isfinite(d[idx[i]].mem_saving) && isfinite(d[idx[i]].recompute_overhead))
                sel[k++] = idx[i];
        }
        labeler L;
        labeler_init(&L, rows, sel, k, 0);
        fprintf(f, "# label peak_saving_pct activation_saving_pct overhead_pct number act_label peak_label (against the same"
                   " configuration, ckpt none; points within 2.5 points of saving and 1.5 of overhead share one number label)\n");
        for (size_t i = 0; i < k; i++) {
            char lb[256], la[64] = "", lp[64] = "";
            label(&L, &rows[sel[i]], lb, sizeof lb);
            const mo_derived *x = &d[sel[i]];
            for (int which = 0; which < 2; which++) { // 0: activation saving panel, 1: peak saving panel
                char *out = which ? lp : la;
                double xi = which ? x->mem_saving : x->act_saving;
                int first = 1;
                for (size_t j = 0; j < i && first; j++) {
                    const mo_derived *y = &d[sel[j]];
                    double xj = which ? y->mem_saving : y->act_saving;
                    first = !(fabs(xi - xj) <= 0.025 && fabs(x->recompute_overhead - y->recompute_overhead) <= 0.015);
                }
                for (size_t j = i; j < k && first; j++) {
                    const mo_derived *y = &d[sel[j]];
                    double xj = which ? y->mem_saving : y->act_saving;
                    if (fabs(xi - xj) <= 0.025 && fabs(x->recompute_overhead - y->recompute_overhead) <= 0.015) {
                        size_t l = strlen(out);
                        snprintf(out + l, 64 - l, "%s%zu", l ? "," : "", j + 1);
                    }
                }
            }
            fprintf(f, "\"%s\" %.3f %.3f %.3f %zu \"%s\" \"%s\"\n", lb, 100 * x->mem_saving, 100 * x->act_saving,
                    100 * x->recompute_overhead, i + 1, la, lp);
        }
        fclose(f);
    }
    *count = (int)k;
    free(d);
    free(sel);
    return st;
}

// (d) fits / does not fit, per configuration (rows) and cap (columns).
static int status_color(const char *s) {
    if (!strcmp(s, "ok")) return 0x2ca02c;       // green
    if (!strcmp(s, "fallback")) return 0xff9f1c; // orange: fitted with a smaller micro-batch
    if (!strcmp(s, "oom")) return 0xd62728;      // red
    return 0x9e9e9e;                              // grey: invalid, error
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    // No cap (0) sorts last: it is the largest.
    if (x <= 0) x = INT64_MAX;
    if (y <= 0) y = INT64_MAX;
    return (x > y) - (x < y);
}

// The configuration of r without its cap, as a key.
static void key_without_cap(const mo_csv_row *r, char *k) {
    mo_csv_row t = *r;
    t.cap_bytes = -1;
    mo_csv_config_key(&t, k, KEY_MAX);
}

static mo_status data_fits(const mo_csv_row *rows, const size_t *idx, size_t m, const char *outdir, int *nx, int *ny) {
    int64_t *caps = malloc((m ? m : 1) * sizeof *caps);
    mo_csv_keyed *k = malloc((m ? m : 1) * sizeof *k);
    span *g = malloc((m ? m : 1) * sizeof *g);
    size_t *first = calloc(m ? m : 1, sizeof *first), *cfg_of = calloc(m ? m : 1, sizeof *cfg_of);
    if (!caps || !k || !g || !first || !cfg_of) {
        free(caps); free(k); free(g); free(first); free(cfg_of);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory");
    }
    // The caps, sorted and unique (columns); the configurations without their cap, in the order
    // they first appear (rows): both by sorting, so a CSV of 100k rows plots in n log n.
    size_t ncap = 0, ncfg = 0;
    for (size_t i = 0; i < m; i++) caps[i] = rows[idx[i]].cap_bytes > 0 ? rows[idx[i]].cap_bytes : 0;
    qsort(caps, m, sizeof *caps, cmp_i64);
    for (size_t i = 0; i < m; i++)
        if (i == 0 || cmp_i64(&caps[i], &caps[ncap - 1])) caps[ncap++] = caps[i];
    for (size_t i = 0; i < m; i++) {
        key_without_cap(&rows[idx[i]], k[i].key);
        k[i].index = i;
    }
    qsort(k, m, sizeof *k, mo_csv_keyed_cmp);
    for (size_t i = 0; i < m; i++) {
        if (i == 0 || strcmp(k[i].key, k[i - 1].key)) { g[ncfg].first = k[i].index; g[ncfg++].last = 0; }
        cfg_of[k[i].index] = ncfg - 1; // the group, renumbered below
    }
    // Number the configurations by first appearance: g[j].last holds group j's final number.
    span *order = malloc((ncfg ? ncfg : 1) * sizeof *order);
    if (!order) {
        free(caps); free(k); free(g); free(first); free(cfg_of);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory");
    }
    for (size_t j = 0; j < ncfg; j++) { order[j].first = g[j].first; order[j].last = j; }
    qsort(order, ncfg, sizeof *order, cmp_span);
    for (size_t y = 0; y < ncfg; y++) {
        g[order[y].last].last = y;
        first[y] = idx[order[y].first];
    }
    free(order);
    labeler L;
    labeler_init(&L, rows, first, ncfg, 1);
    mo_status st = MO_OK;
    FILE *f = open_data(outdir, "fits_by_cap.dat", &st);
    if (f) {
        fprintf(f, "# cap_index config_index rgb status cap_label config_label\n");
        for (size_t i = 0; i < m; i++) {
            const mo_csv_row *r = &rows[idx[i]];
            int64_t c = r->cap_bytes > 0 ? r->cap_bytes : 0;
            const int64_t *at = bsearch(&c, caps, ncap, sizeof *caps, cmp_i64);
            size_t x = at ? (size_t)(at - caps) : 0, y = g[cfg_of[i]].last;
            char cl[64], lb[256];
            if (c == 0) snprintf(cl, sizeof cl, "none");
            else {
                char b[32];
                mo_format_bytes((uint64_t)c, b, sizeof b);
                double pct = r->device_mem_bytes > 0 ? 100.0 * (double)c / (double)r->device_mem_bytes : NAN;
                if (isfinite(pct)) snprintf(cl, sizeof cl, pct >= 1 ? "%s (%.0f%%)" : "%s (%.2g%%)", b, pct);
                else snprintf(cl, sizeof cl, "%s", b);
            }
            label(&L, &rows[first[y]], lb, sizeof lb);
            fprintf(f, "%zu %zu %d %s \"%s\" \"%s\"\n", x, y, status_color(r->status), r->status[0] ? r->status : "?", cl, lb);
        }
        fclose(f);
    }
    *nx = (int)ncap;
    *ny = (int)ncfg;
    free(caps);
    free(k);
    free(g);
    free(first);
    free(cfg_of);
    return st;
}

mo_status mo_plot_results(const mo_csv_row *rows, size_t n, const char *outdir, FILE *out) {
    MO_TRY(mo_plot_check_gnuplot());
    MO_TRY(mo_plot_mkdir(outdir));
    size_t *idx = NULL, m = 0;
    MO_TRY(latest_rows(rows, n, &idx, &m));
    int n_mem = 0, n_tp = 0, n_rec = 0, nx = 0, ny = 0;
    mo_status st = data_memory(rows, idx, m, outdir, &n_mem);
    if (st == MO_OK) st = data_throughput(rows, idx, m, outdir, &n_tp);
    if (st == MO_OK) st = data_recompute(rows, n, idx, m, outdir, &n_rec);
    if (st == MO_OK) st = data_fits(rows, idx, m, outdir, &nx, &ny);
    // The throughput axis counts the models' items: tokens for gpt, samples for mlp, "items" when mixed.
    const char *items = NULL;
    for (size_t i = 0; i < m; i++) {
        const mo_model_ops *mo = mo_model_find(rows[idx[i]].model[0] ? rows[idx[i]].model : "gpt");
        const char *it = mo ? mo->item : "items";
        if (items && strcmp(items, it)) { items = "items"; break; }
        items = it;
    }
    free(idx);
    MO_TRY(st);
    char vars[1100], sub[300];
    mo_plot_subtitle(rows, n, sub, sizeof sub);
    static const struct { const char *script, *figure; } figs[] = {
        {"memory_by_category.gp", "memory_by_category"},
        {"peak_vs_throughput.gp", "peak_vs_throughput"},
        {"recompute_vs_saving.gp", "recompute_vs_saving"},
        {"fits_by_cap.gp", "fits_by_cap"},
    };
    snprintf(vars, sizeof vars, "n_mem=%d; n_tp=%d; n_rec=%d; nx=%d; ny=%d; subtitle='%s'; items='%s'", n_mem, n_tp, n_rec, nx,
             ny, sub, items ? items : "tokens");
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
        MO_TRY(mo_plot_run(figs[i].script, outdir, vars));
        if (out) fprintf(out, "  %s/%s.png, .svg\n", outdir, figs[i].figure);
    }
    return MO_OK;
}

mo_status mo_cmd_plot(const mo_config *cfg) {
    const char *path = cfg->args[0];
    const char *outdir = cfg->base.out_dir[0] ? cfg->base.out_dir : "plots";
    MO_TRY(mo_plot_check_gnuplot()); // before any work: the one-line reason names the package
    int trace1 = mo_plot_is_trace(path), trace2 = cfg->n_args == 2 && mo_plot_is_trace(cfg->args[1]);
    if (cfg->n_args == 2 && !(trace1 && trace2))
        return MO_FAIL(MO_ERR_INVALID, "memopt plot: two files are two traces (memopt run --trace); got '%s' and '%s'", path,
                       cfg->args[1]);
    if (trace1) {
        const char *paths[2] = {cfg->args[0], cfg->args[1]};
        printf("memopt plot: the allocation timeline of %s%s%s into %s/\n", path, cfg->n_args == 2 ? " against " : "",
               cfg->n_args == 2 ? cfg->args[1] : "", outdir);
        return mo_plot_timeline(paths, cfg->n_args, outdir, stdout);
    }
    mo_csv_row *rows = NULL;
    size_t n = 0;
    mo_status st = mo_csv_read(path, &rows, &n);
    if (st != MO_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", mo_errmsg_plain());
        return MO_FAIL(MO_ERR_INVALID, "memopt plot %s: %s", path, why);
    }
    printf("memopt plot: %zu rows of %s; figures (PNG and SVG) and their data files into %s/\n", n, path, outdir);
    st = mo_plot_results(rows, n, outdir, stdout);
    free(rows);
    return st;
}
