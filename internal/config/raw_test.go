package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// aliasBomb is the classic billion-laughs document: 9 levels of 9 aliases.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// manyKeys is one mapping of n keys (yaml.v3 checks them pairwise).
func manyKeys(n int) string {
	var b strings.Builder
	b.WriteString(minimal)
	b.WriteString("live_accounts:\n")
	for i := range n {
		fmt.Fprintf(&b, "  k%d: %d\n", i, i)
	}
	return b.String()
}

// TestHostileConfigs: each is refused by Parse, Load and CheckRaw with an
// *Error naming the file and what is wrong, quickly.
func TestHostileConfigs(t *testing.T) {
	deep := "a: " + strings.Repeat("[", 200) + strings.Repeat("]", 200) + "\n"
	cases := []struct{ name, data, want string }{
		{"anchor and alias", minimal + "extra: &x 1\nother: *x\n", "anchor &x"},
		{"alias bomb", aliasBomb(), "anchor &a0"},
		{"merge key", minimal + "decon: {<<: {iterations: 3}}\n", "merge key"},
		{"duplicate key", minimal + "pou: 0.7\n", "key pou: line"},
		{"duplicate key 1 and \"1\"", strings.Replace(minimal, "channel_names: {1:", `channel_names: {"2": [a, b, c, d], 1:`, 1), "key channel_names.2: line"},
		{"second document", minimal + "---\npou: 0.9\n", "more than one YAML document"},
		{"too many keys in one mapping", manyKeys(MaxKeysPerMapping + 1), fmt.Sprintf("%d keys in one mapping", MaxKeysPerMapping+1)},
		{"too deep", deep, "nested more than"},
		{"too many nodes", minimal + "x: [" + strings.Repeat("1,", MaxNodes) + "1]\n", "YAML nodes"},
		{"over the size limit", minimal + "# " + strings.Repeat("x", MaxFileBytes) + "\n", "1 MiB"},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		for what, run := range map[string]func() error{
			"Parse":    func() error { _, err := Parse(path, []byte(tc.data)); return err },
			"Load":     func() error { _, err := Load(path); return err },
			"CheckRaw": func() error { return CheckRaw(path) },
		} {
			start := time.Now()
			err := run()
			var ce *Error
			if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s: %v, want a config error naming %s and %q", what, tc.name, err, path, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s %s took %v", what, tc.name, d)
			}
		}
	}
	if err := CheckRaw(filepath.Join("..", "..", "config.yaml")); err != nil {
		t.Errorf("the example config: %v", err)
	}
}

// TestConfigNotRegular: a FIFO (whose open would block), /dev/zero (endless)
// and a directory are refused without blocking or reading.
func TestConfigNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", dir} {
		done := make(chan error, 2)
		go func() {
			_, err := Load(p)
			done <- err
			done <- CheckRaw(p)
		}()
		for range 2 {
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), p) {
					t.Errorf("%s: %v, want an error naming it as not a regular file", p, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: load blocked", p)
			}
		}
	}
}

// TestParseTimeBounded: the largest mapping accepted, repeated up to the
// size limit, parses (and is refused by the schema) within a second or two,
// where yaml.v3 alone needs minutes for one mapping of that many keys.
func TestParseTimeBounded(t *testing.T) {
	var b strings.Builder
	for m := 0; b.Len() < MaxFileBytes-20000; m++ {
		fmt.Fprintf(&b, "m%d:\n", m)
		for i := range MaxKeysPerMapping {
			fmt.Fprintf(&b, "  k%d: 1\n", i)
		}
	}
	start := time.Now()
	_, err := Parse("big.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("accepted")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("%d-byte config of %d-key mappings took %v", b.Len(), MaxKeysPerMapping, d)
	}
}

// FuzzLoad: Parse never panics or hangs on any input, returns a config or
// an error, and every error names the file. Seeds: the example config, the
// minimal one and the hostile kinds of TestHostileConfigs in small form.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(example), minimal, aliasBomb(), minimal + "pou: 0.7\n", minimal + "---\n",
		"a: " + strings.Repeat("[", 70), "{1: a, \"1\": b}", "<<: {a: 1}", "? [a]\n: b\n", "a: !!binary aGVsbG8=\n",
		"a: .nan\n", "tile_rows: 1e400\n", "\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		cfg, err := Parse("fuzz.yaml", data)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("parse of %d bytes took %v", len(data), d)
		}
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
		if err != nil && !strings.Contains(err.Error(), "fuzz.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
