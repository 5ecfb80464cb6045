# syntax=docker/dockerfile:1
# Build stage: compile the bosun binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin bosun
# The Helm library (libhelm_c.so) for modules with charts.
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
ENV HELM_LIB_PATH=/usr/local/lib/bosun/libhelm_c.so
# The journal lives on the StatefulSet's volume.
VOLUME /var/lib/bosun
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bosun"]
CMD ["run"]
