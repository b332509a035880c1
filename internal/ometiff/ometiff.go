package ometiff

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/zlib"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Channel is one plane of the image: its marker name (the OME Channel Name)
// and a loader called once; channels are loaded one at a time, in order,
// each while the channel before it is written (on another goroutine than
// Write's).
type Channel struct {
	Name string
	Load func() (*raster.Gray16, error)
	// Release, if not nil, is handed the plane Load returned once the
	// channel is written (the writer no longer touches it), for the caller
	// to reuse; otherwise the plane is left to the garbage collector.
	Release func(*raster.Gray16)
}

// Options of Write.
type Options struct {
	PixelSizeNM float64 // physical pixel size in nm (x and y); must be > 0
	TileSize    int     // tile side in px, a multiple of 16 up to MaxTileSize; 0 means 512
	Workers     int     // goroutines compressing tiles; 0 means 1
	// Level is the tiles' deflate level: Adaptive (0, the default), 1
	// (BestSpeed) to 9 (BestCompression), or HuffmanOnly.
	Level int
	// Coder, when set, does the Huffman-only coding (Adaptive,
	// HuffmanOnly) of each level's tiles at once (huffman.go; a GPU):
	// other bytes than this package's own encoder, the same pixels;
	// Adaptive's level-1 tiles stay on the CPU. Each level's coded tiles
	// are in memory at once (about 3/4 of the level's raw bytes).
	Coder Coder
}

// Deflate levels (Options.Level): those of compress/zlib, and Adaptive.
// The tiles are deflated by github.com/klauspost/compress (zlib streams as
// compress/zlib writes them, faster encoders, other bytes).
const (
	// Adaptive deflates each tile Huffman-only and, where that shrinks it
	// below a quarter of its raw bytes (runs of background, which Huffman
	// coding cannot take below an eighth), also at level 1, keeping the
	// smaller stream. On predicted 16-bit microscopy noise, LZ matches are
	// short and rare: on synthetic registration tiles (BenchmarkWrite)
	// Huffman-only gives files as small as compress/zlib's level 1 at
	// several times its speed, while this package's levels 1 to 6 give
	// larger ones (see the README's I/O section for the figures).
	Adaptive        = 0
	BestSpeed       = zlib.BestSpeed
	BestCompression = zlib.BestCompression
	HuffmanOnly     = zlib.HuffmanOnly
)

// Tile sizes.
const (
	DefaultTileSize = 512
	MaxTileSize     = 4096
)

const (
	filePerm   = 0o666
	bufferSize = 4 << 20
)

// Write writes channels as one pyramidal multi-channel OME-TIFF of
// width x height px to path (see the package documentation for the layout).
// Each channel's plane must be width x height. Nothing is left at path on
// error; ctx cancels between tiles.
func Write(ctx context.Context, path string, width, height int, channels []Channel, o Options) error {
	if err := write(ctx, path, width, height, channels, o); err != nil {
		return fmt.Errorf("ometiff %s: %w", path, err)
	}
	return nil
}

// WriterMemory is Write's working set beyond the channel's plane and its
// reduced levels, bytes, for tiles of tileSize px (0: DefaultTileSize) and
// workers goroutines: the 2·workers+1 compressed tiles in flight and the
// workers' output buffers (a deflated tile may exceed its raw bytes by a
// little), each worker's raw tile, its two zlib states (about 1 MiB each)
// and Adaptive's second output buffer, and the write buffer.
func WriterMemory(tileSize, workers int) int64 {
	if tileSize <= 0 {
		tileSize = DefaultTileSize
	}
	workers = max(1, workers)
	raw := int64(tileSize) * int64(tileSize) * 2
	bufs := int64(3*workers + 1)
	out := raw + raw/16 + 1024
	return bufs*out + int64(workers)*(raw+out+2<<20) + bufferSize
}

func check(width, height int, channels []Channel, o *Options) error {
	if width <= 0 || height <= 0 || width > math.MaxInt32 || height > math.MaxInt32 {
		return fmt.Errorf("invalid image size %dx%d", width, height)
	}
	if len(channels) == 0 {
		return errors.New("no channels")
	}
	for c, ch := range channels {
		if ch.Name == "" {
			return fmt.Errorf("channel %d has no name", c)
		}
		if ch.Load == nil {
			return fmt.Errorf("channel %d (%q) has no loader", c, ch.Name)
		}
	}
	if !(o.PixelSizeNM > 0) || math.IsInf(o.PixelSizeNM, 0) {
		return fmt.Errorf("pixel size %g nm: want a positive number", o.PixelSizeNM)
	}
	if o.TileSize == 0 {
		o.TileSize = DefaultTileSize
	}
	if o.TileSize < 16 || o.TileSize > MaxTileSize || o.TileSize%16 != 0 {
		return fmt.Errorf("tile size %d: want a multiple of 16 from 16 to %d", o.TileSize, MaxTileSize)
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Workers < 0 {
		return fmt.Errorf("workers %d: want >= 0", o.Workers)
	}
	if o.Level != Adaptive && o.Level != HuffmanOnly && (o.Level < BestSpeed || o.Level > BestCompression) {
		return fmt.Errorf("deflate level %d: want %d (adaptive), %d to %d or %d (Huffman only)", o.Level, Adaptive, BestSpeed, BestCompression, HuffmanOnly)
	}
	return nil
}

// layout returns the IFD specs (per channel: the full-resolution IFD, then
// its reduced levels) with their positions, and the offset of the first tile.
func layout(path string, width, height int, channels []Channel, o Options) ([]ifdSpec, int64) {
	names := make([]string, len(channels))
	for c, ch := range channels {
		names[c] = ch.Name
	}
	desc := omeXML(placeholderUUID, filepath.Base(path), width, height, names, o.PixelSizeNM/1000)
	levels := LevelSizes(width, height)
	specs := make([]ifdSpec, 0, len(channels)*len(levels))
	for c := range channels {
		main := len(specs)
		for k, sz := range levels {
			s := ifdSpec{w: sz[0], h: sz[1], reduced: k > 0, tileSize: o.TileSize, next: -1}
			n := s.tilesAcross() * s.tilesDown()
			s.offsets, s.counts = make([]uint64, n), make([]uint64, n)
			if k > 0 {
				specs[main].subs = append(specs[main].subs, len(specs))
			}
			specs = append(specs, s)
		}
		if c > 0 {
			specs[main-len(levels)].next = main
		}
	}
	specs[0].desc = desc
	pos := int64(bigHeaderSize)
	for i := range specs {
		specs[i].pos = pos
		pos += int64(len(specs[i].encode(specs))) // value-independent length
	}
	return specs, pos + (16-pos%16)%16
}

func write(ctx context.Context, path string, width, height int, channels []Channel, o Options) error {
	if err := check(width, height, channels, &o); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	specs, dataStart := layout(path, width, height, channels, o)
	nLevels := len(specs) / len(channels)
	return atomicfile.Write(path, filePerm, func(w io.Writer) error {
		wa, ok := w.(io.WriterAt)
		if !ok { // atomicfile hands over the temp *os.File
			return fmt.Errorf("internal error: %T is not an io.WriterAt", w)
		}
		// Everything written after the metadata block is hashed, with the
		// metadata, into the document's UUID.
		sum := newContentHash(specs[0].desc)
		hashed := io.MultiWriter(w, sum)
		bw := &tileWriter{bufio.NewWriterSize(hashed, bufferSize), hashed}
		if _, err := bw.Write(make([]byte, dataStart)); err != nil { // metadata, written last
			return err
		}
		pos := dataStart
		err := forEachLoaded(ctx, channels, width, height, nLevels, o.Workers, func(c int, imgs []*raster.Gray16) error {
			return writeChannel(ctx, bw, &pos, imgs, specs[c*nLevels:(c+1)*nLevels], o)
		})
		if err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		desc := strings.Replace(specs[0].desc, placeholderUUID, contentUUID(sum.Sum()), -1)
		if len(desc) != len(specs[0].desc) {
			panic("ometiff: the UUID changed the metadata's length")
		}
		specs[0].desc = desc
		meta := bigHeader(specs[0].pos)
		for i := range specs {
			meta = append(meta, specs[i].encode(specs)...)
		}
		if int64(len(meta)) > dataStart {
			panic("ometiff: metadata outgrew its layout")
		}
		_, err = wa.WriteAt(meta, 0)
		return err
	})
}

// forEachLoaded calls fn for each channel in order with its plane and
// reduced levels (imgs, nLevels of them), loading and downsampling the
// next channel on another goroutine while fn runs: two sets of levels
// take turns, and before a load the garbage collector runs so that the
// plane before the one fn holds is gone, not just unreferenced. It
// returns the first error of a load (wrapped with the channel) or of fn,
// once the loading goroutine has stopped.
func forEachLoaded(ctx context.Context, channels []Channel, width, height, nLevels, workers int, fn func(c int, imgs []*raster.Gray16) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type loaded struct {
		imgs []*raster.Gray16
		err  error
	}
	sets := make(chan []*raster.Gray16, 2)
	for range 2 {
		sets <- make([]*raster.Gray16, nLevels)
	}
	ready := make(chan loaded, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ready)
		for c, ch := range channels {
			var imgs []*raster.Gray16
			select {
			case imgs = <-sets:
			case <-ctx.Done():
				return
			}
			if c > 0 {
				runtime.GC()
			}
			err := loadLevels(ctx, ch, width, height, imgs, workers)
			if err != nil {
				err = fmt.Errorf("channel %d (%q): %w", c, ch.Name, err)
			}
			select {
			case ready <- loaded{imgs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	err := func() error {
		for c := range channels {
			var l loaded
			var ok bool
			select {
			case l, ok = <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			if !ok {
				return ctx.Err()
			}
			if l.err != nil {
				return l.err
			}
			if err := fn(c, l.imgs); err != nil {
				return fmt.Errorf("channel %d (%q): %w", c, channels[c].Name, err)
			}
			if rel := channels[c].Release; rel != nil {
				rel(l.imgs[0])
			}
			l.imgs[0] = nil // the plane is the loader's; the reduced levels are reused
			sets <- l.imgs
		}
		return nil
	}()
	cancel()
	<-done
	return err
}

// loadLevels loads ch into imgs[0], checks its size and makes its reduced
// levels in imgs[1:] (reusing the buffers there).
func loadLevels(ctx context.Context, ch Channel, width, height int, imgs []*raster.Gray16, workers int) error {
	img, err := ch.Load()
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	switch {
	case img == nil:
		return errors.New("loader returned no image")
	case img.W != width || img.H != height:
		return fmt.Errorf("plane is %dx%d px, the image is %dx%d", img.W, img.H, width, height)
	case len(img.Pix) != width*height:
		return fmt.Errorf("plane has %d pixels, %dx%d needs %d", len(img.Pix), width, height, width*height)
	}
	imgs[0] = img
	for k := 1; k < len(imgs); k++ {
		if imgs[k], err = downsample(ctx, imgs[k], imgs[k-1], workers); err != nil {
			return err
		}
	}
	return nil
}

// writeChannel appends the tiles of one channel's levels (imgs: the plane,
// then its reduced levels) at *pos, recording their offsets and sizes in
// levels.
func writeChannel(ctx context.Context, bw *tileWriter, pos *int64, imgs []*raster.Gray16, levels []ifdSpec, o Options) error {
	ts := levels[0].tileSize
	emit := func(level, index int, data []byte) error {
		if err := bw.tile(data); err != nil {
			return err
		}
		levels[level].offsets[index] = uint64(*pos)
		levels[level].counts[index] = uint64(len(data))
		*pos += int64(len(data))
		return nil
	}
	if o.Coder != nil && (o.Level == Adaptive || o.Level == HuffmanOnly) {
		for k, img := range imgs {
			streams, err := codedTiles(ctx, o, img, ts)
			if err != nil {
				return fmt.Errorf("level %d: %w", k, err)
			}
			for i, data := range streams {
				if err := emit(k, i, data); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// tiles of every level, in file order
	type tileRef struct{ level, index, x0, y0 int }
	var tiles []tileRef
	for k := range levels {
		s := &levels[k]
		for i := range len(s.offsets) {
			tiles = append(tiles, tileRef{k, i, i % s.tilesAcross() * s.tileSize, i / s.tilesAcross() * s.tileSize})
		}
	}
	return compressOrdered(ctx, len(tiles), o.Workers, o.Level, ts*ts*2,
		func(i int, e *tileEncoder) {
			t := tiles[i]
			e.encode(imgs[t.level], t.x0, t.y0, ts)
		},
		func(i int, data []byte) error { return emit(tiles[i].level, tiles[i].index, data) })
}

// tileWriter buffers small writes; a large tile goes to the file (and the
// hash) as it is, after what is buffered, not through a copy.
type tileWriter struct {
	*bufio.Writer
	direct io.Writer
}

// directBytes is the tile size from which tiles bypass the buffer.
const directBytes = 64 << 10

func (w *tileWriter) tile(p []byte) error {
	if len(p) < directBytes {
		_, err := w.Write(p)
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := w.direct.Write(p)
	return err
}

// codedTiles deflates every tile of img Huffman-only through o.Coder and,
// for Adaptive, replaces a tile coded below a quarter of its raw bytes by
// its level-1 stream where that is smaller (as the tile encoder does).
func codedTiles(ctx context.Context, o Options, img *raster.Gray16, ts int) ([][]byte, error) {
	streams, err := CodeTiles(ctx, o.Coder, img, ts, o.Workers)
	if err != nil || o.Level != Adaptive {
		return streams, err
	}
	across := (img.W + ts - 1) / ts
	encs := make(chan *tileEncoder, max(1, o.Workers))
	for range cap(encs) {
		encs <- newTileEncoder(BestSpeed, 2*ts*ts)
	}
	err = par.ForEach(ctx, len(streams), max(1, o.Workers), func(t int) error {
		if 4*len(streams[t]) >= 2*ts*ts {
			return nil
		}
		e := <-encs
		defer func() { encs <- e }()
		e.out = new(bytes.Buffer)
		e.encode(img, t%across*ts, t/across*ts, ts)
		if e.out.Len() < len(streams[t]) {
			streams[t] = e.out.Bytes()
		}
		return nil
	})
	return streams, err
}

// tileEncoder is one worker's scratch: the raw tile, the zlib writer of the
// level and the output buffer; for Adaptive, the level-1 writer and its
// output buffer, made on first use.
type tileEncoder struct {
	raw      []byte
	level    int
	zw       *zlib.Writer
	out      *bytes.Buffer
	lz       *zlib.Writer
	lzOut    *bytes.Buffer
	lzChosen int // tiles for which Adaptive kept level 1
}

func newTileEncoder(level, rawBytes int) *tileEncoder {
	zl := level
	if level == Adaptive {
		zl = HuffmanOnly
	}
	zw, _ := zlib.NewWriterLevel(io.Discard, zl) // check validated the level
	return &tileEncoder{raw: make([]byte, rawBytes), level: level, zw: zw}
}

// encode compresses the ts x ts tile of img at (y0, x0) into e.out: rows
// horizontally differenced (predict), then zlib at e's level.
func (e *tileEncoder) encode(img *raster.Gray16, x0, y0, ts int) {
	e.predict(img, x0, y0, ts)
	deflate(e.zw, e.out, e.raw)
	if e.level != Adaptive || 4*e.out.Len() >= len(e.raw) {
		return
	}
	if e.lz == nil {
		e.lz, _ = zlib.NewWriterLevel(io.Discard, BestSpeed)
		e.lzOut = new(bytes.Buffer)
	}
	deflate(e.lz, e.lzOut, e.raw)
	if e.lzOut.Len() < e.out.Len() {
		e.out, e.lzOut = e.lzOut, e.out
		e.lzChosen++
	}
}

// deflate writes raw to out as one zlib stream through zw.
func deflate(zw *zlib.Writer, out *bytes.Buffer, raw []byte) {
	out.Reset()
	zw.Reset(out)
	zw.Write(raw) // writes to a bytes.Buffer cannot fail
	zw.Close()
}

// predict fills e.raw with the ts x ts tile of img at (y0, x0), rows
// horizontally differenced (TIFF predictor 2 on uint16, little-endian), the
// part outside img zero before differencing.
func (e *tileEncoder) predict(img *raster.Gray16, x0, y0, ts int) {
	cols := min(ts, img.W-x0)
	for r := range ts {
		row := e.raw[2*r*ts : 2*(r+1)*ts]
		y := y0 + r
		if y >= img.H {
			clear(row)
			continue
		}
		src := img.Pix[y*img.W+x0 : y*img.W+x0+cols]
		if hostLittleEndian {
			differenceNative(unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(row))), ts), src)
		} else {
			differenceLE(row, src)
		}
	}
}

// hostLittleEndian: the host stores uint16 little-endian, as the tiles do,
// so predict writes the differences as uint16s in place.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// differenceNative writes the horizontal differences of src (then of the
// zero padding up to len(dst)) to dst in host order: dst[0] = src[0],
// dst[i] = src[i] - src[i-1]. len(src) must be in 1..len(dst).
func differenceNative(dst, src []uint16) {
	dst = dst[:len(dst):len(dst)]
	_ = dst[len(src)-1]
	dst[0] = src[0]
	for i := 1; i < len(src); i++ { // no carried dependency: src[i-1] is loaded
		dst[i] = src[i] - src[i-1]
	}
	if n := len(src); n < len(dst) {
		dst[n] = -src[n-1] // the first zero pad after the image
		clear(dst[n+1:])
	}
}

// differenceLE is differenceNative writing little-endian bytes (2 per
// sample, len(row) = 2 x the tile width) on any host.
func differenceLE(row []byte, src []uint16) {
	var prev uint16
	for i, v := range src {
		d := v - prev
		prev = v
		row[2*i] = byte(d)
		row[2*i+1] = byte(d >> 8)
	}
	if cols := len(src); 2*cols < len(row) {
		d := -prev // the first zero pad after the image
		row[2*cols] = byte(d)
		row[2*cols+1] = byte(d >> 8)
		clear(row[2*cols+2:])
	}
}

// compressOrdered runs encode(i) for i = 0..n-1 on workers goroutines, each
// with a zlib writer of the given (valid) level, and hands the results to
// emit in index order, on the calling goroutine; at most 2*workers+1
// results are in flight. It returns the first error of emit or ctx.
func compressOrdered(ctx context.Context, n, workers, level, rawBytes int, encode func(i int, e *tileEncoder), emit func(i int, data []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	window := 2*workers + 1
	tokens := make(chan struct{}, window)       // one per issued, not yet emitted index
	slots := make([]chan *bytes.Buffer, window) // result of index i in slot i % window
	for i := range slots {
		slots[i] = make(chan *bytes.Buffer, 1)
	}
	free := make(chan *bytes.Buffer, window+workers)
	for range window + workers {
		free <- new(bytes.Buffer)
	}
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		for i := range n {
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := newTileEncoder(level, rawBytes)
			for i := range jobs {
				e.out = <-free // never blocks: window+workers buffers for window results
				encode(i, e)
				slots[i%window] <- e.out
			}
		}()
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case buf := <-slots[i%window]:
			err = emit(i, buf.Bytes())
			free <- buf
			<-tokens
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	cancel()
	wg.Wait()
	return err
}
