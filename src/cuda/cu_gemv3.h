/* cu_gemv3.h: one-token products with exact activations on dp4a
 * (cu_gemv3.cu): the dense Q8_0 GEMV that cu_gemv tries first, and the
 * routed experts of one decode token (gate + up + SwiGLU, then down summed
 * over the experts) that the forward pass calls directly. */
#ifndef MINKE_CU_GEMV3_H
#define MINKE_CU_GEMV3_H

#include "cuda/cu_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MINKE_CUDA_G3: 0 leaves these products to the f32 GEMVs, 1 keeps the MoE
 * kernels only, 2 (default) the dense one too where it is faster, 3 the dense
 * one for every shape; cu_gemv3_set for the checks (-1: the environment). */
int cu_gemv3_enabled(void);
void cu_gemv3_set(int v);
/* MINKE_CUDA_G3S: Q8_0R products streamed through shared memory by bulk
 * copies (sm_90; default 1); cu_gemv3s_set for the checks (-1: the environment). */
void cu_gemv3s_set(int v);
int cu_gemv3_tables_init(const uint64_t *grid);
/* Dense Q8_0 / Q8_0R at ntok = 1 with act_f32 (cu_gemv tries it first); 0 when it does not apply. */
int cu_gemv3(const cu_gemv_args *g, cudaStream_t st);
/* bytes of n inputs as split items (cu_gemv_args.xitems / oitems; n a multiple of 32) */
size_t cu_gemv3_items_bytes(int64_t n);
/* MINKE_CUDA_G3_ITEMS: 1 (default) out_a and out_b of a decode token take their inputs as
 * items split by the kernels that wrote them, 0 split them themselves (the same bits) */
int cu_gemv3_items_enabled(void);
/* The routed experts of one token: 1 when these formats and shapes have the kernels below. */
int cu_moe_dec_supported(int gate_type, int up_type, int down_type, int64_t in, int64_t ff, int nsel);
/* mid[e][ff] = swiglu(gate_e x, up_e x) * rw[e] for the nsel experts sel[] (limit: the clamp).
 * IQ2R with 16-byte rows on sm_90 goes to the tensor cores (MINKE_CUDA_MOE_MMA: 1 default, 2 sixteen
 * warps, 0 the dp4a kernel; cu_moe_mma_set for the checks; -1: the environment). */
void cu_moe_mma_set(int v);
void cu_moe_dec_glu(int wtype, const void *wg, const void *wu, uint64_t row_bytes, uint64_t expert_bytes, int64_t ff,
                    int64_t in, const float *x, const int *sel, const float *rw, int nsel, float limit, float *mid,
                    cudaStream_t st);
/* out[rows] = sum over e of down_e mid[e] (Q2_K). Call it after
 * cu_moe_dec_glu with the same sel on the same stream (or with sel written
 * before that): on sm_90 the streamed kernel reads sel before its PDL wait
 * (MINKE_CUDA_DOWN_S, default 1; cu_moe_down_stream_set). Without it:
 * MINKE_CUDA_DOWN_SR = 4 (default), 8 or 12: the next rows' codes in a
 * shared-memory ring, 0 in registers. All give the same bits
 * (cu_moe_down_sr_set for the checks; -1: the environment). */
void cu_moe_down_sr_set(int v);
void cu_moe_down_stream_set(int v);
void cu_moe_dec_down(const void *wd, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows, int64_t ff,
                     const float *mid, const int *sel, int nsel, float *out, cudaStream_t st);
/* 1 when this device runs the sm_90 kernels that stream weights by bulk copies */
int cu_gemv3_bulk_ok(void);

/* Q4_K and MXFP4 experts of one token (cu_moes.cu, sm_90): the same
 * contracts as cu_moe_dec_glu / cu_moe_dec_down (mid[e][ff] = swiglu(gate_e
 * x, up_e x) rw[e]; out = the sum over the slots of down_e mid[e]; the down
 * after the gate + up with the same sel). cu_moes_supported: 1 when the
 * formats, shapes and row sizes have these kernels (MINKE_CUDA_MOES=0 turns
 * them off; cu_moes_set for the checks, -1: the environment). */
int cu_moes_supported(int gate_type, int up_type, int down_type, int64_t in, int64_t ff, int nsel,
                      uint64_t gate_row_bytes, uint64_t down_row_bytes);
void cu_moes_set(int v);
void cu_moes_glu(int wtype, const void *wg, const void *wu, uint64_t row_bytes, uint64_t expert_bytes, int64_t ff,
                 int64_t in, const float *x, const int *sel, const float *rw, int nsel, float limit, float *mid,
                 cudaStream_t st);
void cu_moes_down(int wtype, const void *wd, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows, int64_t ff,
                  const float *mid, const int *sel, int nsel, float *out, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
