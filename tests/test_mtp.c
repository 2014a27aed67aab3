/* test_mtp.c: the MTP block (spec model.md §13) and exact greedy speculative
 * decoding, on a tiny synthetic model and its synthetic MTP file written by
 * the minke binary under test (mkmodel --preset tiny --mtp-out).
 *
 *   - damaged MTP files (missing tensor, wrong shape, missing exp_probs_b,
 *     not a GGUF) are refused with an error naming the problem;
 *   - MTP logits (the "mtp.logits" tap) are finite and deterministic; drafting
 *     never changes the session; the MTP state does not depend on prefill
 *     chunking; snapshots and serialised states carry it;
 *   - the ds4 pairing drafts only after its own guess matches the token;
 *   - minke_spec_verify_greedy with drafts taken from the greedy reference
 *     (all right, or one wrong) and minke_spec_greedy_step with MTP drafts give
 *     exactly plain greedy decoding (tokens, final logits bit for bit,
 *     position) for several prompts, draft lengths, both pairings and a stop
 *     token; the MTP acceptance rate is printed (random weights: near 0).
 */
#include "engine_test_util.h"
#include "engine/sample.h"
#include "gguf/gguf.h"

static char g_main[600], g_mtp[600];
static int g_V;
static int g_asan;   /* MINKE_ASAN=1: fewer cases */

static minke_model *open_mtp(const char *mtp, int pairing) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = g_main;
    p.mtp_path = mtp;
    p.mtp_pairing = pairing;
    p.n_threads = 2;
    return minke_model_open(&p);
}

/* ---- damaged files ---- */
static const char *patched(const char *name, void (*patch)(uint8_t *, const gguf_file *)) {
    static char out[700];
    size_t n = 0;
    uint8_t *buf = test_read_file(g_mtp, &n);
    char err[256];
    gguf_file *f = gguf_open(g_mtp, err, sizeof err);
    if (!buf || !f) { fprintf(stderr, "cannot read %s\n", g_mtp); exit(1); }
    patch(buf, f);
    gguf_close(f);
    snprintf(out, sizeof out, "%s.%s", g_mtp, name);
    FILE *o = fopen(out, "wb");
    if (!o) exit(1);
    fwrite(buf, 1, n, o);
    fclose(o);
    free(buf);
    return out;
}

static void rename_tensor(uint8_t *buf, const gguf_file *f, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) { fprintf(stderr, "no %s\n", name); exit(1); }
    buf[(const uint8_t *)t->name.ptr - f->map + t->name.len - 1] = 'X';
}
static void no_e_proj(uint8_t *b, const gguf_file *f) { rename_tensor(b, f, "mtp.0.e_proj.weight"); }
static void no_bias(uint8_t *b, const gguf_file *f) { rename_tensor(b, f, "mtp.0.exp_probs_b.bias"); }
static void reshape_sinks(uint8_t *buf, const gguf_file *f) {
    const gguf_tensor *t = gguf_find_tensor(f, "mtp.0.attn_sinks.weight");
    if (!t) exit(1);
    uint8_t *ne0 = buf + ((const uint8_t *)t->name.ptr - f->map) + t->name.len + 4;
    uint64_t v;
    memcpy(&v, ne0, 8);
    v += 1;
    memcpy(ne0, &v, 8);
}

static void expect_open_fail(const char *mtp, const char *needle) {
    minke_model *m = open_mtp(mtp, MINKE_MTP_PAIR_PREV);
    CHECK(m == NULL, "%s: open should fail", mtp);
    if (m) { minke_model_close(m); return; }
    printf("  %-28s -> %s\n", strrchr(mtp, '/') + 1, minke_last_error());
    CHECK(strstr(minke_last_error(), needle) != NULL, "error '%s' should mention '%s'", minke_last_error(), needle);
}

static void test_bad_files(void) {
    expect_open_fail(patched("noeproj", no_e_proj), "mtp.0.e_proj.weight");
    expect_open_fail(patched("nobias", no_bias), "mtp.0.exp_probs_b.bias");
    expect_open_fail(patched("sinks", reshape_sinks), "mtp.0.attn_sinks.weight");
    expect_open_fail(g_main, "mtp.0.");   /* a main model is not an MTP file */
    char missing[700];
    snprintf(missing, sizeof missing, "%s.absent", g_mtp);
    expect_open_fail(missing, "MTP file");
}

/* ---- MTP logits through the tap ---- */
typedef struct tap_log {
    int n;
    float *logits;   /* up to 32 steps */
    int pos[32];
} tap_log;

static void on_tap(void *user, const char *name, int pos, const float *data, int64_t n) {
    tap_log *t = user;
    if (strcmp(name, "mtp.logits") || t->n >= 32) return;
    memcpy(t->logits + (size_t)t->n * n, data, sizeof(float) * (size_t)n);
    t->pos[t->n++] = pos;
}

static int32_t *rand_tokens(int n, uint32_t seed) {
    test_rand_seed(seed);
    int32_t *t = malloc(sizeof *t * n);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(test_rand() % (uint32_t)g_V);
    return t;
}

static void test_drafts_and_state(minke_model *m) {
    const int P = 19, N = 4;
    int32_t *tok = rand_tokens(P + 8, 11);
    tap_log tl = {0, calloc((size_t)32 * g_V, sizeof(float)), {0}};
    minke_set_tap(m, on_tap, &tl);

    minke_session *a = minke_session_create(m, 64), *b = minke_session_create(m, 64);
    minke_session_set_chunk(b, 1);   /* token by token */
    CHECK(minke_prefill(a, tok, P, NULL) == 0, "prefill a: %s", minke_last_error());
    CHECK(minke_prefill(b, tok, P, NULL) == 0, "prefill b: %s", minke_last_error());
    int32_t next = sampler_argmax(minke_logits(a), g_V);
    float *before = malloc(sizeof(float) * g_V);
    memcpy(before, minke_logits(a), sizeof(float) * g_V);

    int32_t d1[8], d2[8], d3[8];
    tl.n = 0;
    int n1 = minke_mtp_draft(a, next, N, d1);
    CHECK(n1 == N, "draft count %d, expected %d (%s)", n1, N, minke_last_error());
    CHECK(tl.n == N, "%d MTP logit taps for %d drafts", tl.n, N);
    int finite = 1;
    for (size_t i = 0; i < (size_t)tl.n * g_V; i++) if (!isfinite(tl.logits[i])) finite = 0;
    CHECK(finite, "MTP logits are not finite");
    for (int k = 0; k < tl.n; k++) {
        CHECK(tl.pos[k] == P + k, "draft %d tapped at position %d, expected %d", k, tl.pos[k], P + k);
        CHECK(sampler_argmax(tl.logits + (size_t)k * g_V, g_V) == d1[k], "draft %d is not the MTP argmax", k);
    }
    float *first = malloc(sizeof(float) * (size_t)N * g_V);
    memcpy(first, tl.logits, sizeof(float) * (size_t)N * g_V);
    printf("  drafts after %d tokens (next %d): %d %d %d %d\n", P, next, d1[0], d1[1], d1[2], d1[3]);

    /* deterministic, session untouched, chunking-independent */
    tl.n = 0;
    int n2 = minke_mtp_draft(a, next, N, d2);
    CHECK(n2 == N && !memcmp(d1, d2, sizeof(int32_t) * N), "second draft differs");
    CHECK(!memcmp(first, tl.logits, sizeof(float) * (size_t)N * g_V), "MTP logits not deterministic");
    CHECK(!memcmp(before, minke_logits(a), sizeof(float) * g_V), "drafting changed the logits");
    CHECK(minke_session_pos(a) == P, "drafting moved the session");
    tl.n = 0;
    int n3 = minke_mtp_draft(b, next, N, d3);
    CHECK(n3 == N && !memcmp(d1, d3, sizeof(int32_t) * N), "token-by-token prefill gives other drafts");
    CHECK(!memcmp(first, tl.logits, sizeof(float) * (size_t)N * g_V), "MTP logits depend on the prefill chunking");

    /* a session that drafted decodes exactly like one that did not */
    minke_session *c = minke_session_create(m, 64);
    minke_prefill(c, tok, P, NULL);
    minke_decode(a, tok[P]);
    minke_decode(c, tok[P]);
    CHECK(!memcmp(minke_logits(a), minke_logits(c), sizeof(float) * g_V), "drafting changed later decoding");

    /* snapshot / restore and serialisation carry the MTP state */
    minke_snapshot *snap = minke_snapshot_take(a);
    int32_t ds[8], dr[8], dx[8];
    int32_t nx = sampler_argmax(minke_logits(a), g_V);
    minke_mtp_draft(a, nx, N, ds);
    CHECK(minke_prefill(a, tok + P + 1, 6, NULL) == 0, "prefill more");
    CHECK(minke_snapshot_restore(a, snap) == 0, "restore: %s", minke_last_error());
    CHECK(minke_mtp_draft(a, nx, N, dr) == N && !memcmp(ds, dr, sizeof(int32_t) * N), "drafts differ after restore");
    uint64_t nb = minke_session_serial_bytes(a);
    void *buf = malloc(nb);
    CHECK(minke_session_serialize(a, buf, nb) == 0, "serialize: %s", minke_last_error());
    minke_session *d = minke_session_create(m, 64);
    CHECK(minke_session_deserialize(d, buf, nb) == 0, "deserialize: %s", minke_last_error());
    CHECK(minke_mtp_draft(d, nx, N, dx) == N && !memcmp(ds, dx, sizeof(int32_t) * N), "drafts differ after deserialize");
    minke_decode(a, nx);
    minke_decode(d, nx);
    CHECK(!memcmp(minke_logits(a), minke_logits(d), sizeof(float) * g_V), "deserialized session decodes differently");

    /* states of the model without MTP are not interchangeable */
    minke_model *plain = tu_open(g_main, 1);
    minke_session *e = plain ? minke_session_create(plain, 64) : NULL;
    CHECK(e != NULL, "plain session");
    if (e) {
        CHECK(minke_session_deserialize(e, buf, nb) != 0, "an MTP state loaded into a model without MTP");
        CHECK(minke_has_mtp(plain) == 0 && minke_has_mtp(m) == 1, "minke_has_mtp");
        CHECK(minke_mtp_draft(e, 1, 2, dx) == -1, "drafting without MTP should fail");
        minke_session_free(e);
    }
    minke_model_close(plain);
    CHECK(minke_mtp_draft(a, g_V, 2, dx) == -1, "out-of-range token accepted");
    minke_session_reset(d);
    CHECK(minke_mtp_draft(d, 1, 2, dx) == 0, "drafts at position 0");

    minke_set_tap(m, NULL, NULL);
    minke_snapshot_free(snap);
    free(buf); free(before); free(first); free(tl.logits); free(tok);
    minke_session_free(a); minke_session_free(b); minke_session_free(c); minke_session_free(d);
}

/* ds4 pairing: drafts only when the MTP's guess of `token` (the step of the last token) matches */
static void test_same_pairing(void) {
    minke_model *m = open_mtp(g_mtp, MINKE_MTP_PAIR_SAME);
    CHECK(m != NULL, "open with SAME pairing: %s", minke_last_error());
    if (!m) return;
    tap_log tl = {0, calloc((size_t)32 * g_V, sizeof(float)), {0}};
    minke_set_tap(m, on_tap, &tl);
    int32_t *tok = rand_tokens(12, 5);
    minke_session *s = minke_session_create(m, 64);
    minke_prefill(s, tok, 12, NULL);
    int32_t d[4];
    int n = minke_mtp_draft(s, 0, 3, d);
    CHECK(tl.n >= 1 && tl.pos[0] == 11, "the first SAME step should run at the last position (got %d at %d)", tl.n,
          tl.pos[0]);
    int32_t guess = sampler_argmax(tl.logits, g_V);
    CHECK(n == (guess == 0 ? 3 : 0), "SAME pairing with token 0, guess %d: %d drafts", guess, n);
    tl.n = 0;
    n = minke_mtp_draft(s, guess, 3, d);
    CHECK(n == 3 && tl.n == 4, "SAME pairing with its own guess: %d drafts, %d steps", n, tl.n);
    minke_set_tap(m, NULL, NULL);
    minke_session_free(s);
    minke_model_close(m);
    free(tl.logits);
    free(tok);
}

/* ---- speculative greedy == plain greedy ---- */
typedef struct run_result {
    int32_t toks[128];
    int n, pos;
    float *logits;
} run_result;

/* Greedy generation of up to n_gen tokens like the CLI loop: stop on `stop` (not fed). */
static void run_greedy(minke_model *m, const int32_t *prompt, int P, int n_gen, int32_t stop, int n_draft,
                       run_result *r, int *drafted, int *accepted) {
    minke_session *s = minke_session_create(m, 96);
    minke_session_set_chunk(s, 5);
    minke_prefill(s, prompt, P, NULL);
    r->n = 0;
    int gen = 0;
    while (gen < n_gen && minke_session_pos(s) < 96) {
        int32_t t = sampler_argmax(minke_logits(s), g_V);
        r->toks[r->n++] = t;
        gen++;
        if (t == stop) break;
        if (n_draft == 0) {
            if (minke_decode(s, t) != 0) { CHECK(0, "decode: %s", minke_last_error()); break; }
            continue;
        }
        int32_t fed[32];
        int max_extra = n_gen - gen;
        if (max_extra > 96 - minke_session_pos(s) - 1) max_extra = 96 - minke_session_pos(s) - 1;
        int nd = 0;
        int k = minke_spec_greedy_step(s, t, n_draft, max_extra, stop, fed, &nd);
        if (k < 1) { CHECK(0, "spec step: %s", minke_last_error()); break; }
        CHECK(fed[0] == t, "spec step fed %d first, not %d", fed[0], t);
        *drafted += nd;
        *accepted += k - 1;
        for (int i = 1; i < k; i++) { r->toks[r->n++] = fed[i]; gen++; }
    }
    r->pos = minke_session_pos(s);
    r->logits = malloc(sizeof(float) * g_V);
    memcpy(r->logits, minke_logits(s), sizeof(float) * g_V);
    minke_session_free(s);
}

static void test_speculative(void) {
    minke_model *plain = tu_open(g_main, 1);
    minke_model *pm[2] = {open_mtp(g_mtp, MINKE_MTP_PAIR_PREV), open_mtp(g_mtp, MINKE_MTP_PAIR_SAME)};
    CHECK(plain && pm[0] && pm[1], "open models: %s", minke_last_error());
    if (!plain || !pm[0] || !pm[1]) return;
    static const int drafts[] = {1, 2, 3, 5};
    int total_drafted[2] = {0, 0}, total_accepted[2] = {0, 0};
    for (int pr = 0; pr < (g_asan ? 1 : 3); pr++) {
        int P = 3 + pr * 9;
        int32_t *prompt = rand_tokens(P, 100 + pr);
        run_result ref;
        int dd = 0, aa = 0;
        run_greedy(plain, prompt, P, 40, -1, 0, &ref, &dd, &aa);
        /* a stop token that greedy decoding reaches part-way (feeds nothing after it) */
        int32_t stop = ref.toks[ref.n / 2];
        run_result ref_stop;
        run_greedy(plain, prompt, P, 40, stop, 0, &ref_stop, &dd, &aa);
        for (int pi = 0; pi < 2; pi++)
            for (size_t di = 0; di < (g_asan ? 2 : sizeof drafts / sizeof drafts[0]); di++)
                for (int with_stop = 0; with_stop < 2; with_stop++) {
                    run_result *want = with_stop ? &ref_stop : &ref;
                    run_result got;
                    run_greedy(pm[pi], prompt, P, 40, with_stop ? stop : -1, drafts[di], &got,
                               &total_drafted[pi], &total_accepted[pi]);
                    int same = got.n == want->n && !memcmp(got.toks, want->toks, sizeof(int32_t) * got.n) &&
                               got.pos == want->pos && !memcmp(got.logits, want->logits, sizeof(float) * g_V);
                    CHECK(same, "prompt %d, pairing %d, %d drafts, stop %d: speculative output differs "
                          "(%d tokens at pos %d vs %d at %d)", pr, pi, drafts[di], with_stop, got.n, got.pos,
                          want->n, want->pos);
                    free(got.logits);
                }
        free(ref.logits); free(ref_stop.logits); free(prompt);
    }
    for (int pi = 0; pi < 2; pi++)
        printf("  pairing %s: %d drafts tried, %d accepted (%.1f%%)\n", pi ? "SAME (ds4)" : "PREV (V3)",
               total_drafted[pi], total_accepted[pi],
               total_drafted[pi] ? 100.0 * total_accepted[pi] / total_drafted[pi] : 0.0);
    CHECK(total_drafted[0] > 0, "no drafts were verified");
    minke_model_close(plain); minke_model_close(pm[0]); minke_model_close(pm[1]);
}

/* Verification with drafts from the reference itself (all right, or one wrong
 * at a varying place): exercises full acceptance, partial acceptance, the
 * stop token inside accepted drafts, and the context end. */
static void test_verify_oracle(void) {
    minke_model *m = tu_open(g_main, 1);
    if (!m) { CHECK(0, "open"); return; }
    int32_t *prompt = rand_tokens(7, 77);
    run_result ref;
    int dd = 0, aa = 0;
    run_greedy(m, prompt, 7, 60, -1, 0, &ref, &dd, &aa);
    for (int stop_i = -1; stop_i < 2; stop_i++) {
        int32_t stop = stop_i < 0 ? -1 : ref.toks[20 + 13 * stop_i];
        run_result want;
        run_greedy(m, prompt, 7, 60, stop, 0, &want, &dd, &aa);
        static const int ks[] = {1, 2, 3, 6};
        for (int ki = 0; ki < (g_asan ? 2 : 4); ki++)
            for (int k = ks[ki], wrong = -1; wrong < k; wrong += 2) {
                minke_session *s = minke_session_create(m, 96);
                minke_prefill(s, prompt, 7, NULL);
                run_result got = {.n = 0};
                int fed_total = 0, full = 0;
                while (got.n < 60 && minke_session_pos(s) < 96) {
                    int32_t t = sampler_argmax(minke_logits(s), g_V);
                    got.toks[got.n++] = t;
                    if (t == stop) break;
                    int32_t seq[8] = {t};
                    int room = 60 - got.n, ctx_room = 96 - minke_session_pos(s) - 1;
                    int n = k < room ? k : room;
                    if (n > ctx_room) n = ctx_room;
                    for (int i = 0; i < n; i++) {
                        seq[1 + i] = ref.toks[got.n + i < ref.n ? got.n + i : 0];
                        if (i == wrong) seq[1 + i] = (seq[1 + i] + 1) % g_V;
                    }
                    int f = minke_spec_verify_greedy(s, seq, n + 1, stop);
                    if (f < 1) { CHECK(0, "verify: %s", minke_last_error()); break; }
                    fed_total += f;
                    if (f == n + 1 && n > 0) full++;
                    for (int i = 1; i < f; i++) got.toks[got.n++] = seq[i];
                }
                int same = got.n == want.n && !memcmp(got.toks, want.toks, sizeof(int32_t) * got.n) &&
                           minke_session_pos(s) == want.pos &&
                           !memcmp(minke_logits(s), want.logits, sizeof(float) * g_V);
                CHECK(same, "oracle drafts k=%d wrong=%d stop=%d: output differs (%d tokens at %d vs %d at %d)", k,
                      wrong, stop, got.n, minke_session_pos(s), want.n, want.pos);
                if (wrong < 0 && stop < 0) CHECK(full > 0, "k=%d: correct drafts were never all accepted", k);
                minke_session_free(s);
            }
        free(want.logits);
    }
    free(ref.logits);
    free(prompt);
    minke_model_close(m);
}

int main(void) {
    test_path(g_main, sizeof g_main, "tiny.gguf");
    test_path(g_mtp, sizeof g_mtp, "tiny_mtp.gguf");
    const char *asan = getenv("MINKE_ASAN");
    g_asan = asan && *asan && strcmp(asan, "0");
    char cmd[2000];
    /* HCA ratio 16 so the long runs also emit HCA rows */
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny --hca-ratio 16 -o '%s' --mtp-out '%s' --seed 4 "
             "--no-progress -t 2 >/dev/null 2>&1",
             tu_bin(), g_main, g_mtp);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot build the test model: %s\n", cmd);
        return 1;
    }
    minke_model *m = open_mtp(g_mtp, MINKE_MTP_PAIR_PREV);
    CHECK(m != NULL, "open with MTP: %s", minke_last_error());
    if (!m) return test_finish("test_mtp");
    g_V = minke_model_get_info(m)->n_vocab;
    printf("bad MTP files:\n");
    test_bad_files();
    printf("drafts and state:\n");
    test_drafts_and_state(m);
    minke_model_close(m);
    test_same_pairing();
    printf("speculative greedy decoding:\n");
    test_verify_oracle();
    test_speculative();
    return test_finish("test_mtp");
}
