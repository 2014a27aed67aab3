#!/bin/sh
# t_convert.sh: the `minke convert` command line: the tiny-a official checkpoint
# converts under several policies to files minke info accepts, a GGUF can be
# rewritten under another policy, and bad input fails with a message and exit
# status (the detailed value checks are in tests/test_convert.c).
. tests/shlib.sh
CK=tests/fixtures/oracle/tiny-a

loadable() { # FILE WHAT
    out=$("$MINKE_BIN" info "$1" 2>&1) || { bad "$2: minke info exit $?: $out"; return; }
    echo "$out" | grep -q "^loadable DeepSeek V4 model" || bad "$2: not loadable: $(echo "$out" | tail -3)"
}

"$MINKE_BIN" convert "$CK" -o "$T/f32.gguf" --experts f32 --dense f32 --no-progress 2>"$T/log" || bad "convert f32: $(cat "$T/log")"
cat "$T/log"
loadable "$T/f32.gguf" "tiny-a f32"
"$MINKE_BIN" info "$T/f32.gguf" 2>&1 | grep -q "tokenizer: none\|tokenizer: absent\|no tokenizer" ||
    echo "note: info's tokenizer line: $("$MINKE_BIN" info "$T/f32.gguf" 2>&1 | grep -i tokenizer | tail -1)"
"$MINKE_BIN" convert "$CK" -o "$T/mx.gguf" --experts mxfp4 --dense f16 -t 1 2>"$T/log" || bad "convert mxfp4: $(cat "$T/log")"
loadable "$T/mx.gguf" "tiny-a mxfp4/f16"
# GGUF -> GGUF under other policies (q4k from the f32 twin, then back to f32)
"$MINKE_BIN" convert "$T/f32.gguf" -o "$T/q4.gguf" --experts q4k --dense q8_0 2>"$T/log" || bad "gguf -> q4k: $(cat "$T/log")"
loadable "$T/q4.gguf" "q4k from gguf"
"$MINKE_BIN" convert "$T/mx.gguf" -o "$T/mx2.gguf" --experts mxfp4 --dense f16 2>"$T/log" || bad "gguf -> same policy"
# same policy: tensor data identical (only the metadata order may differ)
"$MINKE_BIN" convert "$T/mx2.gguf" -o "$T/mx3.gguf" --experts mxfp4 --dense f16 2>/dev/null
cmp -s "$T/mx2.gguf" "$T/mx3.gguf" || bad "rewriting under the same policy is not byte-stable"

# --layers keeps a valid prefix of the model
"$MINKE_BIN" convert "$CK" -o "$T/l3.gguf" --layers 3 --experts mxfp4 2>/dev/null || bad "convert --layers 3"
"$MINKE_BIN" info "$T/l3.gguf" 2>&1 | grep -q "^loadable DeepSeek V4 model: 3 layers" || bad "--layers 3 is not a loadable 3-layer model"
"$MINKE_BIN" convert "$T/f32.gguf" -o "$T/l2.gguf" --layers 2 --experts f32 --dense f32 2>/dev/null || bad "gguf --layers 2"
"$MINKE_BIN" info "$T/l2.gguf" 2>&1 | grep -q "^loadable DeepSeek V4 model: 2 layers" || bad "gguf --layers 2 is not a loadable 2-layer model"
rm -f "$T/l3.gguf" "$T/l2.gguf"

# the thread count does not change the output
"$MINKE_BIN" convert "$CK" -o "$T/t1.gguf" --experts q8_0 -t 1 2>/dev/null || bad "convert -t 1"
"$MINKE_BIN" convert "$CK" -o "$T/t2.gguf" --experts q8_0 -t 2 2>/dev/null || bad "convert -t 2"
cmp -s "$T/t1.gguf" "$T/t2.gguf" || bad "-t 1 and -t 2 give different files"
rm -f "$T/t1.gguf" "$T/t2.gguf"

# --check reads and checks everything, writes nothing
mkdir -p "$T/bad"
cp "$CK/config.json" "$T/bad/"
head -c 1000 "$CK/model.safetensors" > "$T/bad/model.safetensors"
"$MINKE_BIN" convert "$CK" --check 2>"$T/log" || bad "convert --check: $(cat "$T/log")"
grep -q "input OK; main file would hold 178 tensors" "$T/log" || bad "convert --check output: $(cat "$T/log")"
"$MINKE_BIN" convert "$T/bad" --check 2>/dev/null && bad "convert --check accepted a truncated checkpoint"

# errors
"$MINKE_BIN" convert "$CK" -o "$T/x.gguf" --experts q3 2>"$T/log"; rc=$?
[ $rc = 2 ] || bad "bad --experts: rc $rc"
"$MINKE_BIN" convert "$T/nonexistent" -o "$T/x.gguf" 2>"$T/log"; rc=$?
[ $rc = 1 ] && grep -q "config.json" "$T/log" || bad "missing input: rc $rc $(cat "$T/log")"
"$MINKE_BIN" convert "$CK" 2>"$T/log"; rc=$?
[ $rc = 2 ] || bad "no -o: rc $rc"
mkdir -p "$T/bad"
cp "$CK/config.json" "$T/bad/"
head -c 1000 "$CK/model.safetensors" > "$T/bad/model.safetensors"
"$MINKE_BIN" convert "$T/bad" -o "$T/x.gguf" 2>"$T/log"; rc=$?
[ $rc = 1 ] && grep -q "corrupt" "$T/log" || bad "truncated safetensors: rc $rc $(cat "$T/log")"
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' > "$T/empty.gguf"
"$MINKE_BIN" convert "$T/empty.gguf" -o "$T/x.gguf" 2>"$T/log"; rc=$?
[ $rc = 1 ] && grep -q "not a usable DeepSeek V4 GGUF" "$T/log" || bad "GGUF without DeepSeek V4 metadata: rc $rc $(cat "$T/log")"
[ -e "$T/x.gguf" ] && bad "an output was left after an error"

exit $fail
