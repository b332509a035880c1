package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decon.psf_file: a relative path is resolved against the config file's
// directory; a missing file, or voxel keys without a file, are errors
// naming decon.psf_file at load.
func TestPSFFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "meta"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta", "bead.tif"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(extra string) string {
		p := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(p, []byte(minimal+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := Load(write("decon: {psf_file: meta/bead.tif, psf_voxel_xy_nm: 100, psf_center: centroid}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.PSFFilePath(), filepath.Join(dir, "meta", "bead.tif"); got != want {
		t.Errorf("PSFFilePath %q, want %q", got, want)
	}
	if xy, z := c.PSFVoxel(); xy != 100 || z != c.ZStepSize {
		t.Errorf("PSFVoxel %g, %g: want 100 and z_step_size %g", xy, z, c.ZStepSize)
	}
	abs := filepath.Join(dir, "meta", "bead.tif")
	if c, err := Load(write("decon: {psf_file: " + abs + "}\n")); err != nil || c.PSFFilePath() != abs {
		t.Errorf("absolute psf_file: %v %q", err, c.PSFFilePath())
	}
	for _, extra := range []string{
		"decon: {psf_file: meta/none.tif}\n",
		"decon: {psf_voxel_z_nm: 200}\n",
		"decon: {psf_file: meta}\n",
	} {
		_, err := Load(write(extra))
		var es Errors
		if !errors.As(err, &es) || !strings.Contains(err.Error(), "decon.psf_file") {
			t.Errorf("%s: error %v, want one naming decon.psf_file", strings.TrimSpace(extra), err)
		}
	}
	if _, err := Load(write("decon: {psf_file: meta/bead.tif, psf_center: middle}\n")); err == nil || !strings.Contains(err.Error(), "psf_center") {
		t.Errorf("psf_center middle: %v", err)
	}
}
