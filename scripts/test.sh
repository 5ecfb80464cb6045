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
# A target folder another checkout of bosun built in holds test binaries that name that
# checkout's files (env!("CARGO_MANIFEST_DIR")), and cargo takes them as fresh here (its
# fingerprints of a workspace's own crates do not depend on where the checkout is): once
# the other checkout is gone, those tests fail to find their files. Built last by another
# checkout: this checkout's sources are touched, so that its own crates are built again.
marker="$CARGO_TARGET_DIR/.bosun-checkout"
if [ -f "$marker" ] && [ "$(cat "$marker")" != "$root" ]; then
  echo "test: $CARGO_TARGET_DIR was built in by $(cat "$marker"): building this checkout's crates again"
  find "$root" \( -path "$root/.git" -o -path "$root/.tools" -o -path "$root/target" \) -prune \
    -o -name '*.rs' -exec touch {} +
fi
mkdir -p "$CARGO_TARGET_DIR"
printf '%s' "$root" > "$marker"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
# The real control plane (kube-apiserver, etcd, kube-controller-manager): built from Go
# modules; without Go this stops here and says what to install.
"$root/scripts/build-controlplane.sh"
export BOSUN_CONTROLPLANE="$BOSUN_TOOLS_DIR/controlplane/controlplane"
cargo fmt --all -- --check
python3 "$root/scripts/check-layering.py"
python3 "$root/scripts/check-dockerfile.py"
# In-process scenario tests outnumber the end-to-end ones in every subsystem.
python3 "$root/scripts/check-pyramid.py"
# The scripts the test command does not run (image-test.sh needs root and 12 GB free, the
# benchmarks a quiet machine): parsed, so that a syntax error cannot wait for their next run.
for script in "$root"/scripts/*.sh; do bash -n "$script"; done
python3 "$root/scripts/bench-compare.py" "$root/benches/baseline.txt" >/dev/null
cargo clippy --workspace --all-targets --quiet -- -D warnings

# The end-to-end tests that run against the real control plane (BOSUN_TEST_SERVER=real)
# instead of the sandbox: `binary test::path` lines of tests/real-server.txt.
mapfile -t real_tests < <(grep -Ev '^[[:space:]]*(#|$)' "$root/tests/real-server.txt")

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
if cargo nextest --version >/dev/null 2>&1; then
  threads="${BOSUN_TEST_THREADS:-3}"
  filter=""
  for t in "${real_tests[@]}"; do
    read -r bin name <<<"$t"
    filter="${filter:+$filter | }(binary(=$bin) & test(=$name))"
  done
  cargo nextest run --workspace --no-fail-fast --test-threads "$threads" -E "not ($filter)" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # nextest does not run doc tests.
  cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log"
  doc_status=${PIPESTATUS[0]}
  listed=$(cargo nextest list --workspace -E "$filter" --message-format oneline 2>/dev/null | grep -c .)
  if [ "$listed" -ne "${#real_tests[@]}" ]; then
    echo "tests/real-server.txt names ${#real_tests[@]} tests, of which $listed exist" | tee -a "$log"
    doc_status=1
  fi
  echo "--- the end-to-end tests of tests/real-server.txt against the real control plane (BOSUN_TEST_SERVER=real) ---" | tee -a "$log"
  BOSUN_TEST_SERVER=real cargo nextest run --workspace --no-fail-fast --test-threads "$threads" \
    -E "$filter" 2>&1 | tee -a "$log"
  real_status=${PIPESTATUS[0]}
  runner="nextest, $threads at a time"
  # nextest counts the tests its filter leaves out as skipped.
  filtered=${#real_tests[@]}
else
  skips=()
  for t in "${real_tests[@]}"; do skips+=(--skip "${t#* }"); done
  cargo test --workspace --no-fail-fast -- --exact "${skips[@]}" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  doc_status=0
  echo "--- the end-to-end tests of tests/real-server.txt against the real control plane (BOSUN_TEST_SERVER=real) ---" | tee -a "$log"
  real_status=0
  for bin in $(printf '%s\n' "${real_tests[@]}" | awk '{print $1}' | sort -u); do
    names=$(printf '%s\n' "${real_tests[@]}" | awk -v b="$bin" '$1 == b {print $2}')
    # shellcheck disable=SC2086
    BOSUN_TEST_SERVER=real cargo test --test "$bin" --no-fail-fast -- --exact $names 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || real_status=1
    listed=$(cargo test -q --test "$bin" -- --exact --list $names 2>/dev/null | grep -c ': test$')
    [ "$listed" -eq "$(echo "$names" | wc -w)" ] || { echo "tests/real-server.txt: a $bin test it names does not exist" | tee -a "$log"; real_status=1; }
  done
  runner="cargo test"
  filtered=0
fi
set -e
[ "$status" -eq 0 ] && status=$doc_status
[ "$status" -eq 0 ] && status=$real_status
# nextest: `Summary [ 128.3s] 627 tests run: 620 passed, 7 failed, 3 skipped`;
# libtest: `test result: ok. 12 passed; 0 failed; 1 ignored; …`, one line per test target.
awk -v runner="$runner" -v filtered="$filtered" '
  /^--- the end-to-end tests of tests\/real-server.txt against the real control plane/ { real = 1 }
  /^ *Summary \[/ {
    for (i = 1; i <= NF; i++) {
      w = $(i); sub(/[,;]$/, "", w)
      # The real run selects its tests: what it leaves out is not counted as skipped.
      if (real && (w == "passed" || w == "failed" || w == "timed")) { r[w] += $(i - 1) }
      if (!real && (w == "passed" || w == "failed" || w == "skipped" || w == "timed")) { n[w == "skipped" ? "ignored" : w] += $(i - 1) }
    }
  }
  /^test result: / {
    for (i = 1; i <= NF; i++) {
      w = $(i); sub(/[,;]$/, "", w)
      if (real && (w == "passed" || w == "failed")) { r[w] += $(i - 1) }
      if (!real && (w == "passed" || w == "failed" || w == "ignored")) { n[w] += $(i - 1) }
    }
  }
  /^test .* \.\.\. FAILED$/ { failed_names = failed_names "\n  " $2 (real ? " (real control plane)" : "") }
  /^ *(FAIL|TIMEOUT) \[/ && real { failed_names = failed_names "\n  " $NF " (real control plane)" }
  END {
    if (failed_names != "") { print "failed:" failed_names }
    printf "tests: %d passed, %d failed, %d ignored; against the real control plane: %d passed, %d failed (%s)\n", n["passed"], n["failed"] + n["timed"], n["ignored"] - filtered, r["passed"], r["failed"] + r["timed"], runner
  }
' "$log"
exit "$status"
