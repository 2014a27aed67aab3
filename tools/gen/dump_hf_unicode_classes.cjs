// dump_hf_unicode_classes.cjs: which code points Hugging Face tokenizers' own
// regex engine puts in \p{L}, \p{M}, \p{N}, \p{P}, \p{S} and \s, as ranges.
// Each class is probed with a one-Split pre-tokenizer (behavior Removed) over
// every code point; what survives is outside the class.
//   npm install tokenizers@0.23.2   (in the directory this script runs from)
//   node dump_hf_unicode_classes.cjs hf_unicode_classes.json
const { Tokenizer } = require("tokenizers");
const fs = require("fs");
function pretok(pattern) {
  const j = { version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: "Split", pattern: { Regex: pattern }, behavior: "Removed", invert: false },
    post_processor: null, decoder: null,
    model: { type: "WordLevel", vocab: { "[UNK]": 0 }, unk_token: "[UNK]" } };
  return Tokenizer.fromString(JSON.stringify(j)).getPreTokenizer();
}
const groups = { L: "\\p{L}", M: "\\p{M}", N: "\\p{N}", P: "\\p{P}", S: "\\p{S}", WS: "\\s" };
const out = {};
for (const [g, pat] of Object.entries(groups)) {
  const pt = pretok(pat);
  const unmatched = new Set();
  const CH = 4096;
  for (let base = 0; base < 0x110000; base += CH) {
    let s = "";
    for (let c = base; c < base + CH && c < 0x110000; c++) {
      if (c >= 0xd800 && c <= 0xdfff) continue;
      s += String.fromCodePoint(c);
    }
    for (const [piece] of pt.preTokenizeString(s)) for (const ch of piece) unmatched.add(ch.codePointAt(0));
  }
  // ranges of matched code points
  const ranges = [];
  let start = -1;
  for (let c = 0; c <= 0x110000; c++) {
    const m = c < 0x110000 && !(c >= 0xd800 && c <= 0xdfff) && !unmatched.has(c);
    if (m && start < 0) start = c;
    if (!m && start >= 0) { ranges.push([start, c - 1]); start = -1; }
  }
  out[g] = ranges;
  console.error(g, ranges.length, "ranges");
}
fs.writeFileSync(process.argv[2], JSON.stringify(out));
