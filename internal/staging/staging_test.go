package staging

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCommitReplacesAndAbortLeavesNothing(t *testing.T) {
	root := t.TempDir()
	final := filepath.Join(root, "out", "cyc01")
	if err := os.MkdirAll(final, 0o755); err != nil { // Snakemake's empty output dir
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(final, "old.txt"), []byte("old"), 0o644)
	d, err := New(final)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSentinel(filepath.Join(d.Path, ".snakemake_complete"), [][2]string{{"stage", "x"}, {"skipped", ""}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Abort() // after a commit: nothing happens
	got, err := os.ReadFile(filepath.Join(final, ".snakemake_complete"))
	if err != nil || string(got) != "stage=x\nskipped=\n" {
		t.Fatalf("sentinel %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(final, "old.txt")); !os.IsNotExist(err) {
		t.Errorf("old output kept: %v", err)
	}
	d2, err := New(final)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d2.Path, "partial.tif"), []byte("x"), 0o644)
	d2.Abort()
	ents, _ := os.ReadDir(filepath.Dir(final))
	if len(ents) != 1 || ents[0].Name() != "cyc01" {
		t.Errorf("after abort the parent holds %v, want only cyc01", ents)
	}
}
