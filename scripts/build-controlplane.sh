#!/usr/bin/env bash
# Builds the real control plane of the tests (tests/controlplane: etcd, kube-apiserver and
# kube-controller-manager from the Kubernetes release its go.mod pins) into
# $BOSUN_TOOLS_DIR/controlplane/controlplane. Idempotent: a build whose sources, go.sum and
# Go version are unchanged is kept (Go's build cache keeps a rebuild after a change short).
# Without Go it stops and says what to install: the real control plane's suites never skip.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export BOSUN_TOOLS_DIR="${BOSUN_TOOLS_DIR:-$root/.tools}"
src="$root/tests/controlplane"
out_dir="$BOSUN_TOOLS_DIR/controlplane"
out="$out_dir/controlplane"

if ! command -v go >/dev/null 2>&1; then
  cat >&2 <<'MSG'
build-controlplane: Go is missing. The tests run bosun against a real kube-apiserver built
from Go modules (tests/controlplane). Install Go 1.26 or newer (https://go.dev/doc/install)
with access to a Go module proxy (GOPROXY), then run the test command again.
MSG
  exit 1
fi

stamp="$( { go version; cd "$src" && cat go.mod go.sum ./*.go; } | sha256sum | cut -d' ' -f1)"
if [ -x "$out" ] && [ "$(cat "$out_dir/stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
mkdir -p "$out_dir"
version="$(cd "$src" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
echo "build-controlplane: building the real control plane (Kubernetes $version) into $out"
start=$(date +%s)
# /version answers as the release does (Helm's kubeVersion checks and clients read it).
major="${version#v}"; major="${major%%.*}"
minor="${version#v*.}"; minor="${minor%%.*}"
pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
(cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "$ldflags" -o "$out.tmp" .)
mv "$out.tmp" "$out"
echo "$stamp" > "$out_dir/stamp"
echo "build-controlplane: built in $(( $(date +%s) - start ))s"
