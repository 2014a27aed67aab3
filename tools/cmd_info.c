/* cmd_info.c: `minke info FILE` prints a GGUF's metadata, tensor table and
 * per-type byte totals, then says whether it is a loadable DeepSeek V4 model
 * (and whether ds4 itself would load it).
 *
 * Exit status: 0 when the container parses (even if it is not a DeepSeek V4
 * model; the verdict line says why), 1 when it cannot be read or is corrupt,
 * 2 for a usage error.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/quant.h"

#define DEFAULT_TENSOR_ROWS 24

static void usage(FILE *out) {
    fprintf(out,
            "usage: minke info FILE [--tensors] [--full]\n"
            "  Prints a GGUF's metadata, tensor table and per-type totals, and whether it is a\n"
            "  loadable DeepSeek V4 model.\n"
            "  --tensors  list every tensor (default: the first %d)\n"
            "  --full     print long arrays in full (default: summarised)\n",
            DEFAULT_TENSOR_ROWS);
}

/* A string with control bytes escaped, cut at `max` bytes. */
static void print_str(const char *p, uint64_t n, uint64_t max) {
    putchar('"');
    for (uint64_t i = 0; i < n && i < max; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\t') fputs("\\t", stdout);
        else if (ch < 32 || ch == 127) printf("\\x%02x", ch);
        else putchar(ch);
    }
    putchar('"');
    if (n > max) printf("...(%" PRIu64 " bytes)", n);
}

static void print_scalar(uint32_t type, const uint8_t *p) {
    switch (type) {
    case GGUF_U8: printf("%u", *p); break;
    case GGUF_I8: printf("%d", (int8_t)*p); break;
    case GGUF_BOOL: fputs(*p ? "true" : "false", stdout); break;
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); printf("%u", v); break; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); printf("%d", v); break; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); printf("%u", v); break; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); printf("%d", v); break; }
    case GGUF_F32: { float v; memcpy(&v, p, 4); printf("%.9g", v); break; }
    case GGUF_U64: { uint64_t v; memcpy(&v, p, 8); printf("%" PRIu64, v); break; }
    case GGUF_I64: { int64_t v; memcpy(&v, p, 8); printf("%" PRId64, v); break; }
    case GGUF_F64: { double v; memcpy(&v, p, 8); printf("%.17g", v); break; }
    default: fputs("?", stdout);
    }
}

static void print_kv(const gguf_kv *kv, int full) {
    fputs("  ", stdout);
    fwrite(kv->key.ptr, 1, kv->key.len, stdout);
    if (kv->type == GGUF_STRING) {
        uint64_t len;
        memcpy(&len, kv->data, 8);
        fputs(" = ", stdout);
        print_str((const char *)kv->data + 8, len, full ? len : 200);
        putchar('\n');
        return;
    }
    if (kv->type != GGUF_ARRAY) {
        printf(" (%s) = ", gguf_vtype_name(kv->type));
        print_scalar(kv->type, kv->data);
        putchar('\n');
        return;
    }
    printf(" = %s[%" PRIu64 "]", gguf_vtype_name(kv->arr_type), kv->arr_n);
    uint64_t shown = full ? kv->arr_n : 0;
    size_t es = gguf_vtype_size(kv->arr_type);
    if (kv->arr_type == GGUF_STRING) {
        if (!full) shown = kv->arr_n <= 8 ? kv->arr_n : 3;
        const uint8_t *p = kv->data, *end = kv->data + kv->data_len;
        fputs(": [", stdout);
        for (uint64_t i = 0; i < shown && end - p >= 8; i++) {
            uint64_t len;
            memcpy(&len, p, 8);
            p += 8;
            if (len > (uint64_t)(end - p)) break;
            if (i) fputs(", ", stdout);
            print_str((const char *)p, len, full ? len : 60);
            p += len;
        }
        if (shown < kv->arr_n) printf(", ... (%" PRIu64 " strings)", kv->arr_n);
        fputs("]\n", stdout);
    } else if (es) {
        if (!full) shown = kv->arr_n <= 64 ? kv->arr_n : 8;
        fputs(": [", stdout);
        for (uint64_t i = 0; i < shown; i++) {
            if (i) fputs(", ", stdout);
            print_scalar(kv->arr_type, kv->data + i * es);
        }
        if (shown < kv->arr_n) printf(", ... (%" PRIu64 " values)", kv->arr_n);
        fputs("]\n", stdout);
    } else {
        printf(" (nested, %" PRIu64 " bytes)\n", kv->data_len);
    }
}

static void shape_str(const gguf_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < t->n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void human_bytes(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(buf, n, "%.2f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%" PRIu64 " B", b);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int all_tensors = 0, full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensors")) all_tensors = 1;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "minke info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "minke info: one FILE only\n");
            return 2;
        }
    }
    if (!path) { usage(stderr); return 2; }

    char err[512];
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "minke info: %s\n", err);
        return 1;
    }
    char hb[32];
    human_bytes(f->size, hb, sizeof hb);
    printf("file: %s (%" PRIu64 " bytes, %s)\n", path, f->size, hb);
    printf("GGUF v%u, alignment %u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, data at offset %" PRIu64 "\n\n",
           f->version, f->alignment, f->n_kv, f->n_tensors, f->data_offset);

    printf("metadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) print_kv(&f->kv[i], full);

    printf("\ntensors%s:\n", all_tensors || f->n_tensors <= DEFAULT_TENSOR_ROWS ? "" : " (first rows; --tensors for all)");
    printf("  %-44s %-8s %-22s %14s\n", "name", "type", "shape", "bytes");
    uint64_t type_count[GGML_TYPE_COUNT + 1] = {0}, type_bytes[GGML_TYPE_COUNT + 1] = {0}, total = 0;
    uint64_t unknown = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int known = t->type < GGML_TYPE_COUNT && quant_get((int)t->type) != NULL;
        uint32_t slot = t->type < GGML_TYPE_COUNT ? t->type : GGML_TYPE_COUNT;
        type_count[slot]++;
        type_bytes[slot] += t->nbytes;
        total += t->nbytes;
        if (!known) unknown++;
        if (all_tensors || i < DEFAULT_TENSOR_ROWS) {
            char sh[96], ty[24];
            shape_str(t, sh, sizeof sh);
            if (known) snprintf(ty, sizeof ty, "%s", quant_name((int)t->type));
            else snprintf(ty, sizeof ty, "type%u?", t->type);
            printf("  %-44s %-8s %-22s %14" PRIu64 "\n", t->cname, ty, sh, t->nbytes);
        }
    }
    if (!all_tensors && f->n_tensors > DEFAULT_TENSOR_ROWS)
        printf("  ... %" PRIu64 " more\n", f->n_tensors - DEFAULT_TENSOR_ROWS);

    printf("\nper type:\n");
    for (uint32_t ty = 0; ty <= GGML_TYPE_COUNT; ty++) {
        if (!type_count[ty]) continue;
        human_bytes(type_bytes[ty], hb, sizeof hb);
        printf("  %-8s %6" PRIu64 " tensors %16" PRIu64 " bytes (%s)\n",
               ty < GGML_TYPE_COUNT ? quant_name((int)ty) : "other", type_count[ty], type_bytes[ty], hb);
    }
    human_bytes(total, hb, sizeof hb);
    printf("  %-8s %6" PRIu64 " tensors %16" PRIu64 " bytes (%s)\n", "total", f->n_tensors, total, hb);
    if (unknown) printf("  (%" PRIu64 " tensors of types unknown to minke: size not counted)\n", unknown);

    /* verdict */
    dsv4_config c;
    printf("\n");
    if (!gguf_find_kv(f, "deepseek4.block_count") && gguf_find_tensor(f, "mtp.0.e_proj.weight")) {
        /* an MTP support file carries no model metadata: its shapes follow the main model's */
        dsv4_config_preset(&c, "flash");
        if (dsv4_check_mtp_tensors(f, &c, err, sizeof err) == 0)
            printf("DeepSeek V4 MTP file: matches the Flash layout (use it next to a Flash model)\n");
        else
            printf("DeepSeek V4 MTP file: not Flash-shaped (%s); its shapes are checked against the main model at load\n", err);
        gguf_close(f);
        return 0;
    }
    if (dsv4_config_from_gguf(f, &c, err, sizeof err) != 0 || dsv4_check_tensors(f, &c, err, sizeof err) != 0) {
        printf("not loadable: %s\n", err);
        gguf_close(f);
        return 0;
    }
    int tok = dsv4_check_tokenizer(f, &c, err, sizeof err);
    if (tok < 0) {
        printf("not loadable: %s\n", err);
        gguf_close(f);
        return 0;
    }
    char sum[512];
    dsv4_config_summary(&c, sum, sizeof sum);
    printf("loadable DeepSeek V4 model: %s\n", sum);
    printf("tokenizer: %s\n", tok == 1 ? "ok" : "none (token ids only)");
    if (dsv4_check_ds4_compat(f, &c, err, sizeof err) == 0) printf("ds4: compatible\n");
    else printf("ds4: not compatible (%s)\n", err);
    gguf_close(f);
    return 0;
}
