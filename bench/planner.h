// Capacity planning with no GPU: `memopt plan`.
//
// Memory is never modelled here. Every figure comes from running the configuration through the run
// engine on the dry backend (mo_run_execute, steps 1 after warm-up 1): the model's real schedule of
// allocations through the real allocator over a fake address space, so a predicted peak is the peak a
// GPU run of the same configuration reports, to the byte (tests/test_plan.c holds it to that).
//
// Time is modelled: a roofline of the step's ops, the cost trace of its dry run (kernels/cost.h; each
// op's FLOPs at the catalog's dense matrix rate
// for the precision, its bytes at the memory bandwidth, whichever is slower), divided by efficiencies
// that are fitted to the measured rows in results/*.csv when there are any for the device, and
// otherwise the stated defaults (MO_PLAN_EFF_GEMM, MO_PLAN_EFF_MEM). --offload adds what its code
// records in the same trace: copies between device and host memory at the catalog's host link
// (host_gbs), the CPU's work at MO_PLAN_HOST_GBS, and the copy stream's copies beside the compute they
// can hide behind (mo_plan_offload_exposed_ms); none of it is fitted.
//
// The three parts live in three files: planner_catalog.c (the GPU catalog bench/gpus.txt),
// planner.c (dry runs: peaks, fits, largest batch, the strategy table), planner_roofline.c (the time
// model and its calibration).
#ifndef MEMOPT_BENCH_PLANNER_H
#define MEMOPT_BENCH_PLANNER_H

#include <stddef.h>
#include <stdint.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// What a device holds that the suite's allocator never sees: the CUDA context, the cuBLAS/cuBLASLt
// and cuDNN handles and their module images. 512 MiB is what the CUDA 12-13 context with lazy module
// loading plus those handles take on Hopper (the engine's cross-check line prints the measured figure
// for a real run). The headroom is the device's total less this.
#define MO_PLAN_CONTEXT_RESERVE ((uint64_t)512 << 20)
// Default efficiencies (achieved / datasheet peak) when no measured rows exist for the device:
// cuBLAS GEMMs of training shapes reach about 0.6 of the dense peak, elementwise and attention
// kernels about 0.5 of the memory bandwidth.
#define MO_PLAN_EFF_GEMM 0.6
#define MO_PLAN_EFF_MEM 0.5
// The suite's own 16-bit fused attention (kernels/attention_fused_mixed.cu, mma.sync) reaches this share
// of the GPU's dense 16-bit tensor peak, in the roofline's FLOPs of the causal half (forward 2, backward
// 8 products with the recompute): measured on the H200 (tests/gpu_attention_fused_mixed.c at
// 5951f35bc59c, B 8, T 1024, C 768, NH 12: forward 0.148 ms + backward 0.360 ms per layer for 64.4
// GFLOP = 127 TFLOP/s of 989.4); the kernel was not changed since. Its time is taken at this rate and
// not fitted (those kernels are far below the cuBLAS rate the GEMM efficiency is fitted to); on other
// GPUs the same share of their peak is an assumption.
#define MO_PLAN_EFF_FLASH16 0.128
// cuDNN's fused SDPA (MEMOPT_ATTN_IMPL=cudnn; the cost trace's ATTENTION_LIB ops) reaches this share of
// the same peak, in the roofline's FLOPs of the causal half (forward 2, backward 5 products): `--profile`
// of the GPT-2 124M bf16 B 8 T 1024 step on cuDNN's attention on the H100 (session 25, 2a2b833:
// results/h100-session25.log), attention 2.61 ms a step for 12 layers x 45.1 GFLOP = 207 TFLOP/s of
// 989.4. Taken as kern_s like the own kernels' rate, not fitted.
#define MO_PLAN_EFF_SDPA16 0.21
// The floor of any kernel: launch latency on a busy stream (a kernel of no work still costs this).
#define MO_PLAN_KERNEL_FLOOR_S 2.5e-6
// The host's rate for the CPU's part of --offload optimizer (adamw_cpu and the 16-bit cast, plain C over
// T threads, MEMOPT_OFFLOAD_THREADS: 8 by default), in GB/s of host memory traffic (the trace's
// MO_COST_HOST bytes: 28 per parameter for AdamW, 34 with the 16-bit cast): MO_PLAN_HOST_GBS a thread,
// up to MO_PLAN_HOST_GBS_MAX for all (mo_plan_host_gbs). Fitted, not a datasheet figure: GPT-2 124M's
// offloaded rows on the H100 machine's host (results/h100-offload-update-9c8d5df.csv, session 11), less
// the plan's device step and copies, leave the host 5.3-6.2 GB/s on one thread (fp32 and bf16) and
// 29-49 GB/s on 8 (bf16 and fp32); 34 puts both 8-thread precisions within 11%. Another host's CPU and
// memory differ: the plan prints the rate it took.
#define MO_PLAN_HOST_GBS 5.5
#define MO_PLAN_HOST_GBS_MAX 34.0
// The host rate for T threads (T < 1: 1)
double mo_plan_host_gbs(int threads);
// The thread count a plan times the offloaded update with: MEMOPT_OFFLOAD_THREADS, else the default
// (an invalid value: the default; the run itself refuses it)
int mo_plan_host_threads(void);
// The thread count an offload optimizer row's update ran with: its knobs' MEMOPT_OFFLOAD_THREADS, else 1
// (rows made before session 12, when one thread was the default, carry none; later rows always do)
int mo_plan_row_host_threads(const char *knobs);
// The workspace budget (MiB) a row ran at: its MEMOPT_WORKSPACE_MIB knob, else its model's default, or the
// suite's 32 MiB when its workspace peak is below that default (a row from before the model's was raised).
long mo_plan_row_workspace_mib(const mo_csv_row *r);
// 1 when that is not its model's default budget: the roofline has no term for what a larger budget buys,
// so such a row neither calibrates the time model nor is timed by it.
int mo_plan_row_other_workspace(const mo_csv_row *r);

// ---------------------------------------------------------------- the GPU catalog

// Fields a catalog entry can mark unsure ('?' after the value).
enum {
    MO_GPU_F_MEMORY = 1u << 0, MO_GPU_F_VISIBLE = 1u << 1, MO_GPU_F_FP32 = 1u << 2, MO_GPU_F_TF32 = 1u << 3,
    MO_GPU_F_FP16 = 1u << 4, MO_GPU_F_BF16 = 1u << 5, MO_GPU_F_MEM_BW = 1u << 6, MO_GPU_F_LINK = 1u << 7,
    MO_GPU_F_HOST = 1u << 8,
};

typedef struct mo_gpu_spec {
    char key[32];            // "h100-sxm": what --gpu takes
    char aliases[128];       // other names --gpu takes, comma-separated ("h100")
    char name[96];           // "NVIDIA H100 SXM5 80GB"
    char match[160];         // ';'-separated substrings of the CUDA device name that mean this GPU
    uint64_t memory_bytes;   // the datasheet's capacity
    uint64_t visible_bytes;  // the total CUDA reports (cudaMemGetInfo, nvidia-smi); 0 when unknown
    double fp32, tf32, fp16, bf16; // dense TFLOP/s (fp32: CUDA cores; others: tensor cores); 0: none
    double mem_bw_gbs;       // memory bandwidth, GB/s (10^9 B/s)
    double link_gbs;         // GPU-to-GPU interconnect, GB/s as the vendor states it
    double host_gbs;         // host link (PCIe), GB/s per direction (the vendor's both-directions figure halved); 0: unknown
    char link[96];           // what the interconnect is ("NVLink 4, bidirectional")
    unsigned unsure;         // MO_GPU_F_* bits of figures marked '?'
    int line;                // where the entry starts in the catalog file
} mo_gpu_spec;

typedef struct mo_gpu_catalog {
    mo_gpu_spec *gpus;
    size_t n;
    char path[MO_PATH_MAX];
} mo_gpu_catalog;

// Parses catalog text (the format is documented at the top of bench/gpus.txt). `where` names the
// source in messages. A bad entry is MO_ERR_INVALID "WHERE:LINE: what is wrong".
mo_status mo_gpu_catalog_parse(const char *text, const char *where, mo_gpu_catalog *out);
// Loads a catalog file; path NULL or "" searches: $MEMOPT_GPU_CATALOG, ./bench/gpus.txt,
// <memopt binary>/../bench/gpus.txt, and the source tree this file was compiled from.
mo_status mo_gpu_catalog_load(const char *path, mo_gpu_catalog *out);
void mo_gpu_catalog_free(mo_gpu_catalog *c);
// By key or alias, case-insensitive; NULL when unknown.
const mo_gpu_spec *mo_gpu_catalog_find(const mo_gpu_catalog *c, const char *name);
// The entry whose match strings occur in a CUDA device name ("NVIDIA H200"); NULL when none.
const mo_gpu_spec *mo_gpu_catalog_match_device(const mo_gpu_catalog *c, const char *device_name);
// "h200-sxm, h100-sxm, ..." into buf: the names --gpu accepts.
const char *mo_gpu_catalog_names(const mo_gpu_catalog *c, char *buf, size_t n);
// The dense rate GEMMs of this precision run at (TFLOP/s): fp32 on CUDA cores, tf32/fp16/bf16 on
// tensor cores; a GPU without the format (tf32 before Ampere) falls back to what cuBLAS then does.
double mo_gpu_gemm_tflops(const mo_gpu_spec *g, mo_precision p, const char **note);
// The device total the planner uses: visible_bytes, or the datasheet figure when that is unknown.
uint64_t mo_gpu_total_bytes(const mo_gpu_spec *g);

// ---------------------------------------------------------------- memory, from the dry backend

// A dry-run environment made once (mo_run_env_init asks git for the revision: not per run).
mo_status mo_plan_env_init(mo_run_env *env);

// The exact peaks of one configuration: rc run on the dry backend, steps 1 after warm-up 1, on a
// device of rc->device_mem_bytes (fractional caps resolve against it). Returns MO_OK whenever a row
// was produced; row->status says how the run went (ok, oom under rc's own cap, invalid, error).
// Why steps 1 / warm-up 1 gives a real run's timed-step peak: see bench/planner.c.
mo_status mo_plan_predict(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row);
// The same, keeping the cost trace of the timed step in *trace (unsplit runs; see mo_run_execute_traced).
mo_status mo_plan_predict_traced(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, mo_cost_trace *trace);

// Fits or not in `headroom` bytes: the dry run again under a cap of the headroom (min with rc's own
// cap), the cap being counted against reserved bytes exactly as device memory is. A run that
// completes fits, also when the allocator had to flush its cache and retry (retries says so).
typedef struct mo_plan_fit {
    mo_csv_row row;     // the uncapped prediction (rc as given)
    int plannable;      // the engine builds this configuration (else row.status is error/invalid)
    int fits;
    int retries;        // cache flushes the capped run needed to fit (0: it fits without pressure)
    int runs;           // dry runs made
} mo_plan_fit;
mo_status mo_plan_fit_check(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, mo_plan_fit *out);
// The same, keeping the uncapped run's cost trace in *trace (as mo_plan_predict_traced).
mo_status mo_plan_fit_check_traced(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, mo_plan_fit *out,
                                   mo_cost_trace *trace);

// The largest global batch (a multiple of rc->accum, up to MO_MAX_BATCH) that fits in headroom, by
// doubling from rc->batch and then bisecting. *best is 0 when not even batch = accum fits; *at_limit
// is 1 when MO_MAX_BATCH itself fits. *runs counts the dry runs.
mo_status mo_plan_max_batch(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, int *best,
                            int *at_limit, int *runs);

// ---------------------------------------------------------------- time, from a roofline

typedef struct mo_roofline {
    double gemm_flops, mem_bytes;  // totals of the step (GEMM class flops; bytes of the memory class)
    double flops;                  // every op's flops (recompute included)
    double gemm_s, mem_s;          // floors at the datasheet peaks: GEMM ops, memory-bound ops
    int kernels;                   // ops counted
    // Split runs (--tp/--pp above 1), per rank on its own GPU of the plan: compute divided by tp*pp,
    // times the 1F1B bubble (accum + pp - 1) / accum; comm_s the rank's all-reduce / send volume at the
    // GPU's per-direction link rate (not scaled by any fitted efficiency). 0 for unsplit runs.
    double comm_s;
    double bubble;                 // the factor applied (1 unsplit)
    double kern_s;                 // the 16-bit fused attention kernels at MO_PLAN_EFF_FLASH16, cuDNN's at MO_PLAN_EFF_SDPA16 (not fitted)
    // --offload, from the trace's MO_COST_HOST_COPY, MO_COST_HOST and copy-stream ops (not fitted; NAN
    // without the GPU's host rate): host_copy_s the synchronous copies between device and host memory at
    // the catalog's host link rate per direction and host_s the CPU's work at MO_PLAN_HOST_GBS, both whole
    // on the step (the update waits for them: no overlap); copy_s the copy stream's copies at the host
    // link rate, by direction in copy_dir_s (0 out to the host, 1 back), each beside the compute the trace
    // has between the copy and its join (window_s[dir]: GEMM, memory-bound and fixed-rate floors), which
    // it hides behind as far as that lasts (mo_plan_offload_exposed_ms).
    double host_copy_s, host_s, copy_s;
    double host_copy_bytes, host_work_bytes, copy_bytes;
    double copy_dir_s[2], window_s[2][3];
} mo_roofline;
// The host work of r (its host_work_bytes) at T threads, in seconds, before the calibration's scale
double mo_plan_host_s(const mo_roofline *r, int threads);

// The step's ops (forward, backward, recompute, optimizer: every op the step dispatches) of rc on GPU g. GEMMs (the linear layers,
// the materialized attention's batched GEMMs) run at mo_gpu_gemm_tflops; everything else
// (LayerNorm, GELU, residual, softmax, permutes, cross-entropy, embedding, AdamW, the fp32 fused
// attention kernel, which is CUDA-core code) at the memory bandwidth, or at the fp32 rate where it
// computes more than it moves; the 16-bit fused attention at MO_PLAN_EFF_FLASH16 of the tensor peak,
// cuDNN's SDPA at MO_PLAN_EFF_SDPA16 (kern_s). Each op costs at least MO_PLAN_KERNEL_FLOOR_S.
// The ops are the cost trace (kernels/cost.h) of rc's step on the dry backend (mo_plan_trace), so
// the roofline follows whatever the model and the dispatchers run, recompute and fusions included.
void mo_roofline_step(const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out);
// mo_roofline_step of a results row's configuration rc under the knobs it ran with (its knobs cell,
// kernels/knobs.h: the engine choices change the trace), not this process's; the environment is put
// back after
void mo_plan_row_roofline(const mo_csv_row *row, const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out);
// The same from a trace already made (of rc's unsplit step; rc's tp and pp apply the split model).
void mo_roofline_from_trace(const mo_cost_trace *t, const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out);
// Data parallelism (rc->dp above 1, any ZeRO level), per rank on its own GPU, first order and with
// no overlap of communication and compute: the unsplit step of one rank's batch (batch/dp, the same
// accum; the optimizer counted whole, though levels >= 1 update a 1/dp chunk), plus comm_s, the
// rank's communicated bytes per step at half the catalog's stated link rate (the vendor states both
// directions together). comm_bytes_rank is what the dry run's communicator counted for the busiest
// rank (mo_csv_row.comm_bytes_rank: ring volumes, 2(D-1)/D of the gradients for level 0's all-reduce,
// (D-1)/D each for the reduce-scatters and all-gathers of levels 1-3, level 3's per-block gathers
// included); a negative value leaves the time unknown (gemm_s etc. 0, comm_s NAN).
void mo_roofline_dp(const mo_run_config *rc, const mo_gpu_spec *g, double comm_bytes_rank, mo_roofline *out);
// The trace of rc's step: the dry backend, unsplit, uncapped, one step.
mo_status mo_plan_trace(const mo_run_config *rc, mo_cost_trace *t);


// Efficiencies per precision for one GPU, fitted to measured rows.
typedef struct mo_plan_calib {
    double eff_gemm[4], eff_mem[4]; // by mo_precision
    int rows[4];                    // measured rows behind each precision's fit (0: defaults)
    char how[4][96];                // "defaults", "2-parameter fit to 6 rows", "1 scale from 2 rows"
    // --offload optimizer's host work: its rate is mo_plan_host_gbs(T) x eff_host (1: no row). The host
    // is not the GPU: two H100 machines' hosts ran the same offloaded step 1.6x apart (sessions 11, 12),
    // so the rows of the GPU's kind scale it like the device efficiencies (mo_plan_calib_fit)
    double eff_host;
    int host_rows;
    char host_how[96];
} mo_plan_calib;
void mo_plan_calib_defaults(mo_plan_calib *c);
// Fits c from rows measured on g (backend cuda, status ok, a step time, the device matching g);
// skip is a row index to leave out (leave-one-out validation), or -1.
void mo_plan_calib_fit(mo_plan_calib *c, const mo_gpu_spec *g, const mo_csv_row *rows, size_t n, long skip);
// Loads every results/*.csv in dir (unreadable files are noted on `notes`, not fatal) and fits.
mo_status mo_plan_calib_load(mo_plan_calib *c, const mo_gpu_spec *g, const char *dir, FILE *notes);
// The same with one file left out (except: its path, compared by device and inode; NULL: none), so that
// plan --validate of a committed file never calibrates on that file's own rows.
mo_status mo_plan_calib_load_except(mo_plan_calib *c, const mo_gpu_spec *g, const char *dir, const char *except,
                                    FILE *notes);
// The predicted step time (ms) of a roofline under a calibration: the device floors over their fitted
// efficiencies, plus communication, the fixed-rate kernels, and --offload's host copies, host work and
// exposed copy-stream time.
double mo_plan_step_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p);
// --offload activations, first order: the copy stream's time that the compute does not hide, in ms. A
// copy runs beside the compute between its issue and its join (a copy out: its block's forward; back:
// the next segment's recompute and backward), so the compute waits max(0, copy - that window) at the
// join; per direction the sums are taken, max(0, copies - windows) (exact when the blocks are alike, as
// GPT's and the MLP's are; the ResNet's differ, so its slack in one block can hide another's wait).
// The link is taken at its stated rate and the copies never queue behind one another (each is joined
// before the next of its direction starts); offload_stall_ms of a GPU row measures the real wait.
double mo_plan_offload_exposed_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p);
// The compute (ms, under a calibration) beside the copies of one direction (0 out, 1 back).
double mo_plan_copy_window_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p, int dir);
// One traced op's predicted time (ms) on g under a calibration (--profile's prediction per class); a
// copy-stream op or join counts 0 (the copies run beside the compute stream; their exposed part is not
// any one op's).
double mo_plan_op_ms(const mo_cost_op *o, const mo_gpu_spec *g, mo_precision p, const mo_plan_calib *c);
// --profile: the predicted time (ms per step) of a traced run of `steps` steps on the GPU named
// device_name (its catalog entry, calibrated on results/*.csv), by the profiler's category of each op
// (ms[MO_PROF_COUNT]: ops outside any profiled op). 0 (and why in how) without a catalog entry.
int mo_plan_profile_predict(const mo_cost_trace *t, int steps, const char *device_name, mo_precision p,
                            double ms[MO_PROF_COUNT + 1], char *how, size_t n);

// A results row back to the configuration that produced it (for validation and calibration).
mo_status mo_plan_config_from_row(const mo_csv_row *row, mo_run_config *rc);

// memopt plan --validate RESULTS.csv (bench/cmd_plan_validate.c): every row's measured peak and step
// time against the plan's; writes plan_validate.csv and, where gnuplot is installed, a figure.
mo_status mo_plan_validate(const mo_config *cfg);

// Seconds on a monotonic clock.
double mo_plan_now(void);
// A file of the source tree (rel like "bench/gpus.txt") found from where memopt runs: ./rel, then
// <memopt binary's folder>/../rel, then the tree this file was compiled in. 1 and the path in buf
// when found, else 0.
int mo_plan_find_file(const char *rel, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
