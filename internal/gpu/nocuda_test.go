//go:build !cuda

package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
)

// Without the cuda tag every entry point must fail loudly with ErrNoCUDA,
// never fall back to the CPU.
func TestOpenWithoutCUDA(t *testing.T) {
	e, err := Open(Options{})
	if !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("Open: got %v, want ErrNoCUDA", err)
	}
	if !strings.Contains(err.Error(), "make gpu") || !strings.Contains(err.Error(), "--device cpu") {
		t.Errorf("message %q does not say how to get a GPU build or the CPU path", err)
	}
	if _, err := e.BaSiC().Fit(context.Background(), nil, basic.Production()); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("Fit: got %v, want ErrNoCUDA", err)
	}
	if _, err := e.Translator().Translate(context.Background(), nil, nil, align.Params{}); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("Translate: got %v, want ErrNoCUDA", err)
	}
	if _, err := e.Blender().Blend(context.Background(), nil, nil, blend.Params{}); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("Blend: got %v, want ErrNoCUDA", err)
	}
}
