// Package exectest builds the project's executables inside tests and runs
// them as users and the Snakefile do: with a clean device and worker
// environment, returning the combined output and the exit code.
//
// A test builds each executable once (Build) and then runs it per case
// (Run, or Output for a command it prepared itself, e.g. behind a shell);
// Check states the one rule every case asserts: the exit code, and a
// message naming what was wrong; a Case is one row of such a table and
// Case.Run runs and checks it.
package exectest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// Build compiles the main package pkg (a directory as `go build` takes it,
// relative to the test's working directory: "." for the package under test,
// "../../wrappers/decon" from elsewhere) without cgo, so without the cuda
// tag, into a temporary directory of t as an executable called name, and
// returns its path. A failed build is fatal.
//
// Build also reads the executable's Go sources (every non-standard package
// it depends on): `go test` caches a result by the test binary and the files
// the test opened, and a test that only runs the executable does not link
// most of its code, so without these reads a change to, say, the command
// set-up would leave a stale "ok (cached)".
func Build(t testing.TB, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if not .Standard}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}`, pkg)
	list.Env = build.Env
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatalf("source of %s: %v", name, err)
		}
	}
	return bin
}

// CleanEnv clears what would otherwise choose the device, the worker count
// or whether a run waits for a locked output from the test's own
// environment (a test run inside a SLURM job, or with KINTSUGI_DEVICE_MODE
// set).
var CleanEnv = []string{"KINTSUGI_DEVICE_MODE=", "SLURM_CPUS_PER_TASK=", "cpus_per_task=",
	"SLURM_JOB_ID=", "SLURM_JOB_END_TIME=", "KINTSUGI_LOCK_WAIT="}

// Env returns the process environment with CleanEnv applied, then extra
// (later entries win).
func Env(extra ...string) []string {
	env := append(os.Environ(), CleanEnv...)
	return append(env, extra...)
}

// Run runs bin with args in Env(env...) and returns its combined stdout and
// stderr and its exit code.
func Run(t testing.TB, bin string, env []string, args ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = Env(env...)
	return Output(t, cmd)
}

// Output runs cmd and returns its combined stdout and stderr and its exit
// code; a command that could not be started is fatal.
func Output(t testing.TB, cmd *exec.Cmd) ([]byte, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	return out, 0
}

// Case is one row of an executable's table test: the subtest's name, the
// extra environment (Env), the arguments, and what Check asserts of the
// run: the exit code and a substring of the combined output.
type Case struct {
	Name string
	Env  []string
	Args []string
	Code int
	Want string
}

// Run runs bin as c says (Run with c.Env and c.Args) and returns its
// combined output, its exit code and Check's verdict on them (nil: the
// exit code and the output are as c wants).
func (c Case) Run(t testing.TB, bin string) ([]byte, int, error) {
	t.Helper()
	out, code := Run(t, bin, c.Env, c.Args...)
	return out, code, Check(out, code, c.Code, c.Want)
}

// Check returns an error unless the run exited with wantCode and its output
// contains want; the error quotes the output (its last 3000 bytes).
func Check(out []byte, code, wantCode int, want string) error {
	if code != wantCode || !strings.Contains(string(out), want) {
		return fmt.Errorf("exit %d (want %d), output lacks %q:\n%s", code, wantCode, want, tail(out))
	}
	return nil
}

func tail(b []byte) string {
	if len(b) > 3000 {
		return "..." + string(b[len(b)-3000:])
	}
	return string(b)
}

// ReadTree returns every file under dir, keyed by its path relative to dir,
// except the Snakemake sentinels (.snakemake_complete: they hold times), so
// that two runs' outputs can be compared byte for byte. An error is fatal.
func ReadTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == layout.SentinelName {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Differing returns, sorted, the names of the files of want (a ReadTree)
// whose bytes got lacks or holds otherwise.
func Differing(want, got map[string][]byte) []string {
	var names []string
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Capture runs f (an in-process command: a urfave/cli app's RunContext) with
// *file (&os.Stdout or &os.Stderr) redirected to a pipe and returns what f
// wrote there and f's error.
func Capture(t testing.TB, file **os.File, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := *file
	*file = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	ferr := f()
	w.Close()
	*file = old
	return <-done, ferr
}

// Stdout is Capture of os.Stdout.
func Stdout(t testing.TB, f func() error) (string, error) { return Capture(t, &os.Stdout, f) }
