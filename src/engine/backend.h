/* backend.h: the contract between the engine front (src/engine/engine.c, which
 * implements include/minke.h) and a compute backend (src/cpu, src/cuda).
 *
 * Division of labour
 *   The engine opens the GGUF, binds the weights (src/model/weights.h: dims in
 *   m->w.cfg, tensors in m->w), picks the backend, validates every request
 *   (token ids in range, context overflow, pos bookkeeping), splits a prefill
 *   into chunks, keeps the last logits, and wraps state bytes in a header
 *   (magic, model identity, n_ctx, pos) for snapshots and serialisation.
 *   A backend only computes: it owns its model data (m->be) and per-session
 *   KV state, runs batches of tokens, and copies its state to/from the shared
 *   payload layout below. Backends never see invalid input.
 *
 * forward() contract
 *   Runs tokens[0..n) at absolute positions pos0..pos0+n-1, where pos0 equals
 *   the number of tokens the session has already processed (the engine
 *   guarantees it, and pos0 + n <= n_ctx). The result must be identical (up to
 *   float rounding) to running the tokens one by one (spec model.md §12):
 *   every position sees raw rows max(0,q-window+1)..q and compressed rows
 *   w < floor((q+1)/ratio). When all_logits is non-NULL write n * n_vocab
 *   floats (row-major by position); always write the last position's logits
 *   to last_logits (n_vocab floats). Return 0, or non-zero after calling
 *   minke_set_error(); the engine then treats the session state as lost and
 *   resets it (only allocation/device failures may fail here).
 *   Simulations (spec §6.4-6.6, §16.2) are on when m->params.sims is 1.
 *
 * KV state payload (spec §15), used for snapshots and serialisation, so a
 *   state saved by one backend loads in the other. For a session at position
 *   P, layer by layer (il = 0..n_layer-1), little-endian float32 throughout,
 *   offsets given by minke_kv_layout():
 *     raw:      min(P, window) rows x head_dim, oldest first (logical order,
 *               i.e. positions P-n_raw .. P-1), values as stored after RoPE
 *               (and FP8 sim when on)
 *     comp:     floor(P/ratio) rows x head_dim (ratio != 0)
 *     index:    floor(P/4) rows x idx_head_dim (ratio == 4)
 *     comp_kv, comp_sc: compressor state Skv, Ssc, rows x width each
 *               (rows = c*ratio, width = c*head_dim, c = 2 for ratio 4 else 1);
 *               empty slots hold value 0 and score -INFINITY (spec §8.1)
 *     index_kv, index_sc: indexer compressor state (ratio 4: 8 x 2*idx_head_dim)
 *   Counters are implied by P. Row slot numbering inside Skv/Ssc is spec §8.2
 *   (ratio 4: slot 4+p%4 written, slots 0..3 = lane A of the last closed
 *   window; ratio R: slot p%R).
 *
 * Taps (debug): when m->tap is set, a backend calls minke_tap_emit(m, name,
 *   pos, data, n) for each position with these names (n floats each):
 *     "embd"                       n_embd          token embedding
 *     "blk.%d.attn_norm"           n_embd          x after attn_norm (A2)
 *     "blk.%d.q"                   n_head*head_dim q after head norm + RoPE (A5)
 *     "blk.%d.kv"                  head_dim        raw KV row as stored (A7)
 *     "blk.%d.attn_o"              n_head*head_dim attention output after inverse RoPE (A11)
 *     "blk.%d.attn_out"            n_embd          output projection a (A12)
 *     "blk.%d.ffn_norm"            n_embd          x after ffn_norm (B2)
 *     "blk.%d.moe_out"             n_embd          routed experts m (B3)
 *     "blk.%d.shexp_out"           n_embd          shared expert s (B4)
 *     "blk.%d.out"                 n_hc*n_embd     HC state X after the layer
 *     "hc_head.out"                n_embd          HC head collapse
 *     "output_norm.out"            n_embd          LM-head input
 *     "logits"                     n_vocab
 *     "mtp.logits"                 n_vocab         MTP logits of a draft step (pos = its position)
 *   Compressed rows are tapped when emitted, with pos = the emitting position:
 *     "blk.%d.comp_row" (head_dim), "blk.%d.index_row" (idx_head_dim).
 *   A backend may skip taps it does not have, never invent other meanings.
 *
 * MTP (optional ops; NULL when the backend has none, and then the engine
 *   refuses an MTP file). The MTP state payload follows the KV payload in
 *   snapshots/serialisation when the model has MTP: for P > 0, an int32 with
 *   the last processed token, the main model's final HC state of that token
 *   (n_hc*n_embd f32), then the MTP block's raw rows min(P, window) x head_dim
 *   oldest first (as the layers' raw part above); nothing at P = 0
 *   (minke_mtp_payload_bytes).
 */
#ifndef MINKE_ENGINE_BACKEND_H
#define MINKE_ENGINE_BACKEND_H

#include <stdint.h>
#include "minke.h"
#include "model/weights.h"

typedef struct minke_backend_ops minke_backend_ops;

struct minke_model {
    minke_model_params params;     /* as given; n_threads resolved (>0), sims 0/1 */
    char *path;
    struct gguf_file *gguf;
    dsv4_weights w;                /* config (w.cfg) and host tensors */
    const minke_backend_ops *ops;
    void *be;                      /* backend-private model data */
    minke_model_info info;
    char name[256];
    uint64_t identity;             /* hash of metadata + tensor table (serialisation header) */
    minke_tap_fn tap;
    void *tap_user;
    /* MTP (params.mtp_path): NULL when none */
    char *mtp_path;
    struct gguf_file *mtp_gguf;
    dsv4_mtp_weights *mtp;
};

struct minke_backend_ops {
    const char *name;                              /* "cpu", "cuda" */
    int (*model_init)(minke_model *m);             /* 0 or error set */
    void (*model_free)(minke_model *m);
    /* New session state at position 0; NULL with error set. */
    void *(*session_alloc)(minke_model *m, int n_ctx);
    void (*session_free)(minke_model *m, void *bs);
    void (*session_reset)(minke_model *m, void *bs);   /* back to position 0 */
    /* Bytes of KV state allocated for this session (minke_session_state_bytes). */
    uint64_t (*session_bytes)(minke_model *m, void *bs);
    int (*forward)(minke_model *m, void *bs, const int32_t *tokens, int n, int pos0,
                   float *all_logits, float *last_logits);
    /* Copy state at position pos to/from the payload layout (minke_kv_layout bytes). */
    int (*state_save)(minke_model *m, void *bs, int pos, void *dst);
    int (*state_load)(minke_model *m, void *bs, int pos, const void *src);
    /* MTP (NULL = unsupported). mtp_draft: minke_mtp_draft for a session at
     * pos >= 1 with pos + n_draft < n_ctx; returns the count or -1. */
    int (*mtp_draft)(minke_model *m, void *bs, int pos, int32_t token, int n_draft, int32_t *drafts);
    int (*mtp_state_save)(minke_model *m, void *bs, int pos, void *dst);
    int (*mtp_state_load)(minke_model *m, void *bs, int pos, const void *src);
    /* Frontier (optional): the part of the state that a forward of more tokens
     * overwrites instead of appending to (raw windows, compressor states, MTP
     * state), a fixed size whatever the position. Loading it at the position
     * where it was saved undoes a forward (rows appended past that position
     * are invisible by the counters), for speculative verification. */
    uint64_t (*frontier_bytes)(minke_model *m, void *bs);
    void (*frontier_save)(minke_model *m, void *bs, void *dst);
    void (*frontier_load)(minke_model *m, void *bs, const void *src);
    /* Logits kept on the device (optional, both or neither). forward() may
     * then be given last_logits = NULL for one token (n == 1, no taps): the
     * logits stay where they were computed until logits_fetch copies them
     * (n_vocab floats) or sample_cands reads them there: the argmax over the
     * finite logits (the lowest id on ties; -1 when none) into *amax and its
     * value into *lmax, and the finite logits >= lmax + floor_off in
     * increasing id order into ids / vals (at most cap; cap 0: the argmax
     * only). sample_cands returns how many there are (more than cap when they
     * did not fit), or -1 with the error set; logits_fetch 0 or -1. */
    int (*logits_fetch)(minke_model *m, void *bs, float *out);
    int (*sample_cands)(minke_model *m, void *bs, float floor_off, int cap, int32_t *amax, float *lmax, int32_t *ids,
                        float *vals);
};

/* Where one layer's parts lie in the payload: absolute byte offsets from the
 * payload start; end = offset just past the layer (next layer's start). */
typedef struct minke_kv_layer_layout {
    int ratio;
    int n_raw, n_comp, n_index;            /* rows present at position P */
    int state_rows, state_width;           /* attention compressor Skv/Ssc */
    int istate_rows, istate_width;         /* indexer compressor Skv/Ssc */
    uint64_t off_raw, off_comp, off_index;
    uint64_t off_comp_kv, off_comp_sc, off_index_kv, off_index_sc;
    uint64_t end;
} minke_kv_layer_layout;

/* Fill layout[0..n_layer) for a session at position pos; returns total payload bytes. */
uint64_t minke_kv_layout(const dsv4_config *cfg, int pos, minke_kv_layer_layout *layout);
/* Bytes of the MTP state payload at position pos (see above). */
uint64_t minke_mtp_payload_bytes(const dsv4_config *cfg, int pos);

/* Backends. minke_backend_cuda() is defined by src/cuda only in MINKE_CUDA
 * builds; the engine references it under #ifdef MINKE_CUDA. */
const minke_backend_ops *minke_backend_cpu(void);
const minke_backend_ops *minke_backend_cuda(void);

/* Error reporting for backends (printf-style, sets minke_last_error()). */
void minke_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Call the tap hook if one is set. */
static inline void minke_tap_emit(const minke_model *m, const char *name, int pos,
                                  const float *data, int64_t n) {
    if (m->tap) m->tap(m->tap_user, name, pos, data, n);
}

#endif
