/* test_gguf_image.c: a model opened from a caller-owned GGUF memory image
 * (minke_model_params.gguf_image, built by synth_build_image) is the same
 * model as the file synth_write_gguf writes: the image is byte-identical to
 * the file, and prefill + decode logits opened both ways are bit-identical.
 * This is the path the full-size Flash CPU-vs-CUDA check (tests/cuda/
 * flash_taps) takes on a machine whose disk cannot hold the model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minke.h"
#include "model/config.h"
#include "model/synth.h"
#include "testutil.h"

static unsigned char *read_all(const char *path, uint64_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    fclose(fp);
    *len = (uint64_t)n;
    return b;
}

/* prompt then 3 greedy decode steps; all logits of every step into out */
static int run_model(const minke_model_params *p, float *out, int V) {
    minke_model *m = minke_model_open(p);
    if (!m) { fprintf(stderr, "open: %s\n", minke_last_error()); return -1; }
    minke_session *s = minke_session_create(m, 64);
    int rc = -1;
    int32_t prompt[5] = {1, 17, 300, 42, 999};
    if (!s || minke_prefill(s, prompt, 5, NULL) != 0) goto out;
    for (int step = 0; step < 4; step++) {
        const float *l = minke_logits(s);
        memcpy(out + (size_t)step * V, l, sizeof(float) * (size_t)V);
        int best = 0;
        for (int i = 1; i < V; i++) if (l[i] > l[best]) best = i;
        if (step < 3 && minke_decode(s, best) != 0) goto out;
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "run: %s\n", minke_last_error());
    minke_session_free(s);
    minke_model_close(m);
    return rc;
}

int main(void) {
    dsv4_config c;
    CHECK(dsv4_config_preset(&c, "tiny") == 0, "tiny preset");
    synth_file_opts o = {NULL, 7, 0.5f, NULL, 2, 0, 0, 0};
    char err[512], path[600];
    test_path(path, sizeof path, "tiny.gguf");
    CHECK(synth_write_gguf(path, &c, &o, err, sizeof err) == 0, "write: %s", err);
    void *img = NULL;
    uint64_t img_size = 0;
    CHECK(synth_build_image(&c, &o, &img, &img_size, err, sizeof err) == 0, "image: %s", err);
    uint64_t flen = 0;
    unsigned char *file = read_all(path, &flen);
    CHECK(file != NULL, "read %s", path);
    if (!img || !file) return test_finish("test_gguf_image");
    CHECK(flen == img_size, "image size %llu, file size %llu", (unsigned long long)img_size, (unsigned long long)flen);
    CHECK(flen == img_size && memcmp(file, img, flen) == 0, "image bytes differ from the file");
    free(file);

    int V = (int)c.n_vocab;
    float *a = calloc((size_t)4 * V, sizeof(float)), *b = calloc((size_t)4 * V, sizeof(float));
    minke_model_params p;
    minke_model_params_default(&p);
    p.n_threads = 2;
    p.path = path;
    CHECK(run_model(&p, a, V) == 0, "file model runs");
    p.path = NULL;
    p.gguf_image = img;
    p.gguf_image_size = img_size;
    CHECK(run_model(&p, b, V) == 0, "image model runs");
    CHECK(memcmp(a, b, sizeof(float) * (size_t)4 * V) == 0, "logits from the image differ from the file's");
    int nonzero = 0;
    for (int i = 0; i < 4 * V; i++) nonzero += a[i] != 0.0f;
    CHECK(nonzero > V, "logits are mostly zero (%d nonzero)", nonzero);

    /* a damaged image is refused with an error, not a crash */
    p.gguf_image_size = 100;
    minke_model *bad = minke_model_open(&p);
    CHECK(bad == NULL && strlen(minke_last_error()) > 0, "truncated image must be refused");
    minke_model_close(bad);

    free(a);
    free(b);
    synth_free_image(img, img_size);
    return test_finish("test_gguf_image");
}
