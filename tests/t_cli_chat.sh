#!/bin/sh
# t_cli_chat.sh: drives `minke chat --demo` in tmux like a user: a prompt with
# streamed output, Ctrl-C during a long generation, /ctx, /nothink, /quit; and
# `minke run` with -p, with stdin, and without a model. Asserts on the screen.
set -u
B=${MINKE_BUILD:-build}
BIN=${MINKE_BIN:-./minke}
if ! command -v tmux >/dev/null 2>&1; then echo "FAIL: tmux missing (.ci/run installs it)"; exit 1; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/minke-cli.XXXXXX")
S="minke-test-$$"
export HOME="$T/home"
mkdir -p "$HOME"
cleanup() { tmux kill-session -t "$S" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- screen ---"; cat "$T/screen" 2>/dev/null; exit 1; }

# 1. no model: a helpful message, non-zero exit
( cd "$T" && MINKE_MODEL= "$BIN" run -p hi ) > "$T/out" 2>&1 && fail "run without a model succeeded"
grep -q "minke --demo" "$T/out" || fail "no-model message does not mention --demo: $(cat "$T/out")"

# 2. one-shot run on the demo model (built once into $HOME/.cache/minke)
"$BIN" run --demo -p "Hello" -n 12 --nothink --seed 5 > "$T/run1" 2> "$T/run1.err" || fail "run --demo: $(cat "$T/run1.err")"
grep -q "generated 12 tokens" "$T/run1.err" || fail "run stats line missing: $(cat "$T/run1.err")"
[ -f "$HOME/.cache/minke/demo-tiny-v1.gguf" ] || fail "demo model not cached"
echo "Hello" | "$BIN" run --demo -n 12 --nothink --seed 5 > "$T/run2" 2>/dev/null || fail "run from stdin"
cmp -s "$T/run1" "$T/run2" || fail "same seed and prompt gave different answers (-p vs stdin)"
"$BIN" run --demo -p "Hello" -n 12 --nothink --seed 6 > "$T/run3" 2>/dev/null
cmp -s "$T/run1" "$T/run3" && fail "different seeds gave identical answers"

# 3. interactive chat in tmux
screen() { tmux capture-pane -p -t "$S" -S -200 > "$T/screen"; }
wait_for() { # pattern, seconds
    i=0
    while [ $i -lt $(( $2 * 10 )) ]; do
        screen
        grep -q -- "$1" "$T/screen" && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
tmux new-session -d -s "$S" -x 160 -y 50 "$BIN chat --demo -n 100000 --nothink; echo CHAT-EXITED-\$?; sleep 30"
wait_for "/help for commands" 30 || fail "chat did not start"
tmux send-keys -t "$S" "Tell me a long story" Enter
sleep 3
screen
lines_before=$(wc -c < "$T/screen")
sleep 1
screen
[ "$(wc -c < "$T/screen")" -gt "$lines_before" ] || fail "no streamed output while generating"
tmux send-keys -t "$S" C-c
wait_for "interrupted" 20 || fail "Ctrl-C did not stop the generation"
wait_for "minke> $" 10 || true
tmux send-keys -t "$S" "/ctx 512" Enter
wait_for "context: 512 tokens" 20 || fail "/ctx did not answer"
tmux send-keys -t "$S" "/help" Enter
wait_for "/read FILE" 10 || fail "/help"
tmux send-keys -t "$S" "/ctx 600" Enter
wait_for "context: 600 tokens" 20 || fail "/ctx 600"
tmux send-keys -t "$S" "/quit" Enter
wait_for "CHAT-EXITED-0" 20 || fail "/quit did not exit 0"
echo "PASS"
