#include "bench/trace.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/csv.h" // mo_mkdir_parent

typedef struct trace_event {
    int is_free;
    int op_index;        // -1 until the next op begins (an allocation waits for its op)
    char op[48];         // the op's short name
    char phase[16];
    char tensor[40];
    int cat;
    uint64_t bytes, allocated_after, reserved_after;
} trace_event;

typedef struct live_name { // which tensor a live pointer is, for its free
    uintptr_t ptr;
    char tensor[40];
} live_name;

struct mo_trace {
    mo_allocator *a;
    uint64_t live_at_start[MO_CAT_COUNT]; // bytes of each category already allocated when the step starts
    uint64_t reserved_at_start;
    trace_event *ev;
    size_t n, cap;
    live_name *live;
    size_t nlive, cap_live;
    int ops;             // ops begun so far
    int in_op;           // between an op's begin and end: its allocations are its own
    char op[48];         // the current (last begun) op
    char phase[16];
    size_t pending;      // ev[pending..n) are allocations waiting for their op
    int failed;          // host memory ran out: the trace is incomplete
};

const char *mo_trace_header(void) {
    return "event,op_index,op,phase,action,tensor,category,bytes,allocated_after,reserved_after";
}

// "mo_layernorm_forward_mixed(x, DT, ...)" -> "layernorm_forward"; "gpt_matmul_fwd(...)" -> "matmul_fwd".
static void short_op(const char *call, char *out, size_t n) {
    const char *p = call;
    while (*p == ' ') p++;
    if (!strncmp(p, "mo_", 3)) p += 3;
    else if (!strncmp(p, "gpt_", 4)) p += 4;
    size_t k = 0;
    while (p[k] && (isalnum((unsigned char)p[k]) || p[k] == '_')) k++;
    if (k > 6 && !strncmp(p + k - 6, "_mixed", 6)) k -= 6;
    if (k >= n) k = n - 1;
    memcpy(out, p, k);
    out[k] = '\0';
}

// "&a->ln1" -> "ln1", "(float **)&s->lnf_mean" -> "lnf_mean", "&scratch_out" -> "scratch_out".
static void short_tensor(const char *expr, char *out, size_t n) {
    const char *p = expr, *last = expr;
    for (; *p; p++)
        if (*p == '>' || *p == '&' || *p == '.' || *p == ')' || *p == ' ') last = p + 1;
    snprintf(out, n, "%s", last);
}

static const char *name_of_live(mo_trace *t, uintptr_t ptr, int take) {
    for (size_t i = t->nlive; i-- > 0;)
        if (t->live[i].ptr == ptr) {
            static char keep[40];
            snprintf(keep, sizeof keep, "%s", t->live[i].tensor);
            if (take) t->live[i] = t->live[--t->nlive];
            return keep;
        }
    return NULL;
}

static void on_event(void *user, const mo_alloc_event *e) {
    mo_trace *t = user;
    if (t->failed) return;
    if (e->kind == MO_TRACE_OP) {
        t->ops++;
        short_op(e->label, t->op, sizeof t->op);
        for (size_t i = t->pending; i < t->n; i++)
            if (t->ev[i].op_index < 0) {
                t->ev[i].op_index = t->ops;
                snprintf(t->ev[i].op, sizeof t->ev[i].op, "%s", t->op);
            }
        t->pending = t->n;
        t->in_op = 1;
        return;
    }
    if (e->kind == MO_TRACE_OP_END) {
        t->in_op = 0;
        return;
    }
    if (e->kind == MO_TRACE_PHASE) {
        snprintf(t->phase, sizeof t->phase, "%s", e->label);
        return;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 1024;
        trace_event *ne = realloc(t->ev, nc * sizeof *ne);
        if (!ne) { t->failed = 1; return; }
        t->ev = ne;
        t->cap = nc;
    }
    trace_event *v = &t->ev[t->n++];
    memset(v, 0, sizeof *v);
    v->is_free = e->kind == MO_TRACE_FREE;
    v->cat = e->cat;
    v->bytes = e->bytes;
    v->allocated_after = e->allocated_after;
    v->reserved_after = e->reserved_after;
    snprintf(v->phase, sizeof v->phase, "%s", t->phase[0] ? t->phase : "step");
    if (v->is_free) {
        v->op_index = t->ops;
        snprintf(v->op, sizeof v->op, "%s", t->ops ? t->op : "");
        const char *nm = name_of_live(t, e->ptr, 1);
        snprintf(v->tensor, sizeof v->tensor, "%s", nm ? nm : e->cat == MO_CAT_WORKSPACE ? "scratch" : "");
        return;
    }
    v->op_index = t->in_op ? t->ops : -1;
    if (t->in_op) snprintf(v->op, sizeof v->op, "%s", t->op);
    if (e->label[0]) short_tensor(e->label, v->tensor, sizeof v->tensor);
    else snprintf(v->tensor, sizeof v->tensor, "%s", e->cat == MO_CAT_WORKSPACE ? "scratch" : "");
    if (t->nlive == t->cap_live) {
        size_t nc = t->cap_live ? 2 * t->cap_live : 256;
        live_name *nl = realloc(t->live, nc * sizeof *nl);
        if (!nl) { t->failed = 1; return; }
        t->live = nl;
        t->cap_live = nc;
    }
    t->live[t->nlive].ptr = e->ptr;
    snprintf(t->live[t->nlive].tensor, sizeof t->live[t->nlive].tensor, "%s", v->tensor);
    t->nlive++;
}

mo_status mo_trace_begin(mo_allocator *a, mo_trace **out) {
    *out = NULL;
    mo_trace *t = calloc(1, sizeof *t);
    if (!t) return MO_FAIL(MO_ERR_OOM, "--trace: host memory exhausted");
    t->a = a;
    mo_alloc_stats st;
    mo_allocator_stats(a, &st);
    memcpy(t->live_at_start, st.allocated_by_cat, sizeof t->live_at_start);
    t->reserved_at_start = st.reserved_bytes;
    mo_allocator_set_trace(a, on_event, t);
    *out = t;
    return MO_OK;
}

void mo_trace_end(mo_trace *t) {
    if (!t) return;
    if (t->a) mo_allocator_set_trace(t->a, NULL, NULL);
    free(t->ev);
    free(t->live);
    free(t);
}

size_t mo_trace_events(const mo_trace *t) { return t ? t->n : 0; }

mo_status mo_trace_write(const mo_trace *t, const char *path, const char *title) {
    if (t->failed) return MO_FAIL(MO_ERR_OOM, "--trace: host memory ran out while recording: no trace written");
    MO_TRY(mo_mkdir_parent(path, "--trace"));
    FILE *f = fopen(path, "w");
    if (!f) return MO_FAIL(MO_ERR_IO, "--trace: cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "# memopt trace: %s\n%s\n", title, mo_trace_header());
    // Event 0: what each category holds when the step starts (action "live"), so the file alone
    // gives every category's bytes at every event.
    uint64_t total = 0;
    for (int c = 0; c < MO_CAT_COUNT; c++) total += t->live_at_start[c];
    uint64_t reserved0 = t->reserved_at_start;
    for (int c = 0; c < MO_CAT_COUNT; c++)
        fprintf(f, "0,0,,start,live,,%s,%llu,%llu,%llu\n", mo_category_name((mo_category)c),
                (unsigned long long)t->live_at_start[c], (unsigned long long)total, (unsigned long long)reserved0);
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *v = &t->ev[i];
        // An allocation after the step's last op (none in the GPT step) keeps that op.
        int op = v->op_index < 0 ? t->ops : v->op_index;
        fprintf(f, "%zu,%d,%s,%s,%s,%s,%s,%llu,%llu,%llu\n", i + 1, op, v->op_index < 0 ? t->op : v->op, v->phase,
                v->is_free ? "free" : "alloc", v->tensor, mo_category_name((mo_category)v->cat), (unsigned long long)v->bytes,
                (unsigned long long)v->allocated_after, (unsigned long long)v->reserved_after);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    return bad ? MO_FAIL(MO_ERR_IO, "--trace: error writing '%s'", path) : MO_OK;
}
