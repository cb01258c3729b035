// Private to models/: one rank's part of a split MLP (models/mlp_split.c makes the ranks on
// strategies/ranks.h; models/mlp.c runs a rank's step). An MLP with a shard holds only its rank's
// parameters, each tensor in the unsplit layout of a smaller model (mlp_shard_global_index):
//   stage s of pp: the global blocks [s*L/pp, (s+1)*L/pp) (LayerNorm, W1, b1, W2, b2 of each), the
//                  input layer (Win, bin) on stage 0 only, the head (Wout, bout) on stage pp-1 only;
//   tp rank t of tp: rows [t*F, (t+1)*F) of each block's W1 (4H,H) and b1 (column-parallel, F = 4H/tp)
//                  and the same columns of W2 (H,4H) (row-parallel); the LayerNorm, b2, the input
//                  layer and the head replicated (the same compute and gradients on every tp rank).
// A shard NULL is the whole model, unchanged.
#ifndef MEMOPT_MLP_SHARD_H
#define MEMOPT_MLP_SHARD_H

#include <stddef.h>
#include "bench/config.h"
#include "kernels/ctx.h"
#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mo_comm; // strategies/comm.h

enum { MLP_WIN, MLP_BIN, MLP_LNW, MLP_LNB, MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_WOUT, MLP_BOUT, MLP_NPARAMS };

typedef struct mlp_shard {
    int tp, tp_rank;          // tensor-parallel degree; this rank's index among its stage's tp ranks
    int pp, stage;            // pipeline stages; this rank's stage
    int world, rank;          // W = tp * pp; rank = stage * tp + tp_rank
    int layer0, layers;       // the stage's blocks: global [layer0, layer0 + layers)
    int first, last;          // stage 0 (the input layer), stage pp-1 (the head)
    struct mo_comm *tp_comm;  // the tp ranks of this stage (tp > 1)
    struct mo_comm *pp_comm;  // the stages of this tp index (pp > 1)
    struct mo_comm *world_comm; // every rank (W > 1)
} mlp_shard;

// The shard's model (sh NULL: the whole model, as mo_mlp_model.create), its parameters the unsplit
// model's initial values of the same seed. sh is copied. The instance takes mo_mlp_model's functions.
mo_status mlp_create_shard(const mo_run_config *rc, mo_ctx *ctx, const mlp_shard *sh, void **out);
// The tensor sizes: of the shard of instance m (sh), or (m NULL) of the unsplit model of rc.
void mlp_tensor_sizes(const void *m, const mo_run_config *rc, size_t s[MLP_NPARAMS]);
// Element i of the shard's tensor p is element mlp_shard_global_index(m, p, i) of the unsplit tensor p.
size_t mlp_shard_global_index(const void *m, int p, size_t i);
// The split half of mo_mlp_model (models/mlp_split.c).
extern const mo_model_split_ops mo_mlp_split_ops;
// Tensor p is split over the tp ranks (W1, b1, W2), not replicated.
int mlp_param_is_tp_split(int p);
// The last forward_backward's loss (NAN on dry and on a rank that holds no head) and recompute time.
double mlp_last_loss(const void *m);
double mlp_recompute_ms(const void *m);

#ifdef __cplusplus
}
#endif
#endif
