#!/bin/sh
# t_interop_llama.sh: GGUFs written by minke load in llama.cpp's model loader
# (architecture deepseek4) and tokenize there like Hugging Face does. Optional:
# runs only when env LLAMA_DIR names a llama.cpp source tree (for include/ and
# ggml/include/) and LLAMA_LIB a folder holding its built libllama / libggml
# shared libraries (docs/interop.md says how to get both); otherwise SKIP.
#
# Checks: the sparse full-size Flash q2 (real tokenizer) and q4 files
# (tests/interop/flash_sparse.c) load with no_alloc, i.e. every key the
# deepseek4 loader reads and every tensor it creates (names, shapes, count)
# without reading weights; a tiny mkmodel file with HCA ratio 128 loads too,
# and the default tiny (HCA ratio 8, which that loader does not support) is
# refused (negative control); llama.cpp picks YaRN RoPE scaling from the
# metadata; llama.cpp's tokenizer reading minke's tokenizer
# metadata reproduces the ids of tests/fixtures/tokenizer/{cases,fuzz_cases}.jsonl.
. tests/shlib.sh

if [ -z "${LLAMA_DIR:-}" ] || [ -z "${LLAMA_LIB:-}" ]; then
    echo "SKIP: set LLAMA_DIR (llama.cpp source) and LLAMA_LIB (its shared libraries) to run (docs/interop.md)"
    exit 0
fi
if [ "${MINKE_ASAN:-0}" != 0 ]; then
    echo "SKIP: llama.cpp interop is not run under ASan"
    exit 0
fi
lib() { # LLAMA_LIB/NAME.so, or a versioned NAME.vX.Y.Z.so (node-llama-cpp's builds), as -l:file
    f=$(ls "$LLAMA_LIB/$1.so" "$LLAMA_LIB/$1".v*.so 2>/dev/null | head -1)
    [ -n "$f" ] && echo "-l:$(basename "$f")"
}
libs="$(lib libllama) $(lib libggml) $(lib libggml-base)"
CHK="$T/llama_load_check"
${CC:-cc} -std=gnu11 -O1 -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" -o "$CHK" \
    tests/interop/llama_load_check.c -L"$LLAMA_LIB" $libs -ljansson -Wl,-rpath,"$LLAMA_LIB" 2>"$T/cc.log" ||
    { echo "FAIL compiling the llama.cpp check ($libs): $(tail -5 "$T/cc.log")"; exit 1; }
FS="$T/flash_sparse"
${CC:-cc} -std=gnu11 -O1 -Iinclude -Isrc -march=x86-64-v2 -mavx2 -mfma -mf16c -pthread -o "$FS" \
    tests/interop/flash_sparse.c "$B/libminke.a" -ljansson -lmicrohttpd -ledit -lm -lpthread 2>"$T/cc.log" ||
    { echo "FAIL compiling flash_sparse: $(tail -3 "$T/cc.log")"; exit 1; }

total() { # tensor bytes of FILE as minke info counts them
    "$MINKE_BIN" info "$1" 2>/dev/null | sed -n 's/^  total *[0-9]* tensors *\([0-9]*\) bytes.*/\1/p'
}

load() { # FILE WHAT [EXPECT]: llama.cpp must load FILE (no_alloc); EXPECT is grepped in its summary
    if "$CHK" --backends "$LLAMA_LIB" "$1" >"$T/l.log" 2>&1 && grep -q "^loaded .*deepseek4" "$T/l.log"; then
        if [ -z "${3:-}" ] || grep "^loaded" "$T/l.log" | grep -q "$3"; then ok "llama.cpp loads $2: $(grep '^loaded' "$T/l.log" | cut -d: -f2-)"
        else bad "llama.cpp loaded $2 but its summary lacks '$3': $(grep '^loaded' "$T/l.log")"; fi
    else
        bad "llama.cpp refuses $2: $(grep -i 'error\|exception\|assert' "$T/l.log" | head -3)"
    fi
}

tok=tests/fixtures/tokenizer/deepseek_v4_tokenizer.json
truncate -s 1G "$T/probe" 2>/dev/null
if [ "$(du -k "$T/probe" 2>/dev/null | cut -f1)" = 0 ]; then
    "$FS" "$T/q2.gguf" --tokenizer "$tok" >/dev/null 2>&1 || bad "flash_sparse q2 failed"
    load "$T/q2.gguf" "sparse Flash q2" "vocab 129280, 284334567511 parameters, $(total "$T/q2.gguf") bytes"
    # without deepseek4.rope.scaling.type llama.cpp falls back to linear scaling (wrong logits)
    grep -q "rope scaling *= yarn" "$T/l.log" && ok "llama.cpp uses YaRN scaling" ||
        bad "llama.cpp does not use YaRN: $(grep 'rope scaling' "$T/l.log")"
    for cases in cases fuzz_cases; do
        if "$CHK" --vocab-only --cases "tests/fixtures/tokenizer/$cases.jsonl" "$T/q2.gguf" >"$T/t.log" 2>/dev/null; then
            ok "$cases: $(grep '^llama.cpp tokenization' "$T/t.log")"
        else
            bad "$cases: $(grep 'MISMATCH\|tokenization\|FAIL' "$T/t.log" | head -6)"
        fi
    done
    rm -f "$T/q2.gguf"
    "$FS" "$T/q4.gguf" --experts q4k >/dev/null 2>&1 || bad "flash_sparse q4 failed"
    load "$T/q4.gguf" "sparse Flash q4" "284334567511 parameters, $(total "$T/q4.gguf") bytes"
    rm -f "$T/q4.gguf"
else
    echo "SKIP sparse Flash files: no sparse files here"
fi
rm -f "$T/probe"

"$MINKE_BIN" mkmodel --preset tiny --hca-ratio 128 -o "$T/t128.gguf" -t 2 >/dev/null 2>&1 || bad "mkmodel tiny ratio 128"
load "$T/t128.gguf" "mkmodel tiny (HCA ratio 128)" "vocab 1024"
"$MINKE_BIN" mkmodel --preset tiny -o "$T/t8.gguf" -t 2 >/dev/null 2>&1 || bad "mkmodel tiny"
if "$CHK" --backends "$LLAMA_LIB" "$T/t8.gguf" >"$T/l.log" 2>&1; then
    bad "llama.cpp accepted HCA ratio 8: the load check proves nothing"
elif grep -q "compression ratios 0, 4, and 128" "$T/l.log"; then
    ok "llama.cpp refuses HCA ratio 8 (negative control)"
else
    bad "llama.cpp refused the control for another reason: $(grep -i error "$T/l.log" | head -2)"
fi
exit $fail
