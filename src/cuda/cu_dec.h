/* cu_dec.h: the decode-path kernel variants of cu_attn.cu, cu_indexer.cu and
 * cu_comp.cu: the switch back to the previous kernels (for A/B checks on the
 * device, tests/cuda/attn_check.c) and the entry points that are not in
 * cu_ops.h yet.
 *
 * MINKE_CUDA_OLD_KERNELS=<mask> (or cu_dec_old_set) selects the previous
 * kernel of each part; -1 means all of them. Bits: CU_OLD_*.
 */
#ifndef MINKE_CU_DEC_H
#define MINKE_CU_DEC_H

#include <cuda_runtime.h>
#include <stdint.h>

#define CU_OLD_IDX_SCORES 1
#define CU_OLD_IDX_TOPK 2
#define CU_OLD_ATTENTION 4      /* k_attention + k_attn_combine (8 warps per head) */
#define CU_OLD_KV_FINISH 8
#define CU_OLD_QHEAD 16
#define CU_OLD_IDX_Q_PREP 32
#define CU_OLD_COMP_STATE 64

#ifdef __cplusplus
extern "C" {
#endif

/* mask of CU_OLD_* bits; -1 all, 0 none. Overrides the environment. */
void cu_dec_old_set(int mask);
int cu_dec_old(int bit);

/* cu_kv_finish, and with T == 1 also the ring store of cu_raw_store (slot
 * pos % W) in the same launch: returns 1 when it stored the ring row (the
 * caller then skips cu_raw_store), 0 when the caller must still call
 * cu_raw_store after the attention (T > 1: a batch's rows may overwrite ring
 * slots that earlier tokens of the batch still read). */
int cu_kv_finish_ring(const float *kvp, const float *w, int T, int hd, int nrot, const float *inv_freq,
                      const int *pos0p, float eps, int sims, int f16round, float *kv_out, int W, float *ring,
                      cudaStream_t st);

/* floats of `part` that cu_attention's split path uses for T tokens, nh heads
 * of hd dims and up to nsplit splits: T * nh * nsplit * (hd + 2). */
int64_t cu_attention_part_floats(int T, int nh, int hd, int nsplit);

void cu_attn_init(void);

#ifdef __cplusplus
}
#endif
#endif
