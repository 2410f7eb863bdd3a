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
      -o /out/rankgate ./cmd/rankgate

# glibc base (cgo), no shell, runs as uid 65532.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/rankgate /usr/local/bin/rankgate
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rankgate"]
