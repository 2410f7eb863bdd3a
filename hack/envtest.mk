# Real kube-apiserver + etcd for envtest (integrations/kubernetes/envtestutil).
# Included by the top-level Makefile.
#
# The binaries are built from the Go modules pinned in tools/ (k8s.io/kubernetes)
# and tools/cmd/etcd/ (go.etcd.io/etcd/server/v3) into bin/k8s/, and rebuilt only
# when missing or when those go.mod/go.sum files change. A cold kube-apiserver
# build takes ~10 minutes on 2 cores; later ones reuse the Go build cache.

ENVTEST_BIN_DIR ?= bin/k8s

.PHONY: test-binaries test-binaries-force test-envtest

test-binaries: $(KUSTOMIZE) ## build bin/k8s/ (etcd, kube-apiserver, kube-scheduler, the Job, JobSet and Trainer controllers) for the tests (only if missing or tools/ changed)
	KUSTOMIZE=$(abspath $(KUSTOMIZE)) RANKGATE_TEST_BIN_DIR=$(abspath $(ENVTEST_BIN_DIR)) hack/build-test-binaries.sh

test-binaries-force: $(KUSTOMIZE) ## rebuild bin/k8s/ unconditionally
	KUSTOMIZE=$(abspath $(KUSTOMIZE)) RANKGATE_TEST_BIN_DIR=$(abspath $(ENVTEST_BIN_DIR)) hack/build-test-binaries.sh -f

test-envtest: test-binaries ## smoke test: real API server with the Kubeflow CRDs
	RANKGATE_TEST_BIN_DIR=$(abspath $(ENVTEST_BIN_DIR)) $(GO) test -count=1 -v ./integrations/kubernetes/envtestutil/
