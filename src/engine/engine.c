/* engine.c: the public engine API (include/minke.h) on top of a backend
 * (engine/backend.h): model open/close, sessions with input validation and
 * chunked prefill, last logits, snapshots and serialised state.
 *
 * Serialised state = a 48-byte header + last logits + the backend-neutral
 * KV payload (minke_kv_layout). The header carries a hash of the GGUF header
 * (metadata + tensor table) and n_ctx so bytes from another model or context
 * size are rejected before anything is touched; the hash also covers the
 * numerics (simulations on/off, activation numerics). With an MTP file the MTP
 * state payload (backend.h) follows the KV payload, and the identity also
 * hashes the MTP file's header and the pairing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/sample.h"
#include "gguf/gguf.h"

struct minke_session {
    minke_model *m;
    void *bs;
    int n_ctx, pos, chunk;
    int has_logits;
    int logits_dev;        /* the last logits are still on the backend's device (s->logits stale) */
    float *logits;
    int32_t *cand_ids;     /* minke_sample: the candidates a device sends back (one allocation, */
    float *cand_vals;      /*   the values after the ids) */
    uint8_t *frontier;     /* speculative verification: backend frontier + logits (lazy) */
    uint64_t frontier_bytes;
};

struct minke_snapshot {
    int pos;
    uint64_t bytes;
    uint8_t *data;   /* serialised form */
};

/* ---- errors ---- */
static __thread char g_err[1024] = "no error";

const char *minke_last_error(void) { return g_err; }

void minke_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

/* ---- model ---- */
void minke_model_params_default(minke_model_params *p) {
    memset(p, 0, sizeof *p);
    p->backend = MINKE_BACKEND_CPU;
    p->n_threads = 0;
    p->sims = 1;
    p->progress = 0;
    p->n_gpus = 0;
}

static uint64_t fnv1a(const uint8_t *p, uint64_t n, uint64_t h) {
    for (uint64_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}

/* Open, validate and bind the MTP file (spec §4.4) against the main config. */
static int mtp_open(minke_model *m, const char *path) {
    if (!m->ops->mtp_draft || !m->ops->mtp_state_save || !m->ops->mtp_state_load) {
        minke_set_error("MTP is CPU-only for now (the %s backend has no MTP block); drop the MTP file", m->ops->name);
        return -1;
    }
    char err[512];
    m->mtp_path = strdup(path);
    m->mtp_gguf = gguf_open(path, err, sizeof err);
    if (!m->mtp_gguf) { minke_set_error("MTP file: %s", err); return -1; }
    if (dsv4_check_mtp_tensors(m->mtp_gguf, &m->w.cfg, err, sizeof err) != 0) {
        minke_set_error("MTP file %s does not fit the model: %s", path, err);
        return -1;
    }
    m->mtp = calloc(1, sizeof *m->mtp);
    if (!m->mtp) { minke_set_error("out of memory"); return -1; }
    if (dsv4_mtp_weights_bind(m->mtp_gguf, &m->w.cfg, m->mtp, err, sizeof err) != 0) {
        minke_set_error("MTP file %s: %s", path, err);
        return -1;
    }
    m->params.mtp_path = m->mtp_path;
    m->identity = fnv1a(m->mtp_gguf->map, m->mtp_gguf->data_offset, m->identity ^ 0x4d5450ULL);
    m->identity = fnv1a((const uint8_t *)&m->params.mtp_pairing, sizeof m->params.mtp_pairing, m->identity);
    return 0;
}

static void mtp_close(minke_model *m) {
    if (m->mtp_gguf) gguf_close(m->mtp_gguf);
    free(m->mtp);
    free(m->mtp_path);
    m->mtp_gguf = NULL;
    m->mtp = NULL;
    m->mtp_path = NULL;
    m->params.mtp_path = NULL;
}

minke_model *minke_model_open(const minke_model_params *p) {
    if (!p || (!p->path && !p->gguf_image)) { minke_set_error("no model path given"); return NULL; }
    const char *path = p->path ? p->path : "memory image";
    const minke_backend_ops *ops = NULL;
    if (p->backend == MINKE_BACKEND_CPU) {
        ops = minke_backend_cpu();
    } else if (p->backend == MINKE_BACKEND_CUDA) {
#ifdef MINKE_CUDA
        ops = minke_backend_cuda();
#else
        minke_set_error("cuda backend requested but minke was built without CUDA (make cuda)");
        return NULL;
#endif
    } else {
        minke_set_error("unknown backend %d", (int)p->backend);
        return NULL;
    }
    if (p->backend == MINKE_BACKEND_CPU && (p->n_gpus > 1 || p->n_gpus < 0)) {
        minke_set_error("--gpus is for the cuda backend (add --backend cuda)");
        return NULL;
    }
    minke_model *m = calloc(1, sizeof *m);
    if (!m) { minke_set_error("out of memory"); return NULL; }
    m->params = *p;
    m->params.sims = p->sims ? 1 : 0;
    if (m->params.n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        m->params.n_threads = n > 0 ? (int)n : 1;
    }
    m->path = strdup(path);
    m->params.path = m->path;
    m->params.mtp_path = NULL;
    m->params.mtp_pairing = p->mtp_pairing == MINKE_MTP_PAIR_SAME ? MINKE_MTP_PAIR_SAME : MINKE_MTP_PAIR_PREV;
    char err[512];
    if (p->gguf_image) {
        m->gguf = gguf_open_buffer(p->gguf_image, p->gguf_image_size, err, sizeof err);
        if (!m->gguf) { minke_set_error("%s: %s", path, err); free(m->path); free(m); return NULL; }
    } else {
        m->gguf = gguf_open(path, err, sizeof err);
        if (!m->gguf) { minke_set_error("%s", err); free(m->path); free(m); return NULL; }
    }
    if (dsv4_weights_bind(m->gguf, &m->w, err, sizeof err) != 0) {
        minke_set_error("%s: %s", path, err);
        gguf_close(m->gguf); free(m->path); free(m);
        return NULL;
    }
    m->identity = fnv1a(m->gguf->map, m->gguf->data_offset, 0xcbf29ce484222325ULL);
    /* the KV rows depend on the numerics too: a state saved with other
     * simulations or activation numerics must not be restored */
    {
        int32_t num[2] = {m->params.sims ? 1 : 0, m->params.act};
        m->identity = fnv1a((const uint8_t *)num, sizeof num, m->identity);
    }
    m->ops = ops;
    if (p->mtp_path && mtp_open(m, p->mtp_path) != 0) {
        mtp_close(m);
        gguf_close(m->gguf); free(m->path); free(m);
        return NULL;
    }
    if (ops->model_init(m) != 0) {
        mtp_close(m);
        gguf_close(m->gguf); free(m->path); free(m);
        return NULL;
    }
    const dsv4_config *c = &m->w.cfg;
    if (c->name[0]) snprintf(m->name, sizeof m->name, "%s", c->name);
    else {
        const char *b = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", b ? b + 1 : path);
    }
    m->info.name = m->name;
    m->info.n_vocab = (int)c->n_vocab;
    m->info.n_layer = (int)c->n_layer;
    m->info.n_embd = (int)c->n_embd;
    m->info.n_ctx_train = c->context_length > 0x7fffffff ? 0x7fffffff : (int)c->context_length;
    m->info.weight_bytes = m->w.total_bytes + (m->mtp ? m->mtp->total_bytes : 0);
    m->info.backend = ops->name;
    return m;
}

void minke_model_close(minke_model *m) {
    if (!m) return;
    m->ops->model_free(m);
    mtp_close(m);
    gguf_close(m->gguf);
    free(m->path);
    free(m);
}

const minke_model_info *minke_model_get_info(const minke_model *m) { return m ? &m->info : NULL; }
const struct gguf_file *minke_model_gguf(const minke_model *m) { return m ? m->gguf : NULL; }

void minke_set_tap(minke_model *m, minke_tap_fn fn, void *user) {
    if (!m) return;
    m->tap = fn;
    m->tap_user = user;
}

/* ---- sessions ---- */
minke_session *minke_session_create(minke_model *m, int n_ctx) {
    if (!m) { minke_set_error("no model"); return NULL; }
    if (n_ctx < 1) { minke_set_error("context size must be at least 1 (got %d)", n_ctx); return NULL; }
    minke_session *s = calloc(1, sizeof *s);
    if (!s) { minke_set_error("out of memory"); return NULL; }
    s->m = m;
    s->n_ctx = n_ctx;
    s->logits = calloc(m->w.cfg.n_vocab, sizeof(float));
    if (!s->logits) { free(s); minke_set_error("out of memory"); return NULL; }
    s->bs = m->ops->session_alloc(m, n_ctx);
    if (!s->bs) { free(s->logits); free(s); return NULL; }
    return s;
}

void minke_session_free(minke_session *s) {
    if (!s) return;
    s->m->ops->session_free(s->m, s->bs);
    free(s->logits);
    free(s->cand_ids);
    free(s->frontier);
    free(s);
}

uint64_t minke_session_state_bytes(const minke_session *s) { return s ? s->m->ops->session_bytes(s->m, s->bs) : 0; }
int minke_session_n_ctx(const minke_session *s) { return s ? s->n_ctx : 0; }
int minke_session_pos(const minke_session *s) { return s ? s->pos : 0; }

void minke_session_reset(minke_session *s) {
    if (!s) return;
    s->m->ops->session_reset(s->m, s->bs);
    s->pos = 0;
    s->has_logits = 0;
    s->logits_dev = 0;
}

/* The last logits into s->logits if the backend still holds them. */
static int logits_sync(minke_session *s) {
    if (!s->logits_dev) return 0;
    if (s->m->ops->logits_fetch(s->m, s->bs, s->logits) != 0) return -1;
    s->logits_dev = 0;
    return 0;
}

void minke_session_set_chunk(minke_session *s, int chunk) {
    if (s) s->chunk = chunk > 0 ? chunk : 0;
}

int minke_prefill(minke_session *s, const int32_t *tokens, int n, float *all_logits) {
    if (!s) { minke_set_error("no session"); return -1; }
    if (n < 0 || (n > 0 && !tokens)) { minke_set_error("invalid token array"); return -1; }
    if (n == 0) return 0;
    int V = (int)s->m->w.cfg.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) {
            minke_set_error("token id %d at index %d is out of range (vocabulary has %d tokens)", tokens[i], i, V);
            return -1;
        }
    if ((int64_t)s->pos + n > s->n_ctx) {
        minke_set_error("context overflow: %d tokens at position %d exceed the context size %d", n, s->pos, s->n_ctx);
        return -1;
    }
    int chunk = s->chunk > 0 ? s->chunk : n;
    /* one token: the logits may stay on the device (minke_logits and
     * minke_sample fetch what they need) */
    const int lazy = n == 1 && !all_logits && !s->m->tap && s->m->ops->logits_fetch && s->m->ops->sample_cands;
    for (int i = 0; i < n; i += chunk) {
        int len = n - i < chunk ? n - i : chunk;
        s->logits_dev = 0;
        if (s->m->ops->forward(s->m, s->bs, tokens + i, len, s->pos,
                               all_logits ? all_logits + (size_t)i * V : NULL, lazy ? NULL : s->logits) != 0) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", g_err);
            minke_session_reset(s);
            minke_set_error("%s (session reset)", msg);
            return -1;
        }
        s->pos += len;
        s->has_logits = 1;
        s->logits_dev = lazy;
    }
    return 0;
}

int minke_decode(minke_session *s, int32_t token) { return minke_prefill(s, &token, 1, NULL); }

int minke_session_has_logits(const minke_session *s) { return s && s->has_logits; }

const float *minke_logits(const minke_session *s) {
    if (!s || !s->has_logits) return NULL;
    /* fetching the device's copy changes no observable state */
    return logits_sync((minke_session *)s) == 0 ? s->logits : NULL;
}

/* Candidates a device sends back before the whole vocabulary is fetched
 * instead (a flat distribution); ~8 KB a step. */
#define SAMPLE_CANDS_CAP 1024

int32_t minke_sample(minke_session *s, struct sampler *sp, int force_greedy) {
    if (!s || !sp) { minke_set_error("no session or sampler"); return -1; }
    if (!s->has_logits) { minke_set_error("no logits to sample from (nothing decoded yet)"); return -1; }
    if (s->logits_dev) {
        float off = 0, lmax = 0;
        int32_t amax = -1;
        const int plan = sampler_cands_plan(sp, force_greedy, &off);
        if (plan && !s->cand_ids) {
            if (!(s->cand_ids = malloc((sizeof(int32_t) + sizeof(float)) * SAMPLE_CANDS_CAP))) {
                minke_set_error("out of memory");
                return -1;
            }
            s->cand_vals = (float *)(s->cand_ids + SAMPLE_CANDS_CAP);
        }
        if (plan) {
            const int cap = plan == 1 ? 0 : SAMPLE_CANDS_CAP;
            int n = s->m->ops->sample_cands(s->m, s->bs, off, cap, &amax, &lmax, s->cand_ids, s->cand_vals);
            if (n < 0) return -1;
            if (n <= cap) return sampler_sample_cands(sp, s->cand_ids, s->cand_vals, n, amax, lmax, force_greedy);
        }
    }
    const float *l = minke_logits(s);
    if (!l) return -1;
    return sampler_sample(sp, l, (int)s->m->w.cfg.n_vocab, force_greedy);
}

/* ---- serialisation ---- */
#define SER_MAGIC 0x53454b4dU  /* "MKES" little-endian */
#define SER_VERSION 1U
#define SER_HEADER 48

typedef struct ser_header {
    uint32_t magic, version;
    uint64_t identity;
    uint32_t n_ctx, pos, n_vocab, has_logits;
    uint64_t payload_bytes;
    uint64_t reserved;
} ser_header;

static uint64_t payload_bytes(minke_model *m, int pos) {
    minke_kv_layer_layout *lay = malloc(sizeof *lay * m->w.cfg.n_layer);
    if (!lay) return 0;
    uint64_t b = minke_kv_layout(&m->w.cfg, pos, lay);
    free(lay);
    return b;
}

uint64_t minke_mtp_payload_bytes(const dsv4_config *cfg, int pos) {
    if (pos <= 0) return 0;
    uint64_t rows = (uint64_t)pos < cfg->sliding_window ? (uint64_t)pos : cfg->sliding_window;
    return 4 + (uint64_t)cfg->hc_dim * 4 + rows * cfg->head_dim * 4;
}

static uint64_t serial_bytes_at(minke_model *m, int pos, int has_logits) {
    return SER_HEADER + (has_logits ? (uint64_t)m->w.cfg.n_vocab * 4 : 0) + payload_bytes(m, pos) +
           (m->mtp ? minke_mtp_payload_bytes(&m->w.cfg, pos) : 0);
}

uint64_t minke_session_serial_bytes(const minke_session *s) {
    return s ? serial_bytes_at(s->m, s->pos, s->has_logits) : 0;
}

int minke_session_serialize(const minke_session *s, void *buf, uint64_t len) {
    if (!s || !buf) { minke_set_error("no session or buffer"); return -1; }
    uint64_t need = minke_session_serial_bytes(s);
    if (len < need) { minke_set_error("buffer of %llu bytes is too small (%llu needed)",
                                      (unsigned long long)len, (unsigned long long)need); return -1; }
    if (logits_sync((minke_session *)s) != 0) return -1;
    ser_header h = {SER_MAGIC, SER_VERSION, s->m->identity, (uint32_t)s->n_ctx, (uint32_t)s->pos,
                    s->m->w.cfg.n_vocab, (uint32_t)s->has_logits, payload_bytes(s->m, s->pos), 0};
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h);
    p += SER_HEADER;
    if (s->has_logits) { memcpy(p, s->logits, (size_t)h.n_vocab * 4); p += (size_t)h.n_vocab * 4; }
    if (s->m->ops->state_save(s->m, s->bs, s->pos, p) != 0) return -1;
    if (s->m->mtp) return s->m->ops->mtp_state_save(s->m, s->bs, s->pos, p + h.payload_bytes);
    return 0;
}

/* strict_ctx: serialised bytes must come from the same n_ctx; snapshots only need to fit. */
static int load_state(minke_session *s, const void *buf, uint64_t len, int strict_ctx) {
    if (!s || !buf) { minke_set_error("no session or buffer"); return -1; }
    ser_header h;
    if (len < SER_HEADER) { minke_set_error("session state is truncated (%llu bytes)", (unsigned long long)len); return -1; }
    memcpy(&h, buf, sizeof h);
    if (h.magic != SER_MAGIC || h.version != SER_VERSION) { minke_set_error("not a minke session state (bad magic or version)"); return -1; }
    if (h.identity != s->m->identity) { minke_set_error("session state belongs to a different model or was saved with other numerics (--sims, --act)"); return -1; }
    if (strict_ctx && h.n_ctx != (uint32_t)s->n_ctx) {
        minke_set_error("session state was saved with context size %u, this session has %d", h.n_ctx, s->n_ctx);
        return -1;
    }
    if (h.pos > (uint32_t)s->n_ctx) { minke_set_error("session state at position %u does not fit context size %d", h.pos, s->n_ctx); return -1; }
    if (h.n_vocab != s->m->w.cfg.n_vocab || h.has_logits > 1 || (h.pos > 0) != (h.has_logits == 1)) {
        minke_set_error("session state header is inconsistent");
        return -1;
    }
    uint64_t need = serial_bytes_at(s->m, (int)h.pos, (int)h.has_logits);
    if (h.payload_bytes != payload_bytes(s->m, (int)h.pos) || len != need) {
        minke_set_error("session state has %llu bytes, expected %llu", (unsigned long long)len, (unsigned long long)need);
        return -1;
    }
    const uint8_t *p = (const uint8_t *)buf + SER_HEADER;
    if (h.has_logits) { memcpy(s->logits, p, (size_t)h.n_vocab * 4); p += (size_t)h.n_vocab * 4; }
    s->m->ops->session_reset(s->m, s->bs);
    if (s->m->ops->state_load(s->m, s->bs, (int)h.pos, p) != 0 ||
        (s->m->mtp && s->m->ops->mtp_state_load(s->m, s->bs, (int)h.pos, p + h.payload_bytes) != 0)) {
        minke_session_reset(s);
        return -1;
    }
    s->pos = (int)h.pos;
    s->has_logits = (int)h.has_logits;
    s->logits_dev = 0;
    return 0;
}

int minke_session_deserialize(minke_session *s, const void *buf, uint64_t len) { return load_state(s, buf, len, 1); }

/* ---- snapshots ---- */
minke_snapshot *minke_snapshot_take(const minke_session *s) {
    if (!s) { minke_set_error("no session"); return NULL; }
    minke_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) { minke_set_error("out of memory"); return NULL; }
    snap->bytes = minke_session_serial_bytes(s);
    snap->data = malloc(snap->bytes);
    if (!snap->data) { free(snap); minke_set_error("out of memory for a snapshot"); return NULL; }
    if (minke_session_serialize(s, snap->data, snap->bytes) != 0) { free(snap->data); free(snap); return NULL; }
    snap->pos = s->pos;
    return snap;
}

int minke_snapshot_restore(minke_session *s, const minke_snapshot *snap) {
    if (!snap) { minke_set_error("no snapshot"); return -1; }
    return load_state(s, snap->data, snap->bytes, 0);
}

int minke_snapshot_pos(const minke_snapshot *snap) { return snap ? snap->pos : 0; }

void minke_snapshot_free(minke_snapshot *snap) {
    if (!snap) return;
    free(snap->data);
    free(snap);
}

/* ---- MTP ---- */
int minke_has_mtp(const minke_model *m) { return m && m->mtp ? 1 : 0; }

int minke_mtp_draft(minke_session *s, int32_t token, int n_draft, int32_t *drafts) {
    if (!s) { minke_set_error("no session"); return -1; }
    if (!s->m->mtp) { minke_set_error("the model was opened without an MTP file"); return -1; }
    if (n_draft < 0 || (n_draft > 0 && !drafts)) { minke_set_error("invalid draft array"); return -1; }
    if (token < 0 || (uint32_t)token >= s->m->w.cfg.n_vocab) {
        minke_set_error("token id %d is out of range (vocabulary has %u tokens)", token, s->m->w.cfg.n_vocab);
        return -1;
    }
    /* drafts follow `token`, which goes at s->pos: keep them inside the context */
    int room = s->n_ctx - s->pos - 1;
    if (n_draft > room) n_draft = room;
    if (s->pos == 0 || n_draft <= 0) return 0;
    return s->m->ops->mtp_draft(s->m, s->bs, s->pos, token, n_draft, drafts);
}

int minke_spec_verify_greedy(minke_session *s, const int32_t *seq, int n_seq, int32_t stop_token) {
    if (!s || !seq || n_seq < 1) { minke_set_error("no session or empty token sequence"); return -1; }
    if (n_seq == 1) return minke_decode(s, seq[0]) == 0 ? 1 : -1;
    int n = n_seq - 1;   /* guesses after seq[0] */
    int V = (int)s->m->w.cfg.n_vocab, rc = -1;
    const minke_backend_ops *ops = s->m->ops;
    int pos0 = s->pos, had_logits = s->has_logits;
    minke_snapshot *snap = NULL;
    float *all = malloc(sizeof(float) * (size_t)n_seq * V);
    if (!all) { minke_set_error("out of memory"); goto out; }
    if (ops->frontier_save) {
        /* the fixed-size frontier instead of a whole snapshot (which grows with the position) */
        uint64_t fb = ops->frontier_bytes(s->m, s->bs);
        if (!s->frontier || s->frontier_bytes != fb) {
            free(s->frontier);
            s->frontier = malloc(fb + (uint64_t)V * 4);
            s->frontier_bytes = s->frontier ? fb : 0;
            if (!s->frontier) { minke_set_error("out of memory"); goto out; }
        }
        if (logits_sync(s) != 0) goto out;
        ops->frontier_save(s->m, s->bs, s->frontier);
        memcpy(s->frontier + fb, s->logits, (size_t)V * 4);
    } else if (!(snap = minke_snapshot_take(s))) {
        goto out;
    }
    if (minke_prefill(s, seq, n_seq, all) != 0) goto out;
    int a = 0;   /* guesses confirmed: the main model's argmax after seq[a] is seq[a+1] */
    while (a < n && seq[1 + a] != stop_token && sampler_argmax(all + (size_t)a * V, V) == seq[1 + a]) a++;
    if (a < n) {
        /* forget the unconfirmed tail: back to the snapshot, feed the confirmed part again */
        if (snap) {
            if (minke_snapshot_restore(s, snap) != 0) goto out;
        } else {
            ops->frontier_load(s->m, s->bs, s->frontier);
            memcpy(s->logits, s->frontier + s->frontier_bytes, (size_t)V * 4);
            s->pos = pos0;
            s->has_logits = had_logits;
            s->logits_dev = 0;
        }
        if (minke_prefill(s, seq, a + 1, NULL) != 0) goto out;
    }
    rc = a + 1;
out:
    minke_snapshot_free(snap);
    free(all);
    return rc;
}

int minke_spec_greedy_step(minke_session *s, int32_t token, int n_draft, int max_extra, int32_t stop_token,
                           int32_t *out, int *n_drafted) {
    if (n_drafted) *n_drafted = 0;
    if (!s || !out) { minke_set_error("no session or output array"); return -1; }
    if (n_draft > max_extra) n_draft = max_extra;
    out[0] = token;
    int n = 0;
    if (s->m->mtp && n_draft > 0) {
        n = minke_mtp_draft(s, token, n_draft, out + 1);
        if (n < 0) return -1;
    }
    if (n_drafted) *n_drafted = n;
    return minke_spec_verify_greedy(s, out, n + 1, stop_token);
}
