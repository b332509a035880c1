// Package layout is the one home of a KINTSUGI project's directory layout:
// every path the stages, QC, the accuracy scorer, the synthetic generator, the
// tests and (through `kintsugi-config check`) the Snakefile use, the sentinel
// names and the cycle format. Paths are the original's:
//
//	data/raw/<cycle dir>/                                  raw tiles; <cycle dir> is the first of
//	                                                       cyc{n:03d}_*, cyc{n:02d}_*, Cyc{n:02d}_* (sorted
//	                                                       matches), cyc{n:03d}, cyc{n:02d}, Cyc{n:02d}
//	data/processed/stitched/cycNN/CH{c}/{z:02d}.tif        stitched planes (z 1-based)
//	data/processed/stitched/cycNN/CH{c}/basic/{z:02d}_{flat,dark}field.tif  BaSiC profiles
//	data/processed/stitched/cycNN/tile_positions.csv       tile placements
//	data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif  deconvolved planes (k 1-based)
//	data/processed/edf/cycNN/<marker>.tif                  EDF images (names: config.EDFFileName)
//	data/processed/registered/cycNN/<marker>.tif           registered images
//	data/processed/registered/registration_data/cycNN_transform.json  transforms (+ fields)
//	data/processed/registered/qc/cycNN_metrics.json        the registration stage's own scores
//	data/processed/<stage dir>/cycNN/.snakemake_complete   stage sentinel (registration: registered/)
//	qc_plots/<stage>/cycNN_metrics.json                    QC metrics per cycle
//	qc_plots/.snakemake_complete_<stage>                   QC sentinel
//	qc_plots/report.html                                   QC report
//	slurm/logs/snakemake/                                  per-job logs
//	.kintsugi/config.json                                  the config as Snakemake merged it
//
// cycNN is CycleName: "cyc" and the cycle number in at least two digits
// (cyc01, cyc12, cyc100). Functions that take a project directory join onto
// it and return a path of the same kind (absolute when it is absolute); they
// touch no file, except RawCycleDir and ResolveRawCycleDir, which look for the
// raw directory.
package layout
