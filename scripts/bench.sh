#!/usr/bin/env bash
# Runs every benchmark and prints one table of the ratios they measured (each against a
# limit measured in the same run), so that a regression shows at a glance. Not part of the
# test command: it takes a while and wants a quiet machine.
#
#   ./scripts/bench.sh                 # every benchmark
#   BENCHES="engine journal" ./scripts/bench.sh
#   BENCH_SERVER=real BENCHES="lambda deployer" ./scripts/bench.sh   # on kube-apiserver
#   BENCH_SAVE_BASELINE=1 ./scripts/bench.sh   # this run becomes the baseline
#
# Each row is marked against the committed baseline (benches/baseline.txt, or
# benches/baseline-real.txt with BENCH_SERVER=real) when its figure moved more than the
# noise (BENCH_NOISE, 0.15), and when it misses the goal it states
# (scripts/bench-compare.py).
# Each benchmark's whole output is kept in $BENCH_OUT (default: a temporary folder).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bosun-target}"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
if [ "${BENCH_SERVER:-}" = "real" ]; then
  "$root/scripts/build-controlplane.sh"
  export BOSUN_CONTROLPLANE="$BOSUN_TOOLS_DIR/controlplane/controlplane"
fi
read -r -a benches <<< "${BENCHES:-sandbox journal engine event_to_hook startup modules jq bindings metrics lambda deployer}"
out="${BENCH_OUT:-$(mktemp -d)}"
mkdir -p "$out"
failed=0
for bench in "${benches[@]}"; do
  echo "bench: $bench (output in $out/$bench.log)" >&2
  if ! cargo bench --quiet --bench "$bench" >"$out/$bench.log" 2>&1; then
    echo "bench: $bench FAILED (see $out/$bench.log)" >&2
    failed=1
  fi
done
table="$out/table.txt"
{
  printf '%-10s %s\n' "bench" "figure (ratios: measured against a limit from the same run)"
  printf '%-10s %s\n' "----------" "-----------------------------------------------------------"
  for bench in "${benches[@]}"; do
    if ! grep -E '×|ratio|goal' "$out/$bench.log" >/dev/null 2>&1; then
      printf '%-10s %s\n' "$bench" "(no ratio printed; see $bench.log in the output folder)"
      continue
    fi
    grep -E '×|ratio|goal' "$out/$bench.log" | sed -e 's/^[[:space:]]*//' | while IFS= read -r line; do
      printf '%-10s %s\n' "$bench" "$line"
    done
  done
} >"$table"
# Each row against the committed baseline of its API server, and against its goal
# (scripts/bench-compare.py); BENCH_SAVE_BASELINE=1 makes this run the baseline.
if [ "${BENCH_SERVER:-}" = "real" ]; then
  export BENCH_BASELINE="${BENCH_BASELINE:-$root/benches/baseline-real.txt}"
fi
echo
python3 "$root/scripts/bench-compare.py" "$table"
if [ "${BENCH_SAVE_BASELINE:-}" = "1" ]; then
  python3 "$root/scripts/bench-compare.py" "$table" --save
fi
exit "$failed"
