/* engine_test_util.h: what the engine tests (test_engine*.c) share on top of
 * tests/testutil.h: converting the tiny-a fixture with the minke binary under
 * test, opening a model, running a prefill, and comparing logits.
 * Header-only on purpose (each test_*.c is its own binary). */
#ifndef MINKE_ENGINE_TEST_UTIL_H
#define MINKE_ENGINE_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "minke.h"
#include "testutil.h"

#define TINY_A_DIR "tests/fixtures/oracle/tiny-a"

static inline const char *tu_bin(void) {
    const char *b = getenv("MINKE_BIN");
    return b && *b ? b : "./minke";
}

/* Run `minke convert SRC -o OUT ARGS`; 0 on success. */
static inline int tu_convert(const char *src, const char *out, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' %s --no-progress > /dev/null", tu_bin(), src, out, args);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static inline minke_model *tu_open(const char *path, int sims) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = path;
    p.sims = sims;
    const char *th = getenv("MINKE_TEST_THREADS");
    p.n_threads = th ? atoi(th) : 2;
    minke_model *m = minke_model_open(&p);
    if (!m) fprintf(stderr, "open %s: %s\n", path, minke_last_error());
    return m;
}

static inline float tu_maxabs(const float *a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) if (fabsf(a[i]) > m) m = fabsf(a[i]);
    return m;
}

static inline float tu_maxdiff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d;   /* NaN propagates as a failure */
    }
    return m;
}

static inline int tu_argmax(const float *a, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (a[i] > a[b]) b = i;
    return b;
}

/* Full-prefill logits for tokens on a fresh session; NULL on error. */
static inline float *tu_logits(minke_model *m, const int32_t *tok, int T, int chunk) {
    int V = minke_model_get_info(m)->n_vocab;
    minke_session *s = minke_session_create(m, T);
    if (!s) return NULL;
    float *l = malloc(sizeof(float) * (size_t)T * V);
    minke_session_set_chunk(s, chunk);
    if (minke_prefill(s, tok, T, l) != 0) { fprintf(stderr, "prefill: %s\n", minke_last_error()); free(l); l = NULL; }
    minke_session_free(s);
    return l;
}

#endif
