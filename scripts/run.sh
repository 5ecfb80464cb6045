#!/usr/bin/env bash
# Runs bosun on its embedded default: the sandbox API server plus the sample modules.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bosun-target}"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
# Hooks written in Python find the packages of the project's virtual environment (the
# kubernetes client) with `#!/usr/bin/env python3`.
export PATH="$BOSUN_TOOLS_DIR/venv/bin:$PATH"
exec cargo run --quiet --bin bosun -- run --sandbox "$@"
