// Host fp16/bf16 conversions: round to nearest even, subnormals, inf, NaN, fp16 overflow.
// Checked against exact expectations and against an exhaustive round trip of every 16-bit pattern.
#include <math.h>
#include <string.h>
#include "kernels/dtype.h"
#include "tests/testlib.h"

static float bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_f16(void) {
    CHECK(mo_f32_to_f16(0.0f) == 0x0000);
    CHECK(mo_f32_to_f16(-0.0f) == 0x8000);
    CHECK(mo_f32_to_f16(1.0f) == 0x3c00);
    CHECK(mo_f32_to_f16(-2.0f) == 0xc000);
    CHECK(mo_f32_to_f16(65504.0f) == 0x7bff);           // largest finite
    CHECK(mo_f32_to_f16(65519.0f) == 0x7bff);           // rounds down below the midpoint
    CHECK(mo_f32_to_f16(65520.0f) == 0x7c00);           // the midpoint rounds to even: inf
    CHECK(mo_f32_to_f16(1e6f) == 0x7c00);               // overflow
    CHECK(mo_f32_to_f16(-1e6f) == 0xfc00);
    CHECK(mo_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(mo_f32_to_f16(-INFINITY) == 0xfc00);
    uint16_t n = mo_f32_to_f16(NAN);
    CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);  // NaN stays NaN
    CHECK(isnan(mo_f16_to_f32(n)));
    CHECK(mo_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);  // smallest subnormal
    CHECK(mo_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);  // half of it: ties to even (0)
    CHECK(mo_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);  // above half: rounds up
    CHECK(mo_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002);  // 1.5 ulp: tie to even (2)
    CHECK(mo_f32_to_f16(ldexpf(1023.0f, -24)) == 0x03ff); // largest subnormal
    CHECK(mo_f32_to_f16(ldexpf(1.0f, -14)) == 0x0400);  // smallest normal
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1.
    CHECK(mo_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00);
    CHECK(mo_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02);
    CHECK(mo_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(mo_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(mo_f16_to_f32(0xfc00) == -INFINITY);
    // Every finite pattern survives the round trip exactly.
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; // NaNs
        if (mo_f32_to_f16(mo_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d fp16 patterns do not round-trip", bad);
}

static void test_bf16(void) {
    CHECK(mo_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(mo_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(mo_f32_to_bf16(bits(0x3f808000u)) == 0x3f80); // halfway, even below
    CHECK(mo_f32_to_bf16(bits(0x3f818000u)) == 0x3f82); // halfway, even above
    CHECK(mo_f32_to_bf16(bits(0x3f808001u)) == 0x3f81); // above halfway
    CHECK(mo_f32_to_bf16(bits(0x7f7fffffu)) == 0x7f80); // FLT_MAX rounds to inf
    CHECK(mo_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(mo_f32_to_bf16(bits(0x00000001u)) == 0x0000); // tiny subnormal rounds to 0
    CHECK(mo_f32_to_bf16(bits(0x00010000u)) == 0x0001); // bf16 subnormal kept
    CHECK(mo_f32_to_bf16(bits(0x00018000u)) == 0x0002); // subnormal tie to even
    uint16_t n = mo_f32_to_bf16(bits(0x7f800001u));     // a NaN whose payload would truncate to inf
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
        if (mo_f32_to_bf16(mo_bf16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 patterns do not round-trip", bad);
}

static void test_bulk_and_names(void) {
    float src[5] = {1.0f, -3.5f, 0.1f, 65504.0f, ldexpf(1.0f, -24)};
    uint16_t h[5];
    float back[5];
    mo_convert_from_f32(MO_F16, h, src, 5);
    mo_convert_to_f32(MO_F16, back, h, 5);
    CHECK(back[0] == 1.0f && back[1] == -3.5f && back[3] == 65504.0f && back[4] == src[4]);
    CHECK(fabsf(back[2] - 0.1f) < 1e-4f);
    CHECK(mo_dtype_size(MO_F32) == 4 && mo_dtype_size(MO_BF16) == 2);
    mo_dtype t;
    CHECK_OK(mo_dtype_parse("bf16", &t));
    CHECK(t == MO_BF16);
    CHECK(mo_dtype_parse("fp8", &t) == MO_ERR_INVALID);
}

int main(void) {
    test_f16();
    test_bf16();
    test_bulk_and_names();
    return test_finish();
}
