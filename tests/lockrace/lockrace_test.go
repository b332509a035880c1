// Package lockrace starts two runs of one output at the same instant, for
// every stage executable (issue 15): exactly one does the work and exits 0,
// the other exits 4 naming the holder, and the output is intact; and a run
// told to wait (KINTSUGI_LOCK_WAIT, as inside SLURM) for a holder with the
// same parameters exits 0 without redoing the work (issue 20).
package lockrace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// trials per stage: the count.
const trials = 50

type stage struct {
	name string
	bin  string
	args []string
	out  string // the directory its lock guards
	done string // its sentinel
}

// fullTrials: the first tries of every stage run both processes to their
// end (one 0, one 4). In the later ones the winner is stopped with SIGTERM
// once the loser has exited 4 (exit 3, or 0 if it finished first): the race
// is decided when the lock is taken, and the stage's work (BaSiC fits take
// ~20 s even on this input) would make 50 tries per stage too slow for CI.
const fullTrials = 2

// project writes a small synthetic project: 2 cycles (registration does
// real work), 1 channel, 3 z-planes (EDF's gate needs 3), 2 x 2 tiles of
// 192 x 240 px (the stages hold their lock for 0.3-2 s on 2 cores, far
// longer than the start-up of two processes differs).
func project(t *testing.T) (cfg, processed string) {
	t.Helper()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ, o.NChannels, o.Rows, o.Cols, o.TileH, o.TileW = t.TempDir(), 2, 3, 1, 2, 2, 192, 240
	o.EmptyTiles = 0
	return synthtest.Generate(t, o), layout.ProcessedDir(o.OutDir)
}

func stages(t *testing.T, cfg, processed string) []stage {
	run := func(extra ...string) []string {
		return append([]string{"run", "--config", cfg, "--device", "cpu", "--workers", "1", "--log-format", "text"}, extra...)
	}
	proj := filepath.Dir(filepath.Dir(processed)) // <project>/data/processed
	return []stage{
		{name: "stitch", bin: exectest.Build(t, "kintsugi-stitch", "../../wrappers/stitch"), args: run("--cycle", "1"),
			out: layout.Stitched(proj, 1)},
		{name: "decon", bin: exectest.Build(t, "kintsugi-decon", "../../wrappers/decon"), args: run("--cycle", "1"),
			out: layout.Deconvolved(proj, 1)},
		{name: "edf", bin: exectest.Build(t, "kintsugi-edf", "../../wrappers/edf"), args: run("--cycle", "1"),
			out: layout.EDFOut(proj, 1)},
		{name: "registration", bin: exectest.Build(t, "kintsugi-register", "../../wrappers/register"), args: run(),
			out: layout.Registered(proj)},
		{name: "qc", bin: exectest.Build(t, "kintsugi-qc", "../../cmd/kintsugi-qc"),
			args: []string{"run", "--stage", "registration", "--config", cfg, "--workers", "1", "--log-format", "text"},
			out:  layout.QCStage(proj, layout.Registration), done: layout.QCSentinel(proj, layout.Registration)},
	}
}

// cycle2 is args with --cycle 2 for --cycle 1; nil for a project-wide stage.
func cycle2(args []string) []string {
	i := slices.Index(args, "--cycle")
	if i < 0 {
		return nil
	}
	a := slices.Clone(args)
	a[i+1] = "2"
	return a
}

type result struct {
	code int
	out  string
	cmd  *exec.Cmd
}

func start(t *testing.T, s stage, env ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = exectest.Env(append([]string{"SLURM_JOB_ID=", "KINTSUGI_LOCK_WAIT="}, env...)...)
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &b
}

func wait(cmd *exec.Cmd) int {
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// listing is the output's files with their sizes (time stamps inside some
// files differ between runs; their sizes do not).
func listing(t *testing.T, s stage) string {
	t.Helper()
	tree := exectest.ReadTree(t, s.out)
	var lines []string
	for name, b := range tree {
		lines = append(lines, fmt.Sprintf("%s %d", name, len(b)))
	}
	slices.Sort(lines)
	sent := s.done
	if sent == "" {
		sent = layout.Sentinel(s.out)
	}
	if fi, err := os.Stat(sent); err != nil || fi.Size() == 0 {
		t.Fatalf("%s: sentinel %s: %v", s.name, sent, err)
	}
	return strings.Join(lines, "\n")
}

// leftovers: lock files, lock temporaries and staging directories beside s.out.
func leftovers(t *testing.T, s stage) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(s.out))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	base := "." + filepath.Base(s.out)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), base+".lock") || strings.HasPrefix(e.Name(), base+".partial-") {
			left = append(left, e.Name())
		}
	}
	return left
}

func TestSameInstant(t *testing.T) {
	cfg, processed := project(t)
	all := stages(t, cfg, processed)

	// Waiting (as inside SLURM, here through KINTSUGI_LOCK_WAIT): a second
	// stitch run started while the first holds the lock waits, and exits 0
	// without doing the work once the first completed the output.
	st := all[0]
	st2 := st
	st2.args = cycle2(st.args)
	cyc2, cyc2Log := start(t, st2)
	first, firstLog := start(t, st)
	lock := filepath.Join(filepath.Dir(st.out), "."+filepath.Base(st.out)+".lock")
	for t0 := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(lock); err == nil {
			break
		}
		if time.Since(t0) > time.Minute {
			first.Process.Kill()
			t.Fatalf("the first stitch run took no lock in a minute:\n%s", firstLog)
		}
	}
	second, secondLog := start(t, st, "KINTSUGI_LOCK_WAIT=5m")
	if c := wait(first); c != 0 {
		t.Fatalf("first stitch run: exit %d\n%s", c, firstLog)
	}
	if c := wait(second); c != 0 {
		t.Fatalf("waiting stitch run: exit %d, want 0\n%s", c, secondLog)
	}
	for _, want := range []string{"waiting for the job writing this output with the same parameters", fmt.Sprintf("pid %d", first.Process.Pid), "nothing to do"} {
		if !strings.Contains(secondLog.String(), want) {
			t.Errorf("the waiting run's log lacks %q:\n%s", want, secondLog)
		}
	}
	if strings.Contains(secondLog.String(), "cycle stitched") || !strings.Contains(firstLog.String(), "cycle stitched") {
		t.Errorf("the waiting run redid the work, or the first did not do it:\nfirst:\n%s\nsecond:\n%s", firstLog, secondLog)
	}

	// Cycle 2 (stitched meanwhile), then the reference output of every
	// other stage, one run each.
	if c := wait(cyc2); c != 0 {
		t.Fatalf("stitch cycle 2: exit %d\n%s", c, cyc2Log)
	}
	ref := map[string]string{st.name: listing(t, st)}
	for _, s := range all[1:] {
		for _, args := range [][]string{s.args, cycle2(s.args)} {
			if args == nil {
				continue
			}
			c2 := s
			c2.args = args
			cmd, lg := start(t, c2)
			if c := wait(cmd); c != 0 {
				t.Fatalf("%s %v: exit %d\n%s", s.name, args, c, lg)
			}
		}
		ref[s.name] = listing(t, s)
	}

	// Two runs of one output at the same instant, no waiting (outside SLURM,
	// KINTSUGI_LOCK_WAIT unset): one 0, one 4 naming the holder.
	for _, s := range all {
		t.Run(s.name, func(t *testing.T) {
			codes := map[string]int{}
			t0 := time.Now()
			for i := range trials {
				a, al := start(t, s)
				b, bl := start(t, s)
				logs := map[*exec.Cmd]*strings.Builder{a: al, b: bl}
				done := make(chan result, 2)
				for _, c := range []*exec.Cmd{a, b} {
					go func() { done <- result{code: wait(c), cmd: c} }()
				}
				r1 := <-done
				if r1.code == 4 && i >= fullTrials {
					other := a
					if r1.cmd == a {
						other = b
					}
					other.Process.Signal(syscall.SIGTERM)
				}
				r2 := <-done
				loser, winner := r1, r2
				if r2.code == 4 {
					loser, winner = r2, r1
				}
				key := fmt.Sprintf("%d+%d", min(r1.code, r2.code), max(r1.code, r2.code))
				codes[key]++
				okWinner := winner.code == 0 || (i >= fullTrials && winner.code == 3)
				if loser.code != 4 || !okWinner {
					t.Fatalf("try %d: exit codes %d and %d, want 4 and 0:\n--- first\n%s\n--- second\n%s", i, r1.code, r2.code, al, bl)
				}
				msg := logs[loser.cmd].String()
				if !strings.Contains(msg, "is being written by") || !strings.Contains(msg, fmt.Sprintf("pid %d", winner.cmd.Process.Pid)) {
					t.Fatalf("try %d: the loser's message does not name the holder (pid %d):\n%s", i, winner.cmd.Process.Pid, msg)
				}
				if left := leftovers(t, s); len(left) > 0 {
					t.Fatalf("try %d: left beside the output: %v", i, left)
				}
				if got := listing(t, s); got != ref[s.name] {
					t.Fatalf("try %d: output differs from the reference:\n%s\nwant:\n%s", i, got, ref[s.name])
				}
			}
			t.Logf("%s: %d tries in %.1f s, exit codes %v", s.name, trials, time.Since(t0).Seconds(), codes)
		})
	}
}
