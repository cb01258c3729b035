#include "ctx.h"
#include "attention_fused_gemm.h"
#include "attention_cudnn.h"
#include "cost.h"
#include "copy_stream.h"
#include "side_stream.h"
#include "zero_side.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef MEMOPT_HAVE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include "cuda_check.h"
#include "lt_gemm.h"
#include "resnet_ops_impl.h"
#endif

double mo_host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

#ifdef MEMOPT_HAVE_CUDA
static mo_status ctx_cuda_stream(mo_ctx *c) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    // The allocator frees in this stream's order (async pool; workspace reuse).
    mo_allocator_set_stream(c->alloc, s);
    return MO_OK;
}

static mo_status ctx_cuda_init(mo_ctx *c) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cublasLtHandle_t lt;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    c->cublaslt = lt;
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    c->cublas = h;
    CUBLAS_CHECK(cublasSetStream(h, s));
    // cuBLAS would otherwise cudaMalloc a workspace of its own, outside the allocator's accounting.
    CUBLAS_CHECK(cublasSetWorkspace(h, c->gemm_ws, c->gemm_ws_bytes));
    // MEMOPT_MARK_LIB_WRITES: the libraries' workspace once, for their own reads of what they staged
    // there (cuBLASLt's split-K reduce reads its partial sums: lib_writes.h)
    if (c->mark_lib_writes) CUDA_CHECK(cudaMemsetAsync(c->gemm_ws, 0, c->gemm_ws_bytes, s));
    if (c->mark_lib_writes && c->side_ws) CUDA_CHECK(cudaMemsetAsync(c->side_ws, 0, c->gemm_ws_bytes, s));
    return MO_OK;
}

static void ctx_cuda_fini(mo_ctx *c) {
    mo_lt_cache_destroy(c); // host objects only: nothing in flight refers to them
    mo_attention_cudnn_destroy(c); // its plans before the cuDNN handle they were built on
    mo_dnn_destroy(c);      // waits for the stream first (cudnnDestroy)
    if (c->cublas) cublasDestroy((cublasHandle_t)c->cublas);
    if (c->cublaslt) cublasLtDestroy((cublasLtHandle_t)c->cublaslt);
    if (c->stream) {
        cudaStreamSynchronize((cudaStream_t)c->stream);
        cudaStreamDestroy((cudaStream_t)c->stream);
    }
    // the stream is drained: no upload reads the staging buffer any more
    if (c->stage_event) cudaEventDestroy((cudaEvent_t)c->stage_event);
    if (c->stage_host) cudaFreeHost(c->stage_host);
    c->stage_event = NULL;
    c->stage_host = NULL;
    c->stage_bytes = 0;
}
#endif

mo_status mo_ctx_create(mo_ctx **out, mo_backend_kind backend, mo_allocator *alloc) {
    return mo_ctx_create_ws(out, backend, alloc, MO_GEMM_WORKSPACE_BYTES);
}

// A 0|1 knob: *out = its value, dflt when unset or empty; another value is refused (the row would record
// the knob as set while the default ran), naming the variable and what it takes.
// A knob of one digit, 0 to max (at most 9): dflt when unset or empty; another value refused, naming them.
static mo_status knob_digit(const char *name, int dflt, int max, int *out) {
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt;
        return MO_OK;
    }
    if (v[0] < '0' || v[0] > '0' + max || v[1]) {
        char list[48] = "";
        for (int k = 0; k <= max; k++) // "0 or 1", "0, 1, 2 or 3"
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", k == 0 ? "" : k == max ? " or " : ", ", k);
        return MO_FAIL(MO_ERR_INVALID, "%s=%s: expected %s", name, v, list);
    }
    *out = v[0] - '0';
    return MO_OK;
}

static mo_status knob01(const char *name, int dflt, int *out) { return knob_digit(name, dflt, 1, out); }

mo_status mo_ctx_create_ws(mo_ctx **out, mo_backend_kind backend, mo_allocator *alloc, size_t ws_bytes) {
    *out = NULL;
    if (ws_bytes < MO_GEMM_WORKSPACE_BYTES || ws_bytes > ((size_t)MO_WORKSPACE_MIB_MAX << 20) || ws_bytes % ((size_t)1 << 20))
        return MO_FAIL(MO_ERR_INVALID, "context workspace %zu bytes: expected whole MiB, 32 to %d", ws_bytes,
                       MO_WORKSPACE_MIB_MAX);
    if (mo_allocator_backend(alloc) != backend)
        return MO_FAIL(MO_ERR_INVALID, "context backend %s but allocator backend %s", mo_backend_name(backend),
                       mo_backend_name(mo_allocator_backend(alloc)));
#ifndef MEMOPT_HAVE_CUDA
    if (backend == MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "--backend cuda: this build has no CUDA (built with MEMOPT_CUDA=OFF)");
#endif
    mo_ctx *c = calloc(1, sizeof *c);
    if (!c) return MO_FAIL(MO_ERR_OOM, "host out of memory for the context");
    c->backend = backend;
    c->alloc = alloc;
    c->gemm_ws_bytes = ws_bytes;
    c->prof_cat = MO_PROF_COUNT;
    // The MEMOPT_* knobs read here are listed in knobs.c, whose table the CSV row records: add a new one there.
    const char *fe = getenv("MEMOPT_FUSE_EPILOGUES");
    c->fuse_epilogues = -1;
    if (fe && (strcmp(fe, "0") == 0 || strcmp(fe, "off") == 0 || strcmp(fe, "false") == 0)) c->fuse_epilogues = 0;
    if (fe && (strcmp(fe, "1") == 0 || strcmp(fe, "on") == 0 || strcmp(fe, "true") == 0)) c->fuse_epilogues = 1;
    // measurement knobs of the materialized attention (ctx.h); unknown values keep the defaults
    const char *ag = getenv("MEMOPT_ATTN_GEMM");
    if (ag && strcmp(ag, "strided") == 0) c->attn_gemm = MO_ATTN_GEMM_STRIDED;
    if (ag && strcmp(ag, "batched") == 0) c->attn_gemm = MO_ATTN_GEMM_BATCHED;
    const char *as = getenv("MEMOPT_ATTN_SCORES");
    c->attn_own_scores = !(as && strcmp(as, "cublas") == 0);
    const char *ad = getenv("MEMOPT_ATTN_DPRE");
    c->attn_fuse_dpre = !(ad && strcmp(ad, "0") == 0);
    const char *at = getenv("MEMOPT_ATTN_TF32");
    c->attn_tf32 = !(at && strcmp(at, "0") == 0);
    const char *gt = getenv("MEMOPT_GEMM_TABLE"), *gu = getenv("MEMOPT_GEMM_TUNE");
    c->gemm_table = !(gt && strcmp(gt, "0") == 0);
    c->gemm_tune = gu && strcmp(gu, "1") == 0 ? 1 : gu && strcmp(gu, "2") == 0 ? 2 : gu && strcmp(gu, "3") == 0 ? 3 : 0;
    const char *ce = getenv("MEMOPT_CE");
    c->ce_loop = ce && strcmp(ce, "loop") == 0;
    const char *ct = getenv("MEMOPT_CONV_TABLE"), *cu = getenv("MEMOPT_CONV_TUNE");
    c->conv_table = !(ct && strcmp(ct, "0") == 0);
    c->conv_tune = cu && strcmp(cu, "1") == 0;
    const char *dg = getenv("MEMOPT_CONV_DGRAD");
    c->conv_dgrad_cudnn = dg && strcmp(dg, "cudnn") == 0;
    // which fp32 convolutions run as GEMMs: another value would run the default while the row records the
    // knob as set, so it is refused
    const char *cg = getenv("MEMOPT_CONV_GEMM");
    if (cg && *cg && strcmp(cg, "auto") != 0 && strcmp(cg, "all") != 0 && strcmp(cg, "1x1") != 0 && strcmp(cg, "0") != 0) {
        free(c);
        return MO_FAIL(MO_ERR_INVALID, "MEMOPT_CONV_GEMM=%s: expected auto, all, 1x1 or 0", cg);
    }
    c->conv_gemm = !cg || !*cg || strcmp(cg, "auto") == 0 ? MO_CONV_GEMM_AUTO
                   : strcmp(cg, "all") == 0            ? MO_CONV_GEMM_ALL
                   : strcmp(cg, "1x1") == 0            ? MO_CONV_GEMM_1X1
                                                       : MO_CONV_GEMM_NONE;
    mo_status kst;
    if ((kst = knob01("MEMOPT_CONV_WGRAD_SPLIT", 1, &c->conv_wgrad_split)) != MO_OK) {
        free(c);
        return kst;
    }
    int implicit = 1;
    if ((kst = knob01("MEMOPT_CONV_IMPLICIT", 1, &implicit)) != MO_OK) {
        free(c);
        return kst;
    }
    c->conv_implicit = implicit ? MO_CONV_IMPLICIT_AUTO : MO_CONV_IMPLICIT_OFF;
    if ((kst = knob01("MEMOPT_DGRAD_ADD", 1, &c->conv_dgrad_add)) != MO_OK) {
        free(c);
        return kst;
    }
    if ((kst = knob01("MEMOPT_RECOMPUTE_TAIL", 1, &c->recompute_tail)) != MO_OK) {
        free(c);
        return kst;
    }
    if ((kst = knob01("MEMOPT_ZERO_SIDE", 0, &c->zero_side_on)) != MO_OK) {
        free(c);
        return kst;
    }
    if ((kst = knob01("MEMOPT_LN_WAVE", 1, &c->ln_bwd_wave)) != MO_OK) {
        free(c);
        return kst;
    }
    if ((kst = knob01("MEMOPT_LN_DSUM", 1, &c->ln_dsum)) != MO_OK) {
        free(c);
        return kst;
    }
    if ((kst = knob_digit("MEMOPT_DBIAS_SIDE", 0, 3, &c->dbias_side)) != MO_OK) {
        free(c);
        return kst;
    }
    c->conv_add16_beta1 = 1;
    c->conv_force_rank = -1;
    c->conv_last_engine = -1;
    c->maxpool_two_pass = 1;
    const char *bn = getenv("MEMOPT_BN");
    c->bn_cudnn = bn && strcmp(bn, "cudnn") == 0;
    const char *ln = getenv("MEMOPT_LN");
    c->ln_loop = ln && strcmp(ln, "loop") == 0;
    // which kernel sums the 16-bit GEMMs' bias gradients: refused when unknown, as MEMOPT_ATTN_IMPL below
    const char *db = getenv("MEMOPT_DBIAS");
    if (db && *db && strcmp(db, "narrow") != 0 && strcmp(db, "wide") != 0 && strcmp(db, "lt") != 0 &&
        strcmp(db, "gelu") != 0) {
        free(c);
        return MO_FAIL(MO_ERR_INVALID, "MEMOPT_DBIAS=%s: expected narrow, wide, lt or gelu", db);
    }
    c->dbias_mode = !db || !*db ? MO_DBIAS_WIDE
                  : strcmp(db, "narrow") == 0 ? MO_DBIAS_NARROW
                  : strcmp(db, "lt") == 0 ? MO_DBIAS_LT
                  : strcmp(db, "gelu") == 0 ? MO_DBIAS_GELU : MO_DBIAS_WIDE;
    const char *ar = getenv("MEMOPT_ATTN_CHUNK_ROWS");
    if (ar && atoi(ar) > 0) c->attn_chunk_rows = atoi(ar);
    // which 16-bit fused attention runs: a value other than these two would run the default while the
    // row records the knob as set, so it is refused
    const char *ai = getenv("MEMOPT_ATTN_IMPL");
    if (ai && *ai && strcmp(ai, "own") != 0 && strcmp(ai, "cudnn") != 0) {
        free(c);
        return MO_FAIL(MO_ERR_INVALID, "MEMOPT_ATTN_IMPL=%s: expected own or cudnn", ai);
    }
    c->attn_impl = ai && strcmp(ai, "cudnn") == 0 ? MO_ATTN_IMPL_CUDNN : MO_ATTN_IMPL_OWN;
    // which fused attention runs on fp32 data: refused when unknown, as above
    const char *af = getenv("MEMOPT_ATTN_FUSED32");
    if (af && *af && strcmp(af, "gemm") != 0 && strcmp(af, "own") != 0) {
        free(c);
        return MO_FAIL(MO_ERR_INVALID, "MEMOPT_ATTN_FUSED32=%s: expected gemm or own", af);
    }
    c->attn_fused32 = !af || !*af              ? MO_ATTN_FUSED32_DEFAULT
                      : strcmp(af, "gemm") == 0 ? MO_ATTN_FUSED32_GEMM
                                                : MO_ATTN_FUSED32_OWN;
    if ((kst = knob01("MEMOPT_MARK_LIB_WRITES", 0, &c->mark_lib_writes)) != MO_OK) {
        free(c);
        return kst;
    }
    // MEMOPT_WORKSPACE_MIB=N: the libraries' workspace (cuBLASLt, cuBLAS, cuDNN, the im2col column chunks)
    // is N MiB instead of the context's default (ws_bytes: 32, or the model's, the ResNet's 256), to
    // measure what another budget buys: session 19 timed ResNet-50's fp32 step at 132 ms with 32 MiB and
    // 110 ms with 512 (cuDNN's weight-gradient engines that need 141-321 MiB, and larger column chunks).
    // Every backend reads it, so the dry backend's peak stays exact; not below 32, the smallest size the
    // choice tables (lt_algo_table.c, conv_algo_table.c) are keyed by.
    const char *wm = getenv("MEMOPT_WORKSPACE_MIB");
    if (wm && *wm) {
        // digits only, no leading zero: the row records the value as written, so 64 has one spelling
        const size_t nd = strspn(wm, "0123456789");
        const long v = nd == strlen(wm) && wm[0] != '0' && nd <= 6 ? strtol(wm, NULL, 10) : -1;
        if (v < 32 || v > MO_WORKSPACE_MIB_MAX) {
            free(c);
            return MO_FAIL(MO_ERR_INVALID, "MEMOPT_WORKSPACE_MIB=%s: expected a whole number of MiB, 32 to %d", wm,
                           MO_WORKSPACE_MIB_MAX);
        }
        c->gemm_ws_bytes = (size_t)v << 20;
    }
    mo_status st = MO_OK;
#ifdef MEMOPT_HAVE_CUDA
    if (backend == MO_BACKEND_CUDA && (st = ctx_cuda_stream(c)) != MO_OK) { free(c); return st; }
#endif
    st = mo_alloc(alloc, c->gemm_ws_bytes, MO_CAT_WORKSPACE, &c->gemm_ws);
    // MEMOPT_DBIAS_SIDE=3's second GEMM workspace (not under MEMOPT_DBIAS=lt, which keeps the dweight GEMM on
    // the compute stream), allocated after the first so the first keeps its address whatever the knob
    if (st == MO_OK && c->dbias_side == 3 && c->dbias_mode != MO_DBIAS_LT)
        st = mo_alloc(alloc, c->gemm_ws_bytes, MO_CAT_WORKSPACE, &c->side_ws);
    if (st != MO_OK) { mo_ctx_destroy(c); return st; }
#ifdef MEMOPT_HAVE_CUDA
    if (backend == MO_BACKEND_CUDA) {
        st = ctx_cuda_init(c);
        if (st != MO_OK) { mo_ctx_destroy(c); return st; }
    }
#endif
    *out = c;
    return MO_OK;
}

static void prof_free(mo_profiler *p);

void mo_ctx_destroy(mo_ctx *c) {
    if (!c) return;
    mo_copy_destroy(c); // its stream drained before anything it copied is given back
    mo_zero_side_destroy(c); // likewise: no clear still writes into memory about to be freed
    mo_side_destroy(c);      // and no bias kernel still reads it
    prof_free(c->prof);
    if (c->side_ws) mo_free(c->alloc, c->side_ws); // the side stream drained above; the last allocated, freed first
    mo_free(c->alloc, c->gemm_ws); // in stream order, before the stream goes
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        ctx_cuda_fini(c);
        mo_allocator_set_stream(c->alloc, NULL);
    }
#endif
    free(c->stage_host); // cpu / dry (cuda's pinned buffer went with ctx_cuda_fini)
    free(c);
}

mo_status mo_ctx_sync(mo_ctx *c) {
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
#else
    (void)c;
#endif
    return MO_OK;
}

mo_status mo_memcpy_h2d(mo_ctx *c, void *dst, const void *src, size_t bytes) {
    switch (c->backend) {
    case MO_BACKEND_DRY: return MO_OK;
    case MO_BACKEND_CPU: memcpy(dst, src, bytes); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        // Pageable host memory: cudaMemcpyAsync returns once the source is staged, so src may be reused.
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)c->stream));
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
#endif
        return MO_OK;
    }
    return MO_OK;
}

mo_status mo_memcpy_d2h(mo_ctx *c, void *dst, const void *src, size_t bytes) {
    switch (c->backend) {
    case MO_BACKEND_DRY: memset(dst, 0, bytes); return MO_OK;
    case MO_BACKEND_CPU: memcpy(dst, src, bytes); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)c->stream));
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
#endif
        return MO_OK;
    }
    return MO_OK;
}

mo_status mo_memcpy_d2d(mo_ctx *c, void *dst, const void *src, size_t bytes) {
    switch (c->backend) {
    case MO_BACKEND_DRY: return MO_OK;
    case MO_BACKEND_CPU: memmove(dst, src, bytes); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)c->stream));
#endif
        return MO_OK;
    }
    return MO_OK;
}

mo_status mo_memset_zero(mo_ctx *c, void *dst, size_t bytes) {
    mo_cost_record(c, "memset", MO_COST_MEMORY, 0, (double)bytes);
    switch (c->backend) {
    case MO_BACKEND_DRY: return MO_OK;
    case MO_BACKEND_CPU: memset(dst, 0, bytes); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)c->stream));
#endif
        return MO_OK;
    }
    return MO_OK;
}

// The staging buffer grows in 64 KiB steps; growing waits for the last upload out of the old buffer.
#define STAGE_ROUND ((size_t)64 << 10)

mo_status mo_stage_begin(mo_ctx *c, size_t bytes, void **host) {
    *host = NULL;
    size_t want = (bytes + STAGE_ROUND - 1) / STAGE_ROUND * STAGE_ROUND;
    if (want == 0) want = STAGE_ROUND;
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        if (!c->stage_event) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            c->stage_event = e;
        }
        // the previous upload out of the buffer has been copied (it was enqueued long ago: this does
        // not wait for the stream's later work)
        CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)c->stage_event));
        if (c->stage_bytes < want) {
            if (c->stage_host) CUDA_CHECK(cudaFreeHost(c->stage_host));
            c->stage_host = NULL;
            c->stage_bytes = 0;
            void *p = NULL;
            CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocDefault));
            c->stage_host = p;
            c->stage_bytes = want;
        }
        *host = c->stage_host;
        return MO_OK;
    }
#endif
    if (c->stage_bytes < want) {
        void *p = realloc(c->stage_host, want);
        if (!p) return MO_FAIL(MO_ERR_OOM, "host out of memory for a %zu-byte staging buffer", want);
        c->stage_host = p;
        c->stage_bytes = want;
    }
    *host = c->stage_host;
    return MO_OK;
}

mo_status mo_stage_upload(mo_ctx *c, void *dst, size_t bytes) {
    if (!c->stage_host || bytes > c->stage_bytes)
        return MO_FAIL(MO_ERR_INTERNAL, "mo_stage_upload of %zu bytes without a mo_stage_begin that large", bytes);
    switch (c->backend) {
    case MO_BACKEND_DRY: return MO_OK;
    case MO_BACKEND_CPU: memcpy(dst, c->stage_host, bytes); return MO_OK;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        CUDA_CHECK(cudaMemcpyAsync(dst, c->stage_host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)c->stream));
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)c->stage_event, (cudaStream_t)c->stream));
#endif
        return MO_OK;
    }
    return MO_OK;
}

mo_status mo_timer_init(mo_ctx *c, mo_timer *t) {
    memset(t, 0, sizeof *t);
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        cudaEvent_t a, b;
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        t->ev_start = a;
        t->ev_stop = b;
    }
#else
    (void)c;
#endif
    return MO_OK;
}

mo_status mo_timer_start(mo_ctx *c, mo_timer *t) {
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)t->ev_start, (cudaStream_t)c->stream));
        return MO_OK;
    }
#else
    (void)c;
#endif
    t->host_start = mo_host_ms();
    return MO_OK;
}

mo_status mo_timer_stop(mo_ctx *c, mo_timer *t, double *ms) {
    MO_TRY(mo_timer_mark_stop(c, t));
    return mo_timer_elapsed(c, t, ms);
}

mo_status mo_timer_mark_stop(mo_ctx *c, mo_timer *t) {
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)t->ev_stop, (cudaStream_t)c->stream));
        return MO_OK;
    }
#else
    (void)c;
#endif
    t->host_ms = mo_host_ms() - t->host_start;
    return MO_OK;
}

mo_status mo_timer_elapsed(mo_ctx *c, mo_timer *t, double *ms) {
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)t->ev_stop));
        float f = 0;
        CUDA_CHECK(cudaEventElapsedTime(&f, (cudaEvent_t)t->ev_start, (cudaEvent_t)t->ev_stop));
        *ms = f;
        return MO_OK;
    }
#else
    (void)c;
#endif
    *ms = t->host_ms;
    return MO_OK;
}

void mo_timer_destroy(mo_timer *t) {
#ifdef MEMOPT_HAVE_CUDA
    if (t->ev_start) cudaEventDestroy((cudaEvent_t)t->ev_start);
    if (t->ev_stop) cudaEventDestroy((cudaEvent_t)t->ev_stop);
#endif
    memset(t, 0, sizeof *t);
}

mo_status mo_scratch_alloc(mo_ctx *c, size_t bytes, void **ptr) {
    *ptr = NULL;
    if (bytes == 0) return MO_OK;
    return mo_alloc(c->alloc, bytes, MO_CAT_WORKSPACE, ptr);
}

mo_status mo_scratch_free(mo_ctx *c, void *ptr) { return mo_free(c->alloc, ptr); }

// ---------------------------------------------------------------- profiler
#define PROF_PAIRS 4096

struct mo_profiler {
    mo_backend_kind backend;
    int n, open;                 // pairs recorded; a pair is begun
    int cat[PROF_PAIRS];
    double host_ms[PROF_PAIRS];  // non-cuda: elapsed per pair
    double host_start;
    void *ev[2 * PROF_PAIRS];    // cudaEvent_t start/stop per pair
    double pending[MO_PROF_COUNT]; // flushed when the pool fills
};

const char *mo_prof_name(mo_prof_cat c) {
    static const char *n[MO_PROF_COUNT] = {"gemm", "attention", "layernorm", "elementwise", "loss", "optimizer"};
    return (unsigned)c < MO_PROF_COUNT ? n[c] : "?";
}

static void prof_free(mo_profiler *p) {
    if (!p) return;
#ifdef MEMOPT_HAVE_CUDA
    for (int i = 0; i < 2 * PROF_PAIRS; i++)
        if (p->ev[i]) cudaEventDestroy((cudaEvent_t)p->ev[i]);
#endif
    free(p);
}

mo_status mo_prof_enable(mo_ctx *c) {
    if (c->prof) return MO_OK;
    mo_profiler *p = calloc(1, sizeof *p);
    if (!p) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the profiler");
    p->backend = c->backend;
#ifdef MEMOPT_HAVE_CUDA
    if (c->backend == MO_BACKEND_CUDA)
        for (int i = 0; i < 2 * PROF_PAIRS; i++) {
            cudaEvent_t e;
            cudaError_t err = cudaEventCreate(&e);
            if (err != cudaSuccess) { prof_free(p); return MO_FAIL(MO_ERR_CUDA, "cudaEventCreate: %s", cudaGetErrorString(err)); }
            p->ev[i] = e;
        }
#endif
    c->prof = p;
    return MO_OK;
}

static mo_status prof_drain(mo_ctx *c, double ms[MO_PROF_COUNT]) {
    mo_profiler *p = c->prof;
    for (int i = 0; i < p->n; i++) {
        double t = p->host_ms[i];
#ifdef MEMOPT_HAVE_CUDA
        if (p->backend == MO_BACKEND_CUDA) {
            float f = 0;
            CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)p->ev[2 * i + 1]));
            CUDA_CHECK(cudaEventElapsedTime(&f, (cudaEvent_t)p->ev[2 * i], (cudaEvent_t)p->ev[2 * i + 1]));
            t = f;
        }
#endif
        ms[p->cat[i]] += t;
    }
    p->n = 0;
    return MO_OK;
}

mo_status mo_prof_begin(mo_ctx *c, mo_prof_cat cat) {
    c->prof_cat = (int)cat; // the cost trace's category of the ops that follow (cost.h)
    mo_profiler *p = c->prof;
    if (!p) return MO_OK;
    if (p->n == PROF_PAIRS) MO_TRY(prof_drain(c, p->pending));
    p->cat[p->n] = cat;
    p->open = 1;
#ifdef MEMOPT_HAVE_CUDA
    if (p->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)p->ev[2 * p->n], (cudaStream_t)c->stream));
        return MO_OK;
    }
#endif
    p->host_start = mo_host_ms();
    return MO_OK;
}

mo_status mo_prof_end(mo_ctx *c) {
    c->prof_cat = MO_PROF_COUNT; // ops from here on are outside any profiled op
    mo_profiler *p = c->prof;
    if (!p || !p->open) return MO_OK;
    p->open = 0;
#ifdef MEMOPT_HAVE_CUDA
    if (p->backend == MO_BACKEND_CUDA) {
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)p->ev[2 * p->n + 1], (cudaStream_t)c->stream));
        p->n++;
        return MO_OK;
    }
#endif
    p->host_ms[p->n++] = mo_host_ms() - p->host_start;
    return MO_OK;
}

mo_status mo_prof_collect(mo_ctx *c, double ms[MO_PROF_COUNT]) {
    mo_profiler *p = c->prof;
    if (!p) return MO_OK;
    MO_TRY(prof_drain(c, ms));
    for (int k = 0; k < MO_PROF_COUNT; k++) { ms[k] += p->pending[k]; p->pending[k] = 0; }
    return MO_OK;
}
