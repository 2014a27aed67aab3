#!/bin/sh
# t_render.sh: `minke render` end to end against the official encoder's
# fixtures (tests/fixtures/chat/cases.jsonl): every rendering byte-exact,
# every rejected conversation answered with an error line, and with -m the
# token ids of each rendering equal to Hugging Face's (tokenizer GGUF built
# from tests/fixtures/tokenizer/deepseek_v4_tokenizer.json). Compares with node.
. tests/shlib.sh
FIX=tests/fixtures/chat

cat > "$T/cmp.cjs" <<'JS'
// cmp.cjs WANT GOT WITH_IDS: line-by-line comparison of render outputs
const fs = require('fs');
const [want, got, withIds] = process.argv.slice(2);
const W = fs.readFileSync(want, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
const G = fs.readFileSync(got, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
let ok = 0, bad = 0;
if (W.length !== G.length) { console.log(`line count ${G.length} != ${W.length}`); process.exit(1); }
W.forEach((w, i) => {
  const g = G[i];
  let good;
  if (w.rendered === null) good = typeof g.error === 'string' && g.rendered === undefined;
  else good = g.rendered === w.rendered &&
              (withIds !== '1' || JSON.stringify(g.ids) === JSON.stringify(w.ids));
  if (good) ok++; else { bad++; console.log(`MISMATCH ${w.name}: ${JSON.stringify(g).slice(0, 300)}`); }
});
console.log(`${ok}/${W.length} cases match${withIds === '1' ? ' (with ids)' : ''}`);
process.exit(bad ? 1 : 0);
JS

"$MINKE_BIN" render "$FIX/inputs.jsonl" > "$T/out.jsonl" || bad "render exited non-zero"
node "$T/cmp.cjs" "$FIX/cases.jsonl" "$T/out.jsonl" 0 || bad "renderings differ"

# with the tokenizer: ids of each rendering
if "$MINKE_BIN" tokenize --json tests/fixtures/tokenizer/deepseek_v4_tokenizer.json --write-gguf "$T/tok.gguf" > /dev/null; then
    "$MINKE_BIN" render -m "$T/tok.gguf" < "$FIX/inputs.jsonl" > "$T/ids.jsonl" || bad "render -m exited non-zero"
    node "$T/cmp.cjs" "$FIX/cases.jsonl" "$T/ids.jsonl" 1 || bad "ids differ"
else
    bad "could not write the tokenizer GGUF"
fi

# bad lines keep their place and processing continues
printf '%s\n' 'not json' '{"messages": [{"role": "user", "content": "Hi"}], "thinking_mode": "chat"}' \
    '{"messages": [], "thinking_mode": "sideways"}' > "$T/mixed.in"
"$MINKE_BIN" render < "$T/mixed.in" > "$T/mixed.out" && bad "bad JSON line should make the exit status non-zero"
[ "$(wc -l < "$T/mixed.out")" -eq 3 ] || bad "one output line per input line: $(cat "$T/mixed.out")"
sed -n 1p "$T/mixed.out" | grep -q '^{"error": ' || bad "line 1: $(sed -n 1p "$T/mixed.out")"
l2=$(sed -n 2p "$T/mixed.out")
[ "$l2" = '{"rendered": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"}' ] || bad "line 2: $l2"
sed -n 3p "$T/mixed.out" | grep -q '^{"error": ' || bad "line 3: $(sed -n 3p "$T/mixed.out")"
"$MINKE_BIN" render --help | grep -q 'usage: minke render' || bad "--help"
exit $fail
