package synth

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// BenchmarkProductionPlane renders and exposes one production-size raw plane
// (1440 x 1920, channel 1, no file I/O) at the reference z and at z = 1 (the
// most defocused end of the stack). Figures: ns/op per plane.
func BenchmarkProductionPlane(b *testing.B) {
	o, _ := Preset("production")
	o.OutDir = b.TempDir()
	m := newTissueModel(o)
	g := &channelGen{o: o, m: m, cycle: 1, ch: 1, flat: o.Flatfield(1), dark: o.Darkfield(1)}
	g.prepare()
	k := 31 // a central tile
	oy, ox := g.pos[k].Y, g.pos[k].X
	buf := &tileBuffers{bg: make([]float32, o.TileH*o.TileW), scene: make([]float32, o.TileH*o.TileW), raw: raster.NewGray16(o.TileW, o.TileH), sc: newScratch(o.TileH, o.TileW)}
	g.m.mask.region(buf.bg, oy, ox, o.TileH, o.TileW, 40, 250, buf.sc.cj, buf.sc.cw)
	for _, z := range []int{o.RefZ() - 1, 0} {
		b.Run(map[bool]string{true: "refz", false: "z1"}[z != 0], func(b *testing.B) {
			for range b.N {
				copy(buf.scene, buf.bg)
				g.idx.addBlobs(buf.scene, oy, ox, o.TileH, o.TileW, float64(z), false, buf.sc)
				g.expose(buf.raw.Pix, buf.scene, k, z)
			}
		})
	}
	b.Run("expose", func(b *testing.B) {
		for range b.N {
			g.expose(buf.raw.Pix, buf.scene, k, 0)
		}
	})
}

// TestPlaneCostFigures prints the thread CPU time of rendering and exposing
// one production tile (a central one) in every plane: run with
// SYNTH_FIGURES=1 go test -run PlaneCost -v. CPU time, unlike wall time, is
// not inflated by other load on the machine. No assertion.
func TestPlaneCostFigures(t *testing.T) {
	if os.Getenv("SYNTH_FIGURES") == "" {
		t.Skip("set SYNTH_FIGURES=1 to print figures")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	o, _ := Preset("production")
	o.OutDir = t.TempDir()
	c0 := cpu()
	m := newTissueModel(o)
	g := &channelGen{o: o, m: m, cycle: 1, ch: 1, flat: o.Flatfield(1), dark: o.Darkfield(1)}
	g.prepare()
	t.Logf("model and blob index: %v CPU (%d cells, %d texels, %d blobs)", cpu()-c0, len(m.cells), len(m.texels), len(g.idx.blobs))
	buf := &tileBuffers{bg: make([]float32, o.TileH*o.TileW), scene: make([]float32, o.TileH*o.TileW), raw: raster.NewGray16(o.TileW, o.TileH), sc: newScratch(o.TileH, o.TileW)}
	for _, k := range []int{31, 0} {
		oy, ox := g.pos[k].Y, g.pos[k].X
		var total, exp time.Duration
		line := ""
		for z := range o.NZ {
			c0 := cpu()
			g.m.mask.region(buf.bg, oy, ox, o.TileH, o.TileW, 40, 250, buf.sc.cj, buf.sc.cw)
			copy(buf.scene, buf.bg)
			g.idx.addBlobs(buf.scene, oy, ox, o.TileH, o.TileW, float64(z), false, buf.sc)
			c1 := cpu()
			g.expose(buf.raw.Pix, buf.scene, k, z)
			c2 := cpu()
			total += c2 - c0
			exp += c2 - c1
			line += fmt.Sprintf(" %d", (c2 - c0).Milliseconds())
		}
		t.Logf("tile %d, 20 planes: %v CPU (expose %v); ms per plane z=1..20:%s", k+1, total, exp, line)
	}
}
