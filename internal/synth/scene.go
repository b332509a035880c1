package synth

import (
	"math"
	"math/rand/v2"
	"sort"
)

// channelLook holds a channel's intensity levels, counts.
type channelLook struct {
	offTissue float64 // background off tissue
	tissue    float64 // autofluorescence added on tissue
	exNM      float64 // excitation wavelength, nm
	emNM      float64 // emission wavelength, nm
}

// look returns the levels of channel c (1-based). Channels beyond 4 repeat
// channels 2..4.
func look(c int) channelLook {
	looks := [4]channelLook{
		{offTissue: 40, tissue: 250, exNM: 358, emNM: 461}, // DAPI
		{offTissue: 25, tissue: 120, exNM: 753, emNM: 775}, // Cy7
		{offTissue: 35, tissue: 400, exNM: 560, emNM: 575}, // Cy3: strongest autofluorescence
		{offTissue: 30, tissue: 200, exNM: 648, emNM: 668}, // Cy5
	}
	if c <= 4 {
		return looks[c-1]
	}
	return looks[1+(c-2)%3]
}

// psfSigma is the in-focus blur of channel c, px: 0.21·λem/NA.
func (o Options) psfSigma(c int) float64 {
	return 0.21 * look(c).emNM / o.NA / o.PixelSizeNM
}

// tissueField is the tissue mask T(y, x) in [0, 1], sampled on a coarse grid
// in scene coordinates and interpolated bilinearly, so its value at a scene
// point does not depend on which region is rendered.
type tissueField struct {
	y0, x0 float64 // scene coordinates of sample (0, 0), px
	step   float64 // sample spacing, px
	ny, nx int
	v      []float32 // (ny, nx)
}

const tissueStep = 8.0

// newTissueField builds the mask over the scene extent: a sum of broad
// Gaussians thresholded at the 20th percentile (about 80 % tissue) with a soft
// edge, with the centre of the chosen empty tiles cleared.
func newTissueField(o Options, ext extent, empty []int) *tissueField {
	t := &tissueField{y0: ext.y0, x0: ext.x0, step: tissueStep}
	t.ny = int(math.Ceil((ext.y1-ext.y0)/tissueStep)) + 2
	t.nx = int(math.Ceil((ext.x1-ext.x0)/tissueStep)) + 2
	rng := stream(o.Seed, tagTissue)
	h, w := o.nominalSize()
	nterm := max(4, o.Rows*o.Cols*3/2)
	type term struct{ y, x, s2, a float64 }
	terms := make([]term, nterm)
	side := float64(min(o.TileH, o.TileW))
	for k := range terms {
		s := side * (0.4 + 0.5*rng.Float64())
		terms[k] = term{
			y: -0.1*h + 1.2*h*rng.Float64(), x: -0.1*w + 1.2*w*rng.Float64(),
			s2: 2 * s * s, a: 0.5 + 0.5*rng.Float64(),
		}
	}
	// Separable evaluation: per term, factors along y and along x.
	fy := make([]float64, t.ny)
	fx := make([]float64, t.nx)
	d := make([]float64, t.ny*t.nx)
	for _, tm := range terms {
		for i := range fy {
			dy := t.y0 + float64(i)*t.step - tm.y
			fy[i] = tm.a * math.Exp(-dy*dy/tm.s2)
		}
		for j := range fx {
			dx := t.x0 + float64(j)*t.step - tm.x
			fx[j] = math.Exp(-dx * dx / tm.s2)
		}
		for i, a := range fy {
			if a < 1e-6 {
				continue
			}
			row := d[i*t.nx : (i+1)*t.nx]
			for j, b := range fx {
				row[j] += a * b
			}
		}
	}
	// Threshold from the samples inside the nominal mosaic.
	var in []float64
	for i := 0; i < t.ny; i += 2 {
		y := t.y0 + float64(i)*t.step
		if y < 0 || y > h {
			continue
		}
		for j := 0; j < t.nx; j += 2 {
			if x := t.x0 + float64(j)*t.step; x >= 0 && x <= w {
				in = append(in, d[i*t.nx+j])
			}
		}
	}
	sort.Float64s(in)
	thr := in[len(in)/5]
	width := 0.25 * (in[len(in)*19/20] - thr)
	if !(width > 0) {
		width = 1
	}
	t.v = make([]float32, len(d))
	edge := newTissueEdge(o) // 1 everywhere without TissueCover
	for i := range t.ny {
		y := t.y0 + float64(i)*t.step
		for j := range t.nx {
			x := t.x0 + float64(j)*t.step
			m := smoothstep((d[i*t.nx+j] - thr) / width)
			if edge.on {
				m *= edge.at(y, x)
			}
			for _, k := range empty {
				r, c := SnakeRowCol(k, o.Cols)
				by := softBox(y, float64(r)*o.stepY(), float64(o.TileH))
				bx := softBox(x, float64(c)*o.stepX(), float64(o.TileW))
				m *= 1 - by*bx
			}
			t.v[i*t.nx+j] = float32(m)
		}
	}
	return t
}

// smoothstep maps (-inf, 0] to 0, [1, inf) to 1, smoothly in between.
func smoothstep(u float64) float64 {
	u = max(0, min(1, u))
	return u * u * (3 - 2*u)
}

// softBox is 1 over the central 76 % of [a, a+size] with 6 % soft edges, 0
// outside.
func softBox(v, a, size float64) float64 {
	u := (v - a) / size
	return smoothstep((u-0.06)/0.06) * smoothstep((0.94-u)/0.06)
}

// at returns T(y, x).
func (t *tissueField) at(y, x float64) float64 {
	fy := (y - t.y0) / t.step
	fx := (x - t.x0) / t.step
	i := max(0, min(t.ny-2, int(math.Floor(fy))))
	j := max(0, min(t.nx-2, int(math.Floor(fx))))
	wy := max(0, min(1, fy-float64(i)))
	wx := max(0, min(1, fx-float64(j)))
	p := t.v[i*t.nx+j:]
	q := t.v[(i+1)*t.nx+j:]
	return float64(p[0])*(1-wy)*(1-wx) + float64(p[1])*(1-wy)*wx + float64(q[0])*wy*(1-wx) + float64(q[1])*wy*wx
}

// region fills dst (h, w) with off + tis·T at scene points (oy+i, ox+j).
func (t *tissueField) region(dst []float32, oy, ox float64, h, w int, off, tis float64, cj []int32, cw []float32) {
	for j := range w {
		fx := (ox + float64(j) - t.x0) / t.step
		k := max(0, min(t.nx-2, int(math.Floor(fx))))
		cj[j] = int32(k)
		cw[j] = float32(max(0, min(1, fx-float64(k))))
	}
	for i := range h {
		fy := (oy + float64(i) - t.y0) / t.step
		k := max(0, min(t.ny-2, int(math.Floor(fy))))
		wy := float32(max(0, min(1, fy-float64(k))))
		p := t.v[k*t.nx : (k+1)*t.nx]
		q := t.v[(k+1)*t.nx : (k+2)*t.nx]
		row := dst[i*w : (i+1)*w]
		for j := range row {
			a, b := cj[j], cw[j]
			top := p[a] + (p[a+1]-p[a])*b
			bot := q[a] + (q[a+1]-q[a])*b
			row[j] = float32(off) + float32(tis)*(top+(bot-top)*wy)
		}
	}
}

// extent is the scene area that cells are placed in, px.
type extent struct{ y0, y1, x0, x1 float64 }

// sceneExtent covers every tile of every cycle with room for blur.
func (o Options) sceneExtent() extent {
	h, w := o.nominalSize()
	m := o.CycleShiftPx + 3*o.StageJitterPx + 48
	return extent{y0: -m, y1: h + m, x0: -m, x1: w + m}
}

// emptyTiles picks EmptyTiles distinct tiles on the grid border (indices in
// acquisition order).
func (o Options) emptyTiles() []int {
	var border []int
	for k := range o.Rows * o.Cols {
		r, c := SnakeRowCol(k, o.Cols)
		if r == 0 || c == 0 || r == o.Rows-1 || c == o.Cols-1 {
			border = append(border, k)
		}
	}
	rng := stream(o.Seed, tagEmpty)
	rng.Shuffle(len(border), func(i, j int) { border[i], border[j] = border[j], border[i] })
	n := min(o.EmptyTiles, len(border))
	out := append([]int(nil), border[:n]...)
	sort.Ints(out)
	return out
}

// cell is one cell of the tissue, shared by all cycles and channels.
type cell struct {
	y, x   float64 // centre, scene px
	sy, sx float32 // nucleus sigma, px
	amp    float32 // DAPI nucleus peak, counts (in focus, before psf)
	zf     float32 // focal plane, 0-based
	nchr   int8    // chromocentres
	chr    [3]struct{ dy, dx, s, a float32 }
}

// texel is one faint autofluorescence speck, in every channel.
type texel struct {
	y, x float64
	s    float32 // sigma, px
	rel  float32 // peak relative to the channel's tissue level
	zf   float32
	id   uint32
}

// tissueModel is everything about the sample that does not depend on the
// channel or cycle.
type tissueModel struct {
	o       Options
	ext     extent
	mask    *tissueField
	focus   focusSurface
	cells   []cell
	texels  []texel
	empty   []int
	blurPer float64 // defocus sigma per plane, px
}

func newTissueModel(o Options) *tissueModel {
	m := &tissueModel{o: o, ext: o.sceneExtent(), focus: newFocusSurface(o), empty: o.emptyTiles()}
	m.blurPer = o.DefocusSigmaPerPlane()
	m.mask = newTissueField(o, m.ext, m.empty)

	rng := stream(o.Seed, tagCells)
	sp := o.CellSpacingPx
	for y := m.ext.y0 + sp/2; y < m.ext.y1; y += sp {
		for x := m.ext.x0 + sp/2; x < m.ext.x1; x += sp {
			// Draw a fixed number of values per site.
			u := rng.Float64()
			jy, jx := rng.Float64()-0.5, rng.Float64()-0.5
			ey, ex := rng.Float64()-0.5, rng.Float64()-0.5
			la := rng.NormFloat64()
			nc := rng.IntN(3) + 1
			var c cell
			for k := range 3 {
				c.chr[k].dy = float32(rng.Float64() - 0.5)
				c.chr[k].dx = float32(rng.Float64() - 0.5)
				c.chr[k].s = float32(0.9 + 0.6*rng.Float64())
				c.chr[k].a = float32(0.25 + 0.35*rng.Float64())
			}
			// Uniform over the whole grid cell: no lattice peaks in the spectrum
			// (they would give phase correlation false peaks at the spacing).
			cy, cx := y+sp*jy, x+sp*jx
			if u >= 0.85*m.mask.at(cy, cx) {
				continue
			}
			c.y, c.x = cy, cx
			s := o.NucleusSigmaPx
			c.sy, c.sx = float32(s*(1+0.4*ey)), float32(s*(1+0.4*ex))
			// Log-normal brightness, median 6000 counts.
			c.amp = float32(6000 * math.Exp(0.35*la))
			c.zf = float32(m.focus.at(cy, cx))
			c.nchr = int8(nc)
			for k := range nc {
				c.chr[k].dy *= 1.4 * c.sy
				c.chr[k].dx *= 1.4 * c.sx
			}
			m.cells = append(m.cells, c)
		}
	}

	rng = stream(o.Seed, tagTexture)
	const tsp = 12.0
	for y := m.ext.y0 + tsp/2; y < m.ext.y1; y += tsp {
		for x := m.ext.x0 + tsp/2; x < m.ext.x1; x += tsp {
			u := rng.Float64()
			jy, jx := rng.Float64()-0.5, rng.Float64()-0.5
			s, a := rng.Float64(), rng.Float64()
			ty, tx := y+tsp*jy, x+tsp*jx
			if u >= 0.6*m.mask.at(ty, tx) {
				continue
			}
			m.texels = append(m.texels, texel{
				y: ty, x: tx, s: float32(1.2 + 1.3*s), rel: float32(0.1 + 0.25*a),
				zf: float32(m.focus.at(ty, tx)), id: uint32(len(m.texels)),
			})
		}
	}
	return m
}

// blob is one elliptical Gaussian of the scene: amp·exp(-dy²/2vy - dx²/2vx)
// in its focal plane zf before the channel's psf; amp may be negative (inner
// part of a ring).
type blob struct {
	y, x   float64
	vy, vx float32 // variances, px²
	amp    float32 // counts
	zf     float32 // focal plane, 0-based
}

// markerKind is how a marker channel of a cycle labels its cells.
type markerKind int

const (
	markerMembrane markerKind = iota // a ring around the nucleus
	markerCytoplasm
	markerNuclear
)

// channelBlobs returns the blobs of (cycle, channel).
func (m *tissueModel) channelBlobs(cycle, ch int) []blob {
	o := m.o
	lk := look(ch)
	var out []blob
	// Autofluorescence texture, with a per-channel brightness factor.
	for _, t := range m.texels {
		f := float64(mix64(uint64(t.id)<<8^uint64(ch))>>11) / (1 << 53)
		a := float64(t.rel) * lk.tissue * (0.5 + f)
		v := t.s * t.s
		out = append(out, blob{y: t.y, x: t.x, vy: v, vx: v, amp: float32(a), zf: t.zf})
	}
	switch {
	case ch == 1:
		scale := float32(math.Pow(0.97, float64(cycle-1))) // a little loss per cycle
		for _, c := range m.cells {
			a := c.amp * scale
			out = append(out, blob{y: c.y, x: c.x, vy: c.sy * c.sy, vx: c.sx * c.sx, amp: a, zf: c.zf})
			for k := range int(c.nchr) {
				h := c.chr[k]
				out = append(out, blob{y: c.y + float64(h.dy), x: c.x + float64(h.dx), vy: h.s * h.s, vx: h.s * h.s, amp: a * h.a, zf: c.zf})
			}
		}
	case cycle == 1 && o.BlankFirstCycle:
		// Blank: autofluorescence only.
	default:
		rng := stream(o.Seed, tagMarker, uint64(cycle), uint64(ch))
		kind := markerKind(rng.IntN(3))
		p := o.markerFraction(0.08 + 0.25*rng.Float64())
		median := 800 + 4000*rng.Float64()
		for _, c := range m.cells {
			u, la := rng.Float64(), rng.NormFloat64()
			if u >= p {
				continue
			}
			a := float32(median * math.Exp(0.5*la))
			vy, vx := c.sy*c.sy, c.sx*c.sx
			switch kind {
			case markerMembrane:
				// Outer minus inner Gaussian: non-negative, peak ≈ 0.24·amp at 1.7 sigma.
				const so, si = 1.6 * 1.6, 1.15 * 1.15
				a /= 0.24
				out = append(out,
					blob{y: c.y, x: c.x, vy: vy * so, vx: vx * so, amp: a, zf: c.zf},
					blob{y: c.y, x: c.x, vy: vy * si, vx: vx * si, amp: -a, zf: c.zf})
			case markerCytoplasm:
				out = append(out, blob{y: c.y, x: c.x, vy: vy * 2.25, vx: vx * 2.25, amp: a, zf: c.zf})
			default:
				out = append(out, blob{y: c.y, x: c.x, vy: vy * 0.9, vx: vx * 0.9, amp: a, zf: c.zf})
			}
		}
	}
	return out
}

// A rendered blob is cut where it falls below truncCounts, but at most
// truncSigmas sigmas from its centre (exp(-8) ≈ 3e-4 of the peak), and blobs
// whose peak in the plane is below truncCounts are left out: the error is
// under a quarter count, half the quantisation step, and depends only on the
// blob and the plane, so every region renders a scene point alike.
const (
	truncSigmas = 4.0
	truncCounts = 0.25
)

// blobIndex buckets blobs by centre for region queries.
type blobIndex struct {
	blobs  []blob
	bucket float64
	y0, x0 float64
	ny, nx int
	start  []int32 // CSR offsets into order, len ny*nx+1
	order  []int32
	reach  float64 // largest support radius of any blob in any plane, px
	psf2   float64 // psf variance, px²
	blur   float64 // defocus sigma per plane, px
}

const bucketSize = 64.0

func newBlobIndex(blobs []blob, ext extent, psf, blur float64, nz int) *blobIndex {
	ix := &blobIndex{blobs: blobs, bucket: bucketSize, y0: ext.y0, x0: ext.x0, psf2: psf * psf, blur: blur}
	ix.ny = int(math.Ceil((ext.y1-ext.y0)/bucketSize)) + 1
	ix.nx = int(math.Ceil((ext.x1-ext.x0)/bucketSize)) + 1
	ix.start = make([]int32, ix.ny*ix.nx+1)
	keys := make([]int32, len(blobs))
	for n, b := range blobs {
		i := max(0, min(ix.ny-1, int((b.y-ix.y0)/bucketSize)))
		j := max(0, min(ix.nx-1, int((b.x-ix.x0)/bucketSize)))
		keys[n] = int32(i*ix.nx + j)
		ix.start[keys[n]+1]++
		dz := max(float64(b.zf), float64(nz-1)-float64(b.zf))
		s2 := ix.psf2 + blur*blur*dz*dz
		ix.reach = max(ix.reach, truncSigmas*math.Sqrt(float64(max(b.vy, b.vx))+s2))
	}
	for k := 1; k < len(ix.start); k++ {
		ix.start[k] += ix.start[k-1]
	}
	ix.order = make([]int32, len(blobs))
	fill := append([]int32(nil), ix.start[:len(ix.start)-1]...)
	for n, k := range keys {
		ix.order[fill[k]] = int32(n)
		fill[k]++
	}
	return ix
}

// renderScratch holds a worker's buffers.
type renderScratch struct {
	gy, gx []float64
	gx32   []float32
	cj     []int32
	cw     []float32
}

func newScratch(h, w int) *renderScratch {
	return &renderScratch{gy: make([]float64, h), gx: make([]float64, w), gx32: make([]float32, w), cj: make([]int32, w), cw: make([]float32, w)}
}

// addBlobs adds every blob to dst (h, w), whose pixel (i, j) is the scene
// point (oy+i, ox+j), as seen in plane z (0-based); inFocus renders each blob
// in its own focal plane instead.
func (ix *blobIndex) addBlobs(dst []float32, oy, ox float64, h, w int, z float64, inFocus bool, sc *renderScratch) {
	i0 := max(0, int(math.Floor((oy-ix.reach-ix.y0)/ix.bucket)))
	i1 := min(ix.ny-1, int(math.Floor((oy+float64(h)+ix.reach-ix.y0)/ix.bucket)))
	j0 := max(0, int(math.Floor((ox-ix.reach-ix.x0)/ix.bucket)))
	j1 := min(ix.nx-1, int(math.Floor((ox+float64(w)+ix.reach-ix.x0)/ix.bucket)))
	for bi := i0; bi <= i1; bi++ {
		for _, n := range ix.order[ix.start[bi*ix.nx+j0]:ix.start[bi*ix.nx+j1+1]] {
			b := &ix.blobs[n]
			s2 := ix.psf2
			if !inFocus {
				d := ix.blur * (z - float64(b.zf))
				s2 += d * d
			}
			vy, vx := float64(b.vy)+s2, float64(b.vx)+s2
			amp := float64(b.amp) * math.Sqrt(float64(b.vy)/vy*float64(b.vx)/vx)
			if math.Abs(amp) < truncCounts {
				continue
			}
			k := min(truncSigmas, math.Sqrt(2*math.Log(math.Abs(amp)/truncCounts)))
			ya, yb, ok := span(b.y-oy, k*math.Sqrt(vy), h)
			if !ok {
				continue
			}
			xa, xb, ok := span(b.x-ox, k*math.Sqrt(vx), w)
			if !ok {
				continue
			}
			gauss(sc.gy[ya:yb+1], float64(ya)-(b.y-oy), vy)
			gauss(sc.gx[xa:xb+1], float64(xa)-(b.x-ox), vx)
			gx := sc.gx32[:xb+1-xa]
			for k, g := range sc.gx[xa : xb+1] {
				gx[k] = float32(g)
			}
			for i := ya; i <= yb; i++ {
				a := float32(amp * sc.gy[i])
				row := dst[i*w+xa : i*w+xb+1]
				row = row[:len(gx)]
				for k, g := range gx {
					row[k] += a * g
				}
			}
		}
	}
}

// span returns the index range [a, b] of pixels within r of centre c,
// clipped to [0, n).
func span(c, r float64, n int) (a, b int, ok bool) {
	a = max(0, int(math.Ceil(c-r)))
	b = min(n-1, int(math.Floor(c+r)))
	return a, b, a <= b
}

// gauss writes exp(-(d0+k)²/2v) for k = 0.. len(dst)-1, by the recurrence
// g(k+1) = g(k)·r(k), r(k+1) = r(k)·q, q = exp(-1/v).
func gauss(dst []float64, d0, v float64) {
	g := math.Exp(-d0 * d0 / (2 * v))
	r := math.Exp(-(2*d0 + 1) / (2 * v))
	q := math.Exp(-1 / v)
	for k := range dst {
		dst[k] = g
		g *= r
		r *= q
	}
}

// normal draws are taken from r; kept here so the noise source is one place.
func normal(r *rand.Rand) float64 { return r.NormFloat64() }
