//go:build cuda

package gpu

import (
	"context"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Translator is the GPU align.PairTranslator. It follows align.CPU step by
// step (crops, Tukey window, both crops packed into one complex FFT, cross
// power blurred by the PCMSigma Gaussian, the align.NPeaks largest local maxima, their wrap candidates scored
// by NCC over the whole-tile overlap, hill-climb, optional sub-pixel fit),
// with all pairs of a call batched: one cuFFT Z2Z (float64, like the CPU's
// complex128) per crop shape, one peak search per pair, and every round of
// NCC evaluations (candidates, each hill-climb step, sub-pixel
// neighbourhoods) in one launch with float64 sums.
type Translator struct{ e *Engine }

const npk = 4 // = align.NPeaks, the kernels' NPK (checked at run time)

// Translate implements align.PairTranslator.
func (t *Translator) Translate(ctx context.Context, tiles []*raster.Float32, pairs []align.Pair, p align.Params) ([]align.Translation, error) {
	if err := align.CheckInputs(tiles, pairs, p); err != nil {
		return nil, err
	}
	out := make([]align.Translation, len(pairs))
	if len(pairs) == 0 {
		return out, nil
	}
	err := t.e.do(ctx, "align", func() error { return t.e.translate(ctx, tiles, pairs, p, out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pairState is one pair's search on the host.
type pairState struct {
	g      align.PairGeometry
	c      align.CropRect
	seen   map[[2]int]float64
	y, x   int
	v      float64
	found  bool
	active bool
}

// translate runs on the engine goroutine: the tiles uploaded once, then
// the phase of every search (peaks, candidates, hill-climb, sub-pixel
// neighbourhood) for all pairs together.
func (e *Engine) translate(ctx context.Context, tiles []*raster.Float32, pairs []align.Pair, p align.Params, out []align.Translation) error {
	if npk != align.NPeaks {
		panic("gpu: kernels/align.cu NPK differs from align.NPeaks; update both")
	}
	h, w := tiles[0].H, tiles[0].W
	plane := int64(h) * int64(w)
	e.op = "upload tiles"
	T := e.alloc(int64(len(tiles)) * plane * 4)
	defer e.release(T)
	segs := make([]hostSeg, len(tiles))
	for i, t := range tiles {
		segs[i] = hostSeg{host: unsafe.Pointer(&t.Pix[0]), dev: T + cu.DevicePtr(int64(i)*plane*4), n: plane * 4}
	}
	e.upload(segs)

	st := make([]pairState, len(pairs))
	for i, pr := range pairs {
		g := align.NewPairGeometry(h, w, pr.Dir, p.Overlap)
		st[i] = pairState{g: g, c: align.Crop(g, p), seen: map[[2]int]float64{}}
	}
	peaks, err := e.alignPeaks(ctx, T, h, w, pairs, st)
	if err != nil {
		return err
	}
	e.alignCandidates(T, h, w, pairs, st, peaks)
	if err := e.alignClimb(ctx, T, h, w, pairs, st); err != nil {
		return err
	}

	e.dropPlans() // their work areas are large; alignment runs once per cycle
	if p.Subpixel {
		var need []nccReq
		for i := range pairs {
			s := &st[i]
			if !s.found {
				continue
			}
			for ny := s.y - 1; ny <= s.y+1; ny++ {
				for nx := s.x - 1; nx <= s.x+1; nx++ {
					need = s.want(need, i, ny, nx)
				}
			}
		}
		e.scoreNCC(T, h, w, pairs, st, need)
	}

	for i := range pairs {
		s := &st[i]
		if !s.found {
			out[i] = align.Translation{DY: s.g.NomY, DX: s.g.NomX, NCC: -1}
			continue
		}
		tr := align.Translation{DY: float64(s.y), DX: float64(s.x), NCC: s.v}
		if p.Subpixel {
			tr.DY, tr.DX = s.subpixel()
		}
		out[i] = tr
	}
	return nil
}

// alignPeaks runs the phase correlation of every pair, per crop shape (in
// the order of first use) in chunks of at most 2 GiB of spectra, and
// returns each pair's peaks (raster indices into its crop's PCM).
func (e *Engine) alignPeaks(ctx context.Context, T cu.DevicePtr, h, w int, pairs []align.Pair, st []pairState) ([][]int, error) {
	groups := map[align.CropRect][]int{} // pairs by crop shape and offsets
	var order []align.CropRect
	for i := range st {
		c := st[i].c
		if _, ok := groups[c]; !ok {
			order = append(order, c)
		}
		groups[c] = append(groups[c], i)
	}
	peaks := make([][]int, len(pairs))
	for _, c := range order {
		idx := groups[c]
		const maxBytes = 2 << 30
		per := int64(c.H) * int64(c.W) * 16
		chunk := max(1, min(len(idx), int(maxBytes/per)))
		for lo := 0; lo < len(idx); lo += chunk {
			if err := checkCtx(ctx); err != nil {
				return nil, err
			}
			part := idx[lo:min(len(idx), lo+chunk)]
			pk := e.phaseCorrelate(T, h, w, c, pairs, part)
			for k, i := range part {
				peaks[i] = pk[k]
			}
		}
	}
	return peaks, nil
}

// alignCandidates scores the wrap candidates of every peak by NCC in one
// batch and starts each pair's climb at its best plausible candidate (a
// pair with none is not found).
func (e *Engine) alignCandidates(T cu.DevicePtr, h, w int, pairs []align.Pair, st []pairState, peaks [][]int) {
	e.op = "NCC candidates"
	var need []nccReq
	for i := range pairs {
		s := &st[i]
		for _, k := range peaks[i] {
			py, px := k/s.c.W, k%s.c.W
			for _, sy := range [2]int{py, py - s.c.H} {
				for _, sx := range [2]int{px, px - s.c.W} {
					need = s.want(need, i, sy+s.c.AY-s.c.BY, sx+s.c.AX-s.c.BX)
				}
			}
		}
	}
	e.scoreNCC(T, h, w, pairs, st, need)
	for i := range pairs {
		s := &st[i]
		for _, k := range peaks[i] {
			py, px := k/s.c.W, k%s.c.W
			for _, sy := range [2]int{py, py - s.c.H} {
				for _, sx := range [2]int{px, px - s.c.W} {
					dy, dx := sy+s.c.AY-s.c.BY, sx+s.c.AX-s.c.BX
					if !s.g.Plausible(dy, dx) {
						continue
					}
					v := s.seen[[2]int{dy, dx}]
					if !s.found || v > s.v {
						s.y, s.x, s.v, s.found = dy, dx, v, true
					}
				}
			}
		}
		s.active = s.found
	}
}

// alignClimb hill-climbs all pairs in lockstep (at most align.MaxClimb
// steps): score the unseen neighbours of every climbing pair, then move
// each to its best neighbour; a pair stops where no neighbour is better.
func (e *Engine) alignClimb(ctx context.Context, T cu.DevicePtr, h, w int, pairs []align.Pair, st []pairState) error {
	e.op = "NCC hill-climb"
	var need []nccReq
	for range align.MaxClimb {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		need = need[:0]
		climbing := false
		for i := range pairs {
			s := &st[i]
			if !s.active {
				continue
			}
			climbing = true
			for ny := s.y - 1; ny <= s.y+1; ny++ {
				for nx := s.x - 1; nx <= s.x+1; nx++ {
					if ny != s.y || nx != s.x {
						need = s.want(need, i, ny, nx)
					}
				}
			}
		}
		if !climbing {
			break
		}
		e.scoreNCC(T, h, w, pairs, st, need)
		for i := range pairs {
			s := &st[i]
			if !s.active {
				continue
			}
			by, bx, bv := s.y, s.x, s.v
			for ny := s.y - 1; ny <= s.y+1; ny++ {
				for nx := s.x - 1; nx <= s.x+1; nx++ {
					if ny == s.y && nx == s.x || !s.g.Plausible(ny, nx) {
						continue
					}
					if nv := s.seen[[2]int{ny, nx}]; nv > bv {
						by, bx, bv = ny, nx, nv
					}
				}
			}
			if by == s.y && bx == s.x {
				s.active = false
				continue
			}
			s.y, s.x, s.v = by, bx, bv
		}
	}
	return nil
}

// nccReq asks for the NCC of pair i at (dy, dx).
type nccReq struct{ i, dy, dx int }

// want appends (dy, dx) of pair i to need if it is plausible, not yet
// scored and not already asked for (marked by a NaN placeholder).
func (s *pairState) want(need []nccReq, i, dy, dx int) []nccReq {
	if !s.g.Plausible(dy, dx) {
		return need
	}
	k := [2]int{dy, dx}
	if _, ok := s.seen[k]; ok {
		return need
	}
	s.seen[k] = 0 // placeholder, filled by scoreNCC
	return append(need, nccReq{i, dy, dx})
}

func (s *pairState) subpixel() (float64, float64) {
	var f [3][3]float64
	for i := -1; i <= 1; i++ {
		for j := -1; j <= 1; j++ {
			if !s.g.Plausible(s.y+i, s.x+j) {
				return float64(s.y), float64(s.x)
			}
			f[i+1][j+1] = s.seen[[2]int{s.y + i, s.x + j}]
		}
	}
	for i := range 3 {
		for j := range 3 {
			if f[i][j] > f[1][1] {
				return float64(s.y), float64(s.x)
			}
		}
	}
	oy, ox, ok := align.QuadPeak(&f)
	if !ok {
		return float64(s.y), float64(s.x)
	}
	return float64(s.y) + oy, float64(s.x) + ox
}

// scoreNCC evaluates the requested NCCs on the GPU and stores them in the
// pairs' memos.
func (e *Engine) scoreNCC(T cu.DevicePtr, h, w int, pairs []align.Pair, st []pairState, need []nccReq) {
	if len(need) == 0 {
		return
	}
	cand := make([]int32, 4*len(need))
	for k, r := range need {
		cand[4*k], cand[4*k+1], cand[4*k+2], cand[4*k+3] = int32(pairs[r.i].A), int32(pairs[r.i].B), int32(r.dy), int32(r.dx)
	}
	C := e.alloc(int64(len(cand)) * 4)
	S := e.alloc(int64(len(need)) * 5 * 8)
	put(e, C, cand)
	e.launchNccSums(dim{gx: len(need), gy: 1, gz: 1, bx: 256, by: 1, bz: 1}, S, T, C, h, w)
	sums := make([]float64, 5*len(need))
	get(e, sums, S)
	e.release(C, S)
	for k, r := range need {
		s := sums[5*k : 5*k+5]
		st[r.i].seen[[2]int{r.dy, r.dx}] = align.NCCFromSums(s[0], s[1], s[2], s[3], s[4], overlapPixels(h, w, r.dy, r.dx))
	}
}

// phaseCorrelate returns, for each pair of part (all with crop c), the
// raster indices of its PCM's largest local maxima, largest first.
func (e *Engine) phaseCorrelate(T cu.DevicePtr, h, w int, c align.CropRect, pairs []align.Pair, part []int) [][]int {
	e.op = "phase correlation"
	np := len(part)
	n := int64(c.H) * int64(c.W)
	crops := make([]int32, 6*np)
	for k, i := range part {
		pr := pairs[i]
		copy(crops[6*k:], []int32{int32(pr.A), int32(pr.B), int32(c.AY), int32(c.AX), int32(c.BY), int32(c.BX)})
	}
	CR := e.alloc(int64(len(crops)) * 4)
	WY, WX := e.alloc(int64(c.H)*8), e.alloc(int64(c.W)*8)
	LY, LX := e.alloc(int64(c.H)*8), e.alloc(int64(c.W)*8)
	MEANS := e.alloc(int64(2*np) * 8)
	Z := e.alloc(int64(np) * n * 16)
	R := e.alloc(int64(np) * n * 16)
	PK, PV := e.alloc(int64(np*npk)*4), e.alloc(int64(np*npk)*8)
	defer e.release(CR, WY, WX, LY, LX, MEANS, Z, R, PK, PV)
	put(e, CR, crops)
	put(e, WY, tukeyWindow(c.H, align.TukeyAlpha))
	put(e, WX, tukeyWindow(c.W, align.TukeyAlpha))
	put(e, LY, gaussLowPass(c.H, align.PCMSigma))
	put(e, LX, gaussLowPass(c.W, align.PCMSigma))
	e.launchCropMeans(dim{gx: np, gy: 2, gz: 1, bx: 256, by: 1, bz: 1}, MEANS, T, CR, h, w, c.H, c.W)
	gb := dim{gx: int((n + 255) / 256), gy: np, gz: 1, bx: 256, by: 1, bz: 1}
	e.launchCropPack(gb, Z, T, CR, MEANS, WY, WX, h, w, c.H, c.W)
	plan := e.plan(cufft.Z2Z, c.H, c.W, np)
	e.op = "cufft forward"
	plan.ExecZ2Z(Z, Z, cufft.FORWARD)
	e.fftDebug("cufft forward")
	e.launchCrossPower(gb, R, Z, LY, LX, c.H, c.W)
	e.op = "cufft inverse"
	plan.ExecZ2Z(R, R, cufft.INVERSE)
	e.fftDebug("cufft inverse")
	e.launchPcmPeaks(dim{gx: np, gy: 1, gz: 1, bx: 256, by: 1, bz: 1}, PK, PV, R, c.H, c.W)
	idx := make([]int32, np*npk)
	get(e, idx, PK)
	res := make([][]int, np)
	for k := range part {
		for q := range npk {
			if v := idx[k*npk+q]; v >= 0 {
				res[k] = append(res[k], int(v))
			}
		}
	}
	return res
}
