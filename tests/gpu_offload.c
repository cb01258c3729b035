// --offload optimizer on the GPU (models/gpt.h cfg.offload): after two steps the weights, the 16-bit
// working copy and the AdamW moments are bit-identical to the same run without offload (the host
// AdamW is the CPU reference, which the cuda kernel reproduces bit for bit on normal numbers), for
// fp32 and bf16 with accumulation and checkpointing; the dry backend predicts both the device and the
// pinned host allocator of the cuda run to the byte.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/gpt_fixture.h"

// Reduced: batch 2 (accum 2 still divides it; the offloaded update, the path under test, sees the same
// parameters).
static mo_gpt_config small_config(void) {
    mo_gpt_config c = tiny_config();
    c.layers = 3; c.hidden = 128; c.heads = 4; c.seq = 64; c.batch = test_is_reduced() ? 2 : 4; c.vocab = 1000;
    c.grad_clip = 1.0f;
    return c;
}

typedef struct { gpt_fixture f; mo_allocator *host; } off_fixture;

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
    fixture_close(&o->f);
    mo_allocator_destroy(o->host);
}

static size_t count_diff(const void *a, const void *b, size_t n, size_t w) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp((const char *)a + i * w, (const char *)b + i * w, w) != 0;
    return d;
}

static void test_equal(mo_dtype dt, int accum, mo_ckpt_kind ckpt, const char *tag) {
    mo_gpt_config c = small_config();
    c.dtype = dt; c.accum = accum; c.ckpt = ckpt;
    gpt_fixture ref;
    off_fixture off;
    c.offload = 0;
    if (!fixture_open(&ref, MO_BACKEND_CUDA, &c, 7)) return;
    c.offload = 1;
    if (!off_open(&off, MO_BACKEND_CUDA, &c)) return;
    for (int s = 0; s < 2; s++) {
        CHECK_OK(mo_gpt_step(ref.m));
        CHECK_OK(mo_gpt_step(off.f.m));
    }
    size_t n = ref.m->num_params, fb = n * sizeof(float);
    float *p0 = fixture_read(&ref, ref.m->params, n), *m0 = fixture_read(&ref, ref.m->adam_m, n);
    float *v0 = fixture_read(&ref, ref.m->adam_v, n);
    // Offloaded: m, v (and a 16-bit run's master) are host memory; fp32 weights are on the device.
    float *p1 = dt == MO_F32 ? fixture_read(&off.f, off.f.m->params, n) : NULL;
    size_t dp = count_diff(p0, p1 ? p1 : off.f.m->params, n, 4), dm = count_diff(m0, off.f.m->adam_m, n, 4),
           dv = count_diff(v0, off.f.m->adam_v, n, 4), dw = 0;
    if (dt != MO_F32) {
        size_t wb = n * mo_dtype_size(dt);
        void *w0 = malloc(wb), *w1 = malloc(wb);
        CHECK_OK(mo_memcpy_d2h(ref.ctx, w0, ref.m->wparams, wb));
        CHECK_OK(mo_memcpy_d2h(off.f.ctx, w1, off.f.m->wparams, wb));
        dw = count_diff(w0, w1, n, mo_dtype_size(dt));
        free(w0); free(w1);
    }
    CHECK_MSG(dp == 0 && dm == 0 && dv == 0 && dw == 0,
              "%s: of %zu elements, %zu weights, %zu m, %zu v, %zu 16-bit weights differ with --offload optimizer", tag, n, dp, dm,
              dv, dw);
    printf(" %s: %zu params bit-identical with offload (%zu bytes on the host)\n", tag, n, fb);
    free(p0); free(m0); free(v0); free(p1);
    fixture_close(&ref);
    off_close(&off);
}

static void test_dry_equals_cuda(mo_dtype dt) {
    mo_gpt_config c = small_config();
    c.dtype = dt; c.accum = 2; c.ckpt = MO_CKPT_FULL; c.offload = 1;
    mo_alloc_stats d[2], h[2];
    for (int b = 0; b < 2; b++) {
        off_fixture o;
        if (!off_open(&o, b ? MO_BACKEND_DRY : MO_BACKEND_CUDA, &c)) return;
        CHECK_OK(mo_gpt_step(o.f.m));
        CHECK_OK(mo_gpt_step(o.f.m));
        mo_allocator_stats(o.f.alloc, &d[b]);
        mo_allocator_stats(o.host, &h[b]);
        off_close(&o);
    }
    CHECK_EQ_U64(d[0].peak_allocated_bytes, d[1].peak_allocated_bytes);
    CHECK_EQ_U64(d[0].peak_reserved_bytes, d[1].peak_reserved_bytes);
    CHECK_EQ_U64(h[0].peak_allocated_bytes, h[1].peak_allocated_bytes);
    for (int q = 0; q < MO_CAT_COUNT; q++) {
        CHECK_EQ_U64(d[0].peak_by_cat[q], d[1].peak_by_cat[q]);
        CHECK_EQ_U64(h[0].peak_by_cat[q], h[1].peak_by_cat[q]);
    }
}

int main(void) {
    test_require_gpu();
    // Reduced: fp32 plain and bf16 with accumulation and checkpointing, then per knob setting one
    // bit-identity case (alternating) and bf16's dry check only with the last (chunks and threads);
    // the threads-only setting dropped (the third has threads).
    const int reduced = test_reduced("batch 4 (2 instead), 2 of 4 base cases, bf16's base dry case, 6 of the 9 knob"
                                     " cases (the threads-only setting among them)");
    // each call a case of MEMOPT_TEST_PART (testlib.h)
    if (test_part_take("fp32")) test_equal(MO_F32, 1, MO_CKPT_NONE, "fp32");
    if (!reduced && test_part_take("fp32 accum 2")) test_equal(MO_F32, 2, MO_CKPT_FULL, "fp32 accum 2 ckpt full");
    if (!reduced && test_part_take("bf16")) test_equal(MO_BF16, 1, MO_CKPT_NONE, "bf16");
    if (test_part_take("bf16 accum 2")) test_equal(MO_BF16, 2, MO_CKPT_FULL, "bf16 accum 2 ckpt full");
    if (test_part_take("fp32 dry")) test_dry_equals_cuda(MO_F32);
    if (!reduced && test_part_take("bf16 dry")) test_dry_equals_cuda(MO_BF16);
    // The update chunked on the copy stream (chunks of 10007 parameters: the copies back of one chunk
    // overlap the host work of the next; an odd size leaves a short last chunk) and/or over host threads
    // (strategies/offload_update.h): still bit-identical, and dry still predicts cuda to the byte.
    const char *knobs[][2] = {{"10007", NULL}, {NULL, "4"}, {"65536", "3"}};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        if (reduced && i == 1) continue;
        if (knobs[i][0]) setenv("MEMOPT_OFFLOAD_CHUNK", knobs[i][0], 1);
        else unsetenv("MEMOPT_OFFLOAD_CHUNK");
        if (knobs[i][1]) setenv("MEMOPT_OFFLOAD_THREADS", knobs[i][1], 1);
        else unsetenv("MEMOPT_OFFLOAD_THREADS");
        printf("MEMOPT_OFFLOAD_CHUNK=%s MEMOPT_OFFLOAD_THREADS=%s\n", knobs[i][0] ? knobs[i][0] : "(unset)",
               knobs[i][1] ? knobs[i][1] : "(unset)");
        if ((!reduced || i == 0) && test_part_take("fp32 knobs")) test_equal(MO_F32, 2, MO_CKPT_FULL, "fp32 accum 2 ckpt full, knobs");
        if ((!reduced || i == 2) && test_part_take("bf16 knobs")) test_equal(MO_BF16, 1, MO_CKPT_NONE, "bf16, knobs");
        if ((!reduced || i == 2) && test_part_take("bf16 knobs dry")) test_dry_equals_cuda(MO_BF16);
    }
    unsetenv("MEMOPT_OFFLOAD_CHUNK");
    unsetenv("MEMOPT_OFFLOAD_THREADS");
    return test_finish();
}
