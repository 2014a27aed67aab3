#!/bin/sh
# t_mtp.sh: `minke run` and `minke chat` with --mtp on a tiny synthetic model
# with the real vocabulary and its synthetic MTP file (mkmodel --mtp-out):
# greedy output with speculative decoding must be byte-identical to plain
# greedy output (several draft lengths, both pairings, two chat turns that
# reuse the session), the stats line reports the acceptance, and bad MTP
# files or option values give clear errors.
. tests/shlib.sh
TOK=tests/fixtures/tokenizer/deepseek_v4_tokenizer.json
"$MINKE_BIN" mkmodel --preset tiny --tokenizer "$TOK" -o "$T/m.gguf" --mtp-out "$T/mtp.gguf" --seed 9 \
    --no-progress -t 2 > /dev/null 2>&1 || { echo "FAIL mkmodel"; exit 1; }
RUN="$MINKE_BIN run -m $T/m.gguf -t 2 --greedy --nothink -n 32"

$RUN -p "Hello there" > "$T/plain.txt" 2> "$T/plain.err" || bad "plain run: $(cat "$T/plain.err")"
for args in "--mtp-draft 1" "--mtp-draft 4" "--mtp-draft 2 --mtp-pairing same"; do
    # shellcheck disable=SC2086
    $RUN -p "Hello there" --mtp "$T/mtp.gguf" $args > "$T/spec.txt" 2> "$T/spec.err"
    if cmp -s "$T/plain.txt" "$T/spec.txt"; then ok "run --mtp $args: same output as plain greedy"
    else bad "run --mtp $args: output differs ($(cat "$T/spec.err"))"; fi
    if grep -q "MTP drafts [0-9]*, accepted [0-9]* (" "$T/spec.err"; then ok "stats: $(grep -o 'MTP drafts[^;]*' "$T/spec.err")"
    else bad "no acceptance in the stats line: $(cat "$T/spec.err")"; fi
done

# two chat turns: the second reuses the session state left by speculation
printf 'Hi\nTell me more\n' | $(echo "$RUN" | sed 's/ run / chat /') > "$T/chat_plain.txt" 2>/dev/null
printf 'Hi\nTell me more\n' | $(echo "$RUN" | sed 's/ run / chat /') --mtp "$T/mtp.gguf" --mtp-draft 3 \
    > "$T/chat_spec.txt" 2>/dev/null
if [ -s "$T/chat_plain.txt" ] && cmp -s "$T/chat_plain.txt" "$T/chat_spec.txt"; then ok "chat, two turns: same output"
else bad "chat with --mtp differs from plain chat"; fi

# sampling: MTP is loaded but unused, with a note
"$MINKE_BIN" run -m "$T/m.gguf" -t 2 --nothink -n 4 -p "Hi" --mtp "$T/mtp.gguf" --temp 0.7 --seed 1 2>&1 >/dev/null | grep -q "greedy decoding only" \
    && ok "note without --greedy" || bad "no note for --mtp without --greedy"

# errors
$RUN -p "Hi" --mtp "$T/m.gguf" > /dev/null 2> "$T/err" && bad "a main model accepted as MTP file"
grep -q "mtp.0." "$T/err" && ok "wrong MTP file: $(head -1 "$T/err")" || bad "unclear error: $(cat "$T/err")"
$RUN -p "Hi" --mtp "$T/absent.gguf" > /dev/null 2> "$T/err" && bad "a missing MTP file accepted"
grep -q "MTP file" "$T/err" && ok "missing MTP file: clear error" || bad "unclear error: $(cat "$T/err")"
$RUN -p "Hi" --mtp "$T/mtp.gguf" --mtp-draft 17 > /dev/null 2> "$T/err" && bad "--mtp-draft 17 accepted"
grep -q "bad value" "$T/err" && ok "--mtp-draft 17 refused" || bad "unclear error: $(cat "$T/err")"
$RUN -p "Hi" --mtp "$T/mtp.gguf" --mtp-pairing odd > /dev/null 2>&1 && bad "--mtp-pairing odd accepted"
[ $fail = 0 ] && echo PASS
exit $fail
