// A model behind one interface: a table of functions (as SQLite's sqlite3_module / sqlite3_vfs are),
// registered by name and chosen with --model NAME. The run engine, the config, the CLI and the
// planner reach a model only through its table: its dimensions and presets and their rules, its
// dimension text for the CSV, its tensor table, parameter count, items per sample and FLOPs, a
// synthetic batch, and its step, on one device or split over ranks.
//
// A strategy only some models have (selective checkpointing and --attn need attention; --tp of the
// heads) is an option of the model: a model that lacks it refuses it in its validate, with the reason
// (MO_ERR_INVALID, exit 2 on the command line).
#ifndef MEMOPT_MODEL_H
#define MEMOPT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "bench/config.h" // mo_run_config, mo_preset
#include "kernels/ctx.h"
#include "models/gpt.h"   // mo_tensor_info
#include "strategies/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

// The dimension flags a model takes (bits of mo_model_ops.dims; a flag it lacks is refused when
// given); --batch is every model's. MO_OPT_ATTN: it has attention (--attn; --ckpt selective).
enum {
    MO_DIM_LAYERS = 1u << 0,
    MO_DIM_HIDDEN = 1u << 1,
    MO_DIM_HEADS = 1u << 2,
    MO_DIM_SEQ = 1u << 3,
    MO_DIM_VOCAB = 1u << 4,
    MO_OPT_ATTN = 1u << 5,
    MO_DIM_INPUT = 1u << 6,
    MO_DIM_CLASSES = 1u << 7,
};

// What the engine reads after each step.
typedef struct mo_model_step_info {
    double loss;          // the last step's mean loss
    double recompute_ms;  // time re-running forward inside backward in the last step
    int skipped_steps;    // updates the loss scaler skipped so far
    double loss_scale;    // the scaler's current scale (1 when off)
    int loss_scaling;     // the dynamic loss scaler is on (gpt: fp16)
} mo_model_step_info;

// A split run (--tp/--pp/--dp above 1): the ranks, each with its own allocator.
typedef struct mo_split_config {
    int tp, pp;
    int dp, zero;         // data-parallel ranks (1: none) and the ZeRO level (gpt: models/gpt_zero.h)
    int sp;               // sequence parallelism over the tp ranks (gpt: models/gpt_split.h), 0 off
    mo_comm_kind comm;
    mo_backend_kind backend;
    mo_alloc_kind alloc;  // each rank's
    uint64_t cap_bytes;   // each rank's cap, 0 none
} mo_split_config;

// Communication over the ranks since the last reset.
typedef struct mo_split_comm {
    uint64_t ops, bytes, bytes_max_rank; // all ranks; the largest rank's bytes
    double ms_max_rank;                  // the busiest rank's communication time
    int measured;                        // 1: CUDA events (nccl), 0: modelled (local)
} mo_split_comm;

// The split half of a table; NULL for a model that cannot be split (it refuses --tp/--pp).
// Every instance function takes the object create made.
typedef struct mo_model_split_ops {
    mo_status (*validate)(const mo_run_config *rc, const mo_split_config *sc);
    mo_status (*create)(const mo_run_config *rc, const mo_split_config *sc, void **out);
    void (*destroy)(void *sp);
    mo_status (*set_synthetic_batch)(void *sp, uint64_t seed);
    mo_status (*step)(void *sp);
    double (*step_ms)(void *sp);                // the slowest rank's time of the last step (own stream timers)
    void (*info)(void *sp, mo_model_step_info *out); // the loss-scaler figures are rank 0's (all ranks share them)
    int (*world)(void *sp);
    mo_allocator *(*allocator)(void *sp, int rank);
    int (*peak_rank)(void *sp);                 // the rank with the largest peak allocated
    void (*reset_peaks)(void *sp);
    mo_status (*comm_stats)(void *sp, mo_split_comm *out);
    mo_status (*comm_reset)(void *sp);
    double (*recompute_flops)(const mo_run_config *rc); // over all ranks, per step
    // For the planner's link time (bench/planner_roofline.c): the tp all-reduces of one (rows, hidden)
    // activation per block and micro-batch (rows: batch/accum x items per sample), and the bytes the
    // first and last stage sum once per step (GPT's tied embedding; NULL: none).
    int tp_allreduces_per_block;
    double (*stage_tie_bytes)(const mo_run_config *rc);
} mo_model_split_ops;

typedef struct mo_model_ops {
    const char *name;       // --model NAME, the CSV's model column
    const char *about;      // one line for --help
    const char *item;       // what items_per_sample counts: "tokens", "samples"
    unsigned dims;          // MO_DIM_* bits: the dimension flags it takes (others are refused)
    const char *dims_help;  // its dimension flags, for messages: "layers, hidden, heads, seq, vocab, batch"
    // Presets: named shapes (the first is the default); --preset names one of them.
    const mo_preset *presets;
    int n_presets;

    // The model's cross-flag rules for one combination (in mo_run_config_validate; what a model lacks
    // by its dims bits and split is refused there). The generic rules (batch % accum, every:K <=
    // layers, nccl on cuda) are config.c's, checked after it (a model may check them earlier itself).
    mo_status (*validate)(const mo_run_config *rc);
    // The model's own check before the engine builds anything (shapes its kernels take); a refusal
    // makes the row invalid.
    mo_status (*check)(const mo_run_config *rc);
    // Its dimensions as a short text for the CSV's dims column ("L12 C768 H12 T1024 V50304").
    const char *(*dims_text)(const mo_run_config *rc, char *buf, size_t n);
    // Its inverse, for a results row (plan --validate): sets the dimensions dims_text writes.
    mo_status (*dims_parse)(const char *text, mo_run_config *rc);
    size_t (*num_params)(const mo_run_config *rc);
    double (*items_per_sample)(const mo_run_config *rc); // tokens per sequence for GPT
    double (*step_flops)(const mo_run_config *rc);       // model FLOPs of one step, recompute excluded
    double (*recompute_flops)(const mo_run_config *rc);  // FLOPs re-run by the checkpoint strategy
    int (*tensor_table)(const mo_run_config *rc, mo_tensor_info *rows, int max);

    // One instance on one device: parameters from ctx's allocator (on OOM everything is given back).
    mo_status (*create)(const mo_run_config *rc, mo_ctx *ctx, void **out);
    void (*destroy)(void *m);
    mo_status (*set_synthetic_batch)(void *m, uint64_t seed); // deterministic from the seed
    mo_status (*step)(void *m);                                // one optimizer step
    void (*info)(void *m, mo_model_step_info *out);

    const mo_model_split_ops *split;
    const char *no_split_reason; // split == NULL: why, for the --tp/--pp refusal (NULL: none given)
    // The libraries' workspace budget of its runs (cuBLASLt, cuDNN, the im2col chunks: ctx.h), MiB; 0: the
    // suite's 32 (MO_GEMM_WORKSPACE_BYTES). MEMOPT_WORKSPACE_MIB overrides it. mo_model_workspace_bytes.
    int workspace_mib;
} mo_model_ops;

// The registry. Built-in models are there from the start; mo_model_register adds one (tests), a
// name already taken is MO_ERR_INVALID. At most MO_MODELS_MAX models.
#define MO_MODELS_MAX 16
mo_status mo_model_register(const mo_model_ops *ops);
const mo_model_ops *mo_model_find(const char *name); // NULL when unknown
int mo_model_count(void);
const mo_model_ops *mo_model_at(int i);
// The default workspace budget of a run of ops (NULL: the suite's), bytes.
size_t mo_model_workspace_bytes(const mo_model_ops *ops);
const mo_model_ops *mo_model_default(void); // gpt
// "gpt, mlp": the registered names, for messages.
const char *mo_model_names(char *buf, size_t n);
// The model of a configuration; MO_ERR_INVALID naming --model when it is not registered.
mo_status mo_model_of(const mo_run_config *rc, const mo_model_ops **out);
// A preset of one model by name; NULL when it has none of that name.
const mo_preset *mo_model_preset(const mo_model_ops *ops, const char *name);

// The built-in tables.
extern const mo_model_ops mo_gpt_model;
extern const mo_model_ops mo_mlp_model;
extern const mo_model_ops mo_resnet_model;

#ifdef __cplusplus
}
#endif
#endif
