package cliutil

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfile writes a Go CPU profile of the command into path (a
// developer's aid: KINTSUGI_CPUPROFILE=<file> kintsugi-cycle run ..., then
// go tool pprof); stop ends it. An empty path profiles nothing.
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("KINTSUGI_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("KINTSUGI_CPUPROFILE: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
