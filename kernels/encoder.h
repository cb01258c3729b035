// Token + position embedding of GPT-2 (the "encoder"): the plain-C reference and the CUDA launchers
// behind mo_encoder_forward / mo_encoder_backward (ops.h).
#ifndef MEMOPT_ENCODER_H
#define MEMOPT_ENCODER_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (T,C). Tokens must lie in [0,V) (not checked: V is not
// an argument of the forward).
mo_status encoder_forward_cpu(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C);
// dwte (V,C) +=, dwpe (T,C) += from dout (B,T,C). Each row of dwte sums its positions in increasing
// position order (b*T+t), each row of dwpe sums over b in increasing order. MO_ERR_INVALID for a token
// outside [0,V) (nothing is written then).
mo_status encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C,
                               int V);

// Device scratch of the cuda backward: (3*B*T + 1) ints, laid out as
//   order[B*T]        positions b*T+t sorted by token, stable (increasing position within a token)
//   start[B*T + 1]    start[u] .. start[u+1] is the range of order[] of the u-th distinct token
//   token[B*T]        the u-th distinct token
// Built on the host from inp_host and uploaded asynchronously through the context's pinned staging
// buffer (mo_stage_begin / mo_stage_upload, ctx.h): no stream synchronization. Only the first U+1 / U
// entries of start / token are used.
size_t encoder_backward_scratch_ints(int B, int T);

mo_status encoder_forward_cuda(mo_ctx *c, float *out, const int *inp, const float *wte, const float *wpe, int B,
                               int T, int C);
// inp_host: host copy of the tokens (B,T). scratch: mo_encoder_backward_scratch_bytes(B,T) device bytes.
// Deterministic and bit-identical to the cpu reference (the same float additions in the same order).
mo_status encoder_backward_cuda(mo_ctx *c, float *dwte, float *dwpe, const float *dout, const int *inp_host,
                                void *scratch, int B, int T, int C, int V);

// The grouping step of encoder_backward_cuda on its own (host sort of inp_host into the staging buffer,
// its upload into scratch enqueued on c->stream, nothing waited for); *U = number of distinct tokens.
// MO_ERR_INVALID for a token outside [0,V) (nothing uploaded then). Used by the mixed-precision backward.
mo_status encoder_backward_group_cuda(mo_ctx *c, void *scratch, const int *inp_host, int B, int T, int V, int *U);

#ifdef __cplusplus
}
#endif

#endif
