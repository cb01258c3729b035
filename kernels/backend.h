// The three backends of docs/DESIGN.md: cuda (real kernels), cpu (plain-C reference), dry (no compute,
// the allocator over a fake address space). Same model code, same allocations, on all three.
#ifndef MEMOPT_BACKEND_H
#define MEMOPT_BACKEND_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_backend_kind { MO_BACKEND_CUDA = 0, MO_BACKEND_CPU, MO_BACKEND_DRY } mo_backend_kind;

const char *mo_backend_name(mo_backend_kind b);
mo_status mo_backend_parse(const char *s, mo_backend_kind *out);

// 1 when this build has CUDA (MEMOPT_HAVE_CUDA) and at least one device answers; else 0 and,
// when why is non-NULL, a short reason ("built without CUDA", "no CUDA device: <driver's message>").
int mo_cuda_available(const char **why);

#ifdef __cplusplus
}
#endif

#endif
