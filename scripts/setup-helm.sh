#!/usr/bin/env bash
# Puts the Helm library (libhelm_c.so, Helm v4 built as a C shared library) into
# .tools/helm/, taken from the helm-python-sdk wheel on PyPI. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${BOSUN_TOOLS_DIR:-$root/.tools}/helm"
lib="$dest/libhelm_c.so"
if [[ -s "$lib" ]]; then
  echo "Helm library present: $lib"
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps --only-binary=:all: --dest "$tmp" helm-python-sdk >/dev/null
wheel="$(ls "$tmp"/helm_python_sdk-*.whl | head -n1)"
python3 - "$wheel" "$lib" <<'PY'
import shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/lib/libhelm_c.so"))
    with z.open(name) as src, open(target + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
mv "$lib.part" "$lib"
echo "Helm library installed: $lib ($(basename "$wheel"))"
