package cliutil

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Profile starts the developer's aids the environment asks for:
// KINTSUGI_CPUPROFILE=<file> writes a Go CPU profile (go tool pprof) and
// KINTSUGI_TRACE=<file> a Go execution trace (go tool trace: every
// goroutine's timeline, cgo calls into the engine included); stop ends
// them. Neither set: nothing is recorded.
func Profile() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if p := os.Getenv("KINTSUGI_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return nil, fmt.Errorf("KINTSUGI_CPUPROFILE: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, errors.Join(fmt.Errorf("KINTSUGI_CPUPROFILE: %w", err), f.Close())
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if p := os.Getenv("KINTSUGI_TRACE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			stop()
			return nil, fmt.Errorf("KINTSUGI_TRACE: %w", err)
		}
		if err := trace.Start(f); err != nil {
			stop()
			return nil, errors.Join(fmt.Errorf("KINTSUGI_TRACE: %w", err), f.Close())
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}
