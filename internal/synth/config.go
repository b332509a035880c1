package synth

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
)

// markerNames are the marker names given to channels 2.. of cycles 2..
// (channel 1 is DAPI-NN; cycle 1's other channels are Blank when
// BlankFirstCycle is set).
var markerNames = []string{
	"CD31", "CD8", "CD45", "CD4", "CD20", "Ki67", "CD68", "PanCK", "CD3e", "SMA",
	"CD11c", "HLA-DR", "FOXP3", "CD163", "Vimentin", "Collagen IV", "CD34", "LYVE1",
	"Podoplanin", "CD21", "CD35", "CD15", "CD57", "Granzyme B", "PD-1", "PD-L1",
	"CD138", "IgD", "IgM", "CD1c", "CD56", "CD206",
}

// ChannelName is the marker name of (cycle, channel): DAPI-NN for channel 1,
// Blank for the other channels of cycle 1 when BlankFirstCycle, else a marker.
func (o Options) ChannelName(cycle, ch int) string {
	switch {
	case ch == 1:
		return fmt.Sprintf("DAPI-%02d", cycle)
	case cycle == 1 && o.BlankFirstCycle:
		return "Blank"
	}
	k := (cycle-1)*(o.NChannels-1) + ch - 2
	if k < len(markerNames) {
		return markerNames[k]
	}
	return fmt.Sprintf("Marker%d", k+1)
}

// ConfigPath is the default place of the project's config: <out>/config.yaml.
func ConfigPath(projectDir string) string { return filepath.Join(projectDir, "config.yaml") }

// WriteConfig writes a config.yaml for the synthetic project with the keys of
// the original's config that the stitch stage uses (kintsugi-pipeline.md
// section 3), in that order. project_dir is the absolute OutDir; cycles and
// channels are the ones generated; channel_names lists, per cycle, the names
// of those channels in the same order; kintsugi_dir defaults to project_dir.
// Every top-level key of extra replaces the generated value (or is appended),
// e.g. extra["resources"] or extra["device"]. The write is atomic.
func WriteConfig(path string, o Options, extra map[string]any) error {
	if err := o.Validate(); err != nil {
		return err
	}
	proj, err := filepath.Abs(o.OutDir)
	if err != nil {
		return fmt.Errorf("config: project dir: %w", err)
	}
	cycles, chans := o.cycleList(), o.channelList()
	names := map[int][]string{}
	for _, cy := range cycles {
		for _, ch := range chans {
			names[cy] = append(names[cy], o.ChannelName(cy, ch))
		}
	}
	waves := map[string][]float64{}
	for c := 1; c <= o.NChannels; c++ {
		lk := look(c)
		waves[strconv.Itoa(c)] = []float64{lk.exNM, lk.emNM}
	}
	type kv struct {
		k string
		v any
	}
	keys := []kv{
		{"project_dir", proj},
		{"kintsugi_dir", proj},
		{"cycles", cycles},
		{"channels", chans},
		{"output_format", "tiff"},
		{"channel_names", names},
		{"tile_rows", o.Rows},
		{"tile_cols", o.Cols},
		{"tile_overlap", o.Overlap},
		{"xy_pixel_size", o.PixelSizeNM},
		{"z_step_size", o.ZStepNM},
		{"numerical_aperture", o.NA},
		{"tissue_refractive_index", o.RefractiveIndex},
		{"wavelengths", waves},
		{"n_zplanes", o.NZ},
		{"ncc_threshold", 0.078},
		{"pou", 0.5},
		{"blend_sigma", 15.0},
		{"basic_flatfield_min", 0.1},
		{"basic_max_iterations", 500},
		{"basic_optimization_tolerance", 1e-6},
		{"basic_max_reweight_iterations", 25},
		{"basic_reweight_tolerance", 1e-3},
		{"basic_darkfield", true},
		{"resources", map[string]any{
			// The one-node test cluster of scripts/slurm-up.sh: partitions gpu and cpu, account
			// acct_a. Memory: the Snakefile's measured defaults (MB; README memory table), not the
			// original's 48000, which a small machine cannot give.
			"accounts": []map[string]any{{
				"name": "acct_a", "gpu_slots": 1, "cpu_slots": 2, "partition_gpu": "gpu", "partition_cpu": "cpu",
			}},
			"total_gpu_slots": 1, "total_cpu_slots": 2, "total_slots": 3,
			"mem_stitch": 8000, "time_stitch": 240, "cpus_stitch": 4,
			"mem_decon": 6144, "mem_edf": 4096, "mem_registration": 4096,
			"cpu_mem_stitch": 8000, "cpu_cpus_per_task": 8, "cpu_time_multiplier": 5,
		}},
	}
	seen := map[string]bool{}
	for i := range keys {
		if v, ok := extra[keys[i].k]; ok {
			keys[i].v = v
		}
		seen[keys[i].k] = true
	}
	var rest []string
	for k := range extra {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		keys = append(keys, kv{k, extra[k]})
	}

	doc := &yaml.Node{Kind: yaml.MappingNode}
	for _, e := range keys {
		var val yaml.Node
		if err := val.Encode(e.v); err != nil {
			return fmt.Errorf("config: encode key %s: %w", e.k, err)
		}
		yaml11Floats(&val)
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: e.k}, &val)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Synthetic project written by kintsugi-synth (seed %d); truth in ground_truth/truth.json.\n", o.Seed)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("config: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("config: encode: %w", err)
	}
	return atomicfile.WriteBytes(path, b.Bytes(), 0o666)
}

// yaml11Floats rewrites floats like 1e-06 as 1.0e-06: YAML 1.1 readers
// (PyYAML, which Snakemake uses) read an exponent without a dot as a string.
func yaml11Floats(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && !strings.ContainsAny(n.Value, ".") {
		if i := strings.IndexAny(n.Value, "eE"); i > 0 {
			n.Value = n.Value[:i] + ".0" + n.Value[i:]
		}
	}
	for _, c := range n.Content {
		yaml11Floats(c)
	}
}
