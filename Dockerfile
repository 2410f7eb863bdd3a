# syntax=docker/dockerfile:1
# Build with cgo: go-nvml dlopens libnvidia-ml.so.1 at run time, which the
# NVIDIA container toolkit mounts into the container; nothing NVIDIA is
# linked or shipped here.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath \
      -ldflags "-s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=${VERSION}" \
      -o /out/rankgate ./cmd/rankgate && \
    CGO_ENABLED=1 go build -trimpath -tags rankgate_node \
      -ldflags "-s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=${VERSION}" \
      -o /out/rankgate-node ./cmd/rankgate

# glibc base (cgo), no shell, runs as uid 65532.
FROM gcr.io/distroless/base-debian12:nonroot
# rankgate: every face. rankgate-node: preflight, inspect, launch, init only
# (no client-go; a third of the memory and start-up time): use it in init
# containers and in front of torchrun/mpirun.
COPY --from=build /out/rankgate /out/rankgate-node /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rankgate"]
