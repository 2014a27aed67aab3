/* test_convert_synth.c: synthetic models (src/model/synth.c, `minke mkmodel`).
 *
 *  - a tiny model under the default (ds4 q2) policy passes dsv4_config_from_gguf,
 *    dsv4_check_tensors and dsv4_check_tokenizer (synthetic vocabulary);
 *  - determinism: the same seed gives the same bytes with 1 or 2 threads, a
 *    different seed different weights; synth_fill_tensor (in memory) gives
 *    exactly the file's bytes;
 *  - statistics: every tensor finite; projections have std ~ 1/sqrt(fan_in)
 *    whatever the storage type (random blocks of Q8_0, Q2_K, Q4_K, IQ2_XXS,
 *    MXFP4 and floats agree); norm weights in [0.8, 1.2]; hash-routing rows
 *    hold distinct valid experts;
 *  - --damp scales exactly the residual-writing matrices;
 *  - activations stay realistic: a 43-layer model (Flash depth, tiny widths,
 *    q2 policy) run by the CPU engine gives finite logits with a moderate
 *    spread, no saturated softmax, and different tokens get different
 *    predictions.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minke.h"
#include "convert/policy.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "testutil.h"

static int write_model(const char *name, const dsv4_config *c, const convert_policy *p, uint64_t seed, float damp,
                       int threads, char *path, size_t pn) {
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    int *types = malloc((size_t)n * sizeof *types);
    for (int i = 0; i < n; i++) types[i] = policy_type(p, &specs[i]);
    free(specs);
    snprintf(path, pn, "%s/%s", test_tmpdir(), name);
    synth_file_opts o = {types, seed, damp, NULL, threads, 0, 0, 0};
    char err[512] = "";
    int rc = synth_write_gguf(path, c, &o, err, sizeof err);
    CHECK(rc == 0, "synth_write_gguf %s: %s", name, err);
    free(types);
    return rc;
}

static double *stats(const gguf_tensor *t, double *mean, double *std, double *mn, double *mx, int *finite) {
    uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2];
    float *f = malloc(nel * sizeof *f);
    quant_get((int)t->type)->dequant(t->data, f, (int64_t)nel);
    double s = 0, ss = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    *finite = 1;
    for (uint64_t i = 0; i < nel; i++) {
        if (!isfinite(f[i])) *finite = 0;
        s += f[i];
        ss += (double)f[i] * f[i];
        if (f[i] < *mn) *mn = f[i];
        if (f[i] > *mx) *mx = f[i];
    }
    *mean = s / (double)nel;
    *std = sqrt(ss / (double)nel - *mean * *mean);
    free(f);
    return NULL;
}

static void test_valid_and_deterministic(const dsv4_config *c) {
    convert_policy p;
    policy_default(&p);
    char a[1024], b[1024], d[1024];
    if (write_model("a.gguf", c, &p, 7, 1.0f, 1, a, sizeof a)) return;
    if (write_model("b.gguf", c, &p, 7, 1.0f, 2, b, sizeof b)) return;
    if (write_model("d.gguf", c, &p, 8, 1.0f, 2, d, sizeof d)) return;
    size_t na, nb, nd;
    uint8_t *ba = test_read_file(a, &na), *bb = test_read_file(b, &nb), *bd = test_read_file(d, &nd);
    CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "same seed with 1 and 2 threads gives different files");
    char err[512] = "";
    gguf_file *g = gguf_open(a, err, sizeof err);
    CHECK(g != NULL, "open: %s", err);
    if (!g) return;
    dsv4_config rc;
    CHECK(dsv4_config_from_gguf(g, &rc, err, sizeof err) == 0, "config: %s", err);
    CHECK(rc.n_layer == c->n_layer && rc.n_embd == c->n_embd && rc.n_vocab == c->n_vocab, "config differs");
    CHECK(dsv4_check_tensors(g, &rc, err, sizeof err) == 0, "dsv4_check_tensors: %s", err);
    CHECK(dsv4_check_tokenizer(g, &rc, err, sizeof err) == 1, "tokenizer check: %s", err);
    /* a different seed changes the weights (compare the data regions) */
    gguf_file *gd = gguf_open(d, err, sizeof err);
    if (gd) {
        int same = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i], *u = gguf_find_tensor(gd, t->cname);
            if (u && t->nbytes > 64 && !memcmp(t->data, u->data, t->nbytes)) same++;
        }
        CHECK(same == 0, "%d tensors identical under a different seed", same);
        gguf_close(gd);
    }
    /* in memory == in the file */
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, specs[i].name);
        if (!t) {
            bad++;
            continue;
        }
        void *m = malloc(t->nbytes);
        if (synth_fill_tensor(c, &specs[i], (int)t->type, 7, 1.0f, m) != 0 || memcmp(m, t->data, t->nbytes)) {
            bad++;
            fprintf(stderr, "%s: in-memory fill differs from the file\n", specs[i].name);
        }
        free(m);
    }
    CHECK(bad == 0, "%d tensors differ between synth_fill_tensor and the file", bad);
    /* statistics */
    int checked = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->type == GGML_TYPE_I32) {
            const int32_t *v = t->data;
            int ok = 1;
            for (uint64_t r = 0; r < t->ne[1]; r++)
                for (uint64_t k = 0; k < t->ne[0]; k++) {
                    int32_t e = v[r * t->ne[0] + k];
                    if (e < 0 || (uint32_t)e >= c->n_expert) ok = 0;
                    for (uint64_t j = 0; j < k; j++)
                        if (v[r * t->ne[0] + j] == e) ok = 0;
                }
            CHECK(ok, "%s: hash rows must hold distinct experts < %u", t->cname, c->n_expert);
            continue;
        }
        double mean, std, mn, mx;
        int finite;
        stats(t, &mean, &std, &mn, &mx, &finite);
        CHECK(finite, "%s has non-finite values", t->cname);
        if (strstr(t->cname, "norm.weight")) {
            CHECK(mn >= 0.8 - 1e-6 && mx <= 1.2 + 1e-6, "%s: norm weights in [%g, %g]", t->cname, mn, mx);
        } else if (strstr(t->cname, "attn_q_a.") || strstr(t->cname, "attn_kv.") || strstr(t->cname, "ffn_gate_exps") ||
                   strstr(t->cname, "ffn_up_exps") || strstr(t->cname, "ffn_down_exps") || strstr(t->cname, "ffn_up_shexp") ||
                   strstr(t->cname, "attn_output_b")) {
            double want = 1.0 / sqrt((double)t->ne[0]);
            CHECK(fabs(std / want - 1) < 0.2, "%s (%s): std %g, want ~%g", t->cname, quant_name((int)t->type), std, want);
            CHECK(fabs(mean) < 0.1 * want, "%s (%s): mean %g", t->cname, quant_name((int)t->type), mean);
            checked++;
        }
    }
    CHECK(checked > 20, "only %d projections checked", checked);
    free(specs);
    gguf_close(g);
    free(ba);
    free(bb);
    free(bd);
}

/* every storage type reaches the same spread */
static void test_types(const dsv4_config *c) {
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    const dsv4_tensor_spec *s = NULL;
    for (int i = 0; i < n; i++)
        if (strstr(specs[i].name, "blk.4.ffn_gate_exps")) s = &specs[i];
    CHECK(s != NULL, "no expert tensor");
    if (!s) return;
    static const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,
                                GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_MXFP4};
    double want = 1.0 / sqrt((double)s->ne[0]);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = types[k];
        uint64_t nel = s->ne[0] * s->ne[1] * s->ne[2];
        uint64_t nb = quant_nbytes(t, nel);
        void *buf = malloc(nb);
        float *f = malloc(nel * sizeof *f);
        CHECK(synth_fill_tensor_mt(c, s, t, 3, 1.0f, buf, 2) == 0, "fill as %s failed", quant_name(t));
        quant_get(t)->dequant(buf, f, (int64_t)nel);
        double sum = 0, ss = 0;
        int finite = 1;
        for (uint64_t i = 0; i < nel; i++) {
            finite &= isfinite(f[i]) != 0;
            sum += f[i];
            ss += (double)f[i] * f[i];
        }
        double mean = sum / (double)nel, std = sqrt(ss / (double)nel - mean * mean);
        double tol = 0.15;
        CHECK(finite, "%s: non-finite", quant_name(t));
        CHECK(fabs(std / want - 1) < tol, "%s: std %g, want %g", quant_name(t), std, want);
        CHECK(fabs(mean) < 0.05 * want, "%s: mean %g", quant_name(t), mean);
        fprintf(stderr, "%-8s std/target %.3f mean/target %+.4f\n", quant_name(t), std / want, mean / want);
        /* single-row calls give the same bytes as the whole tensor */
        uint64_t rb = quant_row_bytes(t, (int64_t)s->ne[0]);
        void *row = malloc(rb);
        int64_t r = (int64_t)(s->ne[1] * s->ne[2]) - 3;
        synth_fill_rows(c, s, t, 3, 1.0f, r, 1, row);
        CHECK(!memcmp(row, (uint8_t *)buf + (uint64_t)r * rb, rb), "%s: row %lld differs when made alone", quant_name(t), (long long)r);
        free(row);
        free(buf);
        free(f);
    }
    free(specs);
}

/* float storage types share the values: F16 and BF16 are the rounded F32 tensor */
static void test_float_twins(const dsv4_config *c) {
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    int bad = 0, checked = 0;
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        if (s->role == DSV4_ROLE_TID2EID) continue;
        uint64_t nel = s->ne[0] * s->ne[1] * s->ne[2];
        float *a = malloc(nel * 4);
        uint16_t *h = malloc(nel * 2), *b = malloc(nel * 2);
        synth_fill_tensor(c, s, GGML_TYPE_F32, 9, 1.0f, a);
        synth_fill_tensor(c, s, GGML_TYPE_F16, 9, 1.0f, h);
        synth_fill_tensor(c, s, GGML_TYPE_BF16, 9, 1.0f, b);
        for (uint64_t k = 0; k < nel; k++)
            if (h[k] != f32_to_f16(a[k]) || b[k] != f32_to_bf16(a[k])) {
                bad++;
                break;
            }
        checked++;
        free(a);
        free(h);
        free(b);
    }
    CHECK(bad == 0, "%d of %d tensors: F16/BF16 storage is not the rounded F32 tensor", bad, checked);
    free(specs);
}

static void test_damp(const dsv4_config *c) {
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    int damped = 0;
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        int t = s->ds4_type == GGML_TYPE_I32 ? GGML_TYPE_I32 : GGML_TYPE_F32;
        uint64_t nel = s->ne[0] * s->ne[1] * s->ne[2];
        float *a = malloc(nel * 4), *b = malloc(nel * 4);
        synth_fill_tensor(c, s, t, 5, 1.0f, a);
        synth_fill_tensor(c, s, t, 5, 0.25f, b);
        int is_out = strstr(s->name, "attn_output_b") || strstr(s->name, "ffn_down_exps") || strstr(s->name, "ffn_down_shexp");
        if (is_out) {
            int ok = 1;
            for (uint64_t k = 0; k < nel; k++)
                if (fabsf(b[k] - 0.25f * a[k]) > 1e-6f * fabsf(a[k]) + 1e-12f) ok = 0;
            CHECK(ok, "%s: damped values are not 0.25x", s->name);
            damped++;
        } else {
            CHECK(!memcmp(a, b, nel * 4), "%s changed under --damp", s->name);
        }
        free(a);
        free(b);
    }
    CHECK(damped == 3 * (int)c->n_layer, "%d damped tensors", damped);
    free(specs);
}

/* the synthetic MTP block (spec §4.4) */
static void test_mtp(const dsv4_config *c) {
    dsv4_tensor_spec *specs;
    int n = dsv4_mtp_tensor_specs(c, &specs);
    CHECK(n == 32, "MTP spec count %d", n);
    if (n <= 0) return;
    convert_policy p;
    policy_default(&p);
    policy_set_experts(&p, "q4k");
    int *types = malloc((size_t)n * sizeof *types);
    for (int i = 0; i < n; i++) types[i] = policy_type(&p, &specs[i]);
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/mtp.gguf", test_tmpdir());
    synth_file_opts o = {types, 3, 1.0f, NULL, 2, 0, 1, 0};
    CHECK(synth_write_gguf(path, c, &o, err, sizeof err) == 0, "MTP write: %s", err);
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "MTP open: %s", err);
    if (g) {
        CHECK(dsv4_check_mtp_tensors(g, c, err, sizeof err) == 0, "dsv4_check_mtp_tensors: %s", err);
        CHECK(gguf_find_kv(g, "tokenizer.ggml.tokens") == NULL, "the MTP file carries a tokenizer");
        for (int i = 0; i < n; i++) {
            const gguf_tensor *t = gguf_find_tensor(g, specs[i].name);
            if (!t) continue;
            double mean, std, mn, mx;
            int finite;
            stats(t, &mean, &std, &mn, &mx, &finite);
            CHECK(finite, "%s non-finite", t->cname);
            if (strstr(t->cname, "norm.weight")) CHECK(mn >= 0.8 - 1e-6 && mx <= 1.2 + 1e-6, "%s range", t->cname);
        }
        gguf_close(g);
    }
    free(types);
    free(specs);
}

/* The default policy on the Flash preset is exactly ds4's q2 layout (so `mkmodel --preset flash`
 * writes ds4's tensor types), and its data size is the spec's 86,714,777,664 bytes (§4.3). */
static void test_flash_layout(void) {
    dsv4_config c;
    dsv4_config_preset(&c, "flash");
    dsv4_config_derive(&c);
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(&c, &specs);
    CHECK(n == 1328, "flash has %d tensors, spec says 1328", n);
    convert_policy p;
    policy_default(&p);
    char err[256] = "";
    CHECK(policy_check(&p, specs, n, err, sizeof err) == 0, "policy_check: %s", err);
    uint64_t total = 0;
    int differ = 0;
    for (int i = 0; i < n; i++) {
        int t = policy_type(&p, &specs[i]);
        if (t != specs[i].ds4_type) differ++;
        uint64_t nb = quant_nbytes(t, specs[i].ne[0] * specs[i].ne[1] * specs[i].ne[2]);
        total += (nb + 31) / 32 * 32;
    }
    CHECK(differ == 0, "%d tensors differ from ds4's q2 types", differ);
    CHECK(total == 86714777664ull, "flash q2 data is %llu bytes", (unsigned long long)total);
    free(specs);
}

static void test_engine_runs(void) {
    dsv4_config c;
    dsv4_config_preset(&c, "tiny");
    c.n_layer = 43;
    for (uint32_t il = 0; il < c.n_layer; il++) {
        c.compress_ratio[il] = il < 2 ? 0 : il % 2 == 0 ? 4 : 8;
        c.swiglu_clamp[il] = 10.0f;
    }
    dsv4_config_derive(&c);
    char err[512] = "";
    CHECK(dsv4_config_validate(&c, err, sizeof err) == 0, "43-layer config: %s", err);
    convert_policy p;
    policy_default(&p);
    char path[1024];
    if (write_model("deep.gguf", &c, &p, 11, 1.0f, 0, path, sizeof path)) return;
    minke_model_params mp;
    minke_model_params_default(&mp);
    mp.path = path;
    mp.n_threads = 2;
    minke_model *m = minke_model_open(&mp);
    CHECK(m != NULL, "engine cannot open the synthetic model: %s", minke_last_error());
    if (!m) return;
    enum { T = 24 };
    int32_t tok[T];
    uint64_t st = 99;
    for (int i = 0; i < T; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((st >> 33) % c.n_vocab);
    }
    int V = (int)c.n_vocab;
    float *l = malloc(sizeof(float) * T * (size_t)V);
    minke_session *s = minke_session_create(m, T);
    int rc = s ? minke_prefill(s, tok, T, l) : -1;
    CHECK(rc == 0, "prefill failed: %s", minke_last_error());
    if (rc == 0) {
        int finite = 1, argmax_prev = -1, distinct = 0;
        double worst_maxprob = 0, min_std = 1e30, max_std = 0;
        for (int t = 0; t < T; t++) {
            const float *r = l + (size_t)t * V;
            double mx = -INFINITY, mean = 0, ss = 0;
            int am = 0;
            for (int v = 0; v < V; v++) {
                finite &= isfinite(r[v]) != 0;
                if (r[v] > mx) { mx = r[v]; am = v; }
                mean += r[v];
            }
            mean /= V;
            double z = 0;
            for (int v = 0; v < V; v++) {
                z += exp(r[v] - mx);
                ss += (r[v] - mean) * (r[v] - mean);
            }
            double sd = sqrt(ss / V);
            if (1 / z > worst_maxprob) worst_maxprob = 1 / z;
            if (sd < min_std) min_std = sd;
            if (sd > max_std) max_std = sd;
            if (am != argmax_prev) distinct++;
            argmax_prev = am;
        }
        CHECK(finite, "non-finite logits through 43 layers");
        CHECK(min_std > 0.3 && max_std < 10, "logit spread %.3g..%.3g outside 0.3..10", min_std, max_std);
        CHECK(worst_maxprob < 0.5, "a softmax saturates (max probability %.3f)", worst_maxprob);
        CHECK(distinct > T / 3, "predictions barely change with the token (%d changes in %d)", distinct, T);
        fprintf(stderr, "engine on a 43-layer synthetic q2 model: logit std %.2f..%.2f, max probability %.3f, %d argmax changes\n",
                min_std, max_std, worst_maxprob, distinct);
    }
    free(l);
    if (s) minke_session_free(s);
    minke_model_close(m);
}

int main(void) {
    dsv4_config c;
    if (dsv4_config_preset(&c, "tiny") != 0) {
        fprintf(stderr, "FAIL: no tiny preset\n");
        return 1;
    }
    dsv4_config_derive(&c);
    test_valid_and_deterministic(&c);
    test_types(&c);
    test_damp(&c);
    test_float_twins(&c);
    test_mtp(&c);
    test_flash_layout();
    test_engine_runs();
    return test_finish("test_convert_synth");
}
