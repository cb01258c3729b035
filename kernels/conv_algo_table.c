// The stored cuDNN engine choices of the convolutions (conv_table.h): one line per convolution whose
// best timed candidate beat the first kept heuristic candidate by at least CONV_TUNE_MIN_GAIN in a
// tuning run (MEMOPT_CONV_TUNE=1 ..., "conv-tune:" lines on stderr), pasted as they are, the run named
// above each group. A key no line matches takes the first kept candidate.
// Fields: device, cuDNN version, key {kind, dt, tf32, N, H, W, C, K, R, S, stride, pad, alignments of x, w,
// y, beta_one, workspace}, engine global index, rank among the kept candidates, first's and its median ms.
// No tuning run has been made yet (the table is empty): every convolution takes the first kept candidate.
#include "conv_table.h"

const mo_conv_choice mo_conv_table[] = {
    {NULL, 0, {0}, 0, 0, 0.0f, 0.0f}, // end (C has no empty arrays)
};
const int mo_conv_table_n = (int)(sizeof mo_conv_table / sizeof mo_conv_table[0]) - 1;

int mo_conv_key_eq(const mo_conv_key *x, const mo_conv_key *y) {
    return x->kind == y->kind && x->dt == y->dt && x->tf32 == y->tf32 && x->N == y->N && x->H == y->H &&
           x->W == y->W && x->C == y->C && x->K == y->K && x->R == y->R && x->S == y->S && x->stride == y->stride &&
           x->pad == y->pad && x->al_x == y->al_x && x->al_w == y->al_w && x->al_y == y->al_y &&
           x->beta_one == y->beta_one && x->ws_bytes == y->ws_bytes;
}
