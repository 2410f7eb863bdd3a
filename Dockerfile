# syntax=docker/dockerfile:1
# Build with cgo: go-nvml dlopens libnvidia-ml.so.1 at run time, which the
# NVIDIA container toolkit mounts into the container; nothing NVIDIA is
# linked or shipped here.
#
# Base images are pinned by digest, so that a rebuild of the same commit
# uses the same bytes; the tag says what the digest is. Bump both together,
# deliberately (the Go patch release matches go.mod).
# .dockerignore keeps .git, bin/ and local build outputs out of the context.
# Multi-arch (linux/amd64, linux/arm64: GH200/GB200 nodes are arm64): the
# build stage runs on the builder's own platform and cross-compiles with
# Debian's cross gcc for the target (cgo); `docker buildx build --platform
# linux/amd64,linux/arm64`. Both digests must be those of the images'
# multi-arch indexes (`docker buildx imagetools inspect IMAGE:TAG`).
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
ARG TARGETARCH
RUN set -eu; case "$TARGETARCH" in \
      amd64) triple=x86_64-linux-gnu; gccpkg=gcc-x86-64-linux-gnu ;; \
      arm64) triple=aarch64-linux-gnu; gccpkg=gcc-aarch64-linux-gnu ;; \
      *) echo "unsupported TARGETARCH $TARGETARCH"; exit 1 ;; esac; \
    if [ "$(dpkg --print-architecture)" = "$TARGETARCH" ]; then echo gcc > /cc; else \
      apt-get update && apt-get install -y --no-install-recommends "$gccpkg" "libc6-dev-${TARGETARCH}-cross" && \
      rm -rf /var/lib/apt/lists/* && echo "${triple}-gcc" > /cc; fi
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    export CC="$(cat /cc)" CGO_ENABLED=1 GOOS=linux GOARCH="$TARGETARCH" && \
    go build -trimpath \
      -ldflags "-s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=${VERSION}" \
      -o /out/rankgate ./cmd/rankgate && \
    go build -trimpath -tags rankgate_node \
      -ldflags "-s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=${VERSION}" \
      -o /out/rankgate-node ./cmd/rankgate

# glibc base (cgo), no shell, runs as uid 65532.
FROM gcr.io/distroless/base-debian12:nonroot@sha256:b12529fbbd0bb15eea8905f69d83148679e0b4d7d434c8808100792029b1caae
# rankgate: every face. rankgate-node: preflight, inspect, launch, init only
# (no client-go; a third of the memory and start-up time): use it in init
# containers and in front of torchrun/mpirun.
COPY --from=build /out/rankgate /out/rankgate-node /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rankgate"]
