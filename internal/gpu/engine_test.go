//go:build cuda

package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// testEngine is shared by the tests of this package (opening a context
// and JIT-loading the kernels takes a moment).
var testEngine *Engine

func TestMain(m *testing.M) {
	e, err := Open(Options{Debug: os.Getenv("KINTSUGI_GPU_DEBUG") != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu tests need a CUDA device:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "gpu tests on", e.Name())
	testEngine = e
	code := m.Run()
	e.Close()
	os.Exit(code)
}

func TestEngineErrors(t *testing.T) {
	e := testEngine
	// An impossible allocation is an ErrOutOfMemory error naming the
	// size, not a panic, and the engine stays usable.
	err := e.do(context.Background(), "huge alloc", func() error {
		p := e.alloc(1 << 50)
		e.release(p)
		return nil
	})
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "alloc") || !strings.Contains(err.Error(), "huge alloc") {
		t.Fatalf("huge alloc: error %v, want ErrOutOfMemory naming the operation and the allocation", err)
	}
	t.Logf("out-of-memory error: %v", err)
	if _, err := e.MemInfo(); err != nil {
		t.Fatalf("engine unusable after an out-of-memory error: %v", err)
	}
	// A CUDA error raised by mumax's cu (a panic there) comes back as
	// *Error wrapped with the operation.
	err = e.do(context.Background(), "bad launch", func() error {
		p := e.alloc(8)
		defer e.release(p)
		e.launchFillF64(dim{gx: 1, gy: 1, gz: 1, bx: 4096, by: 1, bz: 1}, p, 0.0, int64(1))
		return nil
	})
	var ce *Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "kernel fill_f64") {
		t.Fatalf("launch with 4096 threads per block: error %v, want a *Error naming the kernel", err)
	}
	t.Logf("launch error: %v", err)
	if _, err := e.MemInfo(); err != nil {
		t.Fatalf("engine unusable after a rejected launch: %v", err)
	}
	// Device index out of range.
	if _, err := Open(Options{Device: 99}); err == nil || !strings.Contains(err.Error(), "--gpu 99") {
		t.Errorf("Open(Device 99): error %v, want one naming --gpu 99", err)
	}
	// Cancelled context: nothing runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.do(ctx, "noop", func() error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// Many goroutines may call the engine at once; calls are serialised on the
// thread that owns the context.
func TestEngineConcurrentCalls(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 20 {
				if err := testEngine.do(context.Background(), "small alloc", func() error {
					p := testEngine.alloc(1 << 20)
					testEngine.launchFillF64(grid1(1<<17), p, 1.0, int64(1<<17))
					testEngine.release(p)
					return nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s, err := testEngine.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if s.PoolInUse != 0 {
		t.Errorf("pool reports %d bytes in use after all calls returned", s.PoolInUse)
	}
	t.Logf("memory: %+v", s)
}

// A second engine on the same device (another goroutine, another context)
// works side by side; closing it leaves the first usable.
func TestSecondEngine(t *testing.T) {
	e2, err := Open(Options{Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.MemInfo(); err != nil {
		t.Fatal(err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.MemInfo(); !errors.Is(err, ErrClosed) {
		t.Errorf("call on a closed engine: %v, want ErrClosed", err)
	}
	if _, err := testEngine.MemInfo(); err != nil {
		t.Fatal(err)
	}
}
