package register

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// levelNCCPerPixel is LevelNCC as its doc comment defines it: every
// pixel's coordinate through MovingLevelCoord, sampled by SampleLevel.
func levelNCCPerPixel(fix, mov *raster.Float32, k int, m *Mapping) float64 {
	a, b := m.Rigid.Matrix()
	var sa, sb, saa, sbb, sab, n float64
	for i := 0; i < fix.H; i++ {
		for j := 0; j < fix.W; j++ {
			qy, qx := MovingLevelCoord(a, b, m.Field, k, i, j)
			if qy < 0 || qx < 0 || qy > float64(mov.H-1) || qx > float64(mov.W-1) {
				continue
			}
			va, vb := float64(fix.Pix[i*fix.W+j]), SampleLevel(mov, qy, qx)
			sa, sb, saa, sbb, sab, n = sa+va, sb+vb, saa+va*va, sbb+vb*vb, sab+va*vb, n+1
		}
	}
	return align.NCCFromSums(sa, sb, saa, sbb, sab, n)
}

// nccCase is a level pair of size h x w (factor k) with correlated
// content, a rigid transform and a field that moves pixels in and out of
// the moving level.
func nccCase(h, w, k int, seed uint64) (fix, mov *raster.Float32, rigid, field Mapping) {
	r := rand.New(rand.NewPCG(seed, 2))
	fix, mov = raster.NewFloat32(w, h), raster.NewFloat32(w, h)
	for i := range fix.Pix {
		y, x := float64(i/w), float64(i%w)
		v := float32(math.Sin(y/7) * math.Cos(x/11))
		fix.Pix[i] = v + 0.3*r.Float32()
		mov.Pix[i] = v + 0.3*r.Float32()
	}
	step := 32.0 // full-resolution px: grids of several rows and columns even for small levels
	ny, nx := max(1, int(float64(h*k)/step)), max(1, int(float64(w*k)/step))
	f := NewField(ny, nx, 10, -5, step)
	for i := range f.DY {
		f.DY[i], f.DX[i] = r.Float32()*8-4, r.Float32()*8-4 // px
	}
	rig := Identity(h*k, w*k)
	rig.Theta, rig.TY, rig.TX = 0.01, 5.5, -3.25
	return fix, mov, Mapping{Rigid: rig}, Mapping{Rigid: rig, Field: f}
}

func TestLevelNCCMatchesPerPixel(t *testing.T) {
	for _, c := range []struct{ h, w, k int }{{97, 131, 4}, {64, 64, 1}, {50, 300, 3}, {3, 200, 2}, {40, 9, 1}} {
		fix, mov, rig, fld := nccCase(c.h, c.w, c.k, uint64(c.h))
		id := Mapping{Rigid: Identity(c.h*c.k, c.w*c.k)}
		for name, m := range map[string]Mapping{"identity": id, "rigid": rig, "field": fld} {
			want := levelNCCPerPixel(fix, mov, c.k, &m)
			got := LevelNCC(fix, mov, c.k, &m, 3)
			if again := LevelNCC(fix, mov, c.k, &m, 1); again != got {
				t.Errorf("%dx%d k%d %s: 3 workers %v, 1 worker %v", c.h, c.w, c.k, name, got, again)
			}
			if math.IsNaN(want) || math.Abs(got-want) > 1e-9 {
				t.Errorf("%dx%d k%d %s: LevelNCC %v, per pixel %v", c.h, c.w, c.k, name, got, want)
			}
		}
	}
}

func BenchmarkLevelNCC(b *testing.B) {
	h, w, k := 1874, 3169, 4
	fix, mov, rig, fld := nccCase(h, w, k, 1)
	for _, c := range []struct {
		name string
		m    Mapping
	}{{"rigid", rig}, {"field", fld}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				LevelNCC(fix, mov, k, &c.m, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(h*w), "ns/px")
		})
		b.Run(c.name+"-perpixel", func(b *testing.B) {
			for b.Loop() {
				levelNCCPerPixel(fix, mov, k, &c.m)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(h*w), "ns/px")
		})
	}
}
