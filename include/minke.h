/* minke.h: the one public engine API, used by the CLI, the server and the bench.
 *
 * A model is opened from a GGUF on one backend (cpu or cuda). Sessions hold
 * the KV state of one token sequence; they prefill token arrays (chunked),
 * decode one token at a time, expose the logits of the last position, and can
 * be snapshotted/restored in memory or serialised to bytes (disk KV cache).
 *
 * Errors: functions returning a pointer return NULL, functions returning int
 * return non-zero; minke_last_error() then says what went wrong (thread-local).
 */
#ifndef MINKE_H
#define MINKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct minke_model minke_model;
typedef struct minke_session minke_session;
typedef struct minke_snapshot minke_snapshot;
struct gguf_file; /* src/gguf/gguf.h: the opened container, for the tokenizer */

typedef enum { MINKE_BACKEND_CPU = 0, MINKE_BACKEND_CUDA = 1 } minke_backend;

typedef enum { MINKE_ACT_EXACT = 0, MINKE_ACT_Q8 = 1 } minke_act;

typedef struct minke_model_params {
    const char *path;      /* main GGUF */
    const char *mtp_path;  /* optional MTP GGUF, NULL for none */
    minke_backend backend;
    int n_threads;         /* CPU threads, 0 = all cores */
    int sims;              /* FP8 KV / Hadamard+FP4 indexer simulations: 1 (default) or 0 */
    int progress;          /* show a load progress bar on stderr when it is a TTY */
    int n_gpus;            /* cuda: number of GPUs, 0 or 1 = one, -1 = all (routed experts split
                              by id, attention output and shared expert split, the rest
                              replicated; docs/multigpu.md) */
    int act;               /* numerics of quantized-weight products: MINKE_ACT_EXACT (0, default):
                              weights decoded exactly and multiplied with f32 activations (spec
                              §16.3's recommendation; the CUDA tensor-core prefill splits the
                              activation into int8 pieces, docs/numerics.md); MINKE_ACT_Q8: ds4's
                              numerics, activations quantized to the weight's dot type (Q8_0 /
                              Q8_K) with int8 dots (spec §16.1) */
    int mtp_pairing;       /* which main-model state the MTP block pairs with Emb(t_p) (spec §13.2):
                              MINKE_MTP_PAIR_PREV (default) or MINKE_MTP_PAIR_SAME */
    const void *gguf_image;   /* when non-NULL: the main GGUF as a caller-owned memory image of
                                 gguf_image_size bytes, used instead of opening `path` (which may
                                 be NULL; it only names the model then). The image must outlive
                                 the model; the CPU backend reads weights from it in place. */
    uint64_t gguf_image_size;
} minke_model_params;

/* MTP pairing (spec §13.2 open question). PREV: the DeepSeek-V3 training
 * convention, MTP(Emb(t_p), H_{p-1}) at position p predicts t_{p+1}.
 * SAME: ds4's, MTP(Emb(t_p), H_p) at position p, whose argmax is a guess of
 * t_{p+1} checked against the main model before further drafts are made. */
enum { MINKE_MTP_PAIR_PREV = 0, MINKE_MTP_PAIR_SAME = 1 };

void minke_model_params_default(minke_model_params *p);

/* Thread-local description of the last error. Never NULL. */
const char *minke_last_error(void);

minke_model *minke_model_open(const minke_model_params *p);
void minke_model_close(minke_model *m);

typedef struct minke_model_info {
    const char *name;       /* general.name or the file name */
    int n_vocab;
    int n_layer;
    int n_embd;
    int n_ctx_train;        /* deepseek4.context_length when present, else 0 */
    uint64_t weight_bytes;  /* bytes of tensor data bound */
    const char *backend;    /* "cpu" or "cuda" */
} minke_model_info;

const minke_model_info *minke_model_get_info(const minke_model *m);
/* The GGUF container of the main file (tokenizer and metadata live there). */
const struct gguf_file *minke_model_gguf(const minke_model *m);

/* ---- sessions ---- */
minke_session *minke_session_create(minke_model *m, int n_ctx);
void minke_session_free(minke_session *s);
/* Bytes of KV state allocated for the session's context size. */
uint64_t minke_session_state_bytes(const minke_session *s);
int minke_session_n_ctx(const minke_session *s);
int minke_session_pos(const minke_session *s);     /* tokens processed so far */
void minke_session_reset(minke_session *s);         /* back to position 0 */
void minke_session_set_chunk(minke_session *s, int chunk); /* prefill chunk, 0 = whole */

/* Run n tokens. When all_logits is non-NULL it receives n * n_vocab floats
 * (row-major, position by position). The last position's logits are always
 * kept and readable with minke_logits(). Errors: token id out of range,
 * context overflow (pos + n > n_ctx). On error the session is unchanged. */
int minke_prefill(minke_session *s, const int32_t *tokens, int n, float *all_logits);
int minke_decode(minke_session *s, int32_t token);  /* = prefill of one token */
/* n_vocab floats; NULL before the first token, or (error set) when a device
 * that kept them fails to copy them (a one-token decode on CUDA leaves the
 * logits on the device until they are asked for) */
const float *minke_logits(const minke_session *s);
/* whether the session has last logits (nothing is fetched) */
int minke_session_has_logits(const minke_session *s);

/* The next token from the session's last logits, as the sampler
 * (src/engine/sample.h) picks it from minke_logits(): the same token and the
 * same draw of its generator; force_greedy: the argmax for this token. After
 * a one-token minke_decode on a backend that keeps the logits on the device
 * (CUDA) only the argmax and the candidates above the min-p floor come back
 * (copying the vocabulary's logits and scanning them on the host cost ~8% of
 * a decode step on an H200); settings that need the whole distribution
 * (top_k, top_p < 1, min_p 0) fetch it. -1 with minke_last_error() when there
 * are no logits or the device failed. */
struct sampler;
int32_t minke_sample(minke_session *s, struct sampler *sp, int force_greedy);

/* In-memory snapshots (copy of the whole live state, including last logits). */
minke_snapshot *minke_snapshot_take(const minke_session *s);
int minke_snapshot_restore(minke_session *s, const minke_snapshot *snap);
int minke_snapshot_pos(const minke_snapshot *snap);
void minke_snapshot_free(minke_snapshot *snap);

/* Serialised session state (for the disk KV cache). The bytes are
 * self-describing enough to be rejected when they do not match the model
 * and context size (returns non-zero with an error, session unchanged). */
uint64_t minke_session_serial_bytes(const minke_session *s);
int minke_session_serialize(const minke_session *s, void *buf, uint64_t len);
int minke_session_deserialize(minke_session *s, const void *buf, uint64_t len);

/* ---- MTP (multi-token prediction, spec §13; CPU backend only) ----
 * With params.mtp_path the model loads the MTP GGUF (validated against the
 * main model's shapes; token_embd and output.weight are shared). Every
 * prefill/decode then also writes the MTP block's own KV rows for the tokens
 * it processes and keeps the main model's final HC state of the last token,
 * so snapshots and serialised states include that MTP state (and states are
 * only exchangeable between models opened with the same MTP file and pairing).
 * Drafting does not change the session. */
int minke_has_mtp(const minke_model *m);
/* Greedy drafts (spec §13.2 steps 1-2) for the tokens that follow `token`,
 * the next token the caller will feed (not yet processed): drafts[0] guesses
 * the token after it, drafts[k] the one after drafts[k-1]. Returns how many
 * were written (0..n_draft; 0 at position 0, when n_draft would pass the
 * context end, or, with MINKE_MTP_PAIR_SAME, when the MTP's own guess of
 * `token` disagrees), or -1 with an error (no MTP, bad token). */
int minke_mtp_draft(minke_session *s, int32_t token, int n_draft, int32_t *drafts);
/* Exact greedy speculative decoding, one step. `token` is the next token
 * (the caller's greedy choice from minke_logits). Feeds it, plus the longest
 * prefix of up to n_draft MTP drafts that the main model confirms as its own
 * argmax choices (verified in one prefill after a snapshot; on a mismatch the
 * snapshot is restored and only the confirmed tokens are fed again). At most
 * max_extra tokens beyond `token` are fed, never one equal to stop_token
 * (-1: none), never past the context. out receives the fed tokens (out[0] =
 * token; room for 1 + n_draft, and out[count..] holds the rejected drafts);
 * returns their count (>= 1) or -1 on error.
 * *n_drafted (may be NULL) gets the number of drafts tried. The session ends
 * exactly as after minke_decode of each fed token (prefill = decode, spec
 * §12); without MTP it is one minke_decode. */
int minke_spec_greedy_step(minke_session *s, int32_t token, int n_draft, int max_extra, int32_t stop_token,
                           int32_t *out, int *n_drafted);
/* The verification half of it, for drafts from any source: feeds seq[0],
 * then the longest prefix of the guesses seq[1..n_seq) that greedy decoding
 * would produce (stopping before stop_token); returns how many tokens of seq
 * were fed (>= 1) or -1. Same exactness as above. */
int minke_spec_verify_greedy(minke_session *s, const int32_t *seq, int n_seq, int32_t stop_token);

/* Debug taps: when set, backends call the hook with named intermediate
 * tensors (e.g. "blk.3.out", "hc_head.out") for comparison across backends. */
typedef void (*minke_tap_fn)(void *user, const char *name, int pos, const float *data, int64_t n);
void minke_set_tap(minke_model *m, minke_tap_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
