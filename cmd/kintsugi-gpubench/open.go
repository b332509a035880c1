//go:build cuda

package main

import (
	"context"
	"fmt"
	"os"
)

// -stage open: the time of one engine open (CUDA context, cuFFT, kernel
// modules, staging buffers) and nothing else. With CUDA_CACHE_DISABLE=1 (or
// a fresh CUDA_CACHE_PATH) it is the first open on a node whose JIT cache is
// empty: PTX-only modules are JIT-compiled then, fatbins with SASS for the
// GPU are not.
func init() { stages["open"] = runOpen }

func runOpen(_ context.Context, f flags) error {
	fmt.Printf("CUDA_CACHE_DISABLE=%q CUDA_CACHE_PATH=%q\n", os.Getenv("CUDA_CACHE_DISABLE"), os.Getenv("CUDA_CACHE_PATH"))
	eng, err := openEngine(f)
	if err != nil {
		return err
	}
	return eng.Close()
}
