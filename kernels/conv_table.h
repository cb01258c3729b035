// The stored cuDNN engine choices of the convolutions (conv_algo_table.c) and the key they are keyed
// by: plain C, so the table builds and is tested without CUDA. Used by conv_cuda.c, like lt_table.h for
// the cuBLASLt GEMMs.
#ifndef MEMOPT_CONV_TABLE_H
#define MEMOPT_CONV_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MO_CONV_FWD = 0, MO_CONV_BWD_DATA = 1, MO_CONV_BWD_FILTER = 2 };

// Everything an execution plan depends on: which convolution, dtype (mo_dtype), TF32, the shape, the
// byte alignment class (largest power of two <= 256 dividing the address) of the three tensors (x, w, y
// order: in, filter, out, whichever is input or output), beta (1 only for an input gradient added to
// din, conv.h's mo_conv_backward_data_add; the filter gradient is staged and added, conv_cuda.c) and the
// workspace budget. Field order is the table's initializer order.
typedef struct mo_conv_key {
    int kind, dt, tf32;
    int N, H, W, C, K, R, S, stride, pad;
    uint32_t al_x, al_w, al_y;
    int beta_one;
    size_t ws_bytes;
} mo_conv_key;

// A stored choice: on this device (cudaDeviceProp.name) with this cuDNN (cudnnGetVersion()), the
// convolution of this key runs the heuristic's candidate of rank `rank` (among those kept: deterministic,
// fitting the workspace), whose engine has global index `engine`, instead of the first kept. Written by
// a tuning run (MEMOPT_CONV_TUNE=1 prints these lines), then committed. heur_ms, best_ms: the first's
// and this one's median times in the tuning run.
typedef struct mo_conv_choice {
    const char *device;
    long cudnn_version;
    mo_conv_key key;
    long engine;
    int rank;
    float heur_ms, best_ms;
} mo_conv_choice;
extern const mo_conv_choice mo_conv_table[];
extern const int mo_conv_table_n;
int mo_conv_key_eq(const mo_conv_key *x, const mo_conv_key *y); // field by field

#ifdef __cplusplus
}
#endif

#endif
