package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Stage names: config keys, QC stages, log and sentinel suffixes.
const (
	Stitch       = "stitch"
	Decon        = "decon"
	EDF          = "edf"
	Registration = "registration"
)

// Stages are the four stage names in pipeline order.
var Stages = []string{Stitch, Decon, EDF, Registration}

// Directory and file names.
const (
	Data      = "data"
	Raw       = "raw"       // under data/
	Processed = "processed" // under data/

	StitchedDir    = "stitched"    // under data/processed/
	DeconvolvedDir = "deconvolved" // under data/processed/
	EDFDir         = "edf"         // under data/processed/
	RegisteredDir  = "registered"  // under data/processed/

	// SentinelName is the stage sentinel, written last into a stage's output
	// directory (key=value lines).
	SentinelName = ".snakemake_complete"
	// QCSentinelPrefix + stage is a QC stage's sentinel under qc_plots/.
	QCSentinelPrefix = ".snakemake_complete_"

	QCPlots    = "qc_plots"
	ReportName = "report.html" // under qc_plots/

	TilePositionsName   = "tile_positions.csv" // under stitched/cycNN/
	BaSiCDir            = "basic"              // under stitched/cycNN/CH{c}/
	RegistrationDataDir = "registration_data"  // under registered/
	RegisteredQCDir     = "qc"                 // under registered/

	// QCPlanesName and QCMaxProjName are, in a stitched or deconvolved
	// channel directory whose planes were not written (the fused cycle with
	// keep_intermediates: false), what the QC reads instead: the planes'
	// statistics (JSON) and their maximum over z (uint16 TIFF).
	QCPlanesName  = "qc_planes.json"
	QCMaxProjName = "qc_maxproj.tif"

	// DeconPlaneGlob matches the deconvolved planes of one channel directory.
	DeconPlaneGlob = "deconv_*.tif"
)

// LogDir is slurm/logs/snakemake relative to the project.
var LogDir = filepath.Join("slurm", "logs", "snakemake")

// ConfigJSON is .kintsugi/config.json relative to the project.
var ConfigJSON = filepath.Join(".kintsugi", "config.json")

// CycleLabel is the cycle number in at least two digits (1 -> "01"), the
// Snakefile's {cycle} wildcard value.
func CycleLabel(c int) string { return fmt.Sprintf("%02d", c) }

// CycleName is the original's cycle directory and file prefix (1 -> "cyc01").
func CycleName(c int) string { return cyclePrefix + CycleLabel(c) }

const cyclePrefix = "cyc"

// ChannelDir is a channel's directory name (1 -> "CH1"); channels are 1-based.
func ChannelDir(ch int) string { return fmt.Sprintf("CH%d", ch) }

// StitchedPlane is stitched plane z's file name (1-based z, 3 -> "03.tif").
func StitchedPlane(z int) string { return BaSiCStem(z) + ".tif" }

// BaSiCStem is the stem of plane z's BaSiC profiles (3 -> "03"; the files
// are <stem>_flatfield.tif and <stem>_darkfield.tif).
func BaSiCStem(z int) string { return fmt.Sprintf("%02d", z) }

// Flatfield and Darkfield are plane z's BaSiC profile file names
// (BaSiCStem + FlatfieldSuffix or DarkfieldSuffix).
func Flatfield(z int) string { return BaSiCStem(z) + FlatfieldSuffix }
func Darkfield(z int) string { return BaSiCStem(z) + DarkfieldSuffix }

// BaSiC profile file-name suffixes after BaSiCStem.
const (
	FlatfieldSuffix = "_flatfield.tif"
	DarkfieldSuffix = "_darkfield.tif"
)

// DeconPlane is deconvolved plane k's file name (1-based k, 3 -> "deconv_003.tif").
func DeconPlane(k int) string { return fmt.Sprintf("deconv_%03d.tif", k) }

// MetricsName is a cycle's metrics file name (1 -> "cyc01_metrics.json"),
// under qc_plots/<stage>/ and registered/qc/.
func MetricsName(c int) string { return CycleName(c) + "_metrics.json" }

// TransformName is a cycle's transform file name under registration_data/
// (1 -> "cyc01_transform.json").
func TransformName(c int) string { return CycleName(c) + "_transform.json" }

// RawDir is <project>/data/raw.
func RawDir(project string) string { return filepath.Join(project, Data, Raw) }

// RawCycleGlobs are the original's cycle-directory patterns for cycle n, in
// the order they are tried (the first sorted match that is a directory wins).
func RawCycleGlobs(n int) []string {
	return []string{fmt.Sprintf("cyc%03d_*", n), fmt.Sprintf("cyc%02d_*", n), fmt.Sprintf("Cyc%02d_*", n)}
}

// RawCycleNames are the exact cycle-directory names tried after RawCycleGlobs.
func RawCycleNames(n int) []string {
	return []string{fmt.Sprintf("cyc%03d", n), fmt.Sprintf("cyc%02d", n), fmt.Sprintf("Cyc%02d", n)}
}

// ResolveRawCycleDir finds the raw directory of cycle n under
// <project>/data/raw: the first existing directory of RawCycleGlobs (sorted
// matches of each pattern), then of RawCycleNames; ok is false when none
// exists.
func ResolveRawCycleDir(project string, n int) (dir string, ok bool) {
	raw := RawDir(project)
	for _, pat := range RawCycleGlobs(n) {
		m, _ := filepath.Glob(filepath.Join(raw, pat))
		sort.Strings(m)
		for _, d := range m {
			if isDir(d) {
				return d, true
			}
		}
	}
	for _, name := range RawCycleNames(n) {
		if d := filepath.Join(raw, name); isDir(d) {
			return d, true
		}
	}
	return "", false
}

// RawCycleDir is ResolveRawCycleDir's directory, else data/raw/cycNN (the
// name the synthetic generator writes; the Snakefile's input when no
// directory exists yet).
func RawCycleDir(project string, n int) string {
	if d, ok := ResolveRawCycleDir(project, n); ok {
		return d
	}
	return filepath.Join(RawDir(project), CycleName(n))
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// ProcessedDir is <project>/data/processed.
func ProcessedDir(project string) string { return filepath.Join(project, Data, Processed) }

// StageDir is the directory name of a stage's outputs under data/processed
// (stitch -> stitched, decon -> deconvolved, edf -> edf, registration ->
// registered); it panics on any other name (a programmer error).
func StageDir(stage string) string {
	switch stage {
	case Stitch:
		return StitchedDir
	case Decon:
		return DeconvolvedDir
	case EDF:
		return EDFDir
	case Registration:
		return RegisteredDir
	}
	panic(fmt.Sprintf("layout: unknown stage %q", stage))
}

// Stitched is <project>/data/processed/stitched/cycNN.
func Stitched(project string, c int) string {
	return filepath.Join(ProcessedDir(project), StitchedDir, CycleName(c))
}

// Deconvolved is <project>/data/processed/deconvolved/cycNN.
func Deconvolved(project string, c int) string {
	return filepath.Join(ProcessedDir(project), DeconvolvedDir, CycleName(c))
}

// EDFOut is <project>/data/processed/edf/cycNN.
func EDFOut(project string, c int) string {
	return filepath.Join(ProcessedDir(project), EDFDir, CycleName(c))
}

// Registered is <project>/data/processed/registered (every cycle's
// registered images in cycNN/ below it).
func Registered(project string) string { return filepath.Join(ProcessedDir(project), RegisteredDir) }

// StageOut is a stage's output directory for cycle c, the directory holding
// its sentinel: Stitched, Deconvolved or EDFOut, and Registered (c unused)
// for registration. It panics on an unknown stage.
func StageOut(project, stage string, c int) string {
	if stage == Registration {
		return Registered(project)
	}
	return filepath.Join(ProcessedDir(project), StageDir(stage), CycleName(c))
}

// Sentinel is dir/.snakemake_complete.
func Sentinel(dir string) string { return filepath.Join(dir, SentinelName) }

// StageSentinel is the sentinel of a stage's cycle c (registration: of every cycle).
func StageSentinel(project, stage string, c int) string { return Sentinel(StageOut(project, stage, c)) }

// QCDir is <project>/qc_plots.
func QCDir(project string) string { return filepath.Join(project, QCPlots) }

// QCStage is <project>/qc_plots/<stage>.
func QCStage(project, stage string) string { return filepath.Join(QCDir(project), stage) }

// QCSentinel is <project>/qc_plots/.snakemake_complete_<stage>.
func QCSentinel(project, stage string) string {
	return filepath.Join(QCDir(project), QCSentinelPrefix+stage)
}

// QCReport is <project>/qc_plots/report.html.
func QCReport(project string) string { return filepath.Join(QCDir(project), ReportName) }

// Logs is <project>/slurm/logs/snakemake.
func Logs(project string) string { return filepath.Join(project, LogDir) }

// Config is <project>/.kintsugi/config.json.
func Config(project string) string { return filepath.Join(project, ConfigJSON) }

// CycleWildcard is the Snakefile's cycle wildcard; in the Snakemake paths
// it stands where CycleLabel's value goes (cyc{cycle} = cyc01).
const CycleWildcard = "{cycle}"

// Snakemake is the layout of one project for the Snakefile (the "layout"
// object of `kintsugi-config check`): absolute paths, cycle keys the decimal
// cycle numbers ("1"), sentinel and qc_sentinel keyed by stage name.
// Sentinel paths of per-cycle stages hold CycleWildcard where the cycle
// label goes, for Snakemake's wildcards.
type Snakemake struct {
	Processed  string            `json:"processed"`   // data/processed
	QCDir      string            `json:"qc_dir"`      // qc_plots
	LogDir     string            `json:"log_dir"`     // slurm/logs/snakemake
	ConfigJSON string            `json:"config_json"` // .kintsugi/config.json
	CycleLabel map[string]string `json:"cycle_label"` // "1": "01"
	RawDir     map[string]string `json:"raw_dir"`     // "1": RawCycleDir
	Sentinel   map[string]string `json:"sentinel"`    // stage: StageSentinel, cycle as CycleWildcard
	QCSentinel map[string]string `json:"qc_sentinel"` // stage: QCSentinel
	QCReport   string            `json:"qc_report"`   // qc_plots/report.html
}

// ForSnakemake returns the layout of project (made absolute against the
// working directory, as the Snakefile's os.path.abspath does) for cycles;
// RawDir is resolved now (RawCycleDir).
func ForSnakemake(project string, cycles []int) (Snakemake, error) {
	abs, err := filepath.Abs(project)
	if err != nil {
		return Snakemake{}, fmt.Errorf("project_dir %s: %w", project, err)
	}
	s := Snakemake{Processed: ProcessedDir(abs), QCDir: QCDir(abs), LogDir: Logs(abs), ConfigJSON: Config(abs),
		CycleLabel: map[string]string{}, RawDir: map[string]string{}, Sentinel: map[string]string{},
		QCSentinel: map[string]string{}, QCReport: QCReport(abs)}
	for _, c := range cycles {
		k := strconv.Itoa(c)
		s.CycleLabel[k] = CycleLabel(c)
		s.RawDir[k] = RawCycleDir(abs, c)
	}
	for _, st := range Stages {
		if st == Registration {
			s.Sentinel[st] = Sentinel(Registered(abs))
		} else {
			s.Sentinel[st] = Sentinel(filepath.Join(s.Processed, StageDir(st), cyclePrefix+CycleWildcard))
		}
		s.QCSentinel[st] = QCSentinel(abs, st)
	}
	return s, nil
}
