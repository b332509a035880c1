// Package config loads and validates the pipeline's config.yaml: the keys of
// the original KINTSUGI workflow config (see schema/config.schema.json, which
// the Snakefile validates against too) plus this project's additions.
//
// The schema describes every key and is the one home of every default: the
// loader's defaults (Parse, the Default* values) equal the schema's (a test
// checks both ways), and the job resources (resources.cpus_, mem_, time_<job>),
// which no Go field types, are read from it by the Snakefile's rules and by
// ResourceDefault.
//
// Units: xy_pixel_size and z_step_size in nm, wavelengths in nm, tile_overlap a
// fraction in (0, 1), pou in percent of the tile size, blend_sigma in px,
// mem_* in MB, time_* in minutes.
//
// Loading is bounded (raw.go): a regular file of at most MaxFileBytes, one
// YAML document without anchors, aliases, merge keys or duplicate keys, and caps on
// nodes, keys per mapping and depth, so parsing is linear in the file.
// CheckRaw applies those rules alone (kintsugi-config check --raw).
package config

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed schema/config.schema.json
var schemaJSON []byte

// SchemaJSON returns the JSON schema every config must satisfy.
func SchemaJSON() []byte { return bytes.Clone(schemaJSON) }

// Account is one SLURM account of resources.accounts.
type Account struct {
	Name         string `json:"name"`
	GPUSlots     int    `json:"gpu_slots"`
	CPUSlots     int    `json:"cpu_slots,omitempty"`
	PartitionGPU string `json:"partition_gpu,omitempty"`
	PartitionCPU string `json:"partition_cpu,omitempty"`
}

// LiveAccount is live availability of one account (config key live_accounts).
type LiveAccount struct {
	Name       string   `json:"name"`
	GPUAvail   *int     `json:"gpu_avail,omitempty"`
	CPUAvail   *int     `json:"cpu_avail,omitempty"`
	MemAvailGB *float64 `json:"mem_avail_gb,omitempty"`
}

// Resources is the resources section (only the keys the Go side uses are
// typed; the schema checks all of them).
type Resources struct {
	Accounts     []Account `json:"accounts"`
	AccountGPU   string    `json:"account_gpu"`
	PartitionGPU string    `json:"partition_gpu"`
	AccountCPU   string    `json:"account_cpu"`
	PartitionCPU string    `json:"partition_cpu"`
	Account      string    `json:"account"`
	GPUSlots     int       `json:"gpu_slots"`
	CPUsStitch   int       `json:"cpus_stitch"`
}

// Config is a validated config.yaml.
type Config struct {
	Path                       string               `json:"-"`
	ProjectDir                 string               `json:"project_dir"`
	KintsugiDir                string               `json:"kintsugi_dir"`
	Device                     string               `json:"device"`
	Cycles                     []int                `json:"cycles"`
	Channels                   []int                `json:"channels"`
	ChannelNames               map[string][]string  `json:"channel_names"`
	TileRows                   int                  `json:"tile_rows"`
	TileCols                   int                  `json:"tile_cols"`
	TileOverlap                float64              `json:"tile_overlap"`
	XYPixelSize                float64              `json:"xy_pixel_size"`
	ZStepSize                  float64              `json:"z_step_size"`
	NumericalAperture          float64              `json:"numerical_aperture"`
	TissueRefractiveIndex      float64              `json:"tissue_refractive_index"`
	Wavelengths                map[string][]float64 `json:"wavelengths"`
	NZPlanes                   int                  `json:"n_zplanes"`
	NCCThreshold               float64              `json:"ncc_threshold"`
	POU                        float64              `json:"pou"`
	BlendSigma                 float64              `json:"blend_sigma"`
	BasicFlatfieldMin          float64              `json:"basic_flatfield_min"`
	BasicMaxIterations         int                  `json:"basic_max_iterations"`
	BasicOptimizationTolerance float64              `json:"basic_optimization_tolerance"`
	BasicMaxReweight           int                  `json:"basic_max_reweight_iterations"`
	BasicReweightTolerance     float64              `json:"basic_reweight_tolerance"`
	BasicDarkfield             bool                 `json:"basic_darkfield"`
	Stitching                  Stitching            `json:"stitching"`
	Decon                      Decon                `json:"decon"`
	EDF                        EDF                  `json:"edf"`
	QualityGate                QualityGate          `json:"quality_gate"`
	Registration               Registration         `json:"registration"`
	Fused                      bool                 `json:"fused"`              // one job per cycle (the Snakefile's rule cycle)
	KeepIntermediates          bool                 `json:"keep_intermediates"` // the fused cycle writes the stitched and deconvolved planes
	Live                       bool                 `json:"live"`               // place cycles with live availability from squeue (kintsugi-assign)
	LiveAccounts               []LiveAccount        `json:"-"`
	Resources                  Resources            `json:"resources"`
	Renamed                    []Rename             `json:"-"` // channel names changed by the duplicate rule (names.go)
}

// Stitching is the stitching section (this project's keys). Defaults:
// DefaultStitching.
type Stitching struct {
	// GlobalRefinement: tile positions by robust least squares over all
	// accepted neighbour pairs (align.Params.Global) instead of the
	// original's spanning tree alone.
	GlobalRefinement bool `json:"global_refinement"`
	// ProfileMode is how the illumination profiles are estimated:
	// "compatible" (the original's BaSiC, basic.ModeCompatible) or
	// "envelope_darkfield" (basic.ModeEnvelopeDarkfield); parse it with
	// basic.ParseProfileMode.
	ProfileMode string `json:"profile_mode"`
}

// DefaultStitching returns the stitching defaults: global refinement on
// (README, Accuracy: it places every accepted pair within 0.5 px of its
// NCC optimum and never did worse than the tree) and the compatible
// profile mode (the original's BaSiC).
func DefaultStitching() Stitching {
	return Stitching{GlobalRefinement: true, ProfileMode: "compatible"}
}

// Decon is the decon section (this project's keys; the original hard-codes
// the same values in its deconvolve script). Defaults: DefaultDecon.
type Decon struct {
	PSFModel       string  `json:"psf_model"`        // "lightsheet" (the original's) or "widefield"
	Algorithm      string  `json:"algorithm"`        // "richardson_lucy" (the original's), "biggs_andrews" or "richardson_lucy_tv"
	Iterations     int     `json:"iterations"`       // maximum iterations
	StopCriterion  float64 `json:"stop_criterion"`   // percent
	Damping        float64 `json:"damping"`          // lambda in [0, 1]
	HistClip       float64 `json:"hist_clip"`        // percent clipped at each end
	TVLambda       float64 `json:"tv_lambda"`        // λ_TV of richardson_lucy_tv, [0, 0.2]; 0 = 0.002 (decon.DefaultTV); an error with another algorithm
	Boundary       string  `json:"boundary"`         // "mirror" (the original's padding) or "free" (Bertero-Boccacci: unknown object beyond the edges)
	SlitAperture   float64 `json:"slit_aperture"`    // mm
	FCyl           float64 `json:"f_cyl"`            // mm
	MemoryBudgetMB int     `json:"memory_budget_mb"` // GPU memory the whole run may use, MB (larger stacks stream through the card in y-slabs); 0 = free memory less a margin
	MeasuredPSF            // psf_file and its keys (psf.go)
}

// DefaultDecon returns the original's deconvolution settings, except
// boundary: free (the original's mirror padding is boundary: mirror), which
// is closer to the truth on every channel this project measured (README,
// Deconvolution accuracy).
func DefaultDecon() Decon {
	return Decon{PSFModel: "lightsheet", Algorithm: "richardson_lucy", Iterations: 25, StopCriterion: 5.0,
		Damping: 0, HistClip: 0.01, SlitAperture: 6.5, FCyl: 1.0, Boundary: "free"}
}

// EDF is the edf section (the original's keys plus method and
// wavelet_levels). Defaults: DefaultEDF.
type EDF struct {
	RadiusX       int     `json:"radius_x"`       // px; variance window is (2r+1) wide
	RadiusY       int     `json:"radius_y"`       // px
	Sigma         float64 `json:"sigma"`          // Gaussian pre-filter sigma, px
	Tiles         []int   `json:"tiles"`          // the original's tiling; accepted, not needed (whole-plane processing)
	BlendDepth    int     `json:"blend_depth"`    // accepted for compatibility; 0 (off) in the original's config
	ZSmoothSigma  float64 `json:"z_smooth_sigma"` // Gaussian sigma of the index-map smoothing, px
	Method        string  `json:"method"`         // "variance" (the original's) or "wavelet"
	WaveletLevels int     `json:"wavelet_levels"` // 0 = from the image size
}

// DefaultEDF returns the original's EDF settings.
func DefaultEDF() EDF {
	return EDF{RadiusX: 2, RadiusY: 2, Sigma: 10, Tiles: []int{3, 3}, ZSmoothSigma: 1.0, Method: "variance"}
}

// QualityGate is the quality_gate section: slices with more than
// MaxZeroPct zeros or more than MaxSatPct pixels >= 64000 (fractions) are
// excluded from EDF; fewer than MinValidSlices valid slices fail a channel.
type QualityGate struct {
	MaxZeroPct     float64 `json:"max_zero_pct"`
	MaxSatPct      float64 `json:"max_sat_pct"`
	MinValidSlices int     `json:"min_valid_slices"`
}

// DefaultQualityGate returns the original's gate.
func DefaultQualityGate() QualityGate {
	return QualityGate{MaxZeroPct: 0.10, MaxSatPct: 0.05, MinValidSlices: 3}
}

// Registration is the registration section (the original's keys).
type Registration struct {
	ReferenceCycle      int      `json:"reference_cycle"`
	ReferenceChannel    int      `json:"reference_channel"`
	MaxImageDim         int      `json:"max_image_dim"` // rigid working resolution, px (longest side)
	RigidOnly           bool     `json:"rigid_only"`
	FeatureDetector     string   `json:"feature_detector"` // accepted for compatibility; unused
	ImgsOrdered         bool     `json:"imgs_ordered"`
	AlignToReference    bool     `json:"align_to_reference"`
	NormalizeDimensions bool     `json:"normalize_dimensions"`
	NonRigid            NonRigid `json:"non_rigid"`
}

// NonRigid is registration.non_rigid.
type NonRigid struct {
	MaxDim          int     `json:"max_dim"`          // non-rigid working resolution, px (longest side)
	SmoothingMethod string  `json:"smoothing_method"` // "gauss"
	SigmaRatio      float64 `json:"sigma_ratio"`      // smoothing sigma as a fraction of MaxDim
	NGridPts        int     `json:"n_grid_pts"`
	FoldPenalty     float64 `json:"fold_penalty"`
}

// DefaultRegistration returns the values of the original's generated config
// (max_image_dim 4096, non-rigid on, sigma 0.01 of 4096 px).
func DefaultRegistration() Registration {
	return Registration{ReferenceCycle: 1, ReferenceChannel: 1, MaxImageDim: 4096, FeatureDetector: "VggFD",
		ImgsOrdered: true, AlignToReference: true, NormalizeDimensions: true,
		NonRigid: NonRigid{MaxDim: 4096, SmoothingMethod: "gauss", SigmaRatio: 0.01, NGridPts: 50, FoldPenalty: 1e-6}}
}

// ChannelMarker returns the marker name of channel ch (1-based) of cycle:
// channel_names[cycle][ch-1] after the duplicate rule (UniqueNames), else "".
func (c *Config) ChannelMarker(cycle, ch int) string {
	names := c.ChannelNames[strconv.Itoa(cycle)]
	if ch < 1 || ch > len(names) {
		return ""
	}
	return names[ch-1]
}

// EDFFileName is the original's EDF output name of a channel: the marker
// name (ChannelMarker, after the duplicate rule) with '/' and ' ' replaced by
// '_' (FileStem), plus ".tif"; "CH{c}_edf.tif" when the cycle has no channel
// names. Every stage's per-channel file name is this one.
func (c *Config) EDFFileName(cycle, ch int) string {
	m := c.ChannelMarker(cycle, ch)
	if m == "" {
		return fmt.Sprintf("CH%d_edf.tif", ch)
	}
	return FileStem(m) + ".tif"
}

// Wavelength returns the [excitation, emission] wavelengths of channel ch
// in nm, or an error naming the key when they are missing.
func (c *Config) Wavelength(ch int) (ex, em float64, err error) {
	w, ok := c.Wavelengths[strconv.Itoa(ch)]
	if !ok || len(w) != 2 {
		return 0, 0, &Error{File: c.Path, Key: fmt.Sprintf("wavelengths.%d", ch), Msg: "missing: want [excitation, emission] in nm for this channel"}
	}
	return w[0], w[1], nil
}

// Defaults for optional keys (the original's values).
const (
	DefaultBlendSigma   = 15.0
	DefaultFlatfieldMin = 0.1
	DefaultCPUsStitch   = 4
	DefaultPartitionGPU = "hpg-b200,hpg-turin"
	DefaultPartitionCPU = "hpg-default"
)

// Error is a configuration error; it names the file and the key.
type Error struct {
	File string
	Key  string // dotted path, e.g. resources.accounts[0].gpu_slots; "" for the whole file
	Msg  string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("config %s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("config %s: key %s: %s", e.File, e.Key, e.Msg)
}

// Errors is a list of configuration errors, all reported at once.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Load reads, validates and decodes a config file (the file and its YAML
// are bounded first: see CheckRaw).
func Load(path string) (*Config, error) {
	return LoadContext(context.Background(), path)
}

// Parse validates and decodes config data; path is used in messages only.
// The YAML is held to CheckRaw's rules (no aliases or duplicate keys,
// bounded nodes, keys and depth); data longer than MaxFileBytes is refused.
func Parse(path string, data []byte) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file is larger than the %d-byte (1 MiB) limit on a config", MaxFileBytes)}
	}
	raw, err := parseYAML(path, data)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, &Error{File: path, Msg: "empty file; see the documented example config.yaml"}
	}
	inst, err := jsonLike(raw, "")
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	if errs := validateSchema(path, inst); len(errs) > 0 {
		return nil, errs
	}
	buf, err := json.Marshal(inst)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	cfg := &Config{Path: path, Device: "gpu", BlendSigma: DefaultBlendSigma, BasicFlatfieldMin: DefaultFlatfieldMin,
		BasicMaxIterations: 500, BasicOptimizationTolerance: 1e-6, BasicMaxReweight: 25, BasicReweightTolerance: 1e-3,
		BasicDarkfield: true, Stitching: DefaultStitching(), Decon: DefaultDecon(), EDF: DefaultEDF(), QualityGate: DefaultQualityGate(),
		Registration: DefaultRegistration(), Fused: true, KeepIntermediates: true}
	if err := json.Unmarshal(buf, cfg); err != nil {
		return nil, &Error{File: path, Msg: "decode: " + err.Error()}
	}
	if m, ok := inst.(map[string]any); ok {
		if la, ok := m["live_accounts"]; ok {
			if cfg.LiveAccounts, err = parseLive(la); err != nil {
				return nil, &Error{File: path, Key: "live_accounts", Msg: err.Error() + `; want a list of {name, gpu_avail, cpu_avail, mem_avail_gb} or that list as a JSON string`}
			}
		}
	}
	if cfg.Resources.CPUsStitch == 0 {
		cfg.Resources.CPUsStitch = DefaultCPUsStitch
	}
	for i := range cfg.Resources.Accounts {
		a := &cfg.Resources.Accounts[i]
		if a.PartitionGPU == "" {
			a.PartitionGPU = DefaultPartitionGPU
		}
		if a.PartitionCPU == "" {
			a.PartitionCPU = DefaultPartitionCPU
		}
	}
	if errs := cfg.check(); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// check holds the rules a JSON schema cannot express; it also applies the
// channel-name rule (resolveChannelNames).
func (c *Config) check() Errors {
	errs := c.resolveChannelNames()
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{File: c.Path, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for k, names := range c.ChannelNames {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			add("channel_names."+k, "cycle key %q: want a cycle number", k)
			continue
		}
		if len(names) != 0 && len(names) != len(c.Channels) {
			add("channel_names."+k, "%d names for %d channels: want one name per channel", len(names), len(c.Channels))
		}
	}
	for k := range c.Wavelengths {
		if n, err := strconv.Atoi(k); err != nil || n < 1 {
			add("wavelengths."+k, "channel key %q: want a channel number", k)
		}
	}
	errs = append(errs, c.checkPSFFile()...)
	seen := map[string]bool{}
	for i, a := range c.Resources.Accounts {
		key := fmt.Sprintf("resources.accounts[%d].name", i)
		if seen[a.Name] {
			add(key, "account %q listed twice", a.Name)
		}
		seen[a.Name] = true
	}
	return errs
}

// validateSchema checks inst against the embedded schema and turns every
// violation into an Error naming the key.
func validateSchema(path string, inst any) Errors {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		panic("config: embedded schema: " + err.Error())
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("config.schema.json", doc); err != nil {
		panic("config: embedded schema: " + err.Error())
	}
	sch, err := comp.Compile("config.schema.json")
	if err != nil {
		panic("config: embedded schema: " + err.Error())
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return Errors{{File: path, Msg: err.Error()}}
	}
	var errs Errors
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			msg := describe(e)
			if d := schemaDescription(doc, e.InstanceLocation); d != "" && len(e.InstanceLocation) > 0 {
				msg += " (expected: " + d + ")"
			}
			errs = append(errs, &Error{File: path, Key: keyPath(e.InstanceLocation), Msg: msg})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Key < errs[j].Key })
	return errs
}

var printer = message.NewPrinter(language.English)

// describe renders one schema violation with the expected form.
func describe(e *jsonschema.ValidationError) string {
	msg := e.ErrorKind.LocalizedString(printer)
	if strings.HasPrefix(msg, "missing propert") {
		return msg + " (required keys: see config.yaml)"
	}
	return msg
}

// schemaDescription finds the schema's description of the value at loc
// (following properties, items, additionalProperties and local $refs).
func schemaDescription(doc any, loc []string) string {
	root, _ := doc.(map[string]any)
	cur := root
	for _, p := range loc {
		if cur == nil {
			return ""
		}
		if ref, ok := cur["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
			defs, _ := root["$defs"].(map[string]any)
			cur, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		if props, ok := cur["properties"].(map[string]any); ok && props[p] != nil {
			cur, _ = props[p].(map[string]any)
		} else if items, ok := cur["items"].(map[string]any); ok {
			cur = items
		} else if ap, ok := cur["additionalProperties"].(map[string]any); ok {
			cur = ap
		} else {
			return ""
		}
	}
	if cur == nil {
		return ""
	}
	d, _ := cur["description"].(string)
	return d
}

// keyPath renders an instance location as a dotted key path.
func keyPath(loc []string) string {
	var b strings.Builder
	for _, p := range loc {
		if _, err := strconv.Atoi(p); err == nil && b.Len() > 0 {
			fmt.Fprintf(&b, "[%s]", p)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	if b.Len() == 0 {
		return "(top level)"
	}
	return b.String()
}

// jsonLike converts a YAML value to the JSON data model: map keys become
// strings (channel_names uses integer keys), integers become int64 or float64.
func jsonLike(v any, at string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			c, err := jsonLike(x, at+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			ks := fmt.Sprint(k)
			c, err := jsonLike(x, at+"."+ks)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			c, err := jsonLike(x, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case int:
		return int64(t), nil
	case uint64:
		return float64(t), nil
	case nil, bool, string, int64, float64:
		return t, nil
	default:
		return nil, fmt.Errorf("key %s: unsupported YAML value %v (%T)", strings.TrimPrefix(at, "."), v, v)
	}
}

// parseLive accepts live_accounts as a list or a JSON string of a list.
func parseLive(v any) ([]LiveAccount, error) {
	var buf []byte
	if s, ok := v.(string); ok {
		buf = []byte(s)
	} else {
		var err error
		if buf, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var out []LiveAccount
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("invalid live account data: %v", err)
	}
	for i, la := range out {
		if la.Name == "" {
			return nil, fmt.Errorf("entry %d has no name", i)
		}
	}
	return out, nil
}

// ParseLiveAccounts parses live availability given as a JSON list.
func ParseLiveAccounts(s string) ([]LiveAccount, error) { return parseLive(s) }
