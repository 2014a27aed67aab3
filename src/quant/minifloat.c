/* minifloat.c: scalar conversions between f32 and the small float formats
 * minke meets: IEEE half (F16 weights, KV cache rounding), bfloat16, and the
 * official checkpoint's FP8 E4M3FN, E8M0 scales and FP4 E2M1 codes
 * (spec model.md §4.5, §5.1, §6.4, §6.5). Written with integer bit
 * manipulation so that rounding is exactly round-to-nearest-even whatever
 * the compiler does with floating point.
 */
#include <math.h>
#include <string.h>

#include "quant/quant.h"

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F)                       /* inf / NaN: keep the payload */
        return bits_f32(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)                  /* NaN -> quiet NaN, payload top bits kept */
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u)                 /* >= 65520 (the tie above 65504) -> inf */
        return (uint16_t)(sign | 0x7C00);
    if (ax < 0x38800000u) {                /* below 2^-14: half subnormal or zero */
        /* |f| * 2^24 is exact and < 1024; rint rounds to even in the default mode.
         * A result of 1024 is the smallest normal's encoding, which is correct. */
        float v = bits_f32(ax) * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)nearbyintf(v));
    }
    uint32_t e = (ax >> 23) - 112;         /* rebias 127 -> 15 */
    uint32_t mant = ax & 0x7FFFFF;
    uint32_t h = (e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;   /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)   /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- FP8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; S.1111.111 is NaN ---- */

float fp8_e4m3_to_f32(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80) << 24;
    uint32_t e = (v >> 3) & 0xF, m = v & 7;
    if (e == 0xF && m == 7) return bits_f32(sign | 0x7FC00000u);
    if (e == 0) {
        float f = (float)m * (1.0f / 512.0f);
        return sign ? -f : f;
    }
    return bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

float fp8_e4m3_to_f32_nan0(uint8_t v)
{
    if ((v & 0x7F) == 0x7F) return 0.0f;
    return fp8_e4m3_to_f32(v);
}

uint8_t f32_to_fp8_e4m3(float f)
{
    uint32_t x = f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint8_t)(sign | 0x7F);       /* NaN stays NaN */
    if (ax >= 0x43E00000u) return (uint8_t)(sign | 0x7E);      /* >= 448 (and inf): saturate */
    if (ax < 0x3C800000u) {                                    /* below 2^-6: subnormal step 2^-9 */
        float v = bits_f32(ax) * 512.0f;                       /* exact, < 8 */
        return (uint8_t)(sign | (uint8_t)nearbyintf(v));       /* 8 = smallest normal, correct */
    }
    uint32_t e = (ax >> 23) - 120;         /* rebias 127 -> 7 */
    uint32_t mant = ax & 0x7FFFFF;
    uint32_t c = (e << 3) | (mant >> 20);
    uint32_t rem = mant & 0xFFFFF;
    if (rem > 0x80000 || (rem == 0x80000 && (c & 1))) c++;
    if (c > 0x7E) c = 0x7E;                /* cannot happen below 448; keeps NaN unreachable */
    return (uint8_t)(sign | c);
}

/* ---- E8M0: a bare biased exponent ---- */

float e8m0_to_f32(uint8_t v)
{
    if (v == 0xFF) return bits_f32(0x7FC00000u);
    if (v == 0) return bits_f32(0x00400000u);  /* 2^-127 is an f32 subnormal */
    return bits_f32((uint32_t)v << 23);
}

/* ---- E2M1: 1 sign, 2 exponent, 1 mantissa ---- */

static const float e2m1_values[16] = {
    0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

float e2m1_to_f32(uint8_t nibble) { return e2m1_values[nibble & 0xF]; }

uint8_t f32_to_e2m1(float f)
{
    uint32_t x = f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 28) & 0x8);
    float a = fabsf(f);
    uint8_t c;
    if (isnan(f)) return 0;
    /* midpoints between neighbours; a tie goes to the even code */
    if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    return (uint8_t)(sign | c);
}
