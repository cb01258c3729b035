// Where a model's checkpoint segments lie over its L blocks, for every --ckpt policy: one place for
// the generic schedule (strategies/schedule.c) and the models' recompute FLOPs. Blocks [0, blocks) form checkpointed segments of
// len blocks (the last one shorter when len does not divide blocks): each segment keeps only its
// input in forward and is recomputed in backward. Blocks [blocks, L) keep all their activations.
//   none, selective: len 0, blocks 0 (selective drops its attention tensors elsewhere)
//   full: len 1, blocks L          every:K: len min(K, L), blocks L
//   sqrt: len ceil(sqrt(L)), blocks L (Chen et al. 2016)
//   segments:N: PyTorch's torch.utils.checkpoint.checkpoint_sequential(functions, N) layout, exactly:
//     segment_size = L // N; the first N-1 segments of that size are checkpointed, and the rest,
//     blocks [(N-1)*(L//N), L) (L//N + L%N blocks), runs without checkpointing, as PyTorch runs its last
//     segment outside checkpoint(). So segments:1 keeps everything (= none), and segments:N with N = L
//     checkpoints every block but the last. We take this layout, not ceil(L/N) segments all
//     checkpointed, because the point of the policy is to compare with what PyTorch users run.
//     N is clamped to L (a pipeline stage of fewer blocks than N).
#ifndef MEMOPT_CKPT_LAYOUT_H
#define MEMOPT_CKPT_LAYOUT_H

#include "models/gpt.h" // mo_ckpt_kind

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_ckpt_layout {
    int len;    // blocks per checkpointed segment; 0: no checkpointed segment
    int blocks; // blocks [0, blocks) are checkpointed, in segments of len
} mo_ckpt_layout;

// k: K of every:K, N of segments:N (else unused); L: the blocks (of the model, or of a stage).
mo_ckpt_layout mo_ckpt_layout_of(mo_ckpt_kind kind, int k, int L);
// The checkpointed segments: ceil(blocks / len), 0 without.
int mo_ckpt_layout_segments(mo_ckpt_layout y);

#ifdef __cplusplus
}
#endif

#endif
