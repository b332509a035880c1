package stagecli

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/kintsugi-hpc/kintsugi-go/"

// stagePkgs are the stage packages: each takes its engine through its own
// interface and the engine's memory report (internal/README.md).
var stagePkgs = []string{"internal/stitch", "internal/deconstage", "internal/edfstage", "internal/regstage"}

// deps lists the packages pkg depends on (go list -deps), with the cuda
// tag or without.
func deps(t *testing.T, cuda bool, pkg string) map[string]bool {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	if cuda {
		args = append(args, "-tags", "cuda")
	}
	out, err := exec.Command("go", append(args, module+pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		m[strings.TrimPrefix(l, module)] = true
	}
	return m
}

// TestLayers: the device is chosen here, so no stage package imports the
// CUDA engine, and the engine (below the stages) imports no stage and no
// CLI package, in either build.
func TestLayers(t *testing.T) {
	for _, cuda := range []bool{false, true} {
		for _, p := range stagePkgs {
			if deps(t, cuda, p)["internal/gpu"] {
				t.Errorf("%s imports internal/gpu (cuda tag %v): take the engine through the stage's interface", p, cuda)
			}
		}
		g := deps(t, cuda, "internal/gpu")
		for _, p := range append(stagePkgs, "internal/cliutil", "internal/cliutil/stagecli") {
			if g[p] {
				t.Errorf("internal/gpu imports %s (cuda tag %v): it sits below the stages", p, cuda)
			}
		}
		if !deps(t, cuda, "internal/cliutil/stagecli")["internal/gpu"] {
			t.Errorf("stagecli does not import internal/gpu (cuda tag %v): the device is resolved here", cuda)
		}
	}
}
