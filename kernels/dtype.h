// Element types of device tensors and their host conversions.
// fp16 (IEEE binary16) and bf16 are stored as raw 16-bit patterns on the host.
#ifndef MEMOPT_DTYPE_H
#define MEMOPT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_dtype { MO_F32 = 0, MO_F16, MO_BF16 } mo_dtype;

size_t mo_dtype_size(mo_dtype t);
const char *mo_dtype_name(mo_dtype t);
mo_status mo_dtype_parse(const char *s, mo_dtype *out);

// Round to nearest, ties to even. Overflow goes to +-inf, NaN stays NaN (quiet),
// values below the smallest subnormal round to +-0 or to the smallest subnormal.
uint16_t mo_f32_to_f16(float f);
float mo_f16_to_f32(uint16_t h);
uint16_t mo_f32_to_bf16(float f);
float mo_bf16_to_f32(uint16_t h);

// Bulk conversions between a host fp32 array and a host array of type t (f32 copies).
void mo_convert_from_f32(mo_dtype t, void *dst, const float *src, size_t n);
void mo_convert_to_f32(mo_dtype t, float *dst, const void *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
