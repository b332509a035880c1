package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
)

// execute runs the app as main would and returns the exit code, stdout and
// the error text.
func execute(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	err = newApp().RunContext(context.Background(), append([]string{"kintsugi-config", "--log-format", "text", "--log-level", "error"}, args...))
	w.Close()
	os.Stdout = old
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return cliutil.ExitCode(err), <-done, msg
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The original's documented example config (issue 16).
const issueConfig = `project_dir: /data/p
cycles: [1, 2]
channels: [1, 2, 3, 4]
channel_names: {1: [DAPI-01, Blank, Blank, Blank], 2: [DAPI-02, CD31, CD8, CD45]}
tile_rows: 9
tile_cols: 7
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
resources:
  accounts:
    - {name: acct_a, gpu_slots: 3}
`

// The JSON contract the Snakefile reads (README "kintsugi-config check").
func TestCheckContract(t *testing.T) {
	code, out, msg := execute(t, "check", write(t, "config.yaml", issueConfig))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	want := map[string]any{
		"channel_names": map[string]any{
			"1": []any{"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"},
			"2": []any{"DAPI-02", "CD31", "CD8", "CD45"},
		},
		"edf_files": map[string]any{
			"1": []any{"DAPI-01.tif", "Blank_1a.tif", "Blank_1b.tif", "Blank_1c.tif"},
			"2": []any{"DAPI-02.tif", "CD31.tif", "CD8.tif", "CD45.tif"},
		},
		"renamed": []any{
			map[string]any{"cycle": 1.0, "channel": 2.0, "from": "Blank", "to": "Blank_1a"},
			map[string]any{"cycle": 1.0, "channel": 3.0, "from": "Blank", "to": "Blank_1b"},
			map[string]any{"cycle": 1.0, "channel": 4.0, "from": "Blank", "to": "Blank_1c"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// Nothing renamed: "renamed" is an empty list; a cycle without names has CH files.
	text := strings.Replace(issueConfig, "Blank, Blank, Blank]", "CD3, CD4, CD5]", 1)
	text = strings.Replace(text, "cycles: [1, 2]", "cycles: [1, 2, 3]", 1)
	code, out, msg = execute(t, "check", write(t, "config.yaml", text))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	if !strings.Contains(out, `"renamed": []`) || !strings.Contains(out, `"3": [
      "CH1_edf.tif",`) {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestCheckErrors(t *testing.T) {
	cases := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"bad name", func(t *testing.T) []string {
			return []string{"check", write(t, "c.yaml", strings.Replace(issueConfig, "CD8,", `"CD8,CD9",`, 1))}
		}, "key channel_names.2[2]:"},
		{"schema", func(t *testing.T) []string {
			return []string{"check", write(t, "c.yaml", strings.Replace(issueConfig, "pou: 0.5", "pou: x", 1))}
		}, "key pou:"},
		{"two files", func(t *testing.T) []string {
			p := write(t, "c.yaml", issueConfig)
			return []string{"check", p, p}
		}, "exactly one"},
		{"no file", func(t *testing.T) []string { return []string{"check"} }, "exactly one"},
		{"missing file", func(t *testing.T) []string { return []string{"check", filepath.Join(t.TempDir(), "nope.yaml")} }, "nope.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, msg := execute(t, tc.args(t)...)
			if code != cliutil.ExitUsage || out != "" || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, stdout %q, error %q; want exit 2, no output, an error naming %q", code, out, msg, tc.want)
			}
		})
	}
}

func TestCheckRaw(t *testing.T) {
	many := strings.Builder{}
	for i := 0; i <= maxKeysPerMapping; i++ {
		many.WriteString("k" + itoa(i) + ": 1\n")
	}
	deep := strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2) + "\n"
	cases := []struct{ name, text, want string }{
		{"duplicate key", "a: 1\nb:\n  c: 1\n  c: 2\n", "key b.c: line 4: duplicate key (first at line 3)"},
		{"alias", "a: &x [1]\nb: *x\n", "anchor &x"},
		{"alias only", "b: *x\n", "invalid YAML"},
		{"merge key", "a: {b: 1}\nc:\n  <<: {b: 2}\n", "merge key"},
		{"too many keys", many.String(), "1001 keys in one mapping"},
		{"too deep", "a: " + deep, "levels deep"},
		{"two documents", "a: 1\n---\nb: 2\n", "more than one YAML document"},
		{"empty", "", "empty file"},
		{"too big", "a: '" + strings.Repeat("x", maxRawBytes) + "'\n", "larger than"},
		{"bad syntax", "a: [1\n", "invalid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := write(t, "good.yaml", issueConfig)
			bad := write(t, "bad.yaml", tc.text)
			code, out, msg := execute(t, "check", "--raw", good, bad)
			if code != cliutil.ExitUsage || out != "" || !strings.Contains(msg, "bad.yaml") || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, error %q; want exit 2 naming bad.yaml and %q", code, msg, tc.want)
			}
		})
	}
	if code, _, msg := execute(t, "check", "--raw", write(t, "good.yaml", issueConfig)); code != 0 {
		t.Errorf("a valid file: exit %d: %s", code, msg)
	}
	if code, _, _ := execute(t, "check", "--raw"); code != cliutil.ExitUsage {
		t.Errorf("no files: exit %d, want 2", code)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
