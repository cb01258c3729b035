// --offload optimizer (models/gpt.h cfg.offload): AdamW's m, v and a 16-bit run's fp32 master in the
// host allocator. The weights after two steps are bit-identical to no offload (the same CPU AdamW on
// the same data), the device's peak drops by exactly the offloaded bytes, and dry predicts cpu to the
// byte for the device and the host allocator alike.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/copy_stream.h"
#include "kernels/cost.h"
#include "models/gpt_zero.h"
#include "strategies/offload_update.h"
#include "tests/gpt_fixture.h"

typedef struct off_fixture {
    gpt_fixture f;
    mo_allocator *host;
} off_fixture;

static int off_open(off_fixture *o, mo_backend_kind be, const mo_gpt_config *c) {
    memset(o, 0, sizeof *o);
    gpt_fixture *f = &o->f;
    if (!CHECK_OK(mo_allocator_create(&f->alloc, MO_ALLOC_CACHING, be, 0, NULL))) return 0;
    if (!CHECK_OK(mo_allocator_create_host(&o->host, be))) return 0;
    if (!CHECK_OK(mo_ctx_create(&f->ctx, be, f->alloc))) return 0;
    f->ctx->host_alloc = o->host;
    if (!CHECK_OK(mo_gpt_create(&f->m, c, f->ctx))) return 0;
    size_t BT = (size_t)c->batch * c->seq;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    mo_gpt_synthetic_batch(c, 7, tok, tgt);
    int ok = CHECK_OK(mo_gpt_set_batch(f->m, tok, tgt));
    free(tok);
    free(tgt);
    return ok;
}

static void off_close(off_fixture *o) {
    fixture_close(&o->f); // checks the device allocator for leaks
    if (o->host) {
        mo_alloc_stats s;
        mo_allocator_stats(o->host, &s);
        CHECK_MSG(s.allocated_bytes == 0, "host leak: %llu bytes", (unsigned long long)s.allocated_bytes);
    }
    mo_allocator_destroy(o->host);
    o->host = NULL;
}

static int same_bits(const void *a, const void *b, size_t bytes, const char *what, const char *tag) {
    return CHECK_MSG(!memcmp(a, b, bytes), "%s: %s differs with --offload optimizer", tag, what);
}

// Two steps with and without offload on cpu: master/params, 16-bit working copy, m and v equal bit for bit.
static void test_equivalence(void) {
    struct { mo_dtype dt; int accum; mo_ckpt_kind ckpt; const char *tag; } cases[] = {
        {MO_F32, 1, MO_CKPT_NONE, "fp32"},
        {MO_F32, 2, MO_CKPT_FULL, "fp32 accum 2 ckpt full"},
        {MO_BF16, 1, MO_CKPT_NONE, "bf16"},
        {MO_BF16, 2, MO_CKPT_FULL, "bf16 accum 2 ckpt full"},
        {MO_F16, 2, MO_CKPT_SELECTIVE, "fp16 accum 2 ckpt selective"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        mo_gpt_config c = tiny_config();
        c.dtype = cases[k].dt;
        c.accum = cases[k].accum;
        c.ckpt = cases[k].ckpt;
        c.grad_clip = 1.0f;
        c.loss_scaling = c.dtype == MO_F16;
        gpt_fixture ref;
        off_fixture off;
        c.offload = 0;
        if (!fixture_open(&ref, MO_BACKEND_CPU, &c, 7)) return;
        c.offload = 1;
        if (!off_open(&off, MO_BACKEND_CPU, &c)) return;
        for (int s = 0; s < 2; s++) {
            CHECK_OK(mo_gpt_step(ref.m));
            CHECK_OK(mo_gpt_step(off.f.m));
        }
        size_t n = ref.m->num_params;
        CHECK_EQ_U64(off.f.m->step, 2);
        CHECK(off.f.m->host_grads != NULL);
        CHECK((off.f.m->host_params != NULL) == (c.dtype == MO_F32));
        same_bits(ref.m->params, off.f.m->params, n * sizeof(float), "params / master", cases[k].tag);
        same_bits(ref.m->adam_m, off.f.m->adam_m, n * sizeof(float), "adam.m", cases[k].tag);
        same_bits(ref.m->adam_v, off.f.m->adam_v, n * sizeof(float), "adam.v", cases[k].tag);
        if (c.dtype != MO_F32)
            same_bits(ref.m->wparams, off.f.m->wparams, n * mo_dtype_size(c.dtype), "16-bit working copy", cases[k].tag);
        CHECK_MSG(ref.m->last_loss == off.f.m->last_loss, "%s: loss %.9g vs %.9g", cases[k].tag, ref.m->last_loss,
                  off.f.m->last_loss);
        // The weights moved (a no-op update would also be "equal").
        mo_gpt_config c0 = c;
        float *init = malloc(n * sizeof(float));
        gpt_init_full(&c0, init);
        CHECK_MSG(memcmp(init, off.f.m->params, n * sizeof(float)) != 0, "%s: weights did not change", cases[k].tag);
        free(init);
        fixture_close(&ref);
        off_close(&off);
    }
}

static uint64_t r512(uint64_t b) { return (b + 511) / 512 * 512; }

// Bytes: the device loses m, v (and the master), the host holds them and the staging; dry == cpu.
static void test_bytes(void) {
    mo_dtype dts[] = {MO_F32, MO_F16, MO_BF16};
    mo_ckpt_kind ckpts[] = {MO_CKPT_NONE, MO_CKPT_FULL, MO_CKPT_SELECTIVE, MO_CKPT_SQRT};
    int accums[] = {1, 2};
    int combos = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 4; k++)
            for (int a = 0; a < 2; a++) {
                mo_gpt_config c = tiny_config();
                c.dtype = dts[d];
                c.ckpt = ckpts[k];
                c.accum = accums[a];
                c.loss_scaling = c.dtype == MO_F16;
                mo_alloc_stats dev[2], host[2], none;
                c.offload = 0;
                if (!fixture_two_step_stats(MO_BACKEND_CPU, &c, 7, &none)) return;
                c.offload = 1;
                for (int b = 0; b < 2; b++) {
                    off_fixture o;
                    if (!off_open(&o, b ? MO_BACKEND_DRY : MO_BACKEND_CPU, &c)) return;
                    CHECK_OK(mo_gpt_step(o.f.m));
                    CHECK_OK(mo_gpt_step(o.f.m));
                    mo_allocator_stats(o.f.alloc, &dev[b]);
                    mo_allocator_stats(o.host, &host[b]);
                    off_close(&o);
                }
                char tag[64];
                snprintf(tag, sizeof tag, "%s ckpt %d accum %d", mo_dtype_name(c.dtype), (int)c.ckpt, c.accum);
                // dry == cpu, every figure of both allocators.
                const mo_alloc_stats *p[2][2] = {{&dev[0], &dev[1]}, {&host[0], &host[1]}};
                for (int w = 0; w < 2; w++) {
                    const mo_alloc_stats *x = p[w][0], *y = p[w][1];
                    CHECK_MSG(x->peak_allocated_bytes == y->peak_allocated_bytes && x->peak_reserved_bytes == y->peak_reserved_bytes,
                              "%s %s: cpu peak %llu/%llu, dry %llu/%llu", tag, w ? "host" : "device",
                              (unsigned long long)x->peak_allocated_bytes, (unsigned long long)x->peak_reserved_bytes,
                              (unsigned long long)y->peak_allocated_bytes, (unsigned long long)y->peak_reserved_bytes);
                    for (int q = 0; q < MO_CAT_COUNT; q++)
                        CHECK_MSG(x->peak_by_cat[q] == y->peak_by_cat[q] && x->at_peak_by_cat[q] == y->at_peak_by_cat[q],
                                  "%s %s %s: cpu %llu, dry %llu", tag, w ? "host" : "device", mo_category_name((mo_category)q),
                                  (unsigned long long)x->peak_by_cat[q], (unsigned long long)y->peak_by_cat[q]);
                }
                uint64_t pb = r512((uint64_t)mo_gpt_num_params(&c) * sizeof(float));
                int mixed = c.dtype != MO_F32;
                uint64_t moved = (mixed ? 3 : 2) * pb; // m, v (and the master)
                CHECK_EQ_U64(dev[0].peak_by_cat[MO_CAT_OPTIM], 0);
                CHECK_EQ_U64(dev[0].peak_by_cat[MO_CAT_MASTER], 0);
                CHECK_EQ_U64(host[0].peak_by_cat[MO_CAT_OPTIM], 2 * pb);
                CHECK_EQ_U64(host[0].peak_by_cat[MO_CAT_MASTER], mixed ? pb : 0);
                CHECK_EQ_U64(host[0].peak_allocated_bytes, 4 * pb); // and the staging: gradients, fp32 weights
                CHECK_MSG(none.peak_allocated_bytes - dev[0].peak_allocated_bytes == moved,
                          "%s: device peak %llu without offload, %llu with: expected a drop of %llu", tag,
                          (unsigned long long)none.peak_allocated_bytes, (unsigned long long)dev[0].peak_allocated_bytes,
                          (unsigned long long)moved);
                combos++;
            }
    CHECK_EQ_U64(combos, 24);
}

// Refusals: no host allocator in the context.
static void test_refusal(void) {
    mo_gpt_config c = tiny_config();
    c.offload = 1;
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    mo_gpt *m = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_DRY, a));
    mo_status st = mo_gpt_create(&m, &c, x);
    CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg(), "--offload"), "status %d, '%s'", (int)st, mo_errmsg());
    CHECK(m == NULL);
    mo_clear_error();
    mo_ctx_destroy(x);
    mo_alloc_stats s;
    mo_allocator_stats(a, &s);
    CHECK_EQ_U64(s.allocated_bytes, 0);
    mo_allocator_destroy(a);
}

// The update's knobs (strategies/offload_update.h): chunked on the copy stream and/or over several host
// threads, the weights, m and v stay bit-identical to no offload (test_equivalence under each setting).
static void set_knobs(const char *chunk, const char *threads) {
    if (chunk) setenv("MEMOPT_OFFLOAD_CHUNK", chunk, 1);
    else unsetenv("MEMOPT_OFFLOAD_CHUNK");
    if (threads) setenv("MEMOPT_OFFLOAD_THREADS", threads, 1);
    else unsetenv("MEMOPT_OFFLOAD_THREADS");
    printf("offload update knobs: MEMOPT_OFFLOAD_CHUNK=%s MEMOPT_OFFLOAD_THREADS=%s\n", chunk ? chunk : "(unset)",
           threads ? threads : "(unset)");
}

// The knobs' copies and cost ops: per chunk the gradients down (and in fp32 the weights down), the weights
// back; on cpu each is counted by the copy engine, on dry and cpu alike the cost trace holds the same host
// copy and host work bytes as the whole update in order.
static void test_chunked_copies(void) {
    mo_dtype dts[] = {MO_F32, MO_BF16};
    for (int d = 0; d < 2; d++) {
        mo_gpt_config c = tiny_config();
        c.dtype = dts[d];
        c.offload = 1;
        double bytes[2][2][2] = {{{0}}}; // [chunked][backend cpu, dry][host copy, host work]
        for (int chunked = 0; chunked < 2; chunked++)
            for (int b = 0; b < 2; b++) {
                set_knobs(chunked ? "1000" : NULL, chunked ? "3" : NULL);
                off_fixture o;
                if (!off_open(&o, b ? MO_BACKEND_DRY : MO_BACKEND_CPU, &c)) return;
                mo_cost_trace t = {0};
                mo_cost_trace_attach(o.f.ctx, &t);
                CHECK_OK(mo_gpt_step(o.f.m));
                CHECK_OK(mo_gpt_step(o.f.m));
                mo_cost_trace_attach(o.f.ctx, NULL);
                for (size_t i = 0; i < t.n; i++) {
                    if (t.ops[i].cls == MO_COST_HOST_COPY) bytes[chunked][b][0] += t.ops[i].bytes;
                    if (t.ops[i].cls == MO_COST_HOST) bytes[chunked][b][1] += t.ops[i].bytes;
                    CHECK_MSG(t.ops[i].cls != MO_COST_COPY_OUT && t.ops[i].cls != MO_COST_COPY_BACK &&
                                  t.ops[i].cls != MO_COST_COPY_JOIN,
                              "%s: the update's copies recorded as activation copies (%s)", mo_dtype_name(c.dtype),
                              t.ops[i].name);
                }
                mo_cost_trace_free(&t);
                mo_copy_stats cs = {0};
                CHECK_OK(mo_copy_collect(o.f.ctx, &cs));
                const size_t n = o.f.m->num_params, nch = (n + 999) / 1000;
                const int per = c.dtype == MO_F32 ? 3 : 2;
                const uint64_t want = chunked ? (uint64_t)(2 * nch * per) : 0;
                CHECK_MSG((uint64_t)cs.copies == want, "%s chunked %d %s: %d copies on the copy stream, want %llu",
                          mo_dtype_name(c.dtype), chunked, b ? "dry" : "cpu", cs.copies, (unsigned long long)want);
                const uint64_t wb = chunked ? 2 * (uint64_t)n * (c.dtype == MO_F32 ? 12 : 6) : 0;
                CHECK_MSG(cs.bytes == wb, "%s chunked %d: %llu bytes copied, want %llu", mo_dtype_name(c.dtype), chunked,
                          (unsigned long long)cs.bytes, (unsigned long long)wb);
                off_close(&o);
            }
        for (int k = 0; k < 2; k++)
            CHECK_MSG(bytes[0][0][k] > 0 && bytes[1][0][k] == bytes[0][0][k] && bytes[1][1][k] == bytes[0][0][k] &&
                          bytes[0][1][k] == bytes[0][0][k],
                      "%s %s bytes in the trace: whole %g (dry %g), chunked %g (dry %g)", mo_dtype_name(c.dtype),
                      k ? "host work" : "host copy", bytes[0][0][k], bytes[0][1][k], bytes[1][0][k], bytes[1][1][k]);
    }
    set_knobs(NULL, NULL);
}

// A knob that is not a number in range: the model is refused at creation, naming it, nothing allocated.
static void test_knob_errors(void) {
    const char *bad[][2] = {{"0", NULL}, {"-5", NULL}, {"12x", NULL}, {NULL, "0"}, {NULL, "257"}, {NULL, "two"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_knobs(bad[i][0], bad[i][1]);
        mo_gpt_config c = tiny_config();
        c.offload = 1;
        mo_allocator *a = NULL, *h = NULL;
        mo_ctx *x = NULL;
        mo_gpt *m = NULL;
        CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
        CHECK_OK(mo_allocator_create_host(&h, MO_BACKEND_CPU));
        CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
        x->host_alloc = h;
        mo_status st = mo_gpt_create(&m, &c, x);
        const char *name = bad[i][0] ? "MEMOPT_OFFLOAD_CHUNK=" : "MEMOPT_OFFLOAD_THREADS=";
        CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg(), name) && m == NULL, "knob %s%s: status %d, '%s'", name,
                  bad[i][0] ? bad[i][0] : bad[i][1], (int)st, mo_errmsg());
        mo_clear_error();
        mo_ctx_destroy(x);
        mo_alloc_stats s1, s2;
        mo_allocator_stats(a, &s1);
        mo_allocator_stats(h, &s2);
        CHECK_EQ_U64(s1.allocated_bytes + s2.allocated_bytes, 0);
        mo_allocator_destroy(h);
        mo_allocator_destroy(a);
    }
    set_knobs(NULL, NULL);
}

// The host threads: a count set runs as set (at most one element a thread), so the threaded equivalence
// cases below do run on several threads; the default 8 only where each gets 64 Ki elements.
static void test_thread_count(void) {
    CHECK(mo_offload_threads_for(7000, 4, 1) == 4 && mo_offload_threads_for(7000, 3, 1) == 3);
    CHECK(mo_offload_threads_for(3, 4, 1) == 3 && mo_offload_threads_for(0, 4, 1) == 1 && mo_offload_threads_for(777, 0, 1) == 1);
    CHECK(mo_offload_threads_for(7000, 8, 0) == 1 && mo_offload_threads_for(200000, 8, 0) == 3);
    CHECK(mo_offload_threads_for(124475904, 8, 0) == 8 && mo_offload_threads_for(8 * 65536, 8, 0) == 8);
    CHECK(mo_offload_threads_for(8 * 65536 - 1, 8, 0) == 7);
}

int main(void) {
    test_thread_count();
    test_equivalence();
    test_bytes();
    test_refusal();
    // The same equivalence with the update chunked (small, odd and larger than the model), threaded, both.
    const char *knobs[][2] = {{"1000", NULL}, {"777", "4"}, {NULL, "3"}, {"100000000", "2"}};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        set_knobs(knobs[i][0], knobs[i][1]);
        test_equivalence();
    }
    set_knobs(NULL, NULL);
    test_chunked_copies();
    test_knob_errors();
    return test_finish();
}
