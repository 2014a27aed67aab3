#!/bin/sh
# t_info.sh: `minke info` on a generated tiny model, a hand-made non-DeepSeek
# GGUF, and broken files (missing, not GGUF, truncated): the exit status and
# the verdict line must say which is which.
. tests/shlib.sh

# little-endian integers and GGUF strings with printf only
le32() { v=$1; for i in 0 1 2 3; do printf "\\$(printf '%03o' $(( (v >> (8 * i)) & 255 )))"; done; }
le64() { le32 "$1"; le32 0; }
gstr() { le64 ${#1}; printf '%s' "$1"; }

# info_refuses WHAT FILE RC PATTERN: `minke info FILE` exits RC (any non-zero
# for "nz") with PATTERN in its message
info_refuses() {
    "$MINKE_BIN" info "$2" > "$T/out" 2> "$T/err"
    rc=$?
    if [ "$3" = nz ]; then [ $rc -ne 0 ]; else [ $rc -eq "$3" ]; fi && grep -q "$4" "$T/err" && ok "$1 (rc $rc)" ||
        bad "$1 rc $rc: $(cat "$T/err")"
}

# 1. a missing file and a text file: non-zero exit with a message
info_refuses "missing file" "$T/nope.gguf" nz "No such file"
printf 'hello, this is not a model file at all\n' > "$T/text.gguf"
info_refuses "text file" "$T/text.gguf" nz "not a GGUF"

# 2. a valid GGUF that is not DeepSeek V4: parses (exit 0), verdict "not loadable"
{
    printf 'GGUF'; le32 3; le64 1; le64 3
    gstr general.architecture; le32 8; gstr llama
    gstr llama.block_count; le32 4; le32 2
    gstr general.alignment; le32 4; le32 32
    gstr tok_embd.weight; le32 2; le64 4; le64 2; le32 0; le64 0
} > "$T/llama.gguf"
size=$(wc -c < "$T/llama.gguf")
pad=$(( (32 - size % 32) % 32 ))
head -c $pad /dev/zero >> "$T/llama.gguf"
head -c 32 /dev/zero >> "$T/llama.gguf"
"$MINKE_BIN" info "$T/llama.gguf" > "$T/out" 2> "$T/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^not loadable: general.architecture is 'llama'" "$T/out" &&
   grep -q "llama.block_count (u32) = 2" "$T/out" && grep -q "tok_embd.weight .*f32 .*\[4, 2\] .* 32$" "$T/out"; then
    ok "non-DeepSeek GGUF"
else
    bad "non-DeepSeek GGUF rc $rc"; cat "$T/out" "$T/err"
fi
# ... and cut inside its tensor data: corrupt, exit 1 naming the tensor
head -c $((size + pad + 16)) "$T/llama.gguf" > "$T/llama_cut.gguf"
info_refuses "truncated data" "$T/llama_cut.gguf" 1 "tensor 'tok_embd.weight' data .* exceeds file size"

# 3. a tiny DeepSeek V4 model from mkmodel: loadable, every tensor listed with --tensors
if "$MINKE_BIN" mkmodel --preset tiny -o "$T/tiny.gguf" > "$T/mk.out" 2>&1; then
    "$MINKE_BIN" info "$T/tiny.gguf" > "$T/out" 2> "$T/err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^loadable DeepSeek V4 model: 6 layers (2 sliding, 2 CSA, 2 HCA), dim 256" "$T/out" &&
       grep -q "^ds4: not compatible" "$T/out" && grep -q "tokens = string\[1024\]" "$T/out"; then
        ok "tiny model verdict"
    else
        bad "tiny model rc $rc"; tail -20 "$T/out"; cat "$T/err"
    fi
    "$MINKE_BIN" info --tensors "$T/tiny.gguf" > "$T/out" 2>&1
    n=$(grep -c '^  blk\.\|^  token_embd\|^  output' "$T/out")
    want=$(sed -n 's/^GGUF v3, alignment 32, [0-9]* metadata keys, \([0-9]*\) tensors.*/\1/p' "$T/out")
    [ "$n" = "$want" ] && [ "$n" = 178 ] && ok "--tensors lists all $n" || bad "--tensors listed $n of $want"
    # drop the last 100 bytes: the last tensor's data is cut
    size=$(wc -c < "$T/tiny.gguf")
    head -c $((size - 100)) "$T/tiny.gguf" > "$T/cut.gguf"
    info_refuses "truncated model" "$T/cut.gguf" 1 "exceeds file size"
else
    echo "SKIP tiny model part: minke mkmodel failed: $(tail -2 "$T/mk.out")"
fi

# 4. usage errors
"$MINKE_BIN" info > /dev/null 2>&1
[ $? -eq 2 ] && ok "no FILE -> 2" || bad "no FILE"
"$MINKE_BIN" info --bogus x > /dev/null 2>&1
[ $? -eq 2 ] && ok "unknown option -> 2" || bad "unknown option"
exit $fail
