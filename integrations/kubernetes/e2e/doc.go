// Package e2e holds the end-to-end tests of the gang protocol: a real
// kube-apiserver and etcd (envtestutil) with the Kubeflow CRDs, the
// controller running in-process, and every rank a real `rankgate init`
// process fed a fixture inventory. Run them with `make e2e` (tests named
// TestE2E*); the benchmarks (bench_test.go) run when RANKGATE_BENCH=1.
package e2e
