package config

// Channel names: the checks every marker name passes and the original's rule
// that makes duplicate names unique. They run when a config is loaded (Parse),
// before any stage does work, so every executable, the Snakefile (through
// `kintsugi-config check`) and every output name (EDF files, registered
// files, OME-TIFF channels, QC, validate) see the same names.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// MaxFileNameBytes bounds a channel's output file name (the marker's file
// stem plus ".tif"): NAME_MAX of Linux file systems.
const MaxFileNameBytes = 255

// nameSymbols are the characters other than letters, digits, marks, ' ' and
// '/' (both become '_' in file names) that a marker name may contain.
const nameSymbols = "-_.+()[]#%=@~^"

// Rename is one channel name that the duplicate rule changed.
type Rename struct {
	Cycle   int    `json:"cycle"`
	Channel int    `json:"channel"` // 1-based position in channel_names.<cycle>
	From    string `json:"from"`
	To      string `json:"to"`
}

// FileStem is the file name stem of a marker name, as the original's
// get_edf_filename makes it: '/' and ' ' become '_'.
func FileStem(name string) string { return strings.NewReplacer("/", "_", " ", "_").Replace(name) }

// nameKey is what two names are compared by: the file stem, case-folded (the
// original compares names upper-cased; file systems of some clients ignore
// case).
func nameKey(name string) string { return strings.ToUpper(FileStem(name)) }

// IsDAPI reports whether a marker name is a DAPI channel (starts with "DAPI",
// any case), as the original decides it.
func IsDAPI(name string) bool { return strings.HasPrefix(strings.ToUpper(name), "DAPI") }

// CheckName returns why name cannot be a marker name, or nil. A name is
// non-empty UTF-8 without leading or trailing white space and has only
// letters, digits, marks, ' ', '/' and the symbols -_.+()[]#%=@~^; it does
// not start with '.' (a hidden file). Its length is checked by
// CheckFileName, after the duplicate rule.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name")
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("name %q has leading or trailing white space", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("name %q starts with '.' (its files would be hidden)", name)
	}
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || r == ' ' || r == '/' || strings.ContainsRune(nameSymbols, r) {
			continue
		}
		return fmt.Errorf("name %q has the character %q: allowed are letters, digits, ' ', '/' (both become '_' in file names) and %s", name, r, nameSymbols)
	}
	return nil
}

// CheckFileName returns an error when the output file name of a marker name
// (its file stem plus ".tif") is longer than MaxFileNameBytes.
func CheckFileName(name string) error {
	if n := len(FileStem(name)) + len(".tif"); n > MaxFileNameBytes {
		return fmt.Errorf("name %.40q... gives a file name of %d bytes: at most %d", name, n, MaxFileNameBytes)
	}
	return nil
}

// UniqueNames applies the original's rule (KINTSUGI cli.py
// _load_channel_names_lightweight, Kio.make_channel_names_unique) to the
// marker names of every cycle (cycle -> names in channel order) and returns
// the new names and what changed, in cycle and channel order:
//
//   - a non-DAPI name that occurs more than once over all cycles (compared
//     by FileStem, ignoring case) becomes "<name>_<cycle><letter>" at every
//     occurrence, the first included; the letter is that of the channel:
//     channel 2 a, channel 3 b, ... (after z: aa, ab, ...). Channel 1, which
//     the original assumes is DAPI, gets no letter: the original gave it "a"
//     as well, the same name as channel 2 of that cycle (fixed);
//   - a DAPI name (IsDAPI) in a cycle > 1 becomes "DAPI_cyc<NN>". With
//     dapiAlways (the original's CHANNELNAMES.txt reader, used when a config
//     is generated) that happens to every such name; without it (the config
//     loader) only to a DAPI name that occurs more than once, so DAPI-02 of
//     a hand-written config keeps its name.
//
// Names that are already unique are kept, so applying the rule to its own
// result changes nothing.
func UniqueNames(names map[int][]string, dapiAlways bool) (map[int][]string, []Rename) {
	count := map[string]int{}
	for _, ns := range names {
		for _, n := range ns {
			count[nameKey(n)]++
		}
	}
	cycles := sortedCycles(names)
	out := make(map[int][]string, len(names))
	var renamed []Rename
	for _, c := range cycles {
		ns := make([]string, len(names[c]))
		for i, n := range names[c] {
			to := n
			switch dup := count[nameKey(n)] > 1; {
			case IsDAPI(n):
				if c > 1 && (dup || dapiAlways) {
					to = "DAPI_" + layout.CycleName(c)
				}
			case dup:
				to = n + "_" + strconv.Itoa(c) + channelLetter(i)
			}
			ns[i] = to
			if to != n {
				renamed = append(renamed, Rename{Cycle: c, Channel: i + 1, From: n, To: to})
			}
		}
		out[c] = ns
	}
	return out, renamed
}

// channelLetter is the suffix letter of the channel at 0-based index i: ""
// for channel 1, then a, b, ..., z, aa, ab, ...
func channelLetter(i int) string {
	s := ""
	for n := i - 1; n >= 0; n = n/26 - 1 {
		s = string(rune('a'+n%26)) + s
	}
	return s
}

// RenamedText renders the renames on one line, for one log record.
func RenamedText(rs []Rename) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("channel_names.%d[%d] %s -> %s", r.Cycle, r.Channel-1, r.From, r.To)
	}
	return strings.Join(parts, "; ")
}

// resolveChannelNames checks every name of channel_names, applies the
// duplicate rule (UniqueNames without dapiAlways), stores the result in
// c.ChannelNames and what changed in c.Renamed, and checks the result:
// every output file name fits MaxFileNameBytes and no two channels of any
// cycles end with the same name. Keys are channel_names.<cycle>[i], i
// 0-based.
func (c *Config) resolveChannelNames() Errors {
	var errs Errors
	add := func(cycle string, i int, format string, args ...any) {
		errs = append(errs, &Error{File: c.Path, Key: fmt.Sprintf("channel_names.%s[%d]", cycle, i), Msg: fmt.Sprintf(format, args...)})
	}
	byCycle := map[int][]string{}
	for k, names := range c.ChannelNames {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			continue // check() reports the key
		}
		if strconv.Itoa(n) != k {
			errs = append(errs, &Error{File: c.Path, Key: "channel_names." + k, Msg: fmt.Sprintf("cycle key %q: write it as %d (the stages look the names up by the cycle number)", k, n)})
			continue
		}
		for i, name := range names {
			if err := CheckName(name); err != nil {
				add(k, i, "channel %d of cycle %d: %v", i+1, n, err)
			}
		}
		byCycle[n] = names
	}
	if len(errs) > 0 {
		return errs
	}
	resolved, renamed := UniqueNames(byCycle, false)
	for _, cy := range sortedCycles(resolved) {
		k := strconv.Itoa(cy)
		for i, name := range resolved[cy] {
			if err := CheckFileName(name); err != nil {
				add(k, i, "channel %d of cycle %d: %v", i+1, cy, err)
			}
		}
		c.ChannelNames[k] = resolved[cy]
	}
	for _, d := range FindDuplicates(resolved) {
		add(strconv.Itoa(d.Cycle), d.Index, "channel %d of cycle %d is named %q after the duplicate rule, as channel_names.%d[%d] (%q): %s",
			d.Index+1, d.Cycle, resolved[d.Cycle][d.Index], d.FirstCycle, d.FirstIndex, resolved[d.FirstCycle][d.FirstIndex], UniqueHint)
	}
	c.Renamed = renamed
	return errs
}

// UniqueHint says what FindDuplicates compares.
const UniqueHint = "rename one (marker names must be unique over all cycles, ignoring case, '/' and ' ' counting as '_')"

// Duplicate is a name equal to an earlier one (FindDuplicates); indices are
// 0-based channel positions.
type Duplicate struct {
	Cycle, Index           int
	FirstCycle, FirstIndex int
}

// FindDuplicates lists every name (in cycle, then channel order) that equals
// an earlier one by FileStem, ignoring case: what the duplicate rule leaves
// is checked with it.
func FindDuplicates(names map[int][]string) []Duplicate {
	type at struct{ cycle, i int }
	seen := map[string]at{}
	var out []Duplicate
	for _, cy := range sortedCycles(names) {
		for i, name := range names[cy] {
			key := nameKey(name)
			if prev, dup := seen[key]; dup {
				out = append(out, Duplicate{cy, i, prev.cycle, prev.i})
				continue
			}
			seen[key] = at{cy, i}
		}
	}
	return out
}

func sortedCycles(names map[int][]string) []int {
	cycles := make([]int, 0, len(names))
	for c := range names {
		cycles = append(cycles, c)
	}
	sort.Ints(cycles)
	return cycles
}

// NameReport is what `kintsugi-config check` prints (the Snakefile reads it):
// the resolved names of every cycle of channel_names in config order, the
// EDF file name of every channel (config order) of every cycle of cycles,
// and every rename. Renamed is [] (not null) when nothing changed.
type NameReport struct {
	ChannelNames map[string][]string `json:"channel_names"`
	EDFFiles     map[string][]string `json:"edf_files"`
	Renamed      []Rename            `json:"renamed"`
}

// Names returns the config's NameReport.
func (c *Config) Names() NameReport {
	r := NameReport{ChannelNames: map[string][]string{}, EDFFiles: map[string][]string{}, Renamed: append([]Rename{}, c.Renamed...)}
	for k, ns := range c.ChannelNames {
		r.ChannelNames[k] = append([]string{}, ns...)
	}
	for _, cy := range c.Cycles {
		files := make([]string, 0, len(c.Channels))
		for _, ch := range c.Channels {
			files = append(files, c.EDFFileName(cy, ch))
		}
		r.EDFFiles[strconv.Itoa(cy)] = files
	}
	return r
}
