#!/bin/sh
# run.sh: runs every CPU test: each tests/test_*.c binary, then each tests/t_*.sh
# script, from the repository root. Prints one line per test and a summary;
# exits non-zero if any failed.
cd "$(dirname "$0")/.." || exit 1
B=${MINKE_BUILD:-build}
export MINKE_BIN=${MINKE_BIN:-$(pwd)/minke}
export MINKE_BUILD="$B"
pass=0; fail=0; failed=""
for t in "$B"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    start=$(date +%s)
    if "$t" > "$B/tests/$n.log" 2>&1; then
        pass=$((pass+1)); echo "PASS $n ($(( $(date +%s) - start ))s)"
    else
        fail=$((fail+1)); failed="$failed $n"; echo "FAIL $n"; tail -30 "$B/tests/$n.log"
    fi
done
for t in tests/t_*.sh; do
    [ -f "$t" ] || continue
    n=$(basename "$t" .sh)
    start=$(date +%s)
    if MINKE_BUILD="$B" sh "$t" > "$B/tests/$n.log" 2>&1; then
        pass=$((pass+1)); echo "PASS $n ($(( $(date +%s) - start ))s)"
    else
        fail=$((fail+1)); failed="$failed $n"; echo "FAIL $n"; tail -30 "$B/tests/$n.log"
    fi
done
echo "$pass passed, $fail failed${failed:+:$failed}"
[ "$fail" -eq 0 ]
