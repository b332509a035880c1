package regstage

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// MarkersName is the MCMICRO marker table written beside the OME-TIFF.
const MarkersName = "markers.csv"

// MarkersHeader is markers.csv's header: MCMICRO's required columns
// (channel_number, cycle_number, marker_name) and the ones its background
// subtraction module (SchapiroLabor/Background_subtraction) reads.
var MarkersHeader = []string{"channel_number", "cycle_number", "marker_name", "background", "exposure", "remove"}

// Marker is one channel of registered.ome.tif and one row of markers.csv.
type Marker struct {
	Number  int    // 1-based channel index in the OME-TIFF (MCMICRO channel_number)
	Cycle   int    // cycle number (MCMICRO cycle_number)
	Channel int    // the config's channel number; 0 for an image the config does not name
	File    string // registered/cycNN/<File>
	Name    string // OME-XML Channel Name and marker_name, unique in the file
	// Background is the marker_name of the blank (autofluorescence)
	// channel acquired in the same imaging channel, "" when there is
	// none; Remove marks the blank channels themselves (backsub's
	// remove = TRUE). Exposure is not known to the config: left empty.
	Background string
	Remove     bool
}

// IsBlank reports whether a marker name is a blank (autofluorescence)
// channel: it starts with "blank" in any case (Blank, Blank_1a, BLANK2).
func IsBlank(name string) bool {
	return len(name) >= 5 && strings.EqualFold(name[:5], "blank")
}

// Markers lists the OME-TIFF's channels: cycle by cycle in the config's
// cycle order, each cycle's channels in the config's channel order (the
// image cfg.EDFFileName(cycle, ch), whose name without .tif is the marker
// name), then any other image of the cycle in name order. files are the
// registered images of each cycle (base names). A name that still occurs
// in several cycles (a config whose names were not made unique) gets
// "_cycNN". Each non-blank, non-DAPI marker's background is the first
// blank acquired in the same channel number, in cycle order.
func Markers(cfg *config.Config, files map[int][]string) []Marker {
	var list []Marker
	for _, c := range cfg.Cycles {
		have := files[c]
		used := map[string]bool{}
		for _, ch := range cfg.Channels {
			f := cfg.EDFFileName(c, ch)
			if slices.Contains(have, f) && !used[f] {
				used[f] = true
				list = append(list, Marker{Cycle: c, Channel: ch, File: f})
			}
		}
		rest := slices.Clone(have)
		slices.Sort(rest)
		for _, f := range rest {
			if !used[f] {
				used[f] = true
				list = append(list, Marker{Cycle: c, File: f})
			}
		}
	}
	count := map[string]int{}
	for _, m := range list {
		count[marker(m.File)]++
	}
	blankOf := map[int]string{} // channel number -> first blank's name
	for i := range list {
		m := &list[i]
		m.Number = i + 1
		m.Name = marker(m.File)
		if count[m.Name] > 1 {
			m.Name += "_" + layout.CycleName(m.Cycle)
		}
		if IsBlank(m.Name) {
			m.Remove = true
			if _, ok := blankOf[m.Channel]; !ok && m.Channel > 0 {
				blankOf[m.Channel] = m.Name
			}
		}
	}
	for i := range list {
		m := &list[i]
		if !m.Remove && m.Channel > 0 && !config.IsDAPI(m.Name) {
			m.Background = blankOf[m.Channel]
		}
	}
	return list
}

// MarkersCSV is markers.csv's content: MarkersHeader, then one row per
// marker; remove is "TRUE" or empty, exposure empty.
func MarkersCSV(list []Marker) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(MarkersHeader)
	for _, m := range list {
		rm := ""
		if m.Remove {
			rm = "TRUE"
		}
		w.Write([]string{strconv.Itoa(m.Number), strconv.Itoa(m.Cycle), m.Name, m.Background, "", rm})
	}
	w.Flush() // a bytes.Buffer cannot fail
	return b.Bytes()
}

func writeMarkers(path string, list []Marker) error {
	if err := atomicfile.WriteBytes(path, MarkersCSV(list), 0o666); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
