package stitch

import (
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// DefaultGPUBatch is the number of planes a GPU engine fits at once.
const DefaultGPUBatch = 8

// LoadProfile reads <prefix>_flatfield.tif (mean 1) and <prefix>_darkfield.tif
// (counts) as written by a run; the darkfield comes back normalised (/65535).
func LoadProfile(prefix string) (*basic.Profile, error) {
	flat, err := tiffio.ReadFloat32(prefix + "_flatfield.tif")
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	dark, err := tiffio.ReadFloat32(prefix + "_darkfield.tif")
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	if flat.W != dark.W || flat.H != dark.H {
		return nil, fmt.Errorf("basic profile %s: flatfield %dx%d and darkfield %dx%d differ", prefix, flat.W, flat.H, dark.W, dark.H)
	}
	for i := range dark.Pix {
		dark.Pix[i] /= 65535
	}
	return &basic.Profile{W: flat.W, H: flat.H, Flatfield: flat.Pix, Darkfield: dark.Pix}, nil
}
