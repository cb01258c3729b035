// Shared helpers of the GPT tests: a tiny config, building a model on a backend with its own
// allocator, and reading its gradients back to the host.
#ifndef MEMOPT_TESTS_GPT_FIXTURE_H
#define MEMOPT_TESTS_GPT_FIXTURE_H

#include <stdlib.h>
#include <string.h>
#include "models/gpt.h"
#include "tests/testlib.h"

typedef struct gpt_fixture {
    mo_allocator *alloc;
    mo_ctx *ctx;
    mo_gpt *m;
} gpt_fixture;

static inline mo_gpt_config tiny_config(void) {
    mo_gpt_config c;
    memset(&c, 0, sizeof c);
    c.layers = 2; c.hidden = 16; c.heads = 2; c.seq = 8; c.batch = 4; c.vocab = 37;
    c.accum = 1;
    c.lr = 1e-3f; c.beta1 = 0.9f; c.beta2 = 0.95f; c.eps = 1e-8f; c.weight_decay = 0.0f; c.grad_clip = 0.0f;
    c.seed = 42;
    return c;
}

// Builds the model and sets the synthetic batch of seed batch_seed. Returns 0 on failure.
static inline int fixture_open(gpt_fixture *f, mo_backend_kind be, const mo_gpt_config *c, uint64_t batch_seed) {
    memset(f, 0, sizeof *f);
    if (!CHECK_OK(mo_allocator_create(&f->alloc, MO_ALLOC_CACHING, be, 0, NULL))) return 0;
    if (!CHECK_OK(mo_ctx_create(&f->ctx, be, f->alloc))) return 0;
    f->ctx->tf32 = c->tf32;
    if (!CHECK_OK(mo_gpt_create(&f->m, c, f->ctx))) return 0;
    size_t BT = (size_t)c->batch * c->seq;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    mo_gpt_synthetic_batch(c, batch_seed, tok, tgt);
    int ok = CHECK_OK(mo_gpt_set_batch(f->m, tok, tgt));
    free(tok);
    free(tgt);
    return ok;
}

static inline void fixture_close(gpt_fixture *f) {
    mo_gpt_destroy(f->m);
    mo_ctx_destroy(f->ctx);
    if (f->alloc) {
        mo_alloc_stats s;
        mo_allocator_stats(f->alloc, &s);
        CHECK_MSG(s.allocated_bytes == 0, "leak: %llu bytes still allocated at close", (unsigned long long)s.allocated_bytes);
    }
    mo_allocator_destroy(f->alloc);
    memset(f, 0, sizeof *f);
}

// The allocator's statistics after two optimizer steps of c on backend be (batch seed batch_seed):
// what the dry-equals-cpu peak tests compare. Returns 0 on failure.
static inline int fixture_two_step_stats(mo_backend_kind be, const mo_gpt_config *c, uint64_t batch_seed,
                                         mo_alloc_stats *s) {
    gpt_fixture f;
    if (!fixture_open(&f, be, c, batch_seed)) return 0;
    int ok = CHECK_OK(mo_gpt_step(f.m));
    ok = ok && CHECK_OK(mo_gpt_step(f.m));
    mo_allocator_stats(f.alloc, s);
    fixture_close(&f);
    return ok;
}

// Host copy of a device buffer of n floats (malloc'ed).
static inline float *fixture_read(gpt_fixture *f, const float *dev, size_t n) {
    float *h = malloc(n * sizeof(float));
    CHECK_OK(mo_memcpy_d2h(f->ctx, h, dev, n * sizeof(float)));
    return h;
}

#endif
