#include "bench/fallback.h"

#include <stdarg.h>
#include <string.h>

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

mo_status mo_fallback_next_accum(int batch, int accum, int *next) {
    *next = 0;
    if (batch <= 0 || accum <= 0 || accum >= batch) return MO_OK;
    for (int d = 2 * accum; d <= batch; d++)
        if (batch % d == 0) {
            *next = d;
            break;
        }
    return MO_OK;
}

mo_status mo_fallback_requested_accum(const mo_csv_row *row, int *accum) {
    *accum = 0;
    int k = 0;
    if (sscanf(row->detail, "requested accum %d:", &k) == 1 && k > 0) *accum = k;
    return MO_OK;
}

// Appends printf-style text to a detail buffer, truncating rather than overflowing.
static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

mo_status mo_fallback_run(const mo_run_config *rc, mo_attempt_fn fn, void *user, mo_csv_row *row,
                          mo_run_config *used, FILE *out) {
    mo_leak_probe probe;
    MO_TRY(mo_leak_probe_begin(&probe, rc->backend));
    mo_run_config cur = *rc;
    char path[1024] = "";
    snprintf(path, sizeof path, "requested accum %d: ", rc->accum);
    int shrunk = 0;
    for (;;) {
        int committed = 0;
        MO_TRY(fn(&cur, user, row, &committed));
        if (strcmp(row->status, "oom")) {
            // Trained, or failed for a reason smaller micro-batches do not cure.
            if (shrunk) {
                char why[1024];
                snprintf(why, sizeof why, "%s", row->detail);
                snprintf(row->detail, sizeof row->detail, "%s", path);
                append(row->detail, sizeof row->detail, "%s at accum %d%s%s", row->status, cur.accum, why[0] ? ": " : "", why);
                if (!strcmp(row->status, "ok")) snprintf(row->status, sizeof row->status, "fallback");
            }
            break;
        }
        if (rc->on_oom != MO_ON_OOM_SHRINK) break; // fail: the oom row as the engine wrote it
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", row->detail);
        int next = 0;
        MO_TRY(mo_fallback_next_accum(cur.batch, cur.accum, &next));
        if (row->oom_before_step) {
            // The model's own state does not fit: a smaller micro-batch changes none of it.
            char b1[32], b2[32];
            const int mixed = cur.precision == MO_PREC_FP16 || cur.precision == MO_PREC_BF16;
            // fp32 weights (or master copy), gradients, Adam m and v: 16 B a parameter; + the 16-bit copy
            const uint64_t need = row->params > 0 ? (uint64_t)row->params * (mixed ? 18u : 16u) : 0;
            snprintf(row->detail, sizeof row->detail, "%s", path);
            append(row->detail, sizeof row->detail,
                   "oom at accum %d before the first step: the static bytes (parameters, gradients, optimizer state%s:"
                   " %s) and the full-batch inputs alone exceed the cap %s, so no micro-batch can fit: %s",
                   cur.accum, mixed ? ", 16-bit copy" : "", mo_format_bytes(need, b2, sizeof b2),
                   row->cap_bytes > 0 ? mo_format_bytes((uint64_t)row->cap_bytes, b1, sizeof b1) : "(none)", msg);
            if (out) fprintf(out, "  out of memory before the first step: --on-oom shrink stops (no micro-batch can fit)\n");
            break;
        }
        if (committed || next == 0) {
            snprintf(row->detail, sizeof row->detail, "%s", path);
            append(row->detail, sizeof row->detail, "oom at accum %d", cur.accum);
            if (committed) append(row->detail, sizeof row->detail, " in a timed step (timing had started: no further shrink)");
            else append(row->detail, sizeof row->detail, " (micro-batch %d, the smallest)", cur.batch / cur.accum);
            append(row->detail, sizeof row->detail, ": %s", msg);
            break;
        }
        append(path, sizeof path, "oom at accum %d -> ", cur.accum);
        if (out)
            fprintf(out, "  out of memory at accum %d (micro-batch %d): --on-oom shrink retries with accum %d (micro-batch %d)\n",
                    cur.accum, cur.batch / cur.accum, next, cur.batch / next);
        cur.accum = next;
        shrunk = 1;
    }
    if (used) *used = cur;
    return mo_leak_probe_end(&probe, row);
}

typedef struct execute_ctx {
    const mo_run_env *env;
    FILE *out;
} execute_ctx;

static mo_status execute_attempt(const mo_run_config *rc, void *user, mo_csv_row *row, int *committed) {
    const execute_ctx *x = user;
    *committed = 0; // every step runs inside mo_run_execute: a retry is always possible
    return mo_run_execute(rc, x->env, row, x->out);
}

mo_status mo_fallback_execute(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out) {
    execute_ctx x = {env, out};
    return mo_fallback_run(rc, execute_attempt, &x, row, NULL, out);
}

// ---------------------------------------------------------------- device memory check

static int device_used(uint64_t *used) {
#ifdef MEMOPT_HAVE_CUDA
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError(); // clear it: the run itself reports CUDA trouble
        return 0;
    }
    *used = (uint64_t)(t - f);
    return 1;
#else
    (void)used;
    return 0;
#endif
}

mo_status mo_leak_probe_begin(mo_leak_probe *p, mo_backend_kind backend) {
    p->active = 0;
    p->used_before = 0;
    if (backend == MO_BACKEND_CUDA && device_used(&p->used_before)) p->active = 1;
    return MO_OK;
}

mo_status mo_leak_probe_end(const mo_leak_probe *p, mo_csv_row *row) {
    uint64_t after = 0;
    if (!p->active || !device_used(&after) || after <= p->used_before + MO_LEAK_SLACK_BYTES) return MO_OK;
    char b1[32], b2[32];
    append(row->detail, sizeof row->detail,
           "%sdevice memory in use is %s above where it was before this configuration (more than the %s the CUDA"
           " context itself varies by): memory outside the allocator was not given back",
           row->detail[0] ? "; " : "", mo_format_bytes(after - p->used_before, b1, sizeof b1),
           mo_format_bytes(MO_LEAK_SLACK_BYTES, b2, sizeof b2));
    return MO_OK;
}
