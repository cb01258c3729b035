// The generic schedule's forward and backward (strategies/schedule.h): accumulation, checkpoint
// segments and the 1F1B pipeline over any model's blocks. The update is schedule_update.c.
#include "strategies/schedule.h"

#include <stdlib.h>
#include <string.h>
#include "kernels/copy_stream.h"
#include "kernels/zero_side.h"
#include "kernels/cost.h"
#include "models/step_ops.h"
#include "strategies/comm.h"

// One micro-batch in flight: the model's state and the stream.
typedef struct sched_slot {
    void *mstate;   // the model's slot state (slot_bytes)
    char *blocks;   // (L) the model's block states (block_bytes each)
    void **x;       // (L+1) x[0] the body's input, x[l+1] block l's output: (N, C) dt
    void *d;        // (N, C) dt the stream's gradient in backward
    int micro;
    // --offload activations: x[l]'s host copy (host_alloc) while it is offloaded, its requested bytes and
    // the ticket of its copy in flight (-1: none)
    void **h;
    size_t *hb;
    int *tk;
} sched_slot;

typedef struct sched {
    const mo_sched_config *c;
    const mo_sched_model *ops;
    void *m;
    double recompute_ms;
    int offload; // --offload activations (ctx->offload_act): the checkpointed segments' inputs go to the host
} sched;

static void *blk_of(const sched *s, sched_slot *t, int l) { return t->blocks + (size_t)l * s->ops->block_bytes; }
static int first_stage(const sched *s) { return s->c->pp <= 1 || s->c->stage == 0; }
static int last_stage(const sched *s) { return s->c->pp <= 1 || s->c->stage == s->c->pp - 1; }
static void phase(const sched *s, const char *name) { mo_alloc_trace_mark(s->c->ctx->alloc, MO_TRACE_PHASE, name); }
static void sfree(const sched *s, void **p) { mo_step_free(s->c->ctx, p); }

// Whatever is still live in the slot (all of it after a failure; nothing after a clean backward).
static void slot_unwind(const sched *s, sched_slot *t) {
    int live = 0; // after a clean backward every host copy is freed and every copy joined
    for (int l = 0; s->offload && l <= s->c->blocks; l++) live |= t->h[l] != NULL || t->tk[l] >= 0;
    if (live) { // a failure: no copy may still read or write what is freed below
        (void)mo_ctx_sync(s->c->ctx);
        (void)mo_copy_sync(s->c->ctx);
        for (int l = 0; l <= s->c->blocks; l++) {
            if (t->h[l]) (void)mo_free(s->c->ctx->host_alloc, t->h[l]);
            t->h[l] = NULL, t->tk[l] = -1;
        }
    }
    for (int l = 0; l < s->c->blocks; l++) s->ops->block_unwind(s->m, blk_of(s, t, l));
    for (int l = 0; l <= s->c->blocks; l++) sfree(s, &t->x[l]);
    s->ops->slot_unwind(s->m, t->mstate);
    sfree(s, &t->d);
}

// ---- --offload activations --------------------------------------------------------------------
// The input of every checkpointed segment but the last (the first one backward needs, right after the
// head) is copied to host memory as soon as it exists, on the copy stream (kernels/copy_stream.h), while
// the segment's first block runs; the device copy is freed after that block's forward (the compute
// stream first waits for the copy). In backward, when segment g starts, segment g-1's input is
// allocated on the device again and fetched while g recomputes and runs backward; g's own input, fetched
// during g+1, is joined before its recompute, and its host copy freed. So the device holds at most two
// segment inputs (plus the last one's) instead of all of them. Every allocation and free is at a fixed
// point of the op order, so dry gives the device and host peaks of cpu and cuda to the byte.
static int offloaded(const sched *s, int l) {
    mo_ckpt_layout K = s->c->seg;
    return s->offload && l < K.blocks && l % K.len == 0 && l / K.len < mo_ckpt_layout_segments(K) - 1;
}

// x[l] to the host (its copy in flight)
static mo_status offload_out(sched *s, sched_slot *t, int l) {
    mo_ctx *x = s->c->ctx;
    t->hb[l] = mo_alloc_requested_bytes(x->alloc, t->x[l]);
    MO_TRY(mo_alloc(x->host_alloc, t->hb[l], MO_CAT_ACTIVATION, &t->h[l]));
    return mo_copy_async(x, t->h[l], t->x[l], t->hb[l], 1, &t->tk[l]);
}

// After block l's forward: the device x[l] goes once its copy is done.
static mo_status offload_release(sched *s, sched_slot *t, int l) {
    MO_TRY(mo_copy_join(s->c->ctx, t->tk[l]));
    t->tk[l] = -1;
    sfree(s, &t->x[l]);
    return MO_OK;
}

// x[l] back to the device (its copy in flight): a fresh block, the copy ordered after the compute
// stream's work so far (the block may have been another tensor's until then).
static mo_status offload_fetch(sched *s, sched_slot *t, int l) {
    mo_ctx *x = s->c->ctx;
    mo_alloc_trace_tensor(x->alloc, "x[l] (from host)");
    MO_TRY(mo_alloc(x->alloc, t->hb[l], MO_CAT_ACTIVATION, &t->x[l]));
    return mo_copy_async(x, t->x[l], t->h[l], t->hb[l], 0, &t->tk[l]);
}

// Before segment g's recompute (first block a0): fetch segment g-1's input, then join g's own.
static mo_status offload_segment_start(sched *s, sched_slot *t, int g) {
    const int len = s->c->seg.len, a0 = g * len;
    if (offloaded(s, a0) && !t->x[a0]) MO_TRY(offload_fetch(s, t, a0)); // not prefetched (cannot happen)
    if (g > 0 && offloaded(s, a0 - len)) MO_TRY(offload_fetch(s, t, a0 - len));
    if (offloaded(s, a0)) {
        MO_TRY(mo_copy_join(s->c->ctx, t->tk[a0]));
        t->tk[a0] = -1;
        // later copies into this host block run after this one on the same copy stream
        MO_TRY(mo_free(s->c->ctx->host_alloc, t->h[a0]));
        t->h[a0] = NULL;
    }
    return MO_OK;
}

// A stage after the first finds x[0] received; a stage before the last leaves x[L] to send.
static mo_status forward(sched *s, sched_slot *t) {
    const mo_sched_config *c = s->c;
    mo_ctx *x = c->ctx;
    int L = c->blocks;
    mo_ckpt_layout K = c->seg;
    mo_cost_set_region(x, MO_COST_BODY);
    phase(s, "forward");
    if (first_stage(s)) MO_TRY(s->ops->input_fwd(s->m, t->mstate, t->micro, &t->x[0]));
    for (int l = 0; l < L; l++) {
        int ck = l < K.blocks; // in a checkpointed segment
        if (offloaded(s, l)) MO_TRY(offload_out(s, t, l));
        MO_TRY(s->ops->block_fwd(s->m, t->mstate, blk_of(s, t, l), l, t->micro, t->x[l], &t->x[l + 1],
                                 ck ? MO_SCHED_FWD_DROP : MO_SCHED_FWD_KEEP));
        // Only a segment's first input is kept (offloaded: on the host); the inputs inside a segment are
        // recomputed.
        if (ck && l % K.len != 0) sfree(s, &t->x[l]);
        if (offloaded(s, l)) MO_TRY(offload_release(s, t, l));
    }
    if (!last_stage(s)) return MO_OK;
    mo_cost_set_region(x, MO_COST_HEAD);
    MO_TRY(s->ops->head_fwd(s->m, t->mstate, t->micro, t->x[L]));
    mo_cost_set_region(x, MO_COST_BODY);
    return MO_OK;
}

// A stage before the last finds d received; a stage after the first leaves d(x[0]) there to send.
static mo_status backward(sched *s, sched_slot *t) {
    const mo_sched_config *c = s->c;
    mo_ctx *x = c->ctx;
    int L = c->blocks;
    mo_ckpt_layout K = c->seg;
    mo_cost_set_region(x, MO_COST_HEAD);
    phase(s, "backward");
    if (last_stage(s)) {
        MO_TRY(s->ops->head_bwd(s->m, t->mstate, t->micro, t->x[L], &t->d));
        sfree(s, &t->x[L]);
    }
    mo_cost_set_region(x, MO_COST_BODY);
    mo_status st = MO_OK;
    // The blocks outside checkpointed segments, then the segments, last first: each recomputed, then
    // its backward.
    for (int l = L - 1; l >= K.blocks && st == MO_OK; l--) {
        st = s->ops->block_bwd(s->m, t->mstate, blk_of(s, t, l), l, t->micro, t->x[l], t->d);
        if (st == MO_OK) sfree(s, &t->x[l]);
    }
    for (int g = mo_ckpt_layout_segments(K) - 1; g >= 0 && st == MO_OK; g--) {
        int a0 = g * K.len, b0 = a0 + K.len - 1 < K.blocks - 1 ? a0 + K.len - 1 : K.blocks - 1;
        if (s->offload && (st = offload_segment_start(s, t, g)) != MO_OK) break;
        mo_timer tm;
        MO_TRY(mo_timer_init(x, &tm));
        st = mo_timer_start(x, &tm);
        phase(s, "recompute");
        for (int l = a0; l <= b0 && st == MO_OK; l++)
            st = s->ops->block_fwd(s->m, t->mstate, blk_of(s, t, l), l, t->micro, t->x[l], l < b0 ? &t->x[l + 1] : NULL,
                                   l < b0 ? MO_SCHED_FWD_RECOMPUTE : MO_SCHED_FWD_RECOMPUTE_NO_OUT);
        double ms = 0;
        if (st == MO_OK) st = mo_timer_stop(x, &tm, &ms);
        mo_timer_destroy(&tm);
        s->recompute_ms += ms;
        phase(s, "backward");
        for (int l = b0; l >= a0 && st == MO_OK; l--) {
            st = s->ops->block_bwd(s->m, t->mstate, blk_of(s, t, l), l, t->micro, t->x[l], t->d);
            if (st == MO_OK) sfree(s, &t->x[l]);
        }
    }
    if (!first_stage(s)) return st; // d: d(x[0]), for the previous stage
    if (st == MO_OK && s->ops->input_bwd) st = s->ops->input_bwd(s->m, t->mstate, t->micro, t->d);
    sfree(s, &t->d);
    return st;
}

// ---- the pipeline (pp > 1): 1F1B ------------------------------------------------------------------
// Stage st of P runs min(P-st-1, M) forwards (warm-up), then alternates one forward and one backward,
// then runs the remaining backwards (cool-down): the non-interleaved 1F1B schedule of PipeDream-Flush
// (Narayanan et al. 2021) and Megatron-LM, the same gradients as GPipe (all forwards, then all
// backwards) with the same bubble, but stage st holds at most min(P - st, M) micro-batches'
// activations at once (stage 0: P, against GPipe's M). Sends and receives pair one-to-one between
// neighbours (Megatron's send_forward_recv_backward / send_backward_recv_forward are sendrecvs here),
// so the blocking point-to-point ops never deadlock. Every buffer is allocated before its op: an
// out-of-memory after the communicator's entry barrier would leave the peer waiting forever.

static size_t wire_bytes(const sched *s) { return s->c->stream_elems * mo_dtype_size(s->c->dt); }
static mo_status alloc_wire(const sched *s, void **p, const char *name) {
    return mo_step_act_alloc(s->c->ctx, s->c->dt, s->c->stream_elems, p, name);
}

// recv_forward: the previous stage's output into x[0].
static mo_status recv_input(sched *s, sched_slot *t) {
    if (first_stage(s)) return MO_OK;
    MO_TRY(alloc_wire(s, &t->x[0], "x[0] (received)"));
    return mo_comm_recv(s->c->pp_comm, t->x[0], wire_bytes(s), s->c->stage - 1);
}

// send_forward: x[L] to the next stage, then freed (no backward reads it).
static mo_status send_output(sched *s, sched_slot *t) {
    if (last_stage(s)) return MO_OK;
    void **out = &t->x[s->c->blocks];
    MO_TRY(mo_comm_send(s->c->pp_comm, *out, wire_bytes(s), s->c->stage + 1));
    sfree(s, out);
    return MO_OK;
}

// send_forward_recv_backward: f's output out, d(output) of b in.
static mo_status send_output_recv_grad(sched *s, sched_slot *f, sched_slot *b) {
    if (last_stage(s)) return MO_OK; // the loss makes the last stage's gradient
    void **out = &f->x[s->c->blocks];
    MO_TRY(alloc_wire(s, &b->d, "d (received)"));
    MO_TRY(mo_comm_sendrecv(s->c->pp_comm, *out, wire_bytes(s), s->c->stage + 1, b->d, wire_bytes(s), s->c->stage + 1));
    sfree(s, out);
    return MO_OK;
}

// recv_backward: d(output) of b from the next stage.
static mo_status recv_grad(sched *s, sched_slot *b) {
    if (last_stage(s)) return MO_OK;
    MO_TRY(alloc_wire(s, &b->d, "d (received)"));
    return mo_comm_recv(s->c->pp_comm, b->d, wire_bytes(s), s->c->stage + 1);
}

// send_backward (f == NULL) or send_backward_recv_forward: d(input) of b out, then freed; f's input in.
static mo_status send_grad_recv_input(sched *s, sched_slot *b, sched_slot *f) {
    if (first_stage(s)) return MO_OK; // the input stage took d(input)
    if (f) {
        MO_TRY(alloc_wire(s, &f->x[0], "x[0] (received)"));
        MO_TRY(mo_comm_sendrecv(s->c->pp_comm, b->d, wire_bytes(s), s->c->stage - 1, f->x[0], wire_bytes(s),
                                s->c->stage - 1));
    } else {
        MO_TRY(mo_comm_send(s->c->pp_comm, b->d, wire_bytes(s), s->c->stage - 1));
    }
    sfree(s, &b->d);
    return MO_OK;
}

static mo_status pipeline(sched *s, sched_slot *slot, int nslots) {
    int P = s->c->pp, M = s->c->accum, stage = s->c->stage;
    int warm = P - stage - 1 < M ? P - stage - 1 : M, rem = M - warm;
#define SLOT(k) (&slot[(k) % nslots])
    for (int i = 0; i < warm; i++) {
        sched_slot *f = SLOT(i);
        f->micro = i;
        MO_TRY(recv_input(s, f));
        MO_TRY(forward(s, f));
        MO_TRY(send_output(s, f));
    }
    if (rem > 0) MO_TRY(recv_input(s, SLOT(warm)));
    for (int i = 0; i < rem; i++) {
        sched_slot *f = SLOT(warm + i), *b = SLOT(i);
        f->micro = warm + i;
        MO_TRY(forward(s, f));
        MO_TRY(send_output_recv_grad(s, f, b));
        MO_TRY(mo_zero_side_join(s->c->ctx)); // the gradients' clear before the first backward (then a no-op)
        MO_TRY(backward(s, b));
        MO_TRY(send_grad_recv_input(s, b, i + 1 < rem ? SLOT(warm + i + 1) : NULL));
    }
    for (int i = 0; i < warm; i++) {
        sched_slot *b = SLOT(rem + i);
        MO_TRY(recv_grad(s, b));
        MO_TRY(mo_zero_side_join(s->c->ctx));
        MO_TRY(backward(s, b));
        MO_TRY(send_grad_recv_input(s, b, NULL));
    }
#undef SLOT
    return MO_OK;
}

mo_status mo_sched_forward_backward(const mo_sched_config *c, const mo_sched_model *ops, void *m, double *recompute_ms) {
    if (recompute_ms) *recompute_ms = 0;
    if (!c || !ops || !c->ctx || c->blocks < 1 || c->accum < 1 || (c->pp > 1 && (!c->pp_comm || c->stage < 0 || c->stage >= c->pp)))
        return MO_FAIL(MO_ERR_INVALID, "schedule: bad configuration (blocks %d, accum %d, pp %d, stage %d)",
                       c ? c->blocks : 0, c ? c->accum : 0, c ? c->pp : 0, c ? c->stage : 0);
    // The layout as mo_ckpt_layout_of makes it: checkpointed blocks a prefix of the stage's, in segments
    // of len >= 1 (a hand-made one outside that would index past x[] or divide by zero)
    if (c->seg.blocks < 0 || c->seg.blocks > c->blocks || (c->seg.blocks > 0 && c->seg.len < 1))
        return MO_FAIL(MO_ERR_INVALID, "schedule: bad checkpoint layout (%d blocks in segments of %d, of %d)",
                       c->seg.blocks, c->seg.len, c->blocks);
    sched s = {c, ops, m, 0, c->ctx->offload_act};
    mo_ctx *x = c->ctx;
    int pipe = c->pp > 1;
    if (s.offload && (pipe || !x->host_alloc))
        return MO_FAIL(MO_ERR_INVALID, "schedule: --offload activations %s", pipe ? "runs unpipelined only (pp 1)"
                                                                                : "needs the context's host allocator");
    // One micro-batch in flight (no pipeline), or min(P - stage, M) on a pipeline stage.
    int nslots = pipe ? (c->pp - c->stage < c->accum ? c->pp - c->stage : c->accum) : 1;
    sched_slot *slot = calloc((size_t)nslots, sizeof *slot);
    if (!slot) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
    mo_status st = MO_OK;
    for (int i = 0; i < nslots; i++) {
        slot[i].mstate = calloc(1, ops->slot_bytes ? ops->slot_bytes : 1);
        slot[i].blocks = calloc((size_t)c->blocks, ops->block_bytes ? ops->block_bytes : 1);
        slot[i].x = calloc((size_t)c->blocks + 1, sizeof *slot[i].x);
        slot[i].h = calloc((size_t)c->blocks + 1, sizeof *slot[i].h);
        slot[i].hb = calloc((size_t)c->blocks + 1, sizeof *slot[i].hb);
        slot[i].tk = malloc(((size_t)c->blocks + 1) * sizeof *slot[i].tk);
        if (!slot[i].mstate || !slot[i].blocks || !slot[i].x || !slot[i].h || !slot[i].hb || !slot[i].tk)
            st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
        else
            for (int l = 0; l <= c->blocks; l++) slot[i].tk[l] = -1;
    }
    // Zeroing the gradients: the optimizer's part of the step. With MEMOPT_ZERO_SIDE=1 on a side stream
    // (zero_side.h), under the first forward, which never writes a gradient; joined before the first
    // backward (the pipeline's interleaved ones: before it starts).
    mo_cost_set_region(x, MO_COST_OPTIMIZER);
    if (st == MO_OK && c->grads) st = mo_zero_side_begin(x, c->grads, c->n_grads * sizeof(float));
    mo_cost_set_region(x, MO_COST_BODY);
    if (!pipe) {
        sched_slot *t = &slot[0];
        for (int k = 0; k < c->accum && st == MO_OK; k++) {
            t->micro = k;
            st = forward(&s, t);
            if (st == MO_OK) st = mo_zero_side_join(x);
            if (st == MO_OK) st = backward(&s, t);
            slot_unwind(&s, t); // a failure (out of memory) unwinds every live activation
        }
    } else if (st == MO_OK) {
        st = pipeline(&s, slot, nslots); // joins the clear before its first backward
    }
    // after a failed forward too: nothing enqueued later (the next step's clear, a free) passes the clear
    mo_status stj = mo_zero_side_join(x);
    if (st == MO_OK) st = stj;
    for (int i = 0; i < nslots; i++) {
        if (slot[i].mstate && slot[i].blocks && slot[i].x && slot[i].h && slot[i].hb && slot[i].tk) slot_unwind(&s, &slot[i]);
        free(slot[i].mstate);
        free(slot[i].blocks);
        free(slot[i].x);
        free(slot[i].h);
        free(slot[i].hb);
        free(slot[i].tk);
    }
    free(slot);
    if (recompute_ms) *recompute_ms = s.recompute_ms;
    return st;
}
