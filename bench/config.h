// The command line as data. Two levels:
//   mo_config      everything one `memopt <command> ...` invocation said: a list of values for each
//                  axis flag (--precision fp32,bf16 --ckpt none,full --batch 4,8 ...), the scalar
//                  flags, and the command's own flags and positional arguments;
//   mo_run_config  one combination: scalar fields only, what one run needs.
// mo_config_combination(cfg, i, &rc) yields combination i of mo_config_count(cfg), in the order
// documented there. Every value is checked as it is set; the cross-flag rules (hidden % heads, ...)
// are checked per combination by mo_run_config_validate. Errors are MO_ERR_INVALID with a
// one-line message that names the flag and the accepted values.
#ifndef MEMOPT_BENCH_CONFIG_H
#define MEMOPT_BENCH_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/status.h"
#include "models/gpt.h" // mo_ckpt_kind
#include "strategies/alloc.h"
#include "strategies/comm.h" // mo_comm_kind

#ifdef __cplusplus
extern "C" {
#endif

#define MO_PATH_MAX 1024
#define MO_LIST_MAX 32              // values per axis flag
#define MO_COMBINATIONS_MAX 100000  // a sweep larger than this is surely a typo
// The device size the dry and cpu backends pretend to have (--device-mem): the H200's
// cudaMemGetInfo total, 143771 MiB.
#define MO_DEFAULT_DEVICE_MEM ((uint64_t)143771 << 20)

// Limits, checked per value (stated in --help):
#define MO_MAX_LAYERS 1024
#define MO_MAX_HIDDEN 65536
#define MO_MAX_HEADS 1024
#define MO_MAX_SEQ 65536
#define MO_MAX_BATCH 65536
#define MO_MAX_VOCAB (1 << 21)
#define MO_MAX_INPUT (1 << 20)
#define MO_MAX_CLASSES (1 << 21)
#define MO_MAX_TP 256
#define MO_MAX_PP 1024
#define MO_MAX_DP 64 // the communicator's largest world
#define MO_MAX_STEPS 1000000

typedef enum mo_command {
    MO_CMD_NONE = 0,
    MO_CMD_RUN, MO_CMD_SWEEP, MO_CMD_CLAIMS, MO_CMD_PLAN, MO_CMD_MINCAP, MO_CMD_COMPARE, MO_CMD_PLOT,
    MO_CMD_DEVICES,
    MO_CMD_COUNT
} mo_command;
const char *mo_command_name(mo_command c);
mo_status mo_command_parse(const char *s, mo_command *out); // error lists the subcommands
// 1 when the command runs exactly one configuration (run, mincap, claims): list values are refused.
int mo_command_single(mo_command c);

typedef enum mo_attn_kind { MO_ATTN_MATERIALIZED = 0, MO_ATTN_FUSED } mo_attn_kind;
typedef enum mo_precision { MO_PREC_FP32 = 0, MO_PREC_TF32, MO_PREC_FP16, MO_PREC_BF16 } mo_precision;
// mo_comm_kind (local | nccl) is the communicator's own: strategies/comm.h.
typedef enum mo_on_oom { MO_ON_OOM_FAIL = 0, MO_ON_OOM_SHRINK } mo_on_oom;

// --ckpt: kind, and K for every:K (N for segments:N). full is kept as its own kind (it equals every:1 in effect).
typedef struct mo_ckpt {
    mo_ckpt_kind kind;
    int every; // K for MO_CKPT_EVERY, N for MO_CKPT_SEGMENTS, else 0
} mo_ckpt;

const char *mo_attn_name(mo_attn_kind a);
const char *mo_precision_name(mo_precision p);
const char *mo_comm_name(mo_comm_kind c);
const char *mo_on_oom_name(mo_on_oom o);
// --offload: what lives in host memory
enum { MO_OFFLOAD_NONE = 0, MO_OFFLOAD_OPTIMIZER = 1, MO_OFFLOAD_ACTIVATIONS = 2 };
const char *mo_offload_name(int offload); // "none", "optimizer", "activations"
mo_status mo_offload_parse(const char *s, int *out); // the name back to MO_OFFLOAD_*; the error names --offload
const char *mo_ckpt_format(mo_ckpt c, char *buf, size_t n); // "none", "full", "every:4", "sqrt", "selective", "segments:4"
mo_status mo_precision_parse(const char *s, mo_precision *out);
mo_status mo_ckpt_parse(const char *s, mo_ckpt *out);

// A model preset: a named shape of one model (models/model.h: each model's table holds its own;
// GPT's are the GPT-2 sizes). A dimension a model does not have is 0.
typedef struct mo_preset {
    const char *name;
    int layers, hidden, heads, seq, batch, vocab;
    int input, classes; // the MLP's input width and classes
} mo_preset;
const mo_preset *mo_preset_find(const char *name); // any model's preset by name; NULL when unknown
const mo_preset *mo_presets(size_t *n);            // the default model's (gpt)

// One configuration.
typedef struct mo_run_config {
    // model
    char model[16];                  // the model's registered name (models/model.h), "gpt"
    char preset[16];                 // the preset the dimensions started from
    int layers, hidden, heads, seq;
    int batch;                       // global batch per optimizer step
    int vocab;
    int input, classes;              // the MLP's input width and class count (0 for gpt)
    mo_attn_kind attn;
    // strategy
    mo_cap cap;                      // resolve with mo_cap_resolve(&cap, device total)
    char cap_text[32];               // as given: "none", "0.5", "24GiB"
    mo_alloc_kind alloc;
    mo_ckpt ckpt;
    int accum;                       // micro-batches per step; micro batch = batch / accum
    mo_precision precision;
    int tp, pp;
    int dp, zero;                    // data-parallel ranks and the ZeRO level 0..3 (models/gpt_zero.h)
    int sp;                          // --sp 1: sequence parallelism over the tp ranks (gpt, --tp above 1)
    mo_comm_kind comm;
    int offload;                     // --offload: MO_OFFLOAD_NONE, _OPTIMIZER (AdamW state and 16-bit master on the
                                     // host) or _ACTIVATIONS (checkpointed segments' inputs on the host)
    mo_on_oom on_oom;
    // run
    mo_backend_kind backend;
    int steps, warmup;               // timed steps; untimed warm-up steps before them
    uint64_t seed;
    char csv[MO_PATH_MAX];           // "" when no --csv
    int monitor;                     // print memory every N steps; 0 off
    int profile;                     // --profile: time per class of op (gemm, attention, ...)
    double lr;
    uint64_t device_mem_bytes;       // --device-mem: what dry/cpu pretend the device holds
    char out_dir[MO_PATH_MAX];       // "" : the command's own default (results/, plots/)
    char trace[MO_PATH_MAX];         // --trace: run, the allocation trace CSV of the first timed step;
                                     // sweep, a folder with one such file per row ("" off)
    int summary;                     // --summary: print the allocator's memory_summary after the run
} mo_run_config;

// The whole command line.
typedef struct mo_config {
    mo_command command;
    mo_run_config base; // scalar flags; the axis fields hold the defaults / first values

    // Axis lists. A dimension list with 0 entries means "from the preset".
    int n_preset;    char preset[MO_LIST_MAX][16];
    int n_layers;    int layers[MO_LIST_MAX];
    int n_hidden;    int hidden[MO_LIST_MAX];
    int n_heads;     int heads[MO_LIST_MAX];
    int n_seq;       int seq[MO_LIST_MAX];
    int n_vocab;     int vocab[MO_LIST_MAX];
    int n_input;     int input[MO_LIST_MAX];
    int n_classes;   int classes[MO_LIST_MAX];
    int n_batch;     int batch[MO_LIST_MAX];
    int n_attn;      mo_attn_kind attn[MO_LIST_MAX];
    int n_precision; mo_precision precision[MO_LIST_MAX];
    int n_tp;        int tp[MO_LIST_MAX];
    int n_pp;        int pp[MO_LIST_MAX];
    int n_dp;        int dp[MO_LIST_MAX];
    int n_zero;      int zero[MO_LIST_MAX];
    int n_sp;        int sp[MO_LIST_MAX];
    int n_offload;   int offload[MO_LIST_MAX]; // MO_OFFLOAD_*
    int n_accum;     int accum[MO_LIST_MAX];
    int n_ckpt;      mo_ckpt ckpt[MO_LIST_MAX];
    int n_alloc;     mo_alloc_kind alloc[MO_LIST_MAX];
    int n_cap;       mo_cap cap[MO_LIST_MAX]; char cap_text[MO_LIST_MAX][32];
    int preset_given, attn_given; // --preset / --attn appeared (else the model's defaults)

    // sweep
    char grid[MO_PATH_MAX]; // --grid FILE (its flags were applied where --grid stood)
    int resume;             // --resume: skip combinations whose row is already in --csv
    int shard_index, shard_count; // --shard i/n: combinations with index % n == i (default 0/1)
    // --benchmark_* flags (sweep): handed to Google Benchmark as they were given ("--benchmark_x=v").
    int n_gbench;
    char gbench[8][256];
    // plan
    char gpu[64];           // --gpu NAME ("" when not given); the planner knows the names
    uint64_t mem_bytes;     // --mem SIZE (0 when not given)
    int gpus;               // --gpus N: the ZeRO levels 0..3 at dp N, which fits and is fastest (0 when not given)
    // compare
    double tolerance;       // --tolerance F: relative slack before a row counts as a regression
    int format_md;          // --format md: a Markdown table (compare); default text
    char validate[MO_PATH_MAX]; // plan --validate RESULTS.csv: predicted against measured per row
    // positional arguments: compare BASE.csv NEW.csv, plot RESULTS.csv
    int n_args;
    char args[2][MO_PATH_MAX];
} mo_config;

// Defaults: preset gpt2-124m (L12 C768 H12, seq 1024, vocab 50304, batch 8), attn materialized,
// cap none, alloc caching, ckpt none, accum 1, precision fp32, tp 1, pp 1, comm local,
// on-oom fail, backend cuda, steps 10, warmup 3, seed 1337, monitor 0, lr 3e-4,
// device-mem 143771MiB, tolerance 0.05.
void mo_config_defaults(mo_config *c, mo_command command);

// Sets one flag ("--precision") from its text value; axis flags take a comma list unless the
// command is single-configuration. Unknown flags, flags of another command, bad values: MO_ERR_INVALID.
mo_status mo_config_set(mo_config *c, const char *flag, const char *value);
// Adds a positional argument (compare: 2, plot: 1, others: none).
mo_status mo_config_add_arg(mo_config *c, const char *arg);
// After the last flag: argument count, --gpu/--mem exclusivity, the combination count, and the
// cross-flag rules. Single-configuration commands need their one combination valid; sweep and plan
// need at least one valid combination (the rest become rows with status invalid).
mo_status mo_config_finish(mo_config *c);

// Number of combinations: the product of the list lengths (an empty dimension list counts 1).
size_t mo_config_count(const mo_config *c);
// Combination i, 0 <= i < count. Order: nested loops, the first axis outermost, the last fastest:
//   preset, layers, hidden, heads, seq, vocab, batch, attn, precision, tp, pp, accum, ckpt, alloc, cap,
//   input, classes, dp, zero, sp, offload
// (axes added later are appended, so an older grid's combinations keep their indices)
// (each list in the order given on the command line). Dimensions not given come from the preset.
// Does not validate: call mo_run_config_validate.
mo_status mo_config_combination(const mo_config *c, size_t i, mo_run_config *out);

// The cross-flag rules of one combination: the model's own (its table's validate; GPT:
//   hidden % heads == 0, heads % tp == 0 and (4*hidden) % tp == 0, layers % pp == 0), what the
//   model lacks (attention for --attn fused and --ckpt selective, a split for --tp/--pp), and the
//   generic ones: batch % accum == 0; every:K has K <= layers; --comm nccl needs --backend cuda;
//   --sp 1 needs gpt, --tp above 1 and seq % tp == 0.
mo_status mo_run_config_validate(const mo_run_config *rc);
// Two of the generic rules, for a model's validate that checks them in its own order: batch % accum,
// and every:K with K <= layers.
mo_status mo_run_config_check_accum(const mo_run_config *rc);
mo_status mo_run_config_check_every(const mo_run_config *rc);

// mo_errmsg() without its "file.c:123: " prefix: the text a user is shown for bad input.
const char *mo_errmsg_plain(void);

// Flag descriptions, for --help and the per-command checks.
typedef struct mo_flag_info {
    const char *name;     // "--precision"
    const char *arg;      // "fp32|tf32|fp16|bf16", or NULL for a switch
    const char *help;     // one line
    const char *group;    // "model", "strategy", "run", "sweep", "plan", "compare", "output"
    unsigned commands;    // bit (1u << mo_command) for each command that takes it
    int list;             // takes a comma list in sweep and plan
} mo_flag_info;
const mo_flag_info *mo_config_flags(size_t *n);

#ifdef __cplusplus
}
#endif

#endif
