// Shared helpers of the split-GPT tests (test_gpt_split.c on cpu/dry, gpu_gpt_split.c on cuda):
// the unsplit reference run, a split run, and the per-tensor comparison in the unsplit layout.
#ifndef MEMOPT_TESTS_GPT_SPLIT_FIXTURE_H
#define MEMOPT_TESTS_GPT_SPLIT_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/gpt_split.h"
#include "tests/gpt_fixture.h"

static const char *split_pname[GPT_NPARAMS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "projw", "projb",
                                               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// 4 heads and 4 layers, so tp and pp of 2 and 4 both divide.
static inline mo_gpt_config split_config(void) {
    mo_gpt_config c = tiny_config();
    c.layers = 4; c.hidden = 32; c.heads = 4; c.seq = 8; c.batch = 8; c.vocab = 37;
    c.accum = 1;
    return c;
}

static inline mo_gpt_split_config split_sc(int tp, int pp, mo_backend_kind be) {
    mo_gpt_split_config sc;
    memset(&sc, 0, sizeof sc);
    sc.tp = tp; sc.pp = pp; sc.comm = 0; sc.backend = be; sc.alloc = MO_ALLOC_CACHING;
    return sc;
}

// The unsplit model after `steps` optimizer steps (0: one forward/backward only) on backend be:
// loss of the last forward, gradients of the last backward, parameters after, host copies.
typedef struct split_ref {
    double loss, norm;
    float *grads, *params;
    size_t n;
} split_ref;

static inline int split_ref_run(mo_backend_kind be, mo_gpt_config c, uint64_t batch_seed, int steps, split_ref *r) {
    gpt_fixture f;
    memset(r, 0, sizeof *r);
    if (!fixture_open(&f, be, &c, batch_seed)) return 0;
    int ok = 1;
    if (steps == 0) ok = CHECK_OK(mo_gpt_forward_backward(f.m));
    for (int i = 0; i < steps && ok; i++) ok = CHECK_OK(mo_gpt_step(f.m));
    r->loss = f.m->last_loss;
    r->norm = f.m->last_grad_norm;
    r->n = f.m->num_params;
    r->grads = fixture_read(&f, f.m->grads, r->n);
    r->params = fixture_read(&f, f.m->params, r->n);
    fixture_close(&f);
    return ok;
}

static inline void split_ref_free(split_ref *r) {
    free(r->grads);
    free(r->params);
    memset(r, 0, sizeof *r);
}

static inline mo_status split_open(mo_gpt_split **s, const mo_gpt_config *c, const mo_gpt_split_config *sc,
                                   uint64_t batch_seed) {
    MO_TRY(mo_gpt_split_create(s, c, sc));
    size_t BT = (size_t)c->batch * c->seq;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    mo_gpt_synthetic_batch(c, batch_seed, tok, tgt);
    mo_status st = mo_gpt_split_set_batch(*s, tok, tgt);
    free(tok);
    free(tgt);
    if (st != MO_OK) { mo_gpt_split_destroy(*s); *s = NULL; }
    return st;
}

// Two steps of c split as cpu_sc says, on the cpu and again on the dry backend (cpu_sc's backend
// replaced): every rank's peaks (allocated, reserved, per category) and allocation count must agree.
// Returns whether all W ranks agreed (-1: a run could not start); peak[r] gets rank r's cpu peak.
static inline int split_dry_equals_cpu(const mo_gpt_config *c, mo_gpt_split_config cpu_sc, int W, const char *what,
                                       uint64_t peak[8]) {
    mo_alloc_stats st[2][8];
    for (int b = 0; b < 2; b++) {
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = cpu_sc;
        sc.backend = b == 0 ? MO_BACKEND_CPU : MO_BACKEND_DRY;
        if (!CHECK_OK(split_open(&s, c, &sc, 4))) return -1;
        CHECK_OK(mo_gpt_split_step(s));
        CHECK_OK(mo_gpt_split_step(s));
        for (int r = 0; r < W; r++) mo_allocator_stats(mo_gpt_split_allocator(s, r), &st[b][r]);
        mo_gpt_split_destroy(s);
    }
    int same = 1;
    for (int r = 0; r < W; r++) {
        int eq = st[0][r].peak_allocated_bytes == st[1][r].peak_allocated_bytes &&
                 st[0][r].peak_reserved_bytes == st[1][r].peak_reserved_bytes && st[0][r].num_allocs == st[1][r].num_allocs &&
                 !memcmp(st[0][r].peak_by_cat, st[1][r].peak_by_cat, sizeof st[0][r].peak_by_cat);
        CHECK_MSG(eq, "%s, rank %d: cpu peak %llu/%llu, dry peak %llu/%llu", what, r,
                  (unsigned long long)st[0][r].peak_allocated_bytes, (unsigned long long)st[0][r].peak_reserved_bytes,
                  (unsigned long long)st[1][r].peak_allocated_bytes, (unsigned long long)st[1][r].peak_reserved_bytes);
        same = same && eq;
        peak[r] = st[0][r].peak_allocated_bytes;
    }
    return same;
}

// The same run split: fills r as split_ref_run does, gathered into the unsplit layout; *replicas
// says whether every replicated tensor has the same bits on every rank that holds it.
static inline int split_run(mo_gpt_config c, mo_gpt_split_config sc, uint64_t batch_seed, int steps, split_ref *r,
                            int *replicas) {
    mo_gpt_split *s = NULL;
    memset(r, 0, sizeof *r);
    if (!CHECK_OK(split_open(&s, &c, &sc, batch_seed))) return 0;
    int ok = 1, W = mo_gpt_split_world(s);
    uint64_t before[64];
    for (int k = 0; k < W && k < 64; k++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, k), &a);
        before[k] = a.allocated_bytes;
    }
    if (steps == 0) ok = CHECK_OK(mo_gpt_split_forward_backward(s));
    for (int i = 0; i < steps && ok; i++) ok = CHECK_OK(mo_gpt_split_step(s));
    // Every activation and scratch buffer of the step is given back on every rank.
    for (int k = 0; k < W && k < 64; k++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, k), &a);
        CHECK_MSG(a.allocated_bytes == before[k], "rank %d: %llu bytes allocated after the step, %llu before", k,
                  (unsigned long long)a.allocated_bytes, (unsigned long long)before[k]);
    }
    r->loss = mo_gpt_split_last_loss(s);
    r->norm = mo_gpt_split_last_grad_norm(s);
    r->n = mo_gpt_num_params(&c);
    r->grads = malloc(r->n * sizeof(float));
    r->params = malloc(r->n * sizeof(float));
    int rg = 0, rp = 0;
    ok = ok && CHECK_OK(mo_gpt_split_gather(s, 1, r->grads, &rg));
    ok = ok && CHECK_OK(mo_gpt_split_gather(s, 0, r->params, &rp));
    *replicas = rg && rp;
    mo_gpt_split_destroy(s);
    return ok;
}

// Relative L2 error of each parameter tensor of got against want (unsplit layout); returns the worst.
static inline double split_worst_tensor(const mo_gpt_config *c, const float *got, const float *want, int *worst_p) {
    size_t sz[GPT_NPARAMS], off = 0;
    {
        // The unsplit sizes, from a dry model (no compute).
        gpt_fixture f;
        mo_gpt_config d = *c;
        memset(sz, 0, sizeof sz);
        if (fixture_open(&f, MO_BACKEND_DRY, &d, 1)) memcpy(sz, f.m->param_sizes, sizeof sz);
        fixture_close(&f);
    }
    double worst = 0;
    *worst_p = 0;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        double e = test_rel_error(got + off, want + off, sz[p]);
        if (!(e <= worst)) { worst = e; *worst_p = p; } // NaN propagates
        off += sz[p];
    }
    return worst;
}

#endif
