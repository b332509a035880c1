//go:build cuda

package gpu

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align/aligntest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend/blendtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon/decontest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf/edftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register/registertest"
)

// The engine's backends against the conformance suites that the CPU
// references pass (each algorithm package's <name>test.Run), one test per
// backend; the comparisons with the CPU on the same data are in the
// backend's own test file. The streamed EDF form (edfStackFuser) runs its
// suite in edf_stack_test.go.

// The GPU translator passes the same conformance suite as align.CPU.
func TestTranslatorConformance(t *testing.T) {
	aligntest.Run(t, testEngine.Translator())
}

// The GPU fitter passes the same conformance suite as basic.CPU.
func TestBaSiCConformance(t *testing.T) {
	basictest.Run(t, testEngine.BaSiC())
}

// The GPU blender passes the same conformance suite as blend.CPU.
func TestBlendConformance(t *testing.T) {
	blendtest.Run(t, testEngine.Blender())
}

// The GPU deconvolver passes the same conformance suite as decon.CPU.
func TestDeconConformance(t *testing.T) {
	decontest.Run(t, testEngine.Deconvolver())
}

// The GPU EDF passes the same suite as edf.CPU: its index maps equal the
// CPU reference's exactly and its outputs are within 1 count (the suite
// compares with the whole-plane CPU run), for both methods.
func TestEDFConformance(t *testing.T) {
	edftest.Run(t, testEngine, edftest.Options{Wavelet: true})
}

// The GPU registration backend passes the same conformance suite as
// register.CPU.
func TestRegConformance(t *testing.T) {
	registertest.Run(t, testEngine.Registrar())
}
