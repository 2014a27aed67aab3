/* quant.h: the table of block-format type traits (ggml type ids).
 *
 * One entry per format: elements per block, bytes per block, dequantize a
 * row, reference-quantize a row, and the dot product of a weight row with an
 * activation row already quantized to the format's vec_dot_type.
 */
#ifndef MINKE_QUANT_H
#define MINKE_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40
};

typedef struct quant_traits {
    const char *name;
    int type;
    int blck;            /* elements per block */
    size_t bytes;        /* bytes per block */
    int is_quantized;
    /* n is a multiple of blck */
    void (*dequant)(const void *src, float *dst, int64_t n);
    void (*quant)(const float *src, void *dst, int64_t n);  /* NULL for I32 */
    int vec_dot_type;    /* the activation format the dot takes */
    /* *s = dot(weight row w, activation row a) over n elements */
    void (*dot)(int64_t n, float *s, const void *w, const void *a);
} quant_traits;

/* NULL for a type id minke does not know. */
const quant_traits *quant_get(int type);
const char *quant_name(int type);     /* "?" when unknown */
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
uint64_t quant_row_bytes(int type, int64_t n);
/* Bytes of nel elements (ceil to blocks) as the GGUF computes it. */
uint64_t quant_nbytes(int type, uint64_t nel);

/* Scalar conversions used everywhere. */
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);   /* RNE, subnormals, overflow -> inf */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  /* RNE */

/* Official checkpoint minifloats (spec model.md §4.5, §6.4, §6.5). */
float fp8_e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8_e4m3(float f);   /* RNE, saturate to +-448 */
float e8m0_to_f32(uint8_t v);       /* 2^(v-127); 255 = NaN */
float e2m1_to_f32(uint8_t nibble);  /* low 4 bits */
uint8_t f32_to_e2m1(float f);       /* RNE to the E2M1 grid, saturate to +-6 */

/* Whether the AVX2 kernels are in use (tests force the scalar path by setting 0). */
extern int quant_use_simd;

#endif
