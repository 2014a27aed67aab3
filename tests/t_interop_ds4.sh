#!/bin/sh
# t_interop_ds4.sh: GGUFs written by minke load in antirez's ds4 (optional:
# runs only when env DS4_BIN names a ds4 binary; see docs/interop.md for how to
# build one on a CPU-only machine). Otherwise prints SKIP and passes.
#
# ds4 accepts nothing but Flash's exact shapes, so the files are full-size
# Flash GGUFs (80.8 GiB q2, 153.3 GiB q4, MTP 1.9 / 3.5 GiB) written sparse by
# tests/interop/flash_sparse.c: the same writer calls as `minke mkmodel
# --preset flash`, big tensors left as holes (a few MB on disk). That the
# header really is mkmodel's is checked here too: mkmodel runs under a 16-32 MB
# file-size limit (it is killed by SIGXFSZ after writing its header) and the
# header bytes must be identical (if the limit cannot be set, mkmodel is not
# run). `minke convert` (GGUF in) is cut off the same way and its partial file,
# extended with a hole, must pass ds4 --inspect too.
#
# Checks: ds4 --inspect (container, tokenizer, metadata validation, tensor
# binding and layout) accepts the q2 and q4 files and the MTP files; a
# negative control (Q8_0 experts, which ds4 refuses) is refused; ds4
# tokenizes the fixture cases from minke's tokenizer metadata like Hugging
# Face does (tests/interop/ds4_tokens_check.py). Env DS4_RUN=1 also runs one
# CPU generation step through all 43 layers (several minutes).
. tests/shlib.sh

if [ -z "${DS4_BIN:-}" ]; then
    echo "SKIP: set DS4_BIN to a ds4 binary to run the ds4 interop checks (docs/interop.md)"
    exit 0
fi
if [ "${MINKE_ASAN:-0}" != 0 ]; then
    echo "SKIP: ds4 interop is not run under ASan"
    exit 0
fi
[ -x "$DS4_BIN" ] || { echo "FAIL DS4_BIN=$DS4_BIN is not executable"; exit 1; }
tok=tests/fixtures/tokenizer/deepseek_v4_tokenizer.json

# the writer, compiled against this build's library
FS="$T/flash_sparse"
${CC:-cc} -std=gnu11 -O1 -Iinclude -Isrc -march=x86-64-v2 -mavx2 -mfma -mf16c -pthread \
    -o "$FS" tests/interop/flash_sparse.c "$B/libminke.a" -ljansson -lmicrohttpd -ledit -lm -lpthread \
    2>"$T/cc.log" || { echo "FAIL compiling flash_sparse: $(cat "$T/cc.log")"; exit 1; }

# sparse files must be possible here (a 1 GiB hole takes almost no disk)
truncate -s 1G "$T/probe" 2>/dev/null
if [ "$(du -k "$T/probe" 2>/dev/null | cut -f1)" != 0 ]; then
    echo "SKIP: this filesystem has no sparse files (the Flash files would take 80+ GiB)"
    exit 0
fi
rm -f "$T/probe"

write() { # OUT ARGS...: writes with flash_sparse, sets $off (data offset)
    out=$1; shift
    "$FS" "$out" "$@" >"$T/fs.log" 2>&1 || { bad "flash_sparse $*: $(cat "$T/fs.log")"; off=; return 1; }
    off=$(sed -n 's/^data_offset //p' "$T/fs.log")
}

inspect() { # WHAT ARGS...: ds4 --inspect must accept
    what=$1; shift
    if "$DS4_BIN" "$@" --cpu --inspect >"$T/ds4.log" 2>&1; then
        if grep -q "1328 tensors" "$T/ds4.log"; then ok "ds4 --inspect accepts $what"
        else bad "ds4 --inspect on $what: no '1328 tensors' in: $(head -5 "$T/ds4.log")"; fi
    else
        bad "ds4 --inspect refuses $what: $(tail -3 "$T/ds4.log")"
    fi
}

# 1. q2 (ds4's published layout) with the real tokenizer
write "$T/q2.gguf" --tokenizer "$tok" && inspect "minke q2 Flash" -m "$T/q2.gguf"
grep -q "iq2_xxs *86 tensors" "$T/ds4.log" && grep -q "q2_k *43 tensors" "$T/ds4.log" ||
    bad "ds4 type counts for q2: $(grep tensors "$T/ds4.log" | tr '\n' ' ')"

# 2. the header is mkmodel's own (mkmodel dies of SIGXFSZ once past 16 MB)
if [ -n "${off:-}" ]; then
    { sh -c 'ulimit -f 32768 && exec "$@"' sh "$MINKE_BIN" mkmodel --preset flash --tokenizer "$tok" -t 1 \
        --no-progress -o "$T/mk.gguf" >/dev/null 2>&1; } 2>/dev/null
    if [ ! -f "$T/mk.gguf.tmp" ]; then
        echo "SKIP header comparison: mkmodel left no partial file (SIGXFSZ ignored here?)"
    elif cmp -n "$off" "$T/mk.gguf.tmp" "$T/q2.gguf" >/dev/null 2>&1; then
        ok "mkmodel --preset flash writes the same $off header bytes"
    else
        bad "mkmodel's header differs from flash_sparse's: $(cmp -n "$off" "$T/mk.gguf.tmp" "$T/q2.gguf" 2>&1)"
    fi
    rm -f "$T/mk.gguf.tmp"

    # 2b. `minke convert` (GGUF in, q2 policy) writes a header ds4 accepts: same trick, then the
    # partial file is extended with a hole past the last tensor (ds4 ignores trailing bytes)
    size=$(wc -c <"$T/q2.gguf")
    { sh -c 'ulimit -f 32768 && exec "$@"' sh "$MINKE_BIN" convert "$T/q2.gguf" -o "$T/cv.gguf" -t 1 --no-progress \
        >/dev/null 2>&1; } 2>/dev/null
    if [ ! -f "$T/cv.gguf.tmp" ]; then
        echo "SKIP convert header check: convert left no partial file"
    else
        truncate -s $((size + 65536)) "$T/cv.gguf.tmp"
        inspect "minke convert's Flash header (GGUF -> q2)" -m "$T/cv.gguf.tmp"
        rm -f "$T/cv.gguf.tmp"
    fi
fi

# 3. tokenization through ds4 from minke's tokenizer metadata
if command -v python3 >/dev/null 2>&1; then
    if python3 tests/interop/ds4_tokens_check.py "$DS4_BIN" "$T/q2.gguf" tests/fixtures/tokenizer/cases.jsonl "$tok" \
        >"$T/tok.log" 2>&1; then ok "$(tail -1 "$T/tok.log")"
    else bad "ds4 tokenization: $(cat "$T/tok.log" | tail -12)"; fi
else
    echo "SKIP tokenization check: no python3"
fi

# 4. optional: one CPU generation step (zeros in, so the token means nothing)
if [ "${DS4_RUN:-0}" = 1 ]; then
    if "$DS4_BIN" -m "$T/q2.gguf" --cpu -t 2 -c 512 -n 1 --temp 0 --nothink -sys "" -p "Hi" >"$T/run.log" 2>&1; then
        ok "ds4 CPU prefill + 1 token on the q2 file"
    else bad "ds4 generation: $(tail -3 "$T/run.log")"; fi
fi

# 5. MTP files next to the main file (q2 experts, and Q4_K as published)
write "$T/mtp.gguf" --mtp && inspect "minke MTP (q2 experts)" -m "$T/q2.gguf" --mtp "$T/mtp.gguf"
grep -q "MTP support model loaded" "$T/ds4.log" || bad "ds4 did not report the MTP model"
write "$T/mtp4.gguf" --mtp --experts q4k && inspect "minke MTP (Q4_K experts)" -m "$T/q2.gguf" --mtp "$T/mtp4.gguf"
rm -f "$T/mtp.gguf" "$T/mtp4.gguf"

# 6. q4 (Q4_K experts)
rm -f "$T/q2.gguf"
write "$T/q4.gguf" --experts q4k && inspect "minke q4 Flash" -m "$T/q4.gguf"
grep -q "q4_k *129 tensors" "$T/ds4.log" || bad "ds4 type counts for q4: $(grep tensors "$T/ds4.log" | tr '\n' ' ')"
rm -f "$T/q4.gguf"

# 7. negative control: ds4 refuses Q8_0 routed experts, so the check can fail
write "$T/neg.gguf" --experts q8_0
if "$DS4_BIN" -m "$T/neg.gguf" --cpu --inspect >"$T/ds4.log" 2>&1; then
    bad "ds4 accepted Q8_0 experts: the inspect check proves nothing"
else
    grep -q "ffn_gate_exps" "$T/ds4.log" && ok "ds4 refuses Q8_0 experts (negative control)" ||
        bad "ds4 refused the control for another reason: $(tail -2 "$T/ds4.log")"
fi
rm -f "$T/neg.gguf"

exit $fail
