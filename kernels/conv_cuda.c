// Convolutions on cuDNN 9's backend graph API (conv.h), with a per-context cache of execution plans.
//
// One graph per convolution: three tensor descriptors (dims N, C, H, W with NHWC strides; the filter
// K, C, R, S with KRSC strides), a convolution descriptor (cross-correlation, fp32 compute), one operation
// (CONVOLUTION_FORWARD / BACKWARD_DATA / BACKWARD_FILTER), the operation graph. Engines come from the
// heuristics (mode A, then the fallback list); a candidate is kept only when
//   - its engine carries no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC (a checkpointed step must give the bits
//     of an unchecked one, and two runs the same bits);
//   - in fp32 without ctx->tf32, no CUDNN_NUMERICAL_NOTE_TENSOR_CORE / DOWN_CONVERT_INPUTS (TF32 is
//     what a tensor-core engine does with fp32 data; PyTorch filters the same notes for allow_tf32);
//   - its execution plan finalizes and its workspace fits the fixed budget (the context's GEMM workspace,
//     taken from the suite's allocator: cuDNN and cuBLASLt run in stream order on one stream, so they
//     share it and a convolution allocates nothing).
// The first kept candidate runs, unless the stored table (conv_table.h) names another for this key,
// device and cuDNN version; MEMOPT_CONV_TUNE=1 times the first CONV_TUNE_MAX kept candidates of every
// new plan that can be rerun without changing its result and prints a table line.
// Plans are cached by key (conv_table.h's mo_conv_key: kind, dtype, TF32, shape, pointer alignment
// classes, beta, workspace); a repeated convolution costs one variant pack and cudnnBackendExecute.
// Not thread-safe: a context is used by one thread at a time (ctx.h).
#include "conv.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "conv_table.h"
#include "cuda_check.h"
#include "lib_writes.h"
#include "lt_gemm.h"
#include "ops_mixed_impl.h"
#include "residual.h"
#include "resnet_ops_impl.h"

#define DNN_SLOTS 256    // ResNet-152 has ~60 distinct convolution keys per precision (x3 kinds)
#define DNN_MAX_CAND 64  // heuristic results looked at per mode
#define DNN_KEEP 8       // descriptors a plan holds (tensors, convolution, operation, graph, engine config)
#define CONV_TUNE_MAX 8  // kept candidates timed by MEMOPT_CONV_TUNE=1
#define CONV_TUNE_WARM 2
#define CONV_TUNE_REPS 7 // median of
#define CONV_TUNE_MIN_GAIN 0.01

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

typedef struct dnn_plan {
    mo_conv_key key;
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[DNN_KEEP]; // what the plan was built from, released with it
    int nkeep;
    int64_t ws;
    long engine; // the engine's global index
    int rank;    // its place among the kept candidates
} dnn_plan;

struct mo_dnn_cache {
    cudnnHandle_t h; // from the process's pool (dnn_handle_take), given back at mo_dnn_destroy
    int dev;         // the device it was made on
    int n, victim;
    long hits, misses, table_used, table_missing;
    char device[256];
    dnn_plan slot[DNN_SLOTS];
};

static void plan_release(dnn_plan *p) {
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--)
        if (p->keep[i]) cudnnBackendDestroyDescriptor(p->keep[i]);
    p->plan = NULL;
    p->nkeep = 0;
}

// ---- the process's cuDNN handles, reused by every context (gpu_alloc_faults' ResNet engine case)
// A context used to cudnnCreate a handle at its first convolution and cudnnDestroy it with the context:
// one create/destroy pair per run. On the H100 (cuDNN 9.14, CUDA 13.0) that test's loop of short ResNet
// runs read one 2 MiB page more from its 107th fault or so on, at the same iteration for a ResNet of 8 and
// of 4 blocks; the GPT runs before it (no cuDNN, thousands of them) left nothing. The likeliest cause is
// a growth per handle lifetime inside cuDNN (tests/gpu_dnn_churn.c measures it). A handle given back at
// mo_dnn_destroy (its plans released first, its stream unset) goes to the next context of the same
// device instead, so a process makes as many handles as it has contexts using cuDNN at once; the pooled
// ones are destroyed by mo_dnn_pool_drain, also run at exit (atexit, registered after the CUDA runtime
// initialized, so it runs before the runtime's own teardown).
#define DNN_POOL_MAX 64

static pthread_mutex_t dnn_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { cudnnHandle_t h; int dev; } dnn_pool[DNN_POOL_MAX];
static int dnn_pool_n;
static long dnn_pool_created;
static pthread_once_t dnn_pool_once = PTHREAD_ONCE_INIT;

static void dnn_pool_at_exit(void) { mo_dnn_pool_drain(); }
static void dnn_pool_register(void) { atexit(dnn_pool_at_exit); }

void mo_dnn_pool_drain(void) {
    pthread_mutex_lock(&dnn_pool_lock);
    if (dnn_pool_n == 0) { // nothing pooled: no CUDA call (test_finish runs this in CPU-only tests too)
        pthread_mutex_unlock(&dnn_pool_lock);
        return;
    }
    int prev = -1;
    (void)cudaGetDevice(&prev);
    for (int i = 0; i < dnn_pool_n; i++) {
        if (dnn_pool[i].dev != prev) (void)cudaSetDevice(dnn_pool[i].dev); // destroyed on its own device
        cudnnDestroy(dnn_pool[i].h);
        if (dnn_pool[i].dev != prev && prev >= 0) (void)cudaSetDevice(prev);
    }
    dnn_pool_n = 0;
    pthread_mutex_unlock(&dnn_pool_lock);
}

void mo_dnn_pool_stats(int *pooled, long *created) {
    pthread_mutex_lock(&dnn_pool_lock);
    if (pooled) *pooled = dnn_pool_n;
    if (created) *created = dnn_pool_created;
    pthread_mutex_unlock(&dnn_pool_lock);
}

// A handle of device dev: a pooled one, or a new one.
static mo_status dnn_handle_take(int dev, cudnnHandle_t *out) {
    *out = NULL;
    pthread_mutex_lock(&dnn_pool_lock);
    for (int i = dnn_pool_n - 1; i >= 0; i--)
        if (dnn_pool[i].dev == dev) {
            *out = dnn_pool[i].h;
            dnn_pool[i] = dnn_pool[--dnn_pool_n];
            break;
        }
    pthread_mutex_unlock(&dnn_pool_lock);
    if (*out) return MO_OK;
    pthread_once(&dnn_pool_once, dnn_pool_register);
    CUDNN_CHECK(cudnnCreate(out));
    pthread_mutex_lock(&dnn_pool_lock);
    dnn_pool_created++;
    pthread_mutex_unlock(&dnn_pool_lock);
    return MO_OK;
}

// h back to the pool (nothing in flight uses it: the caller synchronized its stream); destroyed when full.
static void dnn_handle_give(cudnnHandle_t h, int dev) {
    (void)cudnnSetStream(h, NULL); // no reference to the context's stream, destroyed next
    pthread_mutex_lock(&dnn_pool_lock);
    if (dnn_pool_n < DNN_POOL_MAX) {
        dnn_pool[dnn_pool_n].h = h;
        dnn_pool[dnn_pool_n].dev = dev;
        dnn_pool_n++;
        h = NULL;
    }
    pthread_mutex_unlock(&dnn_pool_lock);
    if (h) cudnnDestroy(h);
}

static mo_status dnn_get(mo_ctx *c, mo_dnn_cache **out) {
    if (!c->dnn) {
        mo_dnn_cache *d = calloc(1, sizeof *d);
        if (!d) return MO_FAIL(MO_ERR_OOM, "host out of memory for the cuDNN plan cache");
        c->dnn = d;
        // a handle not bound to c->stream, or without its device name, must not be used by a later call:
        // give it back so that the next call reports it could not be had
        mo_status st = MO_OK;
        int dev = 0;
        struct cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDevice(&dev));
        d->dev = dev;
        MO_TRY(dnn_handle_take(dev, &d->h));
        CUDNN_CHECK_GOTO(st, cudnnSetStream(d->h, (cudaStream_t)c->stream), bad);
        CUDA_CHECK_GOTO(st, cudaGetDeviceProperties(&prop, dev), bad);
        snprintf(d->device, sizeof d->device, "%s", prop.name);
        goto good;
    bad:
        dnn_handle_give(d->h, d->dev);
        d->h = NULL;
        return st;
    good:;
    }
    if (!c->dnn->h) return MO_FAIL(MO_ERR_CUDNN, "the cuDNN handle could not be created earlier");
    *out = c->dnn;
    return MO_OK;
}

mo_status mo_dnn_handle(mo_ctx *c, void **handle) {
    mo_dnn_cache *d;
    MO_TRY(dnn_get(c, &d));
    *handle = d->h;
    return MO_OK;
}

void mo_dnn_destroy(mo_ctx *c) {
    mo_dnn_cache *d = c->dnn;
    if (!d) return;
    if (c->stream) cudaStreamSynchronize((cudaStream_t)c->stream); // nothing in flight uses a plan
    for (int i = 0; i < d->n; i++) plan_release(&d->slot[i]); // built on d->h: released before it goes
    if (d->h) dnn_handle_give(d->h, d->dev);
    free(d);
    c->dnn = NULL;
}

void mo_conv_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    *hits = c->dnn ? c->dnn->hits : 0;
    *misses = c->dnn ? c->dnn->misses : 0;
}

static uint32_t ptr_alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 2 && (v % a) != 0) a >>= 1;
    return a;
}

static cudnnDataType_t dnn_type(mo_dtype dt) {
    return dt == MO_F16 ? CUDNN_DATA_HALF : dt == MO_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static const char *kind_name(int kind) {
    return kind == MO_CONV_FWD ? "forward" : kind == MO_CONV_BWD_DATA ? "backward data" : "backward filter";
}

// A new descriptor, held by p (released with it).
static mo_status new_desc(dnn_plan *p, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
    if (p->nkeep == DNN_KEEP) return MO_FAIL(MO_ERR_INTERNAL, "conv plan: more than %d descriptors", DNN_KEEP);
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &p->keep[p->nkeep]));
    *out = p->keep[p->nkeep++];
    return MO_OK;
}

static mo_status make_tensor(dnn_plan *p, cudnnBackendDescriptor_t *out, int64_t uid, cudnnDataType_t ty, int64_t n,
                             int64_t ch, int64_t h, int64_t w, int64_t align) {
    cudnnBackendDescriptor_t t = NULL;
    MO_TRY(new_desc(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    const int64_t dim[4] = {n, ch, h, w}, str[4] = {h * w * ch, 1, w * ch, ch}; // NHWC (KRSC) in memory
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ty));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CUDNN_CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CUDNN_CHECK(cudnnBackendFinalize(t));
    *out = t;
    return MO_OK;
}

// The operation graph of key into p->keep; *graph is its last descriptor.
static mo_status build_graph(mo_dnn_cache *d, const mo_conv_key *k, dnn_plan *p, cudnnBackendDescriptor_t *graph) {
    const cudnnDataType_t ty = dnn_type((mo_dtype)k->dt);
    const int P = (k->H + 2 * k->pad - k->R) / k->stride + 1, Q = (k->W + 2 * k->pad - k->S) / k->stride + 1;
    cudnnBackendDescriptor_t x = NULL, w = NULL, y = NULL, conv = NULL, op = NULL, g = NULL;
    MO_TRY(make_tensor(p, &x, UID_X, ty, k->N, k->C, k->H, k->W, k->al_x));
    MO_TRY(make_tensor(p, &w, UID_W, ty, k->K, k->C, k->R, k->S, k->al_w));
    MO_TRY(make_tensor(p, &y, UID_Y, ty, k->N, k->K, P, Q, k->al_y));
    MO_TRY(new_desc(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t sd = 2, dil[2] = {1, 1}, str[2] = {k->stride, k->stride}, pad[2] = {k->pad, k->pad};
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    CUDNN_CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    CUDNN_CHECK(cudnnBackendFinalize(conv));
    const float alpha = 1.0f, beta = k->beta_one ? 1.0f : 0.0f;
    const cudnnBackendDescriptorType_t opt[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                 CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                                 CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    MO_TRY(new_desc(p, opt[k->kind], &op));
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (k->kind == MO_CONV_FWD) {
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, D, 1, &x));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, D, 1, &w));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, D, 1, &y));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, D, 1, &conv));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    } else if (k->kind == MO_CONV_BWD_DATA) {
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, D, 1, &x));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, D, 1, &w));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, D, 1, &y));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, D, 1, &conv));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    } else {
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, D, 1, &x));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, D, 1, &w));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, D, 1, &y));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, D, 1, &conv));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
        CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    }
    CUDNN_CHECK(cudnnBackendFinalize(op));
    MO_TRY(new_desc(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CUDNN_CHECK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, D, 1, &op));
    CUDNN_CHECK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &d->h));
    CUDNN_CHECK(cudnnBackendFinalize(g));
    *graph = g;
    return MO_OK;
}

// Why candidates were dropped (for the error when none is kept, and the tuning lines).
typedef struct cand_count { int seen, nondet, tf32, bad16, unsupported, too_big, kept; } cand_count;

// Engines that get a 16-bit beta-1 backward-data pass (din += dgrad) wrong: gpu_conv_add_n128 on the H100
// (session 23, cuDNN 9.14) at ResNet-50 batch 128 gave engine 78 relative errors of 0.08-0.21 against the
// chunked add on every stride-1 1x1 shape it was kept for, in fp16 and bf16, while every other kept engine
// agreed (within one rounding); the stored beta-0 choices had picked it for two of the step's shapes, and
// the step trained wrongly (session 22). fp32 data's beta-1 steps gave the pass's loss bits, so they keep it.
static const long BETA1_16_BAD[] = {78};

// Whether cfg's engine may run (deterministic; TF32 only when allowed; not one of BETA1_16_BAD for a
// 16-bit beta-1 key); its global index.
static mo_status engine_ok(const mo_conv_key *k, cudnnBackendDescriptor_t cfg, int *ok, long *gidx, cand_count *cc,
                           char *notes_txt, size_t notes_len) {
    *ok = 0;
    cudnnBackendDescriptor_t eng = NULL;
    mo_status st = MO_OK;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    int64_t n = 0, gi = -1;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                                  &n, &eng), done);
    CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &gi),
                     done);
    n = 0;
    CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes), done);
    *gidx = (long)gi;
    int nondet = 0, tc = 0;
    static const char *nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT] = {"tensor_core", "down_convert", "reduced_reduction",
                                                              "fft", "nondeterministic", "winograd", "winograd4x4",
                                                              "winograd6x6", "winograd13x13", "strict_nan"};
    size_t used = 0;
    notes_txt[0] = '\0';
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
        if ((unsigned)notes[i] < CUDNN_NUMERICAL_NOTE_TYPE_COUNT && used + 24 < notes_len)
            used += (size_t)snprintf(notes_txt + used, notes_len - used, "%s%s", used ? "," : "",
                                     nn[notes[i]] ? nn[notes[i]] : "?"); // a note newer than this list
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) nondet = 1;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) tc = 1;
    }
    int bad = 0;
    for (size_t i = 0; k->beta_one && k->dt != MO_F32 && i < sizeof BETA1_16_BAD / sizeof BETA1_16_BAD[0]; i++)
        bad |= gi == BETA1_16_BAD[i];
    if (nondet) cc->nondet++;
    else if (k->dt == MO_F32 && !k->tf32 && tc) cc->tf32++;
    else if (bad) cc->bad16++;
    else *ok = 1;
done:
    cudnnBackendDestroyDescriptor(eng);
    return st;
}

// An execution plan for cfg; *plan NULL (no error) when cuDNN refuses it or its workspace exceeds the budget.
static mo_status try_plan(mo_dnn_cache *d, const mo_conv_key *k, cudnnBackendDescriptor_t cfg,
                          cudnnBackendDescriptor_t *plan, int64_t *ws, cand_count *cc) {
    *plan = NULL;
    cudnnBackendDescriptor_t p;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
    mo_status st = MO_OK;
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &d->h),
                     fail);
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg), fail);
    if (cudnnBackendFinalize(p) != CUDNN_STATUS_SUCCESS) { // this engine cannot run this graph: not a candidate
        cc->unsupported++;
        goto fail;
    }
    int64_t n = 0, w = 0;
    CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                  &n, &w), fail);
    if (w < 0 || (uint64_t)w > (uint64_t)k->ws_bytes) {
        cc->too_big++;
        goto fail;
    }
    *plan = p;
    *ws = w;
    return MO_OK;
fail:
    cudnnBackendDestroyDescriptor(p);
    return st;
}

static mo_status run_plan(mo_ctx *c, mo_dnn_cache *d, cudnnBackendDescriptor_t plan, void *ptr[3]) {
    cudnnBackendDescriptor_t vp;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    const int64_t uid[3] = {UID_X, UID_W, UID_Y};
    void *ws = c->gemm_ws;
    mo_status st = MO_OK;
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uid),
                     done);
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3,
                                                  ptr), done);
    CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
                     done);
    CUDNN_CHECK_GOTO(st, cudnnBackendFinalize(vp), done);
    CUDNN_CHECK_GOTO(st, cudnnBackendExecute(d->h, plan, vp), done);
done:
    cudnnBackendDestroyDescriptor(vp);
    return st;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Median ms of plan on ptr (-1 when it fails at execution: not a candidate).
static mo_status time_plan(mo_ctx *c, mo_dnn_cache *d, cudnnBackendDescriptor_t plan, void *ptr[3], float *ms) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    const cudaError_t ce1 = cudaEventCreate(&e1);
    if (ce1 != cudaSuccess) {
        cudaEventDestroy(e0);
        CUDA_CHECK(ce1);
    }
    float t[CONV_TUNE_REPS];
    *ms = -1.0f;
    mo_status st = MO_OK;
    for (int r = 0; r < CONV_TUNE_WARM + CONV_TUNE_REPS; r++) {
        cudaError_t ce = cudaEventRecord(e0, s);
        if (run_plan(c, d, plan, ptr) != MO_OK) { mo_clear_error(); break; }
        if (ce == cudaSuccess) ce = cudaEventRecord(e1, s);
        if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
        if (ce == cudaSuccess && r >= CONV_TUNE_WARM) ce = cudaEventElapsedTime(&t[r - CONV_TUNE_WARM], e0, e1);
        if (ce != cudaSuccess) {
            st = MO_FAIL(MO_ERR_CUDA, "conv tuning: %s", cudaGetErrorString(ce));
            break;
        }
        if (r == CONV_TUNE_WARM + CONV_TUNE_REPS - 1) {
            qsort(t, CONV_TUNE_REPS, sizeof t[0], cmp_float);
            *ms = t[CONV_TUNE_REPS / 2];
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return st;
}

// The stored choice of k; for a beta-1 key without one, the beta-0 key's (a tuning run cannot time a beta-1
// plan, which adds to its output each run; plan_build takes it only where the same engine is kept at its rank)
static const mo_conv_choice *table_find(const mo_ctx *c, const mo_dnn_cache *d, const mo_conv_key *k) {
    if (!c->conv_table) return NULL;
    const long ver = (long)cudnnGetVersion();
    mo_conv_key k0 = *k;
    k0.beta_one = 0;
    const mo_conv_choice *as_beta0 = NULL;
    for (int i = 0; i < mo_conv_table_n; i++) {
        const mo_conv_choice *t = &mo_conv_table[i];
        if (t->cudnn_version != ver || strcmp(t->device, d->device) != 0) continue;
        if (mo_conv_key_eq(&t->key, k)) return t;
        if (k->beta_one && mo_conv_key_eq(&t->key, &k0)) as_beta0 = t;
    }
    return as_beta0;
}

// Builds p for key: the graph, then the heuristics' candidates in order until the one to run is found.
// ptr: the operands (for tuning, which reruns the convolution on them).
static mo_status plan_build(mo_ctx *c, mo_dnn_cache *d, const mo_conv_key *k, dnn_plan *p, void *ptr[3]) {
    cudnnBackendDescriptor_t graph = NULL;
    MO_TRY(build_graph(d, k, p, &graph));
    const int force = c->conv_force_rank; // tests: this rank, whatever is stored
    const mo_conv_choice *want = force >= 0 ? NULL : table_find(c, d, k);
    const int rerunnable = !k->beta_one;
    const int tune = c->conv_tune && rerunnable && !want && force < 0;
    int need = force >= 0 ? force + 1 : want ? want->rank + 1 : tune ? CONV_TUNE_MAX : 1; // kept candidates to look at
    if (need > CONV_TUNE_MAX) need = CONV_TUNE_MAX;
    cudnnBackendDescriptor_t kept_plan[CONV_TUNE_MAX + 1], kept_cfg[CONV_TUNE_MAX + 1];
    long kept_eng[CONV_TUNE_MAX + 1];
    int64_t kept_ws[CONV_TUNE_MAX + 1];
    char kept_notes[CONV_TUNE_MAX + 1][256];
    int nk = 0;
    cand_count cc = {0};
    mo_status st = MO_OK;
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2 && nk < need; m++) {
        cudnnBackendDescriptor_t heur = NULL, cfg[DNN_MAX_CAND] = {0};
        int64_t count = 0, got = 0;
        CUDNN_CHECK_GOTO(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur), mode_done);
        CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph), mode_done);
        CUDNN_CHECK_GOTO(st, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                                      &modes[m]), mode_done);
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) goto mode_done; // no list in this mode
        CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL), mode_done);
        if (count > DNN_MAX_CAND) count = DNN_MAX_CAND;
        for (int64_t i = 0; i < count; i++)
            CUDNN_CHECK_GOTO(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]), mode_done);
        if (count > 0)
            CUDNN_CHECK_GOTO(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg), mode_done);
        for (int64_t i = 0; i < got && nk < need; i++) {
            cc.seen++;
            int ok = 0;
            long gi = -1;
            char notes[256];
            if (engine_ok(k, cfg[i], &ok, &gi, &cc, notes, sizeof notes) != MO_OK) { // its notes cannot be read: not a candidate
                mo_clear_error();
                cc.unsupported++;
                continue;
            }
            if (!ok) continue;
            int dup = 0; // the fallback list repeats engines of mode A
            for (int j = 0; j < nk; j++) dup |= kept_eng[j] == gi;
            if (dup) continue;
            cudnnBackendDescriptor_t pl = NULL;
            int64_t ws = 0;
            MO_TRY_GOTO(st, try_plan(d, k, cfg[i], &pl, &ws, &cc), mode_done);
            if (!pl) continue;
            kept_plan[nk] = pl;
            kept_cfg[nk] = cfg[i];
            cfg[i] = NULL; // held by the kept list now
            kept_eng[nk] = gi;
            kept_ws[nk] = ws;
            snprintf(kept_notes[nk], sizeof kept_notes[nk], "%s", notes[0] ? notes : "none");
            nk++;
            cc.kept++;
        }
    mode_done:
        for (int64_t i = 0; i < count; i++)
            if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
        if (heur) cudnnBackendDestroyDescriptor(heur);
        if (st != MO_OK) goto done;
    }
    if (nk == 0) {
        st = MO_FAIL(MO_ERR_UNSUPPORTED,
                     "conv %s (%s%s, N %d H %d W %d C %d K %d %dx%d stride %d pad %d): no deterministic cuDNN engine "
                     "fits the %zu-byte workspace (%d candidates: %d nondeterministic, %d TF32 not allowed, %d known "
                     "wrong for 16-bit beta 1, %d refused the graph, %d needed more workspace)",
                     kind_name(k->kind), mo_dtype_name((mo_dtype)k->dt), k->tf32 ? " tf32" : "", k->N, k->H, k->W,
                     k->C, k->K, k->R, k->S, k->stride, k->pad, k->ws_bytes, cc.seen, cc.nondet, cc.tf32, cc.bad16,
                     cc.unsupported, cc.too_big);
        goto done;
    }
    int pick = 0;
    if (force >= 0) {
        if (nk <= force) {
            st = MO_FAIL(MO_ERR_UNSUPPORTED, "conv %s (%s, N %d H %d W %d C %d K %d): rank %d asked, %d kept",
                         kind_name(k->kind), mo_dtype_name((mo_dtype)k->dt), k->N, k->H, k->W, k->C, k->K, force, nk);
            goto done;
        }
        pick = force;
    } else if (want) {
        if (nk > want->rank && kept_eng[want->rank] == want->engine) {
            pick = want->rank;
            d->table_used++;
        } else {
            d->table_missing++;
        }
    } else if (tune) {
        float t0 = -1, tb = -1;
        for (int i = 0; i < nk; i++) {
            float ms;
            MO_TRY_GOTO(st, time_plan(c, d, kept_plan[i], ptr, &ms), done);
            if (i == 0) t0 = ms;
            if (ms > 0 && (tb < 0 || ms < tb)) tb = ms, pick = i;
        }
        if (t0 > 0 && pick > 0 && (t0 - tb) / t0 >= CONV_TUNE_MIN_GAIN)
            fprintf(stderr,
                    "conv-tune: {\"%s\", %ld, {%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %u, %u, %u, %d, %zu}, "
                    "%ld, %d, %.4ff, %.4ff}, // %s %.1f%% faster (of %d kept)\n",
                    d->device, (long)cudnnGetVersion(), k->kind, k->dt, k->tf32, k->N, k->H, k->W, k->C, k->K, k->R,
                    k->S, k->stride, k->pad, k->al_x, k->al_w, k->al_y, k->beta_one, k->ws_bytes, kept_eng[pick],
                    pick, t0, tb, kind_name(k->kind), 100.0 * (t0 - tb) / t0, nk);
        else {
            fprintf(stderr, "conv-tune: // %s %s%s N %d H %d W %d C %d K %d %dx%d s%d p%d: the first stays (engine %ld "
                            "%.4f ms; best #%d of %d %.4f ms)\n",
                    kind_name(k->kind), mo_dtype_name((mo_dtype)k->dt), k->tf32 ? " tf32" : "", k->N, k->H, k->W, k->C,
                    k->K, k->R, k->S, k->stride, k->pad, kept_eng[0], t0, pick, nk, tb);
            pick = 0;
        }
    }
    if (getenv("MEMOPT_CONV_LOG")) // which engine each new plan runs, and why the others were dropped
        fprintf(stderr, "conv-plan: %s%s %s%s N %d H %d W %d C %d K %d %dx%d s%d p%d: engine %ld (notes %s), workspace "
                        "%lld B, kept #%d of %d; %d seen: %d nondeterministic, %d TF32 not allowed, %d known wrong "
                        "for 16-bit beta 1, %d refused, %d over the budget%s\n",
                kind_name(k->kind), k->beta_one ? " (beta 1)" : "", mo_dtype_name((mo_dtype)k->dt),
                k->tf32 ? " tf32" : "", k->N, k->H, k->W, k->C,
                k->K, k->R, k->S, k->stride, k->pad, kept_eng[pick], kept_notes[pick], (long long)kept_ws[pick], pick,
                nk, cc.seen, cc.nondet, cc.tf32, cc.bad16, cc.unsupported, cc.too_big, want ? " (stored choice)" : "");
    p->plan = kept_plan[pick];
    kept_plan[pick] = NULL;
    p->keep[p->nkeep++] = kept_cfg[pick]; // build_graph used 6 of DNN_KEEP
    kept_cfg[pick] = NULL;
    p->ws = kept_ws[pick];
    p->engine = kept_eng[pick];
    p->rank = pick;
done:
    for (int i = 0; i < nk; i++) {
        if (kept_plan[i]) cudnnBackendDestroyDescriptor(kept_plan[i]);
        if (kept_cfg[i]) cudnnBackendDestroyDescriptor(kept_cfg[i]);
    }
    return st;
}

// A key no engine runs (MO_ERR_UNSUPPORTED: its caller has another path) is cached too, as a slot without a
// plan, so that the heuristics are not asked again every step; it counts as neither hit nor miss.
static mo_status plan_get(mo_ctx *c, mo_dnn_cache *d, const mo_conv_key *k, void *ptr[3], dnn_plan **out) {
    for (int i = 0; i < d->n; i++)
        if (mo_conv_key_eq(&d->slot[i].key, k)) {
            if (!d->slot[i].plan)
                return MO_FAIL(MO_ERR_UNSUPPORTED,
                               "conv %s (%s%s, N %d H %d W %d C %d K %d %dx%d stride %d pad %d%s): no deterministic "
                               "cuDNN engine fits (found when its plan was first built)",
                               kind_name(k->kind), mo_dtype_name((mo_dtype)k->dt), k->tf32 ? " tf32" : "", k->N, k->H,
                               k->W, k->C, k->K, k->R, k->S, k->stride, k->pad, k->beta_one ? ", beta 1" : "");
            d->hits++;
            *out = &d->slot[i];
            return MO_OK;
        }
    dnn_plan fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.key = *k;
    mo_status st = plan_build(c, d, k, &fresh, ptr);
    if (st != MO_OK) plan_release(&fresh);
    if (st != MO_OK && st != MO_ERR_UNSUPPORTED) return st;
    if (st == MO_OK) d->misses++;
    dnn_plan *slot;
    if (d->n < DNN_SLOTS) {
        slot = &d->slot[d->n++];
    } else {
        // the evicted plan may still be in flight: wait for the stream before destroying it
        CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
        slot = &d->slot[d->victim];
        d->victim = (d->victim + 1) % DNN_SLOTS;
        plan_release(slot);
    }
    *slot = fresh;
    *out = slot;
    return st;
}

static mo_conv_key make_key(const mo_ctx *c, int kind, mo_dtype dt, const mo_conv_shape *s, const void *x,
                            const void *w, const void *y, int beta_one) {
    mo_conv_key k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.dt = (int)dt;
    k.tf32 = dt == MO_F32 && c->tf32;
    k.N = s->N, k.H = s->H, k.W = s->W, k.C = s->C, k.K = s->K, k.R = s->R, k.S = s->S;
    k.stride = s->stride, k.pad = s->pad;
    k.al_x = ptr_alignment(x), k.al_w = ptr_alignment(w), k.al_y = ptr_alignment(y);
    k.beta_one = beta_one;
    k.ws_bytes = c->gemm_ws_bytes;
    return k;
}

static mo_status conv_run(mo_ctx *c, int kind, mo_dtype dt, const mo_conv_shape *s, void *x, void *w, void *y,
                          int beta_one) {
    mo_dnn_cache *d;
    MO_TRY(dnn_get(c, &d));
    const mo_conv_key k = make_key(c, kind, dt, s, x, w, y, beta_one);
    void *ptr[3] = {x, w, y};
    dnn_plan *p = NULL;
    mo_status st = plan_get(c, d, &k, ptr, &p);
    // MEMOPT_MARK_LIB_WRITES (lib_writes.h): the tensor the pass overwrites (y, dx or dw), unless it adds
    if (st == MO_OK && c->mark_lib_writes && !beta_one) {
        const size_t e = mo_dtype_size(dt);
        const size_t n = kind == MO_CONV_FWD        ? (size_t)s->N * s->P * s->Q * s->K
                         : kind == MO_CONV_BWD_DATA ? (size_t)s->N * s->H * s->W * s->C
                                                    : (size_t)s->K * s->R * s->S * s->C;
        st = mo_mark_lib_write(c, ptr[kind == MO_CONV_FWD ? 2 : kind == MO_CONV_BWD_DATA ? 0 : 1], 0, n * e, 1);
    }
    if (st == MO_OK) st = run_plan(c, d, p->plan, ptr);
    if (st == MO_OK) c->conv_last_engine = p->engine;
    if (st != MO_OK && st != MO_ERR_UNSUPPORTED) { // say which convolution (the no-engine message already does)
        char why[1024];
        snprintf(why, sizeof why, "%s", mo_errmsg());
        return MO_FAIL(st, "conv %s (%s%s, N %d H %d W %d C %d K %d %dx%d stride %d pad %d%s): %s", kind_name(kind),
                       mo_dtype_name(dt), k.tf32 ? " tf32" : "", s->N, s->H, s->W, s->C, s->K, s->R, s->S, s->stride,
                       s->pad, p ? ", executing the plan" : ", building the plan", why);
    }
    return st;
}

// The library workspace with its first `used` bytes taken (a flipped filter, a chunk): the calls in between
// (a GEMM, a forward convolution) get the rest as their budget, and their plans' keys say so.
typedef struct ws_save { void *ws; size_t bytes; } ws_save;
static ws_save ws_skip(mo_ctx *c, size_t used) {
    const ws_save sv = {c->gemm_ws, c->gemm_ws_bytes};
    c->gemm_ws = (char *)sv.ws + used, c->gemm_ws_bytes = sv.bytes - used;
    return sv;
}
static void ws_restore(mo_ctx *c, ws_save sv) { c->gemm_ws = sv.ws, c->gemm_ws_bytes = sv.bytes; }

// The least a chunked path leaves of the workspace to what runs in the rest (a GEMM, a cuDNN forward).
#define KEEP_BYTES ((size_t)8 << 20)
static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

// The three GEMMs of a linear layer over M rows, on cuBLASLt without TF32 in the context's workspace
// (the GPT's, matmul_cuda.c; row-major seen column-major: each GEMM computes the transpose of its
// row-major result):
//   MO_CONV_FWD         y (M, K) = x (M, Ck) @ w (K, Ck)^T
//   MO_CONV_BWD_DATA    x (M, Ck) = y (M, K) @ w (K, Ck) + beta x   x: the input gradient (beta 1: added)
//   MO_CONV_BWD_FILTER  w (K, Ck) = y (M, K)^T @ x (M, Ck) + beta w   w: fp32 (beta 1: added in place)
// *done = 0: cuBLASLt has no algorithm for it (nothing ran).
static mo_status gemm_rows(mo_ctx *c, int kind, int M, int Ck, int K, void *x, void *w, void *y, float beta, int *done) {
    mo_lt_gemm g;
    if (kind == MO_CONV_FWD) // y^T (K, M) = op_T(w^T (Ck, K)) @ x^T (Ck, M)
        g = (mo_lt_gemm){CUBLAS_OP_T, CUBLAS_OP_N, K, M, Ck, w, Ck, x, Ck, y, K, CUDA_R_32F, CUDA_R_32F, 0.0f,
                         CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
    else if (kind == MO_CONV_BWD_DATA) // x^T (Ck, M) = w^T (Ck, K) @ y^T (K, M)
        g = (mo_lt_gemm){CUBLAS_OP_N, CUBLAS_OP_N, Ck, M, K, w, Ck, y, K, x, Ck, CUDA_R_32F, CUDA_R_32F, beta,
                         CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
    else // w^T (Ck, K) += x^T (Ck, M) @ op_T(y^T (K, M))
        g = (mo_lt_gemm){CUBLAS_OP_N, CUBLAS_OP_T, Ck, K, M, x, Ck, y, K, w, Ck, CUDA_R_32F, CUDA_R_32F, beta,
                         CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
    int no_algo = 0;
    MO_TRY(mo_lt_matmul(c, &g, &no_algo));
    *done = !no_algo;
    return MO_OK;
}

// gemm_rows with the workspace past its first `used` bytes (the chunk the GEMM reads or writes)
static mo_status gemm_rows_past(mo_ctx *c, size_t used, int kind, int M, int Ck, int K, void *x, void *w, void *y,
                                float beta, int *done) {
    const ws_save sv = ws_skip(c, used);
    const mo_status st = gemm_rows(c, kind, M, Ck, K, x, w, y, beta, done);
    ws_restore(c, sv);
    return st;
}

// fp32 1x1 stride-1 convolutions as GEMMs. In NHWC such a convolution is a linear layer over M = N H W
// rows: out (M, K) = in (M, C) @ w (K, C)^T, din (M, C) = dout (M, K) @ w, dw (K, C) += dout^T @ in:
// gemm_rows. cuDNN's fp32 NHWC engines ran these at about 9 TFLOP/s (ncu of a ResNet-50 fp32 step,
// session 11, H100: 1.40 ms for layer1's 64 -> 256 at batch 128, 13.2 GFLOP). MEMOPT_CONV_GEMM=0 keeps
// them on cuDNN. The weight gradient accumulates in place (beta 1), so the staging scratch goes unused.
// *done = 0: not such a convolution, or cuBLASLt has no algorithm (cuDNN then runs it).
static int conv_is_gemm(const mo_ctx *c, mo_dtype dt, const mo_conv_shape *s) {
    return c->conv_gemm != MO_CONV_GEMM_NONE && dt == MO_F32 && !c->tf32 && s->R == 1 && s->S == 1 &&
           s->stride == 1 && s->pad == 0;
}
// beta: the input gradient's (0 overwrites, 1 adds); the weight gradient always adds, the forward never
static mo_status conv_gemm(mo_ctx *c, int kind, const mo_conv_shape *s, void *x, void *w, void *y, float beta,
                           int *done) {
    if (kind != MO_CONV_BWD_DATA) beta = kind == MO_CONV_BWD_FILTER ? 1.0f : 0.0f;
    return gemm_rows(c, kind, s->N * s->H * s->W, s->C, s->K, x, w, y, beta, done);
}

// Every other fp32 convolution (3x3, the 7x7 stem, strided 1x1; without TF32) as GEMMs over its column
// matrix (im2col.c: a row per output position (n, p, q), a column per filter tap (r, s, c), the filter's
// own layout), a chunk at a time in the workspace ([chunk | the GEMM's budget, KEEP_BYTES at least]):
//   forward         col (rows, RSC) of `in` by im2col, then out's rows (rows, K) = col @ w (K, RSC)^T;
//   weight gradient col the same, then acc (K, RSC) (+)= dout's rows (rows, K)^T @ col, chunk after chunk
//                   in order into the staging scratch (the first beta 0), then dw += acc;
//   input gradient  dcol (n P Q, RSC) = dout's rows (n P Q, K) @ w of n whole images, then din's n images
//                   (n, H, W, C) = col2im(dcol), a gather (im2col.cu: each element sums its taps in a fixed
//                   order, no atomics), so any stride and padding; a chunk of whole images, so that each
//                   din element is written once.
// ncu of a ResNet-50 fp32 step (batch 128, session 11, H100) gave cuDNN's fp32 forward-form kernels of
// the 3x3 forwards and input gradients 96 of 205 ms at about 10 TFLOP/s and its 3x3 weight-gradient
// kernels about 25 ms; cuBLASLt's SGEMM ran the 1x1 convolutions at 32-43. The forward and weight
// gradient chunks are a multiple of COL_ROW_ALIGN rows, so that every chunk's rows of out and dout start
// 256-byte aligned whatever K (the full chunks share a GEMM plan); the input gradient needs one image's
// column matrix to fit, the others COL_ROW_ALIGN rows' (or all M); otherwise, and under
// MEMOPT_CONV_GEMM=1x1 or 0, the paths below (cuDNN, the input gradients as forward convolutions) run.
// Deterministic: the chunks are a function of the shape and the workspace size, the GEMMs and the gather
// are; a recompute gives the first run's bits.
#define COL_ROW_ALIGN 64

// MEMOPT_CONV_GEMM=all takes every pass of these; the default (auto) the passes where the GEMMs measured
// faster (gpu_resnet_ops timing at batch 128, session 12, H100, GEMMs against cuDNN in ms):
//   forward: all but the stem (taken as C % 4 != 0: im2col's one-channel path, rows of 147 floats): 3.25 vs 1.49;
//     layer1-4 3x3 1.95 / 1.55 / 1.39 / 1.09 vs 3.32 / 3.26 / 2.83 / 1.33;
//   weight gradient: the strided 1x1 only (0.83 vs 1.29): cuDNN's RxS ones win, the stem 5.61 vs 3.83,
//     layer1-3 3x3 3.33 / 2.67 / 1.36 vs 1.78 / 1.59 / 1.21 (layer4 0.88 vs 0.90, a tie kept on cuDNN);
//   input gradient: all (layer1 1.58 vs 3.35 as the flipped filter's forward, layer2 stride 2 1.29 vs 14.4).
// Under TF32 only the stem's weight gradient (C 3: cuDNN 9.14's deterministic TF32 engines for it took 3.49 ms
// on the H200 at batch 128, the 16-bit ones 0.3-0.6), as TF32 GEMMs split over row slabs (col_wgrad_slabs).
static int conv_is_col_gemm(const mo_ctx *c, int kind, mo_dtype dt, const mo_conv_shape *s) {
    if ((c->conv_gemm != MO_CONV_GEMM_ALL && c->conv_gemm != MO_CONV_GEMM_AUTO) || dt != MO_F32 ||
        (s->R == 1 && s->S == 1 && s->stride == 1 && s->pad == 0))
        return 0;
    if (c->tf32) return kind == MO_CONV_BWD_FILTER && s->C % 4 != 0 && c->conv_wgrad_split;
    if (c->conv_gemm == MO_CONV_GEMM_ALL || kind == MO_CONV_BWD_DATA) return 1;
    return kind == MO_CONV_FWD ? s->C % 4 == 0 : s->R == 1 && s->S == 1;
}

void conv_col_chunks(const mo_ctx *c, const mo_conv_shape *s, int *rows, int *images) {
    const size_t row = (size_t)s->R * s->S * s->C * sizeof(float), M = (size_t)s->N * s->P * s->Q;
    const size_t budget = c->gemm_ws_bytes > KEEP_BYTES ? c->gemm_ws_bytes - KEEP_BYTES : 0;
    size_t r = budget / row, n = budget / (row * s->P * s->Q);
    r = r >= M ? M : r / COL_ROW_ALIGN * COL_ROW_ALIGN;
    if (c->conv_col_rows > 0 && r > (size_t)c->conv_col_rows) r = (size_t)c->conv_col_rows;
    if (n > (size_t)s->N) n = (size_t)s->N;
    if (c->conv_dgrad_chunk > 0 && n > (size_t)c->conv_dgrad_chunk) n = (size_t)c->conv_dgrad_chunk;
    *rows = (int)r, *images = (int)n;
}

// The row chunks of x's column matrix, each built by im2col at the head of the workspace, then its GEMM
// with the rest of the workspace as budget:
//   MO_CONV_FWD         out's rows (rows, K) = col @ w (K, RSC)^T                     (b: w, y: out)
//   MO_CONV_BWD_FILTER  acc (K, RSC) (+)= dout's rows (rows, K)^T @ col, the first
//                       chunk beta 0, the rest beta 1, in order                        (b: acc, y: dout)
// *done = 0: not COL_ROW_ALIGN rows in the workspace, or no GEMM algorithm for a chunk (out or acc then
// partly written: the caller's fallback writes all of out, or leaves acc unused).
static mo_status col_rows(mo_ctx *c, int kind, const mo_conv_shape *s, const float *x, float *b, float *y,
                          int *done) {
    *done = 0;
    int rows, imgs;
    conv_col_chunks(c, s, &rows, &imgs);
    if (rows == 0) return MO_OK;
    const int M = s->N * s->P * s->Q, RSC = s->R * s->S * s->C;
    const size_t used = round256((size_t)rows * RSC * sizeof(float));
    float *col = (float *)c->gemm_ws; // (rows, R, S, C)
    for (int m0 = 0; m0 < M; m0 += rows) {
        const int mc = M - m0 < rows ? M - m0 : rows;
        int ok = 0;
        MO_TRY(conv_im2col_cuda(c, col, x, s, m0, mc));
        MO_TRY(gemm_rows_past(c, used, kind, mc, RSC, s->K, col, b, y + (size_t)m0 * s->K,
                              kind == MO_CONV_BWD_FILTER && m0 > 0 ? 1.0f : 0.0f, &ok));
        if (!ok) return MO_OK;
    }
    *done = 1;
    return MO_OK;
}

// The weight gradient's GEMMs split over row slabs. A chunk's one GEMM acc (K, RSC) += dout^T @ col has a
// small output (the stem's 64 x 147, two 128 x 128 tiles) and a long reduction (the chunk's rows), so
// cuBLASLt ran it on a few CTAs: the stem's at 2.8 TFLOP/s and layer1's 3x3 at 6.4 on an H100 (gpu_resnet_ops
// timing, session 12), and under TF32 cuDNN's deterministic engines for the stem's C 3 took 3.49 ms on the
// H200 (session 21's tuning run, the best of 3 kept; bf16's took 0.58). Here each chunk's rows go in slabs of L rows to one strided
// batched GEMM (cuBLAS), part_j (K, RSC) = slab j's dout^T @ its col, the chunk's last short slab one
// more, then acc (+)= part_0 + part_1 + ... in order (conv_sum_partials_cuda): deterministic, no atomics.
// Workspace: [col chunk | the partials | cuBLAS's workspace, KEEP_BYTES at least]. Taken when the output
// has fewer than 8 tiles (K and RSC in 128s), with enough slabs for about SPLIT_CTAS tiles in all; off
// under MEMOPT_CONV_WGRAD_SPLIT=0 (one GEMM a chunk, as before). TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) under
// ctx->tf32: conv_is_col_gemm takes the stem's weight gradient then. gpu_resnet_ops timing at batch 128,
// 32 MiB workspace, H100 (session 21), ms, slabs / one GEMM a chunk / cuDNN: the stem (2 tiles) 4.28 /
// 5.64 / 3.56, TF32 3.82 / - / 3.58; layer1 3x3 (5) 2.00 / 3.09 / 1.78; layer2 3x3 (9) 1.94 / 2.54 / 1.59;
// layer3 3x3 (36) 1.87 / 1.36 / 1.21; layer2's strided 1x1 (8, auto's GEMM) 0.85 / 0.82 / 1.28. At the
// ResNet's 256 MiB (fewer, longer chunks) the TF32 stem's slabs took 0.6 ms off the tf32 step (48.0 and
// 47.9 against 48.6 and 48.5 ms, two interleaved rounds, H100).
#define SPLIT_CTAS 256
int conv_wgrad_slabs(const mo_ctx *c, const mo_conv_shape *s) {
    if (!c->conv_wgrad_split) return 0;
    const int RSC = s->R * s->S * s->C, tiles = ((s->K + 127) / 128) * ((RSC + 127) / 128);
    return tiles >= 8 ? 0 : (SPLIT_CTAS + tiles - 1) / tiles;
}

// *done = 0: the workspace does not take COL_ROW_ALIGN rows beside the partials (col_rows then runs it)
static mo_status col_wgrad_slabs(mo_ctx *c, const mo_conv_shape *s, const float *x, float *acc, const float *dy,
                                 int nsl, int *done) {
    *done = 0;
    const int M = s->N * s->P * s->Q, RSC = s->R * s->S * s->C, K = s->K;
    const size_t out = (size_t)K * RSC, part_bytes = round256((size_t)(nsl + 1) * out * sizeof(float));
    if (c->gemm_ws_bytes < KEEP_BYTES + part_bytes) return MO_OK;
    size_t r = (c->gemm_ws_bytes - KEEP_BYTES - part_bytes) / ((size_t)RSC * sizeof(float));
    r = r >= (size_t)M ? (size_t)M : r / COL_ROW_ALIGN * COL_ROW_ALIGN;
    if (c->conv_col_rows > 0 && r > (size_t)c->conv_col_rows) r = (size_t)c->conv_col_rows;
    if (r == 0) return MO_OK;
    const int rows = (int)r;
    int L = (rows + nsl - 1) / nsl; // a chunk: at most nsl slabs of L rows, then one shorter
    L = (L + COL_ROW_ALIGN - 1) / COL_ROW_ALIGN * COL_ROW_ALIGN;
    const size_t used = round256((size_t)rows * RSC * sizeof(float));
    float *col = (float *)c->gemm_ws;                // (rows, R, S, C)
    float *part = (float *)((char *)c->gemm_ws + used); // (nsl + 1, K, R, S, C)
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    const float one = 1.0f, zero = 0.0f;
    const cublasComputeType_t ct = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    // as every other caller of this handle sets it; the compute type alone says TF32 or not
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    // cuBLAS's workspace is the context's (ctx.c): past the chunk and the partials for these calls
    CUBLAS_CHECK(cublasSetWorkspace(h, (char *)part + part_bytes, c->gemm_ws_bytes - used - part_bytes));
    // st keeps the first failure; what follows it is skipped, and cuBLAS gets its whole workspace back
#define CUBLAS_KEEP(call)                                                                                   \
    do {                                                                                                    \
        const cublasStatus_t s_ = st == MO_OK ? (call) : CUBLAS_STATUS_SUCCESS;                              \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                    \
            st = MO_FAIL(s_ == CUBLAS_STATUS_ALLOC_FAILED ? MO_ERR_OOM : MO_ERR_CUBLAS, "%s: %s (%s)", #call, \
                         cublasGetStatusString(s_), cublasGetStatusName(s_));                               \
    } while (0)
    mo_status st = MO_OK;
    for (int m0 = 0; m0 < M && st == MO_OK; m0 += rows) {
        const int mc = M - m0 < rows ? M - m0 : rows, nb = mc / L, rem = mc - nb * L;
        const float *d0 = dy + (size_t)m0 * K; // the chunk's dout rows (mc, K)
        st = conv_im2col_cuda(c, col, x, s, m0, mc);
        if (st == MO_OK && c->mark_lib_writes)
            st = mo_mark_lib_write(c, part, 0, (size_t)(nb + (rem > 0)) * out * sizeof(float), 1);
        // column-major, as gemm_rows' weight gradient: part_j^T (RSC, K) = col_j^T (RSC, L) @ dout_j (L, K)
        if (nb > 0)
            CUBLAS_KEEP(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, RSC, K, L, &one, col, CUDA_R_32F, RSC,
                                                   (long long)L * RSC, d0, CUDA_R_32F, K, (long long)L * K, &zero, part,
                                                   CUDA_R_32F, RSC, (long long)out, nb, ct, CUBLAS_GEMM_DEFAULT));
        if (rem > 0) // the short slab
            CUBLAS_KEEP(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, RSC, K, rem, &one,
                                                   col + (size_t)nb * L * RSC, CUDA_R_32F, RSC, 0,
                                                   d0 + (size_t)nb * L * K, CUDA_R_32F, K, 0, &zero,
                                                   part + (size_t)nb * out, CUDA_R_32F, RSC, 0, 1, ct,
                                                   CUBLAS_GEMM_DEFAULT));
        if (st == MO_OK) st = conv_sum_partials_cuda(c, acc, part, nb + (rem > 0), out, m0 > 0);
    }
    const mo_status fst = st; // the workspace back even after a failure, which stays the one reported
    st = MO_OK;
    CUBLAS_KEEP(cublasSetWorkspace(h, c->gemm_ws, c->gemm_ws_bytes));
#undef CUBLAS_KEEP
    if (fst != MO_OK) return fst;
    if (st == MO_OK) *done = 1;
    return st;
}

static mo_status col_forward(mo_ctx *c, const mo_conv_shape *s, float *out, const float *in, const float *w,
                             int *done) {
    return col_rows(c, MO_CONV_FWD, s, in, (float *)w, out, done);
}

// The chunks' sum goes into the staging scratch acc (K, R, S, C) first, then dw += acc: a chunk without a
// GEMM algorithm leaves dw untouched, so cuDNN can still run it all.
static mo_status col_backward_filter(mo_ctx *c, const mo_conv_shape *s, float *dw, const float *dout,
                                     const float *in, float *acc, int *done) {
    const int nsl = conv_wgrad_slabs(c, s);
    *done = 0;
    if (nsl > 0) MO_TRY(col_wgrad_slabs(c, s, in, acc, dout, nsl, done));
    // one fp32 GEMM a chunk otherwise; not under TF32 (cuDNN's engine then: the TF32 path is the slabs')
    if (!*done && !c->tf32) MO_TRY(col_rows(c, MO_CONV_BWD_FILTER, s, in, acc, (float *)dout, done));
    if (*done) MO_TRY(accumulate_f32_from_cuda(c, MO_F32, dw, acc, (size_t)s->K * s->R * s->S * s->C));
    return MO_OK;
}

static mo_status col_backward_data(mo_ctx *c, const mo_conv_shape *s, float *din, const float *dout, const float *w,
                                   int *done) {
    *done = 0;
    if (c->conv_dgrad_cudnn) return MO_OK; // MEMOPT_CONV_DGRAD=cudnn: the backward-data engine
    int rows, nc;
    conv_col_chunks(c, s, &rows, &nc);
    if (nc == 0) return MO_OK; // not one image's column matrix: the paths below
    const int PQ = s->P * s->Q, RSC = s->R * s->S * s->C;
    const size_t used = round256((size_t)nc * PQ * RSC * sizeof(float));
    float *dcol = (float *)c->gemm_ws; // (nc P Q, R, S, C)
    for (int n0 = 0; n0 < s->N; n0 += nc) {
        const int nb = s->N - n0 < nc ? s->N - n0 : nc;
        int ok = 0;
        MO_TRY(gemm_rows_past(c, used, MO_CONV_BWD_DATA, nb * PQ, RSC, s->K, dcol, (void *)w,
                              (void *)(dout + (size_t)n0 * PQ * s->K), 0.0f, &ok));
        if (!ok) return MO_OK; // no GEMM algorithm: another path runs it, all of din
        MO_TRY(conv_col2im_cuda(c, din + (size_t)n0 * s->H * s->W * s->C, dcol, s, nb));
    }
    *done = 1;
    return MO_OK;
}

// The fp32 (no TF32) convolutions with a filter wider than 1x1 that the implicit-GEMM kernel takes
// (conv_implicit.cu): ctx->conv_implicit under MEMOPT_CONV_GEMM=auto (=all: every pass through im2col), C % 8,
// K % 64 (not the stem's 3 channels), and (MO_CONV_IMPLICIT_AUTO) where it measured faster than im2col
// (mo_conv_implicit_prefers): 512 output tiles or more, or a column matrix over the workspace (im2col's
// chunks: short GEMMs). gpu_resnet_ops at batch 128 with the ResNet's 256 MiB (H100, session 23), forward /
// stride-1 input gradient in ms, implicit against im2col: layer1 (3136 tiles) 0.92 / 0.92 against 1.36 /
// 1.39, layer2 (784) 0.81 / 0.81 against 1.00 / 0.97, but layer3 (392; its 231 MB matrix in one chunk) 0.83
// / 0.84 against 0.81 / 0.75 and layer4 (196) 1.08 / 1.10 against 0.67 / 0.68, where the one long SGEMM
// wins; with 32 MiB (10 chunks of rows) layer3's forward 0.82 against 1.37.
static int conv_is_implicit(const mo_ctx *c, mo_dtype dt, const mo_conv_shape *s) {
    if (!c->conv_implicit || c->conv_gemm != MO_CONV_GEMM_AUTO || dt != MO_F32 || c->tf32 ||
        (s->R == 1 && s->S == 1) || !conv_implicit_takes(s))
        return 0;
    return c->conv_implicit == MO_CONV_IMPLICIT_ALWAYS || mo_conv_implicit_prefers(s, c->gemm_ws_bytes);
}

mo_status conv_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s) {
    int done = 0;
    if (conv_is_gemm(c, dt, s)) MO_TRY(conv_gemm(c, MO_CONV_FWD, s, (void *)in, (void *)w, out, 0.0f, &done));
    else if (conv_is_implicit(c, dt, s)) {
        MO_TRY(conv_implicit_forward_cuda(c, (float *)out, (const float *)in, (const float *)w, s, &done));
        c->conv_implicit_runs += done;
    }
    if (!done && conv_is_col_gemm(c, MO_CONV_FWD, dt, s)) {
        MO_TRY(col_forward(c, s, out, in, w, &done));
        c->conv_col_runs[MO_CONV_FWD] += done;
    }
    if (done) return MO_OK;
    return conv_run(c, MO_CONV_FWD, dt, s, (void *)in, (void *)w, out, 0);
}

// In fp32 without TF32 cuDNN 9.14 keeps one deterministic backward-data engine for ResNet-50's shapes on
// the H200, and it is slow: 66 ms for layer1's 3x3 convolution (batch 128) against 2.95 ms forward
// (gpu_resnet_ops timing at 41de208; a tuning run kept no other candidate). A stride-1 convolution's
// input gradient is itself a forward convolution: of dout (N, P, Q, K) with the filter flipped in R and S
// and transposed to (C, R, S, K), padding R-1-pad. So fp32 takes that path (MEMOPT_CONV_DGRAD=cudnn: the
// backward-data engine): the flipped filter sits at the head of the library workspace and the forward
// plan gets the rest as its budget (its key says so), so no byte is allocated and the dry peak holds.
// The forward convolution t (fp32; a GEMM where conv_gemm takes it) with the library workspace past its
// first `used` bytes (the flipped filter, a chunk) as its budget: the plan's key carries that budget, and
// the context's workspace is the whole one again on return.
static mo_status forward_past(mo_ctx *c, size_t used, const mo_conv_shape *t, const void *x, const void *w, void *y) {
    const ws_save sv = ws_skip(c, used);
    const mo_status st = conv_forward_cuda(c, MO_F32, y, x, w, t);
    ws_restore(c, sv);
    return st;
}

static mo_status dgrad_as_forward(mo_ctx *c, void *din, const void *dout, const void *w, const mo_conv_shape *s,
                                  int *done) {
    *done = 0;
    mo_conv_shape t;
    if (c->conv_dgrad_cudnn || !mo_conv_dgrad_forward_shape(s, &t)) return MO_OK;
    const size_t wb = (size_t)s->K * s->R * s->S * s->C * sizeof(float), off = (wb + 255) & ~(size_t)255;
    if (off + KEEP_BYTES > c->gemm_ws_bytes) return MO_OK; // keep 8 MiB at least for the forward's engine
    float *wf = (float *)c->gemm_ws;
    MO_TRY(conv_flip_filter_cuda(c, wf, (const float *)w, s->K, s->R, s->S, s->C));
    const mo_status st = forward_past(c, off, &t, dout, wf, din);
    if (st == MO_ERR_UNSUPPORTED) return MO_OK; // no forward engine fits the rest: the backward-data engine runs it
    *done = st == MO_OK;
    return st;
}

// Strided convolutions (stride st > 1) in fp32 fare worse on the backward-data engine: ncu of one
// ResNet-50 fp32 step (batch 128, session 11, H100) gave its dgrad2d_grouped_direct kernels 420 of 653 ms,
// six launches: the three 3x3 stride-2 and the three 1x1 stride-2 convolutions. Their input gradients are
// forward convolutions too, a chunk of images at a time in the workspace ([flipped filter | chunk |
// the forward's budget, 8 MiB at least]), so nothing is allocated:
//   1x1: the compact gradient (n, P, Q, C) = dout's 1x1 convolution with the transposed filter, then
//        scattered to every st-th row and column of din, zeros elsewhere;
//   RxR: dout dilated to z (n, Hz, Wz, K), zeros between its rows and columns (Hz = H - R + 1 + 2 pad), then
//        the flipped filter's stride-1 forward with padding R-1-pad gives din (n, H, W, C): st^2 times
//        the FLOPs, most of them on zeros, still far below the engine's time.
static mo_status dgrad_strided_as_forward(mo_ctx *c, void *din, const void *dout, const void *w,
                                          const mo_conv_shape *s, int *done) {
    *done = 0;
    if (c->conv_dgrad_cudnn || s->stride < 2 || s->R != s->S || s->pad > s->R - 1) return MO_OK;
    const int st = s->stride, R = s->R, N = s->N;
    const int Hz = s->H - R + 1 + 2 * s->pad, Wz = s->W - R + 1 + 2 * s->pad;
    const size_t wb = (size_t)s->K * R * R * s->C * sizeof(float), off = (wb + 255) & ~(size_t)255;
    const size_t img = (R == 1 ? (size_t)s->P * s->Q * s->C : (size_t)Hz * Wz * s->K) * sizeof(float);
    if (off + KEEP_BYTES + img > c->gemm_ws_bytes) return MO_OK; // not one image: the backward-data engine runs it
    int nc = (int)((c->gemm_ws_bytes - off - KEEP_BYTES) / img);
    if (nc > N) nc = N;
    if (c->conv_dgrad_chunk > 0 && nc > c->conv_dgrad_chunk) nc = c->conv_dgrad_chunk;
    const size_t cb = ((size_t)nc * img + 255) & ~(size_t)255;
    float *wf = (float *)c->gemm_ws, *chunk = (float *)((char *)c->gemm_ws + off);
    MO_TRY(conv_flip_filter_cuda(c, wf, (const float *)w, s->K, R, R, s->C));
    mo_status rs = MO_OK;
    for (int n0 = 0; n0 < N && rs == MO_OK; n0 += nc) {
        const int nb = N - n0 < nc ? N - n0 : nc;
        const float *dy = (const float *)dout + (size_t)n0 * s->P * s->Q * s->K;
        float *dx = (float *)din + (size_t)n0 * s->H * s->W * s->C;
        mo_conv_shape t;
        if (R == 1) { // the compact gradient into the chunk (a GEMM unless MEMOPT_CONV_GEMM=0), then scattered
            mo_conv_shape_init(&t, nb, s->P, s->Q, s->K, s->C, 1, 1, 1, 0);
            rs = forward_past(c, off + cb, &t, dy, wf, chunk);
            if (rs == MO_OK) rs = conv_scatter_cuda(c, dx, chunk, nb, s->H, s->W, s->C, s->P, s->Q, st);
        } else { // dout dilated into the chunk; the forward's output is (nb, H, W, C) since Hz = H - R + 1 + 2 pad
            mo_conv_shape_init(&t, nb, Hz, Wz, s->K, s->C, R, R, 1, R - 1 - s->pad);
            rs = conv_dilate_cuda(c, chunk, dy, nb, s->P, s->Q, s->K, Hz, Wz, st);
            if (rs == MO_OK) rs = forward_past(c, off + cb, &t, chunk, wf, dx);
        }
    }
    if (rs == MO_ERR_UNSUPPORTED) return MO_OK; // no forward engine fits: the engine runs it (all of din)
    *done = rs == MO_OK;
    return rs;
}

mo_status conv_backward_data_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                  const mo_conv_shape *s) {
    if (conv_is_gemm(c, dt, s) && !c->conv_dgrad_cudnn) { // MEMOPT_CONV_DGRAD=cudnn: every fp32 one on the engine
        int done = 0;
        MO_TRY(conv_gemm(c, MO_CONV_BWD_DATA, s, din, (void *)w, (void *)dout, 0.0f, &done));
        if (done) return MO_OK;
    }
    if (dt == MO_F32 && !c->tf32) { // the GEMMs over the column matrix, else the flipped filter's forward
        int done = 0;
        // stride 1: the flipped filter's forward on the implicit-GEMM kernel first (dgrad_as_forward)
        mo_conv_shape t;
        if (mo_conv_dgrad_forward_shape(s, &t) && conv_is_implicit(c, dt, &t))
            MO_TRY(dgrad_as_forward(c, din, dout, w, s, &done));
        if (done) return MO_OK;
        if (conv_is_col_gemm(c, MO_CONV_BWD_DATA, dt, s)) {
            MO_TRY(col_backward_data(c, s, din, dout, w, &done));
            c->conv_col_runs[MO_CONV_BWD_DATA] += done;
        }
        if (done) return MO_OK;
        MO_TRY(dgrad_as_forward(c, din, dout, w, s, &done));
        if (done) return MO_OK;
        MO_TRY(dgrad_strided_as_forward(c, din, dout, w, s, &done));
        if (done) return MO_OK;
    }
    return conv_run(c, MO_CONV_BWD_DATA, dt, s, din, (void *)w, (void *)dout, 0);
}

// din += the input gradient (conv.h's mo_conv_backward_data_add: the ResNet's shortcut gradient added where
// the input gradient is written, instead of a pass of its own that reads both and writes the sum):
//   - the fp32 1x1 stride-1 GEMM (conv_is_gemm): beta 1, one rounding;
//   - cuDNN's backward-data engine on fp32 data (TF32; fp32 with MEMOPT_CONV_DGRAD=cudnn): beta 1 (its own
//     plan key; the stored choice of the beta-0 key applies where the same engine is kept at its rank): the
//     epilogue's fp32 acc + din, the bits of a beta-0 pass and a residual add (the H100's ResNet-50 tf32 step
//     gave the same loss bits either way, session 22);
//   - 16 bits (ctx->conv_add16_beta1, the default): cuDNN's beta 1 too, the epilogue's fp32 acc + din
//     rounded once, but never on engine 78 (BETA1_16_BAD: session 22's ResNet-50 batch 128 steps trained
//     wrongly through it, fp16 loss 2.91 after 13 steps against 0.16; gpu_conv_add_n128 checks every kept
//     engine at the step's eight shapes);
//   - otherwise (the other fp32 paths, tests' conv_add16_beta1 0, or no beta-1 engine that fits): the
//     gradient of a chunk of images into the head of the workspace (beta 0, rounded to dt), added to din's
//     images (rounded again), the chunk at most half the workspace so that the paths above keep the rest as
//     their budget. The gradient of one image must fit; otherwise MO_ERR_UNSUPPORTED, as a convolution no
//     engine runs.
mo_status conv_dgrad_add_chunked_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                      const mo_conv_shape *s, int max_images) {
    const size_t e = mo_dtype_size(dt), img = (size_t)s->H * s->W * s->C * e;
    int nc = (int)(c->gemm_ws_bytes / 2 / img);
    if (nc > s->N) nc = s->N;
    if (max_images > 0 && nc > max_images) nc = max_images;
    if (nc < 1)
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "conv backward data add (N %d H %d W %d C %d K %d %dx%d stride %d): one image's input "
                       "gradient (%zu B) is over half the %zu-byte workspace",
                       s->N, s->H, s->W, s->C, s->K, s->R, s->S, s->stride, img, c->gemm_ws_bytes);
    void *chunk = c->gemm_ws;
    c->conv_dgrad_add_chunked++;
    for (int n0 = 0; n0 < s->N; n0 += nc) {
        const int nb = s->N - n0 < nc ? s->N - n0 : nc;
        mo_conv_shape t = *s;
        t.N = nb;
        const ws_save sv = ws_skip(c, round256((size_t)nc * img));
        const void *dy = (const char *)dout + (size_t)n0 * s->P * s->Q * s->K * e;
        const mo_status st = conv_backward_data_cuda(c, dt, chunk, dy, w, &t);
        ws_restore(c, sv);
        MO_TRY(st);
        void *dx = (char *)din + (size_t)n0 * img;
        const size_t n = (size_t)nb * s->H * s->W * s->C;
        MO_TRY(dt == MO_F32 ? residual_forward_cuda(c, (float *)dx, (const float *)dx, (const float *)chunk, n)
                            : residual_forward_mixed_cuda(c, dt, dx, dx, chunk, n));
    }
    return MO_OK;
}

mo_status conv_backward_data_add_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                      const mo_conv_shape *s) {
    if (conv_is_gemm(c, dt, s) && !c->conv_dgrad_cudnn) {
        int done = 0;
        MO_TRY(conv_gemm(c, MO_CONV_BWD_DATA, s, din, (void *)w, (void *)dout, 1.0f, &done));
        if (done) return MO_OK;
    }
    if (dt == MO_F32 ? c->tf32 || c->conv_dgrad_cudnn : c->conv_add16_beta1) {
        const mo_status st = conv_run(c, MO_CONV_BWD_DATA, dt, s, din, (void *)w, (void *)dout, 1);
        if (st != MO_ERR_UNSUPPORTED) return st;
        mo_clear_error(); // no beta-1 engine fits: the chunks below
    }
    return conv_dgrad_add_chunked_cuda(c, dt, din, dout, w, s, 0);
}

// On cuDNN the gradient into scratch (dt, beta 0), then dw += float(scratch): the same path in every
// precision (an in-place beta 1 for fp32 would save the pass but not every deterministic engine is known to
// take it). The 1x1 stride-1 GEMM adds to dw in place (beta 1, one GEMM); the im2col GEMMs sum their
// chunks in the scratch (fp32 here) and add that.
mo_status conv_backward_filter_cuda(mo_ctx *c, mo_dtype dt, float *dw, const void *dout, const void *in,
                                    const mo_conv_shape *s, void *scratch) {
    int done = 0;
    if (conv_is_gemm(c, dt, s)) MO_TRY(conv_gemm(c, MO_CONV_BWD_FILTER, s, (void *)in, dw, (void *)dout, 1.0f, &done));
    else if (conv_is_col_gemm(c, MO_CONV_BWD_FILTER, dt, s)) {
        MO_TRY(col_backward_filter(c, s, dw, dout, in, (float *)scratch, &done));
        c->conv_col_runs[MO_CONV_BWD_FILTER] += done;
    }
    if (done) return MO_OK;
    MO_TRY(conv_run(c, MO_CONV_BWD_FILTER, dt, s, (void *)in, scratch, (void *)dout, 0));
    return accumulate_f32_from_cuda(c, dt, dw, scratch, (size_t)s->K * s->R * s->S * s->C);
}
