#!/bin/sh
# t_mkmodel.sh: `minke mkmodel` writes valid DeepSeek V4 GGUFs (minke info accepts
# them) for several presets and type policies, with a synthetic or the real
# tokenizer; the output depends on the seed but not on the thread count.
. tests/shlib.sh
say() { echo "$*"; }

loadable() { # FILE WHAT
    out=$("$MINKE_BIN" info "$1" 2>&1) || { bad "$2: minke info exit $?: $out"; return; }
    echo "$out" | grep -q "^loadable DeepSeek V4 model" || bad "$2: not loadable: $(echo "$out" | tail -3)"
    echo "$out" | grep -q "^tokenizer: ok" || bad "$2: tokenizer not ok"
}

"$MINKE_BIN" mkmodel --preset tiny -o "$T/a.gguf" -t 1 --seed 5 2>"$T/log" || bad "mkmodel tiny: $(cat "$T/log")"
loadable "$T/a.gguf" "tiny q2"
"$MINKE_BIN" mkmodel --preset tiny -o "$T/b.gguf" -t 2 --seed 5 2>/dev/null || bad "mkmodel tiny -t 2"
cmp -s "$T/a.gguf" "$T/b.gguf" || bad "same seed, different thread count: files differ"
"$MINKE_BIN" mkmodel --preset tiny -o "$T/c.gguf" --seed 6 2>/dev/null || bad "mkmodel seed 6"
cmp -s "$T/a.gguf" "$T/c.gguf" && bad "different seeds gave the same file"

# a synthetic q2 file rewritten to its F32 twin keeps its tokenizer and stays loadable
"$MINKE_BIN" convert "$T/a.gguf" -o "$T/a32.gguf" --experts f32 --dense f32 2>"$T/log" || bad "convert synthetic: $(cat "$T/log")"
loadable "$T/a32.gguf" "F32 twin of a synthetic model"
rm -f "$T/a32.gguf"

for pol in "q4k f16" "mxfp4 f32" "q8_0 bf16" "f16 q8_0" "f32 f32"; do
    set -- $pol
    "$MINKE_BIN" mkmodel --preset tiny -o "$T/p.gguf" --experts "$1" --dense "$2" --damp 0.5 2>"$T/log" ||
        bad "mkmodel --experts $1 --dense $2: $(cat "$T/log")"
    loadable "$T/p.gguf" "tiny $1/$2"
done

"$MINKE_BIN" mkmodel --preset tiny -o "$T/l.gguf" --layers 9 --dim 512 --n-experts 8 --hca-ratio 16 2>/dev/null ||
    bad "mkmodel with overrides"
loadable "$T/l.gguf" "overrides"
"$MINKE_BIN" info "$T/l.gguf" 2>&1 | grep -q "9 layers (2 sliding, 4 CSA, 3 HCA), dim 512" || bad "overrides not applied"

if [ "${MINKE_ASAN:-0}" = 0 ]; then
    tok=tests/fixtures/tokenizer/deepseek_v4_tokenizer.json
    "$MINKE_BIN" mkmodel --preset tiny -o "$T/tok.gguf" --tokenizer "$tok" 2>"$T/log" || bad "mkmodel --tokenizer: $(cat "$T/log")"
    loadable "$T/tok.gguf" "tiny with the DeepSeek tokenizer"
    "$MINKE_BIN" info "$T/tok.gguf" 2>&1 | grep -q "vocab 129280" || bad "vocab is not the tokenizer's"
    rm -f "$T/tok.gguf"
    "$MINKE_BIN" mkmodel --preset small -o "$T/small.gguf" 2>"$T/log" || bad "mkmodel small: $(cat "$T/log")"
    loadable "$T/small.gguf" "small"
    cat "$T/log"
    rm -f "$T/small.gguf"
    # a full-size Flash q2 file with its big tensors as sparse holes: ds4's layout and the
    # spec's data size (86,714,777,664 bytes, §4.3); only where the filesystem has sparse files
    truncate -s 1G "$T/probe" 2>/dev/null
    if [ "$(du -k "$T/probe" 2>/dev/null | cut -f1)" = 0 ]; then
        "$MINKE_BIN" mkmodel --preset flash --holes-above 1048576 --tokenizer "$tok" -o "$T/flash.gguf" 2>"$T/log" ||
            bad "mkmodel flash --holes-above: $(cat "$T/log")"
        out=$("$MINKE_BIN" info "$T/flash.gguf" 2>&1)
        echo "$out" | grep -q "^loadable DeepSeek V4 model: 43 layers" || bad "flash: not loadable"
        echo "$out" | grep -q "^ds4: compatible" || bad "flash: not ds4-compatible: $(echo "$out" | tail -1)"
        off=$(echo "$out" | sed -n 's/.*1328 tensors, data at offset \([0-9]*\).*/\1/p')
        size=$(stat -c %s "$T/flash.gguf")
        [ -n "$off" ] && [ $((size - off)) = 86714777664 ] || bad "flash: tensor data is $((size - ${off:-0})) bytes, spec 86714777664"
        rm -f "$T/flash.gguf"
    else
        echo "note: no sparse files here; full-size Flash header check skipped"
    fi
    rm -f "$T/probe"
fi

# per-layer expert types (ds4's spliced q2/q4 layout)
"$MINKE_BIN" mkmodel --preset tiny -o "$T/mix.gguf" --layer-experts 4-5=q4k --layer-experts 0=mxfp4 2>"$T/log" ||
    bad "mkmodel --layer-experts: $(cat "$T/log")"
loadable "$T/mix.gguf" "mixed expert types"
tt=$("$MINKE_BIN" info "$T/mix.gguf" --tensors 2>&1 | awk '/_exps/ {printf "%s:%s ", $1, $2}')
for want in blk.0.ffn_down_exps.weight:mxfp4 blk.3.ffn_gate_exps.weight:iq2_xxs blk.3.ffn_down_exps.weight:q2_K \
            blk.4.ffn_up_exps.weight:q4_K blk.5.ffn_down_exps.weight:q4_K; do
    case " $tt" in *" $want "*) ;; *) bad "mixed layout lacks $want";; esac
done
"$MINKE_BIN" mkmodel --preset tiny -o "$T/x.gguf" --layer-experts 4-2=q4k 2>/dev/null && bad "a reversed layer range was accepted"

# MTP block next to the main file, then rewritten under another policy by convert
"$MINKE_BIN" mkmodel --preset tiny -o "$T/m.gguf" --mtp-out "$T/m-mtp.gguf" --experts q4k 2>"$T/log" || bad "mkmodel --mtp-out: $(cat "$T/log")"
[ -s "$T/m-mtp.gguf" ] || bad "no MTP file"
"$MINKE_BIN" convert "$T/m-mtp.gguf" -o "$T/m-mtp32.gguf" --experts f32 --dense f32 2>"$T/log" || bad "convert MTP gguf: $(cat "$T/log")"
"$MINKE_BIN" info "$T/m-mtp32.gguf" 2>&1 | grep -q "32 tensors" || bad "converted MTP file lacks its 32 tensors"

# errors
"$MINKE_BIN" mkmodel --preset tiny -o "$T/x.gguf" --experts q3 2>"$T/log"; rc=$?
[ $rc = 2 ] && grep -q "unknown --experts\|q3" "$T/log" || bad "bad --experts: rc $rc $(cat "$T/log")"
"$MINKE_BIN" mkmodel --preset huge -o "$T/x.gguf" 2>"$T/log"; rc=$?
[ $rc = 2 ] && grep -q "unknown preset" "$T/log" || bad "bad preset: rc $rc"
"$MINKE_BIN" mkmodel --preset tiny -o "$T/x.gguf" --dim 200 2>"$T/log"; rc=$?
[ $rc != 0 ] || bad "dim 200 accepted (rows not a multiple of the block size)"
[ -e "$T/x.gguf" ] && bad "an output was left after an error"

exit $fail
