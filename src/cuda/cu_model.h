/* cu_model.h: the CUDA backend's data (cu_backend.cu): one GPU's copy of the
 * model (cu_model: weights as cu_t tensors, streams, the expert and tensor-
 * parallel split), a session's device state (cu_session: KV caches, scratch,
 * captured graphs) and the group of GPUs a model runs on (cu_group,
 * cu_gsession). Kept apart from the forward pass so that the backend's parts
 * can live in files of their own. */
#ifndef MINKE_CU_MODEL_H
#define MINKE_CU_MODEL_H

#include <stdint.h>
#include <nccl.h>
#include <cuda_runtime_api.h>

#include "cuda/cu_pool.h"

extern "C" {
#include "engine/backend.h"
}

/* ------------------------------------------------------------------ */
/* device model                                                        */

typedef struct cu_t {
    void *d;               /* indexed by global expert id for the routed experts (see alloc) */
    void *alloc;           /* the allocation: d itself, or this GPU's experts, d + own0 x bytes per expert */
    int type;
    int64_t ne[4];
    uint64_t row_bytes, nbytes;
} cu_t;

#define LAYER_FIELDS(X) X(hc_attn_fn) X(hc_attn_scale) X(hc_attn_base) X(attn_norm) X(q_a) X(q_a_norm) X(q_b) \
    X(kv) X(kv_norm) X(sinks) X(out_a) X(out_b) X(comp_ape) X(comp_kv) X(comp_gate) X(comp_norm) X(idx_q_b)   \
    X(idx_proj) X(idx_comp_ape) X(idx_comp_kv) X(idx_comp_gate) X(idx_comp_norm) X(hc_ffn_fn) X(hc_ffn_scale) \
    X(hc_ffn_base) X(ffn_norm) X(gate_inp) X(exp_bias) X(tid2eid) X(gate_exps) X(up_exps) X(down_exps)        \
    X(gate_shexp) X(up_shexp) X(down_shexp)
#define GLOBAL_FIELDS(X) X(token_embd) X(output_hc_base) X(output_hc_fn) X(output_hc_scale) X(output_norm) X(output)

typedef struct cu_layer {
    int ratio;
#define DECL(n) cu_t n;
    LAYER_FIELDS(DECL)
} cu_layer;

typedef struct cu_model {      /* one GPU's part of the model */
    int dev;                        /* CUDA device */
    int rank, nrank;                /* this GPU among the model's GPUs */
    int own0, own1;                 /* the routed experts resident here */
    int ff;                         /* rows of each expert's gate/up here (expert_ff, or its
                                       share with the split by rows) */
    int tp;                         /* dense projections split (tensor parallel): */
    int hl, h0;                     /*   attention heads here, the first one */
    int gl;                         /*   output groups here (out_a rows, out_b columns) */
    int sfl;                        /*   shared expert hidden rows here */
    ncclComm_t comm;                /* NULL: one GPU, no collectives */
    cudaStream_t st;
    cudaStream_t st2;               /* compressor/indexer branch, parallel to the q path; the
                                       shared expert, parallel to the routed experts */
    cudaStream_t st3;               /* the kv row, parallel to the q path */
    cudaEvent_t ev_fork, ev_join, ev_fork3, ev_join3;
    int act_f32;                    /* MINKE_ACT_EXACT: quantized products take f32 activations */
    GLOBAL_FIELDS(DECL)
#undef DECL
    cu_layer *layers;
    float *rope_main, *rope_comp;   /* inv_freq tables, rope_dim/2 each */
    uint64_t weight_bytes;
    int max_in;                     /* widest matmul input */
    int64_t max_q8_w;               /* the most weights of a dense Q8_0 matrix (cu_mmh's scratch) */
    int64_t max_f16_w;              /* the same of a dense F16 matrix (cu_mmh takes those too) */
} cu_model;

/* ------------------------------------------------------------------ */
/* session                                                             */

typedef struct cu_lcache {
    float *ring;           /* W x hd */
    void *comp;            /* comp_cap rows of the session's comp_fmt (cu_kvrow.cuh) */
    void *index;           /* index_cap rows of its index_fmt */
    float *ckv, *csc;      /* compressor state rows x width */
    float *ikv, *isc;
    int comp_cap, index_cap, crows, cwidth, irows, iwidth;
} cu_lcache;

#define ATT_SPLIT 16         /* row splits of decode attention (at most; cu_attn.cu picks by rows and SMs) */
#define ATT_SPLIT_MAX_T 4

typedef struct cu_graph { cudaGraphExec_t exec; int T; int with_logits; } cu_graph;

struct cu_session {
    int n_ctx, chunk;
    cu_lcache *lc;
    /* the compressed rows' formats: FP8 attention rows and FP4 indexer rows
     * with the simulations on (their values, stored as codes: no change in
     * any result), f32 with them off or MINKE_CUDA_KV=f32 */
    int comp_fmt, index_fmt;
    float *comp_f32;                /* packed rows: a layer's compressed (or indexer) rows unpacked, for a
                                     * prefill batch and the state copy */
    int *d_kvok;                    /* packed rows: the state copy's pack verdict */
    uint64_t bytes;
    int *d_pos, *h_pos;             /* pinned host mirror for async updates */
    int32_t *d_tok, *h_tok;
    /* scratch, sized for `chunk` tokens */
    float *X, *X2, *x, *post, *comb, *partial; double *psq;
    int *hc_cnt;                    /* ticket counters of cu_hc_pre_fused */
    float *ql, *qn, *q, *kvp, *kvb, *ca, *cg, *ia, *ig, *qi, *wi, *scores, *o, *z, *a;
    int *sel, *nsel;
    float *rlog, *rw; int *rsel;
    int *tpairs, *tstart, *tcount, *texp, *ntiles;
    float *eg, *eu, *emid, *eout, *mo, *sg, *su, *smid, *so;
    float *hy, *logits;             /* logits: chunk rows x V (or 1 when the chunk is large) */
    int logit_rows;
    void *act;                      /* quantized activations */
    void *act2;                     /* the same for the side branch */
    void *actx;                     /* x quantized once for every projection of x */
    void *asplit, *asplit2, *asplit3; /* exact activations split into int8 pieces for the tensor
                                       cores (cu_mmq_split_act), per stream: main, st2, st3 */
    uint64_t act_bytes;
    int64_t score_stride;
    int *d_argmax;
    float *attn_part;               /* split attention partials (small batches) */
    unsigned *o_amax;               /* a batch's largest finite |o| (float bits), from the attention for out_a */
    int *o_items, *z_items;         /* one token's o, z and the shared SwiGLU as split items */
    int *smid_items;                /*   (cu_gemv_args.xitems) */
    float *h_logits;                /* pinned, V floats */
    int *d_cands, *h_cands;         /* sample_cands: cu_sample_cands_bytes(CU_CANDS_MAX), device / pinned */
    cu_graph graphs[4];
    int n_graphs;
};

/* The model on its GPUs (m->be). Several GPUs: the routed experts split by
 * id (or by hidden rows), the attention output and shared expert split
 * (tensor parallel) unless turned off, the rest replicated; each GPU runs the
 * same forward on its own host thread (cu_pool) and adds the others' partial
 * sums with NCCL all-reduces, two a layer (docs/multigpu.md). */
#define CU_MAX_GPUS 8
typedef struct cu_group {
    int n;
    int comm_on;                    /* 0: the all-reduces are skipped (bench: compute alone) */
    cu_model *dev[CU_MAX_GPUS];
    cu_pool *pool;                  /* NULL with one GPU (unless MINKE_CUDA_FORCE_NCCL) */
    uint64_t weight_bytes;          /* over all GPUs */
} cu_group;

/* A session: one part per GPU (replicated KV state). */
typedef struct cu_gsession {
    int n;
    cu_session *dev[CU_MAX_GPUS];
} cu_gsession;

static cu_group *GRP(minke_model *m) { return (cu_group *)m->be; }

#endif
