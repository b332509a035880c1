package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// MeasuredPSF are the decon keys of a measured PSF (a bead z-stack) used
// instead of decon.psf_model.
type MeasuredPSF struct {
	PSFFile    string  `json:"psf_file"`        // multi-page TIFF (z, y, x); "" = use psf_model
	PSFVoxelXY float64 `json:"psf_voxel_xy_nm"` // nm; 0 = xy_pixel_size
	PSFVoxelZ  float64 `json:"psf_voxel_z_nm"`  // nm; 0 = z_step_size
	PSFCenter  string  `json:"psf_center"`      // "maximum" ("" too) or "centroid"
}

// PSFFilePath is decon.psf_file resolved: a relative path is taken
// relative to the directory of the config file (so a config and the PSF
// beside it move together, and every job finds it whatever its working
// directory); "" when no file is set.
func (c *Config) PSFFilePath() string {
	f := c.Decon.PSFFile
	if f == "" || filepath.IsAbs(f) {
		return f
	}
	return filepath.Join(filepath.Dir(c.Path), f)
}

// PSFVoxel returns the lateral and axial voxel size of decon.psf_file in nm
// (the data's xy_pixel_size and z_step_size unless set).
func (c *Config) PSFVoxel() (xy, z float64) {
	xy, z = c.Decon.PSFVoxelXY, c.Decon.PSFVoxelZ
	if xy == 0 {
		xy = c.XYPixelSize
	}
	if z == 0 {
		z = c.ZStepSize
	}
	return xy, z
}

// checkPSFFile checks, when decon.psf_file is set, that it names a regular
// file (its content is checked by the deconvolution stage before any work)
// and that the voxel-size keys are not set without it.
func (c *Config) checkPSFFile() Errors {
	m := c.Decon.MeasuredPSF
	if m.PSFFile == "" {
		if m.PSFVoxelXY != 0 || m.PSFVoxelZ != 0 || m.PSFCenter != "" {
			return Errors{{File: c.Path, Key: "decon.psf_file", Msg: "not set, but psf_voxel_xy_nm, psf_voxel_z_nm or psf_center is: set psf_file to the measured PSF, or remove them"}}
		}
		return nil
	}
	p := c.PSFFilePath()
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return Errors{{File: c.Path, Key: "decon.psf_file", Msg: fmt.Sprintf("%s: %v (a relative path is relative to the config file's directory)", p, err)}}
	case !fi.Mode().IsRegular():
		return Errors{{File: c.Path, Key: "decon.psf_file", Msg: fmt.Sprintf("%s is not a regular file", p)}}
	}
	return nil
}
