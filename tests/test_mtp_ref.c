/* test_mtp_ref.c: the MTP block's numbers against an independent, naive
 * reference written here from spec model.md §6-§13 (double accumulation,
 * plain loops over the F32 tensors of the files, nothing from src/cpu).
 *
 * A tiny model with F32 weights and its MTP file (mkmodel --dense f32
 * --experts f32) runs with simulations off and f32 activations. The main
 * model's final HC states come from the "blk.<last>.out" tap; the reference
 * replays the MTP cache rows of every processed position and the draft steps,
 * and its logits must match the engine's "mtp.logits" tap, for both pairings.
 */
#include "engine_test_util.h"
#include "gguf/gguf.h"
#include "model/config.h"

#define MAXPOS 64

static dsv4_config C;
static const gguf_file *G_main, *G_mtp;

static const float *tensor(const gguf_file *f, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t || t->type != 0 /* F32 */) { fprintf(stderr, "reference: %s missing or not F32\n", name); exit(1); }
    return t->data;
}
static const float *mtpw(const char *name) {
    char n[128];
    snprintf(n, sizeof n, "mtp.0.%s", name);
    return tensor(G_mtp, n);
}

/* y[r] = W[r] . x, rows of length cols */
static void mv(const float *W, int rows, int cols, const float *x, float *y) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = (float)s;
    }
}
static void rmsn(float *y, const float *x, const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    double r = 1.0 / sqrt(s / n + C.rms_eps);
    for (int i = 0; i < n; i++) y[i] = (float)(x[i] * r * (w ? w[i] : 1.0));
}
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static void rope(float *x, int hd, int pos, int inverse) {
    int nr = (int)C.rope_dim, off = hd - nr;
    for (int k = 0; k < nr / 2; k++) {
        double th = pos * pow(C.rope_freq_base, -2.0 * k / nr) * (inverse ? -1 : 1);
        double a = x[off + 2 * k], b = x[off + 2 * k + 1];
        x[off + 2 * k] = (float)(a * cos(th) - b * sin(th));
        x[off + 2 * k + 1] = (float)(a * sin(th) + b * cos(th));
    }
}

/* HC pre (§6.7, §6.8): u, post, comb from X with (fn, scale, base) */
static void hc_pre(const float *X, const char *which, float *u, double *post, double *comb) {
    int D = (int)C.n_embd, n = (int)C.n_hc, hcD = (int)C.hc_dim, nm = (int)C.hc_mix;
    char nf[64], ns[64], nb[64];
    snprintf(nf, sizeof nf, "hc_%s_fn.weight", which);
    snprintf(ns, sizeof ns, "hc_%s_scale.weight", which);
    snprintf(nb, sizeof nb, "hc_%s_base.weight", which);
    const float *fn = mtpw(nf), *sc = mtpw(ns), *base = mtpw(nb);
    float *Xn = malloc(sizeof(float) * hcD), mix[64];
    rmsn(Xn, X, NULL, hcD);
    mv(fn, nm, hcD, Xn, mix);
    double pre[8];
    for (int i = 0; i < n; i++) {
        pre[i] = sigm(mix[i] * sc[0] + base[i]) + C.hc_eps;
        post[i] = 2 * sigm(mix[n + i] * sc[1] + base[n + i]);
    }
    for (int r = 0; r < n; r++) {
        double mx = -1e30;
        for (int c = 0; c < n; c++) {
            comb[r * n + c] = mix[2 * n + r * n + c] * sc[2] + base[2 * n + r * n + c];
            if (comb[r * n + c] > mx) mx = comb[r * n + c];
        }
        double s = 0;
        for (int c = 0; c < n; c++) s += comb[r * n + c] = exp(comb[r * n + c] - mx);
        for (int c = 0; c < n; c++) comb[r * n + c] = comb[r * n + c] / s + C.hc_eps;
    }
    for (int it = 0; it < (int)C.hc_sinkhorn_iters; it++) {
        if (it > 0)
            for (int r = 0; r < n; r++) {
                double s = 0;
                for (int c = 0; c < n; c++) s += comb[r * n + c];
                for (int c = 0; c < n; c++) comb[r * n + c] /= s + C.hc_eps;
            }
        for (int c = 0; c < n; c++) {
            double s = 0;
            for (int r = 0; r < n; r++) s += comb[r * n + c];
            for (int r = 0; r < n; r++) comb[r * n + c] /= s + C.hc_eps;
        }
    }
    for (int d = 0; d < D; d++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += pre[i] * X[i * D + d];
        u[d] = (float)s;
    }
    free(Xn);
}
static void hc_post(float *X, const float *f, const double *post, const double *comb) {
    int D = (int)C.n_embd, n = (int)C.n_hc;
    float *Y = malloc(sizeof(float) * C.hc_dim);
    for (int c = 0; c < n; c++)
        for (int d = 0; d < D; d++) {
            double s = post[c] * f[d];
            for (int r = 0; r < n; r++) s += comb[r * n + c] * X[r * D + d];
            Y[c * D + d] = (float)s;
        }
    memcpy(X, Y, sizeof(float) * C.hc_dim);
    free(Y);
}

static float kvrows[MAXPOS][1024];

static float swiglu(float g, float u, float lim) {
    if (g > lim) g = lim;
    if (u > lim) u = lim;
    if (u < -lim) u = -lim;
    return (float)(g * sigm(g) * u);
}

/* One MTP step (§13.1); V (hc_dim) out, logits (n_vocab) out when non-NULL. */
static void ref_step(int32_t tok, const float *Hs, int p, float *V, float *logits) {
    int D = (int)C.n_embd, n = (int)C.n_hc, Dh = (int)C.head_dim, H = (int)C.n_head, W = (int)C.sliding_window;
    int qr = (int)C.q_lora_rank, E = (int)C.n_expert, K = (int)C.n_expert_used, F = (int)C.expert_ff;
    float lim = C.swiglu_clamp[C.n_layer - 1];
    float *e = malloc(sizeof(float) * D), *ep = malloc(sizeof(float) * D), *h = malloc(sizeof(float) * D);
    float *hp = malloc(sizeof(float) * D), *u = malloc(sizeof(float) * D), *x = malloc(sizeof(float) * D);
    float *ql = malloc(sizeof(float) * qr), *q = malloc(sizeof(float) * H * Dh), *o = malloc(sizeof(float) * H * Dh);
    float *z = malloc(sizeof(float) * C.o_dim), *a = malloc(sizeof(float) * D), *f = calloc(D, sizeof(float));
    double post[8], comb[64];
    rmsn(e, tensor(G_main, "token_embd.weight") + (size_t)tok * D, mtpw("enorm.weight"), D);
    mv(mtpw("e_proj.weight"), D, D, e, ep);
    for (int i = 0; i < n; i++) {
        rmsn(h, Hs + i * D, mtpw("hnorm.weight"), D);
        mv(mtpw("h_proj.weight"), D, D, h, hp);
        for (int d = 0; d < D; d++) V[i * D + d] = ep[d] + hp[d];
    }
    /* attention half: sliding window only, main RoPE */
    hc_pre(V, "attn", u, post, comb);
    rmsn(x, u, mtpw("attn_norm.weight"), D);
    mv(mtpw("attn_q_a.weight"), qr, D, x, ql);
    rmsn(ql, ql, mtpw("attn_q_a_norm.weight"), qr);
    mv(mtpw("attn_q_b.weight"), H * Dh, qr, ql, q);
    for (int hh = 0; hh < H; hh++) { rmsn(q + hh * Dh, q + hh * Dh, NULL, Dh); rope(q + hh * Dh, Dh, p, 0); }
    float *kv = kvrows[p];
    mv(mtpw("attn_kv.weight"), Dh, D, x, kv);
    rmsn(kv, kv, mtpw("attn_kv_a_norm.weight"), Dh);
    rope(kv, Dh, p, 0);
    const float *sinks = mtpw("attn_sinks.weight");
    int lo = p - W + 1 < 0 ? 0 : p - W + 1;
    for (int hh = 0; hh < H; hh++) {
        double l[MAXPOS], mx = sinks[hh];
        for (int r = lo; r <= p; r++) {
            double s = 0;
            for (int d = 0; d < Dh; d++) s += (double)q[hh * Dh + d] * kvrows[r][d];
            l[r] = s / sqrt((double)Dh);
            if (l[r] > mx) mx = l[r];
        }
        double den = exp(sinks[hh] - mx);
        for (int r = lo; r <= p; r++) den += exp(l[r] - mx);
        for (int d = 0; d < Dh; d++) {
            double s = 0;
            for (int r = lo; r <= p; r++) s += exp(l[r] - mx) * kvrows[r][d];
            o[hh * Dh + d] = (float)(s / den);
        }
        rope(o + hh * Dh, Dh, p, 1);
    }
    int G = (int)C.o_groups, ol = (int)C.o_lora_rank, gin = (int)C.o_group_in;
    const float *oa = mtpw("attn_output_a.weight");
    for (int g = 0; g < G; g++) mv(oa + (size_t)g * ol * gin, ol, gin, o + g * gin, z + g * ol);
    mv(mtpw("attn_output_b.weight"), D, (int)C.o_dim, z, a);
    hc_post(V, a, post, comb);
    /* FFN half: top-k routing with exp_probs_b, shared expert */
    hc_pre(V, "ffn", u, post, comb);
    rmsn(x, u, mtpw("ffn_norm.weight"), D);
    float lg[512], g1[4096], u1[4096], dn[4096];
    double s[512], biased[512];
    mv(mtpw("ffn_gate_inp.weight"), E, D, x, lg);
    const float *bias = mtpw("exp_probs_b.bias");
    for (int i = 0; i < E; i++) {
        double sp = lg[i] > 20 ? lg[i] : lg[i] < -20 ? exp(lg[i]) : log1p(exp(lg[i]));
        s[i] = sqrt(sp);
        biased[i] = s[i] + bias[i];
    }
    int sel[16];
    double sum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < E; i++) {
            int used = 0;
            for (int j = 0; j < k; j++) used |= sel[j] == i;
            if (!used && (best < 0 || biased[i] > biased[best])) best = i;
        }
        sel[k] = best;
        sum += s[best];
    }
    if (sum < 6.103515625e-5) sum = 6.103515625e-5;
    const float *ge = mtpw("ffn_gate_exps.weight"), *ue = mtpw("ffn_up_exps.weight"), *de = mtpw("ffn_down_exps.weight");
    for (int k = 0; k < K; k++) {
        int ex = sel[k];
        double w = s[ex] / sum * C.expert_weights_scale;
        mv(ge + (size_t)ex * F * D, F, D, x, g1);
        mv(ue + (size_t)ex * F * D, F, D, x, u1);
        for (int j = 0; j < F; j++) g1[j] = (float)(swiglu(g1[j], u1[j], lim) * w);
        mv(de + (size_t)ex * D * F, D, F, g1, dn);
        for (int d = 0; d < D; d++) f[d] += dn[d];
    }
    int SF = (int)C.shexp_ff;
    mv(mtpw("ffn_gate_shexp.weight"), SF, D, x, g1);
    mv(mtpw("ffn_up_shexp.weight"), SF, D, x, u1);
    for (int j = 0; j < SF; j++) g1[j] = swiglu(g1[j], u1[j], lim);
    mv(mtpw("ffn_down_shexp.weight"), D, SF, g1, dn);
    for (int d = 0; d < D; d++) f[d] += dn[d];
    hc_post(V, f, post, comb);
    if (logits) {
        /* MTP head: own HC head and norm, the main output matrix */
        float *Vn = malloc(sizeof(float) * C.hc_dim), mix[8], y[4096];
        rmsn(Vn, V, NULL, (int)C.hc_dim);
        mv(mtpw("hc_head_fn.weight"), n, (int)C.hc_dim, Vn, mix);
        const float *hsc = mtpw("hc_head_scale.weight"), *hb = mtpw("hc_head_base.weight");
        for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int i = 0; i < n; i++) acc += (sigm(mix[i] * hsc[0] + hb[i]) + C.hc_eps) * V[i * D + d];
            y[d] = (float)acc;
        }
        rmsn(y, y, mtpw("norm.weight"), D);
        mv(tensor(G_main, "output.weight"), (int)C.n_vocab, D, y, logits);
        free(Vn);
    }
    free(e); free(ep); free(h); free(hp); free(u); free(x); free(ql); free(q); free(o); free(z); free(a); free(f);
}

/* ---- engine side ---- */
typedef struct taps {
    char last_out[32];
    float *H;          /* [MAXPOS][hc_dim] */
    float *mtp;        /* up to 8 tapped MTP logit vectors */
    int n_mtp, mtp_pos[8];
} taps;

static void on_tap(void *user, const char *name, int pos, const float *data, int64_t n) {
    taps *t = user;
    if (!strcmp(name, t->last_out) && pos < MAXPOS) memcpy(t->H + (size_t)pos * n, data, sizeof(float) * n);
    if (!strcmp(name, "mtp.logits") && t->n_mtp < 8) {
        memcpy(t->mtp + (size_t)t->n_mtp * n, data, sizeof(float) * n);
        t->mtp_pos[t->n_mtp++] = pos;
    }
}

static float rel_diff(const float *a, const float *b, int n) {
    float mx = tu_maxabs(b, (size_t)n);
    return tu_maxdiff(a, b, (size_t)n) / (mx > 0 ? mx : 1);
}

static void check_pairing(const char *main_path, const char *mtp_path, int pairing) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = main_path;
    p.mtp_path = mtp_path;
    p.mtp_pairing = pairing;
    p.sims = 0;
    p.act = MINKE_ACT_EXACT;
    p.n_threads = 2;
    minke_model *m = minke_model_open(&p);
    CHECK(m != NULL, "open: %s", minke_last_error());
    if (!m) return;
    int V = (int)C.n_vocab, hcD = (int)C.hc_dim;
    taps t = {{0}, calloc((size_t)MAXPOS * hcD, sizeof(float)), calloc((size_t)8 * V, sizeof(float)), 0, {0}};
    snprintf(t.last_out, sizeof t.last_out, "blk.%u.out", C.n_layer - 1);
    minke_set_tap(m, on_tap, &t);
    const int P = 13;   /* past the window, so the MTP ring wraps */
    int32_t tok[P];
    test_rand_seed(31 + pairing);
    for (int i = 0; i < P; i++) tok[i] = (int32_t)(test_rand() % (uint32_t)V);
    minke_session *s = minke_session_create(m, 48);
    minke_session_set_chunk(s, 5);
    CHECK(minke_prefill(s, tok, P, NULL) == 0, "prefill: %s", minke_last_error());
    int32_t next = tu_argmax(minke_logits(s), V);

    /* the reference replays the cache rows of positions 0..P-1 */
    float *Vr = malloc(sizeof(float) * hcD), *Hz = calloc(hcD, sizeof(float));
    float *L0 = malloc(sizeof(float) * V), *L1 = malloc(sizeof(float) * V);
    for (int q = 0; q < P; q++) {
        const float *Hs = pairing == MINKE_MTP_PAIR_SAME ? t.H + (size_t)q * hcD : q ? t.H + (size_t)(q - 1) * hcD : Hz;
        ref_step(tok[q], Hs, q, Vr, NULL);
    }
    int32_t d[4];
    if (pairing == MINKE_MTP_PAIR_PREV) {
        /* drafts: (next, H_{P-1}, P) then (d0, V, P+1) */
        t.n_mtp = 0;
        int nd = minke_mtp_draft(s, next, 2, d);
        CHECK(nd == 2 && t.n_mtp == 2, "draft: %d drafts, %d taps", nd, t.n_mtp);
        ref_step(next, t.H + (size_t)(P - 1) * hcD, P, Vr, L0);
        float e0 = rel_diff(t.mtp, L0, V);
        ref_step(d[0], Vr, P + 1, Vr, L1);
        float e1 = rel_diff(t.mtp + V, L1, V);
        printf("  pairing PREV: first draft logits rel diff %.2e, second %.2e (drafts %d %d, reference %d %d)\n", e0,
               e1, d[0], d[1], tu_argmax(L0, V), tu_argmax(L1, V));
        CHECK(e0 < 1e-4 && e1 < 1e-4, "MTP logits differ from the reference (%.3g, %.3g)", e0, e1);
        CHECK(d[0] == tu_argmax(L0, V), "first draft %d, reference argmax %d", d[0], tu_argmax(L0, V));
    } else {
        /* ds4: the step of the last token (t_{P-1}, H_{P-1}, P-1) guesses the next token */
        t.n_mtp = 0;
        minke_mtp_draft(s, next, 2, d);
        CHECK(t.n_mtp >= 1 && t.mtp_pos[0] == P - 1, "SAME: first step not at P-1");
        ref_step(tok[P - 1], t.H + (size_t)(P - 1) * hcD, P - 1, Vr, L0);
        float e0 = rel_diff(t.mtp, L0, V);
        printf("  pairing SAME: guess logits rel diff %.2e (guess %d, reference %d, next %d)\n", e0,
               tu_argmax(t.mtp, V), tu_argmax(L0, V), next);
        CHECK(e0 < 1e-4, "SAME MTP logits differ from the reference (%.3g)", e0);
    }
    minke_set_tap(m, NULL, NULL);
    minke_session_free(s);
    minke_model_close(m);
    free(Vr); free(Hz); free(L0); free(L1); free(t.H); free(t.mtp);
}

int main(void) {
    char main_path[600], mtp_path[600], cmd[2000], err[256];
    test_path(main_path, sizeof main_path, "ref.gguf");
    test_path(mtp_path, sizeof mtp_path, "ref_mtp.gguf");
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny --dense f32 --experts f32 -o '%s' --mtp-out '%s' --seed 12 "
             "--no-progress -t 2 >/dev/null 2>&1", tu_bin(), main_path, mtp_path);
    if (system(cmd) != 0) { fprintf(stderr, "cannot build the test model: %s\n", cmd); return 1; }
    gguf_file *fm = gguf_open(main_path, err, sizeof err), *ft = gguf_open(mtp_path, err, sizeof err);
    if (!fm || !ft || dsv4_config_from_gguf(fm, &C, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
    G_main = fm;
    G_mtp = ft;
    if (C.head_dim > 1024 || C.n_hc > 8 || C.n_expert > 512 || C.expert_ff > 4096 || C.n_embd > 4096) {
        fprintf(stderr, "tiny preset changed beyond the reference's buffers\n");
        return 1;
    }
    check_pairing(main_path, mtp_path, MINKE_MTP_PAIR_PREV);
    check_pairing(main_path, mtp_path, MINKE_MTP_PAIR_SAME);
    gguf_close(fm);
    gguf_close(ft);
    return test_finish("test_mtp_ref");
}
