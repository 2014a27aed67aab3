/* cu_backend.h: CUDA-only entry points beside the backend ops table, used by
 * `minke bench` (tools/cmd_bench.c) in MINKE_CUDA builds: greedy decode with
 * the argmax on the device (4 bytes back per token instead of the logits),
 * a device description with a measured copy bandwidth, and the bytes of
 * weights resident on the GPU.
 */
#ifndef MINKE_CU_BACKEND_H
#define MINKE_CU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct minke_model;
typedef struct cu_session cu_session;

/* Decode `token` at position pos and return the argmax of the logits,
 * skipping token id `skip` (-1: none). 0 or -1 with minke_last_error(). */
int cu_bench_greedy(struct minke_model *m, void *bs, int32_t token, int pos, int skip, int32_t *next);
/* "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB"; *bw_gbs (if not NULL) gets a measured
 * device-to-device copy rate in GB/s counting read + write bytes. */
int cu_device_info(char *buf, size_t n, double *bw_gbs);
/* weights resident on the GPUs, all of them together */
uint64_t cu_model_weight_bytes(struct minke_model *m);
/* GPUs the model runs on (--gpus); whether it runs collectives (NCCL) */
int cu_model_gpus(struct minke_model *m);
int cu_model_has_comm(struct minke_model *m);
/* CUDA devices on this machine (0: none or no driver) */
int cu_gpu_count(void);
/* bench: 0 skips the all-reduces (a step's compute alone; wrong results with
 * several GPUs, so restore the state afterwards), 1 runs them again */
void cu_bench_set_comm(struct minke_model *m, void *bs, int on);
/* bench: the bytes of a KV cache's attention and indexer row on one GPU in
 * the session's formats, and the formats in words */
void cu_kv_row_bytes(struct minke_model *m, void *bs, int *comp_row, int *index_row, const char **fmt);
/* bench: the session's prompt chunk in tokens (8192 by default, fewer for the
 * indexer's score cap or where the scratch did not fit) */
int cu_session_chunk(struct minke_model *m, void *bs);

#ifdef __cplusplus
}
#endif
#endif
