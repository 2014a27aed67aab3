# shlib.sh: the preamble the shell tests (tests/t_*.sh) share, sourced as
# `. tests/shlib.sh` from the repository root (where tests/run.sh runs them).
# Named outside the t_*.sh pattern so that run.sh does not run it as a test.
# Gives: B (build dir), T (a fresh temp dir, removed on exit), fail (0 until
# bad is called), ok/bad (one result line each; bad marks the run failed).
set -u
: "${MINKE_BIN:?MINKE_BIN must name the minke binary}"
B=${MINKE_BUILD:-build}
T="$B/tmp/$(basename "$0" .sh).$$"
mkdir -p "$T" || exit 1
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
