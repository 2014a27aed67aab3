/* cmd_bench.c: `minke bench`, prefill and decode speed at growing context
 * frontiers (serving spec §7).
 *
 * The walk: for each frontier F (ctx-start, then +step-incr or x step-mul up
 * to ctx-max) prefill only the new interval of the token sequence (timed),
 * save the KV state, greedily decode --gen-tokens tokens never choosing EOS
 * (timed), restore the state, and print one CSV row. The model is a GGUF
 * (-m) or, on CUDA builds, a full Flash-shape model generated on the GPU
 * (--synthetic flash-q2|flash-q4|flash-mxfp4) without any file.
 *
 * It drives the backend ops table (engine/backend.h) directly so a synthetic
 * model needs no GGUF. Besides the CSV (stdout or --csv) it reports on
 * stderr how far each number is from the hardware limit: weight and KV bytes
 * read per decoded token over the measured copy bandwidth, and matmul FLOPs
 * per prefilled token over the tensor-core rate. --plot FILE writes an SVG.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "minke.h"
#include "engine/backend.h"
#include "engine/sample.h"
#include "quant/quant.h"
#ifdef MINKE_CUDA
#include "cuda/cu_backend.h"
#endif

#define EOS_ID 1   /* <｜end▁of▁sentence｜> (spec model.md §1) */
#define TC_BF16_TFLOPS 790.0   /* dense bf16 matrix rate measured on the lent H200 (device KINDS.md) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: minke bench (-m MODEL.gguf | --synthetic flash-q2|flash-q4|flash-mxfp4) [options]\n"
            "  --backend cpu|cuda   (default cuda when built with CUDA, else cpu)\n"
            "  --ctx-start N        first frontier (default 2048)\n"
            "  --ctx-max N          last frontier (default 32768)\n"
            "  --ctx-alloc N        session context (default ctx-max + gen-tokens + 1)\n"
            "  --layers N           with --synthetic: the first N of the 43 Flash layers (q4 and\n"
            "                       mxfp4 experts need fewer to fit one H200)\n"
            "  --step-incr N        frontier step when --step-mul is 1 (default 2048)\n"
            "  --step-mul X         multiply the frontier instead (default 1)\n"
            "  -n, --gen-tokens N   greedy tokens decoded at each frontier (default 128)\n"
            "  --tokens FILE.i32    token ids to walk (default: a fixed pseudo-random sequence)\n"
            "  --warmup N           untimed prefills of min(ctx-start, 4096) other tokens on a\n"
            "                       session freed after, before the walk (default 1): the first\n"
            "                       use of each kernel and matrix-product plan is paid there;\n"
            "                       with N > 0 each frontier's decode also starts with one\n"
            "                       untimed step, the state restored after it (CUDA makes the\n"
            "                       session's decode graph there; its time is printed)\n"
            "  --csv FILE           CSV output (default stdout)\n"
            "  --plot FILE.svg      plot prefill and decode tok/s against the frontier\n"
            "  --sims on|off        FP8/FP4 simulations (default on)\n"
            "  --act exact|q8       quantized-weight products: exact f32 activations (default)\n"
            "                       or ds4's int8 activation quantization (docs/numerics.md)\n"
            "  --gpus N|all         cuda: GPUs in one process (routed experts split by id); each\n"
            "                       frontier also times the decode without the all-reduces and\n"
            "                       prints compute and communication per step\n"
            "  --host-logits        decode as chat and serve did before minke_sample: every step's\n"
            "                       logits copied to the host and the argmax taken there (default:\n"
            "                       the device's argmax, only the token copied back)\n"
            "  --sample             also decode each frontier as chat and serve do, through the\n"
            "                       engine (minke_decode, minke_sample; the default sampler\n"
            "                       settings, seed 1) on a second session: its rate and a hash\n"
            "                       of its tokens (with --host-logits: every step's logits\n"
            "                       fetched and sampled on the host, the same tokens)\n"
            "  --temp T             the --sample decode's temperature (default 1; 0: greedy)\n"
            "  -t, --threads N      CPU threads\n");
}

/* ---- synthetic Flash-shape model (no file) ---- */
#ifdef MINKE_CUDA
static dsv4_tensor *tensor_for(dsv4_weights *w, int kind, int layer) {
    dsv4_layer *L = layer >= 0 ? &w->layers[layer] : NULL;
    switch (kind) {
    case DSV4_T_TOKEN_EMBD: return &w->token_embd;
    case DSV4_T_OUTPUT_HC_BASE: return &w->output_hc_base;
    case DSV4_T_OUTPUT_HC_FN: return &w->output_hc_fn;
    case DSV4_T_OUTPUT_HC_SCALE: return &w->output_hc_scale;
    case DSV4_T_OUTPUT_NORM: return &w->output_norm;
    case DSV4_T_OUTPUT: return &w->output;
    case DSV4_T_HC_ATTN_FN: return &L->hc_attn_fn;
    case DSV4_T_HC_ATTN_SCALE: return &L->hc_attn_scale;
    case DSV4_T_HC_ATTN_BASE: return &L->hc_attn_base;
    case DSV4_T_ATTN_NORM: return &L->attn_norm;
    case DSV4_T_ATTN_Q_A: return &L->q_a;
    case DSV4_T_ATTN_Q_A_NORM: return &L->q_a_norm;
    case DSV4_T_ATTN_Q_B: return &L->q_b;
    case DSV4_T_ATTN_KV: return &L->kv;
    case DSV4_T_ATTN_KV_A_NORM: return &L->kv_norm;
    case DSV4_T_ATTN_SINKS: return &L->sinks;
    case DSV4_T_ATTN_OUTPUT_A: return &L->out_a;
    case DSV4_T_ATTN_OUTPUT_B: return &L->out_b;
    case DSV4_T_ATTN_COMPRESSOR_APE: return &L->comp_ape;
    case DSV4_T_ATTN_COMPRESSOR_KV: return &L->comp_kv;
    case DSV4_T_ATTN_COMPRESSOR_GATE: return &L->comp_gate;
    case DSV4_T_ATTN_COMPRESSOR_NORM: return &L->comp_norm;
    case DSV4_T_INDEXER_ATTN_Q_B: return &L->idx_q_b;
    case DSV4_T_INDEXER_PROJ: return &L->idx_proj;
    case DSV4_T_INDEXER_COMPRESSOR_APE: return &L->idx_comp_ape;
    case DSV4_T_INDEXER_COMPRESSOR_KV: return &L->idx_comp_kv;
    case DSV4_T_INDEXER_COMPRESSOR_GATE: return &L->idx_comp_gate;
    case DSV4_T_INDEXER_COMPRESSOR_NORM: return &L->idx_comp_norm;
    case DSV4_T_HC_FFN_FN: return &L->hc_ffn_fn;
    case DSV4_T_HC_FFN_SCALE: return &L->hc_ffn_scale;
    case DSV4_T_HC_FFN_BASE: return &L->hc_ffn_base;
    case DSV4_T_FFN_NORM: return &L->ffn_norm;
    case DSV4_T_FFN_GATE_INP: return &L->gate_inp;
    case DSV4_T_EXP_PROBS_B: return &L->exp_bias;
    case DSV4_T_FFN_GATE_TID2EID: return &L->tid2eid;
    case DSV4_T_FFN_GATE_EXPS: return &L->gate_exps;
    case DSV4_T_FFN_UP_EXPS: return &L->up_exps;
    case DSV4_T_FFN_DOWN_EXPS: return &L->down_exps;
    case DSV4_T_FFN_GATE_SHEXP: return &L->gate_shexp;
    case DSV4_T_FFN_UP_SHEXP: return &L->up_shexp;
    case DSV4_T_FFN_DOWN_SHEXP: return &L->down_shexp;
    default: return NULL;
    }
}
#endif

static minke_model *synthetic_model(const char *which, int sims, int act, int layers, int gpus) {
#ifdef MINKE_CUDA
    int gu, dn;
    if (!strcmp(which, "flash-q2")) { gu = GGML_TYPE_IQ2_XXS; dn = GGML_TYPE_Q2_K; }
    else if (!strcmp(which, "flash-q4")) { gu = dn = GGML_TYPE_Q4_K; }
    else if (!strcmp(which, "flash-mxfp4")) { gu = dn = GGML_TYPE_MXFP4; }
    else { fprintf(stderr, "minke bench: unknown --synthetic '%s' (flash-q2, flash-q4, flash-mxfp4)\n", which); return NULL; }
    minke_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    minke_model_params_default(&m->params);
    m->params.backend = MINKE_BACKEND_CUDA;
    m->params.sims = sims;
    m->params.act = act;
    m->params.n_gpus = gpus;
    m->params.progress = 1;
    if (dsv4_config_preset(&m->w.cfg, "flash") != 0) { fprintf(stderr, "minke bench: no flash preset\n"); free(m); return NULL; }
    if (layers > 0 && (uint32_t)layers < m->w.cfg.n_layer) {
        /* the first N layers of the Flash schedule (q4 and MXFP4 experts do not fit one
         * H200 with all 43) */
        m->w.cfg.n_layer = (uint32_t)layers;
        if (m->w.cfg.n_hash_layer > m->w.cfg.n_layer) m->w.cfg.n_hash_layer = m->w.cfg.n_layer;
        dsv4_config_derive(&m->w.cfg);
    }
    dsv4_tensor_spec *specs = NULL;
    int n = dsv4_tensor_specs(&m->w.cfg, &specs);
    if (n < 0) { fprintf(stderr, "minke bench: tensor layout failed\n"); free(m); return NULL; }
    for (int i = 0; i < n; i++) {
        dsv4_tensor *t = tensor_for(&m->w, specs[i].kind, specs[i].layer);
        if (!t) continue;
        int type = specs[i].ds4_type;
        if (specs[i].role == DSV4_ROLE_EXPERT_GATEUP) type = gu;
        if (specs[i].role == DSV4_ROLE_EXPERT_DOWN) type = dn;
        t->name = strdup(specs[i].name);
        t->data = NULL;     /* the CUDA backend fills tensors without data on the device */
        t->type = type;
        t->n_dims = (int)specs[i].n_dims;
        uint64_t nel = 1;
        for (int k = 0; k < 4; k++) { t->ne[k] = k < 3 ? (int64_t)specs[i].ne[k] : 1; nel *= (uint64_t)t->ne[k]; }
        t->row_bytes = quant_row_bytes(type, t->ne[0]);
        t->nbytes = quant_nbytes(type, nel);
        m->w.total_bytes += t->nbytes;
    }
    free(specs);
    for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) m->w.layers[il].ratio = (int)m->w.cfg.compress_ratio[il];
    m->ops = minke_backend_cuda();
    snprintf(m->name, sizeof m->name, "synthetic %s", which);
    if (m->ops->model_init(m) != 0) {
        fprintf(stderr, "minke bench: %s\n", minke_last_error());
        free(m);
        return NULL;
    }
    return m;
#else
    (void)which; (void)sims; (void)act; (void)layers; (void)gpus;
    fprintf(stderr, "minke bench: --synthetic needs a CUDA build (make cuda)\n");
    return NULL;
#endif
}

/* ---- the limits ---- */
static uint64_t expert_bytes(const dsv4_tensor *t) { return t->ne[2] > 0 ? t->nbytes / (uint64_t)t->ne[2] : t->nbytes; }

/* Weight bytes one decoded token reads: every matrix once, one embedding row,
 * K of the routed experts. *routed (if not NULL) gets the routed experts' part. */
static double decode_weight_bytes(const dsv4_weights *w, double *routed) {
    const dsv4_config *c = &w->cfg;
    double b = (double)w->token_embd.row_bytes + w->output.nbytes + w->output_hc_fn.nbytes, r = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const dsv4_layer *L = &w->layers[il];
        const dsv4_tensor *all[] = {&L->hc_attn_fn, &L->q_a, &L->q_b, &L->kv, &L->out_a, &L->out_b, &L->comp_kv,
                                    &L->comp_gate, &L->idx_q_b, &L->idx_proj, &L->idx_comp_kv, &L->idx_comp_gate,
                                    &L->hc_ffn_fn, &L->gate_inp, &L->gate_shexp, &L->up_shexp, &L->down_shexp};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b += (double)all[i]->nbytes;
        r += (double)c->n_expert_used * (expert_bytes(&L->gate_exps) + expert_bytes(&L->up_exps) + expert_bytes(&L->down_exps));
    }
    if (routed) *routed = r;
    return b + r;
}
/* KV bytes one decoded token reads at context P: the window's f32 rows, and
 * compressed attention and indexer rows of crow / irow bytes (the cache's formats). */
static double decode_kv_bytes(const dsv4_config *c, int P, int crow, int irow) {
    double b = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        int r = (int)c->compress_ratio[il];
        double rows = P < (int)c->sliding_window ? (double)P : (double)c->sliding_window;
        if (r == 4) {
            double nI = P / 4;
            b += (nI < c->indexer_top_k ? nI : c->indexer_top_k) * crow;
            if (nI > c->indexer_top_k) b += nI * irow;
        } else if (r) b += (double)(P / r) * crow;
        b += rows * c->head_dim * 4.0;
    }
    return b;
}
/* Matmul FLOPs of one prefilled token at context P (2 per multiply-add). */
static double prefill_flops(const dsv4_weights *w, int P) {
    const dsv4_config *c = &w->cfg;
    double f = 2.0 * c->n_embd * c->n_vocab / 1e9 * 0;   /* LM head runs for the last token only */
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const dsv4_layer *L = &w->layers[il];
        const dsv4_tensor *all[] = {&L->hc_attn_fn, &L->q_a, &L->q_b, &L->kv, &L->out_a, &L->out_b, &L->comp_kv,
                                    &L->comp_gate, &L->idx_q_b, &L->idx_proj, &L->idx_comp_kv, &L->idx_comp_gate,
                                    &L->hc_ffn_fn, &L->gate_inp, &L->gate_shexp, &L->up_shexp, &L->down_shexp};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->name) f += 2.0 * (double)all[i]->ne[0] * (double)all[i]->ne[1];
        f += 2.0 * c->n_expert_used * 3.0 * c->n_embd * c->expert_ff;
        int r = (int)c->compress_ratio[il];
        double rows = P < (int)c->sliding_window ? (double)P : (double)c->sliding_window;
        if (r == 4) {
            double nI = P / 4;
            rows += nI < c->indexer_top_k ? nI : c->indexer_top_k;
            f += 2.0 * c->indexer_n_head * c->indexer_head_dim * nI;
        } else if (r) rows += P / r;
        f += 4.0 * c->n_head * c->head_dim * rows;
    }
    return f;
}

/* ---- SVG ---- */
typedef struct row { int ctx, ptok; double ptps; int gtok; double gtps; uint64_t kv; } row;

static void write_svg(const char *path, const row *r, int n, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "minke bench: cannot write %s\n", path); return; }
    double W = 720, H = 420, x0 = 70, y0 = 40, pw = 560, ph = 300;
    double cmax = 1, pmax = 1, gmax = 1;
    for (int i = 0; i < n; i++) {
        if (r[i].ctx > cmax) cmax = r[i].ctx;
        if (r[i].ptps > pmax) pmax = r[i].ptps;
        if (r[i].gtps > gmax) gmax = r[i].gtps;
    }
    pmax *= 1.1; gmax *= 1.1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n", x0, title);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", x0, y0, pw, ph);
    for (int k = 0; k <= 4; k++) {
        double y = y0 + ph - ph * k / 4.0;
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\" fill=\"#1f77b4\">%.0f</text>\n", x0 - 6, y + 4, pmax * k / 4);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">%.0f</text>\n", x0 + pw + 6, y + 4, gmax * k / 4);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", x0, x0 + pw, y, y);
    }
    const char *col[2] = {"#1f77b4", "#d62728"};
    for (int s = 0; s < 2; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col[s]);
        for (int i = 0; i < n; i++) {
            double v = s == 0 ? r[i].ptps / pmax : r[i].gtps / gmax;
            fprintf(f, "%.1f,%.1f ", x0 + pw * r[i].ctx / cmax, y0 + ph - ph * v);
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++) {
            double v = s == 0 ? r[i].ptps / pmax : r[i].gtps / gmax;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x0 + pw * r[i].ctx / cmax, y0 + ph - ph * v, col[s]);
        }
    }
    for (int i = 0; i < n; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%d</text>\n", x0 + pw * r[i].ctx / cmax, y0 + ph + 16, r[i].ctx);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">context tokens</text>\n", x0 + pw / 2, y0 + ph + 36);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">prefill tok/s (left)</text>\n", x0, H - 20, col[0]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">decode tok/s (right)</text>\n", x0 + 200, H - 20, col[1]);
    fprintf(f, "</svg>\n");
    fclose(f);
}

static int host_logits;     /* --host-logits */
static int sample_tokens;   /* --sample */
static float sample_temp = SAMPLER_DEFAULT_TEMPERATURE;     /* --temp */
static int temp_given;

/* --sample: n tokens decoded after the session's first F tokens as chat does
 * (one untimed step first: the graph capture); rate and FNV-1a hash of the
 * sampled tokens. host: minke_logits + sampler_sample (the logits fetched). */
static int engine_steps(minke_session *es, const int32_t *tokens, int F, int n, int V, int host, double *tps,
                        uint32_t *hash) {
    sampler_params sp = sampler_params_default();
    sp.seed = 1;
    sp.temperature = sample_temp;
    sampler *smp = sampler_new(&sp);
    if (!smp) return -1;
    minke_session_reset(es);
    int rc = -1;
    uint32_t h = 2166136261u;
    double t0 = 0;
    if (minke_prefill(es, tokens, F, NULL) != 0) goto out;
    for (int k = -1; k < n; k++) {
        if (k == 0) t0 = now_s();
        int32_t t;
        if (host) {
            const float *l = minke_logits(es);
            t = l ? sampler_sample(smp, l, V, 0) : -1;
        } else {
            t = minke_sample(es, smp, 0);
        }
        if (t < 0) goto out;
        if (k >= 0)
            for (int b = 0; b < 4; b++) { h ^= (uint32_t)t >> (8 * b) & 0xffu; h *= 16777619u; }
        if (minke_decode(es, t) != 0) goto out;
    }
    *tps = n / (now_s() - t0);
    *hash = h;
    rc = 0;
out:
    sampler_free(smp);
    return rc;
}

static int argmax_skip(const float *x, int n, int skip) {
    int b = skip == 0 ? 1 : 0;
    for (int i = 0; i < n; i++) if (i != skip && x[i] > x[b]) b = i;
    return b;
}

/* n greedy steps from token tok at position pos, EOS never chosen: the
 * seconds they took, or -1 with minke_last_error(). */
static double greedy_steps(minke_model *m, void *bs, int is_cuda, int32_t tok, int pos, int n, float *logits, int V) {
    double t0 = now_s();
    if (host_logits) is_cuda = 0;     /* the old engine path: ops->forward with the last logits */
    for (int k = 0; k < n; k++) {
        int32_t next;
#ifdef MINKE_CUDA
        if (is_cuda) { if (cu_bench_greedy(m, bs, tok, pos + k, EOS_ID, &next) != 0) return -1; }
        else
#endif
        {
            if (m->ops->forward(m, bs, &tok, 1, pos + k, NULL, logits) != 0) return -1;
            next = argmax_skip(logits, V, EOS_ID);
        }
        tok = next;
    }
    (void)is_cuda;
    return now_s() - t0;
}

/* n pseudo-random token ids in [2, V) from seed (xorshift64) */
static void pseudo_tokens(int32_t *t, int n, uint64_t seed, int V) {
    uint64_t x = seed;
    for (int i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        t[i] = (int32_t)(2 + x % (uint64_t)(V - 2));
    }
}

/* Warm-up: a process's first prefill also loads kernels and makes the
 * products' plans; those costs belong to start-up, not to prefill speed (as
 * llama-bench's warm-up run). runs prefills of nw other tokens than the
 * walk's, each on a session of its own freed after, so nothing of them is
 * reused by the timed work. 0, or -1 with the error printed. */
static int warm_up(minke_model *m, int nw, int runs, int V, float *logits) {
    int32_t *wt = malloc(sizeof(int32_t) * (size_t)nw);
    if (!wt) { fprintf(stderr, "minke bench: warm-up: out of memory\n"); return -1; }
    pseudo_tokens(wt, nw, 0x9E3779B97F4A7C15ull, V);
    for (int k = 0; k < runs; k++) {
        void *ws = m->ops->session_alloc(m, nw + 1);
        double t0 = now_s();
        if (!ws || m->ops->forward(m, ws, wt, nw, 0, NULL, logits) != 0) {
            fprintf(stderr, "minke bench: warm-up prefill failed: %s\n", minke_last_error());
            if (ws) m->ops->session_free(m, ws);
            free(wt);
            return -1;
        }
        fprintf(stderr, "minke bench: warm-up prefill %d of %d tokens: %.1f tok/s (untimed)\n", k + 1, nw,
                nw / (now_s() - t0));
        m->ops->session_free(m, ws);
    }
    free(wt);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    minke_model_params mp;
    minke_model_params_default(&mp);
#ifdef MINKE_CUDA
    mp.backend = MINKE_BACKEND_CUDA;
#endif
    mp.progress = 1;
    const char *synthetic = NULL, *csv_path = NULL, *plot = NULL, *tok_path = NULL;
    int ctx_start = 2048, ctx_max = 32768, ctx_alloc = 0, step_incr = 2048, gen = 128, syn_layers = 0, warmup = 1;
    double step_mul = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "minke bench: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); mp.path = v; }
        else if (!strcmp(a, "--synthetic")) { NEED(); synthetic = v; }
        else if (!strcmp(a, "--backend")) {
            NEED();
            if (!strcmp(v, "cpu")) mp.backend = MINKE_BACKEND_CPU;
            else if (!strcmp(v, "cuda")) mp.backend = MINKE_BACKEND_CUDA;
            else { fprintf(stderr, "minke bench: unknown backend '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--ctx-start")) { NEED(); ctx_start = atoi(v); }
        else if (!strcmp(a, "--ctx-max")) { NEED(); ctx_max = atoi(v); }
        else if (!strcmp(a, "--ctx-alloc")) { NEED(); ctx_alloc = atoi(v); }
        else if (!strcmp(a, "--layers")) {
            NEED();
            syn_layers = atoi(v);
            if (syn_layers < 1) { fprintf(stderr, "minke bench: --layers takes a positive count\n"); return 2; }
        }
        else if (!strcmp(a, "--step-incr")) { NEED(); step_incr = atoi(v); }
        else if (!strcmp(a, "--step-mul")) { NEED(); step_mul = atof(v); }
        else if (!strcmp(a, "-n") || !strcmp(a, "--gen-tokens") || !strcmp(a, "--tokens-gen")) { NEED(); gen = atoi(v); }
        else if (!strcmp(a, "--tokens")) { NEED(); tok_path = v; }
        else if (!strcmp(a, "--warmup")) { NEED(); warmup = atoi(v); }
        else if (!strcmp(a, "--csv")) { NEED(); csv_path = v; }
        else if (!strcmp(a, "--plot")) { NEED(); plot = v; }
        else if (!strcmp(a, "--sims")) { NEED(); mp.sims = strcmp(v, "off") != 0; }
        else if (!strcmp(a, "--act")) {
            NEED();
            if (!strcmp(v, "exact")) mp.act = MINKE_ACT_EXACT;
            else if (!strcmp(v, "q8")) mp.act = MINKE_ACT_Q8;
            else { fprintf(stderr, "minke bench: --act takes exact or q8, not '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--host-logits")) host_logits = 1;
        else if (!strcmp(a, "--sample")) sample_tokens = 1;
        else if (!strcmp(a, "--temp")) {
            NEED();
            char *end = NULL;
            sample_temp = strtof(v, &end);
            if (!end || *end || !(sample_temp >= 0.0f)) { fprintf(stderr, "minke bench: --temp needs a number >= 0\n"); return 2; }
            temp_given = 1;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED(); mp.n_threads = atoi(v); }
        else if (!strcmp(a, "--gpus")) {
            NEED();
            if (cli_parse_gpus(v, &mp.n_gpus)) { fprintf(stderr, "minke bench: --gpus takes a number 1..64 or all, not '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "minke bench: unknown option '%s'\n", a); usage(stderr); return 2; }
#undef NEED
    }
    if (!synthetic && !mp.path) { usage(stderr); return 2; }
    if (ctx_start < 1 || ctx_max < ctx_start || gen < 0 || step_incr < 1 || step_mul < 1 || warmup < 0) {
        fprintf(stderr, "minke bench: need 1 <= ctx-start <= ctx-max, gen-tokens >= 0, step-incr >= 1, step-mul >= 1, "
                "warmup >= 0\n");
        return 2;
    }
    if (temp_given && !sample_tokens) { fprintf(stderr, "minke bench: --temp applies to --sample only\n"); return 2; }
    if (!ctx_alloc) ctx_alloc = ctx_max + gen + 1;

    double t_load = now_s();
    minke_model *m = synthetic ? synthetic_model(synthetic, mp.sims, mp.act, syn_layers, mp.n_gpus) : minke_model_open(&mp);
    if (!m) { if (!synthetic) fprintf(stderr, "minke bench: %s\n", minke_last_error()); return 1; }
    t_load = now_s() - t_load;
    const dsv4_config *c = &m->w.cfg;
    int V = (int)c->n_vocab;
    int is_cuda = !strcmp(m->ops->name, "cuda");
    (void)is_cuda;

    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)ctx_max);
    if (!tokens) { fprintf(stderr, "minke bench: out of memory\n"); return 1; }
    if (tok_path) {
        FILE *tf = fopen(tok_path, "rb");
        size_t got = tf ? fread(tokens, 4, (size_t)ctx_max, tf) : 0;
        if (tf) fclose(tf);
        if (got < (size_t)ctx_max) { fprintf(stderr, "minke bench: %s holds fewer than --ctx-max = %d tokens\n", tok_path, ctx_max); return 1; }
        for (int i = 0; i < ctx_max; i++)
            if (tokens[i] < 0 || tokens[i] >= V) { fprintf(stderr, "minke bench: token %d out of range\n", tokens[i]); return 1; }
    } else {
        pseudo_tokens(tokens, ctx_max, 0x2545F4914F6CDD1Dull, V);
    }

    char dev[300] = "cpu";
    double bw = 0;
    int ngpu = 1, comm = 0;
#ifdef MINKE_CUDA
    if (is_cuda) {
        char one[256];
        cu_device_info(one, sizeof one, &bw);
        ngpu = cu_model_gpus(m);
        comm = cu_model_has_comm(m);
        if (ngpu > 1) snprintf(dev, sizeof dev, "%d x %s", ngpu, one);
        else snprintf(dev, sizeof dev, "%s", one);
    }
#endif
    (void)comm;     /* the collectives exist in CUDA builds only */
    /* With several GPUs (experts split by id) each GPU reads the replicated
     * weights and its share of the routed experts: the limit is that per GPU. */
    double routed = 0, wtotal = decode_weight_bytes(&m->w, &routed);
    double wbytes = wtotal - routed + routed / ngpu;
    fprintf(stderr, "minke bench: %s on %s (%s), weights %.2f GiB loaded in %.1f s; decode reads %.2f GB of weights per token",
            m->name[0] ? m->name : mp.path, m->ops->name, dev, m->w.total_bytes / 1073741824.0, t_load, wtotal / 1e9);
    if (ngpu > 1) fprintf(stderr, " (%.2f GB on each GPU)", wbytes / 1e9);
    if (bw > 0) fprintf(stderr, "; measured copy bandwidth %.0f GB/s -> decode limit %.0f tok/s", bw, bw * 1e9 / wbytes);
    fprintf(stderr, "\n");

    float *logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) { fprintf(stderr, "minke bench: out of memory\n"); return 1; }
    if (warmup > 0 && warm_up(m, ctx_start < 4096 ? ctx_start : 4096, warmup, V, logits) != 0) return 1;

    void *bs = m->ops->session_alloc(m, ctx_alloc);
    if (!bs) { fprintf(stderr, "minke bench: %s\n", minke_last_error()); return 1; }
    /* the KV cache's rows: the device's formats (CUDA), f32 on the CPU; a
     * token of context adds 1 / ratio of a row to each compressing layer */
    int crow = (int)c->head_dim * 4, irow = (int)c->indexer_head_dim * 4;
    const char *kvfmt = "f32 rows";
    char chunk_note[64] = "";
#ifdef MINKE_CUDA
    if (is_cuda) {
        cu_kv_row_bytes(m, bs, &crow, &irow, &kvfmt);
        snprintf(chunk_note, sizeof chunk_note, "; prompts in chunks of %d tokens", cu_session_chunk(m, bs));
    }
#endif
    double kvtok = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        int r = (int)c->compress_ratio[il];
        if (r) kvtok += (double)crow / r;
        if (r == 4) kvtok += (double)irow / 4;
    }
    fprintf(stderr, "minke bench: KV cache %.0f bytes a token of context (%s: %d bytes an attention row, %d an "
            "indexer row); the session holds %.1f MB for %d tokens%s\n", kvtok, kvfmt, crow, irow,
            m->ops->session_bytes(m, bs) / 1e6, ctx_alloc, chunk_note);
    minke_kv_layer_layout *lay = malloc(sizeof(*lay) * c->n_layer);
    FILE *out = csv_path ? fopen(csv_path, "w") : stdout;
    if (!out || !lay) { fprintf(stderr, "minke bench: cannot open output\n"); return 1; }
    fprintf(out, "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes\n");
    fflush(out);
    row rows[256];
    int nrows = 0, prev = 0, rc = 0;
    minke_session *es = NULL;     /* --sample */
    if (sample_tokens && gen > 0 && !(es = minke_session_create(m, ctx_alloc))) {
        fprintf(stderr, "minke bench: --sample: %s\n", minke_last_error());
        return 1;
    }
    for (int F = ctx_start; nrows < 256; ) {
        int np = F - prev;
        double t0 = now_s();
        if (m->ops->forward(m, bs, tokens + prev, np, prev, NULL, logits) != 0) {
            fprintf(stderr, "minke bench: prefill failed: %s\n", minke_last_error()); rc = 1; break;
        }
        double tp = now_s() - t0;
        uint64_t kvb = minke_kv_layout(c, F, lay);
        void *snap = malloc(kvb ? kvb : 1);
        if (!snap || m->ops->state_save(m, bs, F, snap) != 0) { fprintf(stderr, "minke bench: snapshot failed\n"); rc = 1; break; }
        int32_t tok = argmax_skip(logits, V, EOS_ID);
        double tg = 0, tfirst = -1;
        int gen_ok = 1;
        /* the decode rate is the steady state: the session's first decode step
         * also captures its CUDA graph (20-27 ms on the H200, once a session), as the first
         * prefill pays the kernels' loading (warm_up); that step runs untimed
         * first (--warmup > 0) and the state is restored, so every frontier's
         * steps are timed alike (before, the first frontier's included it) */
        if (gen > 0 && warmup > 0) {
            tfirst = greedy_steps(m, bs, is_cuda, tok, F, 1, logits, V);
            if (tfirst < 0 || m->ops->state_load(m, bs, F, snap) != 0) {
                fprintf(stderr, "minke bench: untimed first decode step failed: %s\n", minke_last_error()); rc = 1; free(snap); break;
            }
        }
        if (gen > 0) gen_ok = (tg = greedy_steps(m, bs, is_cuda, tok, F, gen, logits, V)) >= 0;
        if (!gen_ok) { fprintf(stderr, "minke bench: decode failed: %s\n", minke_last_error()); rc = 1; free(snap); break; }
        if (m->ops->state_load(m, bs, F, snap) != 0) { fprintf(stderr, "minke bench: restore failed: %s\n", minke_last_error()); rc = 1; free(snap); break; }
        /* several GPUs: the same steps without the all-reduces give the compute
         * alone; the rest of the step is communication (and waiting for the
         * slower GPU). Its tokens are wrong, so the state is restored after. */
        double tcomp = 0;
#ifdef MINKE_CUDA
        if (comm && gen > 0) {
            cu_bench_set_comm(m, bs, 0);
            gen_ok = (tcomp = greedy_steps(m, bs, is_cuda, tok, F, gen, logits, V)) >= 0;
            cu_bench_set_comm(m, bs, 1);
            if (!gen_ok || m->ops->state_load(m, bs, F, snap) != 0) {
                fprintf(stderr, "minke bench: decode without all-reduces failed: %s\n", minke_last_error()); rc = 1; free(snap); break;
            }
        }
#endif
        free(snap);
        double tsam = 0;
        uint32_t hsam = 0;
        if (es && engine_steps(es, tokens, F, gen, V, host_logits, &tsam, &hsam) != 0) {
            fprintf(stderr, "minke bench: --sample: %s\n", minke_last_error()); rc = 1; break;
        }
        row *r = &rows[nrows++];
        r->ctx = F; r->ptok = np; r->ptps = np / tp; r->gtok = gen; r->gtps = gen > 0 ? gen / tg : 0; r->kv = kvb;
        fprintf(out, "%d,%d,%.2f,%d,%.2f,%llu\n", F, np, r->ptps, gen, r->gtps, (unsigned long long)kvb);
        fflush(out);
        double pf = prefill_flops(&m->w, F);
        double kvr = decode_kv_bytes(c, F, crow, irow);
        fprintf(stderr, "  ctx %6d: prefill %8.1f tok/s = %5.1f%% of %.0f TFLOP/s (%.1f GFLOP/token)", F, r->ptps,
                100.0 * r->ptps * pf / (TC_BF16_TFLOPS * 1e12), TC_BF16_TFLOPS, pf / 1e9);
        if (gen > 0) {
            fprintf(stderr, "; decode %7.2f tok/s%s", r->gtps, host_logits && is_cuda ? " (logits to the host)" : "");
            if (bw > 0)
                fprintf(stderr, " = %5.1f%% of the bandwidth limit (%.2f GB weights + %.3f GB KV per token at %.0f GB/s)",
                        100.0 * r->gtps * (wbytes + kvr) / (bw * 1e9), wbytes / 1e9, kvr / 1e9, bw);
            if (tfirst >= 0) fprintf(stderr, "; untimed first step %.1f ms", tfirst * 1e3);
            if (es) fprintf(stderr, "; sampled through the engine%s at temperature %g %.2f tok/s (tokens hash %08x)",
                            host_logits ? " from host logits" : "", sample_temp, tsam, hsam);
            if (tcomp > 0) {
                double step = tg / gen * 1e3, cmp = tcomp / gen * 1e3;
                fprintf(stderr, "; per step %.3f ms = compute %.3f ms + communication %.3f ms (%.1f%%)", step, cmp,
                        step - cmp, 100.0 * (step - cmp) / step);
            }
        }
        fprintf(stderr, "\n");
        prev = F;
        if (F >= ctx_max) break;
        int nx = step_mul > 1 ? (int)ceil(F * step_mul) : F + step_incr;
        if (nx <= F) nx = F + 1;
        F = nx > ctx_max ? ctx_max : nx;
    }
    if (plot && nrows) {
        char title[512];
        snprintf(title, sizeof title, "minke bench: %.200s, %.200s", m->name[0] ? m->name : "model", dev);
        write_svg(plot, rows, nrows, title);
    }
    if (out != stdout) fclose(out);
    m->ops->session_free(m, bs);
    minke_session_free(es);
    free(lay); free(logits); free(tokens);
    if (synthetic) { m->ops->model_free(m); free(m); }
    else minke_model_close(m);
    return rc;
}
