/* cu_ops.h: host-side launchers of the CUDA backend's kernels (cu_gemv.cu,
 * cu_mmq.cu, cu_ops.cu, cu_hc.cu, cu_attn*.cu, cu_comp.cu, cu_indexer.cu, cu_moe.cu),
 * called by the forward pass in cu_backend.cu.
 *
 * Every launcher takes a stream and enqueues work without synchronising, so
 * a whole decode step can be captured into a CUDA graph. Positions are read
 * on the device from *pos0p (the batch's first absolute position), never
 * passed by value, so one captured graph serves every step of its shape.
 */
#ifndef MINKE_CU_OPS_H
#define MINKE_CU_OPS_H

#include <cuda_runtime.h>
#include <stdint.h>

typedef struct cu_gemv_args {
    const void *w;            /* weights (expert 0 when tiled by expert) */
    int wtype;
    int64_t rows, in;
    uint64_t row_bytes, expert_bytes;
    const void *act;          /* activation rows in cu_act_type(wtype) format, or f32 rows when act_f32 */
    int act_f32;              /* exact activations (MINKE_ACT_EXACT): act holds f32 rows for every
                                 weight type; quantized weights are decoded exactly and multiplied
                                 with f32 (GEMV) or with the activation split into int8 pieces
                                 (cu_mmq), docs/numerics.md */
    int64_t act_stride;       /* bytes between activation rows */
    int act_div;              /* activation row = id / act_div (pairs -> tokens) */
    float *out;
    int64_t out_stride;       /* floats between output rows */
    int accumulate;           /* add to out instead of storing */
    int ntok;                 /* dense mode: number of activation rows */
    int nt_hint;              /* rows per tile: 1, 4 or 8 */
    int64_t group_rows;       /* grouped input: row r reads the activation at */
    int64_t group_act_bytes;  /*   (r / group_rows) * group_act_bytes; 0 = off */
    const int *tile_pairs, *tile_start, *tile_count, *tile_expert, *n_tiles; /* MoE mode */
    int items;                /* filled by cu_gemv */
    const void *w2;           /* GEMV only: a second matrix of the same shape and type over the */
    float *out2;              /*   same activations into out2, in the same launch (gate + up) */
    const unsigned *act_amax; /* cu_mmh: the f32 activations' largest finite |x| (float bits, device), as
                                 the kernel that wrote them found it; NULL: cu_mmh finds it */
    int beside;               /* one token: a product that runs beside a kernel holding most of each
                                 SM (the shared expert's down beside the routed down): small blocks
                                 where cu_gemv3 has them, the same bits */
    const int *xitems;        /* one token, act_f32: act also as split items (cu_g3.cuh: G3_IW ints
                                 per 32 inputs, item i for inputs 32 i ..; words 0-24, the pieces and
                                 the scale, as g3_stage without BLK / SUMS: 25-27 are not written),
                                 stored by act's writer (the attention's combine, an oitems product,
                                 cu_swiglu_items); the dp4a kernel then copies them instead of
                                 splitting act (the same bits); a kernel that does not take them
                                 reads act; NULL: none */
    int *oitems;              /* one token: where the product's kernel can (cu_gemv3: blocks of 32
                                 whole rows), out's rows also stored as items for the next product */
    int *oitems_done;         /*   host flag, set to 1 when the launch stores oitems */
} cu_gemv_args;

#ifdef __cplusplus
extern "C" {
#endif

int cu_gemv_supported(int type);
int cu_gemv_items(int type, int64_t in);
int cu_act_type(int wtype);
int64_t cu_act_row_bytes(int atype, int64_t n);
/* ntiles: grid height (dense: ceil(ntok / nt_hint); MoE: the maximum tile count). */
void cu_gemv(const cu_gemv_args *g, int ntiles, cudaStream_t st);
void cu_quantize_act(int atype, const float *x, void *out, int64_t nrows, int64_t n, cudaStream_t st);
/* Repack a Q8_0 tensor in place to the GPU layout (type 108); 1 when done, 0 when
 * its rows do not allow it (the tensor then stays Q8_0). */
int cu_repack_q8_0(void *data, int64_t rows, int64_t in, uint64_t row_bytes, cudaStream_t st);
/* The same for IQ2_XXS (type 116): 8-byte aligned groups, scales after. */
int cu_repack_iq2_xxs(void *data, int64_t rows, int64_t in, uint64_t row_bytes, cudaStream_t st);
int cu_tables_init(const uint64_t *grid, const uint8_t *signs, const int8_t *kvalues);
/* cu_tables_init with the tables read back through src/quant's decoders (the backend and
 * the check programs use it); -2 when there is no IQ2_XXS decoder. */
int cu_tables_init_from_quant(void);

/* ---- cu_mmq.cu: tensor-core (int8 mma) products for prefill batches ---- */
/* Activation rows from which the backend uses cu_mmq (0: off; env MINKE_CUDA_MMQ=0/1
 * turns it off/on, MINKE_CUDA_MMQ_MIN=n moves the threshold, default 32). */
int cu_mmq_min_rows(void);
/* 1 when cu_mmq handles these weights (Q8_0, Q8_0R, IQ2_XXS, IQ2R, Q2_K, MXFP4; Q4_K with
 * exact activations only; grouped input
 * only with groups of a multiple of 64 rows; F16 with f32 activations, dense,
 * input a multiple of 64, 16-byte aligned). */
int cu_mmq_supported(const cu_gemv_args *g);
/* The same product as cu_gemv; tiles of up to 64 activation rows (dense:
 * ntiles = ceil(ntok / 64); MoE: tiles built with nt = 64). 0 when unsupported. */
int cu_mmq(const cu_gemv_args *g, int ntiles, cudaStream_t st);
int cu_mmq_tables_init(const uint64_t *grid);
/* cu_mmh.cu: dense Q8_0 / Q8_0R (and F16) products of prefill batches with exact (f32) activations as one
 * cuBLASLt f16 GEMM (weights and activations split into exact f16 pieces, docs/numerics.md).
 * cu_mmh_taken: 1 when a product of ntok rows takes it (default from 256 tokens and 1M weights;
 * MINKE_CUDA_MMH=0/1, MINKE_CUDA_MMH_MIN=tokens, MINKE_CUDA_MMH_MINW=weights: rows x in); cu_mmh: the product (dense or grouped input, accumulate
 * or not; act = f32 rows, act_stride bytes apart, 16-byte aligned), 0 when not done (the caller runs
 * cu_mmq). cu_mmh_set: the checks' switch (min_tokens / min_weights <= 0 keep the current ones). */
#define CU_MMH_MAX_WEIGHTS (64ll << 20)   /* larger matrices (an LM head) keep the int8 kernels */
int cu_mmh_taken(const cu_gemv_args *g, int64_t ntok);
int cu_mmh_min_tokens(void);     /* the fewest tokens it takes; 0: off */
int cu_mmh(const cu_gemv_args *g, int64_t ntok, cudaStream_t st);
void cu_mmh_set(int on, int min_tokens, int64_t min_weights);
/* allocate st's scratch for products up to max_weights over T rows of up to max_in (session set-up;
 * 1 done, 0 when off or too small to take it, -1 when it did not fit: the products then try again
 * when they run) */
int cu_mmh_reserve(cudaStream_t st, int64_t T, int64_t max_in, int64_t max_weights);
/* cu_mmh_share_x: split x (T rows of in, xs floats apart) once on st for every cu_mmh product of
 * that x on this host thread, on st or on streams forked from it after this call, until
 * cu_mmh_share_clear (call it before x is rewritten) or the next share; 1 when made (0: off,
 * too few tokens, capturing; the products then split x themselves). */
int cu_mmh_share_x(const float *x, int T, int in, int64_t xs, cudaStream_t st);
void cu_mmh_share_clear(void);
int cu_mmh_share_reserve(cudaStream_t st, int64_t T, int64_t in);    /* its buffer, at session set-up (as above) */
void cu_mmh_release(cudaStream_t st);     /* before the stream is destroyed (the device current) */
/* cu_mmx.cu: the routed experts' prefill products (MoE tiles; IQ2_XXS gate / up, Q2_K down where
 * the wgmma layout takes them or MINKE_CUDA_MMX_Q2K=1) with exact activations on the f16 tensor cores, one fold per 256
 * elements. cu_mmx_split: nrows f32
 * rows of n (n % 256 == 0; xstride bytes apart) into rows of cu_mmx_split_row_bytes(wtype, n);
 * cu_mmx: the product of g (MoE tiles, act = those rows, act_stride = their bytes), 0 where it
 * does not apply (cu_mmx_supported; MINKE_CUDA_MMX=0 turns it off). The backend takes it for
 * prompts of at least cu_mmx_min_tokens() tokens (0: off; MINKE_CUDA_MMX_MIN, default 256);
 * cu_mmx_set: the checks' switches (min_tokens <= 0 keeps the current one); cu_mmx_last_layout:
 * the block layout (MINKE_CUDA_MMX_TILE) the last cu_mmx launched (0: the last was refused). */
int cu_mmx_supported(const cu_gemv_args *g);
int64_t cu_mmx_split_row_bytes(int wtype, int64_t n);
int cu_mmx_split(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out, cudaStream_t st);
/* cu_mmx_split of the routed experts' SwiGLU rows, made from the gate and up rows g, u (nrows of n,
 * dense) and the router weights w (NULL: 1) as cu_swiglu makes them (the same values): the down's
 * split without the mid rows. cu_mmx_glu_enabled: MINKE_CUDA_MMX_GLU (default 1). */
int cu_mmx_split_glu(int wtype, const float *g, const float *u, const float *w, float limit, int64_t nrows, int64_t n,
                     void *out, cudaStream_t st);
int cu_mmx_glu_enabled(void);
int cu_mmx(const cu_gemv_args *g, int ntiles, cudaStream_t st);
void cu_mmx_set(int on, int q2k, int min_tokens);
int cu_mmx_min_tokens(void);
int cu_mmx_last_layout(void);
int cu_mmx_tables_init(const uint64_t *grid);
/* cu_mmf16.cu: the F16 case of cu_mmq (ntiles = ceil(ntok / 64): the tokens
 * covered are min(ntok, 64 ntiles)). MINKE_CUDA_MMF16=0 runs the first kernel
 * (A/B), 1 (default) the pipelined one, 2..5 force its huge/big/mid/small tiles. */
int cu_mmf16_supported(const cu_gemv_args *g);
void cu_mmf16(const cu_gemv_args *g, int ntiles, cudaStream_t st);
/* Several F16 matrices over the same f32 input in one launch (blocks split by
 * row ranges): out_i[t][r] (+)= W_i[r] . x[t] for t < ntok. x: rows of in
 * floats, x_stride bytes apart. Each matrix gets the same arithmetic in every
 * launch of the same set of shapes, whatever ntok. 0 when it does not apply
 * (in a multiple of 64, 16-byte aligned weights rows and x). */
#define CU_MMF16_MAX_SETS 5
typedef struct cu_mmf16_set {
    const void *w;            /* F16 rows */
    uint64_t row_bytes;
    int64_t rows;
    float *out;
    int64_t out_stride;       /* floats between output rows (tokens) */
} cu_mmf16_set;
int cu_mmf16_multi(const cu_mmf16_set *sets, int nsets, const float *x, int64_t in, int64_t x_stride, int ntok,
                   int accumulate, cudaStream_t st);
/* Checks: force the kernel of the following calls (0 first, 1 auto, 2..5 huge/big/mid/small;
 * -1: back to MINKE_CUDA_MMF16); returns the previous forcing. */
int cu_mmf16_mode(int mode);
#define CU_MMQ_TILE 64
/* Exact activations split into int8 pieces by a launch of their own, then the
 * product on those rows (cu_mmq.cu): split_row_bytes(n) bytes per row of n f32;
 * split_act: nrows rows xstride bytes apart (wtype: the weights they meet);
 * presplit: cu_mmq with act = the split rows, act_stride = split_row_bytes(whole
 * row), grouped input as for f32 rows. Both return 0 when they do not apply. */
int64_t cu_mmq_split_row_bytes(int64_t n);
int cu_mmq_split_act(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out, cudaStream_t st);
int cu_mmq_presplit(const cu_gemv_args *g, int ntiles, cudaStream_t st);

/* ---- cu_ops.cu ---- */
void cu_ops_init(void);   /* kernel attributes, once per process */
void cu_indexer_init(void);  /* cu_indexer.cu's part of it */
void cu_embed(const int32_t *tokens, int T, const void *emb, int etype, int D, int nhc, float *X, cudaStream_t st);

/* HC pre/head: mix = fn . X_flat * rms, then (pre/post/comb + u = sum pre X, x = rmsnorm(u; norm))
 * or, with head = 1, w = sigmoid(mix*scale+base)+eps, x = sum w X (no norm). partial
 * (T x 16 x 32 floats) and psq (T x 16 doubles) are scratch: what they hold after is
 * not a result (the split leaves the pre weights in psq). */
void cu_hc_pre(const float *X, int T, int D, int nhc, const void *fn, int fntype, int nmix,
               const float *scale, const float *base, const float *norm_w, int iters, float hc_eps,
               float rms_eps, int head, float *partial, double *psq, float *x, float *post, float *comb,
               cudaStream_t st);
/* The same in one launch with the same results (cu_ops.cu k_hc_pre_fused; MINKE_CUDA_HC_FUSED=0
 * turns it off). With f1 set it first applies the previous post step (cu_hc_post(X, f1, f2,
 * post, comb) into Xout) and mixes Xout. part/psq: as cu_hc_pre's partial/psq; cnt: T ints,
 * zero before the first call (each call leaves them zero). cu_hc_fused_ok: shapes it takes. */
int cu_hc_fused_enabled(void);
int cu_hc_fused_ok(int D, int nhc, int nmix);
/* sk_defer (not head): the step may leave comb's Sinkhorn to cu_hc_sinkhorn, writing the
 * raw combination logits into comb instead; it returns 1 when it did (then cu_hc_sinkhorn
 * must run on comb before anything reads it), 0 when comb holds the result. */
int cu_hc_pre_fused(const float *X, const float *f1, const float *f2, const float *post_in, const float *comb_in,
                    float *Xout, int T, int D, int nhc, const void *fn, int fntype, int nmix, const float *scale,
                    const float *base, const float *norm_w, int iters, float hc_eps, float rms_eps, int head,
                    float *partial, double *psq, int *cnt, float *x, float *post, float *comb, int sk_defer,
                    cudaStream_t st);
/* The deferred Sinkhorn of cu_hc_pre_fused, in place on T tokens' nhc x nhc logits (the same
 * arithmetic and bits as inside the step). Why: in the step it is the last block's longest
 * path, which the next kernel waits for although only the next post step reads comb; a
 * side stream runs it beside the sub-layer instead. */
void cu_hc_sinkhorn(float *comb, int T, int nhc, int iters, float hc_eps, cudaStream_t st);
/* programmatic dependent launch between the backend's kernels (MINKE_CUDA_PDL=0: off) */
int cu_pdl_enabled(void);
void cu_hc_post(const float *X, const float *f1, const float *f2, const float *post, const float *comb,
                int T, int D, int nhc, float *Xout, cudaStream_t st);

void cu_rmsnorm(const float *x, const float *w, int nrows, int n, float eps, float *y, cudaStream_t st);
void cu_add(const float *a, const float *b, float *y, int64_t n, cudaStream_t st);

/* per-head unweighted RMSNorm then RoPE of the tail at pos0 + t */
void cu_qhead_norm_rope(float *q, int T, int nh, int hd, int nrot, const float *inv_freq,
                        const int *pos0p, float eps, cudaStream_t st);
/* kv row: rmsnorm(w) + RoPE + FP8 sim of the first nope dims (sims) + optional f16 rounding */
void cu_kv_finish(const float *kvp, const float *w, int T, int hd, int nrot, const float *inv_freq,
                  const int *pos0p, float eps, int sims, int f16round, float *kv_out, cudaStream_t st);
void cu_raw_store(const float *kv, int T, int hd, int W, const int *pos0p, float *ring, cudaStream_t st);

/* compressor: emitted rows of the batch into rows[] (fmt CU_KV_F32: f32 rows
 * of d floats; CU_KV_FP8 (attention rows) / CU_KV_FP4 (is_index) need sims
 * and no f16round: the simulation stored packed), then the carried state */
void cu_comp_emit(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                  float *Skv, float *Ssc, const float *norm_w, float eps, int nrot, const float *inv_freq,
                  const int *pos0p, int sims, int is_index, int f16round, void *rows, int fmt, cudaStream_t st);
void cu_comp_state(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                   float *Skv, float *Ssc, const int *pos0p, cudaStream_t st);

/* indexer */
void cu_idx_q_prep(float *qI, int T, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p,
                   int sims, cudaStream_t st);
/* rows: the index rows in rows_fmt, CU_KV_F32 (hd floats a row) or CU_KV_FP4 (kv4_stride(hd) bytes a
 * row, hd a multiple of 32); FP4 rows give the bits of f32 rows holding the values they unpack to */
void cu_idx_scores(const float *qI, const float *wI, const void *rows, int rows_fmt, int T, int nh, int hd,
                   float wscale, int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride,
                   cudaStream_t st);
/* the same scores; with sims (the simulations on: q and rows FP4-exact), nh 64, hd 128 and T >= 16
 * (or a capacity max_rows >= 4096, MINKE_CUDA_IDX_TC_DEC_ROWS=N to move it, 0 off) on the
 * tensor cores (k_idx_scores_tc), bit-identical to cu_idx_scores. cu_idx_scores_tc_taken: 1 when
 * a call of that shape takes the tensor cores now (the environment is read at each call). */
int cu_idx_scores_tc_taken(int T, int nh, int hd, int max_rows, int sims);
void cu_idx_scores_sims(const float *qI, const float *wI, const void *rows, int rows_fmt, int T, int nh, int hd,
                        float wscale, int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride,
                        int sims, cudaStream_t st);
void cu_idx_topk(const float *scores, int64_t score_stride, int T, int topk, const int *pos0p,
                 int *sel, int *nsel, cudaStream_t st);

/* attention with sinks + inverse RoPE of the output. comp: the compressed rows
 * in comp_fmt's layout (CU_KV_F32: hd floats a row; CU_KV_FP8: kv8_stride(hd,
 * nrot) bytes a row, see the row formats below); the same output bits either
 * way for rows holding the FP8 simulation's values. kv_batch and ring: f32.
 * The decode kernels (nsplit > 1) read FP8 rows as they are; batches of FP8
 * rows with nsplit 1 take the generic k_attention, so the backend unpacks a
 * prefill batch's rows to f32 first (cu_kvrows_unpack) for the tensor cores.
 * o_items (NULL: not wanted): where the split decode runs, o also stored as the next
 * product's input items (cu_gemv_args.xitems; T x nh x hd / 32 items); returns 1 when
 * it did, else 0. */
int cu_attention(const float *q, const float *kv_batch, const float *ring, const void *comp, int comp_fmt,
                 const int *sel, const int *nsel, int topk, const float *sinks, int T, int nh, int hd,
                 int W, int ratio, int nrot, const float *inv_freq, float scale, const int *pos0p, int pos0,
                 float qeps, float *o, unsigned *o_amax, float *part, int nsplit, int tc, int *o_items, cudaStream_t st);
/* the tensor-core prefill attention (cu_attn_tc.cu; f32 rows); 0 when hd is not one it takes.
 * pos0: *pos0p as the host knows it (the wgmma kernel converts the rows up to pos0 + T to f16
 * first), or -1 where the host does not know it (the mma.sync kernels then). qeps >= 0: q is
 * q_b's raw output, normed per head (eps qeps) and rotated here (cu_qhead_norm_rope in place,
 * or inside the wgmma kernel as it stages q); < 0: q is ready. cu_attention takes qeps too
 * (only 0 returns leave q untouched). o_amax (cu_attention; NULL: not wanted): set to the
 * largest finite |o| as float bits (the wgmma kernel finds it as it stores o; other paths
 * by cu_amax_f32 after), for the next product's cu_mmh (cu_gemv_args.act_amax). */
int cu_attention_tc(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                    const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W, int ratio, int nrot,
                    const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                    unsigned *o_amax, cudaStream_t st);
/* its wgmma form (cu_attn_wg.cu, sm_90a); 0 where it does not apply (nothing launched) */
int cu_attention_wg(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                    const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W, int ratio, int nrot,
                    const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                    unsigned *o_amax, cudaStream_t st);
/* *amax (float bits, device) = max(*amax, the largest finite |x| of T rows of n floats, xs
 * floats apart; n % 4 == 0) (cu_mmh.cu) */
void cu_amax_f32(const float *x, int T, int n, int64_t xs, unsigned *amax, cudaStream_t st);

/* router + MoE. [own0, own1): the experts this GPU owns (0, E with one GPU);
 * a pair of another expert gets sel -1, its weight as usual. */
void cu_router(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
               int T, int E, int K, float route_scale, int own0, int own1, int *sel, float *w, cudaStream_t st);
/* cu_router + cu_moe_tiles with nt = 1 in one launch, the same outputs (cu_moe.cu) */
void cu_router_tiles1(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                      int T, int E, int K, float route_scale, int own0, int own1, int *sel, float *w, int *pairs,
                      int *tstart, int *tcount, int *texpert, int *ntiles, cudaStream_t st);
void cu_moe_tiles(const int *sel, int P, int E, int nt, int *pairs, int *tstart, int *tcount, int *texpert,
                  int *ntiles, cudaStream_t st);
void cu_swiglu(const float *g, const float *u, const float *w, int P, int F, float limit, float *mid,
               cudaStream_t st);
/* one row (no weight): mid = swiglu(g, u), and mid also as the next product's input items
 * (cu_gemv_args.xitems; F / 32 of them) where F is a multiple of 32; returns 1 when it
 * stored them (else only mid, as cu_swiglu) */
int cu_swiglu_items(const float *g, const float *u, int F, float limit, float *mid, int *items, cudaStream_t st);
/* m[t] = sum over k of outp[t K + k], k in order, skipping pairs with sel < 0 (sel NULL: none) */
void cu_moe_sum(const float *outp, const int *sel, int T, int K, int D, float *m, cudaStream_t st);

/* argmax over n floats per row, skipping index `skip` (-1 none) */
void cu_argmax(const float *x, int64_t n, int skip, int *out, cudaStream_t st);
/* the sampler's view of one row of n logits (cu_sample.cu, engine/backend.h
 * sample_cands) into out (cu_sample_cands_bytes(cap)): count, argmax, its
 * value (float bits), 0; then cap ids and cap values of the finite logits >=
 * max + floor_off in increasing id order (count may exceed cap) */
#define CU_CANDS_MAX 1024     /* the most candidates a session's buffers hold */
size_t cu_sample_cands_bytes(int cap);
void cu_sample_cands(const float *logits, int n, float floor_off, int cap, int *out, cudaStream_t st);
/* deterministic fill of n bytes of synthetic weights for a type (bench) */
/* byte_off: where dst starts in the whole tensor (a GPU's slice of the experts; a
 * multiple of 4), so the slice holds the values of that part of the whole */
void cu_synth_fill(void *dst, int type, int64_t nel, uint64_t seed, float scale, uint64_t byte_off, cudaStream_t st);
/* KV cache row formats (cu_kvrow.cuh says why and how they unpack): f32 rows
 * of hd floats, FP8 attention rows (E4M3 codes of the first hd - nrot values,
 * a scale byte per 64, the RoPE tail as f32) or FP4 indexer rows (E2M1 codes,
 * a scale byte per 32), each row 16-byte aligned. */
#define CU_KV_F32 0
#define CU_KV_FP8 1
#define CU_KV_FP4 2
#ifdef __CUDACC__
#define CU_KV_HD __host__ __device__
#else
#define CU_KV_HD
#endif
static inline CU_KV_HD int kv8_rope_off(int hd, int nrot) { int nope = hd - nrot; return (nope + nope / 64 + 15) & ~15; }
static inline CU_KV_HD int kv8_stride(int hd, int nrot) { return (kv8_rope_off(hd, nrot) + 4 * nrot + 15) & ~15; }
static inline CU_KV_HD int kv4_stride(int hd) { return (hd / 2 + hd / 32 + 15) & ~15; }
/* bytes of one row of a store (nrot only for FP8) */
static inline CU_KV_HD int kv_row_bytes(int fmt, int hd, int nrot) {
    return fmt == CU_KV_FP8 ? kv8_stride(hd, nrot) : fmt == CU_KV_FP4 ? kv4_stride(hd) : 4 * hd;
}

/* KV row formats (cu_kvfmt.cu): pack nrows rows of n floats into FP8 (fp4 = 0:
 * codes[n], exps[n / 64] a row) or FP4 (codes[n / 2], exps[n / 32]) blocks and
 * unpack them into y; ok[row] (set to 1 by the caller) becomes 0 when a block
 * of the row does not pack. */
void cu_kvfmt_roundtrip(int fp4, const float *x, int nrows, int n, uint8_t *codes, uint8_t *exps, float *y, int *ok,
                        cudaStream_t st);
/* Whole cache rows (fmt CU_KV_FP8: attention rows of hd with an f32 RoPE tail of
 * nrot; CU_KV_FP4: indexer rows): pack f32 rows (*ok, set to 1 by the caller,
 * becomes 0 when a value is not the format's), unpack them to f32, and the
 * compressors' writer path beside the simulation it stores (kvfmt_check). */
void cu_kvrows_pack(int fmt, const float *x, int nrows, int hd, int nrot, void *rows, int *ok, cudaStream_t st);
void cu_kvrows_unpack(int fmt, const void *rows, int nrows, int hd, int nrot, float *y, cudaStream_t st);
void cu_kvrows_sim(int fmt, const float *x, int nrows, int hd, int nrot, float *sim, void *rows, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
