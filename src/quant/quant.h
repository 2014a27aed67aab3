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

/* ---- minke additions (docs/quant.md) ---- */

/* Activation-only block for Q8_0 and MXFP4 weights: 32 int8 with an f32
 * scale (ds4 keeps d_x in f32, spec §5.7). Not a ggml type, never in files;
 * quant_get() knows it. Layout: f32 d, int8 q[32] (36 bytes). */
#define QUANT_TYPE_Q8_0_F32 64

/* Quantize an f32 activation row of n elements to vec_dot_type (the value
 * a weight type's traits give). F32 copies. Returns 0, or -1 if the type is
 * not an activation format or n is not a multiple of its block. */
int quant_quantize_activation(int vec_dot_type, const float *x, void *out, int64_t n);

/* y[r] = dot(row r of W, x) for rows x cols weights of the given type.
 * quant_matvec quantizes x itself (malloc); the _prequant form takes x
 * already quantized to the type's vec_dot_type (quantize once, thread rows). */
int quant_matvec(int type, const void *W, int64_t rows, int64_t cols, const float *x, float *y);
void quant_matvec_prequant(int type, const void *W, int64_t rows, int64_t cols,
                           const void *xq, float *y);

/* Lossless MXFP4 from the official FP4 expert layout (spec §4.5): packed
 * holds n/2 bytes, element 2j in the low nibble of byte j, 2j+1 in the high
 * nibble; scales holds n/32 E8M0 bytes. dst receives n/32 MXFP4 blocks
 * (ggml order: low nibbles elements 0..15, high nibbles 16..31). */
void mxfp4_from_official(const uint8_t *packed, const uint8_t *scales, void *dst, int64_t n);

/* FP8 E4M3FN with a NaN code (0x7F/0xFF) decoded to 0, as the official
 * checkpoint conversion does (spec §4.5). */
float fp8_e4m3_to_f32_nan0(uint8_t v);

/* Read-only lookup tables, for backends that decode the formats themselves
 * (e.g. uploading them to a GPU): the IQ2_XXS lattice (256 u64, 8 magnitude
 * bytes each, byte j = element j), its sign table (128 bytes, bit 7 = parity)
 * and the MXFP4 values (E2M1 times 2, 16 int8; scale 2^(e-128)). */
const uint64_t *quant_iq2xxs_grid(void);
const uint8_t *quant_iq2xxs_ksigns(void);
const int8_t *quant_mxfp4_kvalues(void);

#endif
