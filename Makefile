# rankgate build, test and release targets. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=$(VERSION) \
	-X github.com/rankgate/rankgate/cmd/rankgate/app.Commit=$(COMMIT) \
	-X github.com/rankgate/rankgate/cmd/rankgate/app.BuildDate=$(BUILD_DATE)
BIN := bin/rankgate
IMAGE ?= rankgate:$(VERSION)
FUZZTIME ?= 30s
BENCHTIME ?= 1s
# go-nvml's header marks vGPU calls deprecated; the warnings are noise.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# Tools, pinned; built once into bin/tools (ignored) under a versioned
# name, so that changing a version rebuilds that tool and nothing else.
# Defined before the rules that name them as prerequisites (make expands
# those when it reads the rule).
STATICCHECK_VERSION := v0.8.2
GOCYCLO_VERSION := v0.6.0
TOOLS_DIR := bin/tools
STATICCHECK := $(TOOLS_DIR)/staticcheck-$(STATICCHECK_VERSION)
GOCYCLO := $(TOOLS_DIR)/gocyclo-$(GOCYCLO_VERSION)
KUSTOMIZE_VERSION := v5.8.0
KUSTOMIZE := $(TOOLS_DIR)/kustomize-$(KUSTOMIZE_VERSION)
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_GEN_VERSION)
HELM_VERSION := v3.22.0
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
CHART := charts/rankgate
# helm template's Kubernetes version: the chart needs 1.30 or later, and a
# helm built from its module assumes 1.20.
CHART_KUBE_VERSION := 1.30.0
# The chart links its CRD, alerts and dashboard from configs/ (one source);
# helm notes each link on every run.
HELM_SYMLINK_NOTE := found symbolic link in path
API_DIR := ./integrations/kubernetes/api/...
CRD_DIR := configs/deploy/crds

.PHONY: release cross generate verify-generated manifests help build build-node test test-unit lint bench bench-gang-16 bench-compare fuzz image e2e demo device-smoke clean

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/rankgate (cgo on: go-nvml dlopens libnvidia-ml at run time)
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rankgate

build-node: ## bin/rankgate-node: the node faces only (preflight, inspect, demo, launch, init), no client-go: smaller, faster start, less memory
	CGO_ENABLED=1 $(GO) build -trimpath -tags rankgate_node -ldflags '$(LDFLAGS)' -o bin/rankgate-node ./cmd/rankgate

demo: ## the embedded-sample preflight the README starts with
	$(GO) run ./cmd/rankgate demo

test: lint test-binaries $(KUSTOMIZE) $(HELM) ## the whole suite: lint, unit, fuzz seeds, envtest (real kube-apiserver + etcd) and e2e
	RANKGATE_KUSTOMIZE=$(abspath $(KUSTOMIZE)) RANKGATE_HELM=$(abspath $(HELM)) $(GO) test -count=1 -timeout 40m ./...
	$(GO) test -count=1 -tags rankgate_node ./cmd/...

test-unit: ## tests that need no API server binaries
	RANKGATE_SKIP_ENVTEST=1 $(GO) test -count=1 ./...

# The release manifest's image tag: the version, never latest.
RELEASE_VERSION ?= $(VERSION)

lint: $(STATICCHECK) $(GOCYCLO) $(HELM) verify-generated ## gofmt, go vet, staticcheck, the limits (files <= 600 lines, functions <= cyclomatic 25), generated code current, helm lint and template of charts/rankgate; lists every offender
	@status=0; \
	out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; status=1; fi; \
	echo "go vet"; $(GO) vet ./... || status=1; \
	echo "staticcheck $(STATICCHECK_VERSION)"; $(STATICCHECK) ./... || status=1; \
	echo "limits (gocyclo $(GOCYCLO_VERSION))"; hack/check-limits.sh $(GOCYCLO) || status=1; \
	echo "helm lint, helm template ($(HELM_VERSION))"; \
	$(HELM) lint --strict --kube-version $(CHART_KUBE_VERSION) $(CHART) 2> >(grep -v "$(HELM_SYMLINK_NOTE)" >&2) || status=1; \
	for v in "" "--set certificates.mode=cert-manager,onFail=delete,operatorPods.enabled=true,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true" \
	  "--set webhooks.enabled=false,networkPolicy.enabled=false,namespace.create=true"; do \
	  $(HELM) template rankgate $(CHART) --kube-version $(CHART_KUBE_VERSION) --namespace rankgate-system $$v >/dev/null 2> >(grep -v "$(HELM_SYMLINK_NOTE)" >&2) || status=1; \
	done; \
	exit $$status

$(STATICCHECK):
	@mkdir -p $(TOOLS_DIR)/.staticcheck
	GOBIN=$(abspath $(TOOLS_DIR)/.staticcheck) GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(TOOLS_DIR)/.staticcheck/staticcheck $@

$(KUSTOMIZE):
	@mkdir -p $(TOOLS_DIR)/.kustomize
	GOBIN=$(abspath $(TOOLS_DIR)/.kustomize) GOFLAGS= $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(TOOLS_DIR)/.kustomize/kustomize $@

manifests: $(KUSTOMIZE) ## dist/rankgate.yaml: the install (configs/deploy) rendered, image pinned to RELEASE_VERSION
	@case "$(RELEASE_VERSION)" in ""|latest) echo "RELEASE_VERSION must name a release, not '$(RELEASE_VERSION)'"; exit 2;; esac
	@mkdir -p dist
	rm -rf dist/.build && mkdir -p dist/.build && cp -r configs/deploy configs/components configs/overlays dist/.build/
	cd dist/.build/deploy && $(abspath $(KUSTOMIZE)) edit set image ghcr.io/rankgate/rankgate=ghcr.io/rankgate/rankgate:$(RELEASE_VERSION)
	$(KUSTOMIZE) build dist/.build/deploy > dist/rankgate.yaml
	rm -rf dist/.build
	@echo "wrote dist/rankgate.yaml (image ghcr.io/rankgate/rankgate:$(RELEASE_VERSION))"

release: $(KUSTOMIZE) ## dist/ for VERSION=vX.Y.Z: CLI (linux amd64/arm64, darwin arm64), node build (linux amd64/arm64), install manifest, chart package, SHA256SUMS (hack/release.sh)
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "VERSION=$(VERSION): want make release VERSION=vX.Y.Z"; exit 2;; esac
	bash hack/release.sh $(VERSION)

cross: ## compile every release target (cgo cross gcc for the other Linux arch), keep nothing
	bash hack/release.sh --cross

generate: $(CONTROLLER_GEN) ## the Gang API's deepcopy code and CRD (configs/deploy/crds) from integrations/kubernetes/api
	$(CONTROLLER_GEN) object paths=$(API_DIR)
	$(CONTROLLER_GEN) crd paths=$(API_DIR) output:crd:artifacts:config=$(CRD_DIR)

verify-generated: $(CONTROLLER_GEN) ## fail when the deepcopy code or CRD differ from what generate writes (no git needed)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r integrations/kubernetes/api "$$tmp/api"; cp -r $(CRD_DIR) "$$tmp/crds"; \
	$(MAKE) -s generate >/dev/null || exit 1; \
	diff -ru "$$tmp/api" integrations/kubernetes/api && diff -ru "$$tmp/crds" $(CRD_DIR) || \
	{ echo "generated files were stale (now rewritten): run make generate and commit"; exit 1; }

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS_DIR)/.controller-gen
	GOBIN=$(abspath $(TOOLS_DIR)/.controller-gen) GOFLAGS= $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS_DIR)/.controller-gen/controller-gen $@

$(HELM):
	@mkdir -p $(TOOLS_DIR)/.helm
	GOBIN=$(abspath $(TOOLS_DIR)/.helm) GOFLAGS= $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS_DIR)/.helm/helm $@

$(GOCYCLO):
	@mkdir -p $(TOOLS_DIR)/.gocyclo
	GOBIN=$(abspath $(TOOLS_DIR)/.gocyclo) GOFLAGS= $(GO) install github.com/fzipp/gocyclo/cmd/gocyclo@$(GOCYCLO_VERSION)
	mv $(TOOLS_DIR)/.gocyclo/gocyclo $@

bench: ## benchmarks of every package, then peak RSS of a preflight (numbers: docs/performance.md)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...
	bash hack/bench-rss.sh

bench-gang-16: ## 1,000 jobs x 8 ranks gang latency with kube-apiserver, etcd, controller and rank clients pinned to their own cores (16 cores; results in OUT, hack/bench-gang-16.sh)
	bash hack/bench-gang-16.sh $(OUT)

bench-compare: ## one real-API-server benchmark (TEST, default TestBenchGangLatency) for BASE and the working tree, in turns, ROUNDS times; a table side by side (hack/bench-compare.sh)
	bash hack/bench-compare.sh $(BASE) $(OUT)

fuzz: ## run every fuzzer for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

e2e: test-binaries $(KUSTOMIZE) $(HELM) ## end-to-end gang scenarios on a real API server
	RANKGATE_KUSTOMIZE=$(abspath $(KUSTOMIZE)) RANKGATE_HELM=$(abspath $(HELM)) $(GO) test -count=1 -run 'E2E' -v ./integrations/...

image: ## container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

device-smoke: ## build the binary for the GPU machine's smoke run (hack/device-smoke.sh)
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o .device/rankgate ./cmd/rankgate
	CGO_ENABLED=1 $(GO) test -c -o .device/nvmlsource.test ./topology/nvmlsource
	cp hack/device-smoke.sh .device/

clean:
	rm -rf bin/rankgate bin/rankgate-node .device

-include hack/envtest.mk
