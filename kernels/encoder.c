// Encoder (token + position embedding): plain-C reference and the mo_encoder_* dispatchers.
#include "encoder.h"

#include "ops.h"
#include "cost.h"

size_t encoder_backward_scratch_ints(int B, int T) { return 3 * (size_t)B * (size_t)T + 1; }

size_t mo_encoder_backward_scratch_bytes(int B, int T) {
    if (B <= 0 || T <= 0) return 0;
    return encoder_backward_scratch_ints(B, T) * sizeof(int);
}

mo_status encoder_forward_cpu(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            float *o = out + bt * C;
            const float *w = wte + (size_t)inp[bt] * C;
            const float *p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = w[i] + p[i];
        }
    }
    return MO_OK;
}

mo_status encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C,
                               int V) {
    size_t BT = (size_t)B * T;
    for (size_t bt = 0; bt < BT; bt++)
        if (inp[bt] < 0 || inp[bt] >= V)
            return MO_FAIL(MO_ERR_INVALID, "encoder_backward: token %d at position %zu is outside [0, %d)", inp[bt],
                           bt, V);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            const float *d = dout + bt * C;
            float *gw = dwte + (size_t)inp[bt] * C;
            float *gp = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                gw[i] += d[i];
                gp[i] += d[i];
            }
        }
    }
    return MO_OK;
}

mo_status mo_encoder_forward(mo_ctx *c, float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                             int C) {
    if (B <= 0 || T <= 0 || C <= 0)
        return MO_FAIL(MO_ERR_INVALID, "encoder_forward: bad shape B=%d T=%d C=%d", B, T, C);
    mo_cost_record(c, "encoder_fwd", MO_COST_MEMORY, 0, (4.0 + 8.0) * B * T * C); // out, wte and wpe rows
    switch (c->backend) {
    case MO_BACKEND_CPU: return encoder_forward_cpu(out, inp, wte, wpe, B, T, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return encoder_forward_cuda(c, out, inp, wte, wpe, B, T, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "encoder_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "encoder_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_encoder_backward(mo_ctx *c, float *dwte, float *dwpe, const float *dout, const int *inp,
                              const int *inp_host, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0 || V <= 0)
        return MO_FAIL(MO_ERR_INVALID, "encoder_backward: bad shape B=%d T=%d C=%d V=%d", B, T, C, V);
    (void)inp;      // cuda works from the host-side grouping of inp_host instead
    (void)inp_host; // cpu reads inp (host memory there)
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_encoder_backward_scratch_bytes(B, T), &scratch));
    mo_status st;
    mo_cost_record(c, "encoder_bwd", MO_COST_MEMORY, 0, (4.0 + 16.0) * B * T * C); // dout; dwte, dwpe rows +=
    switch (c->backend) {
    case MO_BACKEND_CPU: st = encoder_backward_cpu(dwte, dwpe, dout, inp, B, T, C, V); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = encoder_backward_cuda(c, dwte, dwpe, dout, inp_host, scratch, B, T, C, V);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "encoder_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "encoder_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
