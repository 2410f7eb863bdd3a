package nvmlsource_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

func discoveryError(t *testing.T, err error) *topology.DiscoveryError {
	t.Helper()
	require.Error(t, err)
	var de *topology.DiscoveryError
	require.True(t, errors.As(err, &de), "want a *topology.DiscoveryError, got %T: %v", err, err)
	return de
}

func TestErrorClasses(t *testing.T) {
	tests := []struct {
		ret    nvml.Return
		method string // the call that fails
		class  string
		op     string // in DiscoveryError.Op
	}{
		{nvml.ERROR_DRIVER_NOT_LOADED, "Init", verdict.ClassDriverNotLoaded, "nvmlInit()"},
		{nvml.ERROR_LIBRARY_NOT_FOUND, "Init", verdict.ClassLibraryNotFound, "nvmlInit()"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "Init", verdict.ClassLibRMVersionMismatch, "nvmlInit()"},
		{nvml.ERROR_GPU_IS_LOST, "Device.GetUUID", verdict.ClassGPUIsLost, "nvmlDeviceGetUUID(GPU 0)"},
		{nvml.ERROR_RESET_REQUIRED, "GetMemoryInfo", verdict.ClassResetRequired, "nvmlDeviceGetMemoryInfo(GPU 0)"},
		{nvml.ERROR_CORRUPTED_INFOROM, "GetName", verdict.ClassCorruptedInfoROM, "nvmlDeviceGetName(GPU 0)"},
		{nvml.ERROR_IRQ_ISSUE, "GetPciInfo", verdict.ClassIRQIssue, "nvmlDeviceGetPciInfo(GPU 0)"},
		{nvml.ERROR_OPERATING_SYSTEM, "Init", verdict.ClassOperatingSystem, "nvmlInit()"},
		{nvml.ERROR_NO_PERMISSION, "DeviceGetHandleByIndex", verdict.ClassNoPermission, "nvmlDeviceGetHandleByIndex(GPU 0)"},
		{nvml.ERROR_TIMEOUT, "GetNvLinkState", verdict.ClassTimeout, "nvmlDeviceGetNvLinkState(GPU 0, link 0)"},
		{nvml.ERROR_NOT_READY, "GetMigMode", verdict.ClassNotReady, "nvmlDeviceGetMigMode(GPU 0)"},
		{nvml.ERROR_NOT_FOUND, "GetGpuInstanceById", verdict.ClassNotFound, "nvmlDeviceGetGpuInstanceById(MIG 0:0, GI "},
		{nvml.ERROR_GPU_NOT_FOUND, "DeviceGetCount", verdict.ClassGPUNotFound, "nvmlDeviceGetCount()"},
		{nvml.ERROR_UNKNOWN, "GetP2PStatus", verdict.ClassUnknown, "nvmlDeviceGetP2PStatus(GPU 0, GPU 1, READ)"},
		{nvml.ERROR_MEMORY, "MIG.GetAttributes", verdict.ClassUnknown, "nvmlDeviceGetAttributes(MIG 0:0)"},
		{nvml.ERROR_INSUFFICIENT_POWER, "SystemGetDriverVersion", verdict.ClassUnknown, "nvmlSystemGetDriverVersion()"},
		{nvml.ERROR_UNINITIALIZED, "GetTopologyCommonAncestor", verdict.ClassUnknown, "nvmlDeviceGetTopologyCommonAncestor(GPU 0, GPU 1)"},
	}
	messages, remediations := map[string]string{}, map[string]string{}
	for _, tt := range tests {
		t.Run(tt.ret.Error(), func(t *testing.T) {
			s := nvmltest.NewServer(t, nvmltest.DGXA100)
			s.CreateMIG(0, "3g.20gb")
			s.Fault(tt.method, tt.ret)
			_, err := discover(t, s)
			de := discoveryError(t, err)
			require.Equal(t, tt.class, de.Class)
			require.Equal(t, "NVML_"+tt.class, de.Rule())
			require.False(t, de.Hung)
			require.Contains(t, de.Op, tt.op)
			require.NotEmpty(t, de.Message)
			require.NotEmpty(t, de.Remediation)
			require.ErrorIs(t, err, tt.ret, "Err is the NVML return code")
			require.Contains(t, err.Error(), "NVML_"+tt.class)
			if tt.class == verdict.ClassUnknown {
				require.Contains(t, de.Message, tt.ret.Error(), "UNKNOWN carries NVML's error string")
				return
			}
			// One message and one remediation per class, each its own.
			msg := strings.TrimPrefix(strings.TrimPrefix(de.Message, "GPU 0: "), "MIG device 0:0: ")
			for class, m := range messages {
				require.NotEqual(t, m, msg, "%s and %s share a message", class, tt.class)
			}
			for class, r := range remediations {
				require.NotEqual(t, r, de.Remediation, "%s and %s share a remediation", class, tt.class)
			}
			messages[tt.class], remediations[tt.class] = msg, de.Remediation
		})
	}
	covered := map[string]bool{verdict.ClassCallHung: true} // TestHungCall
	for _, tt := range tests {
		covered[tt.class] = true
	}
	for _, c := range nvmlsource.Classes() {
		require.True(t, covered[c], "class %s has no test", c)
	}
}

func TestErrorNamesTheDevice(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.CreateMIG(6, "1g.10gb", "2g.20gb")
	s.FaultGPU("MIG.GetUUID", 6, nvml.ERROR_GPU_IS_LOST)
	_, err := discover(t, s)
	de := discoveryError(t, err)
	require.Equal(t, verdict.ClassGPUIsLost, de.Class)
	require.Equal(t, "nvmlDeviceGetUUID(MIG 6:0)", de.Op)
	require.True(t, strings.HasPrefix(de.Message, "MIG device 6:0: "), de.Message)
}

func TestHungCall(t *testing.T) {
	const timeout = 100 * time.Millisecond
	tests := []struct {
		method string
		op     string
	}{
		{"Init", "nvmlInit()"},
		{"DeviceGetCount", "nvmlDeviceGetCount()"},
		{"Device.GetUUID", "nvmlDeviceGetUUID(GPU 0)"},
		{"GetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemotePciInfo(GPU 0, link 0)"},
		{"MIG.GetAttributes", "nvmlDeviceGetAttributes(MIG 0:0)"},
		{"GpuInstance.GetInfo", "nvmlGpuInstanceGetInfo(MIG 0:0, GI "},
		{"GetP2PStatus", "nvmlDeviceGetP2PStatus(GPU 0, GPU 1, READ)"},
		{"GetRemappedRows", "nvmlDeviceGetRemappedRows(GPU 0)"},
		{"GetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfo(GPU 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			s := nvmltest.NewServer(t, nvmltest.DGXB200)
			s.CreateMIG(0, "1g.23gb")
			before := runtime.NumGoroutine()
			release := s.Hang(tt.method)
			start := time.Now()
			_, err := discover(t, s, nvmlsource.WithCallTimeout(timeout), nvmlsource.WithInitTimeout(timeout))
			took := time.Since(start)
			require.Less(t, took, timeout+time.Second, "discovery must return soon after the deadline")
			de := discoveryError(t, err)
			require.Equal(t, verdict.ClassCallHung, de.Class)
			require.Equal(t, "NVML_CALL_HUNG", de.Rule())
			require.True(t, de.Hung)
			require.Contains(t, de.Op, tt.op)
			require.NotEmpty(t, de.Message)
			require.NotEmpty(t, de.Remediation)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Empty(t, s.Mock().ShutdownCalls(), "no Shutdown behind a hung call")

			// The stuck worker is the only goroutine left behind, and it
			// goes once the call returns.
			release()
			waitGoroutines(t, before)
		})
	}
}

// waitGoroutines waits until at most n goroutines run. (Not
// require.Eventually: it polls from a goroutine of its own.)
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines remain, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInitTimeout(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	s.Hang("Init")
	start := time.Now()
	_, err := discover(t, s, nvmlsource.WithInitTimeout(50*time.Millisecond)) // calls: 5 s
	require.Less(t, time.Since(start), 2*time.Second)
	de := discoveryError(t, err)
	require.Equal(t, "nvmlInit()", de.Op)
	require.True(t, de.Hung)
}

func TestContextDeadline(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	s.Hang("GetName")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := nvmlsource.New(s.Interface()).Inventory(ctx) // 5 s per call
	require.Less(t, time.Since(start), 2*time.Second, "the context's deadline wins over the call timeout")
	de := discoveryError(t, err)
	require.Equal(t, verdict.ClassCallHung, de.Class)
	require.True(t, de.Hung)
	require.Equal(t, "nvmlDeviceGetName(GPU 0)", de.Op)
}

func TestContextCancelled(t *testing.T) {
	t.Run("before", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := nvmlsource.New(s.Interface()).Inventory(ctx)
		require.ErrorIs(t, err, context.Canceled)
		var de *topology.DiscoveryError
		require.False(t, errors.As(err, &de), "cancellation is the caller's, not the node's")
		require.Zero(t, s.Calls())
	})
	t.Run("deadline already passed", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := nvmlsource.New(s.Interface()).Inventory(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var de *topology.DiscoveryError
		require.False(t, errors.As(err, &de), "no call hung")
	})
	t.Run("during a call", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100)
		s.Hang("GetPersistenceMode")
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := nvmlsource.New(s.Interface()).Inventory(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Contains(t, err.Error(), "nvmlDeviceGetPersistenceMode(GPU 0)")
	})
}

func TestPanicInBinding(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	s.GPU(2).GetBrandFunc = nil // unused by discovery
	s.GPU(2).GetNameFunc = nil  // go-nvml's mock panics on an unset method
	_, err := discover(t, s)
	de := discoveryError(t, err)
	require.Equal(t, verdict.ClassUnknown, de.Class)
	require.Equal(t, "nvmlDeviceGetName(GPU 2)", de.Op)
	require.Contains(t, de.Message, "panicked")
}

func TestShutdownAfterDiscovery(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	mustDiscover(t, s)
	require.Len(t, s.Mock().InitCalls(), 1)
	require.Len(t, s.Mock().ShutdownCalls(), 1)

	// A failing Shutdown does not spoil a good inventory.
	s.Fault("Shutdown", nvml.ERROR_UNKNOWN)
	mustDiscover(t, s)

	// A failed discovery still shuts down; a failed Init does not.
	s.ClearFaults()
	s.Fault("GetName", nvml.ERROR_GPU_IS_LOST)
	_, err := discover(t, s)
	require.Error(t, err)
	require.Len(t, s.Mock().ShutdownCalls(), 3)
	s.Fault("Init", nvml.ERROR_DRIVER_NOT_LOADED)
	_, err = discover(t, s)
	require.Error(t, err)
	require.Len(t, s.Mock().ShutdownCalls(), 3)
}

func TestConcurrentInventories(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.CreateMIG(1, "3g.40gb", "3g.40gb")
	src := nvmlsource.New(s.Interface())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			inv, err := src.Inventory(context.Background())
			if err == nil && len(inv.GPUs[1].MIGDevices) != 2 {
				err = errors.New("wrong MIG devices")
			}
			require.NoError(t, err)
		})
	}
	wg.Wait()
}

type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Debugf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func TestLogger(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	log := &recordingLogger{}
	mustDiscover(t, s, nvmlsource.WithLogger(log))
	require.NotEmpty(t, log.lines)
	// Each NVML call, with its duration.
	var calls []string
	for _, l := range log.lines {
		if strings.Contains(l, " took ") {
			calls = append(calls, l)
		}
	}
	require.NotEmpty(t, calls)
	require.Regexp(t, `^nvml: nvmlInit\(\) took [0-9.]+(ns|µs|ms|s)$`, calls[0])
	require.Contains(t, strings.Join(calls, "\n"), "nvmlDeviceGetCount() took ")
}
