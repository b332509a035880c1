# KINTSUGI-Go pipeline (Snakemake >= 7.21; Snakemake 8/9 with the slurm executor plugin).
#
#   snakemake stitch_all --configfile config.yaml --profile profiles/slurm
#   snakemake stitch_all --configfile config.yaml --cores 4        # local, no SLURM
#
# Every per-cycle rule runs on a GPU under the SLURM account that
# bin/kintsugi-assign chose (GPU-only: cycles beyond the GPU slots queue in
# SLURM; there is no CPU fallback). Stages after stitch (deconvolve, edf,
# registration) arrive with the executables that do their work.
import json
import os
import subprocess
import tempfile

from snakemake import __version__ as SNAKEMAKE_VERSION
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("7.21")

if not config:
    raise WorkflowError("no configuration: run with --configfile config.yaml (see the documented example config.yaml)")

SCHEMA = os.path.join(workflow.basedir, "internal", "config", "schema", "config.schema.json")
validate(config, SCHEMA, set_default=False)

PROJECT = os.path.abspath(config["project_dir"])
KINTSUGI = config.get("kintsugi_dir") or workflow.basedir
if not os.path.isabs(KINTSUGI):
    KINTSUGI = os.path.normpath(os.path.join(workflow.basedir, KINTSUGI))
BIN = os.path.join(KINTSUGI, "bin")
CYCLES = [int(c) for c in config["cycles"]]
DEVICE = config.get("device", "gpu")
RES = config.get("resources", {})
LOGDIR = os.path.join(PROJECT, "slurm", "logs", "snakemake")
SNAKEMAKE_MAJOR = int(SNAKEMAKE_VERSION.split(".")[0])

for tool in ("kintsugi-assign", "kintsugi-stitch"):
    if not os.access(os.path.join(BIN, tool), os.X_OK):
        raise WorkflowError(f"{BIN}/{tool} not found: run `make` in {KINTSUGI} (or set kintsugi_dir)")


def cyc_fmt(c):
    """Two-digit cycle name used in output paths (cyc01)."""
    return f"{int(c):02d}"


def _write_config_json():
    """The config as Snakemake sees it (files merged with --config) for the Go
    executables, written atomically under the project so that SLURM jobs on
    other nodes read the same values."""
    path = os.path.join(PROJECT, ".kintsugi", "config.json")
    text = json.dumps(config, indent=1, sort_keys=True, default=str)
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".config.json.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


CONFIG_JSON = _write_config_json()


def _build_cycle_assignment():
    """GPU-only placement of every cycle, from the Go helper (the config's
    resources.accounts and live_accounts). Fails loudly when no account has
    GPU slots."""
    cmd = [os.path.join(BIN, "kintsugi-assign"), "--config", CONFIG_JSON, "--log-format", "text"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise WorkflowError("kintsugi-assign failed:\n" + proc.stderr.strip())
    plan = json.loads(proc.stdout)
    for c in CYCLES:
        slot = plan["cycles"][str(c)]
        if slot["mode"] != "gpu":
            raise WorkflowError(f"cycle {c}: assignment mode {slot['mode']!r}; the pipeline is GPU-only")
    return plan


PLAN = _build_cycle_assignment()
CYCLE_ASSIGNMENT = PLAN["cycles"]


def _assign(wc):
    return CYCLE_ASSIGNMENT[str(int(wc.cycle))]


# One GPU per job, in the form each Snakemake accepts: 7.x has no gres
# resource and takes it in slurm_extra; the >= 8 slurm plugin rejects --gres in
# slurm_extra and wants the gres resource.
GPU_RESOURCE = {"gres": "gpu:1"} if SNAKEMAKE_MAJOR >= 8 else {"slurm_extra": "--gres=gpu:1"}


def _raw_cycle_dir(n):
    """The original's cycle-directory variants, resolved at DAG time."""
    raw = os.path.join(PROJECT, "data", "raw")
    import glob
    for pat in (f"cyc{n:03d}_*", f"cyc{n:02d}_*", f"Cyc{n:02d}_*"):
        hits = sorted(d for d in glob.glob(os.path.join(raw, pat)) if os.path.isdir(d))
        if hits:
            return hits[0]
    for name in (f"cyc{n:03d}", f"cyc{n:02d}", f"Cyc{n:02d}"):
        if os.path.isdir(os.path.join(raw, name)):
            return os.path.join(raw, name)
    return os.path.join(raw, f"cyc{n:02d}")


def get_raw_dir(wc):
    return _raw_cycle_dir(int(wc.cycle))


wildcard_constraints:
    cycle=r"\d+",


localrules: stitch_all


rule stitch_all:
    input:
        expand(PROJECT + "/data/processed/stitched/cyc{cycle}/.snakemake_complete", cycle=[cyc_fmt(c) for c in CYCLES]),


rule stitch:
    input:
        raw_dir=get_raw_dir,
    output:
        PROJECT + "/data/processed/stitched/cyc{cycle}/.snakemake_complete",
    log:
        LOGDIR + "/stitch_cyc{cycle}.log",
    params:
        device=DEVICE,
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=lambda wc: _assign(wc)["account"],
        slurm_partition=lambda wc: _assign(wc)["partition"],
        cpus_per_task=int(RES.get("cpus_stitch", 4)),
        mem_mb=int(RES.get("mem_stitch", 48000)),
        runtime=int(RES.get("time_stitch", 240)),
        **GPU_RESOURCE,
    shell:
        "cpus_per_task={resources.cpus_per_task} {params.bin}/kintsugi-stitch run"
        " --config {params.config} --cycle {wildcards.cycle} --device {params.device}"
        " --log-format text > {log} 2>&1"
