/* safetensors.c: mmap-based reader for safetensors files and sharded
 * checkpoint directories (see safetensors.h). The JSON header is parsed with
 * jansson; every offset and size is validated before any tensor byte is read.
 */
#define _GNU_SOURCE
#include "convert/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

static const struct {
    const char *name;
    int dtype;
    size_t size;
} dtype_table[] = {
    {"F64", ST_F64, 8}, {"F32", ST_F32, 4}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2},
    {"I64", ST_I64, 8}, {"I32", ST_I32, 4}, {"I16", ST_I16, 2}, {"I8", ST_I8, 1},
    {"U8", ST_U8, 1}, {"BOOL", ST_BOOL, 1}, {"F8_E4M3", ST_F8_E4M3, 1},
    {"F8_E5M2", ST_F8_E5M2, 1}, {"F8_E8M0", ST_F8_E8M0, 1},
};

size_t st_dtype_size(int dtype) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].size;
    return 0;
}

const char *st_dtype_name(int dtype) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].name;
    return "?";
}

static int dtype_from_name(const char *s) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (!strcmp(dtype_table[i].name, s)) return dtype_table[i].dtype;
    return ST_UNKNOWN;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

void st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) {
        if (s->shards[i].map && s->shards[i].size) munmap(s->shards[i].map, s->shards[i].size);
        free(s->shards[i].path);
    }
    for (int64_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->shards);
    free(s->tensors);
    free(s);
}

/* Map one shard and append its tensors to s. */
static int load_shard(st_set *s, const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        gguf_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        gguf_set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        gguf_set_err(err, errlen, "%s: not a safetensors file (only %llu bytes)", path, (unsigned long long)size);
        close(fd);
        return -1;
    }
    uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        gguf_set_err(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    st_shard *ns = realloc(s->shards, (size_t)(s->n_shards + 1) * sizeof *ns);
    if (!ns) {
        munmap(map, size);
        gguf_set_err(err, errlen, "out of memory");
        return -1;
    }
    s->shards = ns;
    int shard = s->n_shards++;
    s->shards[shard].path = strdup(path);
    s->shards[shard].map = map;
    s->shards[shard].size = size;

    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)map[i] << (8 * i);
    if (hlen == 0 || hlen > size - 8 || hlen > (100u << 20)) {
        gguf_set_err(err, errlen, "%s: corrupt safetensors header (header length %llu, file %llu bytes)", path,
               (unsigned long long)hlen, (unsigned long long)size);
        return -1;
    }
    uint64_t data_start = 8 + hlen, data_size = size - data_start;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)map + 8, hlen, 0, &jerr);
    if (!root || !json_is_object(root)) {
        gguf_set_err(err, errlen, "%s: corrupt safetensors header (JSON: %s)", path, root ? "not an object" : jerr.text);
        json_decref(root);
        return -1;
    }
    size_t n = json_object_size(root);
    st_tensor *nt = realloc(s->tensors, (size_t)(s->n_tensors + (int64_t)n) * sizeof *nt);
    if (!nt) {
        json_decref(root);
        gguf_set_err(err, errlen, "out of memory");
        return -1;
    }
    s->tensors = nt;
    const char *key;
    json_t *val;
    int rc = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_object(val) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
            json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
            !json_is_integer(json_array_get(jo, 1))) {
            gguf_set_err(err, errlen, "%s: corrupt safetensors header: entry '%s' lacks dtype/shape/data_offsets", path, key);
            rc = -1;
            break;
        }
        st_tensor t;
        memset(&t, 0, sizeof t);
        snprintf(t.dtype_name, sizeof t.dtype_name, "%s", json_string_value(jd));
        t.dtype = dtype_from_name(json_string_value(jd));
        size_t nd = json_array_size(js);
        if (nd > ST_MAX_DIMS) {
            gguf_set_err(err, errlen, "%s: tensor '%s' has %zu dimensions (max %d)", path, key, nd, ST_MAX_DIMS);
            rc = -1;
            break;
        }
        t.n_dims = (int)nd;
        t.nel = 1;
        int bad = 0;
        for (size_t d = 0; d < nd; d++) {
            json_t *jv = json_array_get(js, d);
            if (!json_is_integer(jv) || json_integer_value(jv) < 0) { bad = 1; break; }
            t.shape[d] = (uint64_t)json_integer_value(jv);
            if (t.shape[d] && t.nel > UINT64_MAX / t.shape[d]) { bad = 1; break; }
            t.nel *= t.shape[d];
        }
        json_int_t b0 = json_integer_value(json_array_get(jo, 0)), b1 = json_integer_value(json_array_get(jo, 1));
        if (bad || b0 < 0 || b1 < b0 || (uint64_t)b1 > data_size) {
            gguf_set_err(err, errlen, "%s: corrupt safetensors header: tensor '%s' has a bad shape or data range [%lld, %lld) (data region %llu bytes)",
                   path, key, (long long)b0, (long long)b1, (unsigned long long)data_size);
            rc = -1;
            break;
        }
        t.nbytes = (uint64_t)(b1 - b0);
        size_t es = st_dtype_size(t.dtype);
        if (es && t.nel > UINT64_MAX / es) bad = 1;
        if (bad || (es && t.nbytes != t.nel * es)) {
            gguf_set_err(err, errlen, "%s: corrupt safetensors header: tensor '%s' (%s, %llu elements) has %llu data bytes",
                   path, key, t.dtype_name, (unsigned long long)t.nel, (unsigned long long)t.nbytes);
            rc = -1;
            break;
        }
        t.data = map + data_start + b0;
        t.shard = shard;
        t.name = strdup(key);
        s->tensors[s->n_tensors++] = t;
        s->total_bytes += t.nbytes;
    }
    json_decref(root);
    return rc;
}

static int finish_set(st_set *s, char *err, size_t errlen) {
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_tensor_name);
    for (int64_t i = 1; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, s->tensors[i - 1].name)) {
            gguf_set_err(err, errlen, "tensor '%s' appears twice (%s and %s)", s->tensors[i].name,
                   s->shards[s->tensors[i - 1].shard].path, s->shards[s->tensors[i].shard].path);
            return -1;
        }
    return 0;
}

st_set *st_open_file(const char *path, char *err, size_t errlen) {
    st_set *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (load_shard(s, path, err, errlen) != 0 || finish_set(s, err, errlen) != 0) {
        st_close(s);
        return NULL;
    }
    return s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

st_set *st_open_dir(const char *dir, char *err, size_t errlen) {
    char path[4096];
    char **names = NULL;
    size_t n_names = 0;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, R_OK) == 0) {
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
        if (!json_is_object(wm)) {
            gguf_set_err(err, errlen, "%s: no \"weight_map\" object (%s)", path, root ? "missing" : jerr.text);
            json_decref(root);
            return NULL;
        }
        const char *key;
        json_t *val;
        json_object_foreach(wm, key, val) {
            if (!json_is_string(val)) continue;
            const char *f = json_string_value(val);
            int seen = 0;
            for (size_t i = 0; i < n_names; i++)
                if (!strcmp(names[i], f)) { seen = 1; break; }
            if (seen) continue;
            if (strchr(f, '/')) {
                gguf_set_err(err, errlen, "%s: shard name '%s' must be a plain file name", path, f);
                json_decref(root);
                for (size_t i = 0; i < n_names; i++) free(names[i]);
                free(names);
                return NULL;
            }
            names = realloc(names, (n_names + 1) * sizeof *names);
            names[n_names++] = strdup(f);
        }
        json_decref(root);
    } else {
        DIR *d = opendir(dir);
        if (!d) {
            gguf_set_err(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno));
            return NULL;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || !ends_with(e->d_name, ".safetensors")) continue;
            names = realloc(names, (n_names + 1) * sizeof *names);
            names[n_names++] = strdup(e->d_name);
        }
        closedir(d);
    }
    if (n_names == 0) {
        gguf_set_err(err, errlen, "%s: no *.safetensors files", dir);
        free(names);
        return NULL;
    }
    qsort(names, n_names, sizeof *names, cmp_str);
    st_set *s = calloc(1, sizeof *s);
    int rc = s ? 0 : -1;
    for (size_t i = 0; i < n_names && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = load_shard(s, path, err, errlen);
    }
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    if (rc == 0) rc = finish_set(s, err, errlen);
    if (rc != 0) {
        st_close(s);
        return NULL;
    }
    return s;
}

const st_tensor *st_find(const st_set *s, const char *name) {
    int64_t lo = 0, hi = s->n_tensors - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->tensors[mid].name, name);
        if (c == 0) return &s->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

void st_release(const st_set *s, const st_tensor *t) {
    if (!t || !t->nbytes) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(uintptr_t)(pg - 1);
    uintptr_t end = (uintptr_t)t->data + t->nbytes;
    const st_shard *sh = &s->shards[t->shard];
    if (end > (uintptr_t)sh->map + sh->size) end = (uintptr_t)sh->map + sh->size;
    madvise((void *)a, end - a, MADV_DONTNEED);
}
