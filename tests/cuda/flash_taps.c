/* flash_taps.c: CPU vs CUDA on a full Flash-shape synthetic q2 model, layer by layer.
 *
 * The 81 GB model does not fit the GPU machine's disk, so it is built once in
 * anonymous memory (synth_build_image) and opened from that image by both
 * backends (minke_model_params.gguf_image): the CPU backend reads it in
 * place, the CUDA backend uploads it; no second host copy. The backends run
 * one after the other (the first is closed before the second opens) on the
 * same prompt plus greedy decode steps, the tokens chosen from the first
 * backend's logits and fed to both. Taps record the hidden state (all HC
 * streams) after every layer at the last prompt position.
 *
 * Reported: per layer max|diff| / max|value| (first vs second backend); per
 * step the final logits' max|diff| / max|logit| and argmax agreement.
 * Exit status 1 when layers 0-3 exceed --tol, or, when --damp is given (a
 * damped model, whose logits are not chaotic), when any step's logits exceed
 * --logit-tol or the argmaxes differ. --backends cpu,cpu with --preset tiny
 * checks the plumbing without a GPU (the diffs must be zero).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minke.h"
#include "model/config.h"
#include "model/synth.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct run_rec {
    int n_layer, hc_dim, tap_pos;
    float *layers;      /* n_layer x hc_dim: "blk.N.out" at tap_pos */
    unsigned char *got; /* which layers were tapped */
    float *logits;      /* (n_decode + 1) x V: after the prompt, after each decode */
} run_rec;

static void on_tap(void *user, const char *name, int pos, const float *data, int64_t n) {
    run_rec *r = user;
    int il;
    char tail[8];
    if (pos != r->tap_pos || sscanf(name, "blk.%d.%7s", &il, tail) != 2 || strcmp(tail, "out") != 0) return;
    if (il < 0 || il >= r->n_layer || n != r->hc_dim) return;
    memcpy(r->layers + (size_t)il * r->hc_dim, data, sizeof(float) * (size_t)n);
    r->got[il] = 1;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* max|a - b| / max|a| (0 when both are zero) */
static double rel_diff(const float *a, const float *b, int64_t n, double *amax_out) {
    double amax = 0, dmax = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i] < 0 ? -a[i] : a[i];
        double d = (double)a[i] - (double)b[i];
        if (d < 0) d = -d;
        if (x > amax) amax = x;
        if (d > dmax || d != d) dmax = d != d ? 1e30 : d;
    }
    if (amax_out) *amax_out = amax;
    return amax > 0 ? dmax / amax : dmax;
}

/* Open the image on one backend, run prompt + decode (tokens[n_prompt..] chosen greedily
 * when choose is set, else taken as given), record taps and logits, close. */
static int run_backend(minke_backend be, const void *img, uint64_t img_size, int n_threads, const int32_t *prompt,
                       int n_prompt, int n_decode, int32_t *decoded, int choose, run_rec *r, int V) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = "synthetic-flash-image";
    p.gguf_image = img;
    p.gguf_image_size = img_size;
    p.backend = be;
    p.n_threads = n_threads;
    const char *bname = be == MINKE_BACKEND_CUDA ? "cuda" : "cpu";
    double t0 = now_s();
    minke_model *m = minke_model_open(&p);
    if (!m) { fprintf(stderr, "flash_taps: open on %s: %s\n", bname, minke_last_error()); return -1; }
    double t1 = now_s();
    printf("  %-4s open          %8.2f s\n", bname, t1 - t0);
    int n_ctx = n_prompt + n_decode + 16;
    minke_session *s = minke_session_create(m, n_ctx < 256 ? 256 : n_ctx);
    int rc = -1;
    if (!s) { fprintf(stderr, "flash_taps: session on %s: %s\n", bname, minke_last_error()); goto out; }
    minke_set_tap(m, on_tap, r);
    if (minke_prefill(s, prompt, n_prompt, NULL) != 0) {
        fprintf(stderr, "flash_taps: prefill on %s: %s\n", bname, minke_last_error());
        goto out;
    }
    minke_set_tap(m, NULL, NULL); /* decode steps untapped: full-speed paths (graphs, fused HC) */
    double t2 = now_s();
    printf("  %-4s prefill %3d   %8.2f s\n", bname, n_prompt, t2 - t1);
    const float *l0 = minke_logits(s);
    if (!l0) { fprintf(stderr, "flash_taps: logits on %s: %s\n", bname, minke_last_error()); goto out; }
    memcpy(r->logits, l0, sizeof(float) * (size_t)V);
    for (int k = 0; k < n_decode; k++) {
        if (choose) decoded[k] = argmax(r->logits + (size_t)k * V, V);
        if (minke_decode(s, decoded[k]) != 0) {
            fprintf(stderr, "flash_taps: decode on %s: %s\n", bname, minke_last_error());
            goto out;
        }
        const float *lk = minke_logits(s);
        if (!lk) { fprintf(stderr, "flash_taps: logits on %s: %s\n", bname, minke_last_error()); goto out; }
        memcpy(r->logits + (size_t)(k + 1) * V, lk, sizeof(float) * (size_t)V);
    }
    double t3 = now_s();
    printf("  %-4s decode %3d    %8.2f s (%.1f tok/s)\n", bname, n_decode, t3 - t2,
           n_decode > 0 && t3 > t2 ? n_decode / (t3 - t2) : 0.0);
    rc = 0;
out:
    minke_session_free(s);
    minke_model_close(m);
    return rc;
}

static int parse_backend(const char *s, minke_backend *out) {
    if (!strcmp(s, "cpu")) *out = MINKE_BACKEND_CPU;
    else if (!strcmp(s, "cuda")) *out = MINKE_BACKEND_CUDA;
    else return -1;
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: flash_taps [--preset flash|small|tiny] [--damp F] [--seed N] [--layers N] [--tokens N]\n"
            "                  [--decode N] [--threads N] [--backends cpu,cuda] [--tol F] [--logit-tol F]\n"
            "  builds the synthetic q2 model in memory and compares the two backends layer by layer\n"
            "  (hidden state after every layer at the last prompt position) and on the final logits\n"
            "  of the prompt and every greedy decode step (checked only with --damp).\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* phases show up as they finish, also through a pipe */
    const char *preset = "flash", *backends = "cpu,cuda";
    float damp = 1.0f;
    int damp_given = 0, layers = 0, n_prompt = 8, n_decode = 8, n_threads = 0;
    uint64_t seed = 1;
    double tol = 1e-2, logit_tol = 1e-2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!v) { usage(); return 2; }
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--damp")) { damp = strtof(v, NULL); damp_given = 1; }
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--tokens")) n_prompt = atoi(v);
        else if (!strcmp(a, "--decode")) n_decode = atoi(v);
        else if (!strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--backends")) backends = v;
        else if (!strcmp(a, "--tol")) tol = strtod(v, NULL);
        else if (!strcmp(a, "--logit-tol")) logit_tol = strtod(v, NULL);
        else { usage(); return 2; }
        i++;
    }
    minke_backend be[2];
    char b0[16] = "", b1[16] = "";
    if (sscanf(backends, "%15[a-z],%15[a-z]", b0, b1) != 2 || parse_backend(b0, &be[0]) || parse_backend(b1, &be[1])) {
        fprintf(stderr, "flash_taps: --backends wants two of cpu|cuda, e.g. cpu,cuda\n");
        return 2;
    }
    if (n_prompt < 1 || n_decode < 0 || damp <= 0) { usage(); return 2; }
    dsv4_config c;
    if (dsv4_config_preset(&c, preset) != 0) {
        fprintf(stderr, "flash_taps: unknown preset %s\n", preset);
        return 2;
    }
    if (layers > 0 && (uint32_t)layers < c.n_layer) {
        c.n_layer = (uint32_t)layers;
        if (c.n_hash_layer > c.n_layer) c.n_hash_layer = c.n_layer;
        dsv4_config_derive(&c);
    }
    int L = (int)c.n_layer, V = (int)c.n_vocab, hcd = (int)c.hc_dim;
    printf("flash_taps: preset %s, %d layers, q2 (ds4 types), seed %llu, damp %g, %d prompt + %d decode tokens, %s vs %s\n",
           preset, L, (unsigned long long)seed, damp, n_prompt, n_decode, b0, b1);

    double t0 = now_s();
    synth_file_opts o = {NULL, seed, damp, NULL, n_threads, 0, 0, 0};
    void *img = NULL;
    uint64_t img_size = 0;
    char err[512];
    if (synth_build_image(&c, &o, &img, &img_size, err, sizeof err) != 0) {
        fprintf(stderr, "flash_taps: building the image: %s\n", err);
        return 1;
    }
    printf("  image %.2f GB     %8.2f s\n", img_size / 1e9, now_s() - t0);

    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    int32_t *decoded = calloc((size_t)n_decode + 1, sizeof(int32_t));
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int i = 0; i < n_prompt; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((st >> 33) % (uint64_t)V);
    }
    run_rec r[2];
    for (int k = 0; k < 2; k++) {
        r[k].n_layer = L;
        r[k].hc_dim = hcd;
        r[k].tap_pos = n_prompt - 1;
        r[k].layers = calloc((size_t)L * hcd, sizeof(float));
        r[k].got = calloc((size_t)L, 1);
        r[k].logits = calloc((size_t)(n_decode + 1) * V, sizeof(float));
        if (!r[k].layers || !r[k].got || !r[k].logits) { fprintf(stderr, "flash_taps: out of memory\n"); return 1; }
    }
    int status = 0;
    for (int k = 0; k < 2; k++)
        if (run_backend(be[k], img, img_size, n_threads, prompt, n_prompt, n_decode, decoded, k == 0, &r[k], V) != 0) {
            synth_free_image(img, img_size);
            return 1;
        }

    printf("\nhidden state after each layer, position %d (%d values: %d HC streams x %d):\n", n_prompt - 1, hcd,
           (int)c.n_hc, (int)c.n_embd);
    printf("  layer  max|%s|      max|diff|/max|%s|\n", b0, b0);
    double worst_early = 0;
    for (int il = 0; il < L; il++) {
        if (!r[0].got[il] || !r[1].got[il]) {
            printf("  %5d  (not tapped by %s)\n", il, !r[0].got[il] ? b0 : b1);
            if (il < 4) status = 1;
            continue;
        }
        double amax;
        double rd = rel_diff(r[0].layers + (size_t)il * hcd, r[1].layers + (size_t)il * hcd, hcd, &amax);
        printf("  %5d  %10.4g  %10.3e%s\n", il, amax, rd, il < 4 && rd > tol ? "  <- over tolerance" : "");
        if (il < 4 && rd > worst_early) worst_early = rd;
    }
    if (worst_early > tol) status = 1;
    printf("layers 0-%d: worst %.3e (tolerance %.1e): %s\n", L < 4 ? L - 1 : 3, worst_early, tol,
           worst_early > tol ? "FAIL" : "ok");

    printf("\nfinal logits (greedy on %s, token fed to both):\n", b0);
    printf("  step  token  max|logit|  max|diff|/max|logit|  argmax %s  argmax %s\n", b0, b1);
    int logit_fail = 0;
    for (int k = 0; k <= n_decode; k++) {
        const float *la = r[0].logits + (size_t)k * V, *lb = r[1].logits + (size_t)k * V;
        double amax;
        double rd = rel_diff(la, lb, V, &amax);
        int ga = argmax(la, V), gb = argmax(lb, V);
        int bad = rd > logit_tol || ga != gb;
        logit_fail |= bad;
        printf("  %4d  %5d  %10.4g  %20.3e  %9d  %9d%s\n", k, k == 0 ? prompt[n_prompt - 1] : decoded[k - 1], amax, rd,
               ga, gb, bad ? "  <-" : "");
    }
    if (damp_given) {
        printf("final logits (damped model, tolerance %.1e and argmax at every step): %s\n", logit_tol,
               logit_fail ? "FAIL" : "ok");
        if (logit_fail) status = 1;
    } else {
        printf("final logits: informational (undamped: differences grow through the layers; use --damp to check)\n");
    }
    printf("total %.2f s\n", now_s() - t0);
    for (int k = 0; k < 2; k++) { free(r[k].layers); free(r[k].got); free(r[k].logits); }
    free(prompt);
    free(decoded);
    synth_free_image(img, img_size);
    return status;
}
