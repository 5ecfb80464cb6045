#!/usr/bin/env bash
# Runs the README's test command (scripts/test.sh) several times in a row while two CPU
# hogs (Debian's stress-ng, installed if missing) keep both cores of a 2-core machine busy,
# and reports pass or fail per run. A test that fails here is a race to fix, not a run to
# retry: nothing here retries a test.
#
#   scripts/stress-test.sh [RUNS]      (default 3; logs in $STRESS_LOG_DIR, default
#                                       target/stress-logs under the clone)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
runs="${1:-3}"
hogs="${STRESS_CPUS:-2}"
logs="${STRESS_LOG_DIR:-$root/target/stress-logs}"
mkdir -p "$logs"

if ! command -v stress-ng >/dev/null 2>&1; then
  echo "stress-test: installing stress-ng (Debian)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
fi

hog_pid=""
stop_hogs() {
  if [ -n "$hog_pid" ]; then
    kill -- "-$hog_pid" 2>/dev/null || kill "$hog_pid" 2>/dev/null || true
    wait "$hog_pid" 2>/dev/null || true
    hog_pid=""
  fi
}
trap stop_hogs EXIT INT TERM

results=()
failed=0
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  # Its own process group, so that stopping it stops every worker it forked.
  setsid stress-ng --cpu "$hogs" --timeout 0 --quiet &
  hog_pid=$!
  started=$(date +%s)
  ./scripts/test.sh >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - started))
  stop_hogs
  summary="$(grep -E '^tests: ' "$log" | tail -n 1)"
  if [ "$rc" -eq 0 ]; then
    verdict=pass
  else
    verdict=FAIL
    failed=$((failed + 1))
  fi
  line="run $i: $verdict in $((took / 60)) min $((took % 60)) s under $hogs CPU hogs; ${summary:-no test summary} (log: $log)"
  echo "$line"
  results+=("$line")
  if [ "$rc" -ne 0 ]; then
    grep -E -- '^---- .* stdout ----$|panicked at' "$log" | head -n 20 | sed 's/^/    /'
  fi
done

echo
echo "stress-test: $((runs - failed)) of $runs runs passed under $hogs CPU hogs"
printf '  %s\n' "${results[@]}"
[ "$failed" -eq 0 ]
