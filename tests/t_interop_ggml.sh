#!/bin/sh
# t_interop_ggml.sh: GGUFs written by minke parse in ggml's GGUF reader (the
# gguf.cpp that llama.cpp links). Optional: runs only when env GGML_DIR names
# a ggml (or llama.cpp's ggml/) checkout with a built build/src/libggml-base.a
# (docs/interop.md says how); otherwise prints SKIP and passes.
#
# Files: `minke convert` of the tiny-a oracle checkpoint (three type
# policies), `minke mkmodel` tiny models (six policies, synthetic and real
# tokenizer) and a full-size sparse Flash q2 file (tests/interop/flash_sparse.c,
# header only). For each: ggml accepts it (small files with every tensor's
# bytes read), each tensor ends inside the file at an aligned offset, and the
# tensor table ggml reports (name, type, shape, bytes) equals minke info's.
. tests/shlib.sh

if [ -z "${GGML_DIR:-}" ]; then
    echo "SKIP: set GGML_DIR to a built ggml checkout to run the ggml GGUF reader checks (docs/interop.md)"
    exit 0
fi
if [ "${MINKE_ASAN:-0}" != 0 ]; then
    echo "SKIP: ggml interop is not run under ASan"
    exit 0
fi
LIB=${GGML_LIB:-$GGML_DIR/build/src/libggml-base.a}
[ -f "$LIB" ] || { echo "FAIL no $LIB (build ggml's ggml-base target first)"; exit 1; }
CHK="$T/ggml_gguf_check"
${CC:-cc} -std=gnu11 -O1 -I"$GGML_DIR/include" -o "$CHK" tests/interop/ggml_gguf_check.c "$LIB" \
    -lstdc++ -lgomp -lm -pthread 2>"$T/cc.log" ||
    ${CC:-cc} -std=gnu11 -O1 -I"$GGML_DIR/include" -o "$CHK" tests/interop/ggml_gguf_check.c "$LIB" \
        -lstdc++ -lm -pthread 2>"$T/cc.log" || { echo "FAIL compiling the ggml check: $(tail -5 "$T/cc.log")"; exit 1; }

check() { # FILE WHAT [--data]
    f=$1; what=$2; shift 2
    if ! "$CHK" "$@" "$f" >"$T/g.log" 2>&1 || [ "$(tail -1 "$T/g.log")" != ok ]; then
        bad "ggml rejects $what: $(grep -v '^kv ' "$T/g.log" | grep -i 'fail\|error' | head -5)"
        return
    fi
    # the tensor table as minke info prints it, normalised to the checker's form
    "$MINKE_BIN" info "$f" --tensors 2>/dev/null | sed -n '/^tensors:/,/^$/p' | sed '1,2d;/^$/d' |
        sed -E 's/^ +//; s/ +/ /g' >"$T/m.t"
    grep -v '^kv \|^file:\|^ok$' "$T/g.log" >"$T/g.t"
    nk_g=$(grep -c '^kv ' "$T/g.log")
    nk_m=$("$MINKE_BIN" info "$f" 2>/dev/null | sed -n 's/.* \([0-9]*\) metadata keys.*/\1/p')
    if [ ! -s "$T/m.t" ]; then bad "$what: minke info listed no tensors"
    elif ! cmp -s "$T/m.t" "$T/g.t"; then bad "$what: ggml and minke tensor tables differ: $(diff "$T/m.t" "$T/g.t" | head -4)"
    elif [ "$nk_g" != "$nk_m" ]; then bad "$what: ggml sees $nk_g keys, minke $nk_m"
    else ok "ggml reads $what ($(wc -l <"$T/g.t") tensors, $nk_g keys)"; fi
}

tok=tests/fixtures/tokenizer/deepseek_v4_tokenizer.json
for pol in "iq2xxs-q2k q8_0" "q4k bf16" "mxfp4 f32"; do
    set -- $pol
    "$MINKE_BIN" convert tests/fixtures/oracle/tiny-a -o "$T/c.gguf" --experts "$1" --dense "$2" -t 2 >/dev/null 2>&1 ||
        { bad "minke convert tiny-a --experts $1 --dense $2 failed"; continue; }
    check "$T/c.gguf" "convert tiny-a $1/$2" --data
done
for pol in "iq2xxs-q2k q8_0" "q4k f16" "mxfp4 f32" "q8_0 bf16" "f16 q8_0" "f32 f32"; do
    set -- $pol
    "$MINKE_BIN" mkmodel --preset tiny -o "$T/m.gguf" --experts "$1" --dense "$2" -t 2 >/dev/null 2>&1 ||
        { bad "minke mkmodel tiny --experts $1 --dense $2 failed"; continue; }
    check "$T/m.gguf" "mkmodel tiny $1/$2" --data
done
"$MINKE_BIN" mkmodel --preset tiny --tokenizer "$tok" -o "$T/m.gguf" -t 2 >/dev/null 2>&1 &&
    check "$T/m.gguf" "mkmodel tiny with the V4 tokenizer" --data || bad "mkmodel tiny --tokenizer failed"
rm -f "$T/c.gguf" "$T/m.gguf"

# full-size Flash, sparse: header and tensor table only
FS="$T/flash_sparse"
if ${CC:-cc} -std=gnu11 -O1 -Iinclude -Isrc -march=x86-64-v2 -mavx2 -mfma -mf16c -pthread -o "$FS" \
    tests/interop/flash_sparse.c "$B/libminke.a" -ljansson -lmicrohttpd -ledit -lm -lpthread 2>"$T/cc.log"; then
    truncate -s 1G "$T/probe" 2>/dev/null
    if [ "$(du -k "$T/probe" 2>/dev/null | cut -f1)" = 0 ]; then
        "$FS" "$T/q2.gguf" --tokenizer "$tok" >/dev/null 2>&1 && check "$T/q2.gguf" "sparse Flash q2" ||
            bad "flash_sparse failed"
    else
        echo "SKIP sparse Flash: no sparse files here"
    fi
    rm -f "$T/probe" "$T/q2.gguf"
else
    bad "compiling flash_sparse: $(tail -3 "$T/cc.log")"
fi
exit $fail
