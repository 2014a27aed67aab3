/* cmd_convert.c: `minke convert`: an official DeepSeek V4 checkpoint directory
 * (or a GGUF) to a ds4-layout GGUF under a type policy. The work is done by
 * src/convert/convert.c; this file parses options and reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "convert/convert.h"
#include "convert/rowpool.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: minke convert INPUT -o OUT.gguf [options]\n"
            "\n"
            "INPUT is an official DeepSeek V4 checkpoint directory (config.json, *.safetensors\n"
            "[+ model.safetensors.index.json], tokenizer.json [+ tokenizer_config.json]), a single\n"
            ".safetensors file next to its config.json, or a GGUF to rewrite under another policy.\n"
            "\n"
            "  -o, --output FILE      GGUF to write (written to a temporary name, renamed at the end)\n"
            "  --mtp-out FILE         also write the checkpoint's MTP block (mtp.0.*) as an MTP GGUF\n"
            "  --experts TYPE         routed experts: %s\n"
            "                         (default iq2xxs-q2k = ds4's q2 layout; mxfp4 is lossless from FP4)\n"
            "  --layer-experts A-B=TYPE  routed experts of layers A..B as TYPE (repeatable; e.g. 37-42=q4k\n"
            "                         gives ds4's mixed q2/q4 layout)\n"
            "  --dense TYPE           attention/shared-expert/output matrices: %s (default q8_0);\n"
            "                         f32 also makes the F16 small tensors F32 (an exact F32 twin)\n"
            "  --layers N             keep only the first N layers (a smaller, valid model for quick tests)\n"
            "  --tokenizer FILE       tokenizer.json to embed (default: INPUT/tokenizer.json if present)\n"
            "  --tokenizer-config F   tokenizer_config.json (default: next to the tokenizer)\n"
            "  --no-tokenizer         write no tokenizer.* metadata\n"
            "  -t, --threads N        worker threads (default: all %d cores)\n"
            "  --progress / --no-progress   progress bar on stderr (default: when stderr is a TTY)\n"
            "  --check                check the input (every tensor, dtype, shape, the tokenizer) and\n"
            "                         print what would be written, without writing (-o not needed)\n"
            "  -v, --verbose          one line per tensor\n",
            policy_experts_names, policy_dense_names, rowpool_default_threads());
}

int cmd_convert(int argc, char **argv) {
    convert_opts o;
    convert_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG()                                                          \
    do {                                                                    \
        if (!v) {                                                           \
            fprintf(stderr, "minke convert: %s needs an argument\n", a);    \
            return 2;                                                       \
        }                                                                   \
        i++;                                                                \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            NEED_ARG();
            o.output = v;
        } else if (!strcmp(a, "-i") || !strcmp(a, "--input")) {
            NEED_ARG();
            o.input = v;
        } else if (!strcmp(a, "--mtp-out")) {
            NEED_ARG();
            o.mtp_output = v;
        } else if (!strcmp(a, "--experts")) {
            NEED_ARG();
            if (policy_set_experts(&o.policy, v) != 0) {
                fprintf(stderr, "minke convert: unknown --experts '%s' (expected %s)\n", v, policy_experts_names);
                return 2;
            }
        } else if (!strcmp(a, "--layer-experts")) {
            NEED_ARG();
            if (policy_add_layer_experts(&o.policy, v) != 0) {
                fprintf(stderr, "minke convert: bad --layer-experts '%s' (expected A-B=TYPE, TYPE one of %s)\n", v,
                        policy_experts_names);
                return 2;
            }
        } else if (!strcmp(a, "--dense")) {
            NEED_ARG();
            if (policy_set_dense(&o.policy, v) != 0) {
                fprintf(stderr, "minke convert: unknown --dense '%s' (expected %s)\n", v, policy_dense_names);
                return 2;
            }
        } else if (!strcmp(a, "--layers")) {
            NEED_ARG();
            o.max_layers = atoi(v);
            if (o.max_layers <= 0) {
                fprintf(stderr, "minke convert: --layers needs a positive count\n");
                return 2;
            }
        } else if (!strcmp(a, "--tokenizer")) {
            NEED_ARG();
            o.tokenizer_json = v;
        } else if (!strcmp(a, "--tokenizer-config")) {
            NEED_ARG();
            o.tokenizer_config = v;
        } else if (!strcmp(a, "--check")) {
            o.check_only = 1;
        } else if (!strcmp(a, "--no-tokenizer")) {
            o.no_tokenizer = 1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEED_ARG();
            o.n_threads = atoi(v);
        } else if (!strcmp(a, "--progress")) {
            o.progress = 1;
        } else if (!strcmp(a, "--no-progress")) {
            o.progress = 0;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "minke convert: unknown option '%s' (see minke convert --help)\n", a);
            return 2;
        } else if (!o.input) {
            o.input = a;
        } else {
            fprintf(stderr, "minke convert: unexpected argument '%s'\n", a);
            return 2;
        }
#undef NEED_ARG
    }
    if (!o.input || (!o.output && !o.check_only)) {
        usage(stderr);
        return 2;
    }
    char err[1024] = "";
    double t0 = progress_now();
    if (convert_model(&o, err, sizeof err) != 0) {
        fprintf(stderr, "minke convert: %s\n", err);
        return 1;
    }
    struct stat st;
    double secs = progress_now() - t0;
    if (!o.check_only && stat(o.output, &st) == 0)
        fprintf(stderr, "minke convert: wrote %s (%.1f MB) in %.2f s\n", o.output, (double)st.st_size / 1e6, secs);
    return 0;
}
