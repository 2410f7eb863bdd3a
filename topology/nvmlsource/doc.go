// Package nvmlsource discovers a node's GPU inventory live through NVML
// (go-nvml's nvml.Interface), so tests inject go-nvml's mock servers (see the
// nvmltest sub-package) and production uses the driver's libnvidia-ml.so.1.
//
// Every NVML call runs under its own deadline (WithCallTimeout). NVML calls
// can block forever on a wedged GPU, and a blocked cgo call cannot be
// interrupted, so the calls run on a goroutine of their own and Inventory
// waits for them with a timer and the context. When a call passes its
// deadline, Inventory returns at once a *topology.DiscoveryError of class
// CALL_HUNG (rule NVML_CALL_HUNG, Hung true) that names the call and the
// device; discovery stops at that call. The goroutine stuck in the driver is
// abandoned: it leaks until the call returns, if ever, and then only shuts
// NVML down and exits. The process can still exit (returning from main or
// os.Exit does not wait for goroutines).
//
// NVML return codes become *topology.DiscoveryError values with a class per
// failure kind (see Classes), a message and a remediation a person can act
// on. ERROR_NOT_SUPPORTED is an answer, never a failure: the field stays
// unknown, or the capability is reported absent.
//
// NVML exists only in Linux builds with cgo; any other build (the macOS
// command line) gets a Source whose Inventory fails with class
// LIBRARY_NOT_FOUND and says so.
package nvmlsource
