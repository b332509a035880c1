package ometiff

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// Creator is the OME Creator attribute of the files this package writes.
const Creator = "KINTSUGI-Go ometiff"

// placeholderUUID holds the UUID's place in the layout until the tiles are
// written (every UUID has the same length, so the layout does not move).
const placeholderUUID = "urn:uuid:00000000-0000-8000-8000-000000000000"

// contentUUID returns a name-based UUID (RFC 9562 version 8: the first 16
// bytes of the contentHash digest) of the file's content, as "urn:uuid:xxxxxxxx-...":
// unique to the pixels and metadata, and the same for the same output, so a
// rerun writes a byte-identical file.
func contentUUID(sum []byte) string {
	var b [16]byte
	copy(b[:], sum)
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// attr escapes s for a double-quoted XML attribute value.
func attr(s string) string {
	var sb strings.Builder
	xml.EscapeText(&sb, []byte(s)) // escapes & < > " ' and tab/newline; cannot fail on a Builder
	return sb.String()
}

// imageName is the file's base name without its .ome.tif(f) / .tif(f) suffix.
func imageName(base string) string {
	for _, ext := range []string{".ome.tiff", ".ome.tif", ".ome.btf", ".tiff", ".tif", ".btf"} {
		if len(base) > len(ext) && strings.EqualFold(base[len(base)-len(ext):], ext) {
			return base[:len(base)-len(ext)]
		}
	}
	return base
}

// omeXML returns the OME-XML of a width x height image with the named
// channels (planes C = 0..n-1 in IFDs 0..n-1 of fileName), pixel size in µm.
func omeXML(uuid, fileName string, width, height int, names []string, pixelUM float64) string {
	var b strings.Builder
	ps := strconv.FormatFloat(pixelUM, 'g', -1, 64)
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>`)
	b.WriteString(`<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06"` +
		` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"` +
		` xsi:schemaLocation="http://www.openmicroscopy.org/Schemas/OME/2016-06 http://www.openmicroscopy.org/Schemas/OME/2016-06/ome.xsd"`)
	fmt.Fprintf(&b, ` UUID="%s" Creator="%s">`, uuid, attr(Creator))
	fmt.Fprintf(&b, `<Image ID="Image:0" Name="%s">`, attr(imageName(fileName)))
	fmt.Fprintf(&b, `<Pixels ID="Pixels:0" DimensionOrder="XYCZT" Type="uint16" SignificantBits="16"`+
		` Interleaved="false" BigEndian="false" SizeX="%d" SizeY="%d" SizeC="%d" SizeZ="1" SizeT="1"`+
		` PhysicalSizeX="%s" PhysicalSizeXUnit="µm" PhysicalSizeY="%s" PhysicalSizeYUnit="µm">`,
		width, height, len(names), ps, ps)
	for c, name := range names {
		fmt.Fprintf(&b, `<Channel ID="Channel:0:%d" Name="%s" SamplesPerPixel="1"><LightPath/></Channel>`, c, attr(name))
	}
	for c := range names {
		fmt.Fprintf(&b, `<TiffData FirstC="%d" FirstZ="0" FirstT="0" IFD="%d" PlaneCount="1">`+
			`<UUID FileName="%s">%s</UUID></TiffData>`, c, c, attr(fileName), uuid)
	}
	b.WriteString(`</Pixels></Image></OME>`)
	return b.String()
}
