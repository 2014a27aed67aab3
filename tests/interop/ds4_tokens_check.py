#!/usr/bin/env python3
"""ds4_tokens_check.py: tokenize the fixture cases with ds4 reading a GGUF that
minke wrote, and compare with the Hugging Face ids in the fixture.

This checks the tokenizer metadata minke writes (tokjson_write_gguf: the
token table and the merges, in the order ds4 reads them) through another
implementation. Each case's text goes to `ds4 --dump-tokens --prompt-file`,
whose first output line is the id list.

ds4's tokenizer is deliberately approximate (ds4.c: bpe_tokenize_text treats
every non-ASCII code point outside CJK/kana as a letter; special_token_at
matches only its seven chat tokens), so cases outside that scope may differ
for reasons that have nothing to do with the file. A case is "in scope" when
its text is ASCII apart from the seven special strings and contains no other
added-token string (taken from TOKENIZER.json); only in-scope mismatches fail
the check. Out-of-scope mismatches are counted and listed with -v. Cases
with "add_bos" expect BOS first: ds4 gets the BOS string prepended.

usage: ds4_tokens_check.py [-v] DS4_BIN MODEL.gguf CASES.jsonl TOKENIZER.json
Exit 1 if any in-scope case differs.
"""
import json
import os
import subprocess
import sys
import tempfile

DS4_SPECIALS = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<think>", "</think>", "\uff5cDSML\uff5c"]


def in_ds4_scope(text, other_added):
    for sp in DS4_SPECIALS:
        text = text.replace(sp, " ")
    if any(a in text for a in other_added):
        return False
    return all(ord(ch) < 128 for ch in text)


def main():
    args = sys.argv[1:]
    verbose = bool(args) and args[0] == "-v"
    if verbose:
        args = args[1:]
    if len(args) != 4:
        print("usage: ds4_tokens_check.py [-v] DS4_BIN MODEL.gguf CASES.jsonl TOKENIZER.json", file=sys.stderr)
        return 2
    ds4, model, cases_path, tok_path = args
    added = [a["content"] for a in json.load(open(tok_path, encoding="utf-8"))["added_tokens"]]
    other_added = [a for a in added if a not in DS4_SPECIALS]
    cases = [json.loads(line) for line in open(cases_path, encoding="utf-8") if line.strip()]
    # ds4 reads the prompt file as a C string: texts with NUL cannot be passed
    cases = [c for c in cases if "\0" not in c["text"] and c["text"] != ""]
    bad = out_of_scope = n_scope = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prompt.txt")
        for c in cases:
            with open(path, "wb") as f:
                f.write(((DS4_SPECIALS[0] if c.get("add_bos") else "") + c["text"]).encode("utf-8", "surrogatepass"))
            r = subprocess.run([ds4, "-m", model, "--dump-tokens", "--prompt-file", path],
                               capture_output=True, text=True, errors="replace")
            first = r.stdout.splitlines()[0] if r.stdout else ""
            try:
                ids = json.loads(first)
            except ValueError:
                ids = None
            scope = in_ds4_scope(c["text"], other_added)
            n_scope += scope
            if r.returncode != 0 or ids != c["ids"]:
                if scope:
                    bad += 1
                else:
                    out_of_scope += 1
                if (scope and bad <= 20) or verbose:
                    label = "MISMATCH" if scope else "outside ds4 scope:"
                    print("%s %s %r: ds4 %s (rc %d) vs fixture %s%s" % (label,
                        c.get("tag", "?"), c["text"][:60], first[:200], r.returncode, c["ids"][:30],
                        (" / " + r.stderr.strip()[:200]) if r.returncode else ""))
    print("ds4 tokenization: %d/%d in-scope cases match; %d/%d out-of-scope cases match" % (
        n_scope - bad, n_scope, len(cases) - n_scope - out_of_scope, len(cases) - n_scope))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
