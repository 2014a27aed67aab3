/* test_quant.c: the block-format table, the minifloat conversions against
 * the primitives fixture (tests/fixtures/primitives/primitives.json, made by
 * shared/oracle/make_primitives.py with torch), and byte-exact decoding of
 * hand-built blocks of every format, with the expected values computed from
 * the byte layouts of spec model.md §5 rather than from our structs.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "testutil.h"


static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static int same_float(float a, float b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* ---------------- table ---------------- */

static void test_table(void)
{
    static const struct { int type; int blck; size_t bytes; int vdt; } expect[] = {
        {GGML_TYPE_F32, 1, 4, GGML_TYPE_F32},        {GGML_TYPE_F16, 1, 2, GGML_TYPE_F32},
        {GGML_TYPE_BF16, 1, 2, GGML_TYPE_F32},       {GGML_TYPE_I32, 1, 4, -1},
        {GGML_TYPE_Q8_0, 32, 34, QUANT_TYPE_Q8_0_F32}, {GGML_TYPE_Q2_K, 256, 84, GGML_TYPE_Q8_K},
        {GGML_TYPE_Q4_K, 256, 144, GGML_TYPE_Q8_K},  {GGML_TYPE_IQ2_XXS, 256, 66, GGML_TYPE_Q8_K},
        {GGML_TYPE_MXFP4, 32, 17, QUANT_TYPE_Q8_0_F32}, {GGML_TYPE_Q8_K, 256, 292, -1},
        {QUANT_TYPE_Q8_0_F32, 32, 36, -1},
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const quant_traits *t = quant_get(expect[i].type);
        CHECK(t != NULL, "type %d missing", expect[i].type);
        if (!t) continue;
        CHECK(t->type == expect[i].type && t->blck == expect[i].blck && t->bytes == expect[i].bytes,
              "%s geometry", t->name);
        CHECK(t->dequant != NULL, "%s dequant", t->name);
        if (expect[i].vdt >= 0) {
            CHECK(t->vec_dot_type == expect[i].vdt, "%s vec_dot_type %d", t->name, t->vec_dot_type);
            CHECK(t->dot != NULL && t->quant != NULL, "%s dot/quant", t->name);
        }
    }
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 4096) == 4352, "q8_0 row 4096");
    CHECK(quant_row_bytes(GGML_TYPE_IQ2_XXS, 4096) == 1056, "iq2_xxs row 4096 (spec §4.3)");
    CHECK(quant_row_bytes(GGML_TYPE_Q2_K, 2048) == 672, "q2_K row 2048 (spec §4.3)");
    CHECK(quant_row_bytes(GGML_TYPE_Q4_K, 4096) == 2304, "q4_K row 4096 (spec §4.3)");
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 33) == 0, "q8_0 partial block");
    CHECK(quant_row_bytes(GGML_TYPE_F16, 3) == 6, "f16 row");
    CHECK(quant_nbytes(GGML_TYPE_Q8_0, 33) == 68, "q8_0 nbytes ceil");
    CHECK(quant_nbytes(GGML_TYPE_MXFP4, 64) == 34, "mxfp4 nbytes");
    CHECK(quant_get(3) == NULL && quant_get(-1) == NULL && quant_get(1000) == NULL, "unknown type");
    CHECK(quant_row_bytes(3, 32) == 0 && quant_nbytes(3, 32) == 0, "unknown type sizes");
    CHECK(strcmp(quant_name(999), "?") == 0, "unknown name");
    CHECK(strcmp(quant_name(GGML_TYPE_BF16), "bf16") == 0, "bf16 name");
    float x[64] = {0};
    uint8_t out[512];
    CHECK(quant_quantize_activation(GGML_TYPE_Q8_K, x, out, 64) != 0, "q8_K needs 256");
    CHECK(quant_quantize_activation(GGML_TYPE_Q4_K, x, out, 256) != 0, "q4_K is not an activation type");
    CHECK(quant_quantize_activation(QUANT_TYPE_Q8_0_F32, x, out, 64) == 0, "q8_0_f32 activation");
}

/* ---------------- f16 / bf16 ---------------- */

static void test_f16_bf16(void)
{
    CHECK(f32_to_f16(1.0f) == 0x3C00, "1.0");
    CHECK(f32_to_f16(-2.0f) == 0xC000, "-2");
    CHECK(f32_to_f16(-0.0f) == 0x8000, "-0");
    CHECK(f32_to_f16(65504.0f) == 0x7BFF, "max");
    CHECK(f32_to_f16(65520.0f) == 0x7C00, "overflow tie -> inf");
    CHECK(f32_to_f16(65519.0f) == 0x7BFF, "below tie");
    CHECK(f32_to_f16(1e10f) == 0x7C00 && f32_to_f16(-INFINITY) == 0xFC00, "overflow/inf");
    CHECK(f32_to_f16(5.9604645e-8f) == 0x0001, "min subnormal");
    CHECK(f32_to_f16(2.9802322e-8f) == 0x0000, "half of min subnormal ties to 0");
    CHECK(f32_to_f16(3 * 2.9802322e-8f) == 0x0002, "1.5 min subnormal ties to 2");
    CHECK(f32_to_f16(6.097555e-5f) == 0x03FF, "largest subnormal");
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00, "tie to even down");
    CHECK(f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02, "tie to even up");
    CHECK(f16_to_f32(0x0001) == 5.9604645e-8f, "decode subnormal");
    CHECK(f16_to_f32(0x8001) == -5.9604645e-8f, "decode negative subnormal");
    CHECK(isinf(f16_to_f32(0x7C00)) && f16_to_f32(0xFC00) < 0, "decode inf");
    CHECK(isnan(f16_to_f32(0x7E00)) && isnan(f16_to_f32(0x7C01)), "decode nan");
    uint16_t hn = f32_to_f16(NAN);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF), "encode nan stays nan");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {   /* every finite half round-trips */
        if ((h & 0x7C00) == 0x7C00) continue;
        if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    /* random floats: the result is the nearer neighbour */
    for (int i = 0; i < 20000; i++) {
        float f = ((float)test_rand() / (1 << 24) - 0.5f) * ldexpf(1.0f, (int)(test_rand() % 40) - 26);
        uint16_t h = f32_to_f16(f);
        float v = f16_to_f32(h);
        float up = f16_to_f32((uint16_t)(h + 1)), dn = f16_to_f32((uint16_t)(h - 1));
        if ((h & 0x7FFF) != 0 && (h & 0x7FFF) < 0x7BFF)
            CHECK(fabsf(v - f) <= fabsf(up - f) && fabsf(v - f) <= fabsf(dn - f), "f16 nearest %g", f);
    }
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3F80, "bf16 tie to even");
    CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3F82, "bf16 tie up");
    CHECK(f32_to_bf16(1.0f + 1.5f / 256) == 0x3F81, "bf16 above tie");
    CHECK(bf16_to_f32(0x3F80) == 1.0f && bf16_to_f32(0xC000) == -2.0f, "bf16 decode");
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))), "bf16 nan");
    CHECK(f32_to_bf16(INFINITY) == 0x7F80, "bf16 inf");
}

/* ---------------- minifloats against the fixture ---------------- */

static json_t *load_fixture(void)
{
    json_error_t err;
    json_t *root = json_load_file("tests/fixtures/primitives/primitives.json", 0, &err);
    CHECK(root != NULL, "cannot load primitives fixture: %s", err.text);
    return root;
}

static float ceil_pow2_from_bits(float a)
{
    uint32_t u;
    memcpy(&u, &a, 4);
    int e = (int)((u >> 23) & 0xFF) - 127 + ((u & 0x7FFFFF) != 0);
    return ldexpf(1.0f, e);
}

static float fp8_roundtrip(float u) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(u)); }
static float fp4_roundtrip(float u) { return e2m1_to_f32(f32_to_e2m1(u)); }

/* One of the fixture's block simulations: per block, scale = the power of
 * two at or above max(amax, amax_floor) / fmax; each value clamped to
 * +-fmax after scaling, rounded through the format and scaled back. The
 * scales and the outputs must match the fixture bit for bit. */
static void check_block_sim(const json_t *root, const char *key, int block, float fmax, float amax_floor,
                            float (*roundtrip)(float), int min_checks)
{
    const json_t *sim = json_object_get(root, key);
    const json_t *in = json_object_get(sim, "input"), *out = json_object_get(sim, "output");
    const json_t *sc = json_object_get(sim, "scales");
    int nbad = 0, nchk = 0;
    for (size_t r = 0; r < json_array_size(in); r++) {
        const json_t *row = json_array_get(in, r), *orow = json_array_get(out, r);
        for (size_t b = 0; b * block < json_array_size(row); b++) {
            float v[64], amax = 0;
            for (int i = 0; i < block; i++) {
                v[i] = (float)json_number_value(json_array_get(row, b * block + i));
                amax = fmaxf(amax, fabsf(v[i]));
            }
            amax = fmaxf(amax, amax_floor);
            float s = ceil_pow2_from_bits(amax * (1.0f / fmax));
            CHECK(s == (float)json_number_value(json_array_get(json_array_get(sc, r), b)), "%s scale row %zu block %zu",
                  key, r, b);
            for (int i = 0; i < block; i++) {
                float got = roundtrip(fminf(fmaxf(v[i] / s, -fmax), fmax)) * s;
                float want = (float)json_number_value(json_array_get(orow, b * block + i));
                nchk++;
                if (!(got == want)) nbad++;
            }
        }
    }
    CHECK(nchk > min_checks && nbad == 0, "%s: %d of %d differ", key, nbad, nchk);
}

static void test_fp8_fp4_fixture(json_t *root)
{
    json_t *formats = json_object_get(root, "formats");
    json_t *vals = json_object_get(json_object_get(formats, "e4m3fn_decode"), "values");
    CHECK(json_array_size(vals) == 256, "e4m3 table size");
    for (int c = 0; c < 256 && c < (int)json_array_size(vals); c++) {
        json_t *v = json_array_get(vals, c);
        float got = fp8_e4m3_to_f32((uint8_t)c);
        if (json_is_null(v)) {
            CHECK(isnan(got), "e4m3 %02x should be NaN", c);
            CHECK(fp8_e4m3_to_f32_nan0((uint8_t)c) == 0.0f, "e4m3 nan0 %02x", c);
        } else {
            float want = (float)json_number_value(v);
            CHECK(got == want && signbit(got) == signbit(want), "e4m3 %02x: %g vs %g", c, got, want);
            CHECK(f32_to_fp8_e4m3(got) == c, "e4m3 encode(decode(%02x)) = %02x", c, f32_to_fp8_e4m3(got));
        }
    }
    vals = json_object_get(json_object_get(formats, "e2m1_decode"), "values");
    for (int c = 0; c < 16; c++) {
        float want = (float)json_number_value(json_array_get(vals, c));
        CHECK(same_float(e2m1_to_f32((uint8_t)c), want), "e2m1 %d", c);
        CHECK(e2m1_to_f32((uint8_t)(c | 0xF0)) == e2m1_to_f32((uint8_t)c), "e2m1 uses low nibble");
        if (c != 8) CHECK(f32_to_e2m1(want) == c, "e2m1 encode %g", want);
    }
    vals = json_object_get(json_object_get(formats, "e8m0_decode"), "torch_float8_e8m0fnu_decode");
    for (int b = 0; b < 256 && b < (int)json_array_size(vals); b++) {
        json_t *v = json_array_get(vals, b);
        if (json_is_null(v)) CHECK(isnan(e8m0_to_f32((uint8_t)b)), "e8m0 %d NaN", b);
        else CHECK(e8m0_to_f32((uint8_t)b) == (float)json_number_value(v), "e8m0 %d", b);
    }
    CHECK(e8m0_to_f32(0) == ldexpf(1.0f, -127), "e8m0 byte 0 = 2^-127");

    /* §6.4 FP8 round-trip simulation, block 64, and §6.5 FP4, block 32: bit for bit */
    check_block_sim(root, "fp8_e4m3_block64", 64, 448.0f, 1e-4f, fp8_roundtrip, 1000);
    check_block_sim(root, "fp4_e2m1_block32", 32, 6.0f, 6.0f * ldexpf(1.0f, -126), fp4_roundtrip, 500);
}

static int hexbyte(const char *s)
{
    unsigned v;
    return sscanf(s, "%2x", &v) == 1 ? (int)v : -1;
}

/* §4.5 official weight formats: FP8 with 128x128 E8M0 scales, and packed FP4
 * experts converted losslessly to MXFP4. */
static void test_official_weights(json_t *root)
{
    json_t *wd = json_object_get(root, "weight_dequant");
    json_t *f8 = json_object_get(wd, "fp8_block128");
    const char *hex = json_string_value(json_object_get(f8, "codes_hex"));
    json_t *shape = json_object_get(f8, "shape");
    int rows = (int)json_integer_value(json_array_get(shape, 0)), cols = (int)json_integer_value(json_array_get(shape, 1));
    json_t *sb = json_object_get(f8, "scale_bytes");
    CHECK(hex && (int)strlen(hex) == 2 * rows * cols, "fp8 codes size");
    if (hex && (int)strlen(hex) == 2 * rows * cols) {
        json_t *sums = json_object_get(f8, "row_sums_f64");
        for (int o = 0; o < rows; o++) {
            double sum = 0;
            for (int i = 0; i < cols; i++) {
                uint8_t code = (uint8_t)hexbyte(hex + 2 * (o * cols + i));
                json_t *srow = json_array_get(sb, (size_t)(o / 128));
                uint8_t sbyte = (uint8_t)json_integer_value(json_is_array(srow) ? json_array_get(srow, (size_t)(i / 128))
                                                                                : json_array_get(sb, (size_t)(i / 128)));
                sum += (double)fp8_e4m3_to_f32_nan0(code) * (double)e8m0_to_f32(sbyte);
            }
            double want = json_number_value(json_array_get(sums, (size_t)o));
            CHECK(fabs(sum - want) <= 1e-9 * (1 + fabs(want)), "fp8 weight row %d sum %g vs %g", o, sum, want);
        }
        json_t *samples = json_object_get(f8, "samples");
        for (size_t k = 0; k < json_array_size(samples); k++) {
            json_t *smp = json_array_get(samples, k);
            int o = (int)json_integer_value(json_array_get(smp, 0)), i = (int)json_integer_value(json_array_get(smp, 1));
            json_t *srow = json_array_get(sb, (size_t)(o / 128));
            uint8_t sbyte = (uint8_t)json_integer_value(json_is_array(srow) ? json_array_get(srow, (size_t)(i / 128))
                                                                            : json_array_get(sb, (size_t)(i / 128)));
            float got = fp8_e4m3_to_f32_nan0((uint8_t)hexbyte(hex + 2 * (o * cols + i))) * e8m0_to_f32(sbyte);
            CHECK(got == (float)json_number_value(json_array_get(smp, 2)), "fp8 weight sample %d,%d", o, i);
        }
    }

    json_t *f4 = json_object_get(wd, "fp4_block32");
    hex = json_string_value(json_object_get(f4, "packed_hex"));
    shape = json_object_get(f4, "shape");
    rows = (int)json_integer_value(json_array_get(shape, 0));
    cols = (int)json_integer_value(json_array_get(shape, 1));
    sb = json_object_get(f4, "scale_bytes");
    json_t *deq = json_object_get(f4, "dequant");
    int n = rows * cols;
    CHECK(hex && (int)strlen(hex) == n, "fp4 packed size");
    if (!hex || (int)strlen(hex) != n) return;
    uint8_t *packed = malloc((size_t)n / 2), *scales = malloc((size_t)n / 32);
    for (int k = 0; k < n / 2; k++) packed[k] = (uint8_t)hexbyte(hex + 2 * k);
    for (int o = 0; o < rows; o++)
        for (int b = 0; b < cols / 32; b++)
            scales[o * (cols / 32) + b] = (uint8_t)json_integer_value(json_array_get(json_array_get(sb, (size_t)o), (size_t)b));
    uint8_t *mx = malloc(quant_row_bytes(GGML_TYPE_MXFP4, n));
    float *y = malloc((size_t)n * sizeof(float));
    mxfp4_from_official(packed, scales, mx, n);
    quant_get(GGML_TYPE_MXFP4)->dequant(mx, y, n);
    int nbad = 0;
    for (int o = 0; o < rows; o++)
        for (int i = 0; i < cols; i++) {
            float want = (float)json_number_value(json_array_get(json_array_get(deq, (size_t)o), (size_t)i));
            if (!(y[o * cols + i] == want)) nbad++;
        }
    CHECK(nbad == 0, "official FP4 -> MXFP4 -> f32: %d of %d differ", nbad, n);
    /* lossless: quantizing the decoded values again gives the same values */
    uint8_t *mx2 = malloc(quant_row_bytes(GGML_TYPE_MXFP4, n));
    float *y2 = malloc((size_t)n * sizeof(float));
    quant_get(GGML_TYPE_MXFP4)->quant(y, mx2, n);
    quant_get(GGML_TYPE_MXFP4)->dequant(mx2, y2, n);
    nbad = 0;
    for (int k = 0; k < n; k++) if (y2[k] != y[k]) nbad++;
    CHECK(nbad == 0, "mxfp4 quantizer does not reproduce exactly representable values: %d", nbad);
    free(packed); free(scales); free(mx); free(y); free(mx2); free(y2);
}

static void test_minifloat_edges(void)
{
    CHECK(f32_to_fp8_e4m3(448.0f) == 0x7E && f32_to_fp8_e4m3(-448.0f) == 0xFE, "fp8 max");
    CHECK(f32_to_fp8_e4m3(500.0f) == 0x7E && f32_to_fp8_e4m3(1e30f) == 0x7E, "fp8 saturates");
    CHECK(f32_to_fp8_e4m3(INFINITY) == 0x7E && f32_to_fp8_e4m3(-INFINITY) == 0xFE, "fp8 inf saturates");
    CHECK((f32_to_fp8_e4m3(NAN) & 0x7F) == 0x7F, "fp8 nan");
    CHECK(f32_to_fp8_e4m3(ldexpf(1, -9)) == 0x01, "fp8 min subnormal");
    CHECK(f32_to_fp8_e4m3(ldexpf(1, -10)) == 0x00, "fp8 tie to 0");
    CHECK(f32_to_fp8_e4m3(3 * ldexpf(1, -10)) == 0x02, "fp8 subnormal tie to even");
    CHECK(f32_to_fp8_e4m3(ldexpf(1, -20)) == 0x00 && f32_to_fp8_e4m3(-ldexpf(1, -20)) == 0x80, "fp8 underflow");
    CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38, "fp8 tie 1+1/16 -> 1 (even)");
    CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3A, "fp8 tie 1+3/16 -> 1.25 (even)");
    CHECK(f32_to_fp8_e4m3(432.0f) == 0x7E, "fp8 tie 416/448 -> 448 (even code)");
    CHECK(fp8_e4m3_to_f32(0x7E) == 448.0f && fp8_e4m3_to_f32(0x08) == ldexpf(1, -6), "fp8 decode");
    static const struct { float in; uint8_t code; } e2[] = {
        {0.25f, 0}, {0.2501f, 1}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6},
        {5.0f, 6}, {5.01f, 7}, {100.0f, 7}, {-0.3f, 9}, {-6.0f, 15}, {-0.0f, 8},
    };
    for (size_t i = 0; i < sizeof e2 / sizeof e2[0]; i++)
        CHECK(f32_to_e2m1(e2[i].in) == e2[i].code, "e2m1 encode %g -> %d", e2[i].in, f32_to_e2m1(e2[i].in));
}

/* ---------------- hand-built blocks ---------------- */

static void test_q8_blocks(void)
{
    uint8_t blk[34];
    put16(blk, f32_to_f16(0.25f));
    for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)(i * 9 - 128);
    float out[256];
    quant_get(GGML_TYPE_Q8_0)->dequant(blk, out, 32);
    for (int i = 0; i < 32; i++) CHECK(out[i] == 0.25f * (int8_t)(i * 9 - 128), "q8_0 elem %d", i);

    uint8_t a[36];
    float d = 0.0371f;
    memcpy(a, &d, 4);
    for (int i = 0; i < 32; i++) a[4 + i] = (uint8_t)(int8_t)(100 - 7 * i);
    quant_get(QUANT_TYPE_Q8_0_F32)->dequant(a, out, 32);
    for (int i = 0; i < 32; i++) CHECK(out[i] == d * (int8_t)(100 - 7 * i), "q8_0_f32 elem %d", i);

    uint8_t k[292];
    d = 0.5f;
    memcpy(k, &d, 4);
    for (int i = 0; i < 256; i++) k[4 + i] = (uint8_t)test_rand();
    quant_get(GGML_TYPE_Q8_K)->dequant(k, out, 256);
    for (int i = 0; i < 256; i++) CHECK(out[i] == 0.5f * (int8_t)k[4 + i], "q8_K elem %d", i);

    /* Q8_K quantizer (spec §5.6): the signed max maps to -127, bsums are block sums */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)((int)(test_rand() % 2001) - 1000) / 300.0f;
    x[77] = 5.0f;
    quant_get(GGML_TYPE_Q8_K)->quant(x, k, 256);
    memcpy(&d, k, 4);
    CHECK(d == 1.0f / (-127.0f / 5.0f), "q8_K d = 1/is");
    CHECK((int8_t)k[4 + 77] == -127, "q8_K max element -> -127");
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int i = 0; i < 16; i++) sum += (int8_t)k[4 + 16 * g + i];
        int16_t bs;
        memcpy(&bs, k + 260 + 2 * g, 2);
        CHECK(bs == sum, "q8_K bsums[%d]", g);
    }
    memset(x, 0, sizeof x);
    quant_get(GGML_TYPE_Q8_K)->quant(x, k, 256);
    memcpy(&d, k, 4);
    CHECK(d == 0.0f && k[4] == 0, "q8_K zero block");
}

static void test_q2_K_block(void)
{
    uint8_t blk[84];
    for (int i = 0; i < 80; i++) blk[i] = (uint8_t)test_rand();
    put16(blk + 80, f32_to_f16(0.5f));
    put16(blk + 82, f32_to_f16(0.125f));
    float out[256];
    quant_get(GGML_TYPE_Q2_K)->dequant(blk, out, 256);
    for (int n = 0; n < 2; n++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) {
                int e = 128 * n + 32 * s + l;
                int c = (blk[16 + 32 * n + l] >> (2 * s)) & 3;
                int b = 8 * n + 2 * s + (l >= 16);
                float want = 0.5f * (blk[b] & 0xF) * c - 0.125f * (blk[b] >> 4);
                CHECK(b == e / 16, "sub-block index");
                CHECK(fabsf(out[e] - want) <= 1e-6f, "q2_K elem %d: %g vs %g", e, out[e], want);
            }
}

static void test_q4_K_block(void)
{
    uint8_t blk[144];
    put16(blk, f32_to_f16(0.0625f));
    put16(blk + 2, f32_to_f16(0.03125f));
    for (int i = 4; i < 144; i++) blk[i] = (uint8_t)test_rand();
    const uint8_t *sc = blk + 4, *qs = blk + 16;
    float out[256];
    quant_get(GGML_TYPE_Q4_K)->dequant(blk, out, 256);
    for (int j = 0; j < 8; j++) {
        int s, m;
        if (j < 4) { s = sc[j] & 63; m = sc[j + 4] & 63; }
        else { s = (sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4); m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4); }
        for (int l = 0; l < 32; l++) {
            int c = (qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0xF;
            float want = 0.0625f * s * c - 0.03125f * m;
            CHECK(fabsf(out[32 * j + l] - want) <= 1e-6f, "q4_K elem %d", 32 * j + l);
        }
    }
}

static void test_mxfp4_block(json_t *root)
{
    json_t *vals = json_object_get(json_object_get(json_object_get(root, "formats"), "e2m1_decode"), "values");
    uint8_t blk[17] = {120};
    for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    float out[32];
    quant_get(GGML_TYPE_MXFP4)->dequant(blk, out, 32);
    for (int j = 0; j < 16; j++) {
        float lo = (float)json_number_value(json_array_get(vals, (size_t)j)) * ldexpf(1, 120 - 127);
        float hi = (float)json_number_value(json_array_get(vals, (size_t)(15 - j))) * ldexpf(1, 120 - 127);
        CHECK(out[j] == lo, "mxfp4 low nibble %d -> element %d", j, j);
        CHECK(out[j + 16] == hi, "mxfp4 high nibble %d -> element %d", j, j + 16);
    }
    /* extreme scale bytes decode without overflow trouble */
    blk[0] = 0;
    quant_get(GGML_TYPE_MXFP4)->dequant(blk, out, 32);
    CHECK(out[7] == 6.0f * ldexpf(1, -127), "mxfp4 e=0 is 2^-127");
    blk[0] = 254;
    quant_get(GGML_TYPE_MXFP4)->dequant(blk, out, 32);
    CHECK(out[1] == ldexpf(1, 126), "mxfp4 e=254");
    /* official pairwise order -> ggml order */
    uint8_t packed[16], scale = 127, mx[17];
    for (int j = 0; j < 16; j++) packed[j] = (uint8_t)((2 * j) % 16 | (((2 * j + 1) % 16) << 4));
    mxfp4_from_official(packed, &scale, mx, 32);
    quant_get(GGML_TYPE_MXFP4)->dequant(mx, out, 32);
    for (int e = 0; e < 32; e++)
        CHECK(out[e] == (float)json_number_value(json_array_get(vals, (size_t)(e % 16))), "official order element %d", e);
}

/* Blocks produced by ggml's own quantizers (tests/fixtures/primitives/
 * ggml_blocks.json, see its "generator"): our decoders must give exactly
 * ggml's values, our Q8_0 quantizer ggml's bytes, and our quantizers an error
 * on the same input no worse than ggml's (5% slack: only 512 samples). */
static void test_ggml_blocks(void)
{
    json_error_t err;
    json_t *root = json_load_file("tests/fixtures/primitives/ggml_blocks.json", 0, &err);
    CHECK(root != NULL, "cannot load ggml_blocks fixture: %s", err.text);
    if (!root) return;
    int n = (int)json_integer_value(json_object_get(root, "n"));
    json_t *in = json_object_get(root, "input");
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    uint8_t *blocks = malloc((size_t)n * 4), *ours = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) x[i] = (float)json_number_value(json_array_get(in, (size_t)i));
    const char *key;
    json_t *f;
    int nformats = 0;
    json_object_foreach(json_object_get(root, "formats"), key, f) {
        int type = (int)json_integer_value(json_object_get(f, "type"));
        const quant_traits *t = quant_get(type);
        const char *hex = json_string_value(json_object_get(f, "blocks_hex"));
        json_t *deq = json_object_get(f, "dequant");
        CHECK(t && hex && strlen(hex) == 2 * quant_row_bytes(type, n), "%s fixture", key);
        if (!t || !hex || strlen(hex) != 2 * quant_row_bytes(type, n)) continue;
        nformats++;
        size_t nb = quant_row_bytes(type, n);
        for (size_t k = 0; k < nb; k++) blocks[k] = (uint8_t)hexbyte(hex + 2 * k);
        t->dequant(blocks, y, n);
        int bad = 0;
        double e_ggml = 0, e_ours = 0;
        for (int i = 0; i < n; i++) {
            float want = (float)json_number_value(json_array_get(deq, (size_t)i));
            if (y[i] != want) bad++;
            e_ggml += (double)(want - x[i]) * (want - x[i]);
        }
        CHECK(bad == 0, "%s: %d of %d elements decode differently from ggml", key, bad, n);
        t->quant(x, ours, n);
        if (type == GGML_TYPE_Q8_0) CHECK(memcmp(ours, blocks, nb) == 0, "q8_0 bytes differ from ggml's");
        t->dequant(ours, y, n);
        for (int i = 0; i < n; i++) e_ours += (double)(y[i] - x[i]) * (y[i] - x[i]);
        printf("  %-8s vs ggml on its fixture: rmse %.6f (ggml %.6f)\n", key, sqrt(e_ours / n), sqrt(e_ggml / n));
        CHECK(e_ours <= 1.1025 * e_ggml, "%s quantizer worse than ggml's: %g vs %g", key, e_ours, e_ggml);
    }
    CHECK(nformats == 5, "ggml fixture has %d formats", nformats);
    free(x); free(y); free(blocks); free(ours);
    json_decref(root);
}

int main(void)
{
    test_rand_seed(12345);
    json_t *root = load_fixture();
    test_table();
    test_f16_bf16();
    test_minifloat_edges();
    if (root) {
        test_fp8_fp4_fixture(root);
        test_official_weights(root);
        test_mxfp4_block(root);
    }
    test_q8_blocks();
    test_q2_K_block();
    test_q4_K_block();
    test_ggml_blocks();
    json_decref(root);
    return test_finish("test_quant");
}
