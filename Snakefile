# KINTSUGI-Go pipeline (Snakemake >= 7.21; Snakemake 8/9 with the slurm executor plugin).
#
#   snakemake registration --configfile config.yaml --profile profiles/slurm   # stitch -> decon -> edf -> registration
#   snakemake all          --configfile config.yaml --profile profiles/slurm   # + every QC report
#   snakemake validate     --configfile config.yaml                           # every marker-named EDF file exists
#   snakemake stitch_all   --configfile config.yaml --cores 4                 # local, no SLURM
#
# Targets: stitch_all (stitched sentinels), registration (pulls in stitch, deconvolve, edf of every
# cycle; no QC rule), qc (the four QC sentinels), all (registration + every QC sentinel), validate.
#
# Every per-cycle rule (stitch, deconvolve, edf) and registration runs on one GPU under the SLURM
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
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

from snakemake import __version__ as SNAKEMAKE_VERSION
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("7.21")

if not config:
    raise WorkflowError("no configuration: run with --configfile config.yaml (see the documented example config.yaml)")

SCHEMA = os.path.join(workflow.basedir, "internal", "config", "schema", "config.schema.json")
with open(SCHEMA) as _f:
    _SCHEMA_DOC = json.load(_f)


# ---- --config overrides ---------------------------------------------------------------------------
# Snakemake 7.21 parses a --config value with int, float, bool, then YAML's base loader, so every
# number inside a list or mapping arrives as a string (cycles=[1,2] -> ['1', '2']). Values are
# converted where the schema wants a number or a boolean, before validation; a value that is not one
# is an error naming the key.
def _schema_at(s):
    ref = s.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return _SCHEMA_DOC["$defs"][ref[len("#/$defs/"):]]
    return s


def _coerce(value, schema, key):
    schema = _schema_at(schema)
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        want = {list: "array", dict: "object", str: "string"}.get(type(value))
        if want and not any(_schema_at(b).get("type") == want for b in branches) and isinstance(value, str):
            want = None
        for b in branches:
            if want is not None and _schema_at(b).get("type") == want:
                return _coerce(value, b, key)
        return value
    t = schema.get("type")
    if isinstance(value, str) and t in ("integer", "number", "boolean"):
        s = value.strip()
        try:
            if t == "boolean":
                if s.lower() in ("true", "false"):
                    return s.lower() == "true"
                raise ValueError
            if t == "integer":
                return int(s)
            x = float(s)
            if not math.isfinite(x):
                raise ValueError
            return int(s) if s.lstrip("+-").isdigit() else x
        except ValueError:
            raise WorkflowError(f"config key {key}: {value!r} is not {'a boolean' if t == 'boolean' else 'an integer' if t == 'integer' else 'a number'}"
                                " (a --config override?)")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"], f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for k, v in value.items():
            sub = props.get(str(k), extra if isinstance(extra, dict) else None)
            out[k] = _coerce(v, sub, f"{key}.{k}" if key else str(k)) if sub is not None else v
        return out
    return value


if config.get("live_accounts") in (None, ""):  # --config live_accounts= : no live data
    config.pop("live_accounts", None)
_coerced = _coerce(dict(config), _SCHEMA_DOC, "")
config.clear()
config.update(_coerced)

validate(config, SCHEMA, set_default=False)

PROJECT = os.path.abspath(config["project_dir"])
KINTSUGI = config.get("kintsugi_dir") or workflow.basedir
if not os.path.isabs(KINTSUGI):
    KINTSUGI = os.path.normpath(os.path.join(workflow.basedir, KINTSUGI))
BIN = os.path.join(KINTSUGI, "bin")
CYCLES = [int(c) for c in config["cycles"]]
CHANNELS = [int(c) for c in config["channels"]]
CHANNEL_NAMES = config.get("channel_names", {}) or {}
DEVICE = config.get("device", "gpu")
RES = config.get("resources", {})
LOGDIR = os.path.join(PROJECT, "slurm", "logs", "snakemake")
SNAKEMAKE_MAJOR = int(SNAKEMAKE_VERSION.split(".")[0])
PROCESSED = os.path.join(PROJECT, "data", "processed")
QC_DIR = os.path.join(PROJECT, "qc_plots")

if not os.access(os.path.join(BIN, "kintsugi-assign"), os.X_OK):
    raise WorkflowError(f"{BIN}/kintsugi-assign not found: run `make` in {KINTSUGI} (or set kintsugi_dir)")


def _is_main_process():
    """True in the Snakemake process that schedules the workflow; False in the copies that run one
    job inside a SLURM allocation (7.x: --mode 1/2; >= 8: exec_mode remote/subprocess)."""
    v = getattr(workflow, "is_main_process", None)
    if isinstance(v, bool):
        return v
    return getattr(workflow, "mode", 0) == 0


MAIN = _is_main_process()


def cyc_fmt(c):
    """Two-digit cycle name used in output paths (cyc01)."""
    return f"{int(c):02d}"


def get_edf_filename(cycle, ch):
    """The original's EDF output name: the marker name with '/' and ' ' replaced by '_', + .tif;
    CH{ch}_edf.tif when the cycle has no names (Go: config.(*Config).EDFFileName)."""
    names = CHANNEL_NAMES.get(int(cycle), CHANNEL_NAMES.get(str(int(cycle)), [])) or []
    if 1 <= ch <= len(names) and names[ch - 1]:
        return names[ch - 1].replace("/", "_").replace(" ", "_") + ".tif"
    return f"CH{ch}_edf.tif"


def _write_config_json():
    """The config as Snakemake sees it (files merged with --config, numbers converted) for the Go
    executables, written atomically under the project so that SLURM jobs on other nodes read the
    same values."""
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


def _build_assignment():
    """GPU-only placement of every cycle, registration and the CPU QC rules, from the Go helper
    (resources.accounts; live data from live_accounts or, with live: true, squeue). Jobs that run
    inside an allocation re-read the Snakefile: they use the static plan (no squeue call there)."""
    cmd = [os.path.join(BIN, "kintsugi-assign"), "--config", CONFIG_JSON, "--log-format", "text"]
    if not MAIN:
        cmd += ["--live-accounts", "[]"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise WorkflowError("kintsugi-assign failed:\n" + proc.stderr.strip())
    plan = json.loads(proc.stdout)
    for c in CYCLES:
        slot = plan["cycles"][str(c)]
        if slot["mode"] != "gpu":
            raise WorkflowError(f"cycle {c}: assignment mode {slot['mode']!r}; the pipeline is GPU-only")
    if MAIN:
        live = plan.get("live")
        what = f"source {plan['source']}"
        if live:
            what += f" ({live['from']}: " + ", ".join(f"{a} {v['avail']} free of {plan['slots'][a]}" for a, v in live["applied"].items())
            what += (", no data: " + ", ".join(live["no_data"]) if live.get("no_data") else "") + ")"
        per = {}
        for c in CYCLES:
            per.setdefault(plan["cycles"][str(c)]["account"], []).append(c)
        print(f"kintsugi-assign: {what}; cycles per account {per}; registration on {plan['registration']['account']};"
              f" QC on {plan['cpu']['account']}/{plan['cpu']['partition']}; GPU jobs in flight <= {plan['jobs']}", file=sys.stderr)
    return plan


PLAN = _build_assignment()
CYCLE_ASSIGNMENT = PLAN["cycles"]
REG_ASSIGN = PLAN["registration"]
QC_ASSIGN = PLAN["cpu"]


def _set_gpu_jobs_limit(n):
    """GPU jobs in flight <= n: every GPU rule takes gpu_jobs=1. A smaller limit given with
    --resources (command line or profile) is kept; a larger one is lowered."""
    cur = workflow.global_resources.get("gpu_jobs")
    if cur is not None and int(cur) <= n:
        return
    if hasattr(workflow, "register_resource"):  # Snakemake >= 9
        workflow.register_resource("gpu_jobs", n)
    else:  # 7.x, 8.x: the scheduler reads workflow.global_resources when the run starts
        workflow.global_resources["gpu_jobs"] = n


_set_gpu_jobs_limit(int(PLAN["jobs"]))


def _assign(wc):
    return CYCLE_ASSIGNMENT[str(int(wc.cycle))]


# One GPU per job, in the form each Snakemake accepts: 7.x has no gres resource and takes it in
# slurm_extra; the >= 8 slurm plugin rejects --gres in slurm_extra and wants the gres resource.
GPU_RESOURCE = {"gres": "gpu:1"} if SNAKEMAKE_MAJOR >= 8 else {"slurm_extra": "--gres=gpu:1"}


def _res(key, default):
    return int(RES.get(key, default))


def _need(tool):
    """Shell prefix: a clear error when an executable was not built."""
    return f"test -x {BIN}/{tool} || {{{{ echo '{BIN}/{tool} not found: run make in {KINTSUGI}' >&2; exit 2; }}}}; "


def _raw_cycle_dir(n):
    """The original's cycle-directory variants, resolved at DAG time."""
    raw = os.path.join(PROJECT, "data", "raw")
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


def _sentinels(stage):
    return [f"{PROCESSED}/{stage}/cyc{cyc_fmt(c)}/.snakemake_complete" for c in CYCLES]


REGISTERED = PROCESSED + "/registered/.snakemake_complete"
QC_SENTINELS = [f"{QC_DIR}/.snakemake_complete_{s}" for s in ("stitch", "decon", "edf", "registration")]
QC_REPORT = QC_DIR + "/report.html"  # rules/report.smk

wildcard_constraints:
    cycle=r"\d+",


localrules: all, stitch_all, qc, validate


rule all:
    input:
        REGISTERED,
        QC_SENTINELS,
        QC_REPORT,


rule stitch_all:
    input:
        _sentinels("stitched"),


rule qc:
    input:
        QC_SENTINELS,
        QC_REPORT,


# ---- GPU stages: one job per cycle (registration: one job), one GPU each ------------------------------

rule stitch:
    input:
        raw_dir=get_raw_dir,
    output:
        PROCESSED + "/stitched/cyc{cycle}/.snakemake_complete",
    log:
        LOGDIR + "/stitch_cyc{cycle}.log",
    params:
        device=DEVICE,
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=lambda wc: _assign(wc)["account"],
        slurm_partition=lambda wc: _assign(wc)["partition"],
        cpus_per_task=_res("cpus_stitch", 4),
        mem_mb=_res("mem_stitch", 8000),  # measured: 4.7 GiB peak under a 6 GiB budget, 7.4 GiB unconstrained (H200, production cycle)
        runtime=_res("time_stitch", 240),
        gpu_jobs=1,
        **GPU_RESOURCE,
    shell:
        _need("kintsugi-stitch") +
        "cpus_per_task={resources.cpus_per_task} mem_mb={resources.mem_mb} {params.bin}/kintsugi-stitch run"
        " --config {params.config} --cycle {wildcards.cycle} --device {params.device}"
        " --log-format text > {log} 2>&1"


rule deconvolve:
    input:
        PROCESSED + "/stitched/cyc{cycle}/.snakemake_complete",
    output:
        PROCESSED + "/deconvolved/cyc{cycle}/.snakemake_complete",
    log:
        LOGDIR + "/decon_cyc{cycle}.log",
    params:
        device=DEVICE,
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=lambda wc: _assign(wc)["account"],
        slurm_partition=lambda wc: _assign(wc)["partition"],
        cpus_per_task=_res("cpus_decon", 4),
        mem_mb=_res("mem_decon", 6144),  # measured: 1.8 GiB peak under a 6 GiB budget (plan 2.3 GiB), 17.9 GiB unconstrained (H200, production cycle)
        runtime=_res("time_decon", 240),
        gpu_jobs=1,
        **GPU_RESOURCE,
    shell:
        _need("kintsugi-decon") +
        "cpus_per_task={resources.cpus_per_task} mem_mb={resources.mem_mb} {params.bin}/kintsugi-decon run"
        " --config {params.config} --cycle {wildcards.cycle} --device {params.device}"
        " --log-format text > {log} 2>&1"


rule edf:
    input:
        PROCESSED + "/deconvolved/cyc{cycle}/.snakemake_complete",
    output:
        PROCESSED + "/edf/cyc{cycle}/.snakemake_complete",
    log:
        LOGDIR + "/edf_cyc{cycle}.log",
    params:
        device=DEVICE,
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=lambda wc: _assign(wc)["account"],
        slurm_partition=lambda wc: _assign(wc)["partition"],
        cpus_per_task=_res("cpus_edf", 4),
        mem_mb=_res("mem_edf", 4096),  # measured: 1.7 GiB peak under a 4 GiB budget (plan 2.9 GiB), 3.2 GiB unconstrained
        runtime=_res("time_edf", 60),
        gpu_jobs=1,
        **GPU_RESOURCE,
    shell:
        _need("kintsugi-edf") +
        "cpus_per_task={resources.cpus_per_task} mem_mb={resources.mem_mb} {params.bin}/kintsugi-edf run"
        " --config {params.config} --cycle {wildcards.cycle} --device {params.device}"
        " --log-format text > {log} 2>&1"


rule registration:
    input:
        _sentinels("edf"),
    output:
        REGISTERED,
    log:
        LOGDIR + "/registration.log",
    params:
        device=DEVICE,
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=REG_ASSIGN["account"],
        slurm_partition=REG_ASSIGN["partition"],
        cpus_per_task=_res("cpus_registration", 4),
        mem_mb=_res("mem_registration", 4096),  # measured: 2.2 GiB peak unconstrained (plan 2.5 GiB), 1.7 GiB under 2 GiB; 13 cycles x 4 channels
        runtime=_res("time_registration", 120),
        gpu_jobs=1,
        **GPU_RESOURCE,
    shell:
        _need("kintsugi-register") +
        "cpus_per_task={resources.cpus_per_task} mem_mb={resources.mem_mb} {params.bin}/kintsugi-register run"
        " --config {params.config} --device {params.device} --log-format text > {log} 2>&1"


# ---- QC: CPU partition of the helper's CPU assignment, no GPU ------------------------------------------
# bin/kintsugi-qc <stage> writes qc_plots/<stage>/ (per-cycle metrics JSON, PNG overviews and
# heatmaps) and the original's sentinel qc_plots/.snakemake_complete_<stage>.

QC_RESOURCES = dict(
    slurm_account=QC_ASSIGN["account"],
    slurm_partition=QC_ASSIGN["partition"],
    cpus_per_task=_res("cpus_qc", 2),
    mem_mb=_res("mem_qc", 64000),
    runtime=_res("time_qc", 120),
)


rule qc_stitch:
    input:
        _sentinels("stitched"),
    output:
        QC_DIR + "/.snakemake_complete_stitch",
    log:
        LOGDIR + "/qc_stitch.log",
    params:
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        **QC_RESOURCES,
    shell:
        _need("kintsugi-qc") +
        "cpus_per_task={resources.cpus_per_task} {params.bin}/kintsugi-qc run --stage stitch"
        " --config {params.config} --log-format text > {log} 2>&1"


rule qc_decon:
    input:
        _sentinels("deconvolved"),
    output:
        QC_DIR + "/.snakemake_complete_decon",
    log:
        LOGDIR + "/qc_decon.log",
    params:
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        **QC_RESOURCES,
    shell:
        _need("kintsugi-qc") +
        "cpus_per_task={resources.cpus_per_task} {params.bin}/kintsugi-qc run --stage decon"
        " --config {params.config} --log-format text > {log} 2>&1"


rule qc_edf:
    input:
        _sentinels("edf"),
    output:
        QC_DIR + "/.snakemake_complete_edf",
    log:
        LOGDIR + "/qc_edf.log",
    params:
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        **QC_RESOURCES,
    shell:
        _need("kintsugi-qc") +
        "cpus_per_task={resources.cpus_per_task} {params.bin}/kintsugi-qc run --stage edf"
        " --config {params.config} --log-format text > {log} 2>&1"


rule qc_registration:
    input:
        REGISTERED,
    output:
        QC_DIR + "/.snakemake_complete_registration",
    log:
        LOGDIR + "/qc_registration.log",
    params:
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=QC_ASSIGN["account"],
        slurm_partition=QC_ASSIGN["partition"],
        cpus_per_task=_res("cpus_qc", 2),
        mem_mb=_res("mem_qc_registration", 16000),
        runtime=_res("time_qc_registration", 30),
    shell:
        _need("kintsugi-qc") +
        "cpus_per_task={resources.cpus_per_task} {params.bin}/kintsugi-qc run --stage registration"
        " --config {params.config} --log-format text > {log} 2>&1"


include: "rules/report.smk"


# ---- validate: every marker-named EDF file exists (the original's check) --------------------------------

rule validate:
    run:
        want = [os.path.join(PROCESSED, "edf", f"cyc{cyc_fmt(c)}", get_edf_filename(c, ch)) for c in CYCLES for ch in CHANNELS]
        missing = [p for p in want if not os.path.isfile(p)]
        if missing:
            print(f"validate: {len(missing)} of {len(want)} EDF files missing:", file=sys.stderr)
            for p in missing[:20]:
                print(f"  {p}", file=sys.stderr)
            if len(missing) > 20:
                print(f"  ... and {len(missing) - 20} more", file=sys.stderr)
            raise WorkflowError(f"validate: {len(missing)} EDF files missing")
        print(f"validate: all {len(want)} EDF files present ({len(CYCLES)} cycles x {len(CHANNELS)} channels)")
