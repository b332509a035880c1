package cliutil

import (
	"fmt"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// A locked output maps to its own exit code, listed in every help text, even
// when wrapped as a usage error.
func TestExitCodeLocked(t *testing.T) {
	locked := &staging.LockedError{Final: "/p/cyc01", Lock: "/p/.cyc01.lock", Holder: staging.Holder{JobID: "7", Host: "n1", PID: 9}}
	for _, err := range []error{locked, fmt.Errorf("stitch: %w", locked), AsUsage(locked), staging.ErrLocked} {
		if got := ExitCode(err); got != ExitLocked {
			t.Errorf("%v: exit %d, want %d", err, got, ExitLocked)
		}
	}
	if ExitLocked == ExitOK || ExitLocked == ExitFailure || ExitLocked == ExitUsage || ExitLocked == ExitSignal {
		t.Errorf("ExitLocked %d is not distinct", ExitLocked)
	}
	if !strings.Contains(ExitCodesHelp, fmt.Sprintf("   %d  another job", ExitLocked)) {
		t.Errorf("ExitCodesHelp lacks code %d:\n%s", ExitLocked, ExitCodesHelp)
	}
	app := NewApp("x", "u", "d", nil, nil)
	if !strings.Contains(app.Description, "another job is writing the same output") {
		t.Error("an app's help lacks the locked exit code")
	}
}

// Subcommands' help lists the exit codes too (Main adds them).
func TestExitCodesInSubcommandHelp(t *testing.T) {
	app := NewApp("x", "u", "d", nil, nil)
	app.Commands = []*cli.Command{{Name: "run", Subcommands: []*cli.Command{{Name: "deep", Description: "does things"}}}}
	exitCodesInHelp(app.Commands)
	exitCodesInHelp(app.Commands) // idempotent
	for _, c := range []*cli.Command{app.Commands[0], app.Commands[0].Subcommands[0]} {
		if strings.Count(c.Description, ExitCodesHelp) != 1 {
			t.Errorf("%s: description %q", c.Name, c.Description)
		}
	}
}
