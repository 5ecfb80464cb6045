#!/usr/bin/env bash
# Runs the whole test suite after the idempotent set-up.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --with-browser
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bosun-target}"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
cargo fmt --all -- --check
python3 "$root/scripts/check-layering.py"
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
