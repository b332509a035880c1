//go:build !cuda

// Command kintsugi-gpubench is the GPU benchmark of the stitch stage; it
// exists only in the CUDA build (make gpu, make gpu-bench).
package main

import (
	"fmt"
	"os"

	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
)

func main() {
	fmt.Fprintln(os.Stderr, "kintsugi-gpubench:", gpu.ErrNoCUDA)
	os.Exit(1)
}
