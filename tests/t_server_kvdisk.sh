#!/bin/sh
# t_server_kvdisk.sh: the disk KV cache of `minke serve` across restarts.
# 1. cold request -> snapshot files written (cold + shutdown saves), exit 0;
# 2. restart on the same --kv-disk-dir: the shared prefix is loaded from disk
#    (cached tokens reported, greedy answer unchanged);
# 3. corrupted, truncated and foreign files are rejected with a log line and
#    removed, and nothing is reused from them;
# 4. a small --kv-disk-space-mb budget is enforced by eviction.
set -eu
B=${MINKE_BUILD:-build}
BIN=${MINKE_BIN:-$(pwd)/minke}
T="$B/tmp/kvdisk.$$"
D="$T/cache"
mkdir -p "$T"
MODEL="$B/tmp/server-tiny.gguf"
PORT=$((20000 + ($$ + 7919) % 20000))
SERVER_PID=""

cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
# under ASan/UBSan an undefined-behaviour report stops the server, so it fails the test
if [ "${MINKE_ASAN:-0}" = 1 ]; then export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"; fi

if ! command -v node >/dev/null 2>&1; then echo "SKIP: node is not installed"; exit 0; fi
if [ ! -d tests/node/node_modules/openai ]; then
    (cd tests/node && npm ci --no-audit --no-fund) || { echo "FAIL: npm ci in tests/node failed"; exit 1; }
fi
if [ ! -f "$MODEL" ]; then
    "$BIN" mkmodel --preset tiny --tokenizer tests/fixtures/tokenizer/deepseek_v4_tokenizer.json -o "$MODEL.tmp.$$" --no-progress
    mv "$MODEL.tmp.$$" "$MODEL"
fi

start() { # start LOGNAME [extra options]
    log="$T/$1.log"
    shift
    "$BIN" serve -m "$MODEL" --port "$PORT" --ctx 1024 --api-key test-key -t 2 --kv-disk-dir "$D" --kv-cache-min-tokens 32 "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    i=0
    until node tests/node/http.mjs health "http://127.0.0.1:$PORT"; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server did not start"; cat "$log"; exit 1; fi
        sleep 0.1
    done
}
stop() {
    kill -TERM "$SERVER_PID"
    if ! wait "$SERVER_PID"; then echo "FAIL: server did not exit 0 on SIGTERM"; SERVER_PID=""; exit 1; fi
    SERVER_PID=""
}
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

export MINKE_URL="http://127.0.0.1:$PORT" MINKE_API_KEY=test-key

# 1. cold
start run1
node tests/node/kvdisk.mjs cold "$T/answer.json" || fail "cold phase"
stop
grep -q 'stored .* (cold' "$T/run1.log" || fail "no cold snapshot stored"
grep -q 'stored .* (shutdown' "$T/run1.log" || fail "no shutdown snapshot stored"
n=$(ls "$D"/*.kv | wc -l)
[ "$n" -ge 2 ] || fail "expected >= 2 cache files, found $n"
ls "$D" | grep -q '\.tmp\.' && fail "temporary file left behind"
for f in "$D"/*.kv; do
    [ "$(head -c 3 "$f")" = KVC ] || fail "$f lacks the KVC magic"
    # the name is the SHA-1 of the key text (header: u32 key length at 48, key at 52)
    klen=$(od -An -tu4 -j48 -N4 "$f" | tr -d ' ')
    sum=$(tail -c +53 "$f" | head -c "$klen" | sha1sum | cut -c1-40)
    [ "$sum.kv" = "$(basename "$f")" ] || fail "$f: name is not the SHA-1 of its key text ($sum)"
done
echo "ok   cold request stored $n snapshots"

# 2. warm restart
start run2
node tests/node/kvdisk.mjs warm "$T/answer.json" || fail "warm phase"
stop
grep -q 'cached=[1-9][0-9]* (disk-text)' "$T/run2.log" || fail "log does not show a disk hit"
echo "ok   restart reused the disk snapshot"

# 3. corrupt every file (one flipped byte in the middle), truncate one, add a foreign one
for f in "$D"/*.kv; do
    size=$(wc -c <"$f")
    printf '\377' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
done
first=$(ls "$D"/*.kv | head -1)
head -c 100 "$first" >"$T/trunc" && cp "$T/trunc" "$D/0123456789abcdef0123456789abcdef01234567.kv"
printf 'not a cache file at all, just some bytes that are long enough to have a header........' >"$D/89abcdef0123456789abcdef0123456789abcdef.kv"
start run3
grep -q 'rejected 0123456789abcdef0123456789abcdef01234567.kv' "$T/run3.log" || fail "truncated file not rejected at startup"
grep -q 'rejected 89abcdef0123456789abcdef0123456789abcdef.kv' "$T/run3.log" || fail "foreign file not rejected at startup"
node tests/node/kvdisk.mjs rejected "$T/answer.json" || fail "corrupted cache was used"
grep -q 'rejected .*checksum mismatch' "$T/run3.log" || fail "corrupted file not rejected with a log line"
stop
for f in 0123456789abcdef0123456789abcdef01234567 89abcdef0123456789abcdef0123456789abcdef; do
    [ ! -f "$D/$f.kv" ] || fail "rejected file $f.kv not removed"
done
echo "ok   corrupted, truncated and foreign files rejected and removed"

# 4. budget: 1 MiB holds one ~0.7 MiB snapshot; more stores evict older ones
rm -rf "$D"
start run4 --kv-disk-space-mb 1
for q in one two three; do
    node tests/node/http.mjs post "$MINKE_URL" /v1/chat/completions \
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Topic $q: $(printf 'weather and climate facts %.0s' 1 2 3 4 5 6 7 8 9 10 11 12)\"},{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":2,\"thinking\":false}" >/dev/null ||
        fail "request $q"
done
stop
total=$(cat "$D"/*.kv 2>/dev/null | wc -c)
[ "$total" -le 1048576 ] || fail "cache holds $total bytes, over the 1 MiB budget"
grep -q 'evicted' "$T/run4.log" || fail "nothing was evicted"
grep -q 'stored .* (evict' "$T/run4.log" || fail "no evict snapshot when another conversation replaced the live one"
echo "ok   budget kept ($total bytes) by eviction"

# 5. continued snapshots at absolute aligned frontiers (interval 64, align 64)
rm -rf "$D"
start run5 --kv-cache-continued-interval-tokens 64 --kv-cache-boundary-align-tokens 64 --kv-cache-cold-max-tokens 0
node tests/node/kvdisk.mjs cold "$T/answer5.json" || fail "continued phase"
stop
grep -q 'stored .* (continued, 64 tokens' "$T/run5.log" || fail "no continued snapshot at 64 tokens"
grep -q 'stored .* (continued, 128 tokens' "$T/run5.log" || fail "no continued snapshot at 128 tokens"
grep -q 'stored .* (cold' "$T/run5.log" && fail "cold save with --kv-cache-cold-max-tokens 0"
echo "ok   continued snapshots at aligned frontiers"

# 6. exact DSML tool replay survives a restart (tool-id map trailer)
rm -rf "$D"
start run6 --test-hooks
node tests/node/kvdisk.mjs tool1 "$T/tool.json" || fail "tool turn"
stop
start run7
grep -q 'tool-call ids restored' "$T/run7.log" || fail "tool map not restored at startup"
node tests/node/kvdisk.mjs tool2 "$T/tool.json" || fail "tool replay after restart"
stop
echo "ok   tool-call replay restored from the cache files after a restart"

# 7. a thinking turn replayed without its reasoning: the evicted snapshot is
#    keyed by the client-visible transcript and continues after a restart
rm -rf "$D"
start run8 --test-hooks
node tests/node/kvdisk.mjs vis1 "$T/vis.json" || fail "visible phase 1"
stop
grep -q 'stored .* (evict' "$T/run8.log" || fail "no evict snapshot of the thinking turn"
start run9
node tests/node/kvdisk.mjs vis2 "$T/vis.json" || fail "visible phase 2"
stop
grep -q '(disk-visible)' "$T/run9.log" || fail "log does not show a disk-visible hit"
echo "ok   thinking turn found again on disk by its visible transcript"

# 8. the same prompt again after a long answer: served from the in-memory
#    prompt snapshot, and the displaced answer (>= min tokens) saved as evict
rm -rf "$D"
start run10 --test-hooks --kv-cache-cold-max-tokens 0
body='{"messages":[{"role":"user","content":"Say it twice"}],"max_tokens":200,"thinking":false,"minke_script":"'"$(printf 'one two three four five six seven eight nine ten %.0s' 1 2 3 4 5 6)"'"}'
node tests/node/http.mjs post "$MINKE_URL" /v1/chat/completions "$body" >"$T/snap1.json" || fail "snapshot request 1"
grep -q 'stored' "$T/run10.log" && fail "stored a snapshot before the prompt was resent"
node tests/node/http.mjs post "$MINKE_URL" /v1/chat/completions "$body" >"$T/snap2.json" || fail "snapshot request 2"
stop
grep -q 'cached=[1-9][0-9]* (snapshot)' "$T/run10.log" || fail "resent prompt not served from the prompt snapshot"
grep -q 'stored .* (evict' "$T/run10.log" || fail "displaced answer not saved before the snapshot was restored"
echo "ok   resent prompt restored from the prompt snapshot, displaced answer saved (evict)"
