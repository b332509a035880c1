// Package membudget decides how much memory (resident set, bytes) a process
// of the pipeline may use, reads the process's own peak resident set, and
// holds the Go runtime under the budget.
//
// The budget comes, in this order, from the --mem-budget flag (MB), the
// SLURM allocation (SLURM_MEM_PER_NODE in MB, or SLURM_MEM_PER_CPU MB x
// SLURM_CPUS_PER_TASK), mem_mb (MB, exported by the Snakefile outside
// SLURM), the cgroup limit of the process (v2 memory.max, v1
// memory.limit_in_bytes, the smallest on the path to the root; "max" is no
// limit), and last DefaultFraction of the physical memory (/proc/meminfo
// MemTotal). A malformed value is an error naming the variable or file,
// never a silent default. A flag, SLURM or mem_mb budget above the machine
// (the cgroup limit, else MemTotal) is capped at it and the source says so;
// sizes never overflow. Units: MB are 2^20 bytes, as SLURM's.
//
// Stages size their read-ahead, batches and write-behind from the budget
// and refuse to start when their smallest working set does not fit
// (NeedError).
package membudget

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// MB is the unit of --mem-budget and of SLURM's memory variables.
const MB = 1 << 20

// DefaultFraction of the physical memory is the budget when nothing else
// sets one: the rest is left to the page cache, the kernel and neighbours.
const DefaultFraction = 0.8

// Source names of a budget (the second result of Resolve).
const (
	SourceFlag     = "--mem-budget"
	SourceMemNode  = "SLURM_MEM_PER_NODE"
	SourceMemCPU   = "SLURM_MEM_PER_CPU x SLURM_CPUS_PER_TASK"
	SourceMemMB    = "mem_mb"
	SourceCgroupV2 = "cgroup v2 memory.max"
	SourceCgroupV1 = "cgroup v1 memory.limit_in_bytes"
	SourcePhysical = "80% of /proc/meminfo MemTotal"
)

// UsageError is a malformed flag, variable or file: the caller maps it to
// its bad-input exit code.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }

// Env is where Resolve looks. The zero value is the real process: os.Getenv
// and the files under "/".
type Env struct {
	Getenv func(string) string
	// Root is prepended to /proc/... and /sys/fs/cgroup/... ("" = "/"), so
	// tests can lay out fake files.
	Root string
}

// Resolve returns the budget in bytes and where it came from, for the real
// process (os.Getenv when getenv is nil, files under /).
func Resolve(flagMB int, getenv func(string) string) (int64, string, error) {
	return Env{Getenv: getenv}.Resolve(flagMB)
}

// Resolve decides the budget in bytes; see the package comment for the
// order. A budget from the flag, SLURM or mem_mb larger than the machine's
// memory (Machine: the cgroup limit, else MemTotal) is capped at it, and the
// source then says so ("mem_mb, capped at the machine's 23.54 GiB (...)");
// sizes are overflow-checked (a product beyond int64 is capped the same way).
func (e Env) Resolve(flagMB int) (int64, string, error) {
	b, src, err := e.resolve(flagMB)
	if err != nil || (src != SourceFlag && src != SourceMemNode && src != SourceMemCPU && src != SourceMemMB) {
		return b, src, err
	}
	m, msrc, err := e.Machine()
	if err != nil {
		return 0, "", err
	}
	if b > m {
		return m, fmt.Sprintf("%s, capped at the machine's %s (%s)", src, Format(m), msrc), nil
	}
	return b, src, nil
}

// Machine is the memory this process can have at most, in bytes: the
// cgroup limit when it is below the physical memory, else MemTotal; the
// second result names which.
func (e Env) Machine() (int64, string, error) {
	phys, err := e.physical()
	if err != nil {
		return 0, "", err
	}
	lim, src, err := e.cgroupLimit()
	if err != nil {
		return 0, "", err
	}
	// A cgroup limit above the machine's memory is no limit.
	if lim > 0 && lim < phys {
		return lim, src, nil
	}
	return phys, sourceMemTotal, nil
}

const sourceMemTotal = "/proc/meminfo MemTotal"

// mbBytes is mb x n MB in bytes, saturated at math.MaxInt64 (then capped at
// the machine by Resolve) instead of overflowing.
func mbBytes(mb, n int64) int64 {
	if mb <= 0 || n <= 0 {
		return 0
	}
	if mb > math.MaxInt64/MB/n {
		return math.MaxInt64
	}
	return mb * n * MB
}

func (e Env) resolve(flagMB int) (int64, string, error) {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if flagMB < 0 {
		return 0, "", usagef("--mem-budget %d: want MB > 0 (0: from SLURM, the cgroup or the physical memory)", flagMB)
	}
	if flagMB > 0 {
		return mbBytes(int64(flagMB), 1), SourceFlag, nil
	}
	// SLURM_MEM_PER_NODE=0 (--mem=0) asks for all of a node's memory: no
	// figure of its own, the cgroup then gives the limit.
	if v, ok, err := e.intVar("SLURM_MEM_PER_NODE", true); err != nil {
		return 0, "", err
	} else if ok && v > 0 {
		return mbBytes(v, 1), SourceMemNode, nil
	}
	if v, ok, err := e.intVar("SLURM_MEM_PER_CPU", true); err != nil {
		return 0, "", err
	} else if ok && v > 0 {
		cpus, ok, err := e.intVar("SLURM_CPUS_PER_TASK", false)
		if err != nil {
			return 0, "", err
		}
		if !ok {
			cpus = 1 // SLURM's default of one CPU per task
		}
		return mbBytes(v, cpus), SourceMemCPU, nil
	}
	if v, ok, err := e.intVar("mem_mb", false); err != nil {
		return 0, "", err
	} else if ok {
		return mbBytes(v, 1), SourceMemMB, nil
	}
	m, src, err := e.Machine()
	if err != nil || src != sourceMemTotal {
		return m, src, err // the cgroup limit
	}
	return int64(float64(m) * DefaultFraction), SourcePhysical, nil
}

// intVar reads a non-negative (zeroOK) or positive integer variable.
func (e Env) intVar(name string, zeroOK bool) (int64, bool, error) {
	s := strings.TrimSpace(e.Getenv(name))
	if s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || (v == 0 && !zeroOK) || v > math.MaxInt64/MB/4096 {
		want := "a positive integer"
		if zeroOK {
			want = "a non-negative integer"
		}
		return 0, false, usagef("environment variable %s=%q: want %s (MB)", name, s, want)
	}
	return v, true, nil
}

func (e Env) path(p string) string {
	if e.Root == "" {
		return p
	}
	return filepath.Join(e.Root, p)
}

// physical is MemTotal of /proc/meminfo in bytes.
func (e Env) physical() (int64, error) {
	p := e.path("/proc/meminfo")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("physical memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 || (len(f) > 2 && f[2] != "kB") {
				return 0, usagef("%s: malformed MemTotal line %q", p, sc.Text())
			}
			return kb * 1024, nil
		}
	}
	return 0, usagef("%s: no MemTotal line", p)
}

// cgroupLimit is the smallest memory limit on the path of this process's
// cgroup to the root (0 when none): cgroup v2 first, then v1.
func (e Env) cgroupLimit() (int64, string, error) {
	b, err := os.ReadFile(e.path("/proc/self/cgroup"))
	if err != nil {
		return 0, "", nil // no cgroups (not Linux, or /proc hidden): no limit
	}
	var v2, v1 string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	if v2 != "" {
		lim, err := e.walkLimits("/sys/fs/cgroup", v2, "memory.max")
		if err != nil || lim > 0 {
			return lim, SourceCgroupV2, err
		}
	}
	if v1 != "" {
		lim, err := e.walkLimits("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
		if err != nil || lim > 0 {
			return lim, SourceCgroupV1, err
		}
	}
	return 0, "", nil
}

// walkLimits reads file in mount/cg and in every parent up to mount and
// returns the smallest limit (0: none). A file that is absent (the group is
// not visible in this namespace) is skipped; one that is malformed is an
// error naming it.
func (e Env) walkLimits(mount, cg, file string) (int64, error) {
	var best int64
	dir := filepath.Clean("/" + cg)
	for {
		p := e.path(filepath.Join(mount, dir, file))
		if b, err := os.ReadFile(p); err == nil {
			s := strings.TrimSpace(string(b))
			if s != "max" {
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil || v <= 0 {
					return 0, usagef("%s: %q: want a byte count or max", p, s)
				}
				// cgroup v1 writes "no limit" as a huge page-rounded number.
				if v < 1<<62 && (best == 0 || v < best) {
					best = v
				}
			}
		}
		if dir == "/" {
			return best, nil
		}
		dir = filepath.Dir(dir)
	}
}

// PeakRSS is the process's peak resident set in bytes: VmHWM of
// /proc/self/status, else getrusage's ru_maxrss.
func PeakRSS() int64 {
	if v, err := statusField("/proc/self/status", "VmHWM:"); err == nil {
		return v
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		return int64(ru.Maxrss) * 1024 // kB on Linux
	}
	return 0
}

// RSS is the process's current resident set in bytes (VmRSS), 0 if unknown.
func RSS() int64 {
	v, _ := statusField("/proc/self/status", "VmRSS:")
	return v
}

// ResetPeak resets the kernel's peak resident set of this process (VmHWM)
// to the current resident set (Linux >= 4.0: "5" to /proc/self/clear_refs),
// so that PeakRSS afterwards measures one stage of a longer process.
func ResetPeak() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

func statusField(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key) {
			f := strings.Fields(line[len(key):])
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024, nil
				}
			}
			return 0, fmt.Errorf("%s: malformed %s line %q", path, key, line)
		}
	}
	return 0, fmt.Errorf("%s: no %s line", path, key)
}

// GoLimit is the Go runtime's soft limit for a budget: 90 %, leaving room
// for memory the runtime does not manage (thread stacks, cgo and driver
// allocations, pinned buffers) and for pages not yet returned.
func GoLimit(budget int64) int64 { return budget / 10 * 9 }

// SetGoLimit sets the Go runtime's soft memory limit (the garbage collector
// runs harder as the heap nears it, instead of letting it grow to twice the
// live data) to bytes, and returns a function that restores the previous
// limit. bytes <= 0 leaves the limit alone.
func SetGoLimit(bytes int64) (restore func()) {
	if bytes <= 0 {
		return func() {}
	}
	prev := debug.SetMemoryLimit(bytes)
	return func() { debug.SetMemoryLimit(prev) }
}

// NeedError says that a stage's smallest working set does not fit the
// budget. Callers map it to their bad-input exit code (the fix is a larger
// budget: the config key or --mem-budget).
type NeedError struct {
	Stage     string // e.g. "stitch"
	Budget    int64  // bytes
	Source    string // where the budget came from
	Need      int64  // bytes, the smallest working set
	What      string // what the need is made of
	ConfigKey string // e.g. "resources.mem_stitch"
}

func (e *NeedError) Error() string {
	src := ""
	if e.Source != "" {
		src = " (" + e.Source + ")"
	}
	return fmt.Sprintf("%s: memory budget %s%s is too small: the smallest working set needs %s (%s); raise %s (MB) or --mem-budget to at least %d",
		e.Stage, Format(e.Budget), src, Format(e.Need), e.What, e.ConfigKey, (e.Need+MB-1)/MB)
}

// ErrTooSmall is matched by errors.Is for every NeedError.
var ErrTooSmall = errors.New("memory budget too small")

func (e *NeedError) Is(target error) bool { return target == ErrTooSmall }

// Describe writes a budget and its source for logs ("6.00 GiB (--mem-budget)"),
// "none" for no budget (b <= 0).
func Describe(b int64, src string) string {
	if b <= 0 {
		return "none"
	}
	return Format(b) + " (" + src + ")"
}

// Format writes bytes as MiB below 1 GiB, else GiB with two decimals.
func Format(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%d MiB", (b+MB/2)/MB)
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

// First returns the first of plans (ordered from the preferred to the
// smallest) whose need fits budget, the preferred one when budget <= 0
// (no budget), and ok false when none fits: the caller then reports a
// NeedError for the last, smallest plan. plans must not be empty.
func First[P any](plans []P, budget int64, need func(P) int64) (p P, ok bool) {
	if budget <= 0 {
		return plans[0], true
	}
	for _, p := range plans {
		if need(p) <= budget {
			return p, true
		}
	}
	return plans[len(plans)-1], false
}
