// Regression verdicts between two results files: the rules are stated in compare.h.
#include "bench/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Keys sorted (ties by row order), so lookups are binary searches; last[i] says whether row i is
// the last of its key (a file of repeated keys costs n log n, not the n^2 of walking duplicates).
static mo_status index_rows(const mo_csv_row *r, size_t n, mo_csv_keyed **out, unsigned char **last, size_t *dups) {
    *out = NULL;
    *last = NULL;
    *dups = 0;
    mo_csv_keyed *k = malloc((n ? n : 1) * sizeof *k);
    unsigned char *l = calloc(n ? n : 1, 1);
    if (!k || !l) {
        free(k);
        free(l);
        return MO_FAIL(MO_ERR_INTERNAL, "out of host memory for %zu rows", n);
    }
    for (size_t i = 0; i < n; i++) {
        mo_csv_config_key(&r[i], k[i].key, sizeof k[i].key);
        k[i].index = i;
    }
    qsort(k, n, sizeof *k, mo_csv_keyed_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !strcmp(k[i].key, k[i - 1].key)) (*dups)++;
        if (i + 1 == n || strcmp(k[i].key, k[i + 1].key)) l[k[i].index] = 1;
    }
    *out = k;
    *last = l;
    return MO_OK;
}

// The last row with this key, or -1: the entry before the first key greater than it.
static long find_last(const mo_csv_keyed *k, size_t n, const char *key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(k[mid].key, key) <= 0) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && !strcmp(k[lo - 1].key, key) ? (long)k[lo - 1].index : -1;
}

static int ok(const mo_csv_row *r) { return !strcmp(r->status, "ok"); }
static int finite_pos(double x) { return isfinite(x) && x > 0; }

// A time that is there but is not a time: zero, negative or infinite (the reader refuses nan).
static int bad_time(double x) { return !isnan(x) && !finite_pos(x); }

// NEW trained (status ok) but a measurement the comparison needs is missing or invalid: a corrupt
// or truncated file must not pass the memory gate by saying nothing. Returns 1 and notes why.
static int invalid_measurement(const mo_csv_row *b, const mo_csv_row *n, mo_compare_item *it) {
    const char *why = NULL;
    char v[40] = "";
    if (b->peak_allocated_bytes >= 0 && n->peak_allocated_bytes < 0) why = "no peak_allocated_bytes";
    else if (b->peak_reserved_bytes >= 0 && n->peak_reserved_bytes < 0) why = "no peak_reserved_bytes";
    else if (finite_pos(b->step_ms) && isnan(n->step_ms)) why = "no step_ms";
    else if (bad_time(n->step_ms) || bad_time(n->step_ms_p10) || bad_time(n->step_ms_p90)) {
        double x = bad_time(n->step_ms) ? n->step_ms : bad_time(n->step_ms_p10) ? n->step_ms_p10 : n->step_ms_p90;
        snprintf(v, sizeof v, "%g", x);
        why = "a step time that is not a positive number";
    }
    if (!why) return 0;
    it->flags |= MO_CMP_INVALID;
    snprintf(it->note, sizeof it->note, "NEW has %s%s%s%s: not a measurement", why, v[0] ? " (" : "", v, v[0] ? ")" : "");
    return 1;
}

static void compare_pair(const mo_csv_row *b, const mo_csv_row *n, double tol, mo_compare_item *it) {
    it->time_ratio = NAN;
    if (ok(b) && ok(n) && invalid_measurement(b, n, it)) return;
    if (ok(b) && !ok(n)) {
        it->flags |= MO_CMP_STATUS_WORSE;
        snprintf(it->note, sizeof it->note, "status ok -> %s: %.120s", n->status, n->detail);
        return;
    }
    if (!ok(b) && ok(n)) {
        it->flags |= MO_CMP_STATUS_BETTER;
        snprintf(it->note, sizeof it->note, "status %s -> ok", b->status);
    }
    // Memory: exact on both peaks (reserved under async on cuda: within the tolerance).
    if (b->peak_allocated_bytes >= 0 && n->peak_allocated_bytes >= 0) {
        it->alloc_diff = n->peak_allocated_bytes - b->peak_allocated_bytes;
        if (it->alloc_diff > MO_COMPARE_MEM_TOLERANCE_BYTES) it->flags |= MO_CMP_MORE_MEMORY;
        if (it->alloc_diff < -MO_COMPARE_MEM_TOLERANCE_BYTES) it->flags |= MO_CMP_LESS_MEMORY;
    }
    if (b->peak_reserved_bytes >= 0 && n->peak_reserved_bytes >= 0) {
        it->reserved_diff = n->peak_reserved_bytes - b->peak_reserved_bytes;
        double slack = !strcmp(n->alloc, "async") && !strcmp(n->backend, "cuda") ? tol * (double)b->peak_reserved_bytes
                                                                                : (double)MO_COMPARE_MEM_TOLERANCE_BYTES;
        if ((double)it->reserved_diff > slack) it->flags |= MO_CMP_MORE_MEMORY;
        if ((double)it->reserved_diff < -slack) it->flags |= MO_CMP_LESS_MEMORY;
    }
    if ((it->flags & MO_CMP_MORE_MEMORY) && (it->flags & MO_CMP_LESS_MEMORY)) it->flags &= ~MO_CMP_LESS_MEMORY;
    // Time: the medians must move past the tolerance and the spreads must separate.
    if (!ok(b) || !ok(n) || !finite_pos(b->step_ms) || !finite_pos(n->step_ms)) return;
    it->time_ratio = n->step_ms / b->step_ms;
    int spreads = finite_pos(b->step_ms_p10) && finite_pos(b->step_ms_p90) && finite_pos(n->step_ms_p10) &&
                  finite_pos(n->step_ms_p90);
    int up = n->step_ms > b->step_ms * (1 + tol), down = n->step_ms < b->step_ms * (1 - tol);
    if (up) {
        if (!spreads || n->step_ms_p10 > b->step_ms_p90) it->flags |= MO_CMP_SLOWER;
        else it->flags |= MO_CMP_NOISY;
    } else if (down) {
        if (!spreads || n->step_ms_p90 < b->step_ms_p10) it->flags |= MO_CMP_FASTER;
        else it->flags |= MO_CMP_NOISY;
    }
    if (!it->note[0]) {
        if (it->flags & MO_CMP_NOISY)
            snprintf(it->note, sizeof it->note, "median %+.1f%% but the spreads overlap (base p10-p90 %.2f-%.2f, new %.2f-%.2f): noise",
                     100 * (it->time_ratio - 1), b->step_ms_p10, b->step_ms_p90, n->step_ms_p10, n->step_ms_p90);
        else if ((up || down) && !spreads)
            snprintf(it->note, sizeof it->note, "no p10/p90 on both sides: the median rule alone");
    }
}

mo_status mo_compare_rows(const mo_csv_row *base, size_t nb, const mo_csv_row *neu, size_t nn, double tol,
                          mo_compare_item **items_out, size_t *n_out, mo_compare_summary *s) {
    *items_out = NULL;
    *n_out = 0;
    memset(s, 0, sizeof *s);
    mo_csv_keyed *kb = NULL, *kn = NULL;
    unsigned char *lb = NULL, *ln = NULL;
    mo_status st = index_rows(base, nb, &kb, &lb, &s->duplicates_base);
    if (st == MO_OK) st = index_rows(neu, nn, &kn, &ln, &s->duplicates_new);
    mo_compare_item *items = st == MO_OK ? calloc(nb + nn + 1, sizeof *items) : NULL;
    if (st == MO_OK && !items) st = MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    if (st != MO_OK) { free(kb); free(kn); free(lb); free(ln); return st; }
    size_t n = 0;
    char key[1024];
    for (size_t i = 0; i < nb; i++) {
        if (!lb[i]) continue; // an earlier duplicate: its last row speaks for it
        mo_csv_config_key(&base[i], key, sizeof key);
        mo_compare_item *it = &items[n++];
        it->base = &base[i];
        long j = find_last(kn, nn, key);
        if (j < 0) {
            it->flags = MO_CMP_MISSING;
            it->time_ratio = NAN;
            continue;
        }
        it->neu = &neu[j];
        compare_pair(it->base, it->neu, tol, it);
    }
    for (size_t j = 0; j < nn; j++) {
        if (!ln[j]) continue;
        mo_csv_config_key(&neu[j], key, sizeof key);
        if (find_last(kb, nb, key) >= 0) continue;
        mo_compare_item *it = &items[n++];
        it->neu = &neu[j];
        it->flags = MO_CMP_NEW;
        it->time_ratio = NAN;
    }
    free(kb);
    free(kn);
    free(lb);
    free(ln);
    for (size_t i = 0; i < n; i++) {
        unsigned f = items[i].flags;
        s->rows++;
        s->same += (f & ~MO_CMP_NOISY) == 0;
        s->slower += !!(f & MO_CMP_SLOWER);
        s->faster += !!(f & MO_CMP_FASTER);
        s->more_memory += !!(f & MO_CMP_MORE_MEMORY);
        s->less_memory += !!(f & MO_CMP_LESS_MEMORY);
        s->missing += !!(f & MO_CMP_MISSING);
        s->added += !!(f & MO_CMP_NEW);
        s->status_worse += !!(f & MO_CMP_STATUS_WORSE);
        s->status_better += !!(f & MO_CMP_STATUS_BETTER);
        s->noisy += !!(f & MO_CMP_NOISY);
        s->invalid += !!(f & MO_CMP_INVALID);
        s->regressions += (f & MO_CMP_REGRESSION) != 0;
    }
    *items_out = items;
    *n_out = n;
    return MO_OK;
}

const char *mo_compare_verdict(unsigned f, char *buf, size_t n) {
    static const struct { unsigned flag; const char *word; } words[] = {
        {MO_CMP_INVALID, "no measurement"},  {MO_CMP_STATUS_WORSE, "failed now"}, {MO_CMP_SLOWER, "slower"},       {MO_CMP_MORE_MEMORY, "more memory"},
        {MO_CMP_STATUS_BETTER, "runs now"},  {MO_CMP_FASTER, "faster"},       {MO_CMP_LESS_MEMORY, "less memory"},
        {MO_CMP_MISSING, "missing"},         {MO_CMP_NEW, "new"},
    };
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (!(f & words[i].flag)) continue;
        if (buf[0]) strncat(buf, ", ", n - strlen(buf) - 1);
        strncat(buf, words[i].word, n - strlen(buf) - 1);
    }
    if (!buf[0]) snprintf(buf, n, "same");
    return buf;
}

const char *mo_compare_row_label(const mo_csv_row *r, char *buf, size_t n) {
    char extra[64] = "";
    if ((r->tp > 1) || (r->pp > 1)) snprintf(extra, sizeof extra, " tp %lld pp %lld", (long long)r->tp, (long long)r->pp);
    char cap[32] = "";
    if (r->cap_bytes > 0) snprintf(cap, sizeof cap, " cap %lld", (long long)r->cap_bytes);
    snprintf(buf, n, "%s %s L%lld C%lld H%lld T%lld B%lld V%lld %s %s ckpt %s accum %lld%s %s%s%s%s", r->backend, r->model,
             (long long)r->layers, (long long)r->hidden, (long long)r->heads, (long long)r->seq, (long long)r->batch,
             (long long)r->vocab, r->precision, r->attn, r->ckpt, (long long)r->accum, extra, r->alloc, cap,
             r->knobs[0] ? " " : "", r->knobs); // rows differing in knobs only must not read alike
    return buf;
}
