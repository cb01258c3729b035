#include "bench/derive.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024

int mo_derive_measured(const mo_csv_row *r) { return !strcmp(r->status, "ok") || !strcmp(r->status, "fallback"); }

// The configuration key of r with the varied axis set to value (NULL: r's own key).
static void key_with(const mo_csv_row *r, mo_vary vary, const char *value, char *buf) {
    if (!value) {
        mo_csv_config_key(r, buf, KEY_MAX);
        return;
    }
    // A copy of the whole row is 2 KB; the key needs only the configuration columns, but copying
    // keeps mo_csv_config_key the one definition of "same configuration".
    mo_csv_row t = *r;
    if (vary == MO_VARY_CKPT) {
        snprintf(t.ckpt, sizeof t.ckpt, "%s", value);
        // --offload activations needs checkpoint segments: the same run without checkpointing has no
        // offload, so a checkpointed, offloaded row is compared with the plain ckpt none row
        if (!strcmp(t.offload, "activations")) snprintf(t.offload, sizeof t.offload, "none");
    } else {
        snprintf(t.precision, sizeof t.precision, "%s", value);
    }
    mo_csv_config_key(&t, buf, KEY_MAX);
}

static double ratio(double a, double b) { return (isfinite(a) && isfinite(b) && b > 0) ? a / b : NAN; }
static double ratio_i(int64_t a, int64_t b) { return (a >= 0 && b > 0) ? (double)a / (double)b : NAN; }

static void fill(const mo_csv_row *r, const mo_csv_row *b, long bi, mo_derived *d) {
    d->baseline = bi;
    d->mem_saving = 1.0 - ratio_i(r->peak_allocated_bytes, b->peak_allocated_bytes);
    d->reserved_saving = 1.0 - ratio_i(r->peak_reserved_bytes, b->peak_reserved_bytes);
    d->act_saving = 1.0 - ratio_i(r->activation_peak_bytes, b->activation_peak_bytes);
    d->time_ratio = ratio(r->step_ms, b->step_ms);
    d->recompute_overhead = d->time_ratio - 1.0;
    d->speedup = isfinite(d->time_ratio) && d->time_ratio > 0 ? 1.0 / d->time_ratio : NAN;
}

static void unknown(mo_derived *d) {
    d->baseline = -1;
    d->mem_saving = d->reserved_saving = d->act_saving = NAN;
    d->time_ratio = d->recompute_overhead = d->speedup = NAN;
}

mo_status mo_derive_all(const mo_csv_row *rows, size_t n, mo_vary vary, const char *base, mo_derived *out) {
    for (size_t i = 0; i < n; i++) unknown(&out[i]);
    if (n == 0) return MO_OK;
    // The measured rows sorted by key (then index), so the last row of a key is found by bsearch:
    // a CSV of ten thousand rows derives in milliseconds rather than n^2 key builds.
    mo_csv_keyed *k = malloc(n * sizeof *k);
    if (!k) return MO_FAIL(MO_ERR_INTERNAL, "host out of memory deriving %zu rows", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mo_derive_measured(&rows[i])) continue;
        key_with(&rows[i], vary, NULL, k[m].key);
        k[m].index = i;
        m++;
    }
    qsort(k, m, sizeof *k, mo_csv_keyed_cmp);
    mo_csv_keyed probe;
    for (size_t i = 0; i < n; i++) {
        if (!mo_derive_measured(&rows[i])) continue;
        key_with(&rows[i], vary, base, probe.key);
        probe.index = (size_t)-1; // sorts after every row of that key: lands just past the last
        size_t lo = 0, hi = m;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (mo_csv_keyed_cmp(&k[mid], &probe) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && !strcmp(k[lo - 1].key, probe.key)) {
            size_t b = k[lo - 1].index;
            fill(&rows[i], &rows[b], (long)b, &out[i]);
        }
    }
    free(k);
    return MO_OK;
}

mo_status mo_derive_fill_overhead(const mo_csv_row *prior, size_t n, mo_csv_row *row) {
    if (!mo_derive_measured(row) || !isfinite(row->step_ms)) return MO_OK;
    if (!strcmp(row->ckpt, "none")) {
        row->recompute_overhead = 0.0;
        return MO_OK;
    }
    char want[KEY_MAX], have[KEY_MAX];
    key_with(row, MO_VARY_CKPT, "none", want);
    for (size_t j = n; j-- > 0;) { // the last matching row counts
        if (!mo_derive_measured(&prior[j])) continue;
        key_with(&prior[j], MO_VARY_CKPT, NULL, have);
        if (strcmp(have, want)) continue;
        mo_derived d;
        fill(row, &prior[j], (long)j, &d);
        row->recompute_overhead = d.recompute_overhead;
        return MO_OK;
    }
    return MO_OK;
}
