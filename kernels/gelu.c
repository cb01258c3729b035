// GELU (tanh approximation): plain-C reference as karpathy/llm.c train_gpt2.c, and the dispatchers.
#include "gelu.h"

#include <math.h>
#include "ops.h"
#include "cost.h"

#define GELU_SCALING_FACTOR MO_GELU_SCALE

mo_status gelu_forward_cpu(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
    return MO_OK;
}

mo_status gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float coshf_out = coshf(tanh_arg);
        float sech_out = 1.0f / (coshf_out * coshf_out);
        float local_grad =
            0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local_grad * dout[i];
    }
    return MO_OK;
}

mo_status mo_gelu_forward(mo_ctx *c, float *out, const float *inp, size_t n) {
    mo_cost_record(c, "gelu_fwd", MO_COST_MEMORY, 8.0 * n, 4 * 2.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return gelu_forward_cpu(out, inp, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return gelu_forward_cuda(c, out, inp, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "gelu_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "gelu_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_gelu_backward(mo_ctx *c, float *dinp, const float *inp, const float *dout, size_t n) {
    mo_cost_record(c, "gelu_bwd", MO_COST_MEMORY, 8.0 * n, 4 * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return gelu_backward_cpu(dinp, inp, dout, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return gelu_backward_cuda(c, dinp, inp, dout, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "gelu_backward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "gelu_backward: unknown backend %d", (int)c->backend);
}
