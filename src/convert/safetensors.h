/* safetensors.h: read-only access to one safetensors file or a sharded
 * checkpoint directory (model.safetensors.index.json or every *.safetensors).
 *
 * Files are mmapped; a tensor's bytes are used in place. Every header field is
 * checked against the file size so a corrupt or truncated shard gives one
 * clear error instead of a bad read. The converter streams tensor by tensor
 * and calls st_release() afterwards so a 150 GB checkpoint does not pin the
 * page cache.
 */
#ifndef MINKE_SAFETENSORS_H
#define MINKE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype {
    ST_UNKNOWN = 0,
    ST_F64, ST_F32, ST_F16, ST_BF16,
    ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
    ST_F8_E4M3, ST_F8_E5M2, ST_F8_E8M0
};

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    int dtype;                 /* enum st_dtype */
    char dtype_name[16];       /* as written in the header (for messages) */
    int n_dims;
    uint64_t shape[ST_MAX_DIMS]; /* safetensors (row-major, outermost first) order */
    uint64_t nel;
    const uint8_t *data;
    uint64_t nbytes;
    int shard;
    int used;                  /* scratch flag for callers */
} st_tensor;

typedef struct st_shard {
    char *path;
    uint8_t *map;
    uint64_t size;
} st_shard;

typedef struct st_set {
    st_shard *shards;
    int n_shards;
    st_tensor *tensors;        /* sorted by name */
    int64_t n_tensors;
    uint64_t total_bytes;      /* sum of tensor data bytes */
} st_set;

/* Element size in bytes of a dtype (0 for unknown). */
size_t st_dtype_size(int dtype);
const char *st_dtype_name(int dtype);

/* One .safetensors file. NULL on error with one sentence in err. */
st_set *st_open_file(const char *path, char *err, size_t errlen);
/* A checkpoint directory: the shards listed by model.safetensors.index.json
 * when present, else every *.safetensors file in it. */
st_set *st_open_dir(const char *dir, char *err, size_t errlen);
void st_close(st_set *s);

const st_tensor *st_find(const st_set *s, const char *name);
/* Tell the kernel the tensor's pages are no longer needed. */
void st_release(const st_set *s, const st_tensor *t);

#endif
