// Package tiffio reads and writes single-channel TIFF images and multi-page
// stacks as raster.Gray16 (uint16 detector counts) and raster.Float32 planes.
//
// Planes are indexed (y, x), stacks (n, y, x) with n the page (IFD) index in
// file order; memory is row-major with x fastest, exactly as in package
// raster. Pixel values are never rescaled: ReadFloat32 of a uint16 page
// returns counts as floats (0..65535).
//
// Reading accepts classic TIFF and BigTIFF, either byte order, strips or
// tiles, compression none (1), LZW (5), Deflate (8, 32946) and PackBits
// (32773), predictor none (1), horizontal (2) and floating point (3). Only
// one sample per pixel is decoded; sample types are unsigned 8/16/32-bit,
// signed 16/32-bit and float 32/64-bit (ReadGray16 wants 16-bit unsigned).
// The file is read with positioned reads: opening a page walks the IFD chain
// and reads that page's strips or tiles only (ReadInfo reads only IFDs).
// Every page in the chain counts, reduced-resolution ones included. Sizes
// from the header are checked before anything is allocated: chunks must lie
// inside the file and compressed chunks cannot claim more than their
// compression's maximum ratio; one page may decode to at most 16 GiB, and
// one read call to at most DecodeLimit (the executables set it to their
// memory budget, else the machine's memory). The chunks one read decodes may
// not together span more bytes than the file has (strips or pages sharing
// one payload are refused), so a small file cannot decode to a large one.
// Sparse chunks (byte count 0) are treated as corrupt. Only regular files
// are read: a FIFO, device, socket or directory is refused (ErrNotRegular)
// before it is opened, and the open does not block. ReadGray16 and
// ReadFloat32 read one plane and refuse a file of more pages, naming the
// count; the *Pages readers read stacks.
//
// Writing produces little-endian, uncompressed, stripped TIFF (BitsPerSample
// 16 with SampleFormat 1, or 32 with SampleFormat 3; Photometric
// BlackIsZero; PlanarConfig 1; strips of about 512 KiB; each page's IFD
// just before its pixels), switching to BigTIFF when the file would exceed
// 4 GiB - 1 MiB. Writes are atomic (package atomicfile): temp file in the
// same directory, fsync, rename, directory fsync; mode 0666 under the umask
// (what creat(2) gives: 0644 under umask 022, 0664 under 002).
//
// Errors name the file ("tiff <path>: ...") and wrap ErrFormat (the file is
// not valid TIFF; ErrTruncated is a kind of it) or ErrUnsupported (valid but
// uses a feature or pixel type this package does not handle).
package tiffio
