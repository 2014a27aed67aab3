/* quant_multi.h: weight x several-activation-rows products (prefill).
 *
 * quant_traits.dot takes one weight row and one activation row, so a batch
 * of T tokens decodes every weight block T times. quant_matmul_prequant
 * decodes a block once and applies it to a tile of tokens. The float
 * arithmetic of each (row, token) pair is kept exactly that of the
 * per-pair dot the traits give under the current quant_use_simd (same
 * per-block float operations in the same order; only exact integer partial
 * sums are regrouped), so results are bit-identical to calling
 * quant_get(type)->dot for every pair: chunked prefill stays equal to
 * token-by-token decode.
 */
#ifndef MINKE_QUANT_MULTI_H
#define MINKE_QUANT_MULTI_H

#include <stddef.h>
#include <stdint.h>

/* y[t*ys + r] = dot(row r of W, activation row t) for r < rows, t < T.
 * W rows are row_bytes apart (a row of cols elements of `type`); xq holds
 * T rows already quantized to the type's vec_dot_type (F32 for the float
 * formats), xq_stride bytes apart. Returns 0, or -1 for a type without a
 * dot or cols not a whole number of blocks (nothing written). */
int quant_matmul_prequant(int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols,
                          const void *xq, size_t xq_stride, int T, float *y, int64_t ys);

/* Whether the AVX-512 VNNI kernels may be used where the CPU has them
 * (Q8_0; bit-identical too). Tests set 0 to exercise the AVX2 kernels. */
extern int quant_multi_use_avx512;

/* Whether `type` has a dedicated multi-token kernel on the current path
 * (others fall back to per-pair dots, with identical results). For tests
 * and benchmarks. */
int quant_matmul_has_kernel(int type);

/* One token, exact numerics: y[r] = the F32 dot of x with row r of W
 * decoded to f32 (dequant), bit for bit, without storing the decoded row.
 * Returns 0, or -1 (nothing written) where `type` has no such kernel on the
 * current path: then decode (quant_dequant_exact) and take the F32 dot. */
int quant_matvec_exact(int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols, const float *x, float *y);

/* dst = quant_get(type)->dequant(src, dst, n), bit for bit, with AVX2
 * kernels where this build has them (src/quant/dequant_fast.c): the exact-
 * activation products decode every weight they read, so this is their
 * decoding speed. Falls back to the traits' dequant (any type it knows). */
void quant_dequant_exact(int type, const void *src, float *dst, int64_t n);
/* Whether quant_dequant_exact has a fast (verified) kernel for `type` on the current path. */
int quant_dequant_exact_is_fast(int type);

#endif
