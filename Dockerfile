# syntax=docker/dockerfile:1
# Build stage: compile the bosun binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin bosun
# Real Helm for modules with charts: the library (libhelm_c.so) and the helm binary.
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
 && BOSUN_TOOLS_DIR=/src/.tools ./scripts/setup-helm.sh

# Runtime stage: Debian slim with the tools hooks usually need, and graphviz for the PNG
# of the debug endpoint /graph.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates bash jq python3 graphviz \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/bosun /usr/local/bin/bosun
COPY --from=build /src/.tools/helm/libhelm_c.so /usr/local/lib/bosun/libhelm_c.so
# The library by default; HELM_BIN_PATH=helm (as with addon-operator) or
# BOSUN_HELM_ENGINE=cli runs the binary instead.
COPY --from=build /src/.tools/helm/helm /usr/local/bin/helm
ENV HELM_LIB_PATH=/usr/local/lib/bosun/libhelm_c.so
# The journal lives on the StatefulSet's volume.
VOLUME /var/lib/bosun
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bosun"]
CMD ["run"]
