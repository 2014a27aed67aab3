#!/bin/sh
# t_server.sh: end-to-end tests of `minke serve` on the CPU backend with a tiny
# random model that carries the real DeepSeek V4 vocabulary: the official
# openai and @anthropic-ai/sdk clients drive every endpoint (tests/node/sdk.mjs),
# broken and hostile requests (bad_input.mjs), and a bounded concurrent load
# with an RSS check (load.mjs). The server is killed on exit, whatever happens.
set -eu
B=${MINKE_BUILD:-build}
BIN=${MINKE_BIN:-$(pwd)/minke}
T="$B/tmp/server.$$"
mkdir -p "$T"
MODEL="$B/tmp/server-tiny.gguf"
PORT=$((20000 + $$ % 20000))
SERVER_PID=""

cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
# under ASan/UBSan an undefined-behaviour report stops the server, so it fails the test
if [ "${MINKE_ASAN:-0}" = 1 ]; then export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"; fi

if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed"
    exit 0
fi
if [ ! -d tests/node/node_modules/openai ] || [ ! -d tests/node/node_modules/@anthropic-ai/sdk ]; then
    (cd tests/node && npm ci --no-audit --no-fund) || { echo "FAIL: npm ci in tests/node failed"; exit 1; }
fi

if [ ! -f "$MODEL" ]; then
    "$BIN" mkmodel --preset tiny --tokenizer tests/fixtures/tokenizer/deepseek_v4_tokenizer.json -o "$MODEL.tmp.$$" --no-progress
    mv "$MODEL.tmp.$$" "$MODEL"
fi

"$BIN" serve -m "$MODEL" --port "$PORT" --ctx 1024 --api-key test-key --test-hooks --cors --max-body-mb 1 --prefill-chunk 64 --keepalive-ms 50 -t 2 --trace "$T/trace.log" >"$T/server.log" 2>&1 &
SERVER_PID=$!
i=0
until node tests/node/http.mjs health "http://127.0.0.1:$PORT"; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server did not start"; cat "$T/server.log"; exit 1; fi
    sleep 0.1
done

export MINKE_URL="http://127.0.0.1:$PORT" MINKE_API_KEY=test-key MINKE_PID="$SERVER_PID"
status=0
node tests/node/sdk.mjs || status=1
node tests/node/bad_input.mjs || status=1
if [ "${MINKE_ASAN:-0}" = 1 ]; then
    LOAD_CLIENTS=4 LOAD_REQUESTS=5 LOAD_RSS_CHECK=0 node tests/node/load.mjs || status=1
else
    node tests/node/load.mjs || status=1
fi

# every request got exactly one log line with its counters
grep -q 'POST /v1/chat/completions 200 chatcmpl-[0-9]* prompt=[0-9]* cached=[0-9]* (.*) gen=[0-9]* prefill=' "$T/server.log" || { echo "missing request log lines"; status=1; }

# the repeated prompt was served from the in-memory prompt snapshot
grep -q 'cached=[1-9][0-9]* (snapshot)' "$T/server.log" || { echo "FAIL no request served from the prompt snapshot"; status=1; }

# --trace: one complete entry per request, with the rendered prompt, the raw
# generated text and the parsed message of a marked, scripted request
node tests/node/http.mjs post "$MINKE_URL" /v1/chat/completions \
    '{"messages":[{"role":"user","content":"TRACE-IN marker"}],"max_tokens":40,"minke_script":"why not</think>TRACE-OUT answer"}' >/dev/null ||
    { echo "FAIL trace request"; status=1; }
begun=$(grep -c '^=== request ' "$T/trace.log" || true)
ended=$(grep -c '^=== end ' "$T/trace.log" || true)
logged=$(grep -c ' POST /v1/.* [0-9][0-9][0-9] ' "$T/server.log" || true)
if [ "$begun" -gt 100 ] && [ "$begun" = "$ended" ]; then echo "ok   trace has $begun complete entries ($logged logged requests)"; else
    echo "FAIL trace entries: $begun begun, $ended ended"; status=1; fi
# the marked entry, in order: rendered prompt with the input, generated text, parsed message
awk '/^=== request /{e=""} {e=e $0 "\n"} /^=== end /{if (e ~ /TRACE-IN/) last=e} END{printf "%s", last}' "$T/trace.log" >"$T/trace.entry"
if grep -q '^kind: chat.completions$' "$T/trace.entry" && grep -q '^think_mode: thinking$' "$T/trace.entry" &&
    grep -q '^source: ' "$T/trace.entry" && grep -q '"minke_script":"why not</think>TRACE-OUT answer"' "$T/trace.entry" &&
    awk '/^--- rendered prompt ---/{p=1} p&&/TRACE-IN marker/{q=1} /^--- generated ---/{g=q} g&&/^why not<\/think>TRACE-OUT answer$/{o=1}
         /^--- parsed message ---/{m=o} m&&/^finish: stop$/{f=1} f&&/^reasoning: why not$/{r=1} r&&/^content: TRACE-OUT answer$/{c=1} END{exit !c}' "$T/trace.entry"; then
    echo "ok   trace entry holds the rendered prompt, the generated text and the parsed message"
else
    echo "FAIL trace entry incomplete:"; cat "$T/trace.entry"; status=1
fi

# SIGTERM during a long streaming generation: the stream is ended properly
# (finish_reason "error", [DONE]) and the server exits with status 0
node tests/node/http.mjs post "$MINKE_URL" /v1/chat/completions \
    '{"messages":[{"role":"user","content":"A long story"}],"max_tokens":900,"stream":true}' >"$T/stream.out" 2>&1 &
CLIENT_PID=$!
i=0
until grep -q reasoning_content "$T/stream.out" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1
done
kill -TERM "$SERVER_PID"
if wait "$SERVER_PID"; then echo "ok   server exited 0 on SIGTERM"; else echo "FAIL server exit status $? on SIGTERM"; status=1; fi
SERVER_PID=""
wait "$CLIENT_PID" || true
if grep -q '"finish_reason":"error"' "$T/stream.out" && grep -q 'data: \[DONE\]' "$T/stream.out"; then
    echo "ok   in-flight stream closed with finish_reason error on shutdown"
else
    echo "FAIL in-flight stream not closed properly on shutdown"; tail -c 600 "$T/stream.out"; status=1
fi
grep -q 'SIGTERM received' "$T/server.log" || { echo "FAIL no shutdown log line"; status=1; }
if [ $status -ne 0 ]; then echo "--- server log (tail) ---"; tail -40 "$T/server.log"; fi
exit $status
