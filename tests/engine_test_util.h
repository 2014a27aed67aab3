/* engine_test_util.h: helpers shared by the engine tests (test_engine*.c):
 * converting the tiny-a fixture with the minke binary under test, reading
 * raw little-endian files, and comparing logits. Header-only on purpose
 * (each test_*.c is its own binary). */
#ifndef MINKE_ENGINE_TEST_UTIL_H
#define MINKE_ENGINE_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "minke.h"

#define TINY_A_DIR "tests/fixtures/oracle/tiny-a"

static int g_fail = 0;

#define CHECK(cond, ...) do { if (!(cond)) { g_fail++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static inline const char *tu_bin(void) {
    const char *b = getenv("MINKE_BIN");
    return b && *b ? b : "./minke";
}

static inline const char *tu_tmpdir(const char *name) {
    static char dir[1024];
    const char *b = getenv("MINKE_BUILD");
    snprintf(dir, sizeof dir, "%s/tmp", b && *b ? b : "build");
    mkdir(dir, 0755);
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
    mkdir(dir, 0755);
    return dir;
}

/* Run `minke convert SRC -o OUT ARGS`; 0 on success. */
static inline int tu_convert(const char *src, const char *out, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' %s --no-progress > /dev/null", tu_bin(), src, out, args);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static inline void *tu_read(const char *path, long *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (bytes) *bytes = n;
    return p;
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
