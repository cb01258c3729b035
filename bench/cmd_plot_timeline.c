// memopt plot TRACE.csv [TRACE2.csv]: the allocation timeline of one training step (bench/trace.h).
// The first trace is drawn as allocated bytes stacked by category over the step, with its reserved
// bytes as a line and its phases (forward, backward, recompute, optimizer) as a strip; a second trace
// (say ckpt full against ckpt none) is overlaid as its allocated and reserved lines, with its own
// strip. The x axis is the share of the step's events (0-100%), so two steps of different lengths
// start and end together. Data files timeline_1.dat, timeline_2.dat, timeline_phases.dat, then
// plots/timeline.gp.
#include "bench/plot.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "strategies/alloc.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define LINE_MAX_LEN 1024

int mo_plot_is_trace(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[64] = "";
    int yes = fgets(line, sizeof line, f) && !strncmp(line, "# memopt trace:", 15);
    fclose(f);
    return yes;
}

static int cat_of(const char *name) {
    for (int c = 0; c < MO_CAT_COUNT; c++)
        if (!strcmp(name, mo_category_name((mo_category)c))) return c;
    return -1;
}

static int phase_code(const char *p) {
    if (!strcmp(p, "forward")) return 1;
    if (!strcmp(p, "backward")) return 2;
    if (!strcmp(p, "recompute")) return 3;
    if (!strcmp(p, "optimizer")) return 4;
    return 0;
}

// The order of the stack, bottom to top: the static categories, the workspace, the activations (what
// the step moves most on top, where it is read best).
static const int stack[MO_CAT_COUNT] = {MO_CAT_PARAM, MO_CAT_GRAD, MO_CAT_OPTIM, MO_CAT_MASTER, MO_CAT_WORKSPACE, MO_CAT_ACTIVATION};

typedef struct ev { int action, cat, phase; uint64_t bytes, reserved; } ev; // action 0 live, 1 alloc, 2 free

// Reads path's events; title: the comment line's text after "# memopt trace: ".
static mo_status read_trace(const char *path, ev **out, size_t *n, char *title, size_t tn) {
    FILE *f = fopen(path, "r");
    if (!f) return MO_FAIL(MO_ERR_INVALID, "memopt plot %s: cannot open: %s", path, strerror(errno));
    char line[LINE_MAX_LEN];
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    title[0] = '\0';
    mo_status st = MO_OK;
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (lineno == 1) {
            snprintf(title, tn, "%s", line + (strncmp(line, "# memopt trace: ", 16) ? 0 : 16));
            continue;
        }
        if (lineno == 2) continue; // the header
        // event,op_index,op,phase,action,tensor,category,bytes,allocated_after,reserved_after
        char *fld[10];
        int k = 0;
        for (char *p = line; k < 10;) {
            fld[k++] = p;
            char *c = strchr(p, ',');
            if (!c) break;
            *c = '\0';
            p = c + 1;
        }
        if (k != 10) { st = MO_FAIL(MO_ERR_INVALID, "memopt plot %s:%d: %d fields, a trace has 10", path, lineno, k); break; }
        if (*n == cap) {
            size_t nc = cap ? 2 * cap : 1024;
            ev *ne = realloc(*out, nc * sizeof *ne);
            if (!ne) { st = MO_FAIL(MO_ERR_INTERNAL, "host out of memory"); break; }
            *out = ne;
            cap = nc;
        }
        ev *e = &(*out)[(*n)++];
        e->action = !strcmp(fld[4], "live") ? 0 : !strcmp(fld[4], "alloc") ? 1 : 2;
        e->cat = cat_of(fld[6]);
        e->phase = phase_code(fld[3]);
        e->bytes = strtoull(fld[7], NULL, 10);
        e->reserved = strtoull(fld[9], NULL, 10);
        if (e->cat < 0) { st = MO_FAIL(MO_ERR_INVALID, "memopt plot %s:%d: unknown category '%s'", path, lineno, fld[6]); break; }
    }
    fclose(f);
    if (st != MO_OK) { free(*out); *out = NULL; }
    return st;
}

// One run's data: x_pct, the six cumulative category sums (stack order), reserved (GiB), phase code;
// and its phase strip (x_from x_to code) appended to phases with the run's number.
static mo_status write_run(const ev *e, size_t n, const char *outdir, int run, FILE *phases, double *ymax) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/timeline_%d.dat", outdir, run);
    FILE *f = fopen(p, "w");
    if (!f) return MO_FAIL(MO_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
    fprintf(f, "# x_pct param +grad +optim +master +workspace +activation(=allocated) reserved phase (GiB, cumulative)\n");
    uint64_t by[MO_CAT_COUNT] = {0};
    size_t steps = 0, first = 0;
    for (size_t i = 0; i < n; i++) steps += e[i].action != 0;
    int cur_phase = -1;
    double seg_from = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].action == 0) { by[e[i].cat] = e[i].bytes; first = i + 1; continue; }
        if (e[i].action == 1) by[e[i].cat] += e[i].bytes;
        else by[e[i].cat] -= e[i].bytes < by[e[i].cat] ? e[i].bytes : by[e[i].cat];
        double x = steps ? 100.0 * (double)(++k) / (double)steps : 0;
        if (i == first) { // the state at the start, at x 0
            double s0 = 0;
            fprintf(f, "0");
            for (int c = 0; c < MO_CAT_COUNT; c++) {
                uint64_t b = by[stack[c]];
                if (e[i].cat == stack[c]) b = e[i].action == 1 ? b - e[i].bytes : b + e[i].bytes;
                s0 += (double)b / GIB;
                fprintf(f, " %.6f", s0);
            }
            fprintf(f, " %.6f %d\n", (double)e[i].reserved / GIB, e[i].phase);
        }
        double s = 0;
        fprintf(f, "%.4f", x);
        for (int c = 0; c < MO_CAT_COUNT; c++) {
            s += (double)by[stack[c]] / GIB;
            fprintf(f, " %.6f", s);
        }
        double r = (double)e[i].reserved / GIB;
        fprintf(f, " %.6f %d\n", r, e[i].phase);
        if (s > *ymax) *ymax = s;
        if (r > *ymax) *ymax = r;
        if (e[i].phase != cur_phase) {
            if (cur_phase >= 0) fprintf(phases, "%d %.4f %.4f %d\n", run, seg_from, x, cur_phase);
            cur_phase = e[i].phase;
            seg_from = x;
        }
    }
    if (cur_phase >= 0) fprintf(phases, "%d %.4f %.4f %d\n", run, seg_from, 100.0, cur_phase);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    return bad ? MO_FAIL(MO_ERR_IO, "%s: error writing", p) : MO_OK;
}

// "cpu/L2-C64-.../fp32/materialized/ckpt:full/accum:1/alloc:caching/cap:none; device; step 2" ->
// the configuration's short form "ckpt:full" parts that differ are for the key; here: the whole
// name less backend, and the device.
static void split_title(const char *t, char *cfg, size_t cn, char *dev, size_t dn) {
    const char *semi = strchr(t, ';');
    size_t k = semi ? (size_t)(semi - t) : strlen(t);
    snprintf(cfg, cn, "%.*s", (int)k, t);
    dev[0] = '\0';
    if (semi) {
        const char *d = semi + 1;
        while (*d == ' ') d++;
        const char *e = strchr(d, ';');
        snprintf(dev, dn, "%.*s", (int)(e ? (size_t)(e - d) : strlen(d)), d);
    }
    if (!strncmp(dev, "none (no device: ", 17)) { // "none (no device: dry backend)"
        char b[96];
        snprintf(b, sizeof b, "no device: the %.*s", (int)(strlen(dev) - 18 > 0 ? strlen(dev) - 18 : 0), dev + 17);
        snprintf(dev, dn, "%.96s (the allocator without compute: memory exact)", b);
    }
    for (char *p = cfg; *p; p++)
        if (*p == '\'') *p = '`';
    for (char *p = dev; *p; p++)
        if (*p == '\'') *p = '`';
}

// The part of a configuration name that differs from the other's ("ckpt:full"), for the key.
static void differing(const char *a, const char *b, char *out, size_t n) {
    out[0] = '\0';
    char x[512], y[512];
    snprintf(x, sizeof x, "%s", a);
    snprintf(y, sizeof y, "%s", b);
    char *sx = NULL, *sy = NULL;
    char *px = strtok_r(x, "/", &sx), *py = strtok_r(y, "/", &sy);
    while (px) {
        if (!py || strcmp(px, py)) {
            size_t l = strlen(out);
            snprintf(out + l, n - l, "%s%s", l ? " " : "", px);
        }
        px = strtok_r(NULL, "/", &sx);
        py = py ? strtok_r(NULL, "/", &sy) : NULL;
    }
    if (!out[0]) snprintf(out, n, "%s", a);
}

mo_status mo_plot_timeline(const char *const *paths, int npaths, const char *outdir, FILE *out) {
    MO_TRY(mo_plot_check_gnuplot());
    MO_TRY(mo_plot_mkdir(outdir));
    char titles[2][512], cfg[2][512], dev[2][160], key[2][256];
    ev *e[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    mo_status st = MO_OK;
    for (int i = 0; i < npaths && st == MO_OK; i++) st = read_trace(paths[i], &e[i], &n[i], titles[i], sizeof titles[i]);
    char pp[PATH_MAX];
    snprintf(pp, sizeof pp, "%s/timeline_phases.dat", outdir);
    FILE *ph = st == MO_OK ? fopen(pp, "w") : NULL;
    if (st == MO_OK && !ph) st = MO_FAIL(MO_ERR_IO, "%s: cannot write: %s", pp, strerror(errno));
    double ymax = 0;
    if (ph) fprintf(ph, "# run x_from_pct x_to_pct phase (1 forward, 2 backward, 3 recompute, 4 optimizer)\n");
    for (int i = 0; i < npaths && st == MO_OK; i++) st = write_run(e[i], n[i], outdir, i + 1, ph, &ymax);
    if (ph) fclose(ph);
    free(e[0]);
    free(e[1]);
    MO_TRY(st);
    for (int i = 0; i < npaths; i++) split_title(titles[i], cfg[i], sizeof cfg[i], dev[i], sizeof dev[i]);
    if (npaths == 2) {
        differing(cfg[0], cfg[1], key[0], sizeof key[0]);
        differing(cfg[1], cfg[0], key[1], sizeof key[1]);
    } else {
        snprintf(key[0], sizeof key[0], "allocated");
    }
    char vars[2400];
    snprintf(vars, sizeof vars, "nruns=%d; cfg1='%s'; dev1='%s'; key1='%s'; key2='%s'; ymax=%.6f", npaths, cfg[0], dev[0],
             key[0], npaths == 2 ? key[1] : "", ymax);
    MO_TRY(mo_plot_run("timeline.gp", outdir, vars));
    if (out) fprintf(out, "  %s/timeline.png, .svg\n", outdir);
    return MO_OK;
}
