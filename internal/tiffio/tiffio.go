package tiffio

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
)

// Info describes the first page of a file; Pages counts the IFD chain.
type Info struct {
	Width, Height   int // pixels
	BitsPerSample   int
	SampleFormat    int // 1 unsigned, 2 signed, 3 float
	SamplesPerPixel int
	Pages           int
	BigTIFF         bool
}

// decodeLimit caps the decoded bytes of one read call (every page it
// decodes, SubIFDs included); SetDecodeLimit sets it.
var decodeLimit atomic.Int64

func init() { decodeLimit.Store(16 << 30) }

// SetDecodeLimit caps the decoded size (bytes) of every later read call: a
// file whose headers claim more is refused before anything is allocated.
// The executables set it to the machine's memory at start and to their
// memory budget once it is known; bytes <= 0 leaves the limit alone. It
// returns a function that restores the previous limit.
func SetDecodeLimit(bytes int64) (restore func()) {
	if bytes <= 0 {
		return func() {}
	}
	prev := decodeLimit.Swap(bytes)
	return func() { decodeLimit.Store(prev) }
}

// DecodeLimit is the current per-read decode cap in bytes.
func DecodeLimit() int64 { return decodeLimit.Load() }

// open opens path and parses its header; the caller closes the file. Only
// regular files are opened (package safefile: a FIFO, device or directory
// is refused before the open, and the open does not block).
func open(path string) (*os.File, *file, error) {
	fh, st, err := safefile.Open(path)
	if err != nil {
		if errors.Is(err, safefile.ErrNotRegular) {
			err = fmt.Errorf("%w: %w", ErrNotRegular, err)
		}
		return nil, nil, err
	}
	f, err := openTIFF(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	return fh, f, nil
}

// claim reserves p's decoded size against the read's decode limit and its
// chunks' bytes against the file's size, before p's image is allocated. The
// chunks a read decodes cannot together span more bytes than the file has:
// more means they overlap (strips or pages sharing one payload), which
// would let a small file decode to an arbitrary size.
func (f *file) claim(p *page) error {
	f.decoded += p.imageBytes
	lim := decodeLimit.Load()
	if f.decoded > lim {
		return unsupErr("page %d: decoding %d bytes (%dx%d %d-bit) exceeds this process's limit of %d bytes (its memory budget)",
			p.index, f.decoded, p.width, p.height, p.bps, lim)
	}
	if need := p.chunkNeed(0); need > lim {
		return unsupErr("page %d: one %s decodes to %d bytes, over this process's limit of %d bytes", p.index, p.chunkKind(), need, lim)
	}
	for i := range p.chunksAcross * p.chunksDown {
		n := uint64(p.chunkNeed(i))
		if p.compression != compNone {
			n = p.counts[i]
		}
		f.spanned += n
		if f.spanned > uint64(f.size) {
			return formatErr("%ss of page %d claim more bytes than the file's %d: chunks overlap (shared payload)", p.chunkKind(), p.index, f.size)
		}
	}
	return nil
}

// onePage counts the IFD chain and refuses more than one page where one
// plane is expected.
func (f *file) onePage() error {
	n := 0
	err := f.walk(func(page int, off int64) (bool, error) {
		n = page + 1
		return n < 2, nil
	})
	if err != nil {
		return err
	}
	if n > 1 {
		info, err := readInfo(f)
		if err == nil {
			n = info.Pages
		}
		return formatErr("file has %d pages, one plane expected", n)
	}
	return nil
}

func wrap(path string, err error) error {
	if err == nil {
		return nil
	}
	if pe, ok := err.(*os.PathError); ok && pe.Path == path {
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err) // avoid naming the path twice
	}
	return fmt.Errorf("tiff %s: %w", path, err)
}

// ReadInfo reads the first page's description and counts the pages, reading
// only the IFDs.
func ReadInfo(path string) (Info, error) {
	fh, f, err := open(path)
	if err != nil {
		return Info{}, wrap(path, err)
	}
	defer fh.Close()
	info, err := readInfo(f)
	return info, wrap(path, err)
}

func readInfo(f *file) (Info, error) {
	d, err := f.readIFD(f.first, 0)
	if err != nil {
		return Info{}, err
	}
	p, err := f.parsePage(d, 0, false)
	if err != nil {
		return Info{}, err
	}
	info := Info{Width: p.width, Height: p.height, BitsPerSample: p.bps, SampleFormat: p.sf,
		SamplesPerPixel: p.spp, BigTIFF: f.big}
	err = f.walk(func(page int, off int64) (bool, error) {
		info.Pages = page + 1
		return true, nil
	})
	return info, err
}

// eachPage parses and hands every page (all, or only the first) to fn.
func (f *file) eachPage(all bool, fn func(p *page) error) error {
	return f.walk(func(index int, off int64) (bool, error) {
		p, err := f.pageAt(off, index)
		if err != nil {
			return false, err
		}
		return all, fn(p)
	})
}

// pageAt reads and parses the IFD of page index at file offset off.
func (f *file) pageAt(off int64, index int) (*page, error) {
	d, err := f.readIFD(off, index)
	if err != nil {
		return nil, err
	}
	return f.parsePage(d, index, true)
}

func readGray16(f *file, all bool) ([]*raster.Gray16, error) {
	return readGray16To(f, all, nil)
}

// readGray16To is readGray16 decoding the first page into dst when dst is
// its size (decodeGray16 writes every pixel).
func readGray16To(f *file, all bool, dst *raster.Gray16) ([]*raster.Gray16, error) {
	var out []*raster.Gray16
	err := f.eachPage(all, func(p *page) error {
		if p.sf != sampleUint || p.bps != 16 {
			return unsupErr("want 16-bit unsigned gray, page %d has %s samples", p.index, p.describeSample())
		}
		if err := f.claim(p); err != nil {
			return err
		}
		img := dst
		if len(out) > 0 || img == nil || img.W != p.width || img.H != p.height || len(img.Pix) != p.width*p.height {
			img = raster.NewGray16(p.width, p.height)
		}
		if err := f.decodeGray16(p, img.Pix); err != nil {
			return err
		}
		out = append(out, img)
		return nil
	})
	return out, err
}

func readFloat32(f *file, all bool) ([]*raster.Float32, error) {
	var out []*raster.Float32
	err := f.eachPage(all, func(p *page) error {
		kind, _ := sampleKind(p.sf, p.bps) // checked by parsePage
		if err := f.claim(p); err != nil {
			return err
		}
		img := raster.NewFloat32(p.width, p.height)
		if err := f.decodeFloat32(p, kind, img.Pix); err != nil {
			return err
		}
		out = append(out, img)
		return nil
	})
	return out, err
}

func readPath[T any](path string, read func(*file, bool) ([]T, error), all bool) ([]T, error) {
	fh, f, err := open(path)
	if err != nil {
		return nil, wrap(path, err)
	}
	defer fh.Close()
	if !all {
		if err := f.onePage(); err != nil {
			return nil, wrap(path, err)
		}
	}
	out, err := read(f, all)
	if err != nil {
		return nil, wrap(path, err)
	}
	return out, nil
}

// ReadGray16 reads a one-page file (a file of more pages is refused, naming
// the count), which must have one 16-bit unsigned sample per pixel.
func ReadGray16(path string) (*raster.Gray16, error) {
	pages, err := readPath(path, readGray16, false)
	if err != nil {
		return nil, err
	}
	return pages[0], nil
}

// ReadGray16Into is ReadGray16 into dst when the page is dst's size (every
// pixel overwritten: dst may come from memory that is not zeroed), else into
// a new plane; it returns the plane that holds the pixels.
func ReadGray16Into(path string, dst *raster.Gray16) (*raster.Gray16, error) {
	pages, err := readPath(path, func(f *file, all bool) ([]*raster.Gray16, error) {
		return readGray16To(f, all, dst)
	}, false)
	if err != nil {
		return nil, err
	}
	return pages[0], nil
}

// ReadFloat32 reads a one-page file as float32: float pages as stored,
// integer pages converted to float counts (no rescaling).
func ReadFloat32(path string) (*raster.Float32, error) {
	pages, err := readPath(path, readFloat32, false)
	if err != nil {
		return nil, err
	}
	return pages[0], nil
}

// ReadGray16Pages reads every page (a multi-page stack, index n = page).
func ReadGray16Pages(path string) ([]*raster.Gray16, error) {
	return readPath(path, readGray16, true)
}

// ReadFloat32Pages reads every page as float32, like ReadFloat32.
func ReadFloat32Pages(path string) ([]*raster.Float32, error) {
	return readPath(path, readFloat32, true)
}

func checkImage(path string, i, w, h, n int, nilImg bool) error {
	switch {
	case nilImg:
		return fmt.Errorf("tiff %s: page %d is nil", path, i)
	case w <= 0 || h <= 0 || w > maxDim || h > maxDim:
		return fmt.Errorf("tiff %s: page %d has invalid size %dx%d", path, i, w, h)
	case n != w*h:
		return fmt.Errorf("tiff %s: page %d has %d pixels, %dx%d needs %d", path, i, n, w, h, w*h)
	}
	return nil
}

// WriteGray16 writes img as a one-page uint16 TIFF, atomically.
func WriteGray16(path string, img *raster.Gray16) error {
	return WriteGray16Pages(path, []*raster.Gray16{img})
}

// WriteFloat32 writes img as a one-page float32 TIFF, atomically.
func WriteFloat32(path string, img *raster.Float32) error {
	return WriteFloat32Pages(path, []*raster.Float32{img})
}

// WriteGray16Pages writes a multi-page uint16 TIFF, one page per plane.
func WriteGray16Pages(path string, pages []*raster.Gray16) error {
	return writeGray16Pages(path, pages, writeOptions{})
}

// WriteFloat32Pages writes a multi-page float32 TIFF, one page per plane.
func WriteFloat32Pages(path string, pages []*raster.Float32) error {
	return writeFloat32Pages(path, pages, writeOptions{})
}

func writeGray16Pages(path string, pages []*raster.Gray16, o writeOptions) error {
	return writePlanes(path, pages, o, func(g *raster.Gray16) (int, int, []uint16) { return g.W, g.H, g.Pix }, gray16Page)
}

func writeFloat32Pages(path string, pages []*raster.Float32, o writeOptions) error {
	return writePlanes(path, pages, o, func(g *raster.Float32) (int, int, []float32) { return g.W, g.H, g.Pix }, float32Page)
}

// writePlanes writes planes as the pages of one TIFF (writePages), each
// made by page from the width, height and pixels that plane gives; a nil
// plane, or one whose size is invalid or not its pixel count, is refused
// (checkImage) before anything is written.
func writePlanes[P any, T uint16 | float32](path string, planes []*P, o writeOptions, plane func(*P) (w, h int, pix []T), page func(w, h int, pix []T) outPage) error {
	out := make([]outPage, len(planes))
	for i, g := range planes {
		if g == nil {
			return checkImage(path, i, 0, 0, 0, true)
		}
		w, h, pix := plane(g)
		if err := checkImage(path, i, w, h, len(pix), false); err != nil {
			return err
		}
		out[i] = page(w, h, pix)
	}
	return writePages(path, out, o)
}
