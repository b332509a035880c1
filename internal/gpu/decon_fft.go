//go:build cuda

package gpu

import (
	"fmt"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
)

// The FFT convolution path: for PSFs whose direct convolution would not fit
// the shared-memory tile, or would cost more than deconFFTTaps multiply-adds
// per voxel. Each window (nz, ny, nx) of a convolution is zero-padded to
// (fz, fy, fx) = 5-smooth sizes >= window + kernel - 1, so the circular
// convolution of one 32-bit 3-D cuFFT plan pair (R2C, C2R) is the linear
// 'same' convolution with zeros outside the window, as decon.Conv, in
// float32 FFT rounding (not bit-identical: about 1e-6 of the maximum per
// convolution). Windows are limited to deconFFTMax padded elements.
const (
	deconFFTTaps = 1024    // direct convolution up to this many kernel taps
	deconFFTMax  = 1 << 28 // padded elements of one FFT window (1 GiB of float32)
)

// deconUseFFT reports whether k is convolved by FFT.
func deconUseFFT(k *psf.Kernel) bool {
	if k.NZ*k.NY*k.NX > deconFFTTaps {
		return true
	}
	if deconFixed(k) {
		return false
	}
	return deconTileFloats(k)*4 > 46<<10 || k.NZ*k.NY*k.NX > 1<<16
}

// deconFFTDims returns the padded FFT size of an (nz, ny, nx) window.
func deconFFTDims(nz, ny, nx int, k *psf.Kernel) (fz, fy, fx int) {
	return decon.Smooth5(nz + k.NZ - 1), decon.Smooth5(ny + k.NY - 1), decon.Smooth5(nx + k.NX - 1)
}

// deconFFTBytes estimates the device memory of the FFT path for a padded
// size: the real buffer, the spectrum, the two kernel spectra and the two
// plans' work areas (about one spectrum each).
func deconFFTBytes(fz, fy, fx int) int64 {
	f := int64(fz) * int64(fy) * int64(fx)
	c := int64(fz) * int64(fy) * int64(fx/2+1) * 8
	return f*4 + 5*c
}

// deconFFTRowsFor returns the most window rows whose padded FFT volume is
// at most maxElems and whose FFT memory is at most maxBytes (0: no limit).
func deconFFTRowsFor(nz, nx int, k *psf.Kernel, maxElems int64, maxBytes int64) int {
	lo, hi := 0, 1<<20
	for lo < hi {
		mid := (lo + hi + 1) / 2
		fz, fy, fx := deconFFTDims(nz, mid, nx, k)
		if int64(fz)*int64(fy)*int64(fx) <= maxElems && (maxBytes <= 0 || deconFFTBytes(fz, fy, fx) <= maxBytes) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// deconFFT holds one padded size's plans and kernel spectra (engine goroutine).
type deconFFT struct {
	fz, fy, fx int
	real, spec cu.DevicePtr
	ks, kfs    cu.DevicePtr // spectra of k and of flip(k)
	fwd, inv   cufft.Handle
	k          *psf.Kernel
}

// newDeconFFT plans the FFT convolution of windows up to (nz, ny, nx) with
// k and its flip (device copies kd, kfd), buffers from ar.
func (e *Engine) newDeconFFT(ar *devArena, nz, ny, nx int, k *psf.Kernel, kd, kfd cu.DevicePtr) (*deconFFT, error) {
	f := &deconFFT{k: k}
	f.fz, f.fy, f.fx = deconFFTDims(nz, ny, nx, k)
	total := int64(f.fz) * int64(f.fy) * int64(f.fx)
	if total >= 1<<31 {
		return nil, fmt.Errorf("decon: FFT window %dx%dx%d (z,y,x) exceeds a 32-bit cuFFT plan", f.fz, f.fy, f.fx)
	}
	nc := int64(f.fz) * int64(f.fy) * int64(f.fx/2+1)
	f.real = ar.bytes(total * 4)
	f.spec = ar.bytes(nc * 8)
	f.ks = ar.bytes(nc * 8)
	f.kfs = ar.bytes(nc * 8)
	prev := e.op
	e.op = fmt.Sprintf("cufft plan 3-D %dx%dx%d", f.fz, f.fy, f.fx)
	f.fwd = cufft.Plan3d(f.fz, f.fy, f.fx, cufft.R2C)
	f.fwd.SetStream(e.compute)
	f.inv = cufft.Plan3d(f.fz, f.fy, f.fx, cufft.C2R)
	f.inv.SetStream(e.compute)
	e.op = prev
	e.sample()
	for _, kk := range []struct{ src, dst cu.DevicePtr }{{kd, f.ks}, {kfd, f.kfs}} {
		e.launchDeconFftPlace(grid1(total), f.real, kk.src, k.NZ, k.NY, k.NX, f.fz, f.fy, f.fx)
		f.fwd.ExecR2C(f.real, kk.dst)
		e.fftDebug("cufft kernel spectrum")
	}
	return f, nil
}

// destroy frees the plans (the buffers belong to the arena).
func (f *deconFFT) destroy() {
	if f == nil {
		return
	}
	f.fwd.Destroy()
	f.inv.Destroy()
}

// conv runs dst = conv(src, k or flip(k)) on an (nz, ny, nx) window with
// decon_conv's epilogue modes 0, 1 and 2.
func (e *Engine) deconFFTConv(f *deconFFT, flipped bool, dst, src cu.DevicePtr, nz, ny, nx, mode int, aux cu.DevicePtr) {
	total := int64(f.fz) * int64(f.fy) * int64(f.fx)
	nc := int64(f.fz) * int64(f.fy) * int64(f.fx/2+1)
	ks := f.ks
	if flipped {
		ks = f.kfs
	}
	e.launchDeconFftPlace(grid1(total), f.real, src, nz, ny, nx, f.fz, f.fy, f.fx)
	prev := e.op
	e.op = "cufft R2C"
	f.fwd.ExecR2C(f.real, f.spec)
	e.fftDebug("cufft R2C")
	e.op = prev
	e.launchDeconFftMul(grid1(nc), f.spec, ks, float32(1/float64(total)), nc)
	e.op = "cufft C2R"
	f.inv.ExecC2R(f.spec, f.real)
	e.fftDebug("cufft C2R")
	e.op = prev
	e.launchDeconFftTake(grid1(int64(nz)*int64(ny)*int64(nx)), dst, f.real, nz, ny, nx, f.fy, f.fx,
		f.k.NZ/2, f.k.NY/2, f.k.NX/2, mode, aux, decon.Eps)
}
