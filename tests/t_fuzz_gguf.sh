#!/bin/sh
# t_fuzz_gguf.sh: a short bounded libFuzzer run of the GGUF reader and the
# DeepSeek V4 checks (tests/fuzz/fuzz_gguf.c) from freshly generated seeds.
# Any crash, sanitizer report or leak fails the test. Skipped (exit 0) when
# clang's libFuzzer is not installed. FUZZ_SECONDS overrides the 15 s budget.
set -u
B=${MINKE_BUILD:-build}
SECS=${FUZZ_SECONDS:-15}
if [ "${MINKE_ASAN:-0}" = 1 ]; then SECS=5; fi
T="$B/tmp/t_fuzz_gguf.$$"
mkdir -p "$T/corpus" "$T/seeds"
trap 'rm -rf "$T"' EXIT

if ! command -v clang > /dev/null 2>&1; then echo "SKIP: clang not installed"; exit 0; fi
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$T/probe.c"
if ! clang -fsanitize=fuzzer "$T/probe.c" -o "$T/probe" > /dev/null 2>&1; then
    echo "SKIP: clang has no libFuzzer (-fsanitize=fuzzer)"
    exit 0
fi

# build into our own build dir so parallel test runs do not collide on build/fuzz
FUZZ_SRC="src/gguf/gguf.c src/model/config.c src/model/layout.c $(ls src/quant/*.c)"
FLAGS="-std=gnu11 -g -O1 -Iinclude -Isrc -march=x86-64-v2 -mavx2 -mfma -mf16c"
clang $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o "$T/fuzz_gguf" \
    tests/fuzz/fuzz_gguf.c $FUZZ_SRC -lm 2> "$T/build.log" || { echo "FAIL: building the fuzzer"; cat "$T/build.log"; exit 1; }
clang $FLAGS -o "$T/make_seeds" tests/fuzz/make_seeds.c $FUZZ_SRC -lm 2>> "$T/build.log" ||
    { echo "FAIL: building make_seeds"; cat "$T/build.log"; exit 1; }
"$T/make_seeds" "$T/seeds" || { echo "FAIL: make_seeds"; exit 1; }

"$T/fuzz_gguf" -max_total_time="$SECS" -print_final_stats=1 -rss_limit_mb=2048 -seed=1 \
    -artifact_prefix="$T/" "$T/corpus" "$T/seeds" > "$T/fuzz.log" 2>&1
rc=$?
grep -E "^stat::number_of_executed_units|^stat::new_units_added|DONE|cov:" "$T/fuzz.log" | tail -3
if [ $rc -ne 0 ] || grep -q "ERROR: \(AddressSanitizer\|LeakSanitizer\|libFuzzer\)\|runtime error" "$T/fuzz.log"; then
    echo "FAIL: fuzzer found a problem (rc $rc)"
    grep -A 30 "ERROR\|runtime error" "$T/fuzz.log" | head -60
    for a in "$T"/crash-* "$T"/leak-* "$T"/oom-* "$T"/timeout-*; do
        [ -f "$a" ] && { mkdir -p "$B/fuzz-artifacts"; cp "$a" "$B/fuzz-artifacts/"; echo "artifact kept: $B/fuzz-artifacts/$(basename "$a")"; }
    done
    exit 1
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$T/fuzz.log")
[ -n "$runs" ] && [ "$runs" -gt 1000 ] || { echo "FAIL: only '$runs' executions"; exit 1; }
echo "ok: $runs executions in ${SECS}s, no crash"
