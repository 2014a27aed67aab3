#!/bin/sh
# t_bench.sh: `minke bench` on the CPU backend with a tiny synthetic model:
# the CSV has the serving-spec header and one row per frontier with the right
# token counts and positive rates, --plot writes an SVG, and bad options fail.
set -u
M=${MINKE_BIN:?}
T=${MINKE_BUILD:-build}/tmp/t_bench
mkdir -p "$T"
fail() { echo "FAIL: $*"; exit 1; }
"$M" mkmodel --preset tiny -o "$T/tiny.gguf" > /dev/null 2>&1 || fail "mkmodel"
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 16 --ctx-max 48 --step-incr 16 -n 4 \
    --csv "$T/b.csv" --plot "$T/b.svg" 2> "$T/b.log" || { cat "$T/b.log"; fail "bench run"; }
head -1 "$T/b.csv" | grep -qx 'ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes' || fail "csv header"
[ "$(wc -l < "$T/b.csv")" -eq 4 ] || fail "expected 3 frontier rows: $(cat "$T/b.csv")"
awk -F, 'NR > 1 { exp_ctx = 16 * (NR - 1); if ($1 != exp_ctx || $2 != 16 || $3 <= 0 || $4 != 4 || $5 <= 0 || $6 <= 0) bad = 1;
         if (NR > 2 && $6 <= prev) bad = 1; prev = $6 } END { exit bad }' "$T/b.csv" || fail "csv rows: $(cat "$T/b.csv")"
grep -q '<svg' "$T/b.svg" && grep -q 'polyline' "$T/b.svg" || fail "svg"
grep -q 'decode' "$T/b.log" || fail "limit report on stderr"
grep -q 'warm-up prefill 1 of 16 tokens' "$T/b.log" || fail "no warm-up report: $(cat "$T/b.log")"
# each frontier's decode starts with one untimed step (the state restored after it)
[ "$(grep -c 'untimed first step [0-9.]* ms' "$T/b.log")" -eq 3 ] || fail "untimed first decode step not reported per frontier: $(cat "$T/b.log")"
# --warmup 0: no untimed prefill; a negative count is refused
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 8 --ctx-max 8 -n 1 --warmup 0 2> "$T/w.log" > /dev/null || fail "warmup 0 run"
if grep -q 'warm-up\|untimed first step' "$T/w.log"; then fail "--warmup 0 still warmed up"; fi
if "$M" bench -m "$T/tiny.gguf" --backend cpu --warmup -1 > /dev/null 2>&1; then fail "--warmup -1 accepted"; fi
# --host-logits (the engine's decode path; on the CPU the logits are the host's already) runs
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 8 --ctx-max 8 -n 2 --host-logits 2> /dev/null > "$T/h.csv" ||
    fail "host-logits run"
[ "$(wc -l < "$T/h.csv")" -eq 2 ] || fail "host-logits csv: $(cat "$T/h.csv")"
# --sample: the engine's decode (minke_sample) at each frontier, its rate and the hash of its tokens;
# with --host-logits the same seed samples the same tokens from the fetched logits
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 8 --ctx-max 16 --step-incr 8 -n 6 --sample 2> "$T/s1.log" > /dev/null ||
    fail "sample run"
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 8 --ctx-max 16 --step-incr 8 -n 6 --sample --host-logits \
    2> "$T/s2.log" > /dev/null || fail "sample host-logits run"
H1=$(grep -o 'sampled through the engine at temperature [0-9.]* [0-9.]* tok/s (tokens hash [0-9a-f]*' "$T/s1.log" | sed 's/.*hash //' | tr '\n' ' ')
H2=$(grep -o 'tokens hash [0-9a-f]*' "$T/s2.log" | sed 's/.*hash //' | tr '\n' ' ')
[ "$(echo "$H1" | wc -w)" -eq 2 ] && [ "$H1" = "$H2" ] || fail "sampled tokens: '$H1' against '$H2'"
if "$M" bench -m "$T/tiny.gguf" --backend cpu --temp 0 > /dev/null 2>&1; then fail "--temp without --sample accepted"; fi
if "$M" bench -m "$T/tiny.gguf" --backend cpu --sample --temp x > /dev/null 2>&1; then fail "--temp x accepted"; fi
# frontier steps by multiplication, clamped to ctx-max
"$M" bench -m "$T/tiny.gguf" --backend cpu -t 2 --ctx-start 10 --ctx-max 30 --step-mul 2 -n 2 2>/dev/null > "$T/m.csv" || fail "step-mul run"
[ "$(cut -d, -f1 "$T/m.csv" | tr '\n' ' ')" = "ctx_tokens 10 20 30 " ] || fail "step-mul frontiers: $(cat "$T/m.csv")"
if "$M" bench -m "$T/tiny.gguf" --ctx-start 0 > /dev/null 2>&1; then fail "ctx-start 0 accepted"; fi
if "$M" bench > /dev/null 2>&1; then fail "no model accepted"; fi
echo "t_bench: ok"
