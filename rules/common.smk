# ---- rules/common.smk: what every rule file uses ---------------------------------------------------
# Included first by the Snakefile (includes resolve relative to the including file, so the workflow
# runs from any --directory). In order: the Snakemake compatibility functions; the config checks (the
# Go validator first, then the --config conversion and the schema); the project layout (one block);
# the names of the EDF files; the GPU assignment and its resource limits; the functions that make a
# rule's resources, params and shell line. Every default of a resources key comes from the schema
# (internal/config/schema/config.schema.json), never from a number here.
import json
import math
import os
import subprocess
import sys
import tempfile

from snakemake import __version__ as SNAKEMAKE_VERSION
from snakemake.exceptions import WorkflowError


# ---- Snakemake internals: one small compatibility function per feature ----------------------------
# Tested by tests/e2e/sm_compat.sh under every installed Snakemake (7.21 Debian; 9.16.2, 9.16.3 and
# 9.25.2 from third_party/snakemake-wheels): a `snakemake -n` parse of the workflow with a gpu_jobs limit.
def _sm_resource_limit(name):
    """The global limit of resource `name` (--resources, a profile), an int, or None when unset.
    Snakemake <= 9.16.2 stores the plain value; 9.16.3+ a Resource object (.value None when unset)."""
    v = workflow.global_resources.get(name)
    v = getattr(v, "value", v)
    return None if v is None else int(v)


def _sm_set_resource_limit(name, n):
    """Set the global limit of resource `name` to n before scheduling starts. Snakemake >= 9 has
    register_resource (which also updates a running scheduler); 7.x/8.x read the dict at run start."""
    if hasattr(workflow, "register_resource"):
        workflow.register_resource(name, n)
    else:
        workflow.global_resources[name] = n


def _sm_is_main_process():
    """True in the Snakemake process that schedules the workflow; False in the copies that run one
    job inside a SLURM allocation (7.x: workflow.mode 1/2; >= 8: workflow.is_main_process)."""
    v = getattr(workflow, "is_main_process", None)
    if isinstance(v, bool):
        return v
    return getattr(workflow, "mode", 0) == 0


def _sm_configfiles():
    """The --configfile files of this run, absolute paths, in order (7.21: a list of str; 9.x: of
    Path). Jobs inside an allocation get the same files from their coordinator."""
    return [os.path.abspath(str(p)) for p in (getattr(workflow, "overwrite_configfiles", None) or [])]


def _sm_gpu_resource():
    """One GPU per job, in the form each Snakemake accepts: 7.x has no gres resource and takes it in
    slurm_extra; the >= 8 slurm plugin rejects --gres in slurm_extra and wants the gres resource."""
    return {"gres": "gpu:1"} if int(SNAKEMAKE_VERSION.split(".")[0]) >= 8 else {"slurm_extra": "--gres=gpu:1"}


MAIN = _sm_is_main_process()

# ---- the Go validator first: nothing in Python walks the config before it passed -----------------------
# kintsugi_dir is read as one plain string (no walk of the config); the raw files are then checked by
# `kintsugi-config check --raw` (the Go loader's strict parse: size cap, no alias expansion, duplicate
# keys refused, exit 2 naming the file and key) before json.dumps, the --config conversion or jsonschema
# touch the mapping (a YAML alias bomb is cheap as PyYAML's shared objects but expands in any walk).
_kd = config.get("kintsugi_dir")
if _kd is not None and not isinstance(_kd, str):
    raise WorkflowError(f"config key kintsugi_dir: {type(_kd).__name__}, want a string (a directory)")
KINTSUGI = _kd or workflow.basedir
if not os.path.isabs(KINTSUGI):
    KINTSUGI = os.path.normpath(os.path.join(workflow.basedir, KINTSUGI))
BIN = os.path.join(KINTSUGI, "bin")
if not os.access(os.path.join(BIN, "kintsugi-assign"), os.X_OK):
    raise WorkflowError(f"{BIN}/kintsugi-assign not found: run `make` in {KINTSUGI} (or set kintsugi_dir)")
KINTSUGI_CONFIG = os.path.join(BIN, "kintsugi-config")
if not os.access(KINTSUGI_CONFIG, os.X_OK):
    raise WorkflowError(f"{KINTSUGI_CONFIG} not found: run `make` in {KINTSUGI} (the Snakefile validates the config with it)")


def _kintsugi_config(args, what):
    """Run bin/kintsugi-config with `args`; its stdout; a WorkflowError with its stderr on failure."""
    proc = subprocess.run([KINTSUGI_CONFIG] + args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise WorkflowError(f"{what} (kintsugi-config {args[0]} exit {proc.returncode}):\n" + proc.stderr.strip())
    return proc.stdout


if _sm_configfiles():
    _kintsugi_config(["check", "--raw"] + _sm_configfiles(), "config file refused")
    if MAIN:
        print(f"kintsugi-config: raw config files {_sm_configfiles()} passed", file=sys.stderr)

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

def _validate_schema(cfg):
    """jsonschema validation of the merged config; errors name the key as the Go loader does
    (resources.accounts[0].name), first few of them."""
    import jsonschema
    cls = jsonschema.validators.validator_for(_SCHEMA_DOC)
    errs = sorted(cls(_SCHEMA_DOC).iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path)))
    if errs:
        def key(e):
            out = ""
            for p in e.absolute_path:
                out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
            return out or "(top level)"
        raise WorkflowError("config refused by " + SCHEMA + ":\n" + "\n".join(f"  key {key(e)}: {e.message}" for e in errs[:10]))


_validate_schema(config)

PROJECT = os.path.abspath(config["project_dir"])
CYCLES = [int(c) for c in config["cycles"]]
CHANNELS = [int(c) for c in config["channels"]]
CHANNEL_NAMES = config.get("channel_names", {}) or {}
DEVICE = config.get("device", "gpu")
FUSED = bool(config.get("fused", _SCHEMA_DOC["properties"]["fused"]["default"]))
RES = config.get("resources", {})




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


def _check_config():
    """The full check of the merged config (`kintsugi-config check`): it fails before any job when a
    key or a channel name is bad; its JSON holds the EDF file names and the project layout."""
    doc = json.loads(_kintsugi_config(["check", CONFIG_JSON], "config refused"))
    if MAIN and doc.get("renamed"):
        print(f"kintsugi-config: channel names renamed: {doc['renamed']}", file=sys.stderr)
    return doc


_CHECK = _check_config()


def _edf_files(doc):
    """{cycle: [EDF file name of channel 1, 2, ...]} as the Go executables name them (channel-name
    rules, duplicates renamed), so validate, QC and registration see the same names."""
    out = {}
    for c in CYCLES:
        names = doc.get("edf_files", {}).get(str(c))
        if not isinstance(names, list) or len(names) != len(CHANNELS):
            raise WorkflowError(f"kintsugi-config check {CONFIG_JSON}: edf_files of cycle {c} {names!r}, want {len(CHANNELS)} names")
        out[c] = names
    return out


EDF_FILES = _edf_files(_CHECK)


# ---- project layout: every path, sentinel and cycle name of the rules (one block) ----------------------
# From Go (internal/layout, through the check's "layout" object: absolute paths), the one home of the
# layout the executables write; "{cycle}" in a sentinel is the Snakemake wildcard (cycle_label: "01").
LAYOUT = _CHECK.get("layout")
if not isinstance(LAYOUT, dict):
    raise WorkflowError(f"kintsugi-config check {CONFIG_JSON}: no layout object (bin/ older than this Snakefile: run make)")
if LAYOUT["config_json"] != CONFIG_JSON:
    raise WorkflowError(f"kintsugi-config check: layout config_json {LAYOUT['config_json']!r}, the Snakefile wrote {CONFIG_JSON!r}")
LOGDIR = LAYOUT["log_dir"]
PROCESSED = LAYOUT["processed"]
QC_DIR = LAYOUT["qc_dir"]
SENTINEL = LAYOUT["sentinel"]  # stage (stitch, decon, edf, registration) -> sentinel path pattern


def cyc_fmt(c):
    """The cycle's label in output paths ("01" of cyc01)."""
    return LAYOUT["cycle_label"][str(int(c))]


def _raw_cycle_dir(n):
    """The cycle's raw directory: the original's directory-name variants, resolved by Go."""
    return LAYOUT["raw_dir"][str(int(n))]


def _sentinels(stage):
    """The sentinels of every cycle of a per-cycle stage (stitch, decon, edf)."""
    return [SENTINEL[stage].replace("{cycle}", cyc_fmt(c)) for c in CYCLES]


REGISTERED = SENTINEL["registration"]
QC_SENTINELS = [LAYOUT["qc_sentinel"][s] for s in ("stitch", "decon", "edf", "registration")]
QC_REPORT = LAYOUT["qc_report"]  # rules/report.smk
# ---- end of the project layout ------------------------------------------------------------------------


def _build_cycle_assignment():
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


PLAN = _build_cycle_assignment()
CYCLE_ASSIGNMENT = PLAN["cycles"]
REG_ASSIGN = PLAN["registration"]
QC_ASSIGN = PLAN["cpu"]

# ---- GPU jobs in flight: per account and in total ------------------------------------------------------
# Every GPU rule takes one unit of gpu_jobs (total <= the helper's "jobs") and one unit of its account's
# resource gpu_<i> (i: the account's index in sorted order; limit = that account's gpu_slots), so an
# account never has more GPU jobs submitted than it may run: no job holds a token while it pends on its
# account's GrpTRES (AssocGrpGRES) while another account's slot is free. A smaller limit given with
# --resources (command line or profile) is kept; a larger one is lowered.
ACCOUNT_RESOURCE = {a: f"gpu_{i}" for i, a in enumerate(sorted(PLAN["slots"]))}


def _limit_resource(name, n):
    cur = _sm_resource_limit(name)
    if cur is None or cur > n:
        _sm_set_resource_limit(name, n)


_limit_resource("gpu_jobs", int(PLAN["jobs"]))
for _a, _r in ACCOUNT_RESOURCE.items():
    _limit_resource(_r, int(PLAN["slots"][_a]))
if MAIN:
    print(f"kintsugi: GPU jobs in flight <= {_sm_resource_limit('gpu_jobs')} (resource gpu_jobs); per account: " + ", ".join(
        f"{a} <= {_sm_resource_limit(r)} (resource {r})" for a, r in ACCOUNT_RESOURCE.items()), file=sys.stderr)


# ---- a rule's resources, params and shell line ---------------------------------------------------------
def _res(key):
    """resources.<key> of the config, else the schema's default of that key (its one home)."""
    if key in RES:
        return int(RES[key])
    default = _SCHEMA_DOC["properties"]["resources"]["properties"].get(key, {}).get("default")
    if default is None:
        raise WorkflowError(f"{SCHEMA}: resources.{key} has no default (the rules need one)")
    return int(default)


# Memory escalation on retries: a job's mem_mb (its SLURM --mem and the executable's memory budget) is
# resources.mem_<stage> x attempt, at most MEM_ATTEMPT_CAP x mem_<stage>; the profiles set retries: 1,
# so a job that failed (e.g. killed for memory, or refused: "budget below the smallest working set",
# exit 2 naming resources.mem_<stage>) is resubmitted once with twice the memory.
MEM_ATTEMPT_CAP = 4


def _mem(key):
    base = _res(key)
    return lambda wildcards, attempt: base * min(int(attempt), MEM_ATTEMPT_CAP)


def _gpu_resources(stage, account_of=lambda wc: CYCLE_ASSIGNMENT[str(int(wc.cycle))]):
    """Resources of a GPU rule: account/partition from the plan (account_of: wildcards -> slot; by
    default the slot of the job's cycle), one GPU, one gpu_jobs unit and one unit of the account's
    gpu_<i>, resources.cpus_/mem_/time_<stage>, the attempt (for the log header)."""
    r = dict(
        slurm_account=lambda wc: account_of(wc)["account"],
        slurm_partition=lambda wc: account_of(wc)["partition"],
        cpus_per_task=_res(f"cpus_{stage}"),
        mem_mb=_mem(f"mem_{stage}"),
        runtime=_res(f"time_{stage}"),
        kintsugi_attempt=lambda wc, attempt: int(attempt),
        gpu_jobs=1,
        **_sm_gpu_resource(),
    )
    for a, name in ACCOUNT_RESOURCE.items():
        r[name] = lambda wc, a=a: int(account_of(wc)["account"] == a)
    return r


def _qc_resources(mem_key, time_key):
    """Resources of a CPU QC rule: the helper's CPU account and partition, no GPU."""
    return dict(
        slurm_account=QC_ASSIGN["account"],
        slurm_partition=QC_ASSIGN["partition"],
        cpus_per_task=_res("cpus_qc"),
        mem_mb=_mem(mem_key),
        runtime=_res(time_key),
        kintsugi_attempt=lambda wc, attempt: int(attempt),
    )


def _params(tool, log, what):
    return dict(exe=os.path.join(BIN, tool), kintsugi=KINTSUGI, config=CONFIG_JSON, device=DEVICE, log=log, what=what)


GPU_ENV = "cpus_per_task={resources.cpus_per_task} mem_mb={resources.mem_mb}"
QC_ENV = "cpus_per_task={resources.cpus_per_task}"
CYCLE_ARGS = "run --config {params.config:q} --cycle {wildcards.cycle:q} --device {params.device:q}"


def _stage_shell(rule, args, env=GPU_ENV):
    """The shell line of a stage job. Every value from the config reaches it quoted ({x:q}); the
    per-job log is appended to (never truncated), each job's part opening with a header naming the
    rule, SLURM job, attempt, host, time and memory, so a rerun or a second coordinator never replaces
    another job's record. Exit 2 with a message in the log when the executable was not built."""
    return (
        "mkdir -p \"$(dirname {params.log:q})\"; {{ printf '==== %s kintsugi " + rule + " (%s): SLURM job %s, attempt {resources.kintsugi_attempt}, host %s,"
        " mem_mb {resources.mem_mb}, cpus_per_task {resources.cpus_per_task}\\n'"
        " \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" {params.what:q} \"${{SLURM_JOB_ID:-none}}\" \"$(hostname)\";"
        " test -x {params.exe:q} || {{ echo {params.exe:q}' not found: run make in '{params.kintsugi:q}; exit 2; }};"
        " " + env + " {params.exe:q} " + args +
        " --log-format text; }} >> {params.log:q} 2>&1"
    )
