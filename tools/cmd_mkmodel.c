/* cmd_mkmodel.c: `minke mkmodel`: write a random but valid DeepSeek V4 GGUF of
 * any dimensions and type policy (src/model/synth.c generates the weights).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "convert/policy.h"
#include "convert/rowpool.h"
#include "model/config.h"
#include "model/synth.h"
#include "text/tokjson.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: minke mkmodel --preset tiny|small|flash -o FILE.gguf [options]\n"
            "\n"
            "Writes a random DeepSeek V4 model (weights scaled so activations stay realistic).\n"
            "Quantized tensors are random valid blocks, generated directly (not quantized floats).\n"
            "\n"
            "  --preset NAME          tiny (like the tiny-a oracle), small, flash (default tiny)\n"
            "  -o, --output FILE      GGUF to write\n"
            "  --experts TYPE         routed experts: %s (default iq2xxs-q2k)\n"
            "  --layer-experts A-B=TYPE  routed experts of layers A..B as TYPE (repeatable)\n"
            "  --dense TYPE           dense matrices: %s (default q8_0; f32 also makes small tensors F32)\n"
            "  --tokenizer FILE       embed this tokenizer.json (vocab = its size) instead of a synthetic\n"
            "                         byte-level vocabulary\n"
            "  --seed N               random seed (default 1); same seed, same bytes\n"
            "  --mtp-out FILE         also write a synthetic MTP block (spec §4.4) as its own GGUF\n"
            "  --damp F               scale the attention output and FFN down projections by F (default 1)\n"
            "  -t, --threads N        worker threads (default: all %d cores; the bytes do not depend on it)\n"
            "  --holes-above BYTES    write tensors bigger than BYTES as zeros (sparse holes): a full-size\n"
            "                         file with the real header for loader tests, a few MB on disk\n"
            "  --progress / --no-progress\n"
            "dimension overrides (after the preset):\n"
            "  --layers N --vocab N --dim N --heads N --head-dim N --rope-dim N --q-lora N --o-lora N\n"
            "  --o-groups N --n-experts N --experts-used N --expert-ff N --hash-layers N --window N\n"
            "  --index-heads N --index-head-dim N --index-topk N --hca-ratio N --swiglu-limit F\n",
            policy_experts_names, policy_dense_names, rowpool_default_threads());
}

typedef struct {
    const char *flag;
    size_t offset;
} dim_flag;

#define DIM(flag, field) {flag, offsetof(dsv4_config, field)}
static const dim_flag dim_flags[] = {
    DIM("--vocab", n_vocab), DIM("--dim", n_embd), DIM("--heads", n_head), DIM("--head-dim", head_dim),
    DIM("--rope-dim", rope_dim), DIM("--q-lora", q_lora_rank), DIM("--o-lora", o_lora_rank),
    DIM("--o-groups", o_groups), DIM("--n-experts", n_expert), DIM("--experts-used", n_expert_used),
    DIM("--expert-ff", expert_ff), DIM("--hash-layers", n_hash_layer), DIM("--window", sliding_window),
    DIM("--index-heads", indexer_n_head), DIM("--index-head-dim", indexer_head_dim),
    DIM("--index-topk", indexer_top_k),
};

static int parse_u32(const char *s, uint32_t *out) {
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v > 0xFFFFFFFFul) return -1;
    *out = (uint32_t)v;
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    const char *preset = "tiny", *out = NULL, *tokenizer = NULL, *mtp_out = NULL;
    convert_policy pol;
    policy_default(&pol);
    uint64_t seed = 1, holes_above = 0;
    float damp = 1.0f, swiglu = -1;
    int n_threads = 0, prog = -1;
    uint32_t layers = 0, hca = 0;
    /* dimension overrides are applied after the preset, in order */
    uint32_t dim_val[sizeof dim_flags / sizeof dim_flags[0]];
    int dim_set[sizeof dim_flags / sizeof dim_flags[0]] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--progress")) { prog = 1; continue; }
        if (!strcmp(a, "--no-progress")) { prog = 0; continue; }
        if (a[0] != '-') {
            fprintf(stderr, "minke mkmodel: unexpected argument '%s'\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "minke mkmodel: %s needs an argument (see --help)\n", a);
            return 2;
        }
        i++;
        int bad = 0, known = 1;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--mtp-out")) mtp_out = v;
        else if (!strcmp(a, "--holes-above")) {
            char *end;
            holes_above = strtoull(v, &end, 0);
            bad = !*v || *end;
        }
        else if (!strcmp(a, "--experts")) bad = policy_set_experts(&pol, v);
        else if (!strcmp(a, "--dense")) bad = policy_set_dense(&pol, v);
        else if (!strcmp(a, "--layer-experts")) bad = policy_add_layer_experts(&pol, v);
        else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(v, &end, 0);
            bad = !*v || *end;
        } else if (!strcmp(a, "--damp")) {
            char *end;
            damp = strtof(v, &end);
            bad = !*v || *end || !(damp >= 0);
        } else if (!strcmp(a, "--swiglu-limit")) {
            char *end;
            swiglu = strtof(v, &end);
            bad = !*v || *end || !(swiglu >= 0);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--layers")) bad = parse_u32(v, &layers) || layers == 0 || layers > DSV4_MAX_LAYERS;
        else if (!strcmp(a, "--hca-ratio")) bad = parse_u32(v, &hca) || hca <= 4;
        else {
            known = 0;
            for (size_t k = 0; k < sizeof dim_flags / sizeof dim_flags[0]; k++)
                if (!strcmp(a, dim_flags[k].flag)) {
                    known = 1;
                    dim_set[k] = 1;
                    bad = parse_u32(v, &dim_val[k]);
                }
        }
        if (!known) {
            fprintf(stderr, "minke mkmodel: unknown option '%s' (see minke mkmodel --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "minke mkmodel: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    dsv4_config c;
    if (dsv4_config_preset(&c, preset) != 0) {
        fprintf(stderr, "minke mkmodel: unknown preset '%s' (tiny, small, flash)\n", preset);
        return 2;
    }
    uint32_t preset_hca = 0;
    for (uint32_t il = 0; il < c.n_layer; il++)
        if (c.compress_ratio[il] > 4) { preset_hca = c.compress_ratio[il]; break; }
    if (!hca) hca = preset_hca ? preset_hca : 128;
    if (layers || hca != preset_hca) {
        /* re-lay the Flash schedule: 2 sliding layers, then CSA (even) / HCA (odd) */
        if (layers) c.n_layer = layers;
        for (uint32_t il = 0; il < c.n_layer; il++) {
            c.compress_ratio[il] = il < 2 ? 0 : il % 2 == 0 ? 4 : hca;
            c.swiglu_clamp[il] = c.swiglu_clamp[0] > 0 ? c.swiglu_clamp[0] : 10.0f;
        }
        if (c.n_hash_layer > c.n_layer) c.n_hash_layer = c.n_layer;
    }
    if (swiglu >= 0)
        for (uint32_t il = 0; il < c.n_layer; il++) c.swiglu_clamp[il] = swiglu;
    for (size_t k = 0; k < sizeof dim_flags / sizeof dim_flags[0]; k++)
        if (dim_set[k]) *(uint32_t *)((char *)&c + dim_flags[k].offset) = dim_val[k];
    char err[1024] = "";
    if (tokenizer) {
        int nv = tokjson_vocab_size(tokenizer, err, sizeof err);
        if (nv < 0) {
            fprintf(stderr, "minke mkmodel: %s\n", err);
            return 1;
        }
        int vocab_given = 0;
        for (size_t k = 0; k < sizeof dim_flags / sizeof dim_flags[0]; k++)
            if (dim_set[k] && dim_flags[k].offset == offsetof(dsv4_config, n_vocab)) vocab_given = 1;
        if (vocab_given && c.n_vocab != (uint32_t)nv) {
            fprintf(stderr, "minke mkmodel: --vocab %u disagrees with the tokenizer's %d tokens\n", c.n_vocab, nv);
            return 2;
        }
        c.n_vocab = (uint32_t)nv;
    } else if (c.n_vocab < TOKSYNTH_MIN_VOCAB) {
        fprintf(stderr, "minke mkmodel: the synthetic vocabulary needs --vocab >= %d\n", TOKSYNTH_MIN_VOCAB);
        return 2;
    }
    dsv4_config_derive(&c);
    if (dsv4_config_validate(&c, err, sizeof err) != 0) {
        fprintf(stderr, "minke mkmodel: invalid dimensions: %s\n", err);
        return 2;
    }
    dsv4_tensor_spec *specs = NULL;
    int n = dsv4_tensor_specs(&c, &specs);
    if (n <= 0) {
        fprintf(stderr, "minke mkmodel: cannot build the tensor list\n");
        return 1;
    }
    if (policy_check(&pol, specs, n, err, sizeof err) != 0) {
        fprintf(stderr, "minke mkmodel: %s\n", err);
        free(specs);
        return 2;
    }
    int *types = malloc((size_t)n * sizeof *types);
    if (!types) {
        free(specs);
        return 1;
    }
    for (int i = 0; i < n; i++) types[i] = policy_type(&pol, &specs[i]);
    free(specs);
    synth_file_opts so = {types, seed, damp, tokenizer, n_threads, prog, 0, holes_above};
    double t0 = progress_now();
    int rc = synth_write_gguf(out, &c, &so, err, sizeof err);
    double secs = progress_now() - t0;
    free(types);
    if (rc != 0) {
        fprintf(stderr, "minke mkmodel: %s\n", err);
        return 1;
    }
    if (mtp_out) {
        /* the MTP block: ds4's MTP file types (F32 plain tensors) with the policy's dense and experts */
        int nm = dsv4_mtp_tensor_specs(&c, &specs);
        int *mtypes = nm > 0 ? malloc((size_t)nm * sizeof *mtypes) : NULL;
        if (!mtypes) {
            fprintf(stderr, "minke mkmodel: cannot build the MTP tensor list\n");
            free(specs);
            return 1;
        }
        if (policy_check(&pol, specs, nm, err, sizeof err) != 0) {
            fprintf(stderr, "minke mkmodel: MTP: %s\n", err);
            free(specs);
            free(mtypes);
            return 2;
        }
        for (int i = 0; i < nm; i++) mtypes[i] = policy_type(&pol, &specs[i]);
        free(specs);
        synth_file_opts mo = {mtypes, seed, damp, NULL, n_threads, prog, 1, holes_above};
        rc = synth_write_gguf(mtp_out, &c, &mo, err, sizeof err);
        free(mtypes);
        if (rc != 0) {
            fprintf(stderr, "minke mkmodel: MTP: %s\n", err);
            return 1;
        }
        fprintf(stderr, "minke mkmodel: wrote the MTP block to %s\n", mtp_out);
    }
    char summ[512];
    dsv4_config_summary(&c, summ, sizeof summ);
    struct stat st;
    double mb = stat(out, &st) == 0 ? (double)st.st_size / 1e6 : 0;
    fprintf(stderr, "minke mkmodel: wrote %s (%.1f MB, %s) in %.2f s (%.0f MB/s)\n  %s\n", out, mb, preset, secs,
            secs > 0 ? mb / secs : 0, summ);
    return 0;
}
