#!/usr/bin/env bash
# Idempotent set-up of everything bosun's run and test commands need on a fresh Debian
# machine with a Rust toolchain: kubectl, openssl (the TLS tests' certificates), the Python
# kubernetes client (in the virtual environment $BOSUN_TOOLS_DIR/venv), real Helm (the
# library libhelm_c.so and the helm binary, scripts/setup-helm.sh), and, with
# --with-browser (the test command), Chromium for the debug web view's headless-browser
# test and graphviz for the PNG of /graph, and cargo-nextest, the test runner.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
mkdir -p "$BOSUN_TOOLS_DIR"

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: installing kubectl (Debian kubernetes-client)"
  apt_install kubernetes-client
fi

# The TLS tests make their CA and certificates with the openssl command.
if ! command -v openssl >/dev/null 2>&1; then
  echo "setup: installing openssl (Debian), for the TLS tests' certificates"
  apt_install openssl
fi

if [ "${1:-}" = "--with-browser" ] && [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing chromium (Debian), for the debug web view's test"
  apt_install chromium
fi

# The test command's runner: every test in its own process, three at a time across the
# test binaries (docs/testing.md). Built once from crates.io (a few minutes), then kept.
if [ "${1:-}" = "--with-browser" ] && ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest (cargo install --locked), the test runner"
  cargo install --locked --quiet cargo-nextest
fi

if [ "${1:-}" = "--with-browser" ] && ! command -v dot >/dev/null 2>&1; then
  echo "setup: installing graphviz (Debian), for the PNG of /graph"
  apt_install graphviz
fi

# Python packages go into a project-local virtual environment, never into the system
# Python; the tests run Python clients with its interpreter.
venv="$BOSUN_TOOLS_DIR/venv"
if ! "$venv/bin/python3" -m pip --version >/dev/null 2>&1; then
  if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    echo "setup: installing python3-venv (Debian), for the project's virtual environment"
    apt_install python3-venv
  fi
  echo "setup: creating the Python virtual environment $venv"
  python3 -m venv --clear "$venv"
fi
if ! "$venv/bin/python3" -c 'import kubernetes' >/dev/null 2>&1; then
  echo "setup: installing the Python kubernetes client into $venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check 'kubernetes>=29' >/dev/null
fi

if [ -x "$root/scripts/setup-helm.sh" ]; then
  "$root/scripts/setup-helm.sh" >/dev/null
fi
echo "setup: ok (tools in $BOSUN_TOOLS_DIR)"
