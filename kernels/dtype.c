#include "dtype.h"

#include <math.h>
#include <string.h>

size_t mo_dtype_size(mo_dtype t) { return t == MO_F32 ? 4 : 2; }

const char *mo_dtype_name(mo_dtype t) {
    switch (t) {
    case MO_F32: return "fp32";
    case MO_F16: return "fp16";
    case MO_BF16: return "bf16";
    }
    return "?";
}

mo_status mo_dtype_parse(const char *s, mo_dtype *out) {
    if (!strcmp(s, "fp32")) { *out = MO_F32; return MO_OK; }
    if (!strcmp(s, "fp16")) { *out = MO_F16; return MO_OK; }
    if (!strcmp(s, "bf16")) { *out = MO_BF16; return MO_OK; }
    return MO_FAIL(MO_ERR_INVALID, "unknown dtype '%s' (accepted: fp32, fp16, bf16)", s);
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t mo_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0)); // inf / NaN
    int e = (int)exp - 127 + 15; // rebias
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); // overflow -> inf
    if (e <= 0) {
        // Subnormal half (or zero): shift the full 24-bit significand right, round to nearest even.
        if (e < -10) return (uint16_t)sign; // below half the smallest subnormal
        uint32_t m = man | 0x800000u;
        int shift = 14 - e; // 24-bit significand -> (10 + e)-bit subnormal field
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = m & ((1u << shift) - 1);
        uint32_t r = m >> shift;
        if (rest > half || (rest == half && (r & 1u))) r++;
        return (uint16_t)(sign | r); // a carry into the exponent field gives the smallest normal: correct
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++; // carry may overflow into inf: correct
    return (uint16_t)(sign | r);
}

float mo_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24); // subnormal: man * 2^-24
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t mo_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (uint16_t)((x >> 16) | 0x40u); // quiet NaN
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb; // round to nearest even; overflow rounds to inf as it should
    return (uint16_t)(x >> 16);
}

float mo_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

void mo_convert_from_f32(mo_dtype t, void *dst, const float *src, size_t n) {
    if (t == MO_F32) { memcpy(dst, src, n * 4); return; }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = t == MO_F16 ? mo_f32_to_f16(src[i]) : mo_f32_to_bf16(src[i]);
}

void mo_convert_to_f32(mo_dtype t, float *dst, const void *src, size_t n) {
    if (t == MO_F32) { memcpy(dst, src, n * 4); return; }
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = t == MO_F16 ? mo_f16_to_f32(s[i]) : mo_bf16_to_f32(s[i]);
}
