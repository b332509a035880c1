package qc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
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
		s.s.BlockPx = focusBlock(w, h)
	}
	return s
}

// focusBlock is the focus map's block size for planes of w x h px.
func focusBlock(w, h int) int { return max(8, (max(w, h)+FocusMapBlocks-1)/FocusMapBlocks) }

// Add adds plane i (0-based, z order) with z-plane number z and its path
// relative to the project. g is only read.
func (s *Summarizer) Add(i, z int, file string, g *raster.Gray16) {
	st := Stats(g)
	st.File, st.Z = file, z
	var nx int
	var f []float64
	if s.s.BlockPx > 0 {
		nx, _, f = BlockFocus(g, s.s.BlockPx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s.Planes[i], s.s.Focus[i], s.s.NX = st, f, nx
	if s.proj == nil {
		s.proj = raster.NewGray16(g.W, g.H)
	}
	maxInto(s.proj, g)
	s.got++
}

// Write writes the summary and the maximum projection into dir (a channel
// directory), each atomically.
func (s *Summarizer) Write(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got != len(s.s.Planes) {
		return fmt.Errorf("qc summary of %s: %d of %d planes added", dir, s.got, len(s.s.Planes))
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
