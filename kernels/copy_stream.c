// The copy stream of --offload activations (copy_stream.h): cuda streams and events, or memcpy on cpu.
#include "copy_stream.h"
#include "cost.h"

#include <stdlib.h>
#include <string.h>
#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda_check.h"
#endif

// One copy: where the compute stream stood when it was enqueued (the copy stream waits for it), and the
// copy's own start and end on the copy stream. One join: two marks on the compute stream around its wait.
// `update`: a copy of the offloaded optimizer's update (its joins are not the copy stream's activation
// joins in the cost trace).
typedef struct copy_rec { void *ev_ready, *ev_start, *ev_end; int to_host, update; } copy_rec;
typedef struct join_rec { void *ev_a, *ev_b; } join_rec;

mo_copy_test mo_copy_testing;

struct mo_copy_engine {
    void *stream; // cudaStream_t (cuda)
    copy_rec *copies;
    join_rec *joins;
    int n_copies, n_joins;     // used since the last collect
    int cap_copies, cap_joins; // events created (reused after a collect)
    mo_copy_stats acc;         // cpu / dry: added as they happen
};

#ifdef MEMOPT_HAVE_CUDA
static mo_status new_event(void **ev) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e)); // timing events: copies and stalls are measured
    *ev = e;
    return MO_OK;
}
#endif

static mo_status engine_of(mo_ctx *c, struct mo_copy_engine **out) {
    if (!c->copy) {
        struct mo_copy_engine *e = calloc(1, sizeof *e);
        if (!e) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the copy stream");
#ifdef MEMOPT_HAVE_CUDA
        if (c->backend == MO_BACKEND_CUDA) {
            cudaStream_t s;
            cudaError_t r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            if (r != cudaSuccess) {
                free(e);
                return MO_FAIL(MO_ERR_CUDA, "cudaStreamCreateWithFlags (the copy stream): %s", cudaGetErrorString(r));
            }
            e->stream = s;
        }
#endif
        c->copy = e;
    }
    *out = c->copy;
    return MO_OK;
}

// Room for one more record of each kind (events created once, then reused).
static mo_status grow(struct mo_copy_engine *e, mo_backend_kind be, int copy) {
    int *n = copy ? &e->n_copies : &e->n_joins, *cap = copy ? &e->cap_copies : &e->cap_joins;
    if (*n < *cap) return MO_OK;
    const int ncap = *cap ? *cap * 2 : 16;
    if (copy) {
        copy_rec *p = realloc(e->copies, (size_t)ncap * sizeof *p);
        if (!p) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the copy stream's events");
        memset(p + *cap, 0, (size_t)(ncap - *cap) * sizeof *p);
        e->copies = p;
    } else {
        join_rec *p = realloc(e->joins, (size_t)ncap * sizeof *p);
        if (!p) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the copy stream's events");
        memset(p + *cap, 0, (size_t)(ncap - *cap) * sizeof *p);
        e->joins = p;
    }
#ifdef MEMOPT_HAVE_CUDA
    if (be == MO_BACKEND_CUDA)
        for (int i = *cap; i < ncap; i++) {
            // a record's events all made, or none kept: the events made so far are destroyed with the
            // engine even if a later one fails
            void *ev[3] = {NULL, NULL, NULL};
            mo_status st = MO_OK;
            for (int k = 0; k < (copy ? 3 : 2) && st == MO_OK; k++) st = new_event(&ev[k]);
            if (st != MO_OK) {
                for (int k = 0; k < 3; k++)
                    if (ev[k]) cudaEventDestroy((cudaEvent_t)ev[k]);
                return st;
            }
            if (copy) e->copies[i] = (copy_rec){ev[0], ev[1], ev[2], 0, 0};
            else e->joins[i] = (join_rec){ev[0], ev[1]};
            *cap = i + 1;
        }
#else
    (void)be;
#endif
    *cap = ncap;
    return MO_OK;
}

// update_name NULL: an activation copy; else the offloaded update's copy of that name.
static mo_status copy_enqueue(mo_ctx *c, void *dst, const void *src, size_t bytes, int to_host, const char *update_name,
                              int *ticket) {
    struct mo_copy_engine *e = NULL;
    MO_TRY(engine_of(c, &e));
    MO_TRY(grow(e, c->backend, 1));
    *ticket = e->n_copies++;
    e->copies[*ticket].update = update_name != NULL;
    e->acc.bytes += bytes;
    e->acc.copies++;
    // On every backend, dry included: the planner times the copies, and the compute between each and its
    // join that it can hide behind, from the step's cost trace.
    if (update_name) mo_cost_record(c, update_name, MO_COST_HOST_COPY, 0, (double)bytes);
    else
        mo_cost_record_copy(c, to_host ? "offload_act_d2h" : "offload_act_h2d",
                            to_host ? MO_COST_COPY_OUT : MO_COST_COPY_BACK, (double)bytes, *ticket);
    if (c->backend == MO_BACKEND_DRY) return MO_OK;
    if (c->backend == MO_BACKEND_CPU) {
        const double t0 = mo_host_ms();
        memcpy(dst, src, bytes);
        const double ms = mo_host_ms() - t0;
        e->acc.copy_ms += ms;
        e->acc.stall_ms += ms; // synchronous: the step waited for all of it
        return MO_OK;
    }
#ifdef MEMOPT_HAVE_CUDA
    copy_rec *r = &e->copies[*ticket];
    r->to_host = to_host;
    cudaStream_t cs = (cudaStream_t)e->stream, ms = (cudaStream_t)c->stream;
    if (mo_copy_testing.poison && !to_host) CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, ms));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)r->ev_ready, ms));
    CUDA_CHECK(cudaStreamWaitEvent(cs, (cudaEvent_t)r->ev_ready, 0));
    if (mo_copy_testing.delay_us > 0) MO_TRY(mo_copy_spin_cuda(cs, mo_copy_testing.delay_us));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)r->ev_start, cs));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cs));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)r->ev_end, cs));
    return MO_OK;
#else
    (void)dst, (void)src, (void)to_host;
    return MO_FAIL(MO_ERR_UNSUPPORTED, "copy stream: this build has no CUDA");
#endif
}

mo_status mo_copy_async(mo_ctx *c, void *dst, const void *src, size_t bytes, int to_host, int *ticket) {
    return copy_enqueue(c, dst, src, bytes, to_host, NULL, ticket);
}

mo_status mo_copy_async_update(mo_ctx *c, void *dst, const void *src, size_t bytes, int to_host, const char *name,
                               int *ticket) {
    return copy_enqueue(c, dst, src, bytes, to_host, name ? name : "offload_update_copy", ticket);
}

mo_status mo_copy_wait_host(mo_ctx *c, int ticket) {
    struct mo_copy_engine *e = NULL;
    MO_TRY(engine_of(c, &e));
    if (ticket < 0 || ticket >= e->n_copies)
        return MO_FAIL(MO_ERR_INTERNAL, "copy stream: host wait for copy %d, %d enqueued since the last collect",
                       ticket, e->n_copies);
    if (c->backend != MO_BACKEND_CUDA) return MO_OK; // the copy is done already (cpu, dry)
#ifdef MEMOPT_HAVE_CUDA
    const double t0 = mo_host_ms();
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->copies[ticket].ev_end));
    e->acc.stall_ms += mo_host_ms() - t0;
#endif
    return MO_OK;
}

mo_status mo_copy_join(mo_ctx *c, int ticket) {
    struct mo_copy_engine *e = NULL;
    MO_TRY(engine_of(c, &e));
    if (ticket < 0 || ticket >= e->n_copies)
        return MO_FAIL(MO_ERR_INTERNAL, "copy stream: join of copy %d, %d enqueued since the last collect", ticket,
                       e->n_copies);
    if (!e->copies[ticket].update) // where the schedule waits, on every backend (the update's copies: host copies)
        mo_cost_record_copy(c, "offload_act_join", MO_COST_COPY_JOIN, 0, ticket);
    if (c->backend != MO_BACKEND_CUDA) return MO_OK; // the copy is done already (cpu, dry)
#ifdef MEMOPT_HAVE_CUDA
    if (mo_copy_testing.skip_out_joins && e->copies[ticket].to_host) return MO_OK;
    MO_TRY(grow(e, c->backend, 0));
    join_rec *j = &e->joins[e->n_joins++];
    cudaStream_t ms = (cudaStream_t)c->stream;
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)j->ev_a, ms));
    CUDA_CHECK(cudaStreamWaitEvent(ms, (cudaEvent_t)e->copies[ticket].ev_end, 0));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)j->ev_b, ms));
#endif
    return MO_OK;
}

mo_status mo_copy_sync(mo_ctx *c) {
    if (!c->copy) return MO_OK;
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->copy->stream));
#endif
    // after a failure: the records of the unfinished step are dropped (their figures are not wanted)
    memset(&c->copy->acc, 0, sizeof c->copy->acc);
    c->copy->n_copies = c->copy->n_joins = 0;
    return MO_OK;
}

mo_status mo_copy_collect(mo_ctx *c, mo_copy_stats *out) {
    struct mo_copy_engine *e = c->copy;
    if (!e) return MO_OK; // no copy yet
    mo_copy_stats s = e->acc;
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)e->stream));
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
        for (int i = 0; i < e->n_copies; i++) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)e->copies[i].ev_start, (cudaEvent_t)e->copies[i].ev_end));
            s.copy_ms += ms;
        }
        for (int i = 0; i < e->n_joins; i++) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)e->joins[i].ev_a, (cudaEvent_t)e->joins[i].ev_b));
            s.stall_ms += ms;
        }
    }
#endif
    out->copy_ms += s.copy_ms;
    out->stall_ms += s.stall_ms;
    out->bytes += s.bytes;
    out->copies += s.copies;
    memset(&e->acc, 0, sizeof e->acc);
    e->n_copies = e->n_joins = 0;
    return MO_OK;
}

void mo_copy_destroy(mo_ctx *c) {
    struct mo_copy_engine *e = c->copy;
    if (!e) return;
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        if (e->stream) cudaStreamSynchronize((cudaStream_t)e->stream);
        for (int i = 0; i < e->cap_copies; i++) {
            if (e->copies[i].ev_ready) cudaEventDestroy((cudaEvent_t)e->copies[i].ev_ready);
            if (e->copies[i].ev_start) cudaEventDestroy((cudaEvent_t)e->copies[i].ev_start);
            if (e->copies[i].ev_end) cudaEventDestroy((cudaEvent_t)e->copies[i].ev_end);
        }
        for (int i = 0; i < e->cap_joins; i++) {
            if (e->joins[i].ev_a) cudaEventDestroy((cudaEvent_t)e->joins[i].ev_a);
            if (e->joins[i].ev_b) cudaEventDestroy((cudaEvent_t)e->joins[i].ev_b);
        }
        if (e->stream) cudaStreamDestroy((cudaStream_t)e->stream);
    }
#endif
    free(e->copies);
    free(e->joins);
    free(e);
    c->copy = NULL;
}
