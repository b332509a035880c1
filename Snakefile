# KINTSUGI-Go pipeline (Snakemake >= 7.21; Snakemake 8/9 with the slurm executor plugin).
#
#   snakemake registration --configfile config.yaml --profile profiles/slurm   # stitch -> decon -> edf -> registration
#   snakemake all          --configfile config.yaml --profile profiles/slurm   # + every QC report
#   snakemake validate     --configfile config.yaml                           # every marker-named EDF file exists
#   snakemake stitch_all   --configfile config.yaml --cores 4                 # local, no SLURM
#
# Targets: stitch_all (stitched sentinels), registration (pulls in stitch, deconvolve, edf of every
# cycle, or with fused: true, the default, one cycle job per cycle; no QC rule), qc (the four QC
# sentinels), all (registration + every QC sentinel), validate.
#
# Every per-cycle rule (cycle, or stitch, deconvolve, edf) and registration runs on one GPU under the SLURM
# account bin/kintsugi-assign chose (GPU-only: cycles beyond the GPU slots queue in SLURM; there is no
# CPU fallback). QC rules run on the CPU partition of the helper's CPU assignment without any GPU.
# GPU jobs in flight never exceed the helper's "jobs" (the accounts' total GPU slots): every GPU rule
# uses one unit of the resource gpu_jobs, whose limit the Snakefile sets from the helper (lowering,
# never raising, a --resources gpu_jobs=N given on the command line or in the profile). CPU QC jobs
# use no gpu_jobs and run beside them, up to the profile's `jobs`.
#
# Live availability: `live: true` in the config makes the helper read squeue when the workflow starts
# (free GPUs per account are filled first; the plan is never shrunk); injected
# --config live_accounts='[{"name":..,"gpu_avail":..}]' takes precedence.
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("7.21")

# Files (every include resolves relative to this file, so `snakemake --snakefile /path/to/Snakefile
# --directory elsewhere` works):
#   rules/common.smk        Snakemake compatibility functions, the config checks (bin/kintsugi-config,
#                           the schema internal/config/schema/config.schema.json: every key's default
#                           and description), the project layout, the GPU assignment, the functions
#                           that make a rule's resources, params and shell line
#   rules/stitch.smk, decon.smk, edf.smk (+ validate), registration.smk: one GPU rule each
#   rules/cycle.smk         with fused: true, the one GPU job per cycle that does stitch, decon and edf
#   rules/qc.smk, report.smk: the CPU QC rules and the report page

# ---- the config: loading and validation (rules/common.smk, the Go validator first) --------------------
if not config:
    raise WorkflowError("no configuration: run with --configfile config.yaml (see the documented example config.yaml)")

include: "rules/common.smk"


wildcard_constraints:
    cycle=r"\d+",


localrules: all, stitch_all, qc, validate


# the first rule: the default target
rule all:
    input:
        REGISTERED,
        QC_SENTINELS,
        QC_REPORT,


include: "rules/stitch.smk"
include: "rules/decon.smk"
include: "rules/edf.smk"
if FUSED:

    include: "rules/cycle.smk"


include: "rules/registration.smk"
include: "rules/qc.smk"
include: "rules/report.smk"
