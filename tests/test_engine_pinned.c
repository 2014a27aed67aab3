/* test_engine_pinned.c: quantized tiny-a against its F32 twin with the
 * discrete choices pinned (src/cpu/selections.h), with ds4's numerics
 * (MINKE_ACT_Q8). The default numerics (exact, f32 activations) give the
 * twin's logits bit for bit (test_engine_quant.c), so there is nothing to pin.
 *
 * With ds4 numerics (int8 activations, spec model.md §16.1) a quantized file
 * and its dequantized F32 twin differ by ~0.2 x max|logit| on this random
 * 6-layer model, because the activation rounding flips router top-k experts
 * and indexer top-k rows (test_engine_quant.c). Here the twin's selections
 * are recorded and the quantized file is run with those ids pinned, so only
 * the continuous numerics differ (sims off; q2, q4 and mxfp4 policies).
 *
 * Asserted: replaying a run's own recording gives bit-identical logits and
 * changes no choice; a recording read back from its file pins every
 * selection of the quantized run; pinning removes most of the difference
 * (pinned <= half of free). Measured, not asserted: issue #3's bound
 * max|diff| <= 1e-2 x max|logit| at every position does NOT hold even
 * pinned: ~0.04 x max|logit| over all positions, 0.027 at position 0 where
 * nothing was ever chosen differently. The int8 activation rounding itself
 * (~0.5 % per product) accumulates to ~1-2 % after layer 0 and ~4 % after
 * six layers (per-layer taps in docs/numerics.md), so the bound is not a
 * property of ds4's numerics on this model; the test prints it as met or not.
 */
#include "engine_test_util.h"
#include "cpu/selections.h"

/* Prefill logits of path with sims off, ds4 numerics; record to rec, or pin from pin, if set. */
static float *run(const char *path, const int32_t *tok, int T, const char *rec, const char *pin,
                  long *differed, long *missing) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = path;
    p.sims = 0;
    p.n_threads = 2;
    p.act = MINKE_ACT_Q8;
    minke_model *m = minke_model_open(&p);
    if (!m) { fprintf(stderr, "open %s: %s\n", path, minke_last_error()); return NULL; }
    if ((rec && cpu_sel_record(m) != 0) || (pin && cpu_sel_pin(m, pin) != 0)) {
        fprintf(stderr, "selections: %s\n", minke_last_error());
        minke_model_close(m);
        return NULL;
    }
    float *l = tu_logits(m, tok, T, 0);
    if (l && rec && cpu_sel_save(rec) != 0) { fprintf(stderr, "save: %s\n", minke_last_error()); free(l); l = NULL; }
    long pinned = 0;
    cpu_sel_pin_stats(&pinned, differed, missing);
    if (pin) printf("  pinned %ld selections\n", pinned);
    cpu_sel_reset();
    minke_model_close(m);
    return l;
}

/* Worst position of max|a-b| / max|b| over the row (ref = b); also the global ratio. */
static double worst_rel(const float *a, const float *b, int T, int V, int *worst_t, double *global) {
    double w = 0, gd = 0, gm = 0;
    *worst_t = 0;
    for (int t = 0; t < T; t++) {
        double d = tu_maxdiff(a + (size_t)t * V, b + (size_t)t * V, V), mx = tu_maxabs(b + (size_t)t * V, V);
        if (d > gd) gd = d;
        if (mx > gm) gm = mx;
        if (d / mx > w) { w = d / mx; *worst_t = t; }
    }
    *global = gd / gm;
    return w;
}

int main(void) {
    int asan = getenv("MINKE_ASAN") != NULL;
    const char *dir = test_tmpdir();
    size_t nb = 0;
    int32_t *tok = (int32_t *)test_read_file(TINY_A_DIR "/tokens.i32", &nb);
    if (!tok) { fprintf(stderr, "cannot read tokens\n"); return 1; }
    int T = (int)(nb / 4), V = 1024;
    struct { const char *name, *args; } pol[] = {
        {"q2", ""}, {"q4", "--experts q4k"}, {"mxfp4", "--experts mxfp4"},
    };
    int own_replay_done = 0;   /* once, on the first policy run (only mxfp4 under ASan) */
    for (int i = 0; i < 3; i++) {
        if (asan && i < 2) continue;   /* K-quant conversion is slow under ASan */
        char q[1200], twin[1200], rec[1200], qrec[1200];
        snprintf(q, sizeof q, "%s/tiny-a-%s.gguf", dir, pol[i].name);
        snprintf(twin, sizeof twin, "%s/tiny-a-%s-f32.gguf", dir, pol[i].name);
        snprintf(rec, sizeof rec, "%s/%s-twin.sel", dir, pol[i].name);
        snprintf(qrec, sizeof qrec, "%s/%s.sel", dir, pol[i].name);
        if (tu_convert(TINY_A_DIR, q, pol[i].args) != 0 || tu_convert(q, twin, "--experts f32 --dense f32") != 0) {
            CHECK(0, "%s conversion", pol[i].name);
            continue;
        }
        long dif = -1, mis = -1;
        printf("%s:\n", pol[i].name);
        float *lt = run(twin, tok, T, rec, NULL, NULL, &mis);
        CHECK(lt && mis == 0, "%s: twin recording (%ld lost)", pol[i].name, mis);
        float *lq = run(q, tok, T, qrec, NULL, NULL, NULL);
        float *lr = !own_replay_done ? run(twin, tok, T, NULL, rec, &dif, &mis) : NULL;
        if (!own_replay_done) {
            own_replay_done = 1;
            /* replaying a run's own choices must change nothing at all */
            CHECK(lr && lt && memcmp(lr, lt, sizeof(float) * (size_t)T * V) == 0,
                  "twin replaying its own selections is not bit-identical");
            CHECK(dif == 0 && mis == 0, "own replay: %ld differed, %ld missing", dif, mis);
        }
        float *lp = run(q, tok, T, NULL, rec, &dif, &mis);
        if (!lt || !lq || !lp) { CHECK(0, "%s forward", pol[i].name); free(lt); free(lq); free(lp); free(lr); continue; }
        CHECK(mis == 0, "%s: %ld selections of the quantized run had no entry in the twin's recording", pol[i].name, mis);
        int wf, wp;
        double gf, gp;
        double rf = worst_rel(lq, lt, T, V, &wf, &gf), rp = worst_rel(lp, lt, T, V, &wp, &gp);
        printf("  free:   worst position %d: max|diff| %.3g x its max|logit| (all positions: %.3g x max|logit|)\n", wf, rf, gf);
        printf("  pinned: worst position %d: max|diff| %.3g x its max|logit| (all positions: %.3g x max|logit|); "
               "%ld of the twin's selections differ from the quantized run's own choice\n", wp, rp, gp, dif);
        printf("  pinned, position 0 (no choice made there differs): %.3g x its max|logit|\n",
               tu_maxdiff(lp, lt, V) / tu_maxabs(lt, V));
        printf("  issue #3 bound (1e-2 x max|logit| at every position) with pinned selections: %s\n",
               rp <= 1e-2 ? "met" : "NOT met (activation rounding alone exceeds it)");
        CHECK(dif > 0, "%s: no selection flipped, so this test measures nothing", pol[i].name);
        CHECK(gp <= 0.5 * gf, "%s: pinning the twin's selections did not remove most of the difference (%.3g vs %.3g)",
              pol[i].name, gp, gf);
        free(lt); free(lq); free(lp); free(lr);
    }
    free(tok);
    return test_finish("test_engine_pinned");
}
