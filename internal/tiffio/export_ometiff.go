package tiffio

import (
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// tagSubIFDs lists the reduced-resolution images of a page (pyramidal
// OME-TIFF keeps its sub-resolution levels there, outside the IFD chain).
const tagSubIFDs = 330

// ReadGray16SubIFDs reads the images that page (0-based index in the IFD
// chain) lists in its SubIFDs tag (330), in tag order, each of which must
// have one 16-bit unsigned sample per pixel; a page without the tag gives
// none. It is the reader of the pyramid levels package ometiff writes.
func ReadGray16SubIFDs(path string, page int) ([]*raster.Gray16, error) {
	fh, f, err := open(path)
	if err != nil {
		return nil, wrap(path, err)
	}
	defer fh.Close()
	out, err := readGray16SubIFDs(f, page)
	return out, wrap(path, err)
}

func readGray16SubIFDs(f *file, page int) ([]*raster.Gray16, error) {
	var d *ifd
	err := f.walk(func(index int, off int64) (bool, error) {
		if index < page {
			return true, nil
		}
		var err error
		d, err = f.readIFD(off, index)
		return false, err
	})
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, formatErr("page %d does not exist", page)
	}
	e := d.find(tagSubIFDs)
	if e == nil {
		return nil, nil
	}
	offs, err := f.uints(e, page)
	if err != nil {
		return nil, err
	}
	var out []*raster.Gray16
	for i, off := range offs {
		if off == 0 || off >= uint64(f.size) {
			return nil, truncErr("page %d: subifd %d at offset %d is outside the file (%d bytes)", page, i, off, f.size)
		}
		sd, err := f.readIFD(int64(off), page)
		if err != nil {
			return nil, fmt.Errorf("subifd %d: %w", i, err)
		}
		p, err := f.parsePage(sd, page, true)
		if err != nil {
			return nil, fmt.Errorf("subifd %d: %w", i, err)
		}
		if p.sf != sampleUint || p.bps != 16 {
			return nil, unsupErr("want 16-bit unsigned gray, subifd %d of page %d has %s samples", i, page, p.describeSample())
		}
		if err := f.claim(p); err != nil {
			return nil, fmt.Errorf("subifd %d: %w", i, err)
		}
		img := raster.NewGray16(p.width, p.height)
		bo := f.bo
		err = f.decodePage(p, func(y, x int, row []byte) {
			o := y*p.width + x
			toUint16(img.Pix[o:o+len(row)/2], row, bo)
		})
		if err != nil {
			return nil, fmt.Errorf("subifd %d: %w", i, err)
		}
		out = append(out, img)
	}
	return out, nil
}
