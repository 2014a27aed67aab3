/* testutil.h: what the unit tests (tests/test_*.c) share: the CHECK macro
 * and its failure count, the closing summary, a private temp directory
 * under $MINKE_BUILD/tmp, whole-file reading and a reproducible random
 * source.
 *
 * Header-only on purpose: every test_*.c is its own binary and links only
 * libminke, so there is no test library to build. Everything is static
 * inline (state lives in function-local statics) so that a test using only
 * part of it compiles without unused warnings.
 */
#ifndef MINKE_TESTUTIL_H
#define MINKE_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline int *test_failure_count(void) {
    static int count;
    return &count;
}

/* Count a failure and say where, but keep going: one run shows every broken
 * case, not just the first. */
#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (!(cond)) {                                                   \
            (*test_failure_count())++;                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, "\n");                                       \
        }                                                                \
    } while (0)

static inline char *test_tmpdir_slot(void) {
    static char dir[512];
    return dir;
}

/* A fresh directory of this run's own (parallel builds must not collide),
 * made on first use and removed by test_finish. */
static inline const char *test_tmpdir(void) {
    char *dir = test_tmpdir_slot();
    if (dir[0]) return dir;
    const char *b = getenv("MINKE_BUILD");
    char base[400];
    snprintf(base, sizeof base, "%s/tmp", b && *b ? b : "/tmp");
    mkdir(base, 0755);
    snprintf(dir, 512, "%s/test.XXXXXX", base);
    if (!mkdtemp(dir)) {
        snprintf(dir, 512, "/tmp/test.XXXXXX");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    }
    return dir;
}

/* buf = "<tmpdir>/<name>" */
static inline char *test_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", test_tmpdir(), name);
    return buf;
}

/* Remove the temp directory, print the summary, give main's exit status. */
static inline int test_finish(const char *test_name) {
    char *dir = test_tmpdir_slot();
    if (dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", test_name, dir);
        dir[0] = 0;
    }
    int failures = *test_failure_count();
    if (failures) {
        fprintf(stderr, "%s: %d failures\n", test_name, failures);
        return 1;
    }
    printf("%s: all passed\n", test_name);
    return 0;
}

/* The whole file, malloc'd (never NULL for an empty file), or NULL. */
static inline uint8_t *test_read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    uint8_t *b = NULL;
    long n = -1;
    if (fseek(fp, 0, SEEK_END) == 0) n = ftell(fp);
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0) b = malloc(n ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    fclose(fp);
    if (b) *size = (size_t)n;
    return b;
}

static inline int test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline uint32_t *test_rand_state(void) {
    static uint32_t state = 1;
    return &state;
}
static inline void test_rand_seed(uint32_t seed) { *test_rand_state() = seed; }
/* 24 random bits from a fixed LCG: the same data on every machine and libc. */
static inline uint32_t test_rand(void) {
    uint32_t *s = test_rand_state();
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
/* Uniform in [0, 1). */
static inline float test_randf(void) { return (float)test_rand() / 16777216.0f; }

#endif
