// Encoder with 16-bit activations and working weights (ops_mixed.h): plain-C reference and dispatchers.
#include "encoder.h"
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status encoder_forward_mixed_cpu(mo_dtype dt, void *out, const int *inp, const void *wte, const void *wpe, int B,
                                    int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            size_t o = bt * C, w = (size_t)inp[bt] * C, p = (size_t)t * C;
            for (int i = 0; i < C; i++) mixed_st(dt, out, o + i, mixed_ld(dt, wte, w + i) + mixed_ld(dt, wpe, p + i));
        }
    }
    return MO_OK;
}

// The fp32 reference's additions in its order, on the exactly converted dout.
mo_status encoder_backward_mixed_cpu(mo_dtype dt, float *dwte, float *dwpe, const void *dout, const int *inp, int B,
                                     int T, int C, int V) {
    size_t BT = (size_t)B * T;
    for (size_t bt = 0; bt < BT; bt++)
        if (inp[bt] < 0 || inp[bt] >= V)
            return MO_FAIL(MO_ERR_INVALID, "encoder_backward_mixed: token %d at position %zu is outside [0, %d)",
                           inp[bt], bt, V);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            float *gw = dwte + (size_t)inp[bt] * C;
            float *gp = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                float d = mixed_ld(dt, dout, bt * C + i);
                gw[i] += d;
                gp[i] += d;
            }
        }
    }
    return MO_OK;
}

mo_status mo_encoder_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const int *inp, const void *wte,
                                   const void *wpe, int B, int T, int C) {
    if (dt == MO_F32) return mo_encoder_forward(c, (float *)out, inp, (const float *)wte, (const float *)wpe, B, T, C);
    MO_TRY(mixed_check_dtype(dt, "encoder_forward_mixed"));
    if (B <= 0 || T <= 0 || C <= 0)
        return MO_FAIL(MO_ERR_INVALID, "encoder_forward_mixed: bad shape B=%d T=%d C=%d", B, T, C);
    mo_cost_record(c, "encoder_fwd", MO_COST_MEMORY, 0, (mo_dtype_size(dt) + 8.0) * B * T * C);
    switch (c->backend) {
    case MO_BACKEND_CPU: return encoder_forward_mixed_cpu(dt, out, inp, wte, wpe, B, T, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return encoder_forward_mixed_cuda(c, dt, out, inp, wte, wpe, B, T, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "encoder_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "encoder_forward_mixed: unknown backend %d", (int)c->backend);
}

mo_status mo_encoder_backward_mixed(mo_ctx *c, mo_dtype dt, float *dwte, float *dwpe, const void *dout,
                                    const int *inp, const int *inp_host, int B, int T, int C, int V) {
    if (dt == MO_F32) return mo_encoder_backward(c, dwte, dwpe, (const float *)dout, inp, inp_host, B, T, C, V);
    MO_TRY(mixed_check_dtype(dt, "encoder_backward_mixed"));
    if (B <= 0 || T <= 0 || C <= 0 || V <= 0)
        return MO_FAIL(MO_ERR_INVALID, "encoder_backward_mixed: bad shape B=%d T=%d C=%d V=%d", B, T, C, V);
    (void)inp;
    (void)inp_host;
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_encoder_backward_scratch_bytes(B, T), &scratch));
    mo_status st;
    mo_cost_record(c, "encoder_bwd", MO_COST_MEMORY, 0, (mo_dtype_size(dt) + 16.0) * B * T * C);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = encoder_backward_mixed_cpu(dt, dwte, dwpe, dout, inp, B, T, C, V); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = encoder_backward_mixed_cuda(c, dt, dwte, dwpe, dout, inp_host, scratch, B, T, C, V);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "encoder_backward_mixed: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "encoder_backward_mixed: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
