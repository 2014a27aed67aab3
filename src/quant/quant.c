/* quant.c: the table of block-format traits (quant.h) and the helpers built
 * on it: activation quantization, row/byte sizes and the single-threaded
 * matvec. Dots go through small dispatchers that pick the AVX2 kernel or the
 * scalar reference according to quant_use_simd, so tests can compare them.
 */
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"

int quant_use_simd = 1;

#define DISPATCH(name)                                             \
    void name(int64_t n, float *s, const void *w, const void *a)   \
    {                                                              \
        if (quant_use_simd) name##_avx2(n, s, w, a);               \
        else name##_scalar(n, s, w, a);                            \
    }

#ifdef __AVX2__
DISPATCH(dot_f32)
DISPATCH(dot_f16)
DISPATCH(dot_bf16)
DISPATCH(dot_q8_0_q8_0f)
DISPATCH(dot_q2_K_q8_K)
DISPATCH(dot_q4_K_q8_K)
DISPATCH(dot_iq2_xxs_q8_K)
DISPATCH(dot_mxfp4_q8_0f)
#else
#define SCALAR_ONLY(name) \
    void name(int64_t n, float *s, const void *w, const void *a) { name##_scalar(n, s, w, a); }
SCALAR_ONLY(dot_f32)
SCALAR_ONLY(dot_f16)
SCALAR_ONLY(dot_bf16)
SCALAR_ONLY(dot_q8_0_q8_0f)
SCALAR_ONLY(dot_q2_K_q8_K)
SCALAR_ONLY(dot_q4_K_q8_K)
SCALAR_ONLY(dot_iq2_xxs_q8_K)
SCALAR_ONLY(dot_mxfp4_q8_0f)
#endif

static const quant_traits traits_table[] = {
    { "f32", GGML_TYPE_F32, 1, 4, 0, dequant_f32, quant_f32, GGML_TYPE_F32, dot_f32 },
    { "f16", GGML_TYPE_F16, 1, 2, 0, dequant_f16, quant_f16, GGML_TYPE_F32, dot_f16 },
    { "bf16", GGML_TYPE_BF16, 1, 2, 0, dequant_bf16, quant_bf16, GGML_TYPE_F32, dot_bf16 },
    { "i32", GGML_TYPE_I32, 1, 4, 0, dequant_i32, NULL, GGML_TYPE_I32, NULL },
    { "q8_0", GGML_TYPE_Q8_0, 32, 34, 1, dequant_q8_0, quant_q8_0, QUANT_TYPE_Q8_0_F32, dot_q8_0_q8_0f },
    { "q2_K", GGML_TYPE_Q2_K, 256, 84, 1, dequant_q2_K, quant_q2_K, GGML_TYPE_Q8_K, dot_q2_K_q8_K },
    { "q4_K", GGML_TYPE_Q4_K, 256, 144, 1, dequant_q4_K, quant_q4_K, GGML_TYPE_Q8_K, dot_q4_K_q8_K },
    { "iq2_xxs", GGML_TYPE_IQ2_XXS, 256, 66, 1, dequant_iq2_xxs, quant_iq2_xxs, GGML_TYPE_Q8_K, dot_iq2_xxs_q8_K },
    { "mxfp4", GGML_TYPE_MXFP4, 32, 17, 1, dequant_mxfp4, quant_mxfp4, QUANT_TYPE_Q8_0_F32, dot_mxfp4_q8_0f },
    { "q8_K", GGML_TYPE_Q8_K, 256, 292, 1, dequant_q8_K, quant_q8_K, GGML_TYPE_Q8_K, NULL },
    { "q8_0_f32", QUANT_TYPE_Q8_0_F32, 32, 36, 1, dequant_q8_0f, quant_q8_0f, QUANT_TYPE_Q8_0_F32, NULL },
};

const quant_traits *quant_get(int type)
{
    for (size_t i = 0; i < sizeof traits_table / sizeof traits_table[0]; i++)
        if (traits_table[i].type == type) return &traits_table[i];
    return NULL;
}

const char *quant_name(int type)
{
    const quant_traits *t = quant_get(type);
    return t ? t->name : "?";
}

uint64_t quant_row_bytes(int type, int64_t n)
{
    const quant_traits *t = quant_get(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return (uint64_t)(n / t->blck) * t->bytes;
}

uint64_t quant_nbytes(int type, uint64_t nel)
{
    const quant_traits *t = quant_get(type);
    if (!t) return 0;
    return (nel + (uint64_t)t->blck - 1) / (uint64_t)t->blck * t->bytes;
}

int quant_quantize_activation(int vec_dot_type, const float *x, void *out, int64_t n)
{
    const quant_traits *t = quant_get(vec_dot_type);
    if (!t || !t->quant || n < 0 || n % t->blck) return -1;
    if (vec_dot_type != GGML_TYPE_F32 && vec_dot_type != GGML_TYPE_Q8_K &&
        vec_dot_type != QUANT_TYPE_Q8_0_F32)
        return -1;
    t->quant(x, out, n);
    return 0;
}

void quant_matvec_prequant(int type, const void *W, int64_t rows, int64_t cols,
                           const void *xq, float *y)
{
    const quant_traits *t = quant_get(type);
    size_t rb = (size_t)quant_row_bytes(type, cols);
    const uint8_t *w = W;
    for (int64_t r = 0; r < rows; r++) t->dot(cols, &y[r], w + (size_t)r * rb, xq);
}

int quant_matvec(int type, const void *W, int64_t rows, int64_t cols, const float *x, float *y)
{
    const quant_traits *t = quant_get(type);
    if (!t || !t->dot || quant_row_bytes(type, cols) == 0) return -1;
    const quant_traits *at = quant_get(t->vec_dot_type);
    if (!at || cols % at->blck) return -1;
    if (t->vec_dot_type == GGML_TYPE_F32) {
        quant_matvec_prequant(type, W, rows, cols, x, y);
        return 0;
    }
    void *xq = malloc((size_t)quant_row_bytes(t->vec_dot_type, cols));
    if (!xq) return -1;
    quant_quantize_activation(t->vec_dot_type, x, xq, cols);
    quant_matvec_prequant(type, W, rows, cols, xq, y);
    free(xq);
    return 0;
}

const uint64_t *quant_iq2xxs_grid(void) { return iq2xxs_grid_data; }
const uint8_t *quant_iq2xxs_ksigns(void) { return ksigns_iq2xs_data; }
const int8_t *quant_mxfp4_kvalues(void) { return mxfp4_kvalues; }
