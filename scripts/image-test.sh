#!/usr/bin/env bash
# Builds bosun's image from the Dockerfile and proves it on this machine, without a
# registry and without a container runtime (docs/deploy.md, "Building and proving the
# image"):
#
#  1. podman and debootstrap (apt-get, when missing).
#  2. The base images the Dockerfile names, made here: debian:bookworm-slim from
#     `debootstrap --variant=minbase bookworm`, and rust:<version>-bookworm from the same
#     plus gcc, libc6-dev, pkg-config, git, the host's Rust toolchain of that version
#     (RUSTUP_HOME/CARGO_HOME as in the official image) and the host's own CAs
#     (/usr/local/share/ca-certificates: cargo and pip reach crates.io and PyPI through
#     them where a proxy intercepts TLS). Kept for the next run.
#  3. `podman build` of the Dockerfile (chroot isolation, vfs storage, no layer cache: vfs
#     copies the whole root file system for every layer), then an image of the sample
#     modules on top of it, as docs/deploy.md tells users to build theirs
#     (`FROM bosun`, `COPY modules /modules`, `COPY global-hooks /global-hooks`).
#  4. The image's root file system (`podman image mount`), bind-mounted read-only, with
#     what the StatefulSet and the kubelet add: /proc, a minimal /dev, the emptyDirs /tmp
#     and /var/run/addon-operator and the journal volume /var/lib/bosun (fsGroup 65532, as
#     the kubelet leaves them), the service account's token, CA and namespace at
#     /var/run/secrets/kubernetes.io/serviceaccount.
#  5. Inside it, as uid and gid 65532: bosun --version, helm version, kubectl version
#     --client, jq, bash, addon-operator queue list --help; the root is read-only.
#  6. A TLS sandbox with a token (the image's bosun, run on the host), then `bosun run` from
#     the image with only a pod's environment (the StatefulSet's variables, the
#     KUBERNETES_SERVICE_* pair, the image's ENV): the sample modules converge (global
#     hook, beforeHelm hook, Helm release, ConfigMap), checked with the image's kubectl
#     through the same service account; `addon-operator queue list` answers from the
#     debug socket; SIGTERM stops bosun cleanly.
#  7. The references' own manifests and chart with only the image swapped, each in a root
#     as its manifest asks for it (a writable layer over the image and the runtime's
#     anonymous volume for its VOLUME, or the StatefulSet's read-only pod):
#     - metacontroller's production manifest (`/usr/bin/metacontroller
#       --zap-log-level=4 --discovery-interval=20s`, no volume): the probes answer on
#       8081, /metrics on 9999, and metacontroller's globalconfigmap example converges;
#     - landscaper's helm-deployer and manifest-deployer charts (the image's entrypoint,
#       `--config=/app/ls/config/config.yaml` with the Configuration their config Secret
#       holds): the examples' DeployItem of each type succeeds, by that deployer;
#     - deploy/helm/bosun rendered with metacontroller-helm's default values: its command,
#       args and environment start bosun, the probes answer, the journal is on its volume.
#     Their fixed ports (8081, 9999, 9650, 9651) must be free on the machine.
#
# Containers are never run (`podman run` needs setrlimit, refused here): every command in
# the image runs with chroot. Needs root (chroot, mount). Takes about 8 minutes on two
# cores (6½ of them the release build inside podman, 1½ the base images when they are
# missing); not part of scripts/test.sh.
#
# The emptyDirs are as the kubelet makes them by default (2777, no sticky bit): bosun's
# temp folder check accepts such a pod volume (docs/deploy.md, "The StatefulSet's /tmp").
#
# Usage: scripts/image-test.sh            build, check, keep the images for the next run
#        scripts/image-test.sh --clean    remove the images, base images and work folder
#
# BOSUN_IMAGE_TEST_DIR (default /var/tmp/bosun-image-test) holds the work files and logs;
# DEBIAN_MIRROR (default http://deb.debian.org/debian) is debootstrap's mirror.
# BOSUN_IMAGE_TEST_EMPTYDIR_MODE (default 2777, the kubelet's emptyDir with fsGroup) is the
# mode of the emptyDirs /tmp and /var/run/addon-operator; 1777 adds the sticky bit, which
# the kubelet does not set (kubernetes/kubernetes#110835).
# BOSUN_IMAGE_TEST_REUSE=1 keeps an image built by an earlier run instead of building it
# again (for work on the checks; a proof of the Dockerfile builds it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${BOSUN_IMAGE_TEST_DIR:-/var/tmp/bosun-image-test}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
podman=(podman --storage-driver vfs)
image=localhost/bosun:image-test
samples=localhost/bosun-samples:image-test
slim=docker.io/library/debian:bookworm-slim
rust_minor="$(sed -n 's/^FROM rust:\([0-9.]*\)-bookworm.*/\1/p' "$root/Dockerfile")"
rust_image="docker.io/library/rust:${rust_minor}-bookworm"
uid=65532
emptydir_mode="${BOSUN_IMAGE_TEST_EMPTYDIR_MODE:-2777}"
[[ "$emptydir_mode" =~ ^[0-7]{4}$ ]] || { echo "BOSUN_IMAGE_TEST_EMPTYDIR_MODE: four octal digits" >&2; exit 2; }
token="image-test-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

if [[ "$(id -u)" != 0 ]]; then
  echo "image-test: needs root (chroot, mount)" >&2
  exit 2
fi

if [[ "${1:-}" == "--clean" ]]; then
  "${podman[@]}" rmi -f "$samples" "$image" "$rust_image" "$slim" 2>/dev/null || true
  "${podman[@]}" image prune -f >/dev/null 2>&1 || true
  rm -rf "$work"
  echo "image-test: removed the images and $work"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--clean]" >&2
  exit 2
fi

# --- steps, timings and the summary ------------------------------------------------------
started=$(date +%s)
summary=()
current=""
step_start=0
# run_step NAME FUNCTION: not in a condition, so `set -e` holds inside FUNCTION.
run_step() {
  current="$1"
  step_start=$(date +%s)
  echo
  echo "=== $current"
  "$2"
  summary+=("$(printf 'ok   %5ss  %s' "$(($(date +%s) - step_start))" "$current")")
  current=""
}

# --- what runs and what is mounted, undone on every exit ---------------------------------
pod="$work/pod-root"
img=""
sandbox_pid=""
bosun_pid=""
bosun_log="$work/bosun.log"
hooks_pid=""

stop_pid() { # stop_pid PID SECONDS: SIGTERM, then SIGKILL after SECONDS
  local pid="$1" i
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# Every root file system mounted (the pod's, the containers'), unmounted on exit.
roots=()
unmount_pod() {
  local r
  for r in "${roots[@]}"; do
    if mountpoint -q "$r" 2>/dev/null; then
      umount -R "$r" 2>/dev/null || { sleep 1; umount -R "$r" 2>/dev/null; } || umount -R -l "$r"
    fi
  done
  roots=()
  if [[ -n "$img" ]]; then
    "${podman[@]}" image unmount "$samples" >/dev/null 2>&1 || true
    img=""
  fi
}

finish() {
  local status=$?
  set +e
  stop_pid "$bosun_pid" 60
  stop_pid "$hooks_pid" 5
  stop_pid "$sandbox_pid" 20
  unmount_pod
  if [[ $status -ne 0 && -n "$current" ]]; then
    summary+=("$(printf 'FAIL %5ss  %s' "$(($(date +%s) - step_start))" "$current")")
  fi
  echo
  echo "=== summary (logs in $work)"
  printf '%s\n' "${summary[@]}"
  local total=$(($(date +%s) - started))
  if [[ $status -eq 0 ]]; then
    printf 'image-test: PASS in %dm%02ds\n' $((total / 60)) $((total % 60))
  else
    printf 'image-test: FAIL in %dm%02ds (%s)\n' $((total / 60)) $((total % 60)) "${current:-after the last step}"
  fi
  exit $status
}
trap finish EXIT
trap 'exit 130' INT TERM

# --- 1. tools ---------------------------------------------------------------------------
tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  podman --version
  mkdir -p "$work"
  local free
  free=$(df -BG --output=avail "$work" | tail -n1 | tr -dc 0-9)
  echo "free disk at $work: ${free} GB"
  if ((free < 12)); then
    echo "image-test: the build needs about 12 GB free (vfs copies every layer)" >&2
    return 1
  fi
}

# --- 2. base images ---------------------------------------------------------------------
# debootstrap_into DIR [--include=…]: a minbase bookworm with the sources of Debian's
# images (bookworm, bookworm-updates, bookworm-security) and no package lists.
debootstrap_into() {
  local dir="$1"
  shift
  rm -rf "$dir"
  mkdir -p "$work/debs"
  debootstrap --variant=minbase --cache-dir="$work/debs" "$@" bookworm "$dir" "$mirror" \
    >"$dir.log" 2>&1 || { tail -n 20 "$dir.log"; return 1; }
  rm -f "$dir/etc/apt/sources.list"
  cat >"$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb
}

base_slim() {
  if "${podman[@]}" image exists "$slim"; then
    echo "$slim present"
    return
  fi
  debootstrap_into "$work/rootfs-slim"
  tar --numeric-owner -C "$work/rootfs-slim" -c . |
    "${podman[@]}" import --change 'CMD ["bash"]' - "$slim"
  rm -rf "$work/rootfs-slim"
}

base_rust() {
  if "${podman[@]}" image exists "$rust_image"; then
    echo "$rust_image present"
    return
  fi
  # The host's toolchain of the Dockerfile's Rust version.
  local sysroot="" d version
  for d in "${RUSTUP_HOME:-$HOME/.rustup}"/toolchains/*/; do
    if [[ -x "$d/bin/rustc" && -x "$d/bin/cargo" ]] &&
      [[ "$("$d/bin/rustc" --version)" == "rustc $rust_minor."* ]]; then
      sysroot="${d%/}"
      break
    fi
  done
  if [[ -z "$sysroot" ]]; then
    echo "image-test: no Rust $rust_minor toolchain under ${RUSTUP_HOME:-$HOME/.rustup}/toolchains" >&2
    return 1
  fi
  version="$("$sysroot/bin/rustc" --version | awk '{print $2}')"
  echo "toolchain: $sysroot (rustc $version)"
  local dir="$work/rootfs-rust" name="$version-x86_64-unknown-linux-gnu"
  debootstrap_into "$dir" --include=ca-certificates,gcc,libc6-dev,pkg-config,git,curl
  # The machine's own CAs (a TLS-intercepting proxy's, say), which cargo fetch and pip
  # download in the build stage need to reach crates.io and PyPI. The runtime stage
  # fetches nothing over HTTPS and gets none of them.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
    chroot "$dir" update-ca-certificates
  fi
  mkdir -p "$dir/usr/local/rustup/toolchains/$name" "$dir/usr/local/cargo/bin"
  tar -C "$sysroot/" --exclude=./share/doc -c . | tar -C "$dir/usr/local/rustup/toolchains/$name" -x
  for bin in "$dir/usr/local/rustup/toolchains/$name"/bin/*; do
    ln -s "../../rustup/toolchains/$name/bin/$(basename "$bin")" "$dir/usr/local/cargo/bin/"
  done
  chmod -R a+w "$dir/usr/local/rustup" "$dir/usr/local/cargo"
  tar --numeric-owner -C "$dir" -c . |
    "${podman[@]}" import \
      --change 'ENV RUSTUP_HOME=/usr/local/rustup' \
      --change 'ENV CARGO_HOME=/usr/local/cargo' \
      --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "ENV RUST_VERSION=$version" \
      --change 'CMD ["bash"]' - "$rust_image"
  rm -rf "$dir"
}

# --- 3. the images ----------------------------------------------------------------------
# podman_build LOG ARGS…: the build's steps on the terminal, all of it in LOG.
podman_build() {
  local log="$1"
  shift
  {
    local status=0
    "${podman[@]}" build --isolation chroot --layers=false --pull=never "$@" 2>&1 || status=$?
    echo "$status" >"$log.status"
  } | tee "$log" |
    grep --line-buffered -E '^(\[[0-9]+/[0-9]+\] )?STEP |^COMMIT|^Successfully|    Finished |^error' ||
    true
  [[ "$(cat "$log.status")" == 0 ]] || { tail -n 40 "$log"; return 1; }
}

build_image() {
  if [[ -n "${BOSUN_IMAGE_TEST_REUSE:-}" ]] && "${podman[@]}" image exists "$image"; then
    echo "$image present, kept (BOSUN_IMAGE_TEST_REUSE)"
    return
  fi
  # HELM named although it is the Dockerfile's default: buildah 1.28 (Debian bookworm's
  # podman) resolves `FROM helm-${HELM}` to the stage only for a --build-arg, and
  # otherwise looks for an image helm-library.
  podman_build "$work/build.log" --build-arg HELM=library -t "$image" -f "$root/Dockerfile" "$root"
}

build_samples() {
  printf 'FROM %s\nCOPY modules /modules\nCOPY global-hooks /global-hooks\n' "$image" \
    >"$work/samples.Containerfile"
  podman_build "$work/build-samples.log" -t "$samples" -f "$work/samples.Containerfile" \
    "$root/examples"
  "${podman[@]}" image prune -f >/dev/null
  "${podman[@]}" images
}

# --- 4. the pod's root file system ------------------------------------------------------
# mount_proc_dev ROOT: /proc, and a container's /dev: the usual character devices, /dev/fd
# and /dev/shm.
mount_proc_dev() {
  local r="$1" d
  mount -t proc -o nosuid,nodev,noexec proc "$r/proc" 2>/dev/null || mount --rbind /proc "$r/proc"
  mount -t tmpfs -o mode=0755,nosuid tmpfs "$r/dev"
  for d in null zero full random urandom tty; do
    touch "$r/dev/$d"
    mount --bind "/dev/$d" "$r/dev/$d"
  done
  ln -s /proc/self/fd "$r/dev/fd"
  ln -s /proc/self/fd/0 "$r/dev/stdin"
  ln -s /proc/self/fd/1 "$r/dev/stdout"
  ln -s /proc/self/fd/2 "$r/dev/stderr"
  mkdir "$r/dev/shm"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
}

image_env=()
mount_pod() {
  img="$("${podman[@]}" image mount "$samples")"
  echo "image root: $img"
  mapfile -t image_env < <("${podman[@]}" image inspect \
    --format '{{range .Config.Env}}{{println .}}{{end}}' "$samples" | sed '/^$/d')
  echo "image ENV: ${image_env[*]}"
  local user
  user="$("${podman[@]}" image inspect --format '{{.Config.User}}' "$samples")"
  [[ "$user" == "$uid:$uid" ]] || { echo "image USER is $user, not $uid:$uid" >&2; return 1; }
  # /var/run is Debian's link to /run: mount under /run itself, never through the link
  # (it would resolve on the host).
  [[ "$(readlink "$img/var/run")" == /run || "$(readlink "$img/var/run")" == ../run ]] ||
    { echo "$img/var/run is not a link to /run" >&2; return 1; }

  mkdir -p "$pod"
  mount --bind "$img" "$pod"
  roots+=("$pod")
  mount -o remount,bind,ro "$pod"
  mount_proc_dev "$pod"
  # Mount points the runtime makes in the container's layer: /run holds them, read-only
  # again once they are mounted.
  mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$pod/run"
  cp -a "$img/run/." "$pod/run/"
  mkdir -p "$pod/run/secrets/kubernetes.io/serviceaccount" "$pod/run/addon-operator"
  # The service account, as the kubelet projects it: 0644 files, the token 0640 for the
  # fsGroup.
  rm -rf "$work/serviceaccount"
  mkdir -p "$work/serviceaccount"
  printf '%s' "$token" >"$work/serviceaccount/token"
  printf bosun >"$work/serviceaccount/namespace"
  chmod 0640 "$work/serviceaccount/token"
  chgrp "$uid" "$work/serviceaccount/token"
  mount --bind "$work/serviceaccount" "$pod/run/secrets/kubernetes.io/serviceaccount"
  mount -o remount,bind,ro "$pod/run/secrets/kubernetes.io/serviceaccount"
  # The emptyDirs of the StatefulSet as the kubelet makes them with fsGroup: owned by root,
  # group 65532, mode 0777 with the setgid bit (2777; BOSUN_IMAGE_TEST_EMPTYDIR_MODE).
  mount -t tmpfs -o "mode=$emptydir_mode,gid=$uid,nosuid,nodev" tmpfs "$pod/run/addon-operator"
  mount -t tmpfs -o "mode=$emptydir_mode,gid=$uid,nosuid,nodev" tmpfs "$pod/tmp"
  mount -o remount,ro "$pod/run"
  # The journal's volume (a fresh PersistentVolume with fsGroup: 2775, group 65532).
  rm -rf "$work/journal-volume"
  mkdir -p "$work/journal-volume"
  chgrp "$uid" "$work/journal-volume"
  chmod 2775 "$work/journal-volume"
  mount --bind "$work/journal-volume" "$pod/var/lib/bosun"
  findmnt -R -l -n -o TARGET,FSTYPE,OPTIONS "$pod" |
    sed -E "s|^$pod/?|/|; s/,(size|nr_inodes|resuid|resgid|discard|resv_strict)[^,]*//g"
}

# pod_command ENV… -- COMMAND…: sets `cmd` to COMMAND in the pod's root as uid/gid 65532
# with only the image's ENV, HOME=/ (the runtime's for a user without a passwd entry) and
# ENV…. in_pod runs it.
cmd=()
pod_command() {
  local env=("${image_env[@]}" HOME=/ HOSTNAME=bosun-0)
  while [[ $# -gt 0 && "$1" != -- ]]; do
    env+=("$1")
    shift
  done
  shift
  cmd=(chroot --userspec="$uid:$uid" --groups="$uid" "$pod" /usr/bin/env -i "${env[@]}" "$@")
}
in_pod() {
  pod_command "$@"
  "${cmd[@]}"
}

# --- 5. the tools in the image ----------------------------------------------------------
expect() { # expect WHAT PATTERN TEXT
  if grep -qE -- "$2" <<<"$3"; then
    echo "  ok: $1"
  else
    echo "  FAILED: $1: no /$2/ in:" >&2
    sed 's/^/    /' <<<"$3" >&2
    return 1
  fi
}

# Runs a command in the pod, shows it with its output, and checks the output:
# in_pod_expect LABEL REGEX COMMAND...
in_pod_expect() {
  local label="$1" regex="$2" out
  shift 2
  out="$(in_pod -- "$@")"
  echo "$ $*"; echo "$out"
  expect "$label" "$regex" "$out"
}

image_tools() {
  local out
  in_pod_expect "runs as 65532" "^uid=$uid.* gid=$uid" id
  in_pod_expect "bosun --version" '^bosun [0-9]' bosun --version
  in_pod_expect "helm version" 'Version:"v4\.' helm version
  in_pod_expect "kubectl 1.35" '^Client Version: v1\.35\.' kubectl version --client
  out="$(echo '{"modules":[{"name":"greeter","enabled":true},{"name":"optional","enabled":false}]}' |
    in_pod -- jq -c '[.modules[] | select(.enabled) | .name]')"
  echo "$ jq -c '[.modules[] | select(.enabled) | .name]'"; echo "$out"
  expect "jq" '^\["greeter"\]$' "$out"
  out="$(in_pod -- bash -c 'echo "bash $BASH_VERSION"; type -p kubectl helm jq')"
  echo "$ bash -c …"; echo "$out"
  expect "bash, and kubectl, helm, jq on PATH" '^bash 5\.' "$out"
  in_pod_expect "/addon-operator version (addon-operator's image's command)" \
    '^addon-operator [0-9]' /addon-operator version
  in_pod_expect "/usr/bin/metacontroller --version (metacontroller's manifests' command)" \
    '^(bosun|metacontroller) [0-9]' /usr/bin/metacontroller --version
  out="$(in_pod -- addon-operator queue list --help)"
  echo "$ addon-operator queue list --help"; head -n 4 <<<"$out"
  expect "addon-operator queue list --help" 'Usage: addon-operator queue list' "$out"
  out="$(in_pod -- bash -c 'touch /usr/local/bin/x 2>&1; touch /x 2>&1' || true)"
  expect "the root is read-only" 'Read-only file system' "$out"
  out="$(chroot "$pod" /bin/sh -c 'touch /x 2>&1' || true)"
  expect "the root is read-only, for root too" 'Read-only file system' "$out"
}

# --- 6. the in-cluster run --------------------------------------------------------------
sandbox_url=""
sandbox() {
  # The image's bosun and kubectl, run on the host (same Debian release).
  mkdir -p "$work/bin" "$work/home"
  cp "$img/usr/local/bin/bosun" "$img/usr/local/bin/kubectl" "$work/bin/"
  rm -rf "$work/sandbox" "$work/sandbox.out" "$work/sandbox.kubeconfig"
  "$work/bin/bosun" sandbox --listen 127.0.0.1:0 --data "$work/sandbox" \
    --kubeconfig "$work/sandbox.kubeconfig" --tls --token "$token" \
    >"$work/sandbox.out" 2>"$work/sandbox.log" &
  sandbox_pid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    sandbox_url="$(sed -n 's/^listening on //p' "$work/sandbox.out")"
    [[ -n "$sandbox_url" ]] && break
    kill -0 "$sandbox_pid" 2>/dev/null || { cat "$work/sandbox.log"; return 1; }
    sleep 0.1
  done
  [[ "$sandbox_url" == https://127.0.0.1:* ]] || { echo "sandbox: ${sandbox_url:-no address}" >&2; return 1; }
  echo "sandbox: $sandbox_url (TLS, token required)"
  cp "$work/sandbox/ca.crt" "$work/serviceaccount/ca.crt"
  chmod 0644 "$work/serviceaccount/ca.crt"
  HOME="$work/home" "$work/bin/kubectl" --kubeconfig "$work/sandbox.kubeconfig" create namespace bosun
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

http_port=""
pod_env=()
start_bosun() {
  local api_port="${sandbox_url##*:}" ha_port
  http_port="$(free_port)"
  ha_port="$(free_port)"
  # A pod's environment: the Service variables, and the StatefulSet's (deploy/
  # statefulset.yaml) with loopback addresses (the pod shares the host's network here).
  pod_env=(
    KUBERNETES_SERVICE_HOST=127.0.0.1
    KUBERNETES_SERVICE_PORT="$api_port"
    KUBERNETES_SERVICE_PORT_HTTPS="$api_port"
  )
  local run_env=(
    "${pod_env[@]}"
    ADDON_OPERATOR_HA=true
    ADDON_OPERATOR_POD=bosun-0
    ADDON_OPERATOR_NAMESPACE=bosun
    POD_IP=127.0.0.1
    ADDON_OPERATOR_CONFIG_MAP=bosun
    ADDON_OPERATOR_LISTEN_ADDRESS=127.0.0.1
    ADDON_OPERATOR_LISTEN_PORT="$http_port"
    BOSUN_HA_LISTEN="127.0.0.1:$ha_port"
    BOSUN_HA_SERVICE=bosun
    BOSUN_JOURNAL_DIR=/var/lib/bosun/journal
    BOSUN_DEPLOYER_CONTRACT=jobid
    BOSUN_HA_TOKEN="ha-$token"
    LOG_TYPE=json
  )
  printf '  %s\n' "${run_env[@]}" | sed 's/\(TOKEN=\).*/\1…/'
  # chroot and env exec, so the pid is bosun's.
  pod_command "${run_env[@]}" -- /usr/local/bin/bosun run
  bosun_log="$work/bosun.log"
  "${cmd[@]}" >"$bosun_log" 2>&1 &
  bosun_pid=$!
  echo "bosun run: pid $bosun_pid, log $bosun_log"
}

# kube ARGS…: the image's kubectl in the pod, with the pod's in-cluster configuration.
kube() { in_pod "${pod_env[@]}" -- kubectl -n bosun "$@"; }

# wait_for WHAT SECONDS COMMAND…: COMMAND until it succeeds, while bosun runs.
wait_for() {
  local what="$1" deadline=$(($(date +%s) + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$bosun_pid" 2>/dev/null; then
      echo "bosun exited while waiting for $what:" >&2
      tail -n 40 "$bosun_log" >&2
      return 1
    fi
    if (($(date +%s) > deadline)); then
      echo "no $what after $2 s; bosun's log:" >&2
      tail -n 40 "$bosun_log" >&2
      return 1
    fi
    sleep 1
  done
  echo "  ok: $what ($(($(date +%s) - step_start)) s)"
}

ready() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/readyz")" == 200 ]]; }
greeter_configmap() {
  [[ "$(kube get configmap greeter -o jsonpath='{.data.greeting}|{.data.setBy}')" == \
    "hello from bosun|the beforeHelm hook" ]]
}
optional_and_deployment() { kube get configmap optional && kube get deployment greeter; }
helm_release() { [[ -n "$(kube get secrets -l owner=helm,name=greeter -o name)" ]]; }

converge() {
  wait_for "/readyz 200 (the first converge)" 300 ready
  wait_for "the greeter ConfigMap with the global hook's greeting and the beforeHelm hook's value" 120 greeter_configmap
  wait_for "the optional module's ConfigMap and the greeter Deployment" 60 optional_and_deployment
  wait_for "greeter's Helm release record" 60 helm_release
  local out
  echo "$ kubectl -n bosun get configmaps,deployments,secrets (the image's kubectl, in-cluster)"
  kube get configmaps,deployments,secrets
  out="$(kube get configmap bosun -o jsonpath='{.data.global}')"
  expect "the global hook's config value in the ConfigMap bosun/bosun" 'hello from bosun' "$out"
  out="$(in_pod -- addon-operator queue list 2>&1)"
  echo "$ addon-operator queue list"; echo "$out"
  expect "addon-operator queue list from the debug socket" 'main' "$out"
  out="$(cat "$bosun_log")"
  expect "the in-cluster client" 'in-cluster Kubernetes client' "$out"
  out="$(find "$work/journal-volume" -type f | sed "s|$work/journal-volume|/var/lib/bosun|" | sort)"
  echo "journal volume:"; sed 's/^/  /' <<<"$out"
  expect "the journal on its volume" '^/var/lib/bosun/journal/' "$out"
}

stop_bosun() {
  local pid="$bosun_pid" status=0 i
  kill -TERM "$pid"
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "bosun did not stop within 60 s of SIGTERM" >&2
    return 1
  fi
  wait "$pid" || status=$?
  bosun_pid=""
  echo "bosun exited with $status after SIGTERM"
  [[ $status -eq 0 ]]
  if grep -q panicked "$bosun_log"; then
    grep panicked "$bosun_log" >&2
    return 1
  fi
}

# --- 7. the references' own manifests and chart, with only the image swapped -----------
hostkube() { HOME="$work/home" "$work/bin/kubectl" --kubeconfig "$work/sandbox.kubeconfig" "$@"; }

# container_root NAME: the image as a container runtime starts it for a manifest that asks
# for nothing more (metacontroller's, landscaper's deployer charts): a writable layer over
# the image (overlayfs), the image's VOLUME /var/lib/bosun as the runtime's anonymous
# volume (a fresh folder with the image's owner and mode), /proc, /dev and the service
# account. Sets `pod`, where pod_command runs.
container_root() {
  local root="$work/$1-root" layer="$work/$1-layer"
  rm -rf "$layer"
  mkdir -p "$layer/upper" "$layer/work" "$layer/volume" "$root"
  mount -t overlay overlay -o "lowerdir=$img,upperdir=$layer/upper,workdir=$layer/work" "$root"
  roots+=("$root")
  mount_proc_dev "$root"
  mkdir -p "$root/run/secrets/kubernetes.io/serviceaccount"
  mount --bind "$work/serviceaccount" "$root/run/secrets/kubernetes.io/serviceaccount"
  mount -o remount,bind,ro "$root/run/secrets/kubernetes.io/serviceaccount"
  chown --reference="$img/var/lib/bosun" "$layer/volume"
  chmod --reference="$img/var/lib/bosun" "$layer/volume"
  mount --bind "$layer/volume" "$root/var/lib/bosun"
  pod="$root"
}

# start_in_pod LOG ENV… -- COMMAND…: COMMAND in `pod`, as pod_command sets it, in the
# background (bosun_pid, bosun_log).
start_in_pod() {
  bosun_log="$1"
  shift
  pod_command "$@"
  "${cmd[@]}" >"$bosun_log" 2>&1 &
  bosun_pid=$!
  local shown=("${cmd[@]}")
  echo "in the pod: ${shown[*]}" | sed 's/\(TOKEN=\)[^ ]*/\1…/g'
  echo "pid $bosun_pid, log $bosun_log"
}

http_ok() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1$2")" == 200 ]]; }

# ports_free PORT…: the pod shares the host's network here, so the fixed ports of a
# manifest must be free on the machine.
ports_free() {
  local p
  for p in "$@"; do
    if (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "port $p is taken on this machine; the manifest's fixed ports need it free" >&2
      return 1
    fi
  done
}

# The webhooks of metacontroller's globalconfigmap example (examples/globalconfigmap),
# served on the host: customize relates the source ConfigMap and every Namespace, sync
# copies the source into each other namespace.
hooks_port=""
globalconfigmap_hooks() {
  cat >"$work/globalconfigmap-hooks.py" <<'PY'
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hooks(BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        spec = request["parent"]["spec"]
        if self.path == "/customize":
            answer = {"relatedResources": [
                {"apiVersion": "v1", "resource": "configmaps",
                 "namespace": spec["sourceNamespace"], "names": [spec["sourceName"]]},
                {"apiVersion": "v1", "resource": "namespaces"},
            ]}
        else:
            related = request.get("related", {})
            source = next((c for c in related.get("ConfigMap.v1", {}).values()
                           if c["metadata"]["name"] == spec["sourceName"]), None)
            children = [] if source is None else [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": spec["sourceName"], "namespace": ns["metadata"]["name"]},
                 "data": source.get("data", {})}
                for ns in related.get("Namespace.v1", {}).values()
                if ns["metadata"]["name"] != spec["sourceNamespace"]]
            answer = {"status": {"working": "fine"}, "children": children}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
print(server.server_address[1], flush=True)
server.serve_forever()
PY
  rm -f "$work/hooks.port"
  python3 "$work/globalconfigmap-hooks.py" >"$work/hooks.port" 2>"$work/hooks.log" &
  hooks_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s "$work/hooks.port" ]] && break
    sleep 0.1
  done
  hooks_port="$(cat "$work/hooks.port")"
  [[ -n "$hooks_port" ]] || { cat "$work/hooks.log" >&2; return 1; }
  echo "globalconfigmap's webhooks on 127.0.0.1:$hooks_port"
}

globalconfigmap_copies() {
  local ns
  for ns in first second third; do
    [[ "$(hostkube -n "$ns" get configmap globalsettings -o jsonpath='{.data.some}')" == value ]] ||
      return 1
  done
}

# metacontroller's manifests/production/metacontroller.yaml: its container's command and
# args, no volume, probes on 8081; then its globalconfigmap example converges.
metacontroller_manifest() {
  ports_free 8081 9999 9650
  container_root metacontroller
  globalconfigmap_hooks
  start_in_pod "$work/metacontroller.log" "${pod_env[@]}" HOSTNAME=metacontroller-0 -- \
    /usr/bin/metacontroller --zap-log-level=4 --discovery-interval=20s
  wait_for "the liveness probe: /healthz on :8081" 120 http_ok 8081 /healthz
  wait_for "the readiness probe: /readyz on :8081" 120 http_ok 8081 /readyz
  wait_for "/metrics on :9999" 30 http_ok 9999 /metrics
  wait_for "the CompositeController CRD, installed by bosun" 60 hostkube get compositecontrollers
  local out
  out="$(cat "$bosun_log")"
  expect "the modules are off" 'modules switched off' "$out"
  # The example's own objects; the controller's hook URLs are where the hooks run here.
  hostkube apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: globalconfigmaps.examples.metacontroller.io
spec:
  group: examples.metacontroller.io
  scope: Cluster
  names: {plural: globalconfigmaps, singular: globalconfigmap, kind: GlobalConfigMap, shortNames: [gcm]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [sourceName, sourceNamespace]
            properties:
              sourceName: {type: string}
              sourceNamespace: {type: string}
          status:
            type: object
            properties:
              working: {type: string}
YAML
  wait_for "the GlobalConfigMap CRD served" 60 hostkube get globalconfigmaps
  hostkube apply -f - <<YAML
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: globalconfigmap-controller
spec:
  generateSelector: true
  parentResource: {apiVersion: examples.metacontroller.io/v1alpha1, resource: globalconfigmaps}
  childResources:
  - apiVersion: v1
    resource: configmaps
    updateStrategy: {method: InPlace}
  hooks:
    sync: {webhook: {url: "http://127.0.0.1:$hooks_port/sync"}}
    customize: {webhook: {url: "http://127.0.0.1:$hooks_port/customize"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: global}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: globalsettings, namespace: global}
data: {some: value, other: value}
---
apiVersion: v1
kind: Namespace
metadata: {name: first}
---
apiVersion: v1
kind: Namespace
metadata: {name: second}
---
apiVersion: v1
kind: Namespace
metadata: {name: third}
---
apiVersion: examples.metacontroller.io/v1alpha1
kind: GlobalConfigMap
metadata: {name: globalsettings}
spec: {sourceName: globalsettings, sourceNamespace: global}
YAML
  wait_for "globalsettings copied into the namespaces first, second and third" 120 globalconfigmap_copies
  out="$(hostkube get globalconfigmap globalsettings -o jsonpath='{.status.working}')"
  expect "the parent's status from the sync hook" '^fine$' "$out"
  stop_bosun
  stop_pid "$hooks_pid" 5
  hooks_pid=""
}

# landscaper's charts/{helm,manifest}-deployer: the image's entrypoint with the chart's
# args (`--config=/app/ls/config/config.yaml`, no command), the Configuration its config
# Secret holds mounted there, no volume; one DeployItem of the deployer's type.
deployer_item_done() {
  [[ "$(hostkube get deployitem "$1" -o jsonpath='{.status.jobIDFinished}|{.status.phase}')" == \
    "job-1|Succeeded" ]]
}
landscaper_deployer() { # landscaper_deployer NAME CONFIGURATION ITEM CHECK…
  local name="$1" configuration="$2" item="$3" entrypoint
  shift 3
  ports_free 9650
  container_root "$name"
  mkdir -p "$work/$name-config" "$pod/app/ls/config"
  printf '%s' "$configuration" >"$work/$name-config/config.yaml"
  chmod 0644 "$work/$name-config/config.yaml"
  mount --bind "$work/$name-config" "$pod/app/ls/config"
  mount -o remount,bind,ro "$pod/app/ls/config"
  mapfile -t entrypoint < <("${podman[@]}" image inspect \
    --format '{{range .Config.Entrypoint}}{{println .}}{{end}}' "$samples" | sed '/^$/d')
  start_in_pod "$work/$name.log" "${pod_env[@]}" HOSTNAME="$name-7d9f8c6b5-x2x4p" -- \
    "${entrypoint[@]}" --config=/app/ls/config/config.yaml
  wait_for "$name running" 120 grep -q 'deployer running' "$bosun_log"
  hostkube patch deployitem "$item" --subresource=status --type=merge \
    -p '{"status":{"jobID":"job-1"}}'
  wait_for "the DeployItem $item Succeeded for job-1" 120 deployer_item_done "$item"
  wait_for "what $item deploys, in its Target" 30 "$@"
  local identity
  identity="$(hostkube get deployitem "$item" -o jsonpath='{.status.deployer.identity}')"
  expect "$item finished by $name" "^$name-1\$" "$identity"
  stop_bosun
}

landscaper_deployers() {
  hostkube apply -f "$root/deploy/crds/landscaper.yaml" >/dev/null
  wait_for "the DeployItem CRD served" 60 hostkube get deployitems
  cp "$img/usr/local/bin/helm" "$work/bin/"
  rm -rf "$work/chart-package"
  HOME="$work/home" "$work/bin/helm" package "$root/examples/deployer/chart" \
    -d "$work/chart-package" >/dev/null
  # The examples' Target (the sandbox itself) and items, with the kubeconfig and the
  # chart archive filled in.
  python3 - "$root/examples/deployer" "$work/sandbox.kubeconfig" "$work/chart-package" <<'PY' |
import base64, glob, json, sys, yaml
examples, kubeconfig, package = sys.argv[1:]
objects = []
for name in ("01-target.yaml", "02-manifest-item.yaml", "03-helm-item.yaml"):
    with open(f"{examples}/{name}") as f:
        objects.append(yaml.safe_load(f))
with open(kubeconfig) as f:
    objects[0]["spec"]["config"]["kubeconfig"] = f.read()
with open(glob.glob(f"{package}/*.tgz")[0], "rb") as f:
    objects[2]["spec"]["config"]["chart"]["archive"]["raw"] = base64.b64encode(f.read()).decode()
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
PY
    hostkube apply -f -
  landscaper_deployer helm-deployer "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1
kind: Configuration
identity: helm-deployer-1
namespace: ls-system
oci:
  allowPlainHttp: false
  insecureSkipVerify: false
hpa:
  maxReplicas: 1
  averageCpuUtilization: 80
  averageMemoryUtilization: 80
controller:
  workers: 30
" helm-chart hostkube -n examples get configmap example-message
  landscaper_deployer manifest-deployer "apiVersion: manifest.deployer.landscaper.gardener.cloud/v1alpha2
kind: Configuration
identity: manifest-deployer-1
namespace: ls-system
hpa:
  maxReplicas: 1
  averageCpuUtilization: 80
  averageMemoryUtilization: 80
controller:
  workers: 30
" manifests hostkube -n default get configmap from-a-deploy-item
}

# deploy/helm/bosun rendered with metacontroller-helm's default values: the container's
# command, args and environment as the kubelet gives them (fieldRefs and the Secret
# resolved), in the StatefulSet's pod (read-only root, emptyDirs, a fresh journal volume).
chart_with_metacontroller_values() {
  ports_free 8081 9999 9650 9651
  pod="$work/pod-root"
  find "$work/journal-volume" -mindepth 1 -delete
  HOME="$work/home" "$work/bin/helm" template metacontroller "$root/deploy/helm/bosun" \
    -n metacontroller -f "$root/tests/fixtures/references/metacontroller-helm-values.yaml" \
    >"$work/chart.yaml"
  hostkube create namespace metacontroller
  local container
  container="$(python3 - "$work/chart.yaml" "ha-$token" <<'PY'
import json, sys, yaml
with open(sys.argv[1]) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
sts = next(d for d in docs if d["kind"] == "StatefulSet")
c = sts["spec"]["template"]["spec"]["containers"][0]
fields = {"metadata.name": sts["metadata"]["name"] + "-0",
          "metadata.namespace": "metacontroller", "status.podIP": "127.0.0.1"}
env = []
for e in c.get("env", []):
    source = e.get("valueFrom", {})
    if "value" in e:
        value = e["value"]
    elif "fieldRef" in source:
        value = fields[source["fieldRef"]["fieldPath"]]
    elif "secretKeyRef" in source:
        value = sys.argv[2]
    else:
        raise SystemExit(f"env {e['name']}: no value this test can give")
    env.append(f"{e['name']}={value}")
print(json.dumps({"pod": fields["metadata.name"], "env": env,
                  "argv": c.get("command", []) + c.get("args", []),
                  "ready": c["readinessProbe"]["httpGet"]["port"],
                  "live": c["livenessProbe"]["httpGet"]["port"]}))
PY
  )"
  local pod_name ready live chart_env chart_argv out
  pod_name="$(jq -r .pod <<<"$container")"
  ready="$(jq -r .ready <<<"$container")"
  live="$(jq -r .live <<<"$container")"
  mapfile -t chart_env < <(jq -r '.env[]' <<<"$container")
  mapfile -t chart_argv < <(jq -r '.argv[]' <<<"$container")
  start_in_pod "$work/chart.log" "${pod_env[@]}" HOSTNAME="$pod_name" "${chart_env[@]}" -- \
    "${chart_argv[@]}"
  wait_for "the liveness probe: /healthz on :$live" 120 http_ok "$live" /healthz
  wait_for "the readiness probe: /readyz on :$ready" 120 http_ok "$ready" /readyz
  wait_for "the lambda controllers running" 60 grep -q 'lambda controllers running' "$bosun_log"
  out="$(cat "$bosun_log")"
  expect "the modules are off" 'modules switched off' "$out"
  out="$(find "$work/journal-volume" -type f | sed "s|$work/journal-volume|/var/lib/bosun|" | sort)"
  expect "the journal on the chart's volume" '^/var/lib/bosun/journal/' "$out"
  stop_bosun
}

run_step "tools" tools
run_step "base image $slim (debootstrap)" base_slim
run_step "base image $rust_image (debootstrap + the host's toolchain)" base_rust
run_step "podman build $image (the release build)" build_image
run_step "podman build $samples (FROM $image, the sample modules)" build_samples
run_step "the pod's root: the image read-only, volumes, service account" mount_pod
run_step "the tools in the image, as $uid" image_tools
run_step "the TLS sandbox with a token" sandbox
run_step "bosun run from the image, in-cluster environment only" start_bosun
run_step "the sample modules converge" converge
run_step "SIGTERM stops bosun" stop_bosun
run_step "metacontroller's production manifest: /usr/bin/metacontroller, its args, no volume" metacontroller_manifest
run_step "landscaper's helm-deployer and manifest-deployer charts: --config, no command" landscaper_deployers
run_step "deploy/helm/bosun with metacontroller-helm's default values" chart_with_metacontroller_values
