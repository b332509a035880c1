package stitch

import (
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// DefaultGPUBatch is the number of planes a GPU engine fits at once.
const DefaultGPUBatch = 8

// DefaultFusedGPUBatch is DefaultGPUBatch of the fused cycle
// (kintsugi-cycle), whose sink deconvolves a channel once its last plane is
// blended: smaller batches (at a channel's end: channelBatch) hand that
// plane over sooner, at the cost of more fits, which run beside the
// deconvolution (README: 12.7 s instead of 13.8 s per production cycle
// without intermediates, 13.5 s instead of 14.5 s with them; H200).
const DefaultFusedGPUBatch = 4

// LoadProfile reads <prefix>_flatfield.tif (mean 1) and <prefix>_darkfield.tif
// (counts) as written by a run, for tiles of w x h px; the darkfield comes
// back normalised (/65535). Every value is checked (basic.CheckFlatfield,
// CheckDarkfield) and both must be w x h; errors name the file.
func LoadProfile(prefix string, w, h int) (*basic.Profile, error) {
	flatPath, darkPath := prefix+"_flatfield.tif", prefix+"_darkfield.tif"
	flat, err := tiffio.ReadFloat32(flatPath)
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	dark, err := tiffio.ReadFloat32(darkPath)
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	for _, c := range []struct {
		path string
		w, h int
	}{{flatPath, flat.W, flat.H}, {darkPath, dark.W, dark.H}} {
		if c.w != w || c.h != h {
			return nil, fmt.Errorf("basic profile %s is %dx%d, the tiles are %dx%d (w x h)", c.path, c.w, c.h, w, h)
		}
	}
	if err := basic.CheckFlatfield(flatPath, flat.Pix, flat.W); err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	if err := basic.CheckDarkfield(darkPath, dark.Pix, dark.W); err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	for i := range dark.Pix {
		dark.Pix[i] /= 65535
	}
	return &basic.Profile{W: flat.W, H: flat.H, Flatfield: flat.Pix, Darkfield: dark.Pix}, nil
}
