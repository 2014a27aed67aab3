/* synth_image.c: a synthetic GGUF built directly in memory.
 *
 * A full-size Flash q2 model (81 GB) fits in RAM but not on the disk of the
 * GPU machine, and both backends can open a caller-owned image
 * (minke_model_params.gguf_image). The layout comes from the file writer run
 * with every tensor a sparse hole (a few MB of real bytes), so header and
 * offsets are exactly those of synth_write_gguf; the tensors are then filled
 * in place on all cores. Same bytes as the file, no second copy.
 */
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"

int synth_build_image(const dsv4_config *c, const synth_file_opts *o, void **image, uint64_t *size, char *err,
                      size_t errlen) {
    *image = NULL;
    *size = 0;
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/minke-image-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        gguf_set_err(err, errlen, "%s: cannot create a temporary directory", dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/layout.gguf", dir);
    synth_file_opts lo = *o;
    lo.holes_above = 1; /* every tensor a hole: only the header is real */
    lo.progress = 0;
    int rc = -1;
    gguf_file *f = NULL;
    dsv4_tensor_spec *specs = NULL;
    uint8_t *img = MAP_FAILED;
    if (synth_write_gguf(path, c, &lo, err, errlen) != 0) goto out;
    f = gguf_open(path, err, errlen);
    if (!f) goto out;
    img = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (img == MAP_FAILED) {
        gguf_set_err(err, errlen, "cannot map %llu bytes of memory for the image", (unsigned long long)f->size);
        goto out;
    }
    memcpy(img, f->map, f->data_offset);
    int n = o->mtp ? dsv4_mtp_tensor_specs(c, &specs) : dsv4_tensor_specs(c, &specs);
    if (n <= 0 || (uint64_t)n != f->n_tensors) {
        gguf_set_err(err, errlen, "tensor list does not match the layout");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, specs[i].name);
        if (!t) {
            gguf_set_err(err, errlen, "%s: missing from the layout", specs[i].name);
            goto out;
        }
        int type = o->types ? o->types[i] : specs[i].ds4_type;
        if (synth_fill_tensor_mt(c, &specs[i], type, o->seed, o->damp, img + f->data_offset + t->offset,
                                 o->n_threads) != 0) {
            gguf_set_err(err, errlen, "%s: cannot generate this type", specs[i].name);
            goto out;
        }
    }
    *image = img;
    *size = f->size;
    img = MAP_FAILED;
    rc = 0;
out:
    if (img != MAP_FAILED) munmap(img, f->size);
    free(specs);
    gguf_close(f);
    unlink(path);
    rmdir(dir);
    return rc;
}

void synth_free_image(void *image, uint64_t size) {
    if (image) munmap(image, size);
}
