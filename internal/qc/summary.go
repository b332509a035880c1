package qc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// PlaneSummary is what the QC of the stitch and decon stages reads from a
// channel's z-stack, computed where the planes are made when they are not
// written (the fused cycle with keep_intermediates: false): every plane's
// PlaneStats (File: the plane's path relative to the project, as it would
// have been written) and block focus (BlockFocus), in z order. The maximum
// over z is saved beside it (layout.QCMaxProjName). The QC's metrics and
// PNGs from a summary equal those from the planes.
type PlaneSummary struct {
	Planes  []PlaneStats `json:"planes"`
	BlockPx int          `json:"block_px"` // 0: no focus map (a single plane)
	NX      int          `json:"nx"`       // focus blocks per row
	Focus   [][]float64  `json:"block_focus"`
}

// Summarizer accumulates the PlaneSummary of one channel of n planes of
// h x w px; Add may be called from several goroutines.
type Summarizer struct {
	mu   sync.Mutex
	s    PlaneSummary
	proj *raster.Gray16
	got  int
}

// NewSummarizer starts a channel's summary: n planes of h x w px.
func NewSummarizer(n, h, w int) *Summarizer {
	s := &Summarizer{s: PlaneSummary{Planes: make([]PlaneStats, n), Focus: make([][]float64, n)}}
	if n > 1 {
		s.s.BlockPx = Block(w, h)
	}
	return s
}

// Add adds plane i (0-based, z order) with z-plane number z and its path
// relative to the project, measured here (planestats.Of); g is only read.
func (s *Summarizer) Add(i, z int, file string, g *raster.Gray16) {
	s.AddMeasure(i, z, file, planestats.Of(g, Block(g.W, g.H)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proj == nil {
		s.proj = raster.NewGray16(g.W, g.H)
	}
	planestats.MaxInto(s.proj, g)
}

// Block is the block size, px, of the measures Summarizer.AddMeasure takes
// for planes of w x h px (the focus map's).
func Block(w, h int) int { return max(8, (max(w, h)+FocusMapBlocks-1)/FocusMapBlocks) }

// AddMeasure adds plane i (0-based, z order) from its measure, made in
// blocks of Block px (on the host or on the device); the maximum
// projection is then set by SetMaxProjection.
func (s *Summarizer) AddMeasure(i, z int, file string, m *planestats.Measure) {
	st := StatsOf(m)
	st.File, st.Z = file, z
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s.BlockPx > 0 {
		s.s.Focus[i], s.s.NX = m.BlockFocus(), m.NX
	}
	s.s.Planes[i] = st
	s.got++
}

// SetMaxProjection sets the channel's maximum over z (when the planes are
// measured where Add does not see them); proj is kept.
func (s *Summarizer) SetMaxProjection(proj *raster.Gray16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proj = proj
}

// Write writes the summary and the maximum projection into dir (a channel
// directory), each atomically.
func (s *Summarizer) Write(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got != len(s.s.Planes) || s.proj == nil {
		return fmt.Errorf("qc summary of %s: %d of %d planes added (maximum projection set: %t)", dir, s.got, len(s.s.Planes), s.proj != nil)
	}
	b, err := json.Marshal(s.s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, layout.QCPlanesName), b, 0o666); err != nil {
		return err
	}
	return tiffio.WriteGray16(filepath.Join(dir, layout.QCMaxProjName), s.proj)
}

// readSummary reads a channel directory's PlaneSummary and maximum
// projection.
func readSummary(dir string) (*PlaneSummary, *raster.Gray16, error) {
	path := filepath.Join(dir, layout.QCPlanesName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	sum := &PlaneSummary{}
	if err := json.Unmarshal(b, sum); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInput, path, err)
	}
	if len(sum.Planes) == 0 || len(sum.Focus) != len(sum.Planes) {
		return nil, nil, fmt.Errorf("%w: %s: %d planes, %d focus rows", ErrInput, path, len(sum.Planes), len(sum.Focus))
	}
	proj, err := read(filepath.Join(dir, layout.QCMaxProjName))
	if err != nil {
		return nil, nil, err
	}
	return sum, proj, nil
}
