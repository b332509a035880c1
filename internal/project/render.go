package project

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// Options are the config values that do not come from the project
// directory.
type Options struct {
	KintsugiDir  string           // kintsugi_dir: the checkout whose bin/ holds the executables
	Device       string           // device key; "" writes the default, gpu
	Accounts     []config.Account // resources.accounts; none: an empty list and a note
	AccountsFrom string           // where the accounts came from, for the comment
	Resources    []Override       // replace or add resources.<key> scalars (checked by the schema)
	Header       string           // first comment line, e.g. the tool and the time
}

// Override is one resources.<Key>: <Value> given by the user.
type Override struct{ Key, Value string }

// The resources the config lists, in the original's order, with its values
// (cli.py generate_workflow_config) except where this implementation has a
// default of its own: value "" is the schema's default of the key
// (config.ResourceDefault, the Snakefile's defaults; README memory table).
var resourceKeys = []struct {
	key, value, comment string
}{
	{"cpu_utilization_cap", "0.85", "the original's; unused here"},
	{"qos", `""`, "the original's; unused here"},
	{"conda_env", "kintsugi", "the original's; unused here (static executables)"},
	{"mem_stitch", "", "MB, GPU job (the original writes 48000; measured peak 4.7 GiB, production cycle)"},
	{"mem_decon", "", "MB (the original: 48000; measured 1.8 GiB under a 6 GiB budget)"},
	{"mem_edf", "", "MB (the original: 48000; measured 1.7 GiB under a 4 GiB budget)"},
	{"time_stitch", "", "minutes"},
	{"time_decon", "", "minutes"},
	{"time_edf", "", "minutes"},
	{"mem_cycle", "", "MB, the fused cycle job (fused: true; measured 7.6 GiB, production cycle)"},
	{"time_cycle", "", "minutes"},
	{"mem_registration", "", "MB (the original: 64000; measured 2.2 GiB, 13 cycles x 4 channels)"},
	{"time_registration", "", "minutes"},
	{"mem_qc_registration", "", "MB"},
	{"time_qc_registration", "", "minutes"},
	{"mem_signal_isolation", "32000", "the original's signal isolation (not a stage here)"},
	{"time_signal_isolation", "120", ""},
	{"cpus_signal_isolation", "4", ""},
	{"time_qc_signal_isolation", "60", ""},
	{"cpu_cpus_per_task", "8", "the original's CPU jobs; GPU-only scheduling here"},
	{"cpu_time_multiplier", "5", ""},
	{"cpu_mem_stitch", "48000", ""},
	{"cpu_mem_decon", "128000", ""},
	{"cpu_mem_edf", "96000", ""},
	{"cpu_mem_registration", "64000", ""},
	{"cpus_stitch", "", "this project's: cpus_per_task of each job (worker pool)"},
	{"cpus_decon", "", ""},
	{"cpus_cycle", "", ""},
	{"cpus_edf", "", ""},
	{"cpus_registration", "", ""},
	{"cpus_qc", "", "QC jobs run on the CPU partition"},
	{"mem_qc", "", "MB (not written by the original; its Snakefile's default)"},
	{"time_qc", "", "minutes"},
	{"mem_qc_report", "", "MB, this project's qc_report job"},
	{"time_qc_report", "", "minutes"},
}

// Config renders the project's config.yaml and loads it with config.Parse
// (path is used in messages), so what it returns passes the schema and every
// channel-name rule. It returns the text and the loaded config.
func (p *Project) Config(path string, o Options) ([]byte, *config.Config, error) {
	if o.KintsugiDir == "" {
		return nil, nil, fmt.Errorf("project: no kintsugi_dir")
	}
	y := &yamlWriter{}
	p.writeTop(y, o)
	p.writeOptics(y)
	writeStitching(y)
	p.writeStages(y)
	if err := writeResources(y, o); err != nil {
		return nil, nil, err
	}
	text := []byte(y.b.String())
	cfg, err := config.Parse(path, text)
	if err != nil {
		return nil, nil, err
	}
	// The names written are the original's unique ones: the loader keeps them.
	if len(cfg.Renamed) > 0 {
		return nil, nil, fmt.Errorf("project: internal error: the loader renamed written names: %s", config.RenamedText(cfg.Renamed))
	}
	return text, cfg, nil
}

// yamlWriter collects the config's lines.
type yamlWriter struct{ b strings.Builder }

// line writes one line, with its comment padded to column 40 when there is one.
func (y *yamlWriter) line(line, comment string) {
	if comment == "" {
		y.b.WriteString(line + "\n")
		return
	}
	pad := max(40-len(line), 2)
	y.b.WriteString(line + strings.Repeat(" ", pad) + "# " + comment + "\n")
}

// from is the comment naming where config key k's value came from.
func (p *Project) from(k string) string { return "from " + p.From[k] }

// writeTop writes the header, the project and executable keys, cycles,
// channels and channel names.
func (p *Project) writeTop(y *yamlWriter, o Options) {
	w, from := y.line, p.from
	if o.Header != "" {
		w("# "+o.Header, "")
	}
	w("# KINTSUGI-Go pipeline config for "+p.Dir+", generated from its metadata as the original's", "")
	w("# `kintsugi workflow config` does (every key it writes, with its defaults). Check it with", "")
	w("# `kintsugi-config check config.yaml`; each key's meaning: internal/config/schema/config.schema.json.", "")
	w("", "")
	w("project_dir: "+str(p.Dir), "absolute path; data/raw/ holds the raw tiles")
	w("kintsugi_dir: "+str(o.KintsugiDir), "the checkout whose bin/ holds the executables")
	dev := o.Device
	if dev == "" {
		dev = "gpu"
	}
	w("device: "+str(dev), "gpu (GPU-only scheduling) | cpu (reference path, only when asked for)")
	w("live: false", "true: place cycles by live GPU availability (squeue)")
	w("", "")
	w("cycles: "+ints(p.Cycles), from("cycles"))
	w("channels: "+ints(p.Channels), from("channels")+"; CH1 = DAPI")
	w("output_format: tiff", "")
	if p.Names == nil || len(p.Names.Names) == 0 {
		w("channel_names: {}", from("channel_names"))
	} else {
		w("channel_names:", from("channel_names"))
		for _, c := range slices.Sorted(maps.Keys(p.Names.Names)) {
			comment := ""
			if !slices.Equal(p.Names.Names[c], p.Names.Raw[c]) {
				comment = "as written: " + strings.Join(p.Names.Raw[c], ", ")
			}
			w(fmt.Sprintf("  %d: %s", c, strs(p.Names.Names[c])), comment)
		}
	}
	w("", "")
}

// writeOptics writes the tile grid and the optics of the experiment.
func (p *Project) writeOptics(y *yamlWriter) {
	w, from, e := y.line, p.from, p.Experiment
	w("# Tile grid (acquired in snake order) and optics", "")
	w("tile_rows: "+strconv.Itoa(e.TileRows), from("tile_rows"))
	w("tile_cols: "+strconv.Itoa(e.TileCols), from("tile_cols"))
	w("tile_overlap: "+num(e.TileOverlap), "fraction; "+from("tile_overlap"))
	w("xy_pixel_size: "+num(e.XYPixelSize), "nm; "+from("xy_pixel_size"))
	w("z_step_size: "+num(e.ZStepSize), "nm; "+from("z_step_size"))
	w("numerical_aperture: "+num(e.NA), from("numerical_aperture"))
	w("tissue_refractive_index: "+num(e.RefractiveIndex), from("tissue_refractive_index"))
	w("wavelengths:", "channel -> [excitation, emission] nm; "+from("wavelengths"))
	for _, c := range slices.Sorted(maps.Keys(e.Wavelengths)) {
		wl := e.Wavelengths[c]
		w(fmt.Sprintf("  '%d': [%s, %s]", c, num(wl[0]), num(wl[1])), "")
	}
	w("n_zplanes: "+strconv.Itoa(p.NZPlanes), from("n_zplanes")+"; the stitch stage checks it")
	w("", "")
}

// writeStitching writes the stitch and BaSiC keys (fixed quality parameters).
func writeStitching(y *yamlWriter) {
	w := y.line
	w("# Stitching and BaSiC (fixed quality parameters: the schema refuses lower ones)", "")
	w("ncc_threshold: 0.078", "initial NCC threshold of tile translations")
	w("pou: 0.5", "percent overlap uncertainty")
	w("blend_sigma: "+num(config.DefaultBlendSigma), "sigmoid taper width, px")
	w("basic_flatfield_min: "+num(config.DefaultFlatfieldMin), "")
	w("basic_max_iterations: 500", "")
	w("basic_optimization_tolerance: 1.0e-6", "")
	w("basic_max_reweight_iterations: 25", "this project's key; the original's fixed value")
	w("basic_reweight_tolerance: 1.0e-3", "this project's key; the original's fixed value")
	w("basic_darkfield: true", "this project's key; always on")
	w("boundary_qc_enabled: true", "the original's post-stitch boundary QC; accepted, not implemented here")
	w("boundary_qc_threshold: 0.65", "")
	w("boundary_qc_max_alternates: 4", "")
	w("", "")
}

// writeStages writes the sections of the later stages (edf, decon,
// registration, quality_gate) with their defaults and the original's keys
// this project accepts without a stage (signal_isolation, redsea, vessel3d,
// optional_stages).
func (p *Project) writeStages(y *yamlWriter) {
	w, from := y.line, p.from
	ed := config.DefaultEDF()
	w("edf:", "extended depth of field (the original's keys + method)")
	w("  radius_x: "+strconv.Itoa(ed.RadiusX), "px; variance window 2r+1")
	w("  radius_y: "+strconv.Itoa(ed.RadiusY), "px")
	w("  sigma: "+num(ed.Sigma), "Gaussian pre-filter, px")
	w("  tiles: "+ints(ed.Tiles), "accepted; whole planes are processed")
	w("  blend_depth: "+strconv.Itoa(ed.BlendDepth), "")
	w("  z_smooth_sigma: "+num(ed.ZSmoothSigma), "px")
	w("  method: "+str(ed.Method), "variance (the original's) | wavelet")
	dc := config.DefaultDecon()
	w("decon:", "this project's keys; the original hard-codes these values")
	w("  psf_model: "+str(dc.PSFModel), "lightsheet (the original's) | widefield")
	w("  algorithm: "+str(dc.Algorithm), "richardson_lucy (the original's) | biggs_andrews")
	w("  iterations: "+strconv.Itoa(dc.Iterations), "at most")
	w("  stop_criterion: "+num(dc.StopCriterion), "percent")
	w("  damping: "+num(dc.Damping), "")
	w("  hist_clip: "+num(dc.HistClip), "percent")
	w("  slit_aperture: "+num(dc.SlitAperture), "mm")
	w("  f_cyl: "+num(dc.FCyl), "mm")
	w("signal_isolation:", "the original's downstream stage; accepted, not a stage here")
	w("  method: auto", "")
	w("  tissue_type: "+str(p.TissueType), from("signal_isolation.tissue_type"))
	w("  tile_smooth_sigma: 0.0", "")
	w(`  recipe_dir: ""`, "")
	w("  learn: true", "")
	w("  force: false", "")
	rg := config.DefaultRegistration()
	w("registration:", "")
	w("  reference_cycle: "+strconv.Itoa(rg.ReferenceCycle), "")
	w("  reference_channel: "+strconv.Itoa(rg.ReferenceChannel), "")
	w("  max_image_dim: "+strconv.Itoa(rg.MaxImageDim), "px, rigid working resolution")
	w("  rigid_only: "+strconv.FormatBool(rg.RigidOnly), "")
	w("  feature_detector: "+str(rg.FeatureDetector), "accepted; unused")
	w("  imgs_ordered: "+strconv.FormatBool(rg.ImgsOrdered), "")
	w("  align_to_reference: "+strconv.FormatBool(rg.AlignToReference), "")
	w("  normalize_dimensions: "+strconv.FormatBool(rg.NormalizeDimensions), "")
	w("  non_rigid:", "")
	w("    max_dim: "+strconv.Itoa(rg.NonRigid.MaxDim), "px")
	w("    smoothing_method: "+str(rg.NonRigid.SmoothingMethod), "")
	w("    sigma_ratio: "+num(rg.NonRigid.SigmaRatio), "of max_dim")
	w("    n_grid_pts: "+strconv.Itoa(rg.NonRigid.NGridPts), "")
	w("    fold_penalty: "+num(rg.NonRigid.FoldPenalty), "")
	qg := config.DefaultQualityGate()
	w("quality_gate:", "EDF: slices with more zeros or saturated pixels are left out")
	w("  max_zero_pct: "+num(qg.MaxZeroPct), "fraction")
	w("  max_sat_pct: "+num(qg.MaxSatPct), "fraction of pixels >= 64000")
	w("  min_valid_slices: "+strconv.Itoa(qg.MinValidSlices), "")
	w("redsea:", "the original's spillover correction; accepted, not a stage here")
	w("  element_shape: star", "")
	w("  element_size: 0", "")
	w("  markers_of_interest: []", "")
	w("vessel3d:", "the original's 3D vessel segmentation; accepted, not a stage here")
	w("  channel: 2", "")
	w("  marker: CD31", "")
	w("  sigmas: [1, 2, 4, 8]", "")
	w("  min_size: 500", "")
	w("  prune_min_um: 5.0", "")
	w("optional_stages:", "")
	w("  vessel3d:", "")
	w("    enabled: false", "")
	w("    cycles: []", "")
	w("  spillover:", "")
	w("    enabled: false", "")
	w("", "")
}

// writeResources writes resources: the accounts, their slot totals, the
// original's keys with this project's values and the --resource overrides.
func writeResources(y *yamlWriter, o Options) error {
	w := y.line
	w("resources:", "")
	overrides := map[string]string{}
	for _, ov := range o.Resources {
		if ov.Key == "accounts" || ov.Key == "" {
			return fmt.Errorf("resources.%s cannot be set this way", ov.Key)
		}
		v, err := scalar(ov.Value)
		if err != nil {
			return fmt.Errorf("resources.%s: %w", ov.Key, err)
		}
		overrides[ov.Key] = v
	}
	if len(o.Accounts) == 0 {
		w("  accounts: []", "none given: add yours (`kintsugi-assign discover` prints the block)")
	} else {
		w("  accounts:", "from "+o.AccountsFrom)
		for _, a := range o.Accounts {
			line := fmt.Sprintf("    - {name: %s, gpu_slots: %d", str(a.Name), a.GPUSlots)
			if a.CPUSlots > 0 {
				line += fmt.Sprintf(", cpu_slots: %d", a.CPUSlots)
			}
			if a.PartitionGPU != "" {
				line += ", partition_gpu: " + str(a.PartitionGPU)
			}
			if a.PartitionCPU != "" {
				line += ", partition_cpu: " + str(a.PartitionCPU)
			}
			w(line+"}", "")
		}
	}
	gpu, cpu := 0, 0
	for _, a := range o.Accounts {
		gpu += a.GPUSlots
		cpu += a.CPUSlots
	}
	totals := []struct{ key, value, comment string }{
		{"total_gpu_slots", strconv.Itoa(gpu), "sum of gpu_slots (the original's; informational)"},
		{"total_cpu_slots", strconv.Itoa(cpu), ""},
		{"total_slots", strconv.Itoa(gpu + cpu), ""},
	}
	written := map[string]bool{}
	for _, r := range append(totals, resourceKeys...) {
		v, c := r.value, r.comment
		if v == "" {
			n, err := config.ResourceDefault(r.key)
			if err != nil {
				return fmt.Errorf("project: internal error: %w", err)
			}
			v = strconv.Itoa(n)
		}
		if ov, ok := overrides[r.key]; ok {
			v, c = ov, "given with --resource"
		}
		w("  "+r.key+": "+v, c)
		written[r.key] = true
	}
	for _, ov := range o.Resources {
		if !written[ov.Key] {
			w("  "+ov.Key+": "+overrides[ov.Key], "given with --resource")
			written[ov.Key] = true
		}
	}
	return nil
}

// plain is what a YAML 1.1 and 1.2 reader both take as the same plain string.
var plain = regexp.MustCompile(`^[A-Za-z_/][A-Za-z0-9_./+-]*$`)

// str renders a string scalar: plain where both YAML 1.1 (PyYAML, the
// Snakefile) and 1.2 read it back as the same string, else JSON-quoted.
func str(s string) string {
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf":
		return strconv.Quote(s)
	}
	if plain.MatchString(s) {
		return s
	}
	q, _ := json.Marshal(s)
	return string(q)
}

func strs(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = str(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func ints(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// num renders a float so that YAML 1.1 (PyYAML) reads a float too: with a
// '.' in the mantissa and a signed exponent (1.0e-06, 15.0).
func num(x float64) string {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	mant, exp, hasExp := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	if !hasExp {
		return mant
	}
	if !strings.HasPrefix(exp, "-") && !strings.HasPrefix(exp, "+") {
		exp = "+" + exp
	}
	return mant + "e" + exp
}

// scalar renders a --resource value: an integer, a number or a string.
func scalar(v string) (string, error) {
	if v == "" {
		return `""`, nil
	}
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return v, nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return num(f), nil
	}
	if strings.ContainsAny(v, "\n\r") {
		return "", fmt.Errorf("%q: one line, please", v)
	}
	return str(v), nil
}
