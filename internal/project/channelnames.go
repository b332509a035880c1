package project

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// ChannelNameFiles are the names the original looks for in meta/, in order
// (cli.py _load_channel_names_lightweight).
var ChannelNameFiles = []string{"CHANNELNAMES.txt", "channelnames.txt", "channel_names.txt", "channel_names.csv", "channels.txt", "markers.txt"}

// ChannelNames is a CHANNELNAMES file read and made unique.
type ChannelNames struct {
	Path    string
	Form    string           // "one name per line" or "one cycle per line"
	Raw     map[int][]string // cycle -> names as written
	Names   map[int][]string // after the original's duplicate rule (config.UniqueNames, DAPI of cycles > 1 always DAPI_cycNN)
	Lines   map[int][]int    // cycle -> 1-based line of each name
	Renamed []config.Rename
}

// FindChannelNames returns the first of ChannelNameFiles in metaDir, or "".
func FindChannelNames(metaDir string) string {
	for _, n := range ChannelNameFiles {
		p := filepath.Join(metaDir, n)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// dapiNumber reads the cycle number of a DAPI line such as DAPI-01, DAPI_2,
// DAPI 3, DAPI04 or DAPI_cyc05.
var dapiNumber = regexp.MustCompile(`(?i)^DAPI[-_ ]?(?:cyc)?0*(\d{1,3})$`)

// ReadChannelNames reads a CHANNELNAMES file in either of the original's
// forms. Blank lines and lines starting with '#' are skipped.
//
//   - One cycle per line (chosen when the first line has ':' or a tab, or
//     starts with a number followed by two or more commas): "1: DAPI, Blank,
//     Blank, Blank", "1<TAB>DAPI<TAB>Blank..." or "1,DAPI,Blank,...".
//   - One name per line: a cycle starts at each DAPI line (its number from
//     DAPI-01, DAPI_2, DAPI03, DAPI_cyc04; a bare DAPI is the next cycle)
//     and has channelsPerCycle names. A file without DAPI lines is cut into
//     cycles of channelsPerCycle names.
//
// The original skipped lines it could not read, dropped names before the
// first DAPI line, did not see DAPI_cyc02 as a cycle start, and silently
// overwrote a cycle that had more names than channels; each of these is an
// error here naming the file and line. Every name must pass
// config.CheckName, and every cycle must have channelsPerCycle names. Then
// the original's duplicate rule applies (config.UniqueNames with DAPI of
// cycles > 1 always renamed, as the original writes its config).
func ReadChannelNames(path string, channelsPerCycle int) (*ChannelNames, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	lines := nameLines(data)
	if len(lines) == 0 {
		return nil, fmt.Errorf("%s: no channel names (only blank or comment lines)", path)
	}
	cn := &ChannelNames{Path: path, Raw: map[int][]string{}, Lines: map[int][]int{}}
	first := lines[0].text
	comma := strings.Split(first, ",")
	if strings.Contains(first, ":") || strings.Contains(first, "\t") || (len(comma) > 2 && isDigits(strings.TrimSpace(comma[0]))) {
		err = cn.readPerCycle(lines)
	} else {
		err = cn.readPerName(lines, channelsPerCycle)
	}
	if err != nil {
		return nil, err
	}
	if err := cn.check(channelsPerCycle); err != nil {
		return nil, err
	}
	return cn, nil
}

// nameLine is one line of a channel-names file that holds names.
type nameLine struct {
	n    int // 1-based line number
	text string
}

// nameLines are the lines of a channel-names file, trimmed, without blank
// and comment (#) lines and a byte-order mark.
func nameLines(data []byte) []nameLine {
	var lines []nameLine
	for i, l := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		t := strings.TrimSpace(strings.TrimPrefix(l, "\ufeff"))
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		lines = append(lines, nameLine{i + 1, t})
	}
	return lines
}

// add appends a name of cycle read at line ln.
func (cn *ChannelNames) add(cycle int, name string, ln int) {
	cn.Raw[cycle] = append(cn.Raw[cycle], name)
	cn.Lines[cycle] = append(cn.Lines[cycle], ln)
}

// readPerCycle reads the "<cycle>: name, name, ..." form (also tab- or
// comma-separated after the cycle number).
func (cn *ChannelNames) readPerCycle(lines []nameLine) error {
	cn.Form = "one cycle per line"
	for _, l := range lines {
		var head string
		var names []string
		switch {
		case strings.Contains(l.text, ":"):
			h, rest, _ := strings.Cut(l.text, ":")
			head, names = h, strings.Split(rest, ",")
		case strings.Contains(l.text, "\t"):
			f := strings.Split(l.text, "\t")
			head, names = f[0], f[1:]
		default:
			f := strings.Split(l.text, ",")
			head, names = f[0], f[1:]
		}
		cycle, err := strconv.Atoi(strings.TrimSpace(head))
		if err != nil || cycle < 1 || cycle > 999 {
			return fmt.Errorf("%s: line %d: %q: want \"<cycle>: name, name, ...\" with a cycle number 1-999", cn.Path, l.n, l.text)
		}
		if _, dup := cn.Raw[cycle]; dup {
			return fmt.Errorf("%s: line %d: cycle %d listed twice (first at line %d)", cn.Path, l.n, cycle, cn.Lines[cycle][0])
		}
		for _, n := range names {
			cn.add(cycle, strings.TrimSpace(n), l.n)
		}
	}
	return nil
}

// readPerName reads the one-name-per-line form: a cycle starts at each DAPI
// line (a number in it, dapiNumber, gives the cycle), or every channelsPerCycle
// names when no line is DAPI.
func (cn *ChannelNames) readPerName(lines []nameLine, channelsPerCycle int) error {
	cn.Form = "one name per line"
	if channelsPerCycle < 1 {
		return fmt.Errorf("%s: one name per line needs the channels per cycle (experiment.json channels_per_cycle or numChannels)", cn.Path)
	}
	anyDAPI := false
	for _, l := range lines {
		anyDAPI = anyDAPI || config.IsDAPI(l.text)
	}
	cycle := 0
	for _, l := range lines {
		switch {
		case !anyDAPI:
			if len(cn.Raw[cycle]) == channelsPerCycle || cycle == 0 {
				cycle++
			}
		case config.IsDAPI(l.text):
			next := cycle + 1
			if m := dapiNumber.FindStringSubmatch(l.text); m != nil {
				next, _ = strconv.Atoi(m[1])
			}
			if next <= cycle {
				return fmt.Errorf("%s: line %d: %q starts cycle %d after cycle %d: cycles must increase", cn.Path, l.n, l.text, next, cycle)
			}
			if next < 1 {
				return fmt.Errorf("%s: line %d: %q: cycle %d: cycles start at 1", cn.Path, l.n, l.text, next)
			}
			cycle = next
		case cycle == 0:
			return fmt.Errorf("%s: line %d: %q comes before the first DAPI line: every cycle starts with its DAPI channel", cn.Path, l.n, l.text)
		}
		if len(cn.Raw[cycle]) == channelsPerCycle {
			return fmt.Errorf("%s: line %d: %q: cycle %d already has %d names (channels per cycle): a cycle starts at a DAPI line", cn.Path, l.n, l.text, cycle, channelsPerCycle)
		}
		cn.add(cycle, l.text, l.n)
	}
	return nil
}

// check checks every name (config.CheckName), the names per cycle, then
// applies the original's duplicate rule and checks the file names it gives.
func (cn *ChannelNames) check(channelsPerCycle int) error {
	cycles := make([]int, 0, len(cn.Raw))
	for c := range cn.Raw {
		cycles = append(cycles, c)
	}
	sort.Ints(cycles)
	for _, c := range cycles {
		for i, n := range cn.Raw[c] {
			if err := config.CheckName(n); err != nil {
				return fmt.Errorf("%s: line %d: cycle %d channel %d: %w", cn.Path, cn.Lines[c][i], c, i+1, err)
			}
		}
		if len(cn.Raw[c]) != channelsPerCycle {
			return fmt.Errorf("%s: line %d: cycle %d has %d names, want %d (one per channel; channels per cycle from experiment.json or the raw tiles)",
				cn.Path, cn.Lines[c][0], c, len(cn.Raw[c]), channelsPerCycle)
		}
	}
	cn.Names, cn.Renamed = config.UniqueNames(cn.Raw, true)
	for _, c := range cycles {
		for i, n := range cn.Names[c] {
			if err := config.CheckFileName(n); err != nil {
				return fmt.Errorf("%s: line %d: cycle %d channel %d: %w", cn.Path, cn.Lines[c][i], c, i+1, err)
			}
		}
	}
	if d := config.FindDuplicates(cn.Names); len(d) > 0 {
		c, i := d[0].Cycle, d[0].Index
		return fmt.Errorf("%s: line %d: cycle %d channel %d (%q) is named %q after the duplicate rule, as cycle %d channel %d (line %d): %s",
			cn.Path, cn.Lines[c][i], c, i+1, cn.Raw[c][i], cn.Names[c][i], d[0].FirstCycle, d[0].FirstIndex+1, cn.Lines[d[0].FirstCycle][d[0].FirstIndex], config.UniqueHint)
	}
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
