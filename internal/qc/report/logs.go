package report

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LogLine is one parsed line of a stage log (the executables' text format,
// `2026-12-01 19:38:03 INF message key=value ...`, or their JSON format).
type LogLine struct {
	Time  time.Time
	Level string // INF, WRN, ERR, DBG
	Msg   string
	Attrs map[string]string
}

// StageLog is what the report takes from one log under slurm/logs/snakemake/.
type StageLog struct {
	File     string  `json:"file"`               // base name, e.g. stitch_cyc01.log
	Rule     string  `json:"rule"`               // stitch, decon, edf, registration, qc_stitch, ...
	Cycle    int     `json:"cycle,omitempty"`    // 0 for project-wide rules
	Seconds  float64 `json:"seconds"`            // last minus first time stamp
	PeakMiB  float64 `json:"peak_mib,omitempty"` // "peak host memory" vmhwm_mib; 0 when not logged
	Warnings []LogLine
	Errors   []LogLine
	Lines    []LogLine
}

var (
	textLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (DBG|INF|WRN|ERR) (.*)$`)
	attrKey  = regexp.MustCompile(`(?:^| )([A-Za-z_][A-Za-z0-9_.]*)=`)
	logName  = regexp.MustCompile(`^([a-z_]+?)(?:_cyc(\d+))?\.log$`)
)

// parseText splits `message k=v k2="quoted v" ...` into the message and attributes.
func parseText(rest string) (string, map[string]string) {
	attrs := map[string]string{}
	locs := attrKey.FindAllStringSubmatchIndex(rest, -1)
	if len(locs) == 0 {
		return strings.TrimSpace(rest), attrs
	}
	msg := strings.TrimSpace(rest[:locs[0][0]])
	for i, l := range locs {
		key := rest[l[2]:l[3]]
		vs := l[1]
		ve := len(rest)
		if i+1 < len(locs) {
			ve = locs[i+1][0]
		}
		v := strings.TrimSpace(rest[vs:ve])
		if len(v) >= 2 && v[0] == '"' {
			// A quoted value may contain " k=" text: re-scan to its closing quote.
			if u, err := strconv.QuotedPrefix(rest[vs:]); err == nil {
				uq, _ := strconv.Unquote(u)
				attrs[key] = uq
				// skip keys inside the quoted value
				end := vs + len(u)
				for i+1 < len(locs) && locs[i+1][0] < end {
					locs = append(locs[:i+1], locs[i+2:]...)
				}
				continue
			}
		}
		attrs[key] = v
	}
	return msg, attrs
}

func parseLine(s string) (LogLine, bool) {
	if strings.HasPrefix(s, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) != nil {
			return LogLine{}, false
		}
		l := LogLine{Attrs: map[string]string{}}
		for k, v := range m {
			var sv string
			switch x := v.(type) {
			case string:
				sv = x
			default:
				b, _ := json.Marshal(x)
				sv = string(b)
			}
			switch k {
			case "time":
				l.Time, _ = time.Parse(time.RFC3339Nano, sv)
			case "level":
				l.Level = map[string]string{"DEBUG": "DBG", "INFO": "INF", "WARN": "WRN", "ERROR": "ERR"}[sv]
			case "msg":
				l.Msg = sv
			default:
				l.Attrs[k] = sv
			}
		}
		return l, l.Level != ""
	}
	m := textLine.FindStringSubmatch(s)
	if m == nil {
		return LogLine{}, false
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05", m[1][:19], time.Local)
	if err != nil {
		return LogLine{}, false
	}
	msg, attrs := parseText(m[3])
	return LogLine{Time: t, Level: m[2], Msg: msg, Attrs: attrs}, true
}

// ReadLogs parses every *.log in dir (missing dir: no logs).
func ReadLogs(dir string) ([]StageLog, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []StageLog
	for _, e := range ents {
		m := logName.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil {
			continue
		}
		if m[1] == "qc_report" {
			continue // this command's own log, being written
		}
		sl := StageLog{File: e.Name(), Rule: m[1]}
		if m[2] != "" {
			sl.Cycle, _ = strconv.Atoi(m[2])
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l, ok := parseLine(sc.Text())
			if !ok {
				continue
			}
			sl.Lines = append(sl.Lines, l)
			switch l.Level {
			case "WRN":
				sl.Warnings = append(sl.Warnings, l)
			case "ERR":
				sl.Errors = append(sl.Errors, l)
			}
			if l.Msg == "peak host memory" {
				if v, err := strconv.ParseFloat(l.Attrs["vmhwm_mib"], 64); err == nil {
					sl.PeakMiB = max(sl.PeakMiB, v)
				}
			}
		}
		f.Close()
		if len(sl.Lines) > 1 {
			sl.Seconds = sl.Lines[len(sl.Lines)-1].Time.Sub(sl.Lines[0].Time).Seconds()
		}
		out = append(out, sl)
	}
	sort.Slice(out, func(i, k int) bool {
		ri, rk := ruleOrder(out[i].Rule), ruleOrder(out[k].Rule)
		if ri != rk {
			return ri < rk
		}
		return out[i].Cycle < out[k].Cycle
	})
	return out, nil
}

func ruleOrder(r string) int {
	for i, s := range []string{"stitch", "decon", "edf", "registration", "qc_stitch", "qc_decon", "qc_edf", "qc_registration", "qc_report"} {
		if s == r {
			return i
		}
	}
	return 100
}

// find returns the first line with message msg.
func (s *StageLog) find(msg string) *LogLine {
	for i := range s.Lines {
		if s.Lines[i].Msg == msg {
			return &s.Lines[i]
		}
	}
	return nil
}

// sliceCount counts the planes in a range list such as "1-3" or "2-5,7".
func sliceCount(s string) (int, bool) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, isRange := strings.Cut(part, "-")
		lo, err := strconv.Atoi(a)
		if err != nil {
			return 0, false
		}
		hi := lo
		if isRange {
			if hi, err = strconv.Atoi(b); err != nil || hi < lo {
				return 0, false
			}
		}
		n += hi - lo + 1
	}
	return n, n > 0
}
