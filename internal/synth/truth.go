package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TruthSchemaVersion is the version of truth.json written by this package.
const TruthSchemaVersion = 1

// Truth is the content of ground_truth/truth.json. File names are relative to
// the ground_truth directory. Positions are px; z values are 1-based planes.
type Truth struct {
	SchemaVersion int     `json:"schema_version"`
	Generator     string  `json:"generator"`
	Seed          uint64  `json:"seed"`
	Grid          Grid    `json:"grid"`
	TileHeight    int     `json:"tile_height"` // px
	TileWidth     int     `json:"tile_width"`  // px
	Overlap       float64 `json:"overlap"`     // fraction
	PixelSizeNM   float64 `json:"pixel_size_nm"`
	ZStepNM       float64 `json:"z_step_nm"`
	NA            float64 `json:"numerical_aperture"`
	RefractiveIdx float64 `json:"refractive_index"`
	NZPlanes      int     `json:"n_zplanes"`
	RefZ          int     `json:"ref_z"` // n_zplanes // 2, 1-based: the plane of the truth scenes
	Focus         Focus   `json:"focus"`
	Noise         Noise   `json:"noise"`
	EmptyTiles    []int   `json:"empty_tiles"` // tile numbers (1-based) whose centre is off tissue
	// Generated lists what the writing run wrote (a subset of cycles and
	// channels may have been asked for); Cycles and Channels describe the
	// whole experiment.
	Generated Generated      `json:"generated"`
	Cycles    []CycleTruth   `json:"cycles"`
	Channels  []ChannelTruth `json:"channels"`
}

// Grid is the tile grid; order "snake" (see SnakeRowCol).
type Grid struct {
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
	Order string `json:"order"`
}

// Focus describes the focal surface. ZMin, ZMax, ZMean are over the tile
// centres of the nominal grid, 1-based planes (fractional).
type Focus struct {
	Model          string    `json:"model"`
	BlurPxPerPlane float64   `json:"blur_px_per_plane"` // defocus sigma per plane of |z - zf|, px
	ZCentre        float64   `json:"z_centre"`
	Range          float64   `json:"range"` // ± planes
	ZMin           float64   `json:"z_min"`
	ZMax           float64   `json:"z_max"`
	ZMean          float64   `json:"z_mean"`
	PSFSigmaPx     []float64 `json:"psf_sigma_px"` // in-focus blur sigma per channel (index channel-1), px
}

// Noise is the noise model: variance gain·signal + read².
type Noise struct {
	Gain      float64 `json:"gain"`       // counts per photoelectron
	ReadNoise float64 `json:"read_noise"` // counts rms
}

// Generated lists what was written.
type Generated struct {
	Cycles   []int `json:"cycles"`
	Channels []int `json:"channels"`
}

// CycleTruth is one cycle's geometry.
type CycleTruth struct {
	Cycle int `json:"cycle"`
	// Shift: tile pixel (i, j) of tile t shows the scene at
	// (Y_t + i - DY, X_t + j - DX); zero for cycle 1.
	Shift         Shift       `json:"shift"`
	MosaicHeight  int         `json:"mosaic_height"` // round(max Y) + tile height, px
	MosaicWidth   int         `json:"mosaic_width"`
	Tiles         []TileTruth `json:"tiles"`          // in tile-number order
	PositionsFile string      `json:"positions_file"` // cycNN/tile_positions.csv
	Scenes        []SceneFile `json:"scenes,omitempty"`
}

// Shift is a cycle's global shift, px.
type Shift struct {
	DY float64 `json:"dy"`
	DX float64 `json:"dx"`
}

// TileTruth is one tile's true position (mosaic px of its pixel (0, 0),
// minimum 0 over the cycle, before the cycle shift) and the focal plane at its
// centre (1-based, fractional).
type TileTruth struct {
	Tile   int     `json:"tile"` // 1-based, acquisition order
	Row    int     `json:"row"`
	Col    int     `json:"col"`
	Y      float64 `json:"y"`
	X      float64 `json:"x"`
	ZFocus float64 `json:"z_focus"`
}

// SceneFile is a truth scene: float32 counts at mosaic size, before flat and
// dark. Z is the 1-based plane, 0 for the all-in-focus scene.
type SceneFile struct {
	Channel int    `json:"channel"`
	Z       int    `json:"z"`
	File    string `json:"file"`
}

// ChannelTruth holds a channel's profiles.
type ChannelTruth struct {
	Channel            int       `json:"channel"`
	Wavelengths        []float64 `json:"wavelengths_nm"` // excitation, emission
	FlatfieldFile      string    `json:"flatfield_file"`
	DarkfieldFile      string    `json:"darkfield_file"`
	DarkfieldMean      float64   `json:"darkfield_mean"` // counts, mean of the stored float32 file
	FlatfieldMin       float64   `json:"flatfield_min"`
	FlatfieldMax       float64   `json:"flatfield_max"`
	BackgroundOff      float64   `json:"background_off_tissue"` // counts
	BackgroundOnTissue float64   `json:"background_tissue"`     // counts added on tissue
}

// Cycle returns the entry of cycle c.
func (t *Truth) Cycle(c int) (*CycleTruth, bool) {
	for i := range t.Cycles {
		if t.Cycles[i].Cycle == c {
			return &t.Cycles[i], true
		}
	}
	return nil, false
}

// Channel returns the entry of channel c.
func (t *Truth) Channel(c int) (*ChannelTruth, bool) {
	for i := range t.Channels {
		if t.Channels[i].Channel == c {
			return &t.Channels[i], true
		}
	}
	return nil, false
}

// Positions returns the tile positions of the cycle in tile-number order.
func (c *CycleTruth) Positions() []raster.Point {
	p := make([]raster.Point, len(c.Tiles))
	for i, t := range c.Tiles {
		p[i] = raster.Point{Y: t.Y, X: t.X}
	}
	return p
}

// TruthPath is ground_truth/truth.json under a project directory.
func TruthPath(projectDir string) string {
	return filepath.Join(projectDir, "ground_truth", "truth.json")
}

// ReadTruth reads and checks truth.json.
func ReadTruth(path string) (*Truth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read truth: %w", err)
	}
	var t Truth
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("parse truth %s: %w", path, err)
	}
	if t.SchemaVersion != TruthSchemaVersion {
		return nil, fmt.Errorf("truth %s: schema version %d, want %d", path, t.SchemaVersion, TruthSchemaVersion)
	}
	n := t.Grid.Rows * t.Grid.Cols
	for _, c := range t.Cycles {
		if len(c.Tiles) != n {
			return nil, fmt.Errorf("truth %s: cycle %d has %d tiles, want %d", path, c.Cycle, len(c.Tiles), n)
		}
		for i, tl := range c.Tiles {
			if tl.Tile != i+1 {
				return nil, fmt.Errorf("truth %s: cycle %d: tile %d at index %d", path, c.Cycle, tl.Tile, i)
			}
		}
	}
	return &t, nil
}

// WriteTruth writes t as indented JSON, atomically.
func WriteTruth(path string, t *Truth) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encode truth: %w", err)
	}
	return atomicfile.WriteBytes(path, append(b, '\n'), 0o666)
}

// positionsCSV renders positions in the stitch stage's tile_positions.csv
// format: header tile,row,col,y_pos,x_pos.
func positionsCSV(tiles []TileTruth) []byte {
	var b bytes.Buffer
	b.WriteString("tile,row,col,y_pos,x_pos\n")
	for _, t := range tiles {
		fmt.Fprintf(&b, "%d,%d,%d,%s,%s\n", t.Tile, t.Row, t.Col,
			strconv.FormatFloat(t.Y, 'f', -1, 64), strconv.FormatFloat(t.X, 'f', -1, 64))
	}
	return b.Bytes()
}
