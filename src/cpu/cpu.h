/* cpu.h: internals of the CPU reference backend, shared by its files:
 *   cpu_backend.c  model init (f32 copies of vectors), sessions, state I/O
 *   matmul.c       weight x activation products through the quant traits
 *   forward.c      the forward pass (spec model.md §7-§12)
 *   mtp.c          the MTP block (spec §13): its cache rows, drafts, state I/O
 */
#ifndef MINKE_CPU_CPU_H
#define MINKE_CPU_CPU_H

#include <pthread.h>
#include <stdint.h>

#include "cpu/numerics.h"
#include "cpu/pool.h"
#include "engine/backend.h"

/* Per layer: f32 copies of every vector-shaped tensor (any float type in the file). */
typedef struct cpu_layer_vecs {
    float *hc_attn_scale, *hc_attn_base, *attn_norm, *q_a_norm, *kv_norm, *sinks;
    float *comp_ape, *comp_norm, *idx_comp_ape, *idx_comp_norm;
    float *hc_ffn_scale, *hc_ffn_base, *ffn_norm, *exp_bias;
} cpu_layer_vecs;

typedef struct cpu_mtp_model cpu_mtp_model;   /* mtp.c */
typedef struct cpu_mtp_state cpu_mtp_state;

typedef struct cpu_model {
    cpu_pool *pool;
    cpu_layer_vecs *lv;                   /* [n_layer] */
    float *output_hc_base, *output_hc_scale, *output_norm;
    nm_rope rope_main, rope_comp;         /* sliding-only layers / compressed layers (incl. indexer) */
    int exact_act;                        /* minke_model_params.act != MINKE_ACT_Q8 */
    pthread_mutex_t lock;                 /* one forward at a time: the pool is not reentrant */
    cpu_mtp_model *mtp;                   /* NULL without an MTP file */
} cpu_model;

/* One compressor's streaming state (spec §8.1). */
typedef struct cpu_comp_state {
    int rows, width;                      /* c*ratio, c*d */
    float *kv, *sc;                       /* rows x width */
} cpu_comp_state;

typedef struct cpu_layer_cache {
    int ratio;
    float *raw;                           /* window x head_dim ring: position p at slot p % window */
    float *comp;                          /* comp_cap x head_dim */
    float *index;                         /* index_cap x idx_head_dim (ratio 4) */
    int comp_cap, index_cap;
    cpu_comp_state cs, is;                /* attention / indexer compressor */
} cpu_layer_cache;

typedef struct cpu_session {
    int n_ctx;
    cpu_layer_cache *layers;
    uint64_t bytes;
    cpu_mtp_state *mtp;                   /* NULL without an MTP file */
} cpu_session;

/* y[t*ys + r] = W[row0 + r] . x[t*xs ..] for r < nrows, t < T (x has W->ne[0] values per token).
 * W may be a 3-D expert tensor: pass `expert` to select matrix e (else 0). */
void cpu_matmul(const cpu_model *cm, const dsv4_tensor *W, int expert, int64_t row0, int64_t nrows,
                const float *x, int64_t xs, int T, float *y, int64_t ys);
/* y1 = W1 x and y2 = W2 x over their first nrows rows, both written with
 * stride ys (FFN gate and up): x is quantized once and the two products
 * share one pool job. Same results as two cpu_matmul calls. */
void cpu_matmul_pair(const cpu_model *cm, const dsv4_tensor *W1, const dsv4_tensor *W2, int expert, int64_t nrows,
                     const float *x, int64_t xs, int T, float *y1, float *y2, int64_t ys);
/* Dequantize row r of a 2-D tensor to f32 (embedding lookup). */
void cpu_get_row(const dsv4_tensor *W, int64_t r, float *out);

int cpu_forward(minke_model *m, void *bs, const int32_t *tokens, int n, int pos0,
                float *all_logits, float *last_logits);
void cpu_session_clear(minke_model *m, cpu_session *s);

/* One decoder block with explicit weights (the MTP block) over n tokens at
 * pos0..: X (n x hc_dim) is the HC state in and out. Same layer code as the
 * main stack; ratio-0 blocks only need lc->raw. cache_only: just the
 * attention half, for its cache rows (X is left as it was). Caller holds cm->lock. */
int cpu_block_forward(minke_model *m, const dsv4_layer *L, const cpu_layer_vecs *V, cpu_layer_cache *lc,
                      float clamp, const int32_t *tokens, int n, int pos0, float *X, int cache_only);

/* ---- mtp.c ---- */
int cpu_mtp_init(minke_model *m);                 /* m->mtp bound; 0 or error set */
void cpu_mtp_free(minke_model *m);
int cpu_mtp_session_alloc(minke_model *m, cpu_session *s);
void cpu_mtp_session_free(cpu_session *s);
void cpu_mtp_session_clear(minke_model *m, cpu_session *s);
/* Called by the forward with the main model's final HC states X (n x hc_dim)
 * of tokens at pos0..: writes the MTP cache rows of those positions and keeps
 * the last state as the next draft's Hs. Caller holds cm->lock. */
int cpu_mtp_commit(minke_model *m, cpu_session *s, const int32_t *tokens, int n, int pos0, const float *X);
int cpu_mtp_draft(minke_model *m, void *bs, int pos, int32_t token, int n_draft, int32_t *drafts);
int cpu_mtp_state_save(minke_model *m, void *bs, int pos, void *dst);
int cpu_mtp_state_load(minke_model *m, void *bs, int pos, const void *src);
/* The MTP part of the frontier (ring, H, last token); buf NULL only counts. Returns bytes. */
uint64_t cpu_mtp_frontier_copy(minke_model *m, cpu_session *s, uint8_t *buf, int save);

#endif
