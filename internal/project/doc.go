// Package project reads what a KINTSUGI project directory says about its
// experiment and writes the pipeline config for it, as the original's
// `kintsugi workflow config` (KINTSUGI src/kintsugi/cli.py
// generate_workflow_config) does:
//
//	<project>/meta/experiment.json   ReadExperiment: the original's keys (n_cycles, tile_rows,
//	                                 xy_pixel_size, ...) or the CODEX instrument's (numCycles,
//	                                 regionHeight, xyResolution, ...; ExperimentConfig._CODEX_FIELD_MAP),
//	                                 wavelengths as {"<ch>": [ex, em]}, [[ch, [ex, em]], ...] or the
//	                                 CODEX flat list of excitations mapped by filter set
//	<project>/meta/CHANNELNAMES.txt  ReadChannelNames: one marker per line (a cycle starts at each
//	                                 DAPI line) or one cycle per line ("1: DAPI, Blank, ..."; tab- or
//	                                 comma-separated), then the original's duplicate rule
//	                                 (config.UniqueNames)
//	<project>/data/raw/cycNN...      ScanRaw: the cycle directories the stitch stage will read
//	                                 (dataset.ResolveCycleDir) with their tiles, z-planes and channels
//
// Infer combines them, records where every value came from and what
// disagrees; (*Project).Config renders a complete config.yaml (every key the
// original writes, with its defaults and a comment each) and loads it with
// config.Parse before returning it.
//
// Units: xy_pixel_size and z_step_size in nm, wavelengths in nm,
// tile_overlap a fraction in (0, 1).
package project
