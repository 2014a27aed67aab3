/* cu_backend.cu: the CUDA backend (engine/backend.h): weights copied to the
 * GPU, per-session KV state on the device, the forward pass as a sequence of
 * kernel launches on one stream, and decode steps captured as CUDA graphs.
 *
 * Data flow per layer follows src/cpu/forward.c (spec model.md §7, §12): the
 * batch of T tokens goes through every per-token op at once; the order-
 * dependent parts (compressor state, indexer causality, the raw window) are
 * expressed in closed form per token (cu_ops.cu) so no host loop over tokens
 * is needed. Nothing in a step synchronises with the host except the final
 * copy of the logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_gemv3.h"
#include "cuda/cu_pool.h"
#include "cuda/cu_ops.h"
#include "cuda/cu_backend.h"
#include "cuda/cu_dec.h"
#include "cuda/cu_model.h"

extern "C" {
#include "engine/backend.h"
#include "quant/quant.h"
#include "cpu/numerics.h"
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    minke_set_error("cuda: %s failed: %s (%s:%d)", #x, cudaGetErrorString(e_), __FILE__, __LINE__); goto fail; } } while (0)

/* inside the forward: errors surface through cudaGetLastError at the end */
#define CK_ASYNC(x) ((void)(x))

/* ------------------------------------------------------------------ */
/* stage profiler (MINKE_CUDA_PROFILE=1): events between the stages of a
 * forward, graphs off; the table goes to stderr when the model is freed. */
#define PROF_MAX_EV 8192
#define PROF_MAX_NAMES 64
static int prof_on = -1;
static cudaEvent_t prof_ev[PROF_MAX_EV];
static const char *prof_evname[PROF_MAX_EV];
static int prof_nev;
static const char *prof_names[PROF_MAX_NAMES];
static double prof_ms[2][PROF_MAX_NAMES];
static long prof_tokens[2];

static void prof_mark(cudaStream_t st, const char *name) {
    if (prof_on != 1 || prof_nev >= PROF_MAX_EV) return;
    if (!prof_ev[prof_nev]) cudaEventCreate(&prof_ev[prof_nev]);
    cudaEventRecord(prof_ev[prof_nev], st);
    prof_evname[prof_nev++] = name;
}
static void prof_collect(int decode, int T) {
    if (prof_on != 1) return;
    cudaEventSynchronize(prof_ev[prof_nev - 1]);
    for (int i = 0; i + 1 < prof_nev; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, prof_ev[i], prof_ev[i + 1]);
        int k = 0;
        while (k < PROF_MAX_NAMES && prof_names[k] && strcmp(prof_names[k], prof_evname[i])) k++;
        if (k == PROF_MAX_NAMES) continue;
        prof_names[k] = prof_evname[i];
        prof_ms[decode][k] += ms;
    }
    prof_tokens[decode] += T;
    prof_nev = 0;
}
static void prof_report(void) {
    if (prof_on != 1) return;
    double tot[2] = {0, 0};
    for (int k = 0; k < PROF_MAX_NAMES && prof_names[k]; k++) { tot[0] += prof_ms[0][k]; tot[1] += prof_ms[1][k]; }
    fprintf(stderr, "cuda profile (ms per token; prefill over %ld tokens, decode over %ld):\n", prof_tokens[0], prof_tokens[1]);
    fprintf(stderr, "  %-14s %10s %6s %10s %6s\n", "stage", "prefill", "%", "decode", "%");
    for (int k = 0; k < PROF_MAX_NAMES && prof_names[k]; k++)
        fprintf(stderr, "  %-14s %10.4f %5.1f%% %10.4f %5.1f%%\n", prof_names[k],
                prof_tokens[0] ? prof_ms[0][k] / prof_tokens[0] : 0, tot[0] > 0 ? 100 * prof_ms[0][k] / tot[0] : 0,
                prof_tokens[1] ? prof_ms[1][k] / prof_tokens[1] : 0, tot[1] > 0 ? 100 * prof_ms[1][k] / tot[1] : 0);
    fprintf(stderr, "  %-14s %10.4f %6s %10.4f\n", "total", prof_tokens[0] ? tot[0] / prof_tokens[0] : 0, "",
            prof_tokens[1] ? tot[1] / prof_tokens[1] : 0);
}
/* MINKE_CUDA_SKIP=stage[,stage...] (cu_common.cuh): the decode launches of
 * those stages (the PROF names below) are left out, to time what each costs
 * inside the decode graph. Wrong results: a measuring aid, announced on stderr. */
thread_local int cu_skip_launch = 0;
static const char *skip_list = NULL;
static int skip_matches(const char *name) {
    size_t n = strlen(name);
    for (const char *p = skip_list; p && *p; ) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return 1;
        p = e ? e + 1 : p + k;
    }
    return 0;
}
static void stage_mark(int T, cudaStream_t st, int rank, const char *name) {
    if (rank == 0) prof_mark(st, name);
    cu_skip_launch = skip_list && T == 1 && skip_matches(name);
}
#define PROF(f, name) stage_mark((f)->T, (f)->st, (f)->cm->rank, name)

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* ------------------------------------------------------------------ */
/* model init: weights to the device                                   */

static int is_vector_tensor(const char *field) {
    static const char *v[] = {"hc_attn_scale", "hc_attn_base", "attn_norm", "q_a_norm", "kv_norm", "sinks",
                              "comp_norm", "idx_comp_norm", "hc_ffn_scale", "hc_ffn_base", "ffn_norm", "exp_bias",
                              "output_hc_base", "output_hc_scale", "output_norm", "comp_ape", "idx_comp_ape", NULL};
    for (int i = 0; v[i]; i++) if (!strcmp(v[i], field)) return 1;
    return 0;
}
static int is_plain_float(int t) { return t == CU_TYPE_F32 || t == CU_TYPE_F16 || t == CU_TYPE_BF16; }

typedef struct upload_job {
    const dsv4_tensor *src;
    cu_t *dst;
    const char *field;
    int to_f32;
    uint64_t off;          /* where this GPU's part starts in the tensor (its experts) */
    /* this GPU's part as npieces pieces of width bytes, piece i at off + i pitch
     * (0: the whole tensor, or one run of whole experts) */
    uint64_t width, pitch, npieces;
} upload_job;

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void progress(int on, uint64_t done, uint64_t total, double t0) {
    if (!on) return;
    int w = 40, f = total ? (int)(w * (double)done / total) : w;
    double el = now_s() - t0;
    fprintf(stderr, "\rcuda: loading weights [%.*s%*s] %5.1f / %.1f GiB  %.1f GB/s", f,
            "########################################", w - f, "", done / 1073741824.0, total / 1073741824.0,
            el > 0 ? done / el / 1e9 : 0.0);
    if (done >= total) fputc('\n', stderr);
}

static void dev_free(minke_model *m, cu_model *cm) {
    if (!cm) return;
    cudaSetDevice(cm->dev);
#define FREE_T(n) cudaFree(cm->n.alloc);
    GLOBAL_FIELDS(FREE_T)
    if (cm->layers) {
        for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) {
            cu_layer *L = &cm->layers[il];
#define FREE_L(n) cudaFree(L->n.alloc);
            LAYER_FIELDS(FREE_L)
        }
        free(cm->layers);
    }
    cudaFree(cm->rope_main);
    cudaFree(cm->rope_comp);
    /* cu_mmh's scratch of these streams */
    if (cm->st) cu_mmh_release(cm->st);
    if (cm->st2) cu_mmh_release(cm->st2);
    if (cm->st3) cu_mmh_release(cm->st3);
    if (cm->st) cudaStreamDestroy(cm->st);
    if (cm->st2) cudaStreamDestroy(cm->st2);
    if (cm->ev_fork) cudaEventDestroy(cm->ev_fork);
    if (cm->ev_join) cudaEventDestroy(cm->ev_join);
    if (cm->st3) cudaStreamDestroy(cm->st3);
    if (cm->ev_fork3) cudaEventDestroy(cm->ev_fork3);
    if (cm->ev_join3) cudaEventDestroy(cm->ev_join3);
    free(cm);
}

static void cu_model_free(minke_model *m) {
    cu_group *g = GRP(m);
    if (!g) return;
    prof_report();
    cu_pool_free(g->pool);
    for (int r = 0; r < g->n; r++) {
        if (g->dev[r] && g->dev[r]->comm) { cudaSetDevice(g->dev[r]->dev); ncclCommDestroy(g->dev[r]->comm); }
        dev_free(m, g->dev[r]);
    }
    free(g);
    m->be = NULL;
}

/* Synthetic fill scale for a matrix: 1/sqrt(fan in). */
static float synth_scale(const dsv4_tensor *t) { return t->ne[0] > 0 ? 1.0f / sqrtf((float)t->ne[0]) : 1.0f; }

/* Tensor parallel: the dense matrices split by rows and by input columns. */
static int tp_rows(const char *f) { return !strcmp(f, "q_b") || !strcmp(f, "out_a") || !strcmp(f, "gate_shexp") || !strcmp(f, "up_shexp"); }
static int tp_cols(const char *f) { return !strcmp(f, "out_b") || !strcmp(f, "down_shexp"); }

/* The routed experts' matrices: split by expert id over the GPUs. */
static int is_expert_tensor(const char *field) {
    return !strcmp(field, "gate_exps") || !strcmp(field, "up_exps") || !strcmp(field, "down_exps");
}

/* A matrix split by rows: each of its ne[2] slices (experts) keeps rows
 * [rank share, (rank + 1) share), one piece a slice. */
static void split_rows(upload_job *j, const cu_model *cm) {
    uint64_t rb = j->src->row_bytes, share = (uint64_t)j->dst->ne[1] / (uint64_t)cm->nrank;
    j->width = share * rb;
    j->off = (uint64_t)cm->rank * j->width;
    j->pitch = (uint64_t)j->dst->ne[1] * rb;
    j->npieces = (uint64_t)j->dst->ne[2];
    j->dst->ne[1] = (int64_t)share;
    j->dst->nbytes = j->width * j->npieces;
}
/* A matrix split by input columns (whole blocks): every row keeps bytes
 * [rank w, (rank + 1) w) of its row, one piece a row. */
static void split_cols(upload_job *j, const cu_model *cm) {
    uint64_t w = j->src->row_bytes / (uint64_t)cm->nrank;
    j->off = (uint64_t)cm->rank * w;
    j->width = w;
    j->pitch = j->src->row_bytes;
    j->npieces = (uint64_t)j->dst->ne[1] * j->dst->ne[2];
    j->dst->ne[0] /= cm->nrank;
    j->dst->row_bytes = w;
    j->dst->nbytes = j->width * j->npieces;
}

/* One GPU's part of the model: every tensor, except that of the routed
 * experts only [own0, own1) (cu_t.d still indexes experts by their global id)
 * and of a split matrix only this GPU's rows or columns (split_rows,
 * split_cols). Runs with cm->dev current. */
static int dev_init(minke_model *m, cu_model *cm) {
    const dsv4_config *c = &m->w.cfg;
    upload_job *jobs = NULL;
    int nj = 0;
    void *stage[2] = {NULL, NULL};
    cudaEvent_t ev[2] = {NULL, NULL};
    const size_t STAGE = 64u << 20;
    uint64_t total = 0, done = 0;
    double t0 = now_s();
    int prog = m->params.progress && isatty(2);

    cm->act_f32 = m->params.act != MINKE_ACT_Q8;
    cm->layers = (cu_layer *)calloc(c->n_layer, sizeof(cu_layer));
    jobs = (upload_job *)calloc(6 + (size_t)c->n_layer * 40, sizeof(upload_job));
    if (!cm->layers || !jobs) { minke_set_error("out of memory"); goto fail; }
    CK(cudaSetDevice(cm->dev));
    CK(cudaStreamCreateWithFlags(&cm->st, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&cm->st2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&cm->ev_fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&cm->ev_join, cudaEventDisableTiming));
    CK(cudaStreamCreateWithFlags(&cm->st3, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&cm->ev_fork3, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&cm->ev_join3, cudaEventDisableTiming));

    /* tables: __device__ symbols exist once per device */
    {
        int tr = cu_tables_init_from_quant();
        if (tr == -2) { minke_set_error("cuda backend: no IQ2_XXS decoder"); goto fail; }
        if (tr) { minke_set_error("cuda: table upload failed"); goto fail; }
        cu_ops_init();
    }
    /* RoPE tables: the CPU's own init, so the angles agree bit for bit */
    {
        nm_rope r;
        float *h = (float *)malloc(sizeof(float) * c->rope_dim);
        CK(cudaMalloc(&cm->rope_main, sizeof(float) * c->rope_dim));
        CK(cudaMalloc(&cm->rope_comp, sizeof(float) * c->rope_dim));
        nm_rope_init(&r, (int)c->rope_dim, c->rope_freq_base, 0, 0, 0, 0, 0);
        memcpy(h, r.inv_freq, sizeof(float) * c->rope_dim / 2);
        CK(cudaMemcpy(cm->rope_main, h, sizeof(float) * c->rope_dim / 2, cudaMemcpyHostToDevice));
        nm_rope_init(&r, (int)c->rope_dim, c->compress_rope_freq_base, 1, c->yarn_factor, (double)c->yarn_orig_ctx,
                     c->yarn_beta_fast, c->yarn_beta_slow);
        memcpy(h, r.inv_freq, sizeof(float) * c->rope_dim / 2);
        CK(cudaMemcpy(cm->rope_comp, h, sizeof(float) * c->rope_dim / 2, cudaMemcpyHostToDevice));
        free(h);
    }

    /* the job list: vectors and small tables become f32 on the host */
#define JOB_G(n) jobs[nj++] = upload_job{&m->w.n, &cm->n, #n, 0, 0};
    GLOBAL_FIELDS(JOB_G)
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const dsv4_layer *L = &m->w.layers[il];
        cu_layer *D = &cm->layers[il];
        D->ratio = L->ratio;
#define JOB_L(n) jobs[nj++] = upload_job{&L->n, &D->n, #n, 0, 0};
        LAYER_FIELDS(JOB_L)
    }
    for (int i = 0; i < nj; i++) {
        upload_job *j = &jobs[i];
        const dsv4_tensor *t = j->src;
        if (!t->name && !t->nbytes) continue;
        int64_t nel = t->ne[0] * (t->ne[1] ? t->ne[1] : 1) * (t->ne[2] ? t->ne[2] : 1) * (t->ne[3] ? t->ne[3] : 1);
        j->to_f32 = is_vector_tensor(j->field) ||
                    ((!strcmp(j->field, "hc_attn_fn") || !strcmp(j->field, "hc_ffn_fn") ||
                      !strcmp(j->field, "output_hc_fn") || !strcmp(j->field, "token_embd")) && !is_plain_float(t->type));
        if (!j->to_f32 && t->type != CU_TYPE_I32 && !cu_gemv_supported(t->type)) {
            minke_set_error("cuda backend: tensor %s has type %s, which has no CUDA kernel", t->name ? t->name : j->field,
                            quant_name(t->type));
            goto fail;
        }
        j->dst->type = j->to_f32 ? CU_TYPE_F32 : t->type;
        for (int k = 0; k < 4; k++) j->dst->ne[k] = t->ne[k] ? t->ne[k] : 1;
        j->dst->nbytes = j->to_f32 ? (uint64_t)nel * 4 : t->nbytes;
        j->dst->row_bytes = j->to_f32 ? (uint64_t)j->dst->ne[0] * 4 : t->row_bytes;
        /* this GPU's share of a split matrix: by rows (the experts' gate/up with
         * the split by rows; q_b's heads, out_a's groups, the shared gate/up
         * under tensor parallelism) or by input columns (the experts' down; out_b
         * and the shared down, their sums all-reduced) */
        int rows_split = is_expert_tensor(j->field) && cm->ff != (int)c->expert_ff;
        int down = !strcmp(j->field, "down_exps");
        if (!j->to_f32 && ((rows_split && !down) || (cm->tp && tp_rows(j->field)))) {
            split_rows(j, cm);
        } else if (!j->to_f32 && ((rows_split && down) || (cm->tp && tp_cols(j->field)))) {
            split_cols(j, cm);
        } else if (is_expert_tensor(j->field) && !j->to_f32) {
            /* this GPU's experts: bytes [own0, own1) x bytes per expert */
            uint64_t eb = t->nbytes / (uint64_t)j->dst->ne[2];
            j->off = (uint64_t)cm->own0 * eb;
            j->dst->nbytes = (uint64_t)(cm->own1 - cm->own0) * eb;
        }
        total += j->dst->nbytes;
        if (t->ne[0] > cm->max_in) cm->max_in = (int)t->ne[0];
        if (t->type == GGML_TYPE_Q8_0 && t->n_dims == 2 && t->ne[0] * t->ne[1] > cm->max_q8_w &&
            t->ne[0] * t->ne[1] <= CU_MMH_MAX_WEIGHTS)
            cm->max_q8_w = t->ne[0] * t->ne[1];
        if (t->type == GGML_TYPE_F16 && t->n_dims == 2 && t->ne[0] * t->ne[1] > cm->max_f16_w &&
            t->ne[0] * t->ne[1] <= CU_MMH_MAX_WEIGHTS)
            cm->max_f16_w = t->ne[0] * t->ne[1];
    }
    {
        size_t fr = 0, tot = 0;
        CK(cudaMemGetInfo(&fr, &tot));
        uint64_t reserve = 2ull << 30;
        if (total + reserve > fr) {
            if (cm->nrank > 1)
                minke_set_error("cuda backend: GPU %d (device %d) needs %.2f GiB of weights (its %d of %u experts and "
                                "the replicated rest) plus %.1f GiB of working space, but has %.2f GiB free of %.2f GiB",
                                cm->rank, cm->dev, total / 1073741824.0, cm->own1 - cm->own0, c->n_expert,
                                reserve / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0);
            else
                minke_set_error("cuda backend: the weights need %.2f GiB plus %.1f GiB of working space, but the GPU has "
                                "%.2f GiB free of %.2f GiB", total / 1073741824.0, reserve / 1073741824.0,
                                fr / 1073741824.0, tot / 1073741824.0);
            goto fail;
        }
    }
    CK(cudaMallocHost(&stage[0], STAGE));
    CK(cudaMallocHost(&stage[1], STAGE));
    CK(cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming));
    {
        int cur = 0;
        bool used[2] = {false, false};
        for (int i = 0; i < nj; i++) {
            upload_job *j = &jobs[i];
            const dsv4_tensor *t = j->src;
            if (!j->dst->nbytes) continue;
            CK(cudaMalloc(&j->dst->alloc, align256(j->dst->nbytes)));
            /* indexed by global expert id (a split by rows keeps every expert) */
            j->dst->d = (uint8_t *)j->dst->alloc - (j->npieces ? 0 : j->off);
            int64_t nel = (int64_t)(j->dst->ne[0] * j->dst->ne[1] * j->dst->ne[2] * j->dst->ne[3]);
            if (!t->data) {
                /* synthetic model (bench): fill on the device */
                uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
                if (j->to_f32) {
                    float *h = (float *)malloc((size_t)nel * 4);
                    for (int64_t k = 0; k < nel; k++) {
                        uint32_t x = (uint32_t)((seed + k) * 2654435761u);
                        float u = (float)(x >> 8) / 16777216.0f - 0.5f;
                        float v;
                        if (strstr(j->field, "norm")) v = 1.0f + 0.1f * u;
                        else if (!strcmp(j->field, "sinks") || !strcmp(j->field, "exp_bias")) v = 0.1f * u;
                        else if (strstr(j->field, "scale")) v = 0.5f + 0.1f * u;
                        else v = 0.2f * u;
                        h[k] = v;
                    }
                    CK(cudaMemcpy(j->dst->d, h, (size_t)nel * 4, cudaMemcpyHostToDevice));
                    free(h);
                } else {
                    float sc = t->type == CU_TYPE_I32 ? (float)c->n_expert : synth_scale(t);
                    if (!strcmp(j->field, "token_embd")) sc = 1.0f;
                    int64_t nel_here = (int64_t)((double)nel * j->dst->nbytes / t->nbytes + 0.5);
                    /* a split by rows takes other values than the one-GPU model's (its
                     * pieces are not contiguous in the whole); a split by id the same */
                    cu_synth_fill(j->dst->alloc, t->type, nel_here, seed, sc,
                                  j->npieces ? (uint64_t)cm->rank * j->dst->nbytes : j->off, cm->st);
                }
                done += j->dst->nbytes;
                progress(prog, done, total, t0);
                continue;
            }
            if (j->to_f32) {
                float *h = (float *)malloc((size_t)nel * 4);
                if (!h) { minke_set_error("out of memory"); goto fail; }
                const quant_traits *qt = quant_get(t->type);
                if (t->type == CU_TYPE_I32 || !qt) { free(h); minke_set_error("cuda: cannot convert %s", t->name); goto fail; }
                qt->dequant(t->data, h, nel);
                CK(cudaMemcpy(j->dst->d, h, (size_t)nel * 4, cudaMemcpyHostToDevice));
                free(h);
                done += j->dst->nbytes;
                continue;
            }
            /* big tensors: double-buffered pinned staging, the copy of one
             * chunk overlaps the memcpy into the other */
            const uint8_t *src = (const uint8_t *)t->data + j->off;
            uint8_t *dst = (uint8_t *)j->dst->alloc;
            uint64_t off = 0;
            while (off < j->dst->nbytes) {
                size_t n = (size_t)(j->dst->nbytes - off < STAGE ? j->dst->nbytes - off : STAGE);
                if (used[cur]) CK(cudaEventSynchronize(ev[cur]));
                if (j->npieces) {
                    /* gather the pieces of bytes [off, off + n) of this GPU's part */
                    for (uint64_t k = off; k < off + n;) {
                        uint64_t pi = k / j->width, in = k - pi * j->width, take = j->width - in;
                        if (take > off + n - k) take = off + n - k;
                        memcpy((uint8_t *)stage[cur] + (k - off), src + pi * j->pitch + in, take);
                        k += take;
                    }
                } else
                    memcpy(stage[cur], src + off, n);
                CK(cudaMemcpyAsync(dst + off, stage[cur], n, cudaMemcpyHostToDevice, cm->st));
                CK(cudaEventRecord(ev[cur], cm->st));
                used[cur] = true;
                cur ^= 1;
                off += n;
                done += n;
                progress(prog, done, total, t0);
            }
        }
        CK(cudaStreamSynchronize(cm->st));
        progress(prog, total, total, t0);
        /* dense Q8_0 matrices to the 16-byte aligned layout (MINKE_CUDA_NO_REPACK=1 keeps ggml's) */
        if (!getenv("MINKE_CUDA_NO_REPACK"))
            for (int i = 0; i < nj; i++) {
                cu_t *d = jobs[i].dst;
                int64_t rows_here = d->row_bytes ? (int64_t)(d->nbytes / d->row_bytes) : 0;
                if (d->alloc && d->type == CU_TYPE_Q8_0 &&
                    cu_repack_q8_0(d->alloc, rows_here, d->ne[0], d->row_bytes, cm->st))
                    d->type = CU_TYPE_Q8_0R;
                else if (d->alloc && d->type == CU_TYPE_IQ2_XXS &&
                         cu_repack_iq2_xxs(d->alloc, rows_here, d->ne[0], d->row_bytes, cm->st))
                    d->type = CU_TYPE_IQ2R;
            }
        CK(cudaStreamSynchronize(cm->st));
    }
    cm->weight_bytes = total;
    cudaFreeHost(stage[0]); cudaFreeHost(stage[1]);
    cudaEventDestroy(ev[0]); cudaEventDestroy(ev[1]);
    free(jobs);
    return 0;
fail:
    if (stage[0]) cudaFreeHost(stage[0]);
    if (stage[1]) cudaFreeHost(stage[1]);
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    free(jobs);
    return -1;
}

/* A session's prompt chunk before the indexer's cap (dev_session_alloc):
 * MINKE_CUDA_CHUNK, else 8192 tokens. Every expert's weights are read once
 * a chunk and its tiles of 64 pairs fill better with more pairs: 4096 rather
 * than 2048 took a 4096-token prompt from 2844 to 3213 tok/s (commit
 * 47e1963), 8192 rather than 4096 a 65536-token prompt from 4,748-4,753 to
 * 5,030-5,034 tok/s (twenty-first session; docs/performance.md), each for
 * ~2x the scratch memory (~9 GB at 8192 on Flash). 16384 (an explicit
 * setting may pass the indexer's 1 GiB cap, dev_session_alloc) gave +2.3%
 * more for ~18 GB: not the default. */
static int session_chunk_wanted(int *explicit_chunk) {
    const char *e = getenv("MINKE_CUDA_CHUNK");
    if (explicit_chunk) *explicit_chunk = e != NULL;
    int chunk = e ? atoi(e) : 8192;
    return chunk < 1 ? 1 : chunk;
}

/* Several GPUs: NCCL communicators (one process, all ranks here) and a first
 * all-reduce of each size a forward uses, outside any graph capture, so the
 * connections exist before a decode graph captures its collectives. */
static int group_comm_init(cu_group *g, int chunk_floats) {
    ncclComm_t comms[CU_MAX_GPUS];
    int devs[CU_MAX_GPUS];
    /* NVLink multicast (NVLS) stays off: the device machines require it */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    for (int r = 0; r < g->n; r++) devs[r] = g->dev[r]->dev;
    ncclResult_t nr = ncclCommInitAll(comms, g->n, devs);
    if (nr != ncclSuccess) {
        minke_set_error("cuda: NCCL init over %d GPUs failed: %s", g->n, ncclGetErrorString(nr));
        return -1;
    }
    for (int r = 0; r < g->n; r++) g->dev[r]->comm = comms[r];
    float *buf[CU_MAX_GPUS] = {NULL};
    int rc = 0;
    for (int r = 0; r < g->n && !rc; r++) {
        cudaSetDevice(devs[r]);
        if (cudaMalloc(&buf[r], sizeof(float) * (size_t)chunk_floats) != cudaSuccess ||
            cudaMemset(buf[r], 0, sizeof(float) * (size_t)chunk_floats) != cudaSuccess) rc = -1;
    }
    /* sizes 1, 8, 64, ... and the whole chunk */
    for (int size = 1; !rc; size = size * 8 < chunk_floats ? size * 8 : chunk_floats) {
        ncclGroupStart();
        for (int r = 0; r < g->n; r++) {
            cudaSetDevice(devs[r]);
            ncclAllReduce(buf[r], buf[r], (size_t)size, ncclFloat, ncclSum, comms[r], g->dev[r]->st);
        }
        if (ncclGroupEnd() != ncclSuccess) rc = -1;
        if (size >= chunk_floats) break;
    }
    for (int r = 0; r < g->n; r++) {
        cudaSetDevice(devs[r]);
        if (cudaStreamSynchronize(g->dev[r]->st) != cudaSuccess) rc = -1;
        cudaFree(buf[r]);
    }
    cudaSetDevice(devs[0]);
    if (rc) minke_set_error("cuda: first NCCL all-reduce over %d GPUs failed", g->n);
    return rc;
}

static int cu_model_init(minke_model *m) {
    const dsv4_config *c = &m->w.cfg;
    if (prof_on < 0) prof_on = getenv("MINKE_CUDA_PROFILE") && atoi(getenv("MINKE_CUDA_PROFILE")) > 0;
    if (!skip_list && getenv("MINKE_CUDA_SKIP") && *getenv("MINKE_CUDA_SKIP")) {
        skip_list = getenv("MINKE_CUDA_SKIP");
        fprintf(stderr, "minke: MINKE_CUDA_SKIP=%s: these decode stages are not run (timing only; results are wrong)\n",
                skip_list);
    }

    if (c->head_dim > 512 || c->head_dim % 32 || c->n_hc > 8 || c->hc_mix > 32 || c->rope_dim > 256 ||
        c->indexer_n_head > 64 || c->n_expert_used > 16 || c->n_expert > 4096 || (c->hc_dim % 16) ||
        (c->n_csa && c->indexer_head_dim % 32)) {
        minke_set_error("cuda backend: unsupported dims (head_dim %u <= 512 and %%32, n_hc %u <= 8, indexer heads %u <= 64)",
                        c->head_dim, c->n_hc, c->indexer_n_head);
        return -1;
    }
    if (m->params.sims && ((c->head_dim - c->rope_dim) % 64 != 0 || (c->n_csa && c->indexer_head_dim != 128))) {
        minke_set_error("simulations need head_dim - rope_dim divisible by 64 and indexer_head_dim 128 "
                        "(use --sims off for this model)");
        return -1;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        minke_set_error("cuda backend: no CUDA device found");
        return -1;
    }
    int n = m->params.n_gpus < 0 ? ndev : m->params.n_gpus < 1 ? 1 : m->params.n_gpus;
    if (n > ndev) {
        minke_set_error("cuda backend: --gpus %d, but this machine has %d CUDA device%s", n, ndev, ndev == 1 ? "" : "s");
        return -1;
    }
    if (n > CU_MAX_GPUS) {
        minke_set_error("cuda backend: --gpus %d: at most %d GPUs", n, CU_MAX_GPUS);
        return -1;
    }
    /* MINKE_CUDA_EXPERT_SPLIT=rows: every GPU holds a share of every expert's
     * hidden rows (gate/up rows, down columns) instead of whole experts by id:
     * every GPU computes all selected experts at 1/N of the size, so no GPU
     * waits for one that drew more experts (docs/multigpu.md) */
    const char *es = getenv("MINKE_CUDA_EXPERT_SPLIT");
    int rows_split = n > 1 && es && !strcmp(es, "rows");
    if (rows_split) {
        int bs = 1;
        const dsv4_tensor *dn = &m->w.layers[0].down_exps;
        const quant_traits *qt = quant_get(dn->type);
        if (qt) bs = qt->blck;
        if (c->expert_ff % (uint32_t)n || (c->expert_ff / n) % (uint32_t)bs) {
            minke_set_error("cuda backend: MINKE_CUDA_EXPERT_SPLIT=rows: --gpus %d must divide the experts' %u "
                            "hidden rows into whole %s blocks of %d", n, c->expert_ff, quant_name(dn->type), bs);
            return -1;
        }
    } else if (c->n_expert % (uint32_t)n) {
        minke_set_error("cuda backend: --gpus %d does not divide the model's %u routed experts (experts are split "
                        "evenly by id); use a number of GPUs that divides %u", n, c->n_expert, c->n_expert);
        return -1;
    }
    /* MINKE_CUDA_FORCE_NCCL=1 runs the several-GPU path (NCCL all-reduces,
     * the pool) with one GPU too: it must equal the plain path bit for bit */
    int force = getenv("MINKE_CUDA_FORCE_NCCL") && atoi(getenv("MINKE_CUDA_FORCE_NCCL")) > 0;
    /* Tensor parallel dense projections (default on with several GPUs;
     * MINKE_CUDA_TP=0 replicates them): the heads, output groups and shared
     * expert rows must split into whole quant blocks, else they stay replicated */
    int tp = 0;
    if (rows_split && !(getenv("MINKE_CUDA_TP") && !atoi(getenv("MINKE_CUDA_TP"))))
        /* measured: experts by rows with the dense split gave wrong prefill logits
         * (tiny-a F32, 2 H200s; decode and either split alone were right), not yet
         * understood: the two are not combined */
        fprintf(stderr, "cuda: MINKE_CUDA_EXPERT_SPLIT=rows keeps the dense projections replicated "
                "(not yet combined with their split)\n");
    else if (n > 1 && !(getenv("MINKE_CUDA_TP") && !atoi(getenv("MINKE_CUDA_TP")))) {
        const dsv4_layer *L0 = &m->w.layers[0];
        const quant_traits *qb = quant_get(L0->out_b.type), *qd = quant_get(L0->down_shexp.type);
        uint32_t odim = c->o_groups * c->o_lora_rank;
        tp = qb && qd && c->n_head % (uint32_t)n == 0 && c->o_groups % (uint32_t)n == 0 && c->shexp_ff % (uint32_t)n == 0 &&
             (c->n_head / n) * c->o_groups == (c->o_groups / n) * c->n_head && (odim / n) % (uint32_t)qb->blck == 0 &&
             (c->shexp_ff / n) % (uint32_t)qd->blck == 0;
        if (!tp)
            fprintf(stderr, "cuda: %d GPUs: the attention heads (%u), output groups (%u) or shared expert rows (%u) do not "
                    "split into whole blocks; the dense projections stay replicated\n", n, c->n_head, c->o_groups, c->shexp_ff);
    }
    cu_group *g = (cu_group *)calloc(1, sizeof *g);
    if (!g) { minke_set_error("out of memory"); return -1; }
    m->be = g;
    g->n = n;
    g->comm_on = 1;
    int devs[CU_MAX_GPUS];
    for (int r = 0; r < n; r++) {
        cu_model *cm = (cu_model *)calloc(1, sizeof *cm);
        if (!cm) { minke_set_error("out of memory"); goto fail; }
        g->dev[r] = cm;
        cm->dev = devs[r] = r;
        cm->rank = r; cm->nrank = n;
        if (rows_split) {
            cm->own0 = 0; cm->own1 = (int)c->n_expert; cm->ff = (int)c->expert_ff / n;
        } else {
            cm->own0 = (int)(c->n_expert / n * r);
            cm->own1 = (int)(c->n_expert / n * (r + 1));
            cm->ff = (int)c->expert_ff;
        }
        cm->tp = tp;
        cm->hl = tp ? (int)c->n_head / n : (int)c->n_head;
        cm->h0 = tp ? cm->hl * r : 0;
        cm->gl = tp ? (int)c->o_groups / n : (int)c->o_groups;
        cm->sfl = tp ? (int)c->shexp_ff / n : (int)c->shexp_ff;
        if (dev_init(m, cm)) {
            if (n > 1) {
                char msg[600];
                snprintf(msg, sizeof msg, "%s", minke_last_error());
                minke_set_error("GPU %d: %s", r, msg);
            }
            goto fail;
        }
        g->weight_bytes += cm->weight_bytes;
    }
    if (n > 1 || force) {
        int chunk = session_chunk_wanted(NULL);
        if (group_comm_init(g, (int)(chunk * (int64_t)c->n_embd > (1 << 26) ? (1 << 26) : chunk * (int64_t)c->n_embd)))
            goto fail;
        g->pool = cu_pool_new(n, devs);
        if (!g->pool) goto fail;
    }
    cudaSetDevice(devs[0]);
    return 0;
fail:
    cu_model_free(m);
    return -1;
}

/* ------------------------------------------------------------------ */
/* sessions                                                            */

/* The session's captured decode graphs (device current) are dropped. */
static void drop_graphs(cu_session *s) {
    for (int i = 0; i < s->n_graphs; i++) cudaGraphExecDestroy(s->graphs[i].exec);
    s->n_graphs = 0;
}

static void dev_session_free(minke_model *m, cu_model *cm, cu_session *s) {
    if (!s) return;
    cudaSetDevice(cm->dev);
    drop_graphs(s);
    if (s->lc) {
        for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) {
            cu_lcache *l = &s->lc[il];
            cudaFree(l->ring); cudaFree(l->comp); cudaFree(l->index);
            cudaFree(l->ckv); cudaFree(l->csc); cudaFree(l->ikv); cudaFree(l->isc);
        }
        free(s->lc);
    }
    void *bufs[] = {s->d_pos, s->d_tok, s->X, s->X2, s->x, s->post, s->comb, s->partial, s->psq, s->hc_cnt, s->ql, s->qn, s->q,
                    s->kvp, s->kvb, s->ca, s->cg, s->ia, s->ig, s->qi, s->wi, s->scores, s->o, s->z, s->a, s->sel,
                    s->nsel, s->rlog, s->rw, s->rsel, s->tpairs, s->tstart, s->tcount, s->texp, s->ntiles, s->eg,
                    s->eu, s->emid, s->eout, s->mo, s->sg, s->su, s->smid, s->so, s->hy, s->logits, s->act, s->d_argmax,
                    s->attn_part, s->o_amax, s->o_items, s->z_items, s->smid_items, s->act2, s->actx, s->asplit,
                    s->asplit2, s->asplit3, s->comp_f32, s->d_kvok, s->d_cands};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    cudaFreeHost(s->h_pos); cudaFreeHost(s->h_tok); cudaFreeHost(s->h_logits); cudaFreeHost(s->h_cands);
    free(s);
}

__global__ void k_fill_f32(float *p, int64_t n, float v) {
    cu_pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}
static void fill(float *p, int64_t n, float v, cudaStream_t st) {
    if (p && n > 0) cu_launch(k_fill_f32, (unsigned)((n + 255) / 256), 256, 0, st, p, n, v);
}

static void dev_session_reset(minke_model *m, cu_model *cm, cu_session *s) {
    cudaSetDevice(cm->dev);
    for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) {
        cu_lcache *l = &s->lc[il];
        int64_t cs = (int64_t)l->crows * l->cwidth, is = (int64_t)l->irows * l->iwidth;
        fill(l->ckv, cs, 0.f, cm->st); fill(l->csc, cs, -INFINITY, cm->st);
        fill(l->ikv, is, 0.f, cm->st); fill(l->isc, is, -INFINITY, cm->st);
    }
    cudaStreamSynchronize(cm->st);
}

/* explicit_chunk: chunk_want was set by MINKE_CUDA_CHUNK (the indexer's cap
 * 4 GiB then); *chunk_got: the chunk tried (chunk_want, less under the cap);
 * *oom: 1 when the attempt failed for want of device memory */
static cu_session *dev_session_alloc_chunk(minke_model *m, cu_model *cm, int n_ctx, int64_t chunk_want,
                                           int explicit_chunk, int64_t *chunk_got, int *oom) {
    const dsv4_config *c = &m->w.cfg;
    int mmh_short = 0;      /* a cu_mmh scratch did not fit (its products would allocate it each prompt) */
    *chunk_got = chunk_want;
    *oom = 0;
    cudaSetDevice(cm->dev);
    cu_session *s = (cu_session *)calloc(1, sizeof *s);
    if (!s) { minke_set_error("out of memory"); return NULL; }
    int Dh = (int)c->head_dim, ihd = (int)c->indexer_head_dim, W = (int)c->sliding_window;
    int64_t D = c->n_embd, K = c->n_expert_used, F = c->expert_ff, SF = c->shexp_ff, V = c->n_vocab;
    s->n_ctx = n_ctx;
    {
        const char *e = getenv("MINKE_CUDA_KV");
        int f32 = !m->params.sims;
        if (e && *e) {
            if (!strcmp(e, "f32")) f32 = 1;
            else if (strcmp(e, "packed")) {
                minke_set_error("MINKE_CUDA_KV=%s: expected f32 or packed", e);
                free(s);
                return NULL;
            }
        }
        /* the simulations' block shapes (checked at model load when sims are on) */
        if ((Dh - (int)c->rope_dim) % 64 || ihd % 32 || c->rope_dim % 4) f32 = 1;
        s->comp_fmt = f32 ? CU_KV_F32 : CU_KV_FP8;
        s->index_fmt = f32 ? CU_KV_F32 : CU_KV_FP4;
    }
    s->lc = (cu_lcache *)calloc(c->n_layer, sizeof(cu_lcache));
    if (!s->lc) { minke_set_error("out of memory"); free(s); return NULL; }
    const size_t comp_rb = (size_t)kv_row_bytes(s->comp_fmt, Dh, (int)c->rope_dim);
    const size_t index_rb = (size_t)kv_row_bytes(s->index_fmt, ihd, 0);
    int64_t comp_most = 0;      /* the most compressed rows of a layer */
    {
        /* chunk: session_chunk_wanted() tokens, fewer when the indexer score
         * matrix would pass 1 GiB. 1 GiB rather than 256 MiB (twentieth
         * session): a 65536-token session (16386 index rows) fell to
         * 2048-token chunks under 256 MiB by two rows, and its experts'
         * products ran ~20% slower a token. Now 8192 up to ~131,000 tokens
         * of context, 4096 up to ~262,000, 2048 at 262,144, 512 at 1M */
        int64_t icap = n_ctx / 4 + 1;
        int64_t chunk = chunk_want;
        /* an explicit MINKE_CUDA_CHUNK may take a score matrix up to 4 GiB */
        const int64_t cap = explicit_chunk ? (4ll << 30) : (1ll << 30);
        while (chunk > 16 && chunk * icap * 4 > cap) chunk /= 2;
        if (chunk > n_ctx) chunk = n_ctx;
        if (chunk < 1) chunk = 1;
        s->chunk = (int)chunk;
        s->score_stride = icap;
        *chunk_got = chunk;
    }
    int64_t T = s->chunk, TK = T * K;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        cu_lcache *l = &s->lc[il];
        int r = (int)c->compress_ratio[il];
        CK(cudaMalloc(&l->ring, sizeof(float) * W * Dh));
        s->bytes += sizeof(float) * W * Dh;
        if (r) {
            l->comp_cap = n_ctx / r + 1;
            l->crows = r == 4 ? 8 : r;
            l->cwidth = r == 4 ? 2 * Dh : Dh;
            CK(cudaMalloc(&l->comp, comp_rb * (size_t)l->comp_cap));
            if (l->comp_cap > comp_most) comp_most = l->comp_cap;
            CK(cudaMalloc(&l->ckv, sizeof(float) * l->crows * l->cwidth));
            CK(cudaMalloc(&l->csc, sizeof(float) * l->crows * l->cwidth));
            s->bytes += comp_rb * (size_t)l->comp_cap + 2 * sizeof(float) * (size_t)l->crows * l->cwidth;
        }
        if (r == 4) {
            l->index_cap = n_ctx / 4 + 1;
            l->irows = 8; l->iwidth = 2 * ihd;
            CK(cudaMalloc(&l->index, index_rb * (size_t)l->index_cap));
            CK(cudaMalloc(&l->ikv, sizeof(float) * l->irows * l->iwidth));
            CK(cudaMalloc(&l->isc, sizeof(float) * l->irows * l->iwidth));
            s->bytes += index_rb * (size_t)l->index_cap + 2 * sizeof(float) * (size_t)l->irows * l->iwidth;
        }
    }
#define AL(p, n) CK(cudaMalloc((void **)&(p), (size_t)(n) > 0 ? (size_t)(n) : 4))
    if (s->comp_fmt == CU_KV_FP8 && comp_most) {
        /* scratch, not state: outside s->bytes (an indexer row has ihd floats) */
        AL(s->comp_f32, comp_most * (Dh > ihd ? Dh : ihd) * 4);
        AL(s->d_kvok, 4);
    }
    AL(s->d_pos, 4 * sizeof(int));
    AL(s->d_tok, T * 4);
    CK(cudaMallocHost(&s->h_pos, 4 * sizeof(int)));
    CK(cudaMallocHost(&s->h_tok, T * 4));
    CK(cudaMallocHost(&s->h_logits, V * 4));
    CK(cudaMallocHost(&s->h_cands, cu_sample_cands_bytes(CU_CANDS_MAX)));
    AL(s->d_cands, cu_sample_cands_bytes(CU_CANDS_MAX));
    CK(cudaMemset(s->d_cands, 0, cu_sample_cands_bytes(CU_CANDS_MAX)));
    AL(s->X, T * c->hc_dim * 4); AL(s->X2, T * c->hc_dim * 4); AL(s->x, T * D * 4);
    AL(s->post, T * 8 * 4); AL(s->comb, T * 64 * 4); AL(s->partial, T * 16 * 32 * 4); AL(s->psq, T * 16 * 8);
    AL(s->hc_cnt, T * 4);
    CK(cudaMemset(s->hc_cnt, 0, T * 4));
    AL(s->ql, T * c->q_lora_rank * 4); AL(s->qn, T * c->q_lora_rank * 4); AL(s->q, T * c->q_dim * 4);
    AL(s->kvp, T * Dh * 4); AL(s->kvb, T * Dh * 4);
    AL(s->ca, T * 2 * Dh * 4); AL(s->cg, T * 2 * Dh * 4); AL(s->ia, T * 2 * ihd * 4); AL(s->ig, T * 2 * ihd * 4);
    AL(s->qi, T * c->indexer_n_head * ihd * 4); AL(s->wi, T * c->indexer_n_head * 4);
    AL(s->scores, T * s->score_stride * 4);
    AL(s->o, T * c->q_dim * 4); AL(s->z, T * c->o_dim * 4); AL(s->a, T * D * 4);
    AL(s->sel, T * (c->indexer_top_k ? c->indexer_top_k : 1) * 4); AL(s->nsel, T * 4);
    AL(s->rlog, T * c->n_expert * 4); AL(s->rw, TK * 4); AL(s->rsel, TK * 4);
    AL(s->tpairs, TK * 4); AL(s->tstart, (TK + c->n_expert) * 4); AL(s->tcount, (TK + c->n_expert) * 4);
    AL(s->texp, (TK + c->n_expert) * 4); AL(s->ntiles, 4);
    AL(s->eg, TK * F * 4); AL(s->eu, TK * F * 4); AL(s->emid, TK * F * 4); AL(s->eout, TK * D * 4);
    AL(s->mo, T * D * 4); AL(s->sg, T * SF * 4); AL(s->su, T * SF * 4); AL(s->smid, T * SF * 4); AL(s->so, T * D * 4);
    AL(s->hy, T * D * 4);
    s->logit_rows = V * T * 4 <= (256ll << 20) ? (int)T : 1;
    AL(s->logits, (int64_t)s->logit_rows * V * 4);
    {
        int64_t mx = cm->max_in;
        if (mx < c->q_dim) mx = c->q_dim;
        int64_t rows = TK > T ? TK : T;
        s->act_bytes = (uint64_t)(rows * mx / 32 * 37 + 4096);   /* Q8_K (292/256) and Q8_0_F32 (36/32) both fit */
        AL(s->act, s->act_bytes);
        int64_t side_in = c->n_embd > c->q_lora_rank ? c->n_embd : c->q_lora_rank;
        AL(s->act2, T * side_in / 32 * 37 + 4096);
        AL(s->actx, T * (int64_t)c->n_embd / 32 * 37 + 4096);
        if (cm->act_f32 && cu_mmq_min_rows() && T >= cu_mmq_min_rows()) {
            /* 3 int8 pieces: (3 * 32 + 4) bytes per 32 elements, rows padded to 16; the
             * experts' f16 pieces (cu_mmx): 4.25 bytes an element and 16 a row */
            int64_t main_el = T * mx > TK * F ? T * mx : TK * F;
            int64_t side_el = T * (side_in > SF ? side_in : SF);
            AL(s->asplit, main_el / 32 * 136 + rows * 16 + 4096);
            AL(s->asplit2, side_el / 32 * 100 + T * 16 + 4096);
            AL(s->asplit3, T * D / 32 * 100 + T * 16 + 4096);
            /* cu_mmh's scratch where it runs (main stream; the shared expert and the
             * F16 compressors on st2, the kv row and the indexer's q on st3), so that a
             * prompt does not allocate it */
            const int64_t f16w = cm->max_f16_w;
            mmh_short |= cu_mmh_reserve(cm->st, T, mx, cm->max_q8_w > f16w ? cm->max_q8_w : f16w) < 0;
            mmh_short |= cu_mmh_reserve(cm->st2, T, D > SF ? D : SF, D * SF > f16w ? D * SF : f16w) < 0;
            mmh_short |= cu_mmh_reserve(cm->st3, T, D, (int64_t)D * Dh > f16w ? (int64_t)D * Dh : f16w) < 0;
        } else if (cu_mmq_min_rows() && T >= cu_mmq_min_rows() && cm->max_f16_w) {
            /* int8 activations: only the F16 products (f32 x either way) go to cu_mmh */
            mmh_short |= cu_mmh_reserve(cm->st, T, D, cm->max_f16_w) < 0;
            mmh_short |= cu_mmh_reserve(cm->st2, T, D, cm->max_f16_w) < 0;
            mmh_short |= cu_mmh_reserve(cm->st3, T, D, cm->max_f16_w) < 0;
        }
        /* x's shared split (where cu_mmh would take a batch of T) */
        mmh_short |= cu_mmh_share_reserve(cm->st, T, D) < 0;
    }
    /* a chunk whose products' scratch does not fit is no better than half of it
     * that fits (the caller tries that; at the last chunk the products allocate
     * it when they run, or take the int8 kernels, as before) */
    if (mmh_short && chunk_want > 4096 && T > 4096) {
        minke_set_error("cuda: the products' scratch for %lld-token chunks did not fit", (long long)T);
        *oom = 1;
        goto fail;
    }
    AL(s->d_argmax, 4);
    AL(s->attn_part, (int64_t)ATT_SPLIT_MAX_T * c->n_head * ATT_SPLIT * (Dh + 2) * 4);
    AL(s->o_amax, 4);
    AL(s->o_items, cu_gemv3_items_bytes(c->q_dim));
    AL(s->z_items, cu_gemv3_items_bytes(c->o_dim));
    AL(s->smid_items, cu_gemv3_items_bytes(c->shexp_ff));
#undef AL
    dev_session_reset(m, cm, s);
    return s;
fail:
    if (cudaGetLastError() == cudaErrorMemoryAllocation) *oom = 1;     /* (and clears it) */
    dev_session_free(m, cm, s);
    return NULL;
}

/* A session with the wanted prompt chunk, or, where its scratch (~1.1 MB a
 * chunk token on Flash) does not fit beside the weights and other sessions,
 * with half the chunk, down to 4096 tokens (said on stderr: slower prompts,
 * nothing else changes). An explicit MINKE_CUDA_CHUNK is taken or fails. */
static cu_session *dev_session_alloc(minke_model *m, cu_model *cm, int n_ctx) {
    int explicit_chunk = 0;
    int64_t want = session_chunk_wanted(&explicit_chunk), got = want;
    for (;;) {
        int oom = 0;
        cu_session *s = dev_session_alloc_chunk(m, cm, n_ctx, want, explicit_chunk, &got, &oom);
        if (s || !oom || explicit_chunk || got <= 4096) return s;
        fprintf(stderr, "minke: cuda: GPU %d: prompt chunks of %lld tokens (the scratch for %lld did not fit)\n",
                cm->dev, (long long)(got / 2), (long long)got);
        want = got / 2;
    }
}

static void cu_session_free(minke_model *m, void *bs) {
    cu_gsession *gs = (cu_gsession *)bs;
    cu_group *g = GRP(m);
    if (!gs) return;
    for (int r = 0; r < gs->n; r++) dev_session_free(m, g->dev[r], gs->dev[r]);
    cudaSetDevice(g->dev[0]->dev);
    free(gs);
}
static void cu_session_reset(minke_model *m, void *bs) {
    cu_gsession *gs = (cu_gsession *)bs;
    cu_group *g = GRP(m);
    for (int r = 0; r < gs->n; r++) dev_session_reset(m, g->dev[r], gs->dev[r]);
    cudaSetDevice(g->dev[0]->dev);
}
static void *cu_session_alloc(minke_model *m, int n_ctx) {
    cu_group *g = GRP(m);
    cu_gsession *gs = (cu_gsession *)calloc(1, sizeof *gs);
    if (!gs) { minke_set_error("out of memory"); return NULL; }
    gs->n = g->n;
    for (int r = 0; r < g->n; r++)
        if (!(gs->dev[r] = dev_session_alloc(m, g->dev[r], n_ctx))) {
            if (g->n > 1) {
                char msg[600];
                snprintf(msg, sizeof msg, "%s", minke_last_error());
                minke_set_error("GPU %d: %s", r, msg);
            }
            cu_session_free(m, gs);
            return NULL;
        }
    cudaSetDevice(g->dev[0]->dev);
    return gs;
}
/* The session's device memory over all its GPUs (the state is replicated). */
static uint64_t cu_session_bytes(minke_model *m, void *bs) {
    cu_gsession *gs = (cu_gsession *)bs;
    uint64_t b = 0;
    for (int r = 0; r < gs->n; r++) b += gs->dev[r]->bytes;
    return b;
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

/* What one split buffer holds (see mmq_exact). */
typedef struct split_memo { const void *buf; const float *x; int cls; int64_t rows, n; } split_memo;

typedef struct fwd {
    minke_model *m;
    cu_model *cm;
    cu_session *s;
    const dsv4_config *c;
    cudaStream_t st;
    int T;
    int taps;          /* copy intermediates to the host for m->tap */
    int pos0_host;     /* the batch's first position (prefill batches run uncaptured; a captured decode graph replays others) */
    const int32_t *tok_host;
    void *act;         /* quantization buffer of the stream in use */
    void *asplit;      /* exact-activation split buffer of the stream in use (NULL: none) */
    split_memo splits[3];
                       /* what each split buffer holds, so x is split once for all its
                          tensor-core products (as actx holds it quantized for q8) */
    int side;          /* run the compressor/indexer branch on cm->st2 */
    int beside;        /* matmul: cu_gemv_args.beside */
    int xq_type;       /* activation type s->actx holds for the current x (0: none) */
    int comm_on;       /* run the collectives (cu_group.comm_on) */
    const float *pend_f1, *pend_f2;   /* post step of the previous sub-layer, not yet applied */
} fwd;

/* Prefill batches of at least cu_mmq_min_rows() rows run the quantized
 * products on the tensor cores (cu_mmq.cu); smaller ones and decode keep the
 * GEMV kernels. */
static int use_mmq(int T) { int mq = cu_mmq_min_rows(); return mq && T >= mq; }

/* Activation rows per GEMV tile (a weight item is decoded once per tile). */
static int tile_rows(int T) { return T >= 8 ? 8 : T >= 4 ? 4 : 1; }

/* The activation rows for a product with weights of type wtype: x itself
 * for float weights and with exact activations (*f32 = 1 then), else x
 * quantized as ds4 does, MINKE_ACT_Q8 (*astride: bytes per row). */
static const void *act_rows(fwd *f, int wtype, const float *x, int64_t in, int T, int64_t *astride, int *f32) {
    int at = cu_act_type(wtype);
    *astride = in * 4;
    *f32 = at != CU_TYPE_F32 && f->cm->act_f32;
    if (at == CU_TYPE_F32 || *f32) return x;
    *astride = cu_act_row_bytes(at, in);
    if (x == f->s->x && f->act == f->s->act) {
        /* x feeds several projections: quantize it once per type */
        if (f->xq_type != at) cu_quantize_act(at, x, f->s->actx, T, in, f->st);
        f->xq_type = at;
        return f->s->actx;
    }
    cu_quantize_act(at, x, f->act, T, in, f->st);
    return f->act;
}

/* The HC pre step rewrote x: its quantized and split copies are stale, and
 * x's f16 split for every cu_mmh product of the sub-layer (the q / kv
 * projections, the compressors, indexer and router, the shared expert) is made
 * once, on the stream that forks the side branches (cu_mmh_share_x forgets the
 * previous share first; a batch too short for cu_mmh makes none). */
static void x_rewritten(fwd *f) {
    f->xq_type = 0;
    for (int i = 0; i < 3; i++) f->splits[i].x = NULL;
    cu_mmh_share_x(f->s->x, f->T, (int)f->c->n_embd, (int64_t)f->c->n_embd, f->st);
}

/* A tensor-core product with exact activations: x (nrows f32 rows of g->in,
 * g->act_stride bytes apart) split into int8 pieces in the stream's buffer by
 * one launch, then the pre-split kernel (cu_mmq.cu; faster than splitting
 * while staging, which every block would redo). 0 when it does not apply. */
static int mmq_exact(fwd *f, cu_gemv_args *g, const float *x, int64_t nrows, int ntiles) {
    /* dense Q8_0 products: one f16 GEMM of exact pieces through cuBLASLt where it is on (cu_mmh.cu) */
    if ((g->act_f32 || g->wtype == CU_TYPE_F16) && g->act == (const void *)x && cu_mmh(g, nrows, f->st)) return 1;
    /* routed experts (IQ2 gate / up, Q2_K down): f16 pieces and one fold per 256 (cu_mmx.cu) */
    const int mmx = f->asplit && g->act == (const void *)x && g->act_stride == 4 * g->in && cu_mmx_min_tokens() &&
                    f->T >= cu_mmx_min_tokens() && cu_mmx_supported(g);
    if (!mmx && (!g->act_f32 || !f->asplit || g->wtype == CU_TYPE_F16 || !cu_mmq_supported(g))) return 0;
    int64_t n = g->act_stride / 4;     /* the whole f32 row (grouped input: every group) */
    /* the split's layout: Q2_K's int8 pieces share a scale per 256, others per 32; cu_mmx's f16
     * pieces (Q2_K's with the sub-block sums) */
    int cls = mmx ? 2 + (g->wtype == CU_TYPE_Q2_K) : g->wtype == CU_TYPE_Q2_K;
    split_memo *e = &f->splits[0];
    for (int i = 0; i < 3; i++)
        if (f->splits[i].buf == f->asplit || !f->splits[i].buf) { e = &f->splits[i]; break; }
    /* only x is reused: other inputs are rewritten in place between their products */
    if (!(x == f->s->x && e->buf == f->asplit && e->x == x && e->cls == cls && e->rows == nrows && e->n == n)) {
        int ok = mmx ? cu_mmx_split(g->wtype, x, nrows, n, g->act_stride, f->asplit, f->st)
                     : cu_mmq_split_act(g->wtype, x, nrows, n, g->act_stride, f->asplit, f->st);
        if (!ok) { e->buf = NULL; return 0; }
        e->buf = f->asplit; e->x = x; e->cls = cls; e->rows = nrows; e->n = n;
    }
    cu_gemv_args q = *g;
    q.act = f->asplit;
    q.act_stride = mmx ? cu_mmx_split_row_bytes(g->wtype, n) : cu_mmq_split_row_bytes(n);
    return mmx ? cu_mmx(&q, ntiles, f->st) : cu_mmq_presplit(&q, ntiles, f->st);
}

/* The routed experts' down on cu_mmx with its split made straight from the gate and up
 * rows (cu_mmx_split_glu: the SwiGLU's values without the mid rows); 0 (nothing run that
 * counts) where cu_mmx does not take it: the caller then writes the SwiGLU rows and splits
 * them as any input. g: the down's product over s->emid. */
static int down_from_glu(fwd *f, const cu_gemv_args *g, float clamp, int64_t P, int ntiles) {
    cu_session *s = f->s;
    if (!cu_mmx_glu_enabled() || !f->asplit || !g->act_f32 || !cu_mmx_min_tokens() || f->T < cu_mmx_min_tokens() ||
        !cu_mmx_supported(g))
        return 0;
    for (int i = 0; i < 3; i++)     /* the buffer is rewritten: its memo goes */
        if (f->splits[i].buf == f->asplit) f->splits[i].buf = NULL;
    if (!cu_mmx_split_glu(g->wtype, s->eg, s->eu, s->rw, clamp, P, g->in, f->asplit, f->st)) return 0;
    cu_gemv_args q = *g;
    q.act = f->asplit;
    q.act_stride = cu_mmx_split_row_bytes(g->wtype, g->in);
    return cu_mmx(&q, ntiles, f->st);
}

/* y[T][rows] = W . x[T][in] with the activation quantized as the CPU does. */
static void matmul(fwd *f, const cu_t *W, const float *x, int64_t in, int64_t rows, float *y, int64_t ystride,
                   int T, int64_t row0 = 0, const int *xitems = NULL) {
    int64_t astride;
    int f32;
    const void *act = act_rows(f, W->type, x, in, T, &astride, &f32);
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.act_f32 = f32;
    g.w = (const uint8_t *)W->d + row0 * W->row_bytes;
    g.wtype = W->type; g.rows = rows; g.in = in; g.row_bytes = W->row_bytes;
    g.act = act; g.act_stride = astride; g.act_div = 1;
    g.out = y; g.out_stride = ystride; g.ntok = T;
    g.nt_hint = tile_rows(T);
    g.beside = f->beside;
    g.xitems = f32 ? xitems : NULL;      /* x as split items (one token; cu_gemv_args.xitems) */
    if (use_mmq(T) && mmq_exact(f, &g, x, T, (T + CU_MMQ_TILE - 1) / CU_MMQ_TILE)) return;
    if (use_mmq(T) && cu_mmq(&g, (T + CU_MMQ_TILE - 1) / CU_MMQ_TILE, f->st)) return;
    cu_gemv(&g, (T + g.nt_hint - 1) / g.nt_hint, f->st);
}

/* Two matrices of one shape and type over the same x (gate and up, kv and
 * gate): one GEMV launch (cu_gemv_args.w2) unless MINKE_CUDA_PAIR=0 or the
 * batch runs on the tensor cores. The per-row arithmetic is unchanged. */
static int pair_enabled(void) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("MINKE_CUDA_PAIR"); on = e ? atoi(e) != 0 : 1; }
    return on;
}
static void matmul2(fwd *f, const cu_t *W1, const cu_t *W2, const float *x, int64_t in, int64_t rows, float *y1,
                    float *y2, int64_t ystride, int T) {
    if (!pair_enabled() || use_mmq(T) || W1->type != W2->type || W1->row_bytes != W2->row_bytes) {
        matmul(f, W1, x, in, rows, y1, ystride, T);
        matmul(f, W2, x, in, rows, y2, ystride, T);
        return;
    }
    int64_t astride;
    int f32;
    const void *act = act_rows(f, W1->type, x, in, T, &astride, &f32);
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.act_f32 = f32;
    g.w = W1->d; g.w2 = W2->d;
    g.wtype = W1->type; g.rows = rows; g.in = in; g.row_bytes = W1->row_bytes;
    g.act = act; g.act_stride = astride; g.act_div = 1;
    g.out = y1; g.out2 = y2; g.out_stride = ystride; g.ntok = T;
    g.nt_hint = tile_rows(T);
    cu_gemv(&g, (T + g.nt_hint - 1) / g.nt_hint, f->st);
}

static void tapv(fwd *f, const char *fmt, int il, const float *d, int64_t n) {
    if (!f->taps || !f->m->tap) return;
    char name[64];
    snprintf(name, sizeof name, fmt, il);
    float *h = (float *)malloc(sizeof(float) * (size_t)n * f->T);
    cudaStreamSynchronize(f->st);
    cudaMemcpy(h, d, sizeof(float) * (size_t)n * f->T, cudaMemcpyDeviceToHost);
    for (int t = 0; t < f->T; t++) minke_tap_emit(f->m, name, f->pos0_host + t, h + (size_t)t * n, n);
    free(h);
}

/* Several GPUs: x[0 .. n) summed over them in place (NCCL all-reduce on the
 * GPU's main stream, captured in its decode graph); nothing with one GPU or
 * with the collectives off (bench). */
static void group_sum(fwd *f, float *x, int64_t n) {
    if (!f->cm->comm || !f->comm_on) return;
    PROF(f, "allreduce");
    ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, f->cm->comm, f->st);
}

/* The HC post step of a sub-layer: X = post * (f1 + f2) + comb^T X. With the
 * fused HC kernel (and no taps, which read X between sub-layers) it is left
 * pending and done by the next pre step's launch. */
static int hc_fused(fwd *f) {
    int D = (int)f->c->n_embd, nhc = (int)f->c->n_hc;
    return cu_hc_fused_enabled() && f->T < 32 && cu_hc_fused_ok(D, nhc, (int)f->c->hc_mix) && cu_hc_fused_ok(D, nhc, nhc);
}
static void hc_post(fwd *f, const float *f1, const float *f2) {
    cu_session *s = f->s;
    if (hc_fused(f) && !f->taps) { f->pend_f1 = f1; f->pend_f2 = f2; return; }
    cu_hc_post(s->X, f1, f2, s->post, s->comb, f->T, (int)f->c->n_embd, (int)f->c->n_hc, s->X2, f->st);
    float *t = s->X; s->X = s->X2; s->X2 = t;
}

/* The HC pre step over rows t0 .. t0+n-1 of the batch (a pending post step
 * first): x = the mixed (and, with norm_w, RMS-normed) input of the
 * sub-layer; post/comb for its post step unless head. Returns 1 when it left
 * comb's Sinkhorn (sk_defer) to hc_sinkhorn_side on a joined side stream. */
static int hc_pre(fwd *f, int t0, int n, const cu_t *fn, int nmix, const float *scale, const float *base,
                  const float *norm_w, int iters, int head, float *x, int sk_defer = 0) {
    cu_session *s = f->s;
    const dsv4_config *c = f->c;
    int D = (int)c->n_embd, nhc = (int)c->n_hc;
    int64_t off = (int64_t)t0 * c->hc_dim;
    if (hc_fused(f)) {
        const float *f1 = f->pend_f1, *f2 = f->pend_f2;
        int deferred = cu_hc_pre_fused(s->X + off, f1 ? f1 + (int64_t)t0 * D : NULL, f2 ? f2 + (int64_t)t0 * D : NULL,
                                       s->post + t0 * nhc, s->comb + t0 * nhc * nhc, s->X2 + off, n, D, nhc, fn->d,
                                       fn->type, nmix, scale, base, norm_w, iters, c->hc_eps, c->rms_eps, head,
                                       s->partial, s->psq, s->hc_cnt, x, s->post, s->comb, sk_defer && t0 == 0 && n == f->T,
                                       f->st);
        if (f1) { float *t = s->X; s->X = s->X2; s->X2 = t; }
        f->pend_f1 = f->pend_f2 = NULL;
        return deferred;
    }
    cu_hc_pre(s->X + off, n, D, nhc, fn->d, fn->type, nmix, scale, base, norm_w, iters, c->hc_eps, c->rms_eps, head,
              s->partial, s->psq, x, s->post, s->comb, f->st);
    return 0;
}
/* MINKE_CUDA_SK_DEFER (default 1; 0: in the step): the HC steps' Sinkhorn on
 * the kv stream, the attention's in its kv branch, the FFN's beside the
 * routed experts (that stream is idle then; on the shared expert's branch it
 * cost 1.2%: docs/performance.md, twenty-fifth session), joined with the
 * shared expert. */
static int sk_defer_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("MINKE_CUDA_SK_DEFER"); v = e && *e ? atoi(e) != 0 : 1; }
    return v;
}
/* The kv row reads only x: a third stream (st3) runs it while the q path
 * runs (exact activations only: with q8 activations x's quantization is
 * shared); it also takes the HC steps' deferred Sinkhorns. */
static int kv_stream(const fwd *f) { return f->side && f->cm->act_f32; }
/* st joins the main stream before the next pre step reads comb; its own
 * stage name for MINKE_CUDA_SKIP, the caller's stage left as it was */
static void hc_sinkhorn_side(fwd *f, int pending, cudaStream_t st) {
    if (!pending) return;
    const int keep = cu_skip_launch;
    cu_skip_launch = skip_list && f->T == 1 && skip_matches("hc_sinkhorn");
    cu_hc_sinkhorn(f->s->comb, f->T, (int)f->c->n_hc, (int)f->c->hc_sinkhorn_iters, f->c->hc_eps, st);
    cu_skip_launch = keep;
}

static void attention_layer(fwd *f, int il) {
    const dsv4_config *c = f->c;
    cu_layer *L = &f->cm->layers[il];
    cu_lcache *lc = &f->s->lc[il];
    cu_session *s = f->s;
    cudaStream_t st = f->st;
    /* H: the heads on this GPU (all of them unless tensor parallel: then its
     * heads, their output groups and a partial out_b, all-reduced) */
    int T = f->T, D = (int)c->n_embd, Dh = (int)c->head_dim, H = f->cm->hl, ratio = L->ratio;
    int W = (int)c->sliding_window, ql = (int)c->q_lora_rank, nrot = (int)c->rope_dim;
    int odim = f->cm->gl * (int)c->o_lora_rank;
    const float *rope = ratio ? f->cm->rope_comp : f->cm->rope_main;
    int sims = f->m->params.sims;

    const int kv_side = kv_stream(f);
    PROF(f, "hc_pre");
    int sk_pend = hc_pre(f, 0, T, &L->hc_attn_fn, (int)c->hc_mix, (const float *)L->hc_attn_scale.d,
                         (const float *)L->hc_attn_base.d, (const float *)L->attn_norm.d, (int)c->hc_sinkhorn_iters, 0,
                         s->x, kv_side && sk_defer_on());
    x_rewritten(f);
    tapv(f, "blk.%d.attn_norm", il, s->x, D);
    int ihd = (int)c->indexer_head_dim, nih = (int)c->indexer_n_head;
    int cw = ratio == 4 ? 2 * Dh : Dh;
    /* compressor, indexer compressor and indexer weights read only x: on the
     * side stream while the q/kv projections run (joined before the indexer
     * scores and the attention) */
    if (ratio && f->side) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_fork, st));
        CK_ASYNC(cudaStreamWaitEvent(f->cm->st2, f->cm->ev_fork, 0));
        f->st = f->cm->st2; f->act = s->act2; f->asplit = s->asplit2;
    }
    if (ratio) {
        cudaStream_t sb = f->st;
        PROF(f, "compressor");
        matmul2(f, &L->comp_kv, &L->comp_gate, s->x, D, cw, s->ca, s->cg, cw, T);
        cu_comp_emit(s->ca, s->cg, T, L->comp_ape.d, L->comp_ape.type, ratio, Dh, lc->ckv, lc->csc,
                     (const float *)L->comp_norm.d, c->rms_eps, nrot, rope, s->d_pos, sims, 0, 0, lc->comp, s->comp_fmt, sb);
        cu_comp_state(s->ca, s->cg, T, L->comp_ape.d, L->comp_ape.type, ratio, Dh, lc->ckv, lc->csc, s->d_pos, sb);
    }
    if (ratio == 4) {
        cudaStream_t sb = f->st;
        PROF(f, "idx_comp");
        matmul2(f, &L->idx_comp_kv, &L->idx_comp_gate, s->x, D, 2 * ihd, s->ia, s->ig, 2 * ihd, T);
        cu_comp_emit(s->ia, s->ig, T, L->idx_comp_ape.d, L->idx_comp_ape.type, 4, ihd, lc->ikv, lc->isc,
                     (const float *)L->idx_comp_norm.d, c->rms_eps, nrot, rope, s->d_pos, sims, 1, 0, lc->index, s->index_fmt, sb);
        cu_comp_state(s->ia, s->ig, T, L->idx_comp_ape.d, L->idx_comp_ape.type, 4, ihd, lc->ikv, lc->isc, s->d_pos, sb);
        matmul(f, &L->idx_proj, s->x, D, nih, s->wi, nih, T);
    }
    if (ratio && f->side) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_join, f->cm->st2));
        f->st = st; f->act = s->act; f->asplit = s->asplit;
    }
    int ring_done = 0;
    if (kv_side) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_fork3, st));
        CK_ASYNC(cudaStreamWaitEvent(f->cm->st3, f->cm->ev_fork3, 0));
        f->st = f->cm->st3; f->asplit = s->asplit3;
        hc_sinkhorn_side(f, sk_pend, f->cm->st3);
        PROF(f, "kv");
        matmul(f, &L->kv, s->x, D, Dh, s->kvp, Dh, T);
        /* one token: its ring slot holds position pos - W, which its attention
         * no longer reads, so the store may precede the attention (done by
         * cu_kv_finish_ring for T == 1) */
        ring_done = cu_kv_finish_ring(s->kvp, (const float *)L->kv_norm.d, T, Dh, nrot, rope, s->d_pos, c->rms_eps,
                                      sims, 0, s->kvb, W, lc->ring, f->cm->st3);
        CK_ASYNC(cudaEventRecord(f->cm->ev_join3, f->cm->st3));
        f->st = st; f->asplit = s->asplit;
    }
    PROF(f, "q_a+q_b");
    matmul(f, &L->q_a, s->x, D, ql, s->ql, ql, T);
    cu_rmsnorm(s->ql, (const float *)L->q_a_norm.d, T, ql, c->rms_eps, s->qn, st);
    /* the indexer's queries read only qn: on the kv branch (after the kv row)
     * while q_b runs */
    int idxq_side = kv_side && ratio == 4;
    if (idxq_side) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_fork3, st));
        CK_ASYNC(cudaStreamWaitEvent(f->cm->st3, f->cm->ev_fork3, 0));
        f->st = f->cm->st3; f->asplit = s->asplit3;
        PROF(f, "idx_q");
        matmul(f, &L->idx_q_b, s->qn, ql, (int64_t)nih * ihd, s->qi, (int64_t)nih * ihd, T);
        cu_idx_q_prep(s->qi, T, nih, ihd, nrot, rope, s->d_pos, sims, f->cm->st3);
        CK_ASYNC(cudaEventRecord(f->cm->ev_join3, f->cm->st3));
        f->st = st; f->asplit = s->asplit;
        PROF(f, "q_b");
    }
    matmul(f, &L->q_b, s->qn, ql, (int64_t)H * Dh, s->q, (int64_t)H * Dh, T);
    /* a batch's q norm and RoPE go with the attention (inside the wgmma kernel as it
     * stages q: one pass over q less); decode and the taps keep the norm launch */
    const int qfuse = T > ATT_SPLIT_MAX_T && !f->m->tap;      /* the same on every GPU */
    const int want_amax = qfuse && cu_mmh_min_tokens() && T >= cu_mmh_min_tokens();
    if (!qfuse) {
        PROF(f, "q_norm_rope");
        cu_qhead_norm_rope(s->q, T, H, Dh, nrot, rope, s->d_pos, c->rms_eps, st);
        tapv(f, "blk.%d.q", il, s->q, (int64_t)H * Dh);
    }
    if (kv_side) {
        CK_ASYNC(cudaStreamWaitEvent(st, f->cm->ev_join3, 0));
    } else {
        PROF(f, "kv");
        matmul(f, &L->kv, s->x, D, Dh, s->kvp, Dh, T);
        ring_done = cu_kv_finish_ring(s->kvp, (const float *)L->kv_norm.d, T, Dh, nrot, rope, s->d_pos, c->rms_eps,
                                      sims, 0, s->kvb, W, lc->ring, st);
    }
    tapv(f, "blk.%d.kv", il, s->kvb, Dh);
    if (ratio && f->side) CK_ASYNC(cudaStreamWaitEvent(st, f->cm->ev_join, 0));
    if (ratio == 4) {
        PROF(f, "idx_q");
        if (!idxq_side) {
            matmul(f, &L->idx_q_b, s->qn, ql, (int64_t)nih * ihd, s->qi, (int64_t)nih * ihd, T);
            cu_idx_q_prep(s->qi, T, nih, ihd, nrot, rope, s->d_pos, sims, st);
        }
        PROF(f, "idx_score");
        cu_idx_scores_sims(s->qi, s->wi, lc->index, s->index_fmt, T, nih, ihd, c->indexer_scale, (int)c->indexer_top_k,
                           lc->index_cap, s->d_pos, s->scores, s->score_stride, sims, st);
        PROF(f, "idx_topk");
        cu_idx_topk(s->scores, s->score_stride, T, (int)c->indexer_top_k, s->d_pos, s->sel, s->nsel, st);
    }
    PROF(f, "attention");
    const void *comp_rows = lc->comp;
    int comp_fmt = ratio ? s->comp_fmt : CU_KV_F32;      /* no compressed rows: nothing packed */
    if (comp_fmt == CU_KV_FP8 && T > ATT_SPLIT_MAX_T) {
        /* a batch reads every compressed row for many tokens and head blocks:
         * unpacked once into f32 for the prefill kernels (their f16 staging
         * from FP8 rows cost 19% a launch, docs/performance.md) */
        cu_kvrows_unpack(CU_KV_FP8, lc->comp, (f->pos0_host + T) / ratio, Dh, nrot, s->comp_f32, st);
        comp_rows = s->comp_f32;
        comp_fmt = CU_KV_F32;
    }
    /* one token: o, then out_a's output z, also as split items for the next product (the same bits) */
    const int items = T == 1 && f->cm->act_f32 && cu_gemv3_items_enabled();
    const int o_items = cu_attention(s->q, s->kvb, lc->ring, comp_rows, comp_fmt, ratio == 4 ? s->sel : NULL, s->nsel,
                                     (int)c->indexer_top_k, (const float *)L->sinks.d + f->cm->h0, T, H, Dh, W, ratio, nrot,
                                     rope, c->attn_scale, s->d_pos, f->pos0_host, qfuse ? c->rms_eps : -1.f, s->o,
                                     want_amax ? s->o_amax : NULL, s->attn_part, T <= ATT_SPLIT_MAX_T ? ATT_SPLIT : 1,
                                     L->q_b.type != CU_TYPE_F32, items ? s->o_items : NULL, st);
    int z_items = 0;
    if (!ring_done) cu_raw_store(s->kvb, T, Dh, W, s->d_pos, lc->ring, st);
    tapv(f, "blk.%d.attn_o", il, s->o, (int64_t)H * Dh);
    PROF(f, "out_a");
    /* grouped output A: row r of out_a reads group r / o_lora of o */
    {
        int G = f->cm->gl, ol = (int)c->o_lora_rank, gin = (int)c->o_group_in;
        const cu_t *Wa = &L->out_a;
        int at = cu_act_type(Wa->type);
        int64_t in_all = (int64_t)H * Dh;
        const void *act = s->o;
        int64_t astride = in_all * 4, gbytes = (int64_t)gin * 4;
        int f32 = at != CU_TYPE_F32 && f->cm->act_f32;
        if (at != CU_TYPE_F32 && !f32) {
            cu_quantize_act(at, s->o, s->act, T, in_all, st);
            act = s->act;
            astride = cu_act_row_bytes(at, in_all);
            gbytes = cu_act_row_bytes(at, gin);
        }
        cu_gemv_args g;
        memset(&g, 0, sizeof g);
        g.act_f32 = f32;
        g.w = Wa->d; g.wtype = Wa->type; g.rows = (int64_t)G * ol; g.in = gin; g.row_bytes = Wa->row_bytes;
        g.act = act; g.act_stride = astride; g.act_div = 1; g.out = s->z; g.out_stride = odim; g.ntok = T;
        g.group_rows = ol; g.group_act_bytes = gbytes;
        g.act_amax = want_amax && f32 ? s->o_amax : NULL;     /* found by the attention as it stored o */
        if (items) {
            g.xitems = o_items ? s->o_items : NULL;
            g.oitems = s->z_items; g.oitems_done = &z_items;
        }
        g.nt_hint = tile_rows(T);
        int ntl = (T + CU_MMQ_TILE - 1) / CU_MMQ_TILE;
        if (!use_mmq(T) || (!mmq_exact(f, &g, s->o, T, ntl) && !cu_mmq(&g, ntl, st)))
            cu_gemv(&g, (T + g.nt_hint - 1) / g.nt_hint, st);
    }
    PROF(f, "out_b");
    matmul(f, &L->out_b, s->z, odim, D, s->a, D, T, 0, z_items ? s->z_items : NULL);
    if (f->cm->tp) group_sum(f, s->a, (int64_t)T * D);
    tapv(f, "blk.%d.attn_out", il, s->a, D);
    PROF(f, "hc_post");
    hc_post(f, s->a, NULL);
}

/* MINKE_CUDA_SHDOWN_BESIDE (default 1; 0: the streamed launch as before):
 * one token's shared down in blocks small enough to share an SM with the
 * routed down (cu_gemv_args.beside; the same bits). In the decode graph the
 * down becomes ready as the routed gate + up ends and used to finish ~6 us a
 * layer after the routed down; decode q2 +1.9%, q4 +3.6%, MXFP4 +2.6%
 * (docs/performance.md, twenty-third session; blocks of at most 64 registers,
 * which would fit each scheduler's register file beside the routed down's
 * warps, were slower: twenty-fourth session). */
static int shdown_beside(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("MINKE_CUDA_SHDOWN_BESIDE"); v = e && *e ? atoi(e) : 1; }
    return v;
}

/* The shared expert on f->st: so = down(swiglu(gate x, up x)). */
static void shared_expert(fwd *f, const cu_layer *L, float clamp) {
    cu_session *s = f->s;
    int T = f->T, D = (int)f->c->n_embd, SF = f->cm->sfl;
    matmul2(f, &L->gate_shexp, &L->up_shexp, s->x, D, SF, s->sg, s->su, SF, T);
    /* one token: the SwiGLU also as the down's input items (cu_gemv_args.xitems) */
    int items = 0;
    if (T == 1 && f->cm->act_f32 && cu_gemv3_items_enabled())
        items = cu_swiglu_items(s->sg, s->su, SF, clamp, s->smid, s->smid_items, f->st);
    else
        cu_swiglu(s->sg, s->su, NULL, T, SF, clamp, s->smid, f->st);
    f->beside = T == 1 && f->side && shdown_beside();
    matmul(f, &L->down_shexp, s->smid, SF, D, s->so, D, T, 0, items ? s->smid_items : NULL);
    f->beside = 0;
}

static void ffn_layer(fwd *f, int il) {
    const dsv4_config *c = f->c;
    cu_layer *L = &f->cm->layers[il];
    cu_session *s = f->s;
    cudaStream_t st = f->st;
    int T = f->T, D = (int)c->n_embd, E = (int)c->n_expert, K = (int)c->n_expert_used, F = f->cm->ff;
    int P = T * K;
    float clamp = c->swiglu_clamp[il];

    PROF(f, "hc_pre");
    int sk_pend = hc_pre(f, 0, T, &L->hc_ffn_fn, (int)c->hc_mix, (const float *)L->hc_ffn_scale.d,
                         (const float *)L->hc_ffn_base.d, (const float *)L->ffn_norm.d, (int)c->hc_sinkhorn_iters, 0,
                         s->x, kv_stream(f) && sk_defer_on());
    if (sk_pend) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_fork3, st));
        CK_ASYNC(cudaStreamWaitEvent(f->cm->st3, f->cm->ev_fork3, 0));
        hc_sinkhorn_side(f, sk_pend, f->cm->st3);
        CK_ASYNC(cudaEventRecord(f->cm->ev_join3, f->cm->st3));
    }
    x_rewritten(f);
    tapv(f, "blk.%d.ffn_norm", il, s->x, D);
    /* the shared expert reads only x: on the side stream while the routed
     * experts run (joined before the post step) */
    if (f->side) {
        CK_ASYNC(cudaEventRecord(f->cm->ev_fork, st));
        CK_ASYNC(cudaStreamWaitEvent(f->cm->st2, f->cm->ev_fork, 0));
        f->st = f->cm->st2; f->act = s->act2; f->asplit = s->asplit2;
        PROF(f, "shared");
        shared_expert(f, L, clamp);
        CK_ASYNC(cudaEventRecord(f->cm->ev_join, f->cm->st2));
        f->st = st; f->act = s->act; f->asplit = s->asplit;
    }
    const cu_t *Wg = &L->gate_exps, *Wu = &L->up_exps, *Wd = &L->down_exps;
    /* tensor cores when gate, up and down all have an int8 mma kernel (tiles of 64 pairs) */
    int mmq = 0;
    if (use_mmq(T)) {
        cu_gemv_args q;
        memset(&q, 0, sizeof q);
        q.act_f32 = f->cm->act_f32;
        q.wtype = Wg->type; q.in = D; mmq = cu_mmq_supported(&q);
        q.wtype = Wu->type; mmq = mmq && Wu->type == Wg->type && cu_mmq_supported(&q);
        q.wtype = Wd->type; q.in = F; mmq = mmq && cu_mmq_supported(&q);
    }
    int nt = mmq ? CU_MMQ_TILE : P >= 64 ? 8 : P >= 16 ? 4 : 1;
    PROF(f, "router");
    matmul(f, &L->gate_inp, s->x, D, E, s->rlog, E, T);
    int hash = (uint32_t)il < c->n_hash_layer;
    const float *rbias = hash ? NULL : (const float *)L->exp_bias.d;
    const int32_t *rtid = hash ? (const int32_t *)L->tid2eid.d : NULL;
    if (nt == 1) {
        /* one launch: routing and the one-pair tiles of a small batch */
        cu_router_tiles1(s->rlog, rbias, rtid, s->d_tok, T, E, K, c->expert_weights_scale, f->cm->own0, f->cm->own1,
                         s->rsel, s->rw,
                         s->tpairs, s->tstart, s->tcount, s->texp, s->ntiles, st);
    } else {
        cu_router(s->rlog, rbias, rtid, s->d_tok, T, E, K, c->expert_weights_scale, f->cm->own0, f->cm->own1, s->rsel,
                  s->rw, st);
        PROF(f, "moe_tiles");
        cu_moe_tiles(s->rsel, P, E, nt, s->tpairs, s->tstart, s->tcount, s->texp, s->ntiles, st);
    }
    int max_tiles = (P + nt - 1) / nt + (E < P ? E : P);
    /* one token with exact activations: gate, up and SwiGLU in one launch, the
     * down products summed over the experts in another (cu_gemv3.cu) */
    if (T == 1 && !mmq && f->cm->act_f32 &&
        cu_moe_dec_supported(Wg->type, Wu->type, Wd->type, D, F, K) && Wu->row_bytes == Wg->row_bytes) {
        PROF(f, "moe_gate_up");
        cu_moe_dec_glu(Wg->type, Wg->d, Wu->d, Wg->row_bytes, Wg->row_bytes * F, F, D, s->x, s->rsel, s->rw, K, clamp,
                       s->emid, st);
        PROF(f, "moe_down");
        cu_moe_dec_down(Wd->d, Wd->row_bytes, Wd->row_bytes * D, D, F, s->emid, s->rsel, K, s->mo, st);
    } else if (T == 1 && !mmq && f->cm->act_f32 && Wu->row_bytes == Wg->row_bytes &&
               !(((uintptr_t)Wg->d | (uintptr_t)Wu->d | (uintptr_t)Wd->d) & 15) &&
               cu_moes_supported(Wg->type, Wu->type, Wd->type, D, F, K, Wg->row_bytes, Wd->row_bytes)) {
        /* the same for Q4_K / MXFP4 experts, streamed (cu_moes.cu) */
        PROF(f, "moe_gate_up");
        cu_moes_glu(Wg->type, Wg->d, Wu->d, Wg->row_bytes, Wg->row_bytes * F, F, D, s->x, s->rsel, s->rw, K, clamp, s->emid, st);
        PROF(f, "moe_down");
        cu_moes_down(Wd->type, Wd->d, Wd->row_bytes, Wd->row_bytes * D, D, F, s->emid, s->rsel, K, s->mo, st);
    } else {
        /* gate and up over the token activations (act row = pair / K) */
        PROF(f, "moe_gate_up");
        int at = cu_act_type(Wg->type);
        const void *act = s->x;
        int64_t astride = (int64_t)D * 4;
        int gf32 = at != CU_TYPE_F32 && f->cm->act_f32;
        if (at != CU_TYPE_F32 && !gf32) {
            cu_quantize_act(at, s->x, s->act, T, D, st);
            act = s->act;
            astride = cu_act_row_bytes(at, D);
        }
        f->xq_type = 0;
        cu_gemv_args g;
        memset(&g, 0, sizeof g);
        g.act_f32 = gf32;
        g.wtype = Wg->type; g.rows = F; g.in = D; g.row_bytes = Wg->row_bytes; g.expert_bytes = Wg->row_bytes * F;
        g.act = act; g.act_stride = astride; g.act_div = K; g.out_stride = F; g.nt_hint = nt;
        g.tile_pairs = s->tpairs; g.tile_start = s->tstart; g.tile_count = s->tcount; g.tile_expert = s->texp;
        g.n_tiles = s->ntiles;
        g.w = Wg->d; g.out = s->eg;
        if (!mmq && pair_enabled() && Wu->type == Wg->type && Wu->row_bytes == Wg->row_bytes) {
            g.w2 = Wu->d; g.out2 = s->eu;     /* gate and up in one launch */
            cu_gemv(&g, max_tiles, st);
            g.w2 = NULL; g.out2 = NULL;
        } else {
            if (mmq) { if (!mmq_exact(f, &g, s->x, T, max_tiles)) cu_mmq(&g, max_tiles, st); }
            else cu_gemv(&g, max_tiles, st);
            g.w = Wu->d; g.wtype = Wu->type; g.row_bytes = Wu->row_bytes; g.expert_bytes = Wu->row_bytes * F; g.out = s->eu;
            if (cu_act_type(Wu->type) != at) {   /* different formats for gate and up are refused by the binder; stay safe */
                g.act = s->x; g.act_stride = (int64_t)D * 4;
                g.act_f32 = cu_act_type(Wu->type) != CU_TYPE_F32;
            }
            if (mmq) { if (!mmq_exact(f, &g, s->x, T, max_tiles)) cu_mmq(&g, max_tiles, st); }
            else cu_gemv(&g, max_tiles, st);
        }
        PROF(f, "moe_down");
        int atd = cu_act_type(Wd->type);
        int df32 = atd != CU_TYPE_F32 && f->cm->act_f32;
        g.act_f32 = df32;
        g.w = Wd->d; g.wtype = Wd->type; g.rows = D; g.in = F; g.row_bytes = Wd->row_bytes; g.expert_bytes = Wd->row_bytes * D;
        g.act = s->emid; g.act_stride = (int64_t)F * 4; g.act_div = 1; g.out = s->eout; g.out_stride = D;
        if (!(mmq && down_from_glu(f, &g, clamp, P, max_tiles))) {
            cu_swiglu(s->eg, s->eu, s->rw, P, F, clamp, s->emid, st);
            if (atd != CU_TYPE_F32 && !df32) {
                cu_quantize_act(atd, s->emid, s->act, P, F, st);
                g.act = s->act;
                g.act_stride = cu_act_row_bytes(atd, F);
            }
            if (mmq) { if (!mmq_exact(f, &g, s->emid, P, max_tiles)) cu_mmq(&g, max_tiles, st); }
            else cu_gemv(&g, max_tiles, st);
        }
        cu_moe_sum(s->eout, s->rsel, T, K, D, s->mo, st);
    }
    /* several GPUs: each summed the experts it owns (or its rows of all); the
     * all-reduce adds the others'. The replicated shared expert is added in
     * the post step; split over the GPUs (tensor parallel) its partial sum
     * joins the MoE's before the one all-reduce. */
    int tp = f->cm->tp;
    if (!tp) {
        group_sum(f, s->mo, (int64_t)T * D);
        tapv(f, "blk.%d.moe_out", il, s->mo, D);
    }
    if (f->side) {
        CK_ASYNC(cudaStreamWaitEvent(st, f->cm->ev_join, 0));
        if (sk_pend) CK_ASYNC(cudaStreamWaitEvent(st, f->cm->ev_join3, 0));
    } else {
        PROF(f, "shared");
        shared_expert(f, L, clamp);
    }
    if (tp) {
        cu_add(s->mo, s->so, s->mo, (int64_t)T * D, st);
        group_sum(f, s->mo, (int64_t)T * D);
        tapv(f, "blk.%d.ffn_out", il, s->mo, D);
    } else {
        tapv(f, "blk.%d.shexp_out", il, s->so, D);
    }
    PROF(f, "hc_post");
    hc_post(f, s->mo, tp ? NULL : s->so);
}

/* Output head for rows t0 .. t0+n-1 of the batch into s->logits. */
static void output_head(fwd *f, int t0, int n) {
    const dsv4_config *c = f->c;
    cu_model *cm = f->cm;
    cu_session *s = f->s;
    int D = (int)c->n_embd, nhc = (int)c->n_hc;
    PROF(f, "head");
    hc_pre(f, t0, n, &cm->output_hc_fn, nhc, (const float *)cm->output_hc_scale.d, (const float *)cm->output_hc_base.d,
           NULL, 0, 1, s->hy);
    cu_rmsnorm(s->hy, (const float *)cm->output_norm.d, n, D, c->rms_eps, s->hy, f->st);
    matmul(f, &cm->output, s->hy, D, c->n_vocab, s->logits, c->n_vocab, n);
}

/* The forward of one chunk (T <= s->chunk) on the stream; tokens and position
 * already in s->d_tok / s->d_pos. Leaves the last row's logits in s->logits
 * (row 0) unless all_rows, then rows 0..T-1 (T <= logit_rows). */
static void forward_chunk(fwd *f, int all_rows) {
    const dsv4_config *c = f->c;
    cu_session *s = f->s;
    PROF(f, "embed");
    cu_embed(s->d_tok, f->T, f->cm->token_embd.d, f->cm->token_embd.type, (int)c->n_embd, (int)c->n_hc, s->X, f->st);
    if (f->taps && f->m->tap) {
        /* the embedding is replicated: tap stream 0 */
        float *h = (float *)malloc(sizeof(float) * c->hc_dim * f->T);
        cudaStreamSynchronize(f->st);
        cudaMemcpy(h, s->X, sizeof(float) * c->hc_dim * f->T, cudaMemcpyDeviceToHost);
        for (int t = 0; t < f->T; t++) minke_tap_emit(f->m, "embd", f->pos0_host + t, h + (size_t)t * c->hc_dim, c->n_embd);
        free(h);
    }
    cu_mmh_share_clear();
    for (uint32_t il = 0; il < c->n_layer; il++) {
        attention_layer(f, (int)il);
        ffn_layer(f, (int)il);
        tapv(f, "blk.%d.out", (int)il, s->X, c->hc_dim);
    }
    if (all_rows) output_head(f, 0, f->T);
    else output_head(f, f->T - 1, 1);
    PROF(f, "end");
}

/* the session's captured graph for batches of T (with or without all the logits), NULL if none yet */
static cu_graph *session_graph(cu_session *s, int T, int with_logits) {
    for (int i = 0; i < s->n_graphs; i++)
        if (s->graphs[i].T == T && s->graphs[i].with_logits == with_logits) return &s->graphs[i];
    return NULL;
}

/* The last forward's logits (V floats, first row of s->logits) to the host
 * through the session's pinned buffer: run_chunk's last_logits and the
 * engine's on-demand fetch (cu_logits_fetch). */
static int logits_to_host(cu_session *s, int V, float *out, cudaStream_t st) {
    if (cudaMemcpyAsync(s->h_logits, s->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess) {
        minke_set_error("cuda: logits copy: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    memcpy(out, s->h_logits, sizeof(float) * V);
    return 0;
}

/* One chunk on one GPU (its thread, its device current). With several GPUs
 * every GPU runs this at once; only rank 0 is given logit buffers and taps. */
static int run_chunk(minke_model *m, cu_model *cm, cu_session *s, int comm_on, const int32_t *tokens, int T, int pos0,
                     float *all_logits, float *last_logits) {
    const dsv4_config *c = &m->w.cfg;
    int V = (int)c->n_vocab;
    int taps = m->tap != NULL && cm->rank == 0;
    int any_taps = m->tap != NULL;      /* the same stream structure on every GPU */
    int want_all = all_logits != NULL;
    /* all rows fit the logits buffer only for small T; otherwise compute in sub-passes is not possible
     * after the layers ran, so the caller splits chunks to logit_rows when all logits are wanted */
    memcpy(s->h_tok, tokens, sizeof(int32_t) * T);
    s->h_pos[0] = pos0;
    cudaStream_t st = cm->st;
    CK(cudaMemcpyAsync(s->d_tok, s->h_tok, sizeof(int32_t) * T, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(s->d_pos, s->h_pos, sizeof(int), cudaMemcpyHostToDevice, st));
    {
        fwd f;
        memset(&f, 0, sizeof f);
        f.m = m; f.cm = cm; f.s = s; f.c = c; f.st = st; f.T = T; f.taps = taps; f.pos0_host = pos0;
        f.tok_host = tokens;
        f.act = s->act;
        f.asplit = s->asplit;
        f.comm_on = comm_on;
        f.side = !any_taps && prof_on != 1 && !getenv("MINKE_CUDA_NO_SIDE");
        int use_graph = !any_taps && T == 1 && !getenv("MINKE_CUDA_NO_GRAPH") && prof_on != 1;
        if (use_graph) {
            cu_graph *g = session_graph(s, T, want_all);
            if (!g && s->n_graphs < 4) {
                cudaGraph_t graph;
                /* X/X2 swap an even number of times per layer pair, so the captured pointers repeat */
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                forward_chunk(&f, want_all);
                CK(cudaStreamEndCapture(st, &graph));
                g = &s->graphs[s->n_graphs];
                CK(cudaGraphInstantiate(&g->exec, graph, 0));
                cudaGraphDestroy(graph);
                g->T = T; g->with_logits = want_all;
                s->n_graphs++;
            }
            if (g) CK(cudaGraphLaunch(g->exec, st));
            else forward_chunk(&f, want_all);
        } else {
            forward_chunk(&f, want_all);
        }
    }
    if (cm->rank == 0) prof_collect(T == 1, T);
    if (want_all) {
        CK(cudaMemcpyAsync(all_logits, s->logits, sizeof(float) * (size_t)T * V, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        memcpy(last_logits, all_logits + (size_t)(T - 1) * V, sizeof(float) * V);
    } else if (last_logits) {
        if (logits_to_host(s, V, last_logits, st)) return -1;
    } else {
        CK(cudaStreamSynchronize(st));
    }
    if (taps && m->tap) {
        for (int t = 0; t < T; t++)
            if (want_all) minke_tap_emit(m, "logits", pos0 + t, all_logits + (size_t)t * V, V);
        if (!want_all) minke_tap_emit(m, "logits", pos0 + T - 1, last_logits, V);
    }
    {
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) { minke_set_error("cuda: kernel failed: %s", cudaGetErrorString(e)); return -1; }
    }
    return 0;
fail:
    return -1;
}

/* A chunk on every GPU of the model at once (cu_pool), or on the one GPU. */
typedef struct chunk_job {
    minke_model *m;
    cu_gsession *gs;
    const int32_t *tokens;
    int T, pos0;
    float *all_logits, *last_logits;
} chunk_job;

static int chunk_rank(void *arg, int rank) {
    chunk_job *j = (chunk_job *)arg;
    cu_group *g = GRP(j->m);
    return run_chunk(j->m, g->dev[rank], j->gs->dev[rank], g->comm_on, j->tokens, j->T, j->pos0,
                     rank ? NULL : j->all_logits, rank ? NULL : j->last_logits);
}

static int group_chunk(minke_model *m, cu_gsession *gs, const int32_t *tokens, int T, int pos0, float *all_logits,
                       float *last_logits) {
    cu_group *g = GRP(m);
    chunk_job j = {m, gs, tokens, T, pos0, all_logits, last_logits};
    if (!g->pool) return chunk_rank(&j, 0);
    return cu_pool_run(g->pool, chunk_rank, &j);
}

/* The group session's prompt chunk: the smallest of its GPUs' (one may have
 * taken less where its scratch did not fit, dev_session_alloc); every GPU
 * runs each batch */
static int gsession_chunk(const cu_gsession *gs) {
    int chunk = gs->dev[0]->chunk;
    for (int r = 1; r < gs->n; r++)
        if (gs->dev[r]->chunk < chunk) chunk = gs->dev[r]->chunk;
    return chunk;
}

static int cu_forward(minke_model *m, void *bs, const int32_t *tokens, int n, int pos0, float *all_logits,
                      float *last_logits) {
    cu_gsession *gs = (cu_gsession *)bs;
    cu_session *s = gs->dev[0];
    int V = (int)m->w.cfg.n_vocab;
    int step = gsession_chunk(gs);
    if (all_logits && step > s->logit_rows) step = s->logit_rows;
    for (int i = 0; i < n; i += step) {
        int T = n - i < step ? n - i : step;
        if (group_chunk(m, gs, tokens + i, T, pos0 + i, all_logits ? all_logits + (size_t)i * V : NULL, last_logits))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* state payload (engine/backend.h layout)                             */

/* n compressed rows of hd (fmt, nrot) between the device store and the
 * payload's f32 rows: packed rows go through f32 scratch (unpacked to save;
 * packed to load, where a value that is not the format's, as in a state saved
 * with the simulations off, is an error rather than a silent change) */
static int rows_copy(void *dev, int fmt, int n, int hd, int nrot, uint8_t *host, int save, float *scratch, int *d_ok,
                     cudaStream_t st) {
    if (n <= 0) return 0;
    size_t fb = (size_t)n * hd * 4;
    if (fmt == CU_KV_F32)
        return (save ? cudaMemcpy(host, dev, fb, cudaMemcpyDeviceToHost) : cudaMemcpy(dev, host, fb, cudaMemcpyHostToDevice)) != cudaSuccess;
    if (save) {
        cu_kvrows_unpack(fmt, dev, n, hd, nrot, scratch, st);
        return cudaMemcpyAsync(host, scratch, fb, cudaMemcpyDeviceToHost, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess;
    }
    int ok = 1;
    if (cudaMemcpyAsync(d_ok, &ok, 4, cudaMemcpyHostToDevice, st) != cudaSuccess ||
        cudaMemcpyAsync(scratch, host, fb, cudaMemcpyHostToDevice, st) != cudaSuccess) return 1;
    cu_kvrows_pack(fmt, scratch, n, hd, nrot, dev, d_ok, st);
    if (cudaMemcpyAsync(&ok, d_ok, 4, cudaMemcpyDeviceToHost, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess) return 1;
    if (!ok) {
        minke_set_error("cuda: the saved state's %s rows are not %s values (saved with the simulations off? "
                        "MINKE_CUDA_KV=f32 loads it)", fmt == CU_KV_FP8 ? "attention" : "indexer", fmt == CU_KV_FP8 ? "FP8" : "FP4");
        return 2;
    }
    return 0;
}

static int state_copy(minke_model *m, cu_session *s, int pos, uint8_t *buf, int save) {
    const dsv4_config *c = &m->w.cfg;
    minke_kv_layer_layout *lay = (minke_kv_layer_layout *)malloc(sizeof(*lay) * c->n_layer);
    if (!lay) { minke_set_error("out of memory"); return -1; }
    minke_kv_layout(c, pos, lay);
    int Dh = (int)c->head_dim, ihd = (int)c->indexer_head_dim, W = (int)c->sliding_window, nrot = (int)c->rope_dim;
    cudaMemcpyKind k = save ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    int rc = 0;
    for (uint32_t il = 0; il < c->n_layer && !rc; il++) {
        minke_kv_layer_layout *L = &lay[il];
        cu_lcache *l = &s->lc[il];
        for (int i = 0; i < L->n_raw && !rc; i++) {
            int p = pos - L->n_raw + i;
            void *dev = l->ring + (size_t)(p % W) * Dh;
            void *host = buf + L->off_raw + (size_t)i * Dh * 4;
            rc |= save ? cudaMemcpy(host, dev, Dh * 4, k) != cudaSuccess : cudaMemcpy(dev, host, Dh * 4, k) != cudaSuccess;
        }
#define CP(dev, off, bytes) if ((bytes) > 0) rc |= (save ? cudaMemcpy(buf + (off), (dev), (bytes), k) : cudaMemcpy((dev), buf + (off), (bytes), k)) != cudaSuccess;
        if (!rc) rc |= rows_copy(l->comp, s->comp_fmt, L->n_comp, Dh, nrot, buf + L->off_comp, save, s->comp_f32, s->d_kvok, 0);
        if (!rc) rc |= rows_copy(l->index, s->index_fmt, L->n_index, ihd, 0, buf + L->off_index, save, s->comp_f32, s->d_kvok,
                                 0);
        CP(l->ckv, L->off_comp_kv, (size_t)L->state_rows * L->state_width * 4)
        CP(l->csc, L->off_comp_sc, (size_t)L->state_rows * L->state_width * 4)
        CP(l->ikv, L->off_index_kv, (size_t)L->istate_rows * L->istate_width * 4)
        CP(l->isc, L->off_index_sc, (size_t)L->istate_rows * L->istate_width * 4)
#undef CP
    }
    free(lay);
    if (rc == 1) minke_set_error("cuda: state copy failed");
    return rc ? -1 : 0;
}
/* The state is replicated on every GPU: saved from the first, loaded into all. */
static int cu_state_save(minke_model *m, void *bs, int pos, void *dst) {
    cudaSetDevice(GRP(m)->dev[0]->dev);
    return state_copy(m, ((cu_gsession *)bs)->dev[0], pos, (uint8_t *)dst, 1);
}
static int cu_state_load(minke_model *m, void *bs, int pos, const void *src) {
    cu_gsession *gs = (cu_gsession *)bs;
    cu_group *g = GRP(m);
    cu_session_reset(m, bs);
    int rc = 0;
    for (int r = 0; r < gs->n && !rc; r++) {
        cudaSetDevice(g->dev[r]->dev);
        rc = state_copy(m, gs->dev[r], pos, (uint8_t *)src, 0);
    }
    cudaSetDevice(g->dev[0]->dev);
    return rc;
}

/* ------------------------------------------------------------------ */
/* bench helpers (cu_backend.h)                                        */

extern "C" int cu_bench_greedy(minke_model *m, void *bs, int32_t token, int pos, int skip, int32_t *next) {
    cu_gsession *gs = (cu_gsession *)bs;
    cu_session *s = gs->dev[0];
    cu_model *cm = GRP(m)->dev[0];
    if (group_chunk(m, gs, &token, 1, pos, NULL, NULL)) return -1;
    cudaSetDevice(cm->dev);
    cu_argmax(s->logits, m->w.cfg.n_vocab, skip, s->d_argmax, cm->st);
    int h = 0;
    if (cudaMemcpy(&h, s->d_argmax, 4, cudaMemcpyDeviceToHost) != cudaSuccess) { minke_set_error("cuda: argmax copy"); return -1; }
    *next = h;
    return 0;
}

extern "C" uint64_t cu_model_weight_bytes(minke_model *m) { return GRP(m) ? GRP(m)->weight_bytes : 0; }

extern "C" int cu_model_gpus(minke_model *m) { return GRP(m) ? GRP(m)->n : 0; }

extern "C" int cu_model_has_comm(minke_model *m) { return GRP(m) && GRP(m)->dev[0]->comm; }

/* Collectives on or off (bench: a step without them is the compute alone;
 * its results are wrong with several GPUs, so the bench restores the state
 * after). The captured graphs hold the old choice: they are dropped. */
extern "C" void cu_bench_set_comm(minke_model *m, void *bs, int on) {
    cu_group *g = GRP(m);
    cu_gsession *gs = (cu_gsession *)bs;
    if (g->comm_on == on) return;
    g->comm_on = on;
    for (int r = 0; r < gs->n; r++) {
        cudaSetDevice(g->dev[r]->dev);
        drop_graphs(gs->dev[r]);
    }
    cudaSetDevice(g->dev[0]->dev);
}

/* The KV cache's rows on one GPU: the bytes of an attention and an indexer
 * row in the session's formats, and the formats in words. */
extern "C" void cu_kv_row_bytes(minke_model *m, void *bs, int *comp_row, int *index_row, const char **fmt) {
    const dsv4_config *c = &m->w.cfg;
    cu_session *s = ((cu_gsession *)bs)->dev[0];
    *comp_row = kv_row_bytes(s->comp_fmt, (int)c->head_dim, (int)c->rope_dim);
    *index_row = kv_row_bytes(s->index_fmt, (int)c->indexer_head_dim, 0);
    *fmt = s->comp_fmt == CU_KV_FP8 ? "FP8 attention rows, FP4 indexer rows" : "f32 rows";
}

/* The session's prompt chunk: tokens a forward batch at most */
extern "C" int cu_session_chunk(minke_model *m, void *bs) {
    (void)m;
    return gsession_chunk((const cu_gsession *)bs);
}

/* engine/backend.h logits_fetch: the last one-token forward's logits (on
 * the first GPU, which runs the output head) to the host */
static int cu_logits_fetch(minke_model *m, void *bs, float *out) {
    cu_model *cm = GRP(m)->dev[0];
    cudaSetDevice(cm->dev);
    return logits_to_host(((cu_gsession *)bs)->dev[0], (int)m->w.cfg.n_vocab, out, cm->st);
}

/* engine/backend.h sample_cands (cu_sample.cu): one launch and one copy of
 * 16 + 8 cap bytes instead of the vocabulary's logits */
static int cu_sample_cands_op(minke_model *m, void *bs, float floor_off, int cap, int32_t *amax, float *lmax, int32_t *ids,
                              float *vals) {
    cu_session *s = ((cu_gsession *)bs)->dev[0];
    cu_model *cm = GRP(m)->dev[0];
    const int c = cap < CU_CANDS_MAX ? (cap > 0 ? cap : 0) : CU_CANDS_MAX;
    cudaSetDevice(cm->dev);
    cu_sample_cands(s->logits, (int)m->w.cfg.n_vocab, floor_off, c, s->d_cands, cm->st);
    if (cudaPeekAtLastError() != cudaSuccess ||
        cudaMemcpyAsync(s->h_cands, s->d_cands, cu_sample_cands_bytes(c), cudaMemcpyDeviceToHost, cm->st) != cudaSuccess ||
        cudaStreamSynchronize(cm->st) != cudaSuccess) {
        minke_set_error("cuda: sampling candidates: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    const int n = s->h_cands[0];
    *amax = s->h_cands[1];
    memcpy(lmax, &s->h_cands[2], 4);
    const int k = n < c ? n : c;
    memcpy(ids, s->h_cands + 4, sizeof(int32_t) * (size_t)k);
    memcpy(vals, s->h_cands + 4 + c, sizeof(float) * (size_t)k);
    /* more than this device's buffer holds: more than the caller's cap too */
    return n > c && n <= cap ? cap + 1 : n;
}

static const minke_backend_ops cuda_ops = {
    "cuda", cu_model_init, cu_model_free, cu_session_alloc, cu_session_free, cu_session_reset, cu_session_bytes,
    cu_forward, cu_state_save, cu_state_load,
    NULL, NULL, NULL,           /* MTP: CPU only */
    NULL, NULL, NULL,           /* frontier */
    cu_logits_fetch, cu_sample_cands_op,
};

extern "C" const minke_backend_ops *minke_backend_cuda(void) { return &cuda_ops; }
