/* official.h: the official DeepSeek V4 checkpoint as a source of GGUF tensors.
 *
 * Maps each GGUF tensor of the ds4 layout to its official safetensors
 * name(s) (spec model.md §4.5), checks dtype and shape, and decodes rows to
 * f32: BF16/F16/F32 directly, FP8 E4M3 with E8M0 128x128 block scales, packed
 * FP4 E2M1 experts with E8M0 per-32 scales; tid2eid I64 -> I32. Also builds a
 * dsv4_config from the checkpoint's config.json (official inference keys or
 * Hugging Face DeepseekV4Config keys).
 */
#ifndef MINKE_CONVERT_OFFICIAL_H
#define MINKE_CONVERT_OFFICIAL_H

#include <stddef.h>
#include <stdint.h>

#include "convert/safetensors.h"
#include "model/config.h"

enum official_fmt {
    OFF_PLAIN = 0,  /* F32 / F16 / BF16 / F64 values */
    OFF_FP8_BLOCK,  /* F8_E4M3 + <name>.scale (E8M0 or F32), one scale per 128x128 block */
    OFF_FP4,        /* I8/U8 two E2M1 codes per byte + <name>.scale (E8M0) per 32 inputs */
    OFF_INT,        /* I64 / I32 (tid2eid) */
};

typedef struct official_part {
    const st_tensor *w, *scale;
    int fmt;
} official_part;

typedef struct official_src {
    const dsv4_tensor_spec *spec;
    int n_parts;            /* 1, or n_expert for routed experts (one official tensor per expert) */
    int64_t rows_per_part;  /* rows of ne0 elements in one part */
    official_part *parts;
} official_src;

/* config.json -> config (validated). 0 ok, -1 with err ("not a DeepSeek V4 config: ..."). */
int official_config_load(const char *config_json, dsv4_config *c, char *err, size_t errlen);

/* Official name of a GGUF tensor (expert e for routed experts, else ignored). 0 ok, -1 unmapped. */
int official_name(const dsv4_tensor_spec *s, int expert, char *buf, size_t n);
/* Find and check the source tensors; 0 ok, -1 with err naming the tensor and the problem. */
int official_resolve(const st_set *st, const dsv4_tensor_spec *s, official_src *src, char *err, size_t errlen);
void official_src_free(official_src *src);
/* Tell the kernel the source pages can go. */
void official_release(const st_set *st, const official_src *src);

/* Decode rows [r0, r0+n) (rows of ne0 elements, experts concatenated) to f32. Thread-safe. */
void official_read_rows(const official_src *src, int64_t r0, int64_t n, float *dst);
/* For an FP4 part: the packed bytes and scale bytes of row r (NULL if the row is not FP4). */
int official_fp4_row(const official_src *src, int64_t r, const uint8_t **packed, const uint8_t **scales);
/* tid2eid: the whole table as I32 [K, V]; -1 with err if a value is outside [0, n_expert). */
int official_read_i32(const official_src *src, uint32_t n_expert, int32_t *dst, char *err, size_t errlen);

#endif
