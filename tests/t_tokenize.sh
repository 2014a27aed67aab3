#!/bin/sh
# t_tokenize.sh: `minke tokenize` end to end. Writes a tokenizer-only GGUF from
# the DeepSeek V4 tokenizer.json, then checks every encode case (cases.jsonl,
# fuzz_cases.jsonl) and decode case (decode_cases.jsonl) of Hugging Face's
# tokenizer through the CLI, bad input lines, and the "no tokenizer" error.
. tests/shlib.sh
FIX=tests/fixtures/tokenizer

"$MINKE_BIN" tokenize --json "$FIX/deepseek_v4_tokenizer.json" --write-gguf "$T/tok.gguf" || { echo "FAIL: write GGUF"; exit 1; }

# encode (hf_random_cases: see the fixture README): the ids array ends every case line; the CLI answers {"ids": [...]}
for f in cases fuzz_cases hf_random_cases; do
    sed 's/.*"ids":\[\([^]]*\)\]}$/\1/' "$FIX/$f.jsonl" > "$T/$f.want"
    "$MINKE_BIN" tokenize -m "$T/tok.gguf" < "$FIX/$f.jsonl" > "$T/$f.out" || bad "tokenize $f exited non-zero"
    sed 's/^{"ids": \[\(.*\)\]}$/\1/; s/ //g' "$T/$f.out" > "$T/$f.got"
    n=$(wc -l < "$T/$f.want"); ndiff=$(diff "$T/$f.want" "$T/$f.got" | grep -c '^<')
    echo "$f.jsonl: $((n - ndiff))/$n"
    [ "$n" -gt 500 ] && [ "$ndiff" -eq 0 ] || bad "$f: $ndiff of $n cases differ"
done

# decode
sed 's/.*"hex":"\([0-9a-f]*\)".*/\1/' "$FIX/decode_cases.jsonl" > "$T/dec.want"
"$MINKE_BIN" tokenize -m "$T/tok.gguf" --decode < "$FIX/decode_cases.jsonl" > "$T/dec.out" || bad "decode exited non-zero"
sed 's/^{"hex": "\([0-9a-f]*\)"}$/\1/' "$T/dec.out" > "$T/dec.got"
n=$(wc -l < "$T/dec.want"); ndiff=$(diff "$T/dec.want" "$T/dec.got" | grep -c '^<')
echo "decode_cases.jsonl: $((n - ndiff))/$n"
[ "$n" -gt 1600 ] && [ "$ndiff" -eq 0 ] || bad "decode: $ndiff of $n cases differ"

# add_bos, bad lines keep their place, then processing continues
printf '%s\n' '{"text": "Hello world", "add_bos": true}' 'not json' '{"text": 5}' '{"ids": [1]}' '{"text": "Hello world"}' \
    | "$MINKE_BIN" tokenize -m "$T/tok.gguf" > "$T/mixed.out"
l1=$(sed -n 1p "$T/mixed.out"); l5=$(sed -n 5p "$T/mixed.out")
[ "$l1" = '{"ids": [0, 19923, 2058]}' ] || bad "add_bos line: $l1"
[ "$l5" = '{"ids": [19923, 2058]}' ] || bad "line after errors: $l5"
[ "$(grep -c '^{"error": ' "$T/mixed.out")" -eq 3 ] || bad "expected 3 error lines: $(cat "$T/mixed.out")"
printf '%s\n' '{"ids": [0, 129280]}' '{"ids": ["x"]}' '{"ids": [128803, 30594]}' \
    | "$MINKE_BIN" tokenize -m "$T/tok.gguf" --decode > "$T/dbad.out"
[ "$(grep -c '^{"error": ' "$T/dbad.out")" -eq 2 ] || bad "decode errors: $(cat "$T/dbad.out")"
[ "$(sed -n 3p "$T/dbad.out")" = '{"hex": "3cefbd9c55736572efbd9c3ee4bda0e5a5bd"}' ] || bad "decode after errors: $(sed -n 3p "$T/dbad.out")"

# a GGUF without tokenizer is a clear error
"$MINKE_BIN" tokenize --write-gguf "$T/notok.gguf" || bad "write no-tokenizer GGUF"
if echo '{"text": "x"}' | "$MINKE_BIN" tokenize -m "$T/notok.gguf" > "$T/notok.out" 2> "$T/notok.err"; then
    bad "no-tokenizer GGUF accepted"
fi
grep -q "has no tokenizer" "$T/notok.err" || bad "no-tokenizer message: $(cat "$T/notok.err")"

# synthetic tokenizer: round trip through ids
"$MINKE_BIN" tokenize --synthetic 1000 --write-gguf "$T/syn.gguf" || bad "write synthetic GGUF"
echo '{"text": "Hello world, <think>ok</think>"}' | "$MINKE_BIN" tokenize -m "$T/syn.gguf" > "$T/syn.ids" || bad "synthetic encode"
sed 's/ids/ids/' "$T/syn.ids" | "$MINKE_BIN" tokenize -m "$T/syn.gguf" --decode > "$T/syn.hex"
[ "$(cat "$T/syn.hex")" = '{"hex": "48656c6c6f20776f726c642c203c7468696e6b3e6f6b3c2f7468696e6b3e"}' ] || bad "synthetic round trip: $(cat "$T/syn.hex")"

[ "$fail" -eq 0 ] && echo "t_tokenize: all passed"
exit "$fail"
