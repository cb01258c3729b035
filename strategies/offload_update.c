// The offloaded optimizer's update (offload_update.h): in order (the default), or chunked and pipelined
// on the copy stream; the host work over MEMOPT_OFFLOAD_THREADS threads (8 by default).
#include "strategies/offload_update.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "kernels/adamw.h"
#include "kernels/copy_stream.h"
#include "kernels/cost.h"
#include "kernels/ops_mixed_impl.h"

static mo_status knob_size(const char *name, size_t lo, size_t hi, size_t def, size_t *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return MO_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-' || v[0] == '+' || x < lo || x > hi)
        return MO_FAIL(MO_ERR_INVALID, "%s=%s: expected an integer from %zu to %zu", name, v, lo, hi);
    *out = (size_t)x;
    return MO_OK;
}

int mo_offload_threads_for(size_t n, int T, int count_set) {
    if (T < 1) T = 1;
    // the default count: 64 Ki elements a thread at least (starting one costs tens of microseconds, more
    // than a small model's whole range); a count set is taken as it is, up to one element a thread
    const size_t most = count_set ? n : n / 65536;
    if ((size_t)T > most) T = most > 1 ? (int)most : 1;
    return T;
}

mo_status mo_offload_knobs(size_t *chunk, int *threads) {
    size_t t = MO_OFFLOAD_THREADS_DEFAULT;
    MO_TRY(knob_size("MEMOPT_OFFLOAD_CHUNK", 1, (size_t)1 << 40, 0, chunk));
    MO_TRY(knob_size("MEMOPT_OFFLOAD_THREADS", 1, 256, MO_OFFLOAD_THREADS_DEFAULT, &t));
    *threads = (int)t;
    return MO_OK;
}

// ---- the host work, over T threads ----
// One thread's range [lo, hi) of a chunk: AdamW on (p, g, m, v), or the cast of the fp32 master src into
// the 16-bit dst. The arrays start at the chunk's first element.
typedef struct host_part {
    const mo_sched_optim *o;
    float *p, *m, *v;
    const float *g;
    void *dst;
    const float *src;
    size_t lo, hi;
    int step;
    float scale;
    mo_status st;
} host_part;

static void *adamw_part(void *arg) {
    host_part *h = arg;
    const mo_sched_optim *o = h->o;
    h->st = adamw_cpu(h->p + h->lo, h->g + h->lo, h->m + h->lo, h->v + h->lo, h->hi - h->lo, o->lr, o->beta1, o->beta2,
                      o->eps, o->weight_decay, h->step, h->scale);
    return NULL;
}

static void *cast_part(void *arg) {
    host_part *h = arg;
    const size_t es = mo_dtype_size(h->o->dt);
    h->st = cast_mixed_cpu(h->o->dt, (char *)h->dst + h->lo * es, MO_F32, h->src + h->lo, h->hi - h->lo);
    return NULL;
}

// fn over [0, n) in T contiguous ranges, the caller running the first. A thread that cannot be started
// leaves its range to the caller: the same bits, later. (Threads are made per call: at the default chunk
// of the knob's users, tens per step; a pool would matter only for tiny chunks.)
static mo_status host_run(void *(*fn)(void *), const host_part *proto, size_t n, int T) {
    enum { TMAX = 256 };
    host_part part[TMAX];
    pthread_t tid[TMAX];
    int started[TMAX];
    const char *set = getenv("MEMOPT_OFFLOAD_THREADS");
    T = mo_offload_threads_for(n, T, set && *set);
    if (T > TMAX) T = TMAX;
    for (int i = 0; i < T; i++) {
        part[i] = *proto;
        part[i].lo = n * (size_t)i / (size_t)T;
        part[i].hi = n * (size_t)(i + 1) / (size_t)T;
        part[i].st = MO_OK;
        started[i] = 0;
    }
    for (int i = 1; i < T; i++) started[i] = pthread_create(&tid[i], NULL, fn, &part[i]) == 0;
    fn(&part[0]);
    for (int i = 1; i < T; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else fn(&part[i]);
    }
    for (int i = 0; i < T; i++)
        if (part[i].st != MO_OK) return part[i].st;
    return MO_OK;
}

// AdamW on n elements from offset off of the update's host arrays: p the fp32 weights (fp32: the host
// image of the device's; 16-bit: the master), g the gradients' staging.
static mo_status host_adamw(const mo_sched_optim *o, float *p, const float *g, size_t off, size_t n, int step,
                            float scale, int T) {
    host_part h = {o, p + off, o->adam_m + off, o->adam_v + off, g + off, NULL, NULL, 0, 0, step, scale, MO_OK};
    return host_run(adamw_part, &h, n, T);
}

// The 16-bit working copy of master[off, off + n) written into dst (n elements of o->dt).
static mo_status host_cast(const mo_sched_optim *o, void *dst, size_t off, size_t n, int T) {
    host_part h = {o, NULL, NULL, NULL, NULL, dst, (const float *)o->params + off, 0, 0, 0, 0.0f, MO_OK};
    return host_run(cast_part, &h, n, T);
}

// ---- the whole update in order (the default) ----
// Copies synchronous (mo_memcpy_*: on the context's stream, then a stream synchronize). On dry nothing
// moves (the host addresses are fake, never touched), but every backend records the same cost ops, each
// beside the call it stands for: the copies' bytes over the host link (HOST_COPY) and the host AdamW's
// and cast's host memory traffic (HOST), which is what the planner times an offloaded update by.
static mo_status update_whole(const mo_sched_optim *o, int step, float scale, int T) {
    mo_ctx *x = o->ctx;
    size_t n = o->n, fb = n * sizeof(float);
    const int dry = x->backend == MO_BACKEND_DRY;
    mo_cost_record(x, "offload_grads_d2h", MO_COST_HOST_COPY, 0, (double)fb);
    if (!dry) MO_TRY(mo_memcpy_d2h(x, o->host_grads, o->grads, fb));
    if (o->dt == MO_F32) {
        mo_cost_record(x, "offload_params_d2h", MO_COST_HOST_COPY, 0, (double)fb);
        if (!dry) MO_TRY(mo_memcpy_d2h(x, o->host_params, o->params, fb));
        mo_cost_record(x, "adamw_host", MO_COST_HOST, 12.0 * n, 28.0 * n); // p, g, m, v read; p, m, v written
        if (!dry) MO_TRY(host_adamw(o, o->host_params, o->host_grads, 0, n, step, scale, T));
        mo_cost_record(x, "offload_params_h2d", MO_COST_HOST_COPY, 0, (double)fb);
        return dry ? MO_OK : mo_memcpy_h2d(x, o->params, o->host_params, fb);
    }
    // 16-bit: the master on the host; its working copy cast there into the (consumed) gradient staging.
    const size_t wb = n * mo_dtype_size(o->dt);
    mo_cost_record(x, "adamw_host", MO_COST_HOST, 12.0 * n, 28.0 * n);
    if (!dry) MO_TRY(host_adamw(o, o->params, o->host_grads, 0, n, step, scale, T));
    mo_cost_record(x, "cast_host", MO_COST_HOST, 0, (double)(fb + wb)); // the fp32 master read, the 16-bit copy written
    if (!dry) MO_TRY(host_cast(o, o->host_grads, 0, n, T));
    mo_cost_record(x, "offload_wparams_h2d", MO_COST_HOST_COPY, 0, (double)wb);
    return dry ? MO_OK : mo_memcpy_h2d(x, o->wparams, o->host_grads, wb);
}

// ---- chunked, pipelined on the copy stream (MEMOPT_OFFLOAD_CHUNK) ----
// Chunk i covers elements [i*C, min(n, (i+1)*C)). Its copies down (the gradients, and in fp32 the
// weights) go on the copy stream two chunks ahead of the host; the host waits for chunk i's, updates it,
// and sends its weights back on the copy stream (16-bit: cast into chunk i's own consumed gradient
// staging first: 2 bytes an element inside its 4, which no later copy down touches). The copy stream
// runs in order, so the compute stream's join of the last copy back covers every one. Each copy starts
// after the compute enqueued so far (the global norm), so nothing reads a gradient before it is final.
typedef struct chunked {
    const mo_sched_optim *o;
    size_t C, nch;
    int *down; // per chunk: the ticket of its gradients' copy down (the fp32 weights' is the next ticket)
} chunked;

// Chunk i's first element and length.
static size_t chunk_at(const chunked *k, size_t i, size_t *len) {
    const size_t off = i * k->C;
    *len = i + 1 == k->nch ? k->o->n - off : k->C;
    return off;
}

static mo_status issue_down(chunked *k, size_t i) {
    const mo_sched_optim *o = k->o;
    size_t c;
    const size_t off = chunk_at(k, i, &c), b = c * sizeof(float);
    mo_ctx *x = o->ctx;
    MO_TRY(mo_copy_async_update(x, o->host_grads + off, (const float *)o->grads + off, b, 1, "offload_grads_d2h",
                                &k->down[i]));
    if (o->dt == MO_F32) {
        int t = -1;
        MO_TRY(mo_copy_async_update(x, o->host_params + off, (const float *)o->params + off, b, 1, "offload_params_d2h",
                                    &t));
    }
    return MO_OK;
}

static mo_status update_chunk(chunked *k, size_t i, int step, float scale, int T, int *up) {
    const mo_sched_optim *o = k->o;
    mo_ctx *x = o->ctx;
    const int dry = x->backend == MO_BACKEND_DRY;
    size_t c;
    const size_t off = chunk_at(k, i, &c), b = c * sizeof(float);
    MO_TRY(mo_copy_wait_host(x, k->down[i] + (o->dt == MO_F32))); // in order: the later of its copies down
    mo_cost_record(x, "adamw_host", MO_COST_HOST, 12.0 * c, 28.0 * c);
    if (o->dt == MO_F32) {
        if (!dry) MO_TRY(host_adamw(o, o->host_params, o->host_grads, off, c, step, scale, T));
        return mo_copy_async_update(x, (float *)o->params + off, o->host_params + off, b, 0, "offload_params_h2d", up);
    }
    const size_t es = mo_dtype_size(o->dt);
    if (!dry) MO_TRY(host_adamw(o, o->params, o->host_grads, off, c, step, scale, T));
    mo_cost_record(x, "cast_host", MO_COST_HOST, 0, (double)(b + c * es));
    void *staged = o->host_grads + off; // chunk i's own gradient staging, consumed
    if (!dry) MO_TRY(host_cast(o, staged, off, c, T));
    return mo_copy_async_update(x, (char *)o->wparams + off * es, staged, c * es, 0, "offload_wparams_h2d", up);
}

static mo_status update_chunked(const mo_sched_optim *o, int step, float scale, size_t C, int T) {
    mo_ctx *x = o->ctx;
    chunked k = {o, C, (o->n + C - 1) / C, NULL};
    k.down = malloc((k.nch ? k.nch : 1) * sizeof *k.down);
    if (!k.down) return MO_FAIL(MO_ERR_OOM, "host out of memory for the offloaded update's %zu chunks", k.nch);
    mo_status st = MO_OK;
    size_t issued = 0;
    int up = -1;
    while (st == MO_OK && issued < k.nch && issued < 2) st = issue_down(&k, issued++);
    for (size_t i = 0; st == MO_OK && i < k.nch; i++) {
        st = update_chunk(&k, i, step, scale, T, &up);
        if (st == MO_OK && issued < k.nch) st = issue_down(&k, issued++);
    }
    if (st == MO_OK && up >= 0) st = mo_copy_join(x, up); // the next forward reads the weights
    free(k.down);
    // A failure leaves no copy in flight into or out of memory that the unwinding frees.
    if (st != MO_OK) (void)mo_copy_sync(x);
    return st;
}

mo_status mo_offload_update(const mo_sched_optim *o, int step, float scale) {
    size_t chunk = 0;
    int threads = 1;
    MO_TRY(mo_offload_knobs(&chunk, &threads));
    if (chunk > 0 && o->n > 0) return update_chunked(o, step, scale, chunk, threads);
    return update_whole(o, step, scale, threads);
}
