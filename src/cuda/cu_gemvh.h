/* cu_gemvh.h: the one-activation-row GEMV for plain-float weights (F16,
 * BF16, F32) in cu_gemvh.cu, which cu_gemv() takes for dense launches with
 * tiles of one row before its generic kernel.
 */
#ifndef MINKE_CU_GEMVH_H
#define MINKE_CU_GEMVH_H

#include "cuda/cu_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when cu_gemvh takes this launch (plain-float weights, dense, nt_hint <= 1,
 * 16-byte aligned rows and activations, at most 2048 16-byte items a row,
 * not turned off); g->items need not be set. */
int cu_gemvh_applies(const cu_gemv_args *g, int ntiles);
/* The product of cu_gemv for such a launch; 0 (nothing enqueued) when it does not apply. */
int cu_gemvh(const cu_gemv_args *g, int ntiles, cudaStream_t st);
/* Tests: the launch schedule (MINKE_CUDA_GEMVH_V, default 0): 0 blocks loop over
 * row groups with the next group's weights requested before the current sums;
 * 1 a block per row group; 2 looping without the early request; 9 off (the
 * generic kernel, as MINKE_CUDA_GEMVH=0). -1: back to the environment's choice.
 * Every schedule gives the same bits. */
void cu_gemvh_set_variant(int v);

#ifdef __cplusplus
}
#endif
#endif
