#!/bin/sh
# t_logits.sh: the `minke logits` test interface on tiny-a (F32 conversion):
# logits match the HF reference (1e-4 x max|logit|), prefill == --chunk ==
# --decode == --restore-at byte for byte, taps are written, and bad inputs
# fail with a message.
set -u
B=${MINKE_BUILD:-build}
T="$B/tmp/h4_logits"
mkdir -p "$T"
FX=tests/fixtures/oracle/tiny-a
fail() { echo "FAIL: $*"; exit 1; }

"$MINKE_BIN" convert "$FX" -o "$T/f32.gguf" --experts f32 --dense f32 --no-progress >/dev/null || fail "convert"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/all.f32" --sims off --threads 2 --time \
    || fail "logits"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/chunk.f32" --sims off --chunk 13 \
    --dump-taps "$T/taps" || fail "logits --chunk"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/dec.f32" --sims off --decode || fail "logits --decode"
cmp -s "$T/all.f32" "$T/chunk.f32" || fail "--chunk 13 differs from one prefill"
cmp -s "$T/all.f32" "$T/dec.f32" || fail "--decode differs from one prefill"
[ "$(wc -c < "$T/all.f32")" -eq "$(wc -c < "$FX/logits.f32")" ] || fail "output size"
for tap in embd blk.0.q blk.5.out hc_head.out logits; do
    [ -s "$T/taps/$tap.f32" ] || fail "tap $tap not written"
done
cmp -s "$T/taps/logits.f32" "$T/all.f32" || fail "logits tap differs from the output"

# compare with the reference: max |diff| <= 1e-4 * max |ref|
od -An -v -f "$FX/logits.f32" | tr -s ' ' '\n' | grep -v '^$' > "$T/ref.txt"
od -An -v -f "$T/all.f32" | tr -s ' ' '\n' | grep -v '^$' > "$T/got.txt"
paste "$T/ref.txt" "$T/got.txt" | awk '
    { d = $1 - $2; if (d < 0) d = -d; if (d > md) md = d; a = $1 < 0 ? -$1 : $1; if (a > ma) ma = a }
    END { printf "max|diff| %.3g, max|logit| %.3g, relative %.3g\n", md, ma, md / ma; exit !(md <= 1e-4 * ma) }' \
    || fail "logits differ from the reference"

# sims on changes the numbers
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/sims.f32" || fail "logits sims on"
cmp -s "$T/all.f32" "$T/sims.f32" && fail "--sims on gives the same logits as off"

# --restore-at: the session through its serialised bytes into a new one after
# 37 tokens, then the rest: the logits of an uninterrupted run, byte for byte
# (prefill and decode, sims on: the compressed rows and indexer state travel)
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/rs.f32" --restore-at 37 \
    || fail "logits --restore-at"
cmp -s "$T/sims.f32" "$T/rs.f32" || fail "--restore-at 37 changed the prefill logits"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/rsd.f32" --decode --restore-at 101 \
    || fail "logits --decode --restore-at"
cmp -s "$T/sims.f32" "$T/rsd.f32" || fail "--decode --restore-at 101 differs from one prefill"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" --restore-at 160 2> "$T/err.txt" \
    && fail "--restore-at past the tokens accepted"
grep -q "needs more than" "$T/err.txt" || fail "no clear message for --restore-at 160: $(cat "$T/err.txt")"

# bad inputs
printf '\001\000\000\000\210\023\000\000' > "$T/bad.i32"   # ids 1, 5000
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$T/bad.i32" --out "$T/x.f32" 2> "$T/err.txt" && fail "id 5000 accepted"
grep -q "out of range" "$T/err.txt" || fail "no clear message for a bad id: $(cat "$T/err.txt")"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" --ctx 100 2> "$T/err.txt" \
    && fail "context overflow accepted"
grep -q "overflow" "$T/err.txt" || fail "no clear message for overflow: $(cat "$T/err.txt")"
"$MINKE_BIN" logits -m "$T/missing.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" 2>/dev/null && fail "missing model accepted"
if "$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" --backend cuda 2> "$T/err.txt"; then
    echo "(cuda backend available)"
else
    grep -qi "cuda" "$T/err.txt" || fail "no clear message for --backend cuda: $(cat "$T/err.txt")"
    cat "$T/err.txt"
fi
# --gpus: a count or all; a bad value and --gpus with the CPU backend are clear errors
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" --gpus two 2> "$T/err.txt" \
    && fail "--gpus two accepted"
grep -q "gpus takes" "$T/err.txt" || fail "no clear message for --gpus two: $(cat "$T/err.txt")"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/x.f32" --gpus 2 2> "$T/err.txt" \
    && fail "--gpus 2 accepted by the cpu backend"
grep -q "for the cuda backend" "$T/err.txt" || fail "no clear message for --gpus 2 on the cpu: $(cat "$T/err.txt")"
"$MINKE_BIN" logits -m "$T/f32.gguf" --tokens "$FX/tokens.i32" --out "$T/g1.f32" --sims off --gpus 1 \
    || fail "--gpus 1 on the cpu backend"
cmp -s "$T/all.f32" "$T/g1.f32" || fail "--gpus 1 changed the cpu logits"
rm -rf "$T"   # kept on failure for inspection
echo "t_logits: ok"
