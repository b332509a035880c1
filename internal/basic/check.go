package basic

import (
	"fmt"
	"math"
)

// Bounds on a profile read from files (stitch correct --profiles), so that
// a corrupt or hand-made profile is an error naming the file instead of an
// image of zeros with exit 0. BaSiC's flatfield has mean 1 and is positive;
// its darkfield is an offset in counts, within the uint16 range.
const (
	MaxFlatfield     = 100.0 // a flatfield value, dimensionless (mean 1)
	MinFlatfieldMean = 0.25
	MaxFlatfieldMean = 4.0
	MaxDarkCounts    = 65535.0 // |darkfield|, counts
)

// CheckFlatfield checks a flatfield read from file: every value finite and
// in (0, MaxFlatfield], mean in [MinFlatfieldMean, MaxFlatfieldMean]. The
// error names file and the first bad pixel (y, x).
func CheckFlatfield(file string, v []float32, w int) error {
	var sum float64
	for i, f := range v {
		x := float64(f)
		if math.IsNaN(x) || math.IsInf(x, 0) || !(x > 0) || x > MaxFlatfield {
			return fmt.Errorf("flatfield %s: pixel (%d, %d) is %v: want a finite value in (0, %g] (BaSiC's flatfield is positive, mean 1)", file, i/w, i%w, f, MaxFlatfield)
		}
		sum += x
	}
	if n := len(v); n > 0 {
		if m := sum / float64(n); m < MinFlatfieldMean || m > MaxFlatfieldMean {
			return fmt.Errorf("flatfield %s: mean %.4g: want [%g, %g] (BaSiC's flatfield has mean 1)", file, m, MinFlatfieldMean, MaxFlatfieldMean)
		}
	}
	return nil
}

// CheckDarkfield checks a darkfield in counts read from file: every value
// finite with |value| <= MaxDarkCounts. The error names file and the first
// bad pixel (y, x).
func CheckDarkfield(file string, v []float32, w int) error {
	for i, d := range v {
		x := float64(d)
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > MaxDarkCounts {
			return fmt.Errorf("darkfield %s: pixel (%d, %d) is %v: want a finite offset within +-%g counts", file, i/w, i%w, d, MaxDarkCounts)
		}
	}
	return nil
}
