// One data-parallel rank of the GPT with ZeRO sharding: layout, buffers, initial values and the
// collectives of each level (models/gpt_zero.h says what each level keeps and why).
#include "gpt_zero.h"

#include <stdlib.h>
#include <string.h>
#include "gpt_shard.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed.h"
#include "strategies/comm.h"
#include "strategies/schedule.h"

static size_t round_up(size_t x, size_t k) { return (x + k - 1) / k * k; }
static int is_outer(int p) { return p == GPT_WTE || p == GPT_WPE || p == GPT_LNFW || p == GPT_LNFB; }
static const int outer_order[4] = {GPT_WTE, GPT_WPE, GPT_LNFW, GPT_LNFB};
static size_t dsz(const mo_gpt *m) { return mo_dtype_size(m->cfg.dtype); }
static int mixed(const mo_gpt *m) { return m->cfg.dtype != MO_F32; }
static char *at(void *p, size_t elems, size_t ds) { return (char *)p + elems * ds; }

// The units and their chunks (gpt_zero.h).
static mo_status layout(mo_gpt *m, gpt_zero *z) {
    int L = m->cfg.layers, D = z->dp;
    size_t o = 0;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        z->std_off[p] = o;
        o += m->param_sizes[p];
        z->per_layer[p] = is_outer(p) ? m->param_sizes[p] : m->param_sizes[p] / (size_t)L;
    }
    if (z->level == 0) return MO_OK;
    z->blockwise = z->level >= 2;
    z->units = z->blockwise ? L + 1 : 1;
    size_t U = (size_t)z->units;
    z->n = calloc(U, sizeof *z->n);
    z->chunk = calloc(U, sizeof *z->chunk);
    z->full_off = calloc(U, sizeof *z->full_off);
    z->shard_off = calloc(U, sizeof *z->shard_off);
    z->wunit = calloc(U, sizeof *z->wunit);
    z->gunit = calloc(U, sizeof *z->gunit);
    z->parts = calloc(U, sizeof *z->parts);
    if (!z->n || !z->chunk || !z->full_off || !z->shard_off || !z->wunit || !z->gunit || !z->parts)
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the ZeRO layout");
    if (!z->blockwise) {
        z->n[0] = m->num_params;
    } else {
        size_t k = 0;
        for (int i = 0; i < 4; i++) { z->in_unit[outer_order[i]] = k; k += z->per_layer[outer_order[i]]; }
        z->n[0] = k;
        k = 0;
        for (int p = 0; p < GPT_NPARAMS; p++)
            if (!is_outer(p)) { z->in_unit[p] = k; k += z->per_layer[p]; }
        for (int u = 1; u <= L; u++) z->n[u] = k;
    }
    for (int u = 0; u < z->units; u++) {
        z->chunk[u] = round_up((z->n[u] + (size_t)D - 1) / (size_t)D, GPT_ZERO_ALIGN);
        z->full_off[u] = z->full_n;
        z->shard_off[u] = z->shard_n;
        z->full_n += (size_t)D * z->chunk[u];
        z->shard_n += z->chunk[u];
    }
    return MO_OK;
}

// Unit u's n[u] elements, between the usual layout (std) and the unit's own (unit), either way.
static void unit_copy(const gpt_zero *z, int u, float *unit, float *std, int to_unit) {
    if (!z->blockwise) {
        if (to_unit) memcpy(unit, std, z->n[0] * sizeof(float));
        else memcpy(std, unit, z->n[0] * sizeof(float));
        return;
    }
    for (int p = 0; p < GPT_NPARAMS; p++) {
        if (is_outer(p) != (u == 0)) continue;
        float *s = std + z->std_off[p] + (u == 0 ? 0 : (size_t)(u - 1) * z->per_layer[p]), *t = unit + z->in_unit[p];
        if (to_unit) memcpy(t, s, z->per_layer[p] * sizeof(float));
        else memcpy(s, t, z->per_layer[p] * sizeof(float));
    }
}

// Element k of unit u in the usual layout.
static size_t std_index(const gpt_zero *z, int u, size_t k) {
    if (!z->blockwise) return k;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        if (is_outer(p) != (u == 0)) continue;
        if (k >= z->in_unit[p] && k < z->in_unit[p] + z->per_layer[p])
            return z->std_off[p] + (u == 0 ? 0 : (size_t)(u - 1) * z->per_layer[p]) + (k - z->in_unit[p]);
    }
    return (size_t)-1; // padding
}

// Where each unit's chunk of this rank lives: the parts of the update (gpt_zero.h's table).
static void set_parts(mo_gpt *m, gpt_zero *z) {
    size_t ds = dsz(m);
    for (int u = 0; u < z->units; u++) {
        size_t own = z->full_off[u] + (size_t)z->rank * z->chunk[u], so = z->shard_off[u];
        mo_sched_part *p = &z->parts[u];
        p->n = z->chunk[u];
        p->params = mixed(m) || z->level == 3 ? m->params + so : m->params + own; // the fp32 master or fp32 weights
        p->wparams = mixed(m) ? at(m->wparams, z->level == 3 ? so : own, ds) : (void *)p->params;
        p->grads = z->level == 1 ? m->grads + own : m->grads + so;
        p->adam_m = m->adam_m + so;
        p->adam_v = m->adam_v + so;
    }
}

// The usual tensor pointers where they mean something at this level (gpt_step.c reads W() and GB()
// for the block tensors of the blockwise levels, and wparam_ptr / grad_ptr for the outer ones).
static void set_pointers(mo_gpt *m, gpt_zero *z) {
    size_t ds = dsz(m);
    for (int p = 0; p < GPT_NPARAMS; p++) {
        m->param_ptr[p] = NULL;
        m->grad_ptr[p] = NULL;
        m->wparam_ptr[p] = NULL;
        if (z->level == 1) {
            if (!mixed(m)) m->param_ptr[p] = m->params + z->std_off[p];
            m->grad_ptr[p] = m->grads + z->std_off[p];
            m->wparam_ptr[p] = at(m->wparams, z->std_off[p], ds);
        }
    }
    if (z->level == 2) {
        for (int u = 0; u < z->units; u++) z->wunit[u] = at(m->wparams, z->full_off[u], ds); // views, never freed
        for (int i = 0; i < 4; i++) m->wparam_ptr[outer_order[i]] = at(z->wunit[0], z->in_unit[outer_order[i]], ds);
    }
}

static mo_status init_values(mo_gpt *m, gpt_zero *z) {
    if (m->ctx->backend == MO_BACKEND_DRY) return MO_OK; // nothing is computed
    size_t ds = dsz(m), F = z->full_n, S = z->shard_n;
    mo_status st = MO_OK;
    float *h = malloc(m->num_params * sizeof(float)), *full = calloc(F, sizeof(float)), *shard = malloc(S * sizeof(float));
    void *h16 = mixed(m) ? malloc((F > S ? F : S) * ds) : NULL;
    if (!h || !full || !shard || (mixed(m) && !h16)) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the initial parameters"); goto done; }
    gpt_init_full(&m->cfg, h);
    for (int u = 0; u < z->units; u++) unit_copy(z, u, full + z->full_off[u], h, 1); // padding stays 0
    for (int u = 0; u < z->units; u++)
        memcpy(shard + z->shard_off[u], full + z->full_off[u] + (size_t)z->rank * z->chunk[u], z->chunk[u] * sizeof(float));
    if (z->level < 3) { // the full working weights
        if (!mixed(m)) st = mo_memcpy_h2d(m->ctx, m->params, full, F * sizeof(float));
        else {
            mo_convert_from_f32(m->cfg.dtype, h16, full, F); // round to nearest even, as mo_cast_mixed
            st = mo_memcpy_h2d(m->ctx, m->wparams, h16, F * ds);
        }
    }
    if (st == MO_OK && (mixed(m) || z->level == 3)) st = mo_memcpy_h2d(m->ctx, m->params, shard, S * sizeof(float));
    if (st == MO_OK && mixed(m) && z->level == 3) {
        mo_convert_from_f32(m->cfg.dtype, h16, shard, S);
        st = mo_memcpy_h2d(m->ctx, m->wparams, h16, S * ds);
    }
done:
    free(h); free(full); free(shard); free(h16);
    return st;
}

mo_status gpt_zero_create(mo_gpt *m) {
    const mo_gpt_shard *sh = m->shard;
    gpt_zero *z = calloc(1, sizeof *z);
    if (!z) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the ZeRO layout");
    m->zero = z;
    z->dp = sh->dp;
    z->rank = sh->dp_rank;
    z->level = sh->zero;
    MO_TRY(layout(m, z));
    if (z->level == 0) return MO_OK; // the usual buffers (gpt_params.c), replicated
    mo_allocator *a = m->ctx->alloc;
    size_t ds = dsz(m), F = z->full_n, S = z->shard_n;
    size_t wn = z->level == 3 ? S : F; // the working weights: full, or the shard at level 3
    if (!mixed(m)) {
        MO_TRY(mo_alloc(a, wn * sizeof(float), MO_CAT_PARAM, (void **)&m->params));
        m->wparams = m->params;
    } else {
        MO_TRY(mo_alloc(a, S * sizeof(float), MO_CAT_MASTER, (void **)&m->params));
        MO_TRY(mo_alloc(a, wn * ds, MO_CAT_PARAM, &m->wparams));
    }
    size_t gn = z->level == 1 ? F : S;
    MO_TRY(mo_alloc(a, gn * sizeof(float), MO_CAT_GRAD, (void **)&m->grads));
    MO_TRY(mo_alloc(a, S * sizeof(float), MO_CAT_OPTIM, (void **)&m->adam_m));
    MO_TRY(mo_alloc(a, S * sizeof(float), MO_CAT_OPTIM, (void **)&m->adam_v));
    if (mixed(m)) z->master = m->params;
    if (z->level == 3) z->wshard = m->wparams;
    set_pointers(m, z);
    set_parts(m, z);
    MO_TRY(init_values(m, z));
    MO_TRY(mo_memset_zero(m->ctx, m->grads, gn * sizeof(float)));
    MO_TRY(mo_memset_zero(m->ctx, m->adam_m, S * sizeof(float)));
    MO_TRY(mo_memset_zero(m->ctx, m->adam_v, S * sizeof(float)));
    return MO_OK;
}

void gpt_zero_unwind(mo_gpt *m) {
    gpt_zero *z = m->zero;
    if (!z || !z->blockwise) return;
    for (int u = 0; u < z->units; u++) {
        if (z->level == 3 && z->wunit[u]) { mo_free(m->ctx->alloc, z->wunit[u]); z->wunit[u] = NULL; }
        if (z->gunit[u]) { mo_free(m->ctx->alloc, z->gunit[u]); z->gunit[u] = NULL; }
    }
    for (int i = 0; i < 4; i++) {
        m->grad_ptr[outer_order[i]] = NULL;
        if (z->level == 3) m->wparam_ptr[outer_order[i]] = NULL;
    }
}

void gpt_zero_destroy(mo_gpt *m) {
    gpt_zero *z = m->zero;
    if (!z) return;
    if (m->ctx) gpt_zero_unwind(m);
    free(z->n); free(z->chunk); free(z->full_off); free(z->shard_off);
    free(z->wunit); free(z->gunit); free(z->parts);
    free(z);
    m->zero = NULL;
}

float *gpt_zero_grads(const mo_gpt *m, size_t *n) {
    const gpt_zero *z = m->zero;
    *n = !z || z->level == 0 ? m->num_params : z->level == 1 ? z->full_n : z->shard_n;
    return m->grads;
}

// The fp32 communicator moves 16-bit chunks as whole fp32 words (an all-gather only copies bits):
// chunk * ds bytes, a multiple of 4 since chunk is a multiple of GPT_ZERO_ALIGN.
static mo_status gather_words(mo_gpt *m, const void *send, void *recv, size_t chunk) {
    return mo_comm_allgather(m->shard->dp_comm, (const float *)send, (float *)recv, chunk * dsz(m) / sizeof(float));
}

mo_status gpt_zero_weights_get(mo_gpt *m, int u) {
    gpt_zero *z = m->zero;
    if (!z || z->level != 3 || z->wunit[u]) return MO_OK; // not sharded, or already held
    size_t ds = dsz(m);
    // Taken before the all-gather: an out-of-memory inside it would leave the peers waiting.
    mo_alloc_trace_tensor(m->ctx->alloc, "zero.unit_weights");
    MO_TRY(mo_alloc(m->ctx->alloc, (size_t)z->dp * z->chunk[u] * ds, MO_CAT_PARAM, &z->wunit[u]));
    MO_TRY(gather_words(m, at(z->wshard, z->shard_off[u], ds), z->wunit[u], z->chunk[u]));
    if (u == 0)
        for (int i = 0; i < 4; i++) m->wparam_ptr[outer_order[i]] = at(z->wunit[0], z->in_unit[outer_order[i]], ds);
    return MO_OK;
}

void gpt_zero_weights_put(mo_gpt *m, int u) {
    gpt_zero *z = m->zero;
    if (!z || z->level != 3 || !z->wunit[u]) return;
    mo_free(m->ctx->alloc, z->wunit[u]);
    z->wunit[u] = NULL;
    if (u == 0)
        for (int i = 0; i < 4; i++) m->wparam_ptr[outer_order[i]] = NULL;
}

mo_status gpt_zero_grad_begin(mo_gpt *m, int u) {
    gpt_zero *z = m->zero;
    if (!z || !z->blockwise || z->gunit[u]) return MO_OK;
    size_t bytes = (size_t)z->dp * z->chunk[u] * sizeof(float);
    mo_alloc_trace_tensor(m->ctx->alloc, "zero.unit_grads");
    MO_TRY(mo_alloc(m->ctx->alloc, bytes, MO_CAT_GRAD, (void **)&z->gunit[u]));
    MO_TRY(mo_memset_zero(m->ctx, z->gunit[u], bytes));
    if (u == 0)
        for (int i = 0; i < 4; i++) m->grad_ptr[outer_order[i]] = z->gunit[0] + z->in_unit[outer_order[i]];
    return MO_OK;
}

mo_status gpt_zero_grad_end(mo_gpt *m, int u) {
    gpt_zero *z = m->zero;
    if (!z || !z->blockwise || !z->gunit[u]) return MO_OK;
    float *full = z->gunit[u], *mine = full + (size_t)z->rank * z->chunk[u], *shard = m->grads + z->shard_off[u];
    // In place: chunk r := the rank-ordered sum of every rank's chunk r; then added to the shard
    // (zeroed before the first micro-batch, so accumulation sums the micro-batches' reduced chunks).
    mo_status st = mo_comm_reduce_scatter_sum(m->shard->dp_comm, full, mine, z->chunk[u]);
    if (st == MO_OK) st = mo_residual_forward(m->ctx, shard, shard, mine, z->chunk[u]);
    mo_free(m->ctx->alloc, full);
    z->gunit[u] = NULL;
    if (u == 0)
        for (int i = 0; i < 4; i++) m->grad_ptr[outer_order[i]] = NULL;
    return st;
}

mo_status gpt_zero_reduce(mo_gpt *m) {
    gpt_zero *z = m->zero;
    if (!z) return MO_OK;
    mo_comm *c = m->shard->dp_comm;
    if (z->level == 0) return mo_comm_allreduce_sum(c, m->grads, m->num_params);
    if (z->level == 1) return mo_comm_reduce_scatter_sum(c, m->grads, m->grads + (size_t)z->rank * z->chunk[0], z->chunk[0]);
    return MO_OK; // levels 2, 3: reduced unit by unit in backward
}

const mo_sched_part *gpt_zero_parts(const mo_gpt *m, int *n) {
    const gpt_zero *z = m->zero;
    *n = z && z->level >= 1 ? z->units : 0;
    return *n ? z->parts : NULL;
}

mo_status gpt_zero_gather_weights(mo_gpt *m) {
    gpt_zero *z = m->zero;
    if (!z || z->level < 1 || z->level > 2) return MO_OK; // level 3 gathers before use
    size_t ds = dsz(m);
    for (int u = 0; u < z->units; u++) {
        void *unit = at(m->wparams, z->full_off[u], ds);
        MO_TRY(gather_words(m, at(unit, (size_t)z->rank * z->chunk[u], ds), unit, z->chunk[u]));
    }
    return MO_OK;
}

mo_status gpt_zero_export(mo_gpt *m, int what, float *full, unsigned char *seen) {
    gpt_zero *z = m->zero;
    size_t n = m->num_params;
    if (z->level == 0) {
        MO_TRY(mo_memcpy_d2h(m->ctx, full, what ? (const float *)m->grads : m->params, n * sizeof(float)));
        memset(seen, 1, n);
        return MO_OK;
    }
    size_t cmax = 0;
    for (int u = 0; u < z->units; u++) if (z->chunk[u] > cmax) cmax = z->chunk[u];
    float *tmp = malloc((cmax ? cmax : 1) * sizeof(float));
    if (!tmp) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the export");
    mo_status st = MO_OK;
    for (int u = 0; u < z->units && st == MO_OK; u++) {
        const mo_sched_part *p = &z->parts[u];
        st = mo_memcpy_d2h(m->ctx, tmp, what ? p->grads : p->params, z->chunk[u] * sizeof(float));
        for (size_t k = 0; k < z->chunk[u] && st == MO_OK; k++) {
            size_t g = (size_t)z->rank * z->chunk[u] + k;
            if (g >= z->n[u]) break; // padding
            size_t i = std_index(z, u, g);
            full[i] = tmp[k];
            seen[i] = 1;
        }
    }
    free(tmp);
    return st;
}
