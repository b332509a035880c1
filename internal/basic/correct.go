package basic

import "fmt"

// countScale converts uint16 counts to the stitch stage's intensity unit,
// counts/65535 (the float32 constant raster.Normalize16 multiplies by).
const countScale = float32(1.0 / 65535.0)

// CorrectGray16 is the stitch stage's correction rule, the one definition
// every engine (stitch.CPUEngine, the CUDA kernels correct_u16 and
// correct_blend_u16) must reproduce: for each pixel i, in float32,
//
//	x = float32(src[i]) * float32(1/65535)
//	dst[i] = clip((x - dark[i]) / max(flat[i], flatMin), 0, 1)
//
// with the profile's darkfield in counts/65535, a NaN result mapped to 0 and
// a NaN flatfield value taking the floor flatMin (as CUDA's fmaxf does; Go's
// max would propagate the NaN). Otherwise the operations and their order are
// those of raster.Normalize16, Transform and a clip at 1. src is one raw tile of the profile's size (H x W, x
// fastest); dst has the same length.
func CorrectGray16(dst []float32, src []uint16, prof *Profile, flatMin float32) {
	n := prof.W * prof.H
	if len(src) != n || len(dst) != n || len(prof.Flatfield) != n || len(prof.Darkfield) != n {
		panic(fmt.Sprintf("basic: CorrectGray16 size mismatch: src %d, dst %d, profile %dx%d", len(src), len(dst), prof.H, prof.W))
	}
	flat, dark := prof.Flatfield, prof.Darkfield
	for i, v := range src {
		f := flat[i]
		if !(f >= flatMin) {
			f = flatMin
		}
		r := (float32(v)*countScale - dark[i]) / f
		switch {
		case !(r > 0):
			r = 0
		case r > 1:
			r = 1
		}
		dst[i] = r
	}
}
