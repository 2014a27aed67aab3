/* cu_gemvq8.h: the one-token product of dense Q8_0 (Q8_0R) weights with exact
 * activations on the int8 tensor cores (cu_gemvq8.cu); cu_gemv tries it first
 * when MINKE_CUDA_Q8MMA is set (off by default: no faster in the decode step). */
#ifndef MINKE_CU_GEMVQ8_H
#define MINKE_CU_GEMVQ8_H

#include "cuda/cu_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when it launched the product, 0 when it does not apply (the caller runs k_gemvf). */
int cu_gemvq8(const cu_gemv_args *g, cudaStream_t st);
/* MINKE_CUDA_Q8MMA for the checks: 0 off (default), 1 on, 2 on with two steps in flight; -1: the environment. */
void cu_gemvq8_set(int v);

#ifdef __cplusplus
}
#endif

#endif
