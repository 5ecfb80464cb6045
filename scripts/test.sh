#!/usr/bin/env bash
# Runs the whole test suite after the idempotent set-up: fmt, the layering check, clippy,
# then every test. No test binary stops the others (--no-fail-fast), and the last line
# counts them all: `tests: N passed, M failed, K ignored …`.
#
# With cargo-nextest (on the machine or installed by the user), every test runs in its own
# process, BOSUN_TEST_THREADS (default 3) at a time across all test binaries: the suite
# waits on processes (hooks, Helm, the sandbox) far more than it computes, so a third
# test in flight shortens the run on two cores. The HA tests run one at a time
# (.config/nextest.toml). Without nextest, `cargo test` runs the same tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --with-browser
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bosun-target}"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
cargo fmt --all -- --check
python3 "$root/scripts/check-layering.py"
cargo clippy --workspace --all-targets --quiet -- -D warnings

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
if cargo nextest --version >/dev/null 2>&1; then
  threads="${BOSUN_TEST_THREADS:-3}"
  cargo nextest run --workspace --no-fail-fast --test-threads "$threads" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # nextest does not run doc tests.
  cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log"
  doc_status=${PIPESTATUS[0]}
  runner="nextest, $threads at a time"
else
  cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  doc_status=0
  runner="cargo test"
fi
set -e
[ "$status" -eq 0 ] && status=$doc_status
# nextest: `Summary [ 128.3s] 627 tests run: 620 passed, 7 failed, 3 skipped`;
# libtest: `test result: ok. 12 passed; 0 failed; 1 ignored; …`, one line per test target.
awk -v runner="$runner" '
  /^ *Summary \[/ {
    for (i = 1; i <= NF; i++) {
      w = $(i); sub(/[,;]$/, "", w)
      if (w == "passed" || w == "failed" || w == "skipped" || w == "timed") { n[w == "skipped" ? "ignored" : w] += $(i - 1) }
    }
  }
  /^test result: / {
    for (i = 1; i <= NF; i++) {
      w = $(i); sub(/[,;]$/, "", w)
      if (w == "passed" || w == "failed" || w == "ignored") { n[w] += $(i - 1) }
    }
  }
  /^test .* \.\.\. FAILED$/ { failed_names = failed_names "\n  " $2 }
  END {
    if (failed_names != "") { print "failed:" failed_names }
    printf "tests: %d passed, %d failed, %d ignored (%s)\n", n["passed"], n["failed"] + n["timed"], n["ignored"], runner
  }
' "$log"
exit "$status"
