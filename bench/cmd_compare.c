// memopt compare BASE.csv NEW.csv [--tolerance F] [--format text|md]: a verdict per configuration
// (rules in bench/compare.h), a summary, and exit 1 when anything regressed. --format md prints a
// Markdown table for a CI job summary.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/cli.h"
#include "bench/compare.h"

static mo_status read_file(const char *what, const char *path, mo_csv_row **rows, size_t *n) {
    if (access(path, R_OK) != 0)
        return MO_FAIL(MO_ERR_INVALID, "compare: cannot read %s '%s': %s (accepted: a memopt results CSV)", what, path, strerror(errno));
    if (mo_csv_read(path, rows, n) != MO_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mo_errmsg_plain());
        return MO_FAIL(MO_ERR_INVALID, "compare: %s %s", what, msg);
    }
    return MO_OK;
}

static const char *bytes(int64_t b, char *buf) {
    if (b < 0) return "-";
    return mo_format_bytes((uint64_t)b, buf, 32);
}

// "12.49 GiB -> 13.11 GiB (+634880 B)", or "12.49 GiB (same)"
static void memory_cell(const mo_compare_item *it, char *buf, size_t n, const char *arrow) {
    char b1[32], b2[32];
    const mo_csv_row *b = it->base, *w = it->neu;
    if (!b || !w) { snprintf(buf, n, "%s", bytes((b ? b : w)->peak_allocated_bytes, b1)); return; }
    if (b->peak_allocated_bytes < 0 || w->peak_allocated_bytes < 0) { snprintf(buf, n, "-"); return; }
    if (!it->alloc_diff) snprintf(buf, n, "%s (same)", bytes(b->peak_allocated_bytes, b1));
    else snprintf(buf, n, "%s %s %s (%+lld B)", bytes(b->peak_allocated_bytes, b1), arrow, bytes(w->peak_allocated_bytes, b2),
                  (long long)it->alloc_diff);
}

static void time_cell(const mo_compare_item *it, char *buf, size_t n, const char *arrow) {
    const mo_csv_row *b = it->base, *w = it->neu;
    if (!b || !w) {
        const mo_csv_row *r = b ? b : w;
        if (isfinite(r->step_ms)) snprintf(buf, n, "%.2f", r->step_ms);
        else snprintf(buf, n, "-");
        return;
    }
    if (isnan(it->time_ratio)) { snprintf(buf, n, "-"); return; }
    snprintf(buf, n, "%.2f %s %.2f (%+.1f%%)", b->step_ms, arrow, w->step_ms, 100 * (it->time_ratio - 1));
}

static void md_escape(const char *s, char *buf, size_t n) {
    size_t o = 0;
    for (; *s && o + 2 < n; s++) {
        if (*s == '|') buf[o++] = '\\';
        buf[o++] = *s;
    }
    buf[o] = '\0';
}

static void summary_line(const mo_compare_summary *s, char *buf, size_t n) {
    if (s->invalid) {
        snprintf(buf, n, "%zu configurations: %zu without a valid measurement in NEW, %zu same, %zu slower, %zu more memory, "
                         "%zu failed now, %zu missing, %zu new",
                 s->rows, s->invalid, s->same, s->slower, s->more_memory, s->status_worse, s->missing, s->added);
        return;
    }
    snprintf(buf, n, "%zu configurations: %zu same, %zu slower, %zu faster, %zu more memory, %zu less memory, %zu failed now, %zu run now, "
                     "%zu missing, %zu new (%zu within noise)",
             s->rows, s->same, s->slower, s->faster, s->more_memory, s->less_memory, s->status_worse, s->status_better, s->missing,
             s->added, s->noisy);
}

mo_status mo_cmd_compare(const mo_config *cfg) {
    const char *bp = cfg->args[0], *np = cfg->args[1];
    double tol = cfg->tolerance;
    mo_csv_row *base = NULL, *neu = NULL;
    size_t nb = 0, nn = 0;
    mo_status st = read_file("BASE", bp, &base, &nb);
    if (st == MO_OK) st = read_file("NEW", np, &neu, &nn);
    mo_compare_item *items = NULL;
    size_t n = 0;
    mo_compare_summary s;
    if (st == MO_OK) st = mo_compare_rows(base, nb, neu, nn, tol, &items, &n, &s);
    if (st != MO_OK) { free(base); free(neu); return st; }

    char verdict[96], label[640], mem[96], tm[96], sum[512];
    summary_line(&s, sum, sizeof sum);
    if (cfg->format_md) {
        printf("### memopt compare: %s\n\n", s.regressions ? "REGRESSION" : "no regression");
        printf("`%s` (%zu rows) vs `%s` (%zu rows). Memory exact (peak allocated and reserved bytes); a row is slower only if its "
               "median step time exceeds the base's by more than %.0f%% **and** its p10 lies above the base's p90.\n\n",
               bp, nb, np, nn, 100 * tol);
        printf("| verdict | configuration | peak allocated (base → new) | step ms (base → new) | note |\n|---|---|---|---|---|\n");
        for (size_t i = 0; i < n; i++) {
            const mo_compare_item *it = &items[i];
            char el[800], en[200];
            mo_compare_verdict(it->flags, verdict, sizeof verdict);
            md_escape(mo_compare_row_label(it->base ? it->base : it->neu, label, sizeof label), el, sizeof el);
            md_escape(it->note, en, sizeof en);
            memory_cell(it, mem, sizeof mem, "→");
            time_cell(it, tm, sizeof tm, "→");
            const char *bold = it->flags & MO_CMP_REGRESSION ? "**" : "";
            printf("| %s%s%s | %s | %s | %s | %s |\n", bold, verdict, bold, el, mem, tm, en);
        }
        printf("\n%s.\n", sum);
    } else {
        printf("memopt compare: %s (%zu rows) -> %s (%zu rows)\n", bp, nb, np, nn);
        printf("  rules: memory exact (peak allocated and reserved, %d B tolerance); slower only if the median step time is more than "
               "%.0f%% up AND the new p10 is above the base p90 (faster: the mirror)\n",
               MO_COMPARE_MEM_TOLERANCE_BYTES, 100 * tol);
        printf("  %-22s %-44s %-30s %s\n", "verdict", "peak allocated (base -> new)", "step ms (base -> new)", "configuration");
        for (size_t i = 0; i < n; i++) {
            const mo_compare_item *it = &items[i];
            mo_compare_verdict(it->flags, verdict, sizeof verdict);
            mo_compare_row_label(it->base ? it->base : it->neu, label, sizeof label);
            memory_cell(it, mem, sizeof mem, "->");
            time_cell(it, tm, sizeof tm, "->");
            printf("  %-22s %-44s %-30s %s\n", verdict, mem, tm, label);
            if (it->note[0]) printf("  %-22s %s\n", "", it->note);
        }
        printf("summary: %s\n", sum);
        if (s.duplicates_base || s.duplicates_new)
            printf("  (%zu duplicate keys in BASE, %zu in NEW: the last row of each counted)\n", s.duplicates_base, s.duplicates_new);
        printf("verdict: %s\n", s.regressions ? "REGRESSION" : "no regression");
    }
    fflush(stdout);
    if (s.regressions) {
        // Any status but MO_ERR_INVALID makes main exit 1: a failed comparison, not bad input.
        const mo_compare_item *first = NULL;
        for (size_t i = 0; i < n && !first; i++)
            if (items[i].flags & MO_CMP_REGRESSION) first = &items[i];
        mo_compare_verdict(first->flags, verdict, sizeof verdict);
        mo_compare_row_label(first->base, label, sizeof label);
        st = MO_FAIL(MO_ERR_INTERNAL, "%zu regression%s against %s (first: %s: %s)", s.regressions, s.regressions == 1 ? "" : "s", bp,
                     verdict, label);
    }
    free(items);
    free(base);
    free(neu);
    return st;
}
