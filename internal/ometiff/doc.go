// Package ometiff writes one multi-channel, pyramidal OME-TIFF: the layout
// QuPath, napari (tifffile), Bio-Formats and MCMICRO read.
//
// # File layout
//
// Little-endian BigTIFF. Every IFD and every out-of-line tag value comes
// first, right after the 16-byte header, so a reader finds all metadata in
// the first few hundred KiB; the tiles follow, channel by channel, each
// channel's levels from full to lowest resolution, tiles row-major.
//
//   - One full-resolution IFD per channel, in channel order, chained through
//     the next-IFD offsets (IFD c is plane C=c). Each has NewSubfileType 0,
//     one 16-bit unsigned sample per pixel (SampleFormat 1, BlackIsZero,
//     PlanarConfiguration 1), TileWidth = TileLength = Options.TileSize
//     (512 by default) with edge tiles zero-padded to the full tile size,
//     Compression 8 (Deflate, zlib stream) with Predictor 2 (horizontal
//     differencing of uint16 within each tile row), and a SubIFDs tag (330,
//     type IFD8) listing its reduced levels. The tiles are deflated by
//     github.com/klauspost/compress at Options.Level: by default (Adaptive)
//     Huffman-only, and at level 1 where that codes a tile below a quarter
//     of its raw size and level 1 is smaller.
//   - With Options.Coder (a GPU, found by the registration stage on its
//     backend; CPUCoder is its reference) the Huffman-only tiles are coded
//     a level at once through the coder instead (huffman.go, CodeTiles):
//     each tile's predicted bytes in blocks of CodeBlock (32 KiB), each
//     block one deflate block with the code fitted to its bytes, or stored
//     where that is smaller; Adaptive's level-1 tiles as above. The same
//     pixels and tags, other tile bytes than the encoder's (the files are
//     the same for every Coder).
//   - The reduced levels are IFDs outside the chain (next offset 0) with
//     NewSubfileType 1 and the same tags otherwise. Level k+1 is the 2x2 mean
//     of level k (Downsample): size ceil(w/2) x ceil(h/2), an odd last
//     column or row averaged over the pixels that exist, rounded half up.
//     Levels are made while the previous level's longer side is >= 1024 px,
//     so the last level is the first whose longer side is < 1024 px
//     (LevelSizes); an image already below that has no SubIFDs.
//   - The first IFD's ImageDescription holds the OME-XML (2016-06 schema):
//     one Image with Pixels DimensionOrder XYCZT, Type uint16, SizeC = number
//     of channels, SizeZ = SizeT = 1, PhysicalSizeX/Y in micrometres
//     (Options.PixelSizeNM / 1000, unit "µm"); one Channel
//     (ID "Channel:0:c", Name, SamplesPerPixel 1) per channel; one TiffData
//     per channel (FirstC c, IFD c, PlaneCount 1) whose UUID element names
//     the file (FileName is the base name) with the document's UUID, as
//     Bio-Formats writes it; OME UUID="urn:uuid:<v8: SHA-256 of the metadata and of a CRC-32C of every MiB of the data>" and Creator.
//
// # Memory and concurrency
//
// Channels are loaded one at a time (Channel.Load), each with its pyramid
// made while the channel before it is compressed, so that the workers do
// not wait for reading and downsampling: at most two channels' planes and
// two sets of reduced levels (about 1/3 of a plane each, reused from
// channel to channel) are in memory, plus about 3 x Workers tiles being
// compressed or waiting to be written and a 4 MiB write buffer. Before
// each load after the first, the garbage collector runs, so that the plane
// written before the one being compressed is gone, not just unreferenced.
// Tiles are compressed by Options.Workers goroutines (every tile of the
// channel's levels is one job; up to 2 x Workers + 1 are in flight while
// the calling goroutine hashes and writes the finished ones in file order),
// so the output is byte-identical for any worker count and on a rerun (the
// UUID is a hash of the content; each tile's encoding depends only on its
// pixels and the level).
//
// The file is written through a temp file in the destination directory and
// renamed into place (package atomicfile); any error, cancellation included,
// leaves no file (and an existing file at the destination untouched).
//
// Images are indexed (y, x), row-major with x fastest (package raster);
// values are uint16 counts, never rescaled.
package ometiff
