/* synth.c: synthetic DeepSeek V4 weights (see synth.h for the rules).
 *
 * Each row has its own splitmix64 stream seeded from (seed, tensor name,
 * row), so any row range can be produced independently on any thread.
 * Values are drawn from a zero-mean uniform distribution of the target
 * standard deviation (or a fixed range for norms and HC scales). Quantized
 * types get random valid blocks whose scale is set from the measured RMS of
 * a unit-scale block of the same generator, so every format reaches the
 * same target spread.
 */
#include "model/synth.h"

#include <math.h>
#include <pthread.h>
#ifdef __F16C__
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/rowpool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "text/tokjson.h"

/* ------------------------------------------------------------------------------------------ */
/* random numbers */

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static uint64_t row_state(uint64_t seed, uint64_t tensor_hash, int64_t row) {
    uint64_t s = seed * 0xD1B54A32D192ED03ull ^ tensor_hash;
    s ^= (uint64_t)row * 0x9E3779B97F4A7C15ull;
    splitmix64(&s);
    return s;
}

/* uniform in [-1, 1) from 24 bits */
static inline float unit_sym(uint64_t bits24) { return (float)(int64_t)bits24 * (1.0f / 8388608.0f) - 1.0f; }

/* Fill n uniform values in [-1, 1). */
static void fill_unit(uint64_t *st, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t r = splitmix64(st);
        dst[i] = unit_sym(r & 0xFFFFFF);
        dst[i + 1] = unit_sym((r >> 32) & 0xFFFFFF);
    }
    if (i < n) dst[i] = unit_sym(splitmix64(st) & 0xFFFFFF);
}

static void fill_bytes(uint64_t *st, uint8_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = splitmix64(st);
        memcpy(dst + i, &r, 8);
    }
    if (i < n) {
        uint64_t r = splitmix64(st);
        memcpy(dst + i, &r, (size_t)(n - i));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* value distributions per tensor kind */

enum { DIST_SYM, DIST_RANGE };
typedef struct {
    int kind;
    float a, b; /* SYM: std a; RANGE: uniform [a, b] */
} dist;

static dist sym(float std) { return (dist){DIST_SYM, std, 0}; }
static dist range(float lo, float hi) { return (dist){DIST_RANGE, lo, hi}; }

static dist tensor_dist(const dsv4_config *c, const dsv4_tensor_spec *s, float damp) {
    float D = (float)c->n_embd;
    float inv_D = 1.0f / sqrtf(D);
    switch (s->kind) {
    case DSV4_T_TOKEN_EMBD: return sym(1.0f);
    case DSV4_T_OUTPUT: return sym(1.5f * inv_D);
    case DSV4_T_OUTPUT_HC_FN:
    case DSV4_T_MTP_HC_HEAD_FN:
    case DSV4_T_HC_ATTN_FN:
    case DSV4_T_HC_FFN_FN: return sym(0.5f / sqrtf((float)c->hc_dim));
    case DSV4_T_OUTPUT_HC_SCALE:
    case DSV4_T_MTP_HC_HEAD_SCALE:
    case DSV4_T_HC_ATTN_SCALE:
    case DSV4_T_HC_FFN_SCALE: return range(0.5f, 1.5f);
    case DSV4_T_OUTPUT_HC_BASE:
    case DSV4_T_MTP_HC_HEAD_BASE:
    case DSV4_T_HC_ATTN_BASE:
    case DSV4_T_HC_FFN_BASE: return sym(0.5f);
    case DSV4_T_OUTPUT_NORM:
    case DSV4_T_MTP_ENORM:
    case DSV4_T_MTP_HNORM:
    case DSV4_T_MTP_NORM:
    case DSV4_T_ATTN_NORM:
    case DSV4_T_ATTN_Q_A_NORM:
    case DSV4_T_ATTN_KV_A_NORM:
    case DSV4_T_ATTN_COMPRESSOR_NORM:
    case DSV4_T_INDEXER_COMPRESSOR_NORM:
    case DSV4_T_FFN_NORM: return range(0.8f, 1.2f);
    case DSV4_T_ATTN_SINKS:
    case DSV4_T_ATTN_COMPRESSOR_APE:
    case DSV4_T_INDEXER_COMPRESSOR_APE: return sym(0.5f);
    case DSV4_T_EXP_PROBS_B: return sym(0.1f);
    case DSV4_T_ATTN_OUTPUT_B: return sym(damp / sqrtf((float)s->ne[0]));
    case DSV4_T_FFN_DOWN_EXPS:
    case DSV4_T_FFN_DOWN_SHEXP: return sym(damp / sqrtf((float)s->ne[0]));
    default: return sym(1.0f / sqrtf((float)s->ne[0])); /* projections: 1/sqrt(fan_in) */
    }
}

/* ------------------------------------------------------------------------------------------ */
/* random valid blocks with scale parameter d (or exponent for MXFP4) */

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void gen_q8_0(uint64_t *st, float d, uint8_t *dst, int64_t nb) {
    uint16_t dh = f32_to_f16(d);
    for (int64_t b = 0; b < nb; b++, dst += 34) {
        put16(dst, dh);
        uint8_t r[32];
        fill_bytes(st, r, 32);
        for (int i = 0; i < 32; i++) dst[2 + i] = (uint8_t)(int8_t)(((int)r[i] * 255 >> 8) - 127);
    }
}

static void gen_q2_k(uint64_t *st, float d, uint8_t *dst, int64_t nb) {
    uint16_t dh = f32_to_f16(d);
    for (int64_t b = 0; b < nb; b++, dst += 84) {
        uint8_t r[16];
        fill_bytes(st, r, 16);
        for (int i = 0; i < 16; i++) {
            int sc = 6 + r[i] % 5;        /* 6..10 */
            int mn = (3 * sc + (r[i] >> 7)) / 2; /* 1.5 sc, odd sc rounded either way: centres the codes 0..3 */
            dst[i] = (uint8_t)(sc | (mn << 4));
        }
        fill_bytes(st, dst + 16, 64);
        put16(dst + 80, dh);
        put16(dst + 82, dh);
    }
}

static void gen_q4_k(uint64_t *st, float d, uint8_t *dst, int64_t nb) {
    uint16_t dh = f32_to_f16(d), dmh = f32_to_f16(8.0f * d);
    for (int64_t b = 0; b < nb; b++, dst += 144) {
        uint8_t r[8];
        fill_bytes(st, r, 8);
        int sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = 32 + r[j] % 32;       /* 32..63 */
            mn[j] = (sc[j] * 15 + 8) / 16; /* ~7.5/8 sc: centres the codes 0..15 on zero with dmin = 8 d */
        }
        uint8_t *s = dst + 4;
        memset(s, 0, 12);
        for (int j = 0; j < 4; j++) {
            s[j] = (uint8_t)(sc[j] & 63);
            s[j + 4] = (uint8_t)(mn[j] & 63);
        }
        for (int j = 4; j < 8; j++) {
            s[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
        put16(dst, dh);
        put16(dst + 2, dmh);
        fill_bytes(st, dst + 16, 128);
    }
}

static void gen_iq2_xxs(uint64_t *st, float d, uint8_t *dst, int64_t nb) {
    uint16_t dh = f32_to_f16(d);
    for (int64_t b = 0; b < nb; b++, dst += 66) {
        put16(dst, dh);
        for (int g = 0; g < 8; g++) {
            uint64_t r = splitmix64(st);
            uint8_t *p = dst + 2 + 8 * g;
            memcpy(p, &r, 4); /* four grid indices */
            uint32_t t = 3 + (uint32_t)((r >> 60) % 8); /* group scale code 3..10 */
            uint32_t w = (uint32_t)((r >> 32) & 0x0FFFFFFF) | (t << 28);
            for (int k = 0; k < 4; k++) p[4 + k] = (uint8_t)(w >> (8 * k));
        }
    }
}

/* MXFP4 scales are powers of two: x = e + frac picks exponent floor(x) or floor(x)+1 per block,
 * with the share of the larger one chosen so the mean variance hits 4^x exactly. */
static void gen_mxfp4(uint64_t *st, float x, uint8_t *dst, int64_t nb) {
    int e = (int)floorf(x);
    float want = exp2f(2.0f * (x - (float)e)); /* variance relative to exponent e: 1..4 */
    uint32_t p_hi = (uint32_t)((want - 1.0f) / 3.0f * 65536.0f);
    for (int64_t b = 0; b < nb; b++, dst += 17) {
        uint64_t r = splitmix64(st);
        int eb = e + ((uint32_t)(r & 0xFFFF) < p_hi ? 1 : 0);
        dst[0] = (uint8_t)(eb < 1 ? 1 : eb > 254 ? 254 : eb);
        fill_bytes(st, dst + 1, 16);
    }
}

static int direct_block_type(int type) {
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_IQ2_XXS || type == GGML_TYPE_MXFP4;
}

static void gen_blocks(int type, uint64_t *st, float d, uint8_t *dst, int64_t nb) {
    switch (type) {
    case GGML_TYPE_Q8_0: gen_q8_0(st, d, dst, nb); break;
    case GGML_TYPE_Q2_K: gen_q2_k(st, d, dst, nb); break;
    case GGML_TYPE_Q4_K: gen_q4_k(st, d, dst, nb); break;
    case GGML_TYPE_IQ2_XXS: gen_iq2_xxs(st, d, dst, nb); break;
    case GGML_TYPE_MXFP4: gen_mxfp4(st, d, dst, nb); break;
    }
}

/* RMS of the dequantized values of a unit-scale generator (d = 1, MXFP4 exponent 127). */
static float unit_rms[GGML_TYPE_COUNT];
static pthread_once_t calib_once = PTHREAD_ONCE_INIT;

static void calibrate(void) {
    static const int types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_MXFP4};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = types[k];
        const quant_traits *q = quant_get(t);
        if (!q || !q->dequant) continue;
        const int64_t n = 256 * 64;
        int64_t nb = n / q->blck;
        uint8_t *blk = malloc((size_t)nb * q->bytes);
        float *f = malloc((size_t)n * sizeof *f);
        if (!blk || !f) {
            free(blk);
            free(f);
            continue;
        }
        uint64_t st = 0x5EED0000u + (uint64_t)t;
        gen_blocks(t, &st, t == GGML_TYPE_MXFP4 ? 127.0f : 1.0f, blk, nb);
        q->dequant(blk, f, n);
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)f[i] * f[i];
        unit_rms[t] = (float)sqrt(ss / (double)n);
        free(blk);
        free(f);
    }
}

/* f32 -> f16 with round-to-nearest-even (8 at a time with F16C: the embedding alone is 1 GB) */
static void store_f16(const float *f, uint8_t *dst, int64_t n) {
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), h);
    }
#endif
    for (; i < n; i++) put16(dst + 2 * i, f32_to_f16(f[i]));
}

/* ------------------------------------------------------------------------------------------ */
/* rows */

static int fill_tid2eid(const dsv4_config *c, uint64_t *st, int32_t *dst, int64_t k) {
    /* k distinct experts, drawn with rejection (k is small) */
    uint32_t ne = c->n_expert;
    int32_t picked[64];
    if (k > 64 || (uint32_t)k > ne) return -1;
    for (int64_t i = 0; i < k; i++) {
        for (;;) {
            int32_t e = (int32_t)(splitmix64(st) % ne);
            int dup = 0;
            for (int64_t j = 0; j < i; j++) dup |= picked[j] == e;
            if (!dup) {
                picked[i] = e;
                break;
            }
        }
        dst[i] = picked[i];
    }
    return 0;
}

int synth_fill_rows(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp,
                    int64_t r0, int64_t n_rows, void *dst) {
    const quant_traits *q = quant_get(type);
    const int64_t ne0 = (int64_t)s->ne[0];
    if (!q || ne0 % q->blck) return -1;
    const uint64_t rb = quant_row_bytes(type, ne0);
    /* float types share their values (an F16 tensor is the rounded F32 one); block types differ */
    const uint64_t th = name_hash(s->name) ^ (direct_block_type(type) ? (uint64_t)type << 56 : 0);
    uint8_t *out = dst;
    if (s->kind == DSV4_T_FFN_GATE_TID2EID) {
        if (type != GGML_TYPE_I32) return -1;
        for (int64_t r = 0; r < n_rows; r++) {
            uint64_t st = row_state(seed, th, r0 + r);
            if (fill_tid2eid(c, &st, (int32_t *)(void *)(out + (uint64_t)r * rb), ne0) != 0) return -1;
        }
        return 0;
    }
    if (type == GGML_TYPE_I32) return -1;
    dist ds = tensor_dist(c, s, damp);
    if (ds.kind == DIST_SYM && direct_block_type(type)) {
        pthread_once(&calib_once, calibrate);
        if (!(unit_rms[type] > 0)) return -1;
        float d;
        if (type == GGML_TYPE_MXFP4) {
            d = 127.0f + log2f(ds.a / unit_rms[type]);
            d = d < 1 ? 1 : d > 253 ? 253 : d;
        } else {
            d = ds.a / unit_rms[type];
        }
        int64_t nb = ne0 / q->blck;
        for (int64_t r = 0; r < n_rows; r++) {
            uint64_t st = row_state(seed, th, r0 + r);
            gen_blocks(type, &st, d, out + (uint64_t)r * rb, nb);
        }
        return 0;
    }
    /* floats, then stored as the type (exact for F32; rounded for F16/BF16; quantized otherwise) */
    float *f = type == GGML_TYPE_F32 ? NULL : malloc((size_t)ne0 * sizeof *f);
    if (type != GGML_TYPE_F32 && (!f || !q->quant)) {
        free(f);
        return -1;
    }
    float mul = ds.kind == DIST_SYM ? ds.a * 1.7320508f : 0.5f * (ds.b - ds.a);
    float add = ds.kind == DIST_SYM ? 0.0f : 0.5f * (ds.a + ds.b);
    for (int64_t r = 0; r < n_rows; r++) {
        float *row = f ? f : (float *)(void *)(out + (uint64_t)r * rb);
        uint64_t st = row_state(seed, th, r0 + r);
        fill_unit(&st, row, ne0);
        for (int64_t i = 0; i < ne0; i++) row[i] = row[i] * mul + add;
        if (type == GGML_TYPE_F16) store_f16(f, out + (uint64_t)r * rb, ne0);
        else if (f) q->quant(f, out + (uint64_t)r * rb, ne0);
    }
    free(f);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* whole tensors and files */

typedef struct {
    const dsv4_config *c;
    const dsv4_tensor_spec *s;
    int type;
    uint64_t seed;
    float damp;
    uint8_t *dst;
    uint64_t rb;
} fill_job;

static int fill_job_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    fill_job *j = ctx;
    return synth_fill_rows(j->c, j->s, j->type, j->seed, j->damp, r0, r1 - r0, j->dst + (uint64_t)r0 * j->rb);
}

static int64_t row_grain(const dsv4_tensor_spec *s) {
    int64_t g = (1 << 18) / (int64_t)s->ne[0];
    return g < 1 ? 1 : g;
}

int synth_fill_tensor_mt(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp,
                         void *dst, int n_threads) {
    const quant_traits *q = quant_get(type);
    if (!q || s->ne[0] % (uint64_t)q->blck) return -1;
    fill_job j = {c, s, type, seed, damp, dst, quant_row_bytes(type, (int64_t)s->ne[0])};
    return rowpool_run(n_threads, (int64_t)(s->ne[1] * s->ne[2]), row_grain(s), fill_job_rows, &j);
}

int synth_fill_tensor(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp, void *dst) {
    return synth_fill_tensor_mt(c, s, type, seed, damp, dst, 0);
}

static int fill_write_rows(void *ctx, uint8_t *dst, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    fill_job *j = ctx;
    return synth_fill_rows(j->c, j->s, j->type, j->seed, j->damp, r0, r1 - r0, dst);
}

#define SYNTH_CHUNK_BYTES (64ull << 20)

int synth_write_gguf(const char *path, const dsv4_config *c, const synth_file_opts *o, char *err, size_t errlen) {
    dsv4_tensor_spec *specs = NULL;
    int n = o->mtp ? dsv4_mtp_tensor_specs(c, &specs) : dsv4_tensor_specs(c, &specs);
    if (n <= 0) {
        snprintf(err, errlen, "cannot build the tensor list for this config");
        return -1;
    }
    int rc = -1;
    gguf_writer *w = NULL;
    uint8_t *bufs[2] = {NULL, NULL};
    uint64_t total = 0, max_rb = 0;
    for (int i = 0; i < n; i++) {
        int t = o->types ? o->types[i] : specs[i].ds4_type;
        const quant_traits *q = quant_get(t);
        if (!q || specs[i].ne[0] % (uint64_t)q->blck) {
            snprintf(err, errlen, "%s: type %s does not fit rows of %llu elements", specs[i].name, quant_name(t),
                     (unsigned long long)specs[i].ne[0]);
            goto out;
        }
        uint64_t rb = quant_row_bytes(t, (int64_t)specs[i].ne[0]);
        total += rb * specs[i].ne[1] * specs[i].ne[2];
        uint64_t g = rb * (uint64_t)row_grain(&specs[i]);
        if (g > max_rb) max_rb = g;
    }
    uint64_t buf_bytes = SYNTH_CHUNK_BYTES > max_rb ? SYNTH_CHUNK_BYTES : max_rb;
    bufs[0] = malloc(buf_bytes);
    bufs[1] = malloc(buf_bytes);
    if (!bufs[0] || !bufs[1]) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    w = gguf_writer_open(path, 32, err, errlen);
    if (!w) goto out;
    dsv4_config_write_gguf(w, c);
    if (o->mtp) {
        /* the MTP file carries no tokenizer (it uses the main file's) */
    } else if (o->tokenizer_json) {
        if (tokjson_write_gguf(w, o->tokenizer_json, NULL, err, errlen) != 0) goto out;
    } else if (toksynth_write_gguf(w, c->n_vocab, err, errlen) != 0) {
        goto out;
    }
    gguf_w_u64(w, "minke.synthetic.seed", o->seed);
    gguf_w_f32(w, "minke.synthetic.damp", o->damp);
    for (int i = 0; i < n; i++)
        gguf_w_tensor(w, specs[i].name, specs[i].n_dims, specs[i].ne,
                      (uint32_t)(o->types ? o->types[i] : specs[i].ds4_type));
    if (gguf_writer_begin_data(w) != 0) {
        snprintf(err, errlen, "%s", gguf_writer_error(w));
        goto out;
    }
    progress pg;
    progress_start(&pg, o->mtp ? "mkmodel MTP" : "mkmodel", total, o->progress);
    for (int i = 0; i < n; i++) {
        int t = o->types ? o->types[i] : specs[i].ds4_type;
        fill_job j = {c, &specs[i], t, o->seed, o->damp, NULL, 0};
        uint64_t nbytes = quant_nbytes(t, specs[i].ne[0] * specs[i].ne[1] * specs[i].ne[2]);
        if (o->holes_above && nbytes > o->holes_above) {
            if (gguf_w_zeros(w, nbytes) != 0) {
                snprintf(err, errlen, "%s: write failed: %s", specs[i].name, gguf_writer_error(w));
                goto out;
            }
            progress_add(&pg, nbytes);
            continue;
        }
        int r = rowpool_write_rows(w, o->n_threads, (int64_t)(specs[i].ne[1] * specs[i].ne[2]),
                                   quant_row_bytes(t, (int64_t)specs[i].ne[0]), row_grain(&specs[i]), fill_write_rows,
                                   &j, bufs, buf_bytes, &pg);
        if (r != 0) {
            if (r == -1 && gguf_writer_error(w) && gguf_writer_error(w)[0])
                snprintf(err, errlen, "%s: write failed: %s", specs[i].name, gguf_writer_error(w));
            else
                snprintf(err, errlen, "%s: cannot generate type %s", specs[i].name, quant_name(t));
            goto out;
        }
    }
    progress_finish(&pg);
    int wrc = gguf_writer_close(w);
    w = NULL;
    if (wrc != 0) {
        snprintf(err, errlen, "%s: %s", path, gguf_writer_error(NULL));
        goto out;
    }
    rc = 0;
out:
    if (w) gguf_writer_abort(w);
    free(bufs[0]);
    free(bufs[1]);
    free(specs);
    return rc;
}
