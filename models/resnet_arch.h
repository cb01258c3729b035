// The ResNet's layer list (models/resnet_arch.c), shared by its table (resnet.c) and its step
// (resnet_step.c): torchvision's ResNet v1.5 (the stride in the 3x3 convolution of a bottleneck), NHWC.
//   stem: conv 7x7 s2 p3 (3 -> W0) + BN + ReLU, max pool 3x3 s2 p1
//   4 stages of blocks, stage s of width w = W0 2^s, its first block strided 2 (stage 0: 1):
//     basic:      conv3x3(st) BN ReLU conv3x3 BN, + shortcut, ReLU             (out channels w)
//     bottleneck: conv1x1 BN ReLU conv3x3(st) BN ReLU conv1x1 BN, + shortcut, ReLU  (out 4w)
//     shortcut: the input, or conv1x1(st) + BN where the shape changes (torchvision's downsample)
//   head: global average pool, FC (K, C) + bias, softmax cross-entropy.
// Dimensions: --layers is the depth D (18, 34, 50, 101, 152 as torchvision; else 8n+2 < 50 for n basic
// blocks a stage, 12n+2 for n bottleneck blocks a stage), --hidden the base width W0 (64), --input the
// image side S (square, 3 channels), --classes K.
// Parameters, one fp32 array in torchvision's state_dict order: each unit's conv weight (K,R,S,C), its
// BN weight and bias (C each); then fc.weight (K,C), fc.bias (K). BN running statistics (mean, var per
// unit) are a separate fp32 array: buffers, not parameters.
#ifndef MEMOPT_RESNET_ARCH_H
#define MEMOPT_RESNET_ARCH_H

#include <stddef.h>
#include "bench/config.h"
#include "kernels/status.h"

// One convolution and the batch norm after it.
typedef struct rn_unit {
    int cin, cout, R, stride, pad; // conv (cout, R, R, cin), no bias
    int H, P;                      // input side, output side
    size_t w_off, g_off, b_off;    // conv weight, BN weight (gamma), BN bias (beta) in the parameters
    size_t rs_off;                 // running mean in the statistics array (running var at rs_off + cout)
} rn_unit;

// One residual block: main-path units u[0..nu), the shortcut's unit ds (-1: the identity).
typedef struct rn_block {
    int u[3], nu, ds;
    int cin, cout, H, P;
} rn_block;

typedef struct rn_arch {
    int depth, W0, S, K;
    int bottleneck;
    int nblk[4], nblocks;
    int nunits;
    rn_unit *units;   // (nunits): 0 is the stem
    rn_block *blocks; // (nblocks)
    int pool_H, pool_P; // the stem's max pool: input side, output side
    int Cf, Pf;         // the last block's channels and side (the average pool's input)
    size_t fc_w, fc_b;  // offsets of fc.weight (K,Cf), fc.bias (K)
    size_t n_params, n_running;
} rn_arch;

// The blocks a stage for depth D (refused with the accepted depths, naming --layers).
mo_status rn_depth_blocks(int D, int nblk[4], int *bottleneck);
// The layer list of a configuration (layers, hidden, input, classes); rn_arch_free after.
mo_status rn_arch_build(const mo_run_config *rc, rn_arch *a);
void rn_arch_free(rn_arch *a);

#endif
