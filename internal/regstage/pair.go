package regstage

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// padSize returns the padded size of two images under the padding rule.
func padSize(paths ...string) (int, int, error) {
	h, w, _, err := checkSizes([]cycleInput{{files: paths}})
	return h, w, err
}

// Pair registers one image to another (kintsugi-register pair): fixed and
// moving are uint16 TIFFs, padded to one size by the stage's rule. It
// writes into out: <moving name> (the warped moving image),
// transform.json with field_dy.tif / field_dx.tif, metrics.json and
// overlay.png, each file atomically. A registration that lowers the NCC is
// refused (ErrInput) before anything is written.
func Pair(ctx context.Context, be register.Backend, p register.Params, fixed, moving, out string) (*register.Result, error) {
	h, w, err := padSize(fixed, moving)
	if err != nil {
		return nil, err
	}
	f, err := readPadded(fixed, h, w)
	if err != nil {
		return nil, err
	}
	m, err := readPadded(moving, h, w)
	if err != nil {
		return nil, err
	}
	ref, err := register.NewReference(ctx, be, f, p)
	if err != nil {
		return nil, err
	}
	r, err := register.Register(ctx, be, ref, m, p)
	if err != nil {
		return nil, err
	}
	mt := r.Metrics
	if mt.NCCFinal < mt.NCCBefore-NCCTolerance {
		return r, staging.Inputf("%s: registration to %s makes it agree worse: NCC %.4f before, %.4f after rigid, %.4f after non-rigid; nothing written",
			moving, fixed, mt.NCCBefore, mt.NCCRigid, mt.NCCNonRigid)
	}
	warped, err := be.Warp(ctx, []*raster.Gray16{m}, &r.Mapping, h, w)
	if err != nil {
		return r, err
	}
	if err := writeGray16(filepath.Join(out, filepath.Base(moving)), warped[0]); err != nil {
		return r, err
	}
	if err := WriteTransform(out, "", r, h, w); err != nil {
		return r, err
	}
	if err := writeJSON(filepath.Join(out, "metrics.json"), struct {
		Fixed   string           `json:"fixed"`
		Moving  string           `json:"moving"`
		Metrics register.Metrics `json:"metrics"`
	}{fixed, moving, mt}); err != nil {
		return r, err
	}
	return r, writeOverlay(filepath.Join(out, "overlay.png"), overlayLevel(f, w, h), overlayLevel(warped[0], w, h))
}

// Apply re-applies a saved transform to one uint16 image (padded to the
// transform's frame by the stage's rule) and writes the result.
func Apply(ctx context.Context, be register.Backend, transform, in, out string) (*register.Mapping, error) {
	m, h, w, err := ReadTransform(transform)
	if err != nil {
		return nil, err
	}
	info, err := tiffio.ReadInfo(in)
	if err != nil {
		return nil, staging.Inputf("%w", err)
	}
	limH := max(MaxPadPx, int(MaxPadFrac*float64(h)))
	limW := max(MaxPadPx, int(MaxPadFrac*float64(w)))
	if info.Height > h || info.Width > w || h-info.Height > limH || w-info.Width > limW {
		return nil, staging.Inputf("%s is %d x %d (w x h); the transform's frame is %d x %d: outside the padding rule", in, info.Width, info.Height, w, h)
	}
	g, err := readPadded(in, h, w)
	if err != nil {
		return nil, err
	}
	o, err := be.Warp(ctx, []*raster.Gray16{g}, m, h, w)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(strings.ToLower(out), ".tif") && !strings.HasSuffix(strings.ToLower(out), ".tiff") {
		return nil, staging.Inputf("--out %s: want a .tif path", out)
	}
	if err := writeGray16(out, o[0]); err != nil {
		return nil, fmt.Errorf("write %s: %w", out, err)
	}
	return m, nil
}
