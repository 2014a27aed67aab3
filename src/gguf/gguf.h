/* gguf.h: reading and writing GGUF v3 containers.
 *
 * The reader mmaps the file and indexes its metadata and tensor table with
 * every bound checked against the file size, so a truncated or hostile file
 * yields one clear error instead of an out-of-bounds read. Strings and tensor
 * data point into the mapping (valid until gguf_close).
 *
 * The writer streams: declare metadata and tensors, then write each tensor's
 * bytes in declaration order (in as many pieces as convenient).
 */
#ifndef MINKE_GGUF_H
#define MINKE_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12
};

#define GGUF_MAX_DIMS 8

typedef struct gguf_str {
    uint64_t len;
    const char *ptr; /* not NUL-terminated */
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;        /* enum gguf_vtype */
    uint32_t arr_type;    /* for GGUF_ARRAY: element type */
    uint64_t arr_n;       /* for GGUF_ARRAY: element count */
    const uint8_t *data;  /* value bytes (for arrays: first element) */
    uint64_t data_len;    /* bytes of the value (for arrays: of all elements) */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    char *cname;          /* NUL-terminated copy of name */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;        /* ggml type id (src/quant/quant.h) */
    uint64_t offset;      /* relative to the data region */
    uint64_t nbytes;      /* 0 when the type is unknown */
    const void *data;     /* NULL when the type is unknown */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    uint64_t n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t data_offset;
} gguf_file;

/* Formats one sentence into (err, errlen), the error convention of this API;
 * no-op when err is NULL or errlen 0. Public so that the readers of GGUF
 * metadata (model/config.c, model/layout.c) report the same way. */
void gguf_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Open and validate; on failure NULL and err holds one sentence. Version 3 only; alignment from a
 * u32 general.alignment (else 32); duplicate keys or tensor names are refused; a tensor of a type
 * id minke does not know gets nbytes 0 and data NULL (ds4 only warns about those). */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* Same on a caller-owned buffer (fuzzing, tests); the buffer must outlive the result. */
gguf_file *gguf_open_buffer(const void *buf, uint64_t size, char *err, size_t errlen);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Element count (product of the dims; validated not to overflow at open). */
uint64_t gguf_tensor_nel(const gguf_tensor *t);

/* Typed getters: return 0 on success, -1 if missing or of another type.
 * gguf_get_u32 accepts only GGUF_U32 (ds4 is strict); gguf_get_f32 accepts
 * f32, f64, u32, i32 encodings; gguf_get_u64 accepts u64 or u32. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Arrays. gguf_arr_strings fills out[0..arr_n-1] (caller allocates arr_n entries).
 * gguf_arr_get_num reads element i of a numeric array as double. */
int gguf_arr_strings(const gguf_kv *kv, gguf_str *out);
int gguf_arr_get_num(const gguf_kv *kv, uint64_t i, double *out);

/* Size in bytes of one value type (0 for string/array). */
size_t gguf_vtype_size(uint32_t type);
const char *gguf_vtype_name(uint32_t type);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_open(const char *path, uint32_t alignment, char *err, size_t errlen);
/* Metadata (must precede gguf_writer_begin_data). */
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_arr_u32(gguf_writer *w, const char *key, const uint32_t *v, uint64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Strings with explicit lengths (may contain NUL bytes). */
void gguf_w_arr_strn(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n);
/* Any scalar type (u8..f64, bool) from its little-endian bytes, and numeric arrays of any scalar type. */
void gguf_w_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v);
void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *v, uint64_t n);
/* A value given in its exact file encoding (for arrays: u32 elem type, u64 count, elements;
 * nested arrays allowed); validated before it is accepted. */
void gguf_w_raw(gguf_writer *w, const char *key, uint32_t type, const void *value, uint64_t len);
/* Copy a kv from an open file verbatim (e.g. the tokenizer arrays during conversion). */
void gguf_w_kv_copy(gguf_writer *w, const gguf_kv *kv);
/* Declare a tensor (must precede gguf_writer_begin_data). Returns its index, -1 on error
 * (unknown type, row not a multiple of the block size, duplicate name). */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type);
/* Write the header; afterwards only tensor data may be written. */
int gguf_writer_begin_data(gguf_writer *w);
/* Append bytes of the current tensor; tensors are filled in declaration order
 * and a tensor is complete once its nbytes have been written. */
int gguf_w_data(gguf_writer *w, const void *data, uint64_t n);
/* Like gguf_w_data with n zero bytes, but seeks instead of writing, so the file gets a
 * sparse hole (header-only test files of full-size models). */
int gguf_w_zeros(gguf_writer *w, uint64_t n);
uint32_t gguf_writer_alignment(const gguf_writer *w);
/* Bytes of declared tensor idx (without padding). */
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, int idx);
/* Finish (checks every tensor was fully written), close and rename PATH.tmp to PATH; 0 on success.
 * On failure the partial file is removed and gguf_writer_error(NULL) gives the reason.
 * Writer calls after the first error are no-ops; the error is reported here. If general.alignment
 * was not written and the alignment is not 32, the writer adds the key itself. */
int gguf_writer_close(gguf_writer *w);
/* Abandon and remove the partial file. */
void gguf_writer_abort(gguf_writer *w);
/* The first error of w ("" if none); with NULL, the error of the last failed close on this thread. */
const char *gguf_writer_error(const gguf_writer *w);

#endif
