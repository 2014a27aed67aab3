/* flash_sparse.c: write a full-size DeepSeek V4 Flash GGUF the way
 * `minke mkmodel --preset flash` does, but with sparse holes for big tensors.
 *
 * Interop checks with other readers (ds4, llama.cpp; docs/interop.md) need a
 * file of Flash's exact shapes, and ds4 accepts nothing smaller. The real
 * mkmodel output is ~81 GB (q2) or ~153 GB (q4); this program makes the same
 * file through the same calls (preset, tokenizer vocab size, --experts type
 * policy, dsv4_config_write_gguf, tokjson_write_gguf, the minke.synthetic.*
 * keys, one synthetic tensor per spec) except that any tensor larger than
 * --fill-max bytes is written as a hole (reads as zeros). The header, tensor
 * table, offsets and file size are byte-identical to mkmodel's; only the
 * contents of the big tensors differ. A few MB on disk.
 *
 * --mtp writes the MTP GGUF instead (what `mkmodel --preset flash --mtp-out`
 * writes: dsv4_mtp_tensor_specs, no tokenizer). The last line printed is
 * "data_offset N" (where the tensor data starts) so that a script can compare
 * headers with a real mkmodel run (tests/t_interop_ds4.sh does).
 *
 * usage: flash_sparse OUT.gguf [--experts iq2xxs-q2k|q4k|...] [--tokenizer FILE]
 *                     [--fill-max BYTES] [--seed N] [--mtp]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/policy.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "text/tokjson.h"

static int usage(void) {
    fprintf(stderr, "usage: flash_sparse OUT.gguf [--experts NAME] [--tokenizer FILE] [--fill-max BYTES] "
                    "[--seed N] [--mtp]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *out = NULL, *tokenizer = NULL;
    uint64_t fill_max = 1ull << 20, seed = 1;
    int mtp = 0;
    convert_policy pol;
    policy_default(&pol);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mtp")) {
            mtp = 1;
            continue;
        }
        if (a[0] != '-') {
            if (out) return usage();
            out = a;
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--experts")) {
            if (policy_set_experts(&pol, v) != 0) {
                fprintf(stderr, "flash_sparse: unknown --experts '%s' (%s)\n", v, policy_experts_names);
                return 2;
            }
        } else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--fill-max")) fill_max = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 0);
        else return usage();
    }
    if (!out) return usage();

    char err[1024] = "";
    dsv4_config c;
    dsv4_config_preset(&c, "flash");
    if (tokenizer) {
        int nv = tokjson_vocab_size(tokenizer, err, sizeof err);
        if (nv < 0) {
            fprintf(stderr, "flash_sparse: %s\n", err);
            return 1;
        }
        c.n_vocab = (uint32_t)nv;
    }
    dsv4_config_derive(&c);
    if (dsv4_config_validate(&c, err, sizeof err) != 0) {
        fprintf(stderr, "flash_sparse: %s\n", err);
        return 1;
    }
    dsv4_tensor_spec *specs = NULL;
    int n = mtp ? dsv4_mtp_tensor_specs(&c, &specs) : dsv4_tensor_specs(&c, &specs);
    if (n <= 0 || policy_check(&pol, specs, n, err, sizeof err) != 0) {
        fprintf(stderr, "flash_sparse: bad tensor list: %s\n", err);
        return 1;
    }

    /* The same sequence of writer calls as synth_write_gguf (src/model/synth.c). */
    gguf_writer *w = gguf_writer_open(out, 32, err, sizeof err);
    if (!w) {
        fprintf(stderr, "flash_sparse: %s\n", err);
        return 1;
    }
    dsv4_config_write_gguf(w, &c);
    if (mtp) {
        /* like mkmodel: the MTP file uses the main file's tokenizer */
    } else if (tokenizer ? tokjson_write_gguf(w, tokenizer, NULL, err, sizeof err)
                         : toksynth_write_gguf(w, c.n_vocab, err, sizeof err)) {
        fprintf(stderr, "flash_sparse: tokenizer: %s\n", err);
        gguf_writer_abort(w);
        return 1;
    }
    gguf_w_u64(w, "minke.synthetic.seed", seed);
    gguf_w_f32(w, "minke.synthetic.damp", 1.0f);
    for (int i = 0; i < n; i++)
        gguf_w_tensor(w, specs[i].name, specs[i].n_dims, specs[i].ne, (uint32_t)policy_type(&pol, &specs[i]));
    if (gguf_writer_begin_data(w) != 0) {
        fprintf(stderr, "flash_sparse: %s\n", gguf_writer_error(w));
        gguf_writer_abort(w);
        return 1;
    }
    uint64_t filled = 0, holes = 0;
    for (int i = 0; i < n && !gguf_writer_error(w)[0]; i++) {
        int t = policy_type(&pol, &specs[i]);
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        if (nb > fill_max) {
            gguf_w_zeros(w, nb);
            holes += nb;
            continue;
        }
        void *buf = malloc(nb);
        if (!buf || synth_fill_tensor_mt(&c, &specs[i], t, seed, 1.0f, buf, 1) != 0) {
            fprintf(stderr, "flash_sparse: %s: cannot generate type %s\n", specs[i].name, quant_name(t));
            free(buf);
            gguf_writer_abort(w);
            return 1;
        }
        gguf_w_data(w, buf, nb);
        filled += nb;
        free(buf);
    }
    free(specs);
    if (gguf_writer_close(w) != 0) {
        fprintf(stderr, "flash_sparse: %s: %s\n", out, gguf_writer_error(NULL));
        return 1;
    }
    struct stat st;
    if (stat(out, &st) != 0) return 1;
    gguf_file *f = gguf_open(out, err, sizeof err);
    if (!f) {
        fprintf(stderr, "flash_sparse: minke cannot read back %s: %s\n", out, err);
        return 1;
    }
    uint64_t data_offset = f->data_offset;
    gguf_close(f);
    printf("wrote %s: %d tensors, %llu bytes (%.2f GiB), %llu bytes on disk; %llu tensor bytes synthetic, "
           "%llu holes\n",
           out, n, (unsigned long long)st.st_size, (double)st.st_size / (1ull << 30),
           (unsigned long long)st.st_blocks * 512ull, (unsigned long long)filled, (unsigned long long)holes);
    printf("data_offset %llu\n", (unsigned long long)data_offset);
    return 0;
}
