package config

import (
	"reflect"
	"strings"
	"testing"
)

// The original's own cases (KINTSUGI tests/test_cli_channel_names.py and the
// reference's rule): blanks of cycle 1 get _1a, _1b, _1c; a name repeated in
// another cycle is suffixed in both; DAPI of later cycles becomes DAPI_cycNN.
func TestUniqueNamesOriginal(t *testing.T) {
	cases := []struct {
		name       string
		in, want   map[int][]string
		dapiAlways bool
		renamed    int
	}{
		{"blank first cycle, CHANNELNAMES reader",
			map[int][]string{1: {"DAPI-01", "Blank", "Blank", "Blank"}, 2: {"DAPI-02", "CD31", "CD8", "CD45"}},
			map[int][]string{1: {"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"}, 2: {"DAPI_cyc02", "CD31", "CD8", "CD45"}}, true, 4},
		{"blank first cycle, config loader keeps a unique DAPI-02",
			map[int][]string{1: {"DAPI-01", "Blank", "Blank", "Blank"}, 2: {"DAPI-02", "CD31", "CD8", "CD45"}},
			map[int][]string{1: {"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"}, 2: {"DAPI-02", "CD31", "CD8", "CD45"}}, false, 3},
		{"blank in two cycles",
			map[int][]string{1: {"DAPI-01", "Blank", "Blank", "Blank"}, 2: {"DAPI-02", "CD31", "CD8", "Blank"}},
			map[int][]string{1: {"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"}, 2: {"DAPI-02", "CD31", "CD8", "Blank_2c"}}, false, 4},
		{"bare DAPI every cycle",
			map[int][]string{1: {"DAPI", "CD3", "CD4", "CD8"}, 2: {"DAPI", "CD20", "Ki67", "FOXP3"}, 3: {"DAPI", "CD31", "SMA", "Blank"}},
			map[int][]string{1: {"DAPI", "CD3", "CD4", "CD8"}, 2: {"DAPI_cyc02", "CD20", "Ki67", "FOXP3"}, 3: {"DAPI_cyc03", "CD31", "SMA", "Blank"}}, false, 2},
		{"case and file-name collisions count as duplicates",
			map[int][]string{1: {"DAPI-01", "CD3 x", "CD3/x", "cd3_X"}},
			map[int][]string{1: {"DAPI-01", "CD3 x_1a", "CD3/x_1b", "cd3_X_1c"}}, false, 3},
		{"channel 1 not DAPI",
			map[int][]string{1: {"Blank", "Blank", "CD4"}},
			map[int][]string{1: {"Blank_1", "Blank_1a", "CD4"}}, false, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, renamed := UniqueNames(tc.in, tc.dapiAlways)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if len(renamed) != tc.renamed {
				t.Errorf("%d renames %v, want %d", len(renamed), renamed, tc.renamed)
			}
			for _, r := range renamed {
				if tc.in[r.Cycle][r.Channel-1] != r.From || got[r.Cycle][r.Channel-1] != r.To {
					t.Errorf("rename %+v does not match the input and output", r)
				}
			}
			// The rule is idempotent: its result is unique.
			again, more := UniqueNames(got, tc.dapiAlways)
			if !reflect.DeepEqual(again, got) || len(more) != 0 {
				t.Errorf("second application changed %v", more)
			}
		})
	}
}

func TestChannelLetter(t *testing.T) {
	for i, want := range map[int]string{0: "", 1: "a", 2: "b", 26: "z", 27: "aa", 28: "ab", 52: "az", 53: "ba"} {
		if got := channelLetter(i); got != want {
			t.Errorf("channelLetter(%d) = %q, want %q", i, got, want)
		}
	}
}

// The config (the original's documented example): loads, the names
// and file names follow the rule, the renames are listed.
func TestParseAppliesRule(t *testing.T) {
	c, err := Parse("c.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.ChannelNames["1"], []string{"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("channel_names.1 = %v, want %v", got, want)
	}
	if got, want := c.ChannelNames["2"], []string{"DAPI-02", "CD31", "CD8", "CD45"}; !reflect.DeepEqual(got, want) {
		t.Errorf("channel_names.2 = %v, want %v", got, want)
	}
	want := []Rename{{1, 2, "Blank", "Blank_1a"}, {1, 3, "Blank", "Blank_1b"}, {1, 4, "Blank", "Blank_1c"}}
	if !reflect.DeepEqual(c.Renamed, want) {
		t.Errorf("renamed %+v, want %+v", c.Renamed, want)
	}
	if got := c.EDFFileName(1, 3); got != "Blank_1b.tif" {
		t.Errorf("EDFFileName(1, 3) = %q", got)
	}
	if got := RenamedText(c.Renamed); got != "channel_names.1[1] Blank -> Blank_1a; channel_names.1[2] Blank -> Blank_1b; channel_names.1[3] Blank -> Blank_1c" {
		t.Errorf("RenamedText = %q", got)
	}
}

// Every name check fails the load with the key channel_names.<cycle>[i].
func TestBadChannelNames(t *testing.T) {
	long := strings.Repeat("x", MaxFileNameBytes-len(".tif")-len("_1b")+1)
	cases := []struct{ name, names, key, msg string }{
		{"empty", `[DAPI-01, "", CD3, CD4]`, "channel_names.1[1]", "empty name"},
		{"comma", `[DAPI-01, "CD3,CD4", CD5, CD6]`, "channel_names.1[1]", "','"},
		{"hidden", `[DAPI-01, .CD3, CD5, CD6]`, "channel_names.1[1]", "starts with '.'"},
		{"white space", `[DAPI-01, " CD3", CD5, CD6]`, "channel_names.1[1]", "white space"},
		{"control", `[DAPI-01, "CD3\tx", CD5, CD6]`, "channel_names.1[1]", `'\t'`},
		{"brace", `[DAPI-01, "CD{3}", CD5, CD6]`, "channel_names.1[1]", `'{'`},
		{"too long after suffix", `[DAPI-01, ` + long + `, ` + long + `, CD6]`, "channel_names.1[2]", "bytes"},
		{"still duplicate", `[DAPI-01, Blank, Blank, Blank_1b]`, "channel_names.1[3]", `as channel_names.1[2] ("Blank_1b")`},
		{"two DAPI in cycle 1", `[DAPI, DAPI, CD3, CD4]`, "channel_names.1[1]", "after the duplicate rule"},
		{"zero-padded cycle key", "", "channel_names.01", "write it as 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(minimal, "[DAPI-01, Blank, Blank, Blank]", tc.names, 1)
			if tc.names == "" {
				text = strings.Replace(minimal, "{1: [DAPI-01", "{'01': [DAPI-01", 1)
			}
			if text == minimal {
				t.Fatal("edit did not apply")
			}
			_, err := Parse("bad.yaml", []byte(text))
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); !strings.Contains(msg, "bad.yaml") || !strings.Contains(msg, "key "+tc.key+":") || !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q, want one naming bad.yaml, key %s and %q", msg, tc.key, tc.msg)
			}
		})
	}
	if err := CheckFileName(long + "_1"); err != nil {
		t.Errorf("a %d-byte file name is refused: %v", len(long)+6, err)
	}
}
