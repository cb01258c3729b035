// Private to models/: one data-parallel rank of the GPT with ZeRO sharding (issue 20; Rajbhandari et
// al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"). The dp ranks each
// run the whole model on batch/dp of the global batch; what a rank keeps of the model state depends
// on the level (Psi the parameter count, D = dp, S = the rank's shard, about Psi/D):
//
//   level  working params   grads            AdamW m, v   fp32 master (16-bit runs)   after backward
//   0      full             full             full         full                        all-reduce (sum)
//   1      full             full             shard        shard                       reduce-scatter, in place
//   2      full             shard            shard        shard                       reduce-scatter per unit, as backward makes it
//   3      shard            shard            shard        shard                       the same; weights all-gathered per unit
//
// Every rank divides its loss by the global batch's tokens (the head's dloss), so the rank-ordered sum
// of the ranks' gradients is the mean gradient of the full batch. Levels >= 1 update only the rank's
// chunk and then (levels 1, 2) all-gather the working weights.
//
// Units. The shard of a level >= 1 is made of units, each split into D equal chunks of `chunk`
// elements (a multiple of GPT_ZERO_ALIGN; the unit padded with zeros to D * chunk), rank r owning
// chunk r of every unit. Level 1 has one unit: the whole buffer in the usual tensor-major layout
// (gpt_params.c). Levels 2 and 3 use a block-major layout: unit 0 holds the outer tensors (wte, wpe,
// lnf.weight, lnf.bias), unit 1 + l block l's twelve tensors (each layer's slice, in the tensor
// order), so that one block's weights and gradients are contiguous: gathered before its forward and
// again before its backward (level 3), its gradient buffer made before its backward and
// reduce-scattered right after it (levels 2, 3; every micro-batch, as DeepSpeed does). Unit 0's
// weights are gathered for the embedding, and again for the head's forward and backward; its gradient
// lives from the head's backward to the embedding's backward.
//
// Buffers (categories): the full working weights param (m->wparams, and m->params in fp32) at levels
// 0-2; the shard's working weights (param) at level 3; the fp32 master master (16-bit: full at 0, the
// shard from 1); grads grad (full at 0-1, shard from 2, plus the unit in flight); m, v optim (full
// at 0, shard from 1); a gathered unit param. All from the rank's allocator: dry == cpu per rank.
#ifndef MEMOPT_GPT_ZERO_H
#define MEMOPT_GPT_ZERO_H

#include "gpt.h"
#include "strategies/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

// Chunks are multiples of 256 elements: 1 KiB in fp32 and 512 B in 16 bits (whole allocator blocks:
// the byte counts of the formula above are exact), and a 16-bit chunk is whole fp32 words for the
// fp32 communicator's all-gather.
#define GPT_ZERO_ALIGN 256

typedef struct gpt_zero {
    int dp, rank, level;
    int blockwise;                  // level >= 2: units 0 (outer) and 1 + l (block l)
    int units;                      // U
    size_t *n, *chunk;              // [U] the unit's elements, the chunk per rank
    size_t *full_off, *shard_off;   // [U] the unit's offset in a full (padded) buffer, its chunk's in the shard
    size_t full_n, shard_n;         // sum of D * chunk, sum of chunk
    size_t std_off[GPT_NPARAMS];    // tensor p's offset in the usual layout
    size_t per_layer[GPT_NPARAMS];  // block tensors: elements per layer (outer tensors: the whole tensor)
    size_t in_unit[GPT_NPARAMS];    // blockwise: tensor p's offset inside its unit (a block's slice)
    // The shards (NULL where the level keeps the full buffer; see the table above).
    float *master;                  // (shard_n) fp32: 16-bit levels >= 1 (m->params then points here)
    void *wshard;                   // (shard_n) dt: level 3's working weights (fp32: == m->params)
    // The units in flight (blockwise): full working weights (level 2: views of m->wparams; level 3:
    // gathered, NULL when not) and full gradients (levels 2, 3: made before the unit's backward).
    void **wunit;                   // [U] (D * chunk) dt
    float **gunit;                  // [U] (D * chunk) fp32
    mo_sched_part *parts;           // [U] the rank's chunk of each unit, for the update
} gpt_zero;

// Called by mo_gpt_create_shard for a shard with dp > 1: the layout, the buffers of the level
// (m->params, wparams, grads, adam_m, adam_v and the shards), and their initial values (the unsplit
// model's of the same seed). m->param_sizes and num_params are set; on a failure the caller destroys m.
mo_status gpt_zero_create(mo_gpt *m);
void gpt_zero_destroy(mo_gpt *m); // the level's buffers not among m's own (and any unit in flight)

// The fp32 gradient buffer the schedule zeroes before the first micro-batch, and its length.
float *gpt_zero_grads(const mo_gpt *m, size_t *n);

// The units around GPT's callbacks (blockwise levels; the others do nothing). u = 0 outer, 1 + l block l.
mo_status gpt_zero_weights_get(mo_gpt *m, int u);  // level 3: all-gather unit u's weights
void gpt_zero_weights_put(mo_gpt *m, int u);       // level 3: free them
mo_status gpt_zero_grad_begin(mo_gpt *m, int u);   // levels 2, 3: unit u's full gradient, zeroed
mo_status gpt_zero_grad_end(mo_gpt *m, int u);     // reduce-scatter it, add the chunk to the shard, free
void gpt_zero_unwind(mo_gpt *m);                   // after a failure: every unit in flight freed

// After the micro-batches: level 0 all-reduces the gradients, level 1 reduce-scatters them.
mo_status gpt_zero_reduce(mo_gpt *m);
// Levels >= 1: the update's parts (the rank's chunk of every unit; *n 0 and NULL at level 0), and,
// after an update that was not skipped, the all-gather of the working weights (levels 1, 2).
const mo_sched_part *gpt_zero_parts(const mo_gpt *m, int *n);
mo_status gpt_zero_gather_weights(mo_gpt *m);

// The rank's owned elements into the usual layout (mo_gpt_num_params floats): what 0 the fp32
// (master) parameters, 1 the gradients (reduced); seen[i] set for each element written. Level 0
// owns everything.
mo_status gpt_zero_export(mo_gpt *m, int what, float *full, unsigned char *seen);

// gpt_params.c: the unsplit model's initial parameters (mo_gpt_num_params floats, the usual layout).
void gpt_init_full(const mo_gpt_config *cfg, float *h);

#ifdef __cplusplus
}
#endif
#endif
