#!/bin/sh
# t_parse.sh: `minke parse` end to end against the official parser's fixtures
# (tests/fixtures/chat/parse_cases.jsonl): accepted completions JSON-equal,
# rejected ones answered with an error line; --tolerant never errors and
# agrees with the strict parser wherever that accepts. Compares with node.
. tests/shlib.sh
FIX=tests/fixtures/chat

cat > "$T/cmp.cjs" <<'JS'
// cmp.cjs WANT GOT TOLERANT
const fs = require('fs');
const util = require('util');
const [want, got, tolerant] = process.argv.slice(2);
const W = fs.readFileSync(want, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
const G = fs.readFileSync(got, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
if (W.length !== G.length) { console.log(`line count ${G.length} != ${W.length}`); process.exit(1); }
let ok = 0, bad = 0;
W.forEach((w, i) => {
  const g = G[i];
  let good;
  if (tolerant === '1') {
    const p = g.parsed;
    good = p && typeof p.content === 'string' && typeof p.reasoning_content === 'string' && Array.isArray(p.tool_calls) &&
           (w.parsed === null || (g.strict === true && util.isDeepStrictEqual(p, w.parsed)));
  } else if (w.parsed === null) good = typeof g.error === 'string' && g.parsed === undefined;
  else good = util.isDeepStrictEqual(g.parsed, w.parsed);
  if (good) ok++; else { bad++; console.log(`MISMATCH ${w.name}: ${JSON.stringify(g).slice(0, 300)}`); }
});
console.log(`${ok}/${W.length} parse cases ${tolerant === '1' ? '(tolerant)' : 'match'}`);
process.exit(bad ? 1 : 0);
JS

"$MINKE_BIN" parse "$FIX/parse_inputs.jsonl" > "$T/out.jsonl" || bad "parse exited non-zero"
node "$T/cmp.cjs" "$FIX/parse_cases.jsonl" "$T/out.jsonl" 0 || bad "strict parses differ"
"$MINKE_BIN" parse --tolerant < "$FIX/parse_inputs.jsonl" > "$T/tol.jsonl" || bad "parse --tolerant exited non-zero"
node "$T/cmp.cjs" "$FIX/parse_cases.jsonl" "$T/tol.jsonl" 1 || bad "tolerant parses"

printf '%s\n' '{"thinking_mode": "chat"}' 'garbage' '{"thinking_mode": "chat", "completion": "ok<｜end▁of▁sentence｜>"}' \
    | "$MINKE_BIN" parse > "$T/mixed.out" && bad "bad lines should make the exit status non-zero"
[ "$(grep -c '^{"error": ' "$T/mixed.out")" -eq 2 ] || bad "two error lines: $(cat "$T/mixed.out")"
l3=$(sed -n 3p "$T/mixed.out")
[ "$l3" = '{"parsed": {"role": "assistant", "content": "ok", "reasoning_content": "", "tool_calls": []}}' ] || bad "line 3: $l3"
"$MINKE_BIN" parse "$T/no-such-file.jsonl" > /dev/null 2>&1 && bad "a missing input file must fail"
exit $fail
