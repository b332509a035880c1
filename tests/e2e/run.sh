#!/usr/bin/env bash
# End-to-end test of the pipeline through the real local SLURM cluster and Snakemake:
# raw tiles -> stitch -> deconvolve -> edf -> registration, then every QC report, then validate.
#
# Needs: bin/ built by `make` (kintsugi-synth, -assign, -stitch, -decon, -edf, -register, -qc,
# -accuracy), the test cluster from scripts/slurm-up.sh (accounts acct_a with GrpTRES gres/gpu=3,
# acct_b with 2, fake GPUs), snakemake, /usr/bin/python3 with tifffile (Debian packages).
# Run from anywhere: tests/e2e/run.sh
#
# What it does:
#   0. unit tests of tests/e2e/slurm_check.py on recorded Snakemake 7.x and >= 8 (slurm executor
#      plugin) logs;
#   1. writes the "example" synthetic project (5 x 6 tiles of 360 x 480 px, 3 z, 2 channels: the
#      production acquisition with 4 x 4 binning, on which BaSiC identifies the profiles) with more
#      cycles (7) than the 5 GPU slots (bin/kintsugi-synth);
#   2. writes a test config: the two test accounts, device cpu (CI has no GPU; every GPU job still
#      requests --gres=gpu:1 on the fake GPUs), small job memory, "Blank" in cycles 1 and 2 (the
#      original's blank channels; renamed Blank_1a/Blank_2a by the duplicate rule); or, with
#      E2E_CONFIG_FROM=init, the config bin/kintsugi-config init writes from the project's meta/ and
#      sacctmgr, used unchanged;
#   3. kintsugi-assign against the real SLURM: `discover` lists acct_a 3 and acct_b 2 from sacctmgr;
#      with GPU jobs held in the queue, `--live` (squeue) and `live: true` in the workflow fill the
#      free GPUs first and keep jobs = 5;
#   4. dry runs: --config overrides with numbers as strings (Snakemake 7.21) work, bad ones name the
#      key, unknown live accounts are named; `registration` pulls in no QC rule, `all` all four;
#   5. runs `snakemake registration --configfile <cfg> --profile profiles/slurm` from the repo root;
#   6. checks, with tests/e2e/slurm_check.py and sacct, that every stitch/deconvolve/edf job of every
#      cycle and the registration job ran once, as its own SLURM job with gres/gpu=1, under the account
#      and partition kintsugi-assign chose; that no account ever ran more GPU jobs than its slots; and
#      that at most `jobs` (5) GPU jobs were ever in flight (sacct Submit..End), reaching 5;
#   7. checks the outputs with tifffile (an independent reader): stitched planes (shapes from the tile
#      positions, content), deconvolved stacks, marker-named EDF planes, registered planes (all of the
#      reference size), registered.ome.tif; registration improved the DAPI NCC of every cycle
#      (recomputed here with numpy); stitching accuracy against the synthetic truth (kintsugi-accuracy):
#      every cycle's and channel's flatfield clearly closer to the truth than no correction, the
#      darkfield within a stated number of counts, tile positions sub-pixel;
#   8. runs `snakemake all --forcerun registration`: the four QC jobs, on the CPU partition of the
#      helper's CPU assignment, without GPUs, running beside the (repeated) GPU registration job;
#      checks their outputs (sentinels, metrics JSON against tifffile's numbers, every PNG decoded);
#   9. `snakemake validate` passes, and fails listing a marker-named EDF file that was moved away.
# Failures print the worst value and where. About 12 min on 2 cores (the registration run of the
# example preset's 7 cycles took 8.5 min on a loaded 2-core machine, before the darkest-image
# darkfield fits stopped early; their stitch jobs now take ~11 s instead of ~60 s).
#
# Env: KINTSUGI_E2E_DIR  work directory under /tmp/ (default: a new /tmp/kintsugi-e2e.XXXXXX); it
#                        is emptied first and kept afterwards (.ci/run prints its logs)
#      E2E_CYCLES        cycles to synthesise (default 7: more than the 5 GPU slots)
#      E2E_KEEP=1        keep the work directory after success too
#      E2E_SNAKEMAKE     the snakemake to run (default: snakemake on PATH; e.g. /opt/kintsugi-sm/9.25.2/bin/snakemake)
#      E2E_CONFIG_FROM   synth (default) or init (see 2.)
set -euo pipefail

# ---- tolerances and settings ------------------------------------------------------------------
CYCLES=${E2E_CYCLES:-7}
ACCOUNTS=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}   # name:gpu_slots, as scripts/slurm-up.sh set them
GPU_PARTITION=gpu
CPU_PARTITION=cpu
MEM_JOB=1500         # MB per stitch/decon/edf/QC job: an example cycle's decon peaks at 0.9 GB (measured
                     # with a 1000 MB budget); 5 jobs stay under RealMemory
MEM_REGISTRATION=2000
MEM_CYCLE=2500       # MB per fused cycle job (fused: true): the stitch job's working set and the fused decon and
                     # EDF's planes (internal/cyclestage: Reserve)
TIME_JOB=20          # minutes per job (SLURM time limit; an example cycle's stitch takes 1-2 min on 2 cores)
CPUS_JOB=2           # cpus_per_task of every job
SNAKEMAKE_TIMEOUT=2400   # s; the registration run takes ~8-9 min on 2 cores
# Content of a stitched plane: at least this fraction of pixels non-zero (the mosaic is fully
# covered by tiles and even off tissue the synthetic background is 25-40 counts, ~4 noise sigma
# above 0 after darkfield removal; 0.9 leaves room for an off-tissue tile), and a standard
# deviation of at least this many counts (cells and texture; a constant or empty plane fails).
MIN_NONZERO_FRACTION=0.9
MIN_STD_COUNTS=5.0
# Stitched plane size vs (max y_pos + tile height, max x_pos + tile width) of the run's own
# tile_positions.csv: 1 px for rounding of the fractional extent.
SHAPE_TOL_PX=1
# Accuracy against the synthetic ground truth (bin/kintsugi-accuracy), every cycle and channel, the
# worst plane. The example preset's tiles hold as many cells as production tiles, so BaSiC identifies
# the profiles (internal/stitch's TestExamplePresetAccuracy asserts the same on 2 cycles). Measured
# (seed 1, 7 cycles, 2026-11-30): flatfield RMS error 0.47-0.48 of the uncorrected one for DAPI
# (4.7-4.9 % vs 10.1 %), 0.32-0.84 for CH2 (blank and markers; uncorrected 5.6 %, worst the marker of
# cycle 2); darkfield 455.8-456.5 counts for 460 (DAPI), 443.2-471.5 for 464 (CH2; worst the blank of
# cycle 1, autofluorescence only, -20.8), RMS error at most 21.5 counts. Bounds: those with a margin.
FLAT_REL_MAX=0.90      # flatfield RMS error / uncorrected (the true flatfield's RMS deviation from 1)
DARK_ERR_MAX=25        # |fitted - true| darkfield mean, counts (a unit error, e.g. /65535, is off by hundreds)
DARK_RMS_MAX=25        # RMS of fitted minus true darkfield, counts
POS_ERR_MAX=0.5        # tile position error, px, max over tiles after removing the global offset: every
                       # tile shows tissue and overlaps its neighbours by 108-144 px, so phase correlation
                       # is sub-pixel (measured worst 0.06 px); a fallback to the nominal grid is off by
                       # the stage jitter (1.5 px sd per axis) and fails
SCENE_NCC_MIN=0.95     # correlation of the stitched reference plane with the true scene (measured worst
                       # 0.965); a misplaced mosaic drops below
# Registration: the synthetic cycles are shifted against each other by a few px; the registered DAPI
# must agree with the reference cycle's better than the EDF did (NCC recomputed here), by this margin.
REG_NCC_GAIN_MIN=0.0

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
PY=/usr/bin/python3                   # Debian's python3 with tifffile (not a pyenv shim on PATH)
SM=${E2E_SNAKEMAKE:-snakemake}        # the Snakemake to test: Debian's 7.21, or a 9.x venv's bin/snakemake
CONFIG_FROM=${E2E_CONFIG_FROM:-synth} # synth: the synthetic project's config + test settings; init: kintsugi-config init
export USER=$(id -un) # Snakemake 7.21 checks accounts for $USER; sbatch uses the real user
limits=$(echo "$ACCOUNTS" | tr : =)
t0=$(date +%s)
say() { echo "e2e [$(($(date +%s) - t0)) s] $*"; }
held=""
cleanup_held() { [ -z "$held" ] || scancel $held 2>/dev/null || true; held=""; }
trap cleanup_held EXIT
fail() { echo "e2e: FAIL: $*" >&2; echo "e2e: work dir kept: $work" >&2; exit 1; }

# ---- preconditions --------------------------------------------------------------------------------
for b in kintsugi-synth kintsugi-assign kintsugi-stitch kintsugi-decon kintsugi-edf kintsugi-register kintsugi-qc kintsugi-accuracy; do
  [ -x "bin/$b" ] || { echo "e2e: bin/$b missing: run make first" >&2; exit 1; }
done
scontrol ping >/dev/null 2>&1 || { echo "e2e: no SLURM controller: run scripts/slurm-up.sh first" >&2; exit 1; }
command -v "$SM" >/dev/null || { echo "e2e: $SM not installed (E2E_SNAKEMAKE; scripts/test-deps.sh)" >&2; exit 1; }
say "Snakemake $("$SM" --version) ($SM)"
for spec in ${ACCOUNTS//,/ }; do # the cluster's limits must be the slots the config will claim
  got=$(sacctmgr -n -P show assoc account="${spec%%:*}" user= format=grptres 2>/dev/null || true)
  [ "$got" = "gres/gpu=${spec#*:}" ] || {
    echo "e2e: account ${spec%%:*}: cluster GrpTRES '$got', want gres/gpu=${spec#*:} (SLURM_TEST_ACCOUNTS=$ACCOUNTS scripts/slurm-up.sh)" >&2
    exit 1
  }
done
$PY -c 'import tifffile, numpy, yaml' || { echo "e2e: $PY lacks tifffile/numpy/yaml (apt-get install python3-tifffile)" >&2; exit 1; }
# The per-account GPU checks need no other GPU jobs on the test accounts: wait up to 10 min for them.
gpu_jobs_queued() { squeue -h -A "$(echo "$ACCOUNTS" | sed 's/:[0-9]*//g')" -O tres-alloc:200 2>/dev/null | grep -c gres/gpu || true; }
for _ in $(seq 1 120); do [ "$(gpu_jobs_queued)" = 0 ] && break; sleep 5; done
[ "$(gpu_jobs_queued)" = 0 ] ||
  { echo "e2e: GPU jobs of the test accounts stay in the queue (squeue); the concurrency checks need them gone" >&2; exit 1; }

if [ -n "${KINTSUGI_E2E_DIR:-}" ]; then
  work=$KINTSUGI_E2E_DIR
  case "$work" in /tmp/?*) ;; *) echo "e2e: KINTSUGI_E2E_DIR must be under /tmp/" >&2; exit 1 ;; esac
  rm -rf "$work"
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/kintsugi-e2e.XXXXXX)
fi
proj=$work/project
cfg=$work/config.yaml
say "work dir $work"

# ---- 0. slurm_check.py's own tests (recorded 7.x and >= 8 plugin logs) ----------------------------
$PY -m unittest -q tests/e2e/test_slurm_check.py 2>"$work/test_slurm_check.log" ||
  { cat "$work/test_slurm_check.log" >&2; fail "tests/e2e/test_slurm_check.py"; }
say "slurm_check.py unit tests passed"

# ---- 1. synthetic project ----------------------------------------------------------------------------
bin/kintsugi-synth --preset example --ncycles "$CYCLES" --out "$proj" --meta >"$work/synth.log" 2>&1 ||
  { tail -n 20 "$work/synth.log" >&2; fail "kintsugi-synth"; }
say "synthesised $CYCLES cycles in $proj"

# ---- 2. test config ---------------------------------------------------------------------------------------
if [ "$CONFIG_FROM" = init ]; then
  # The project's own config as a lab would make it: bin/kintsugi-config init from meta/experiment.json
  # (CODEX form), meta/CHANNELNAMES.txt and data/raw/, accounts from sacctmgr; used unchanged.
  res_flags=()
  for stage in stitch decon edf cycle registration qc; do
    m=$MEM_JOB; [ "$stage" = registration ] && m=$MEM_REGISTRATION; [ "$stage" = cycle ] && m=$MEM_CYCLE
    res_flags+=(--resource "mem_$stage=$m" --resource "time_$stage=$TIME_JOB" --resource "cpus_$stage=$CPUS_JOB")
  done
  res_flags+=(--resource "mem_qc_registration=$MEM_JOB" --resource "time_qc_registration=$TIME_JOB")
  bin/kintsugi-config init --project "$proj" --out "$cfg" --accounts-from-slurm --partition-gpu "$GPU_PARTITION" \
    --partition-cpu "$CPU_PARTITION" --device cpu --kintsugi-dir "$repo" "${res_flags[@]}" --log-format text \
    >"$work/config_init.log" 2>&1 || { cat "$work/config_init.log" >&2; fail "kintsugi-config init --project $proj"; }
  say "config written by kintsugi-config init (used unchanged): $(grep -c . "$cfg") lines"
else
$PY - "$proj/config.yaml" "$cfg" "$repo" "$ACCOUNTS" "$GPU_PARTITION" "$CPU_PARTITION" \
  "$MEM_JOB" "$MEM_REGISTRATION" "$TIME_JOB" "$CPUS_JOB" "$MEM_CYCLE" <<'PY'
import sys, yaml
src, dst, repo, accounts, pgpu, pcpu, mem, mem_reg, time_, cpus, mem_cycle = sys.argv[1:]
cfg = yaml.safe_load(open(src))
cfg["kintsugi_dir"] = repo
cfg["device"] = "cpu"      # CI has no GPU; every rule passes --device from here
res = cfg.setdefault("resources", {})
# Derived totals and the legacy single-account keys would disagree with the test accounts.
for k in ("total_gpu_slots", "total_cpu_slots", "total_slots", "account", "account_gpu", "account_cpu",
          "partition_gpu", "partition_cpu", "gpu_slots", "cpu_slots"):
    res.pop(k, None)
res["accounts"] = [
    {"name": n, "gpu_slots": int(s), "partition_gpu": pgpu, "partition_cpu": pcpu}
    for n, s in (a.split(":") for a in accounts.split(","))
]
cfg["fused"] = False       # this run: the three stage rules per cycle (the init run: the default, fused)
for stage in ("stitch", "decon", "edf", "cycle", "registration", "qc"):
    res[f"mem_{stage}"] = int(mem_reg if stage == "registration" else mem_cycle if stage == "cycle" else mem)
    res[f"time_{stage}"] = int(time_)
    res[f"cpus_{stage}"] = int(cpus)
res["mem_qc_registration"], res["time_qc_registration"] = int(mem), int(time_)
# The original's blank channels: "Blank" in cycles 1 and 2 (kintsugi-config's duplicate rule renames
# them Blank_1a, Blank_2a; every output and validate follow the Go names).
cfg["channel_names"][1][1] = cfg["channel_names"][2][1] = "Blank"
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
PY
fi
bin/kintsugi-config check --log-level warn "$cfg" >"$work/names.json" || fail "kintsugi-config check $cfg"
say "EDF names (kintsugi-config check): $($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["edf_files"], "renamed", [(r["cycle"], r["from"], r["to"]) for r in d["renamed"]])' "$work/names.json")"
bin/kintsugi-assign --config "$cfg" --log-level warn >"$work/assign.json" || fail "kintsugi-assign --config $cfg"
jobs=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"])' "$work/assign.json")
say "config $cfg; assignment: $($PY -c 'import json,sys; a=json.load(open(sys.argv[1]));print({c: v["account"] for c, v in a["cycles"].items()}, "registration", a["registration"]["account"], "qc", a["cpu"], "jobs", a["jobs"])' "$work/assign.json")"

# ---- 3. kintsugi-assign on the real SLURM: discover, live availability with held jobs -----------------
bin/kintsugi-assign discover --log-level warn >"$work/discover.yaml" || fail "kintsugi-assign discover"
$PY - "$work/discover.yaml" "$ACCOUNTS" <<'PY' || { cat "$work/discover.yaml" >&2; fail "discover output"; }
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
got = {a["name"]: a["gpu_slots"] for a in doc["resources"]["accounts"]}
want = {n: int(s) for n, s in (a.split(":") for a in sys.argv[2].split(","))}
assert got == want, f"discover listed {got}, want {want} (sacctmgr GrpTRES gres/gpu)"
assert all(a["partition_gpu"] == "gpu" and a["partition_cpu"] == "cpu" for a in doc["resources"]["accounts"]), doc
print(f"e2e discover: {got}")
PY
# Hold GPU jobs in the queue: acct_a 2 of 3 GPUs, acct_b 1 of 2 (pending jobs count as in use).
acct_a=${ACCOUNTS%%:*}
acct_b=$(echo "$ACCOUNTS" | cut -d, -f2 | cut -d: -f1)
held="$(sbatch --parsable -H -A "$acct_a" -p "$GPU_PARTITION" --gres=gpu:2 -J e2e_held --wrap true) $(sbatch --parsable -H -A "$acct_b" -p "$GPU_PARTITION" --gres=gpu:1 -J e2e_held --wrap true)"
bin/kintsugi-assign --config "$cfg" --live --log-level warn >"$work/assign_live.json" || fail "kintsugi-assign --live"
$PY - "$work/assign_live.json" "$acct_a" "$acct_b" <<'PY' || fail "live placement"
import json, sys
p, a, b = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
applied = {k: v["avail"] for k, v in p["live"]["applied"].items()}
assert p["source"] == "live" and p["live"]["from"] == "squeue", p
assert applied == {a: 1, b: 1}, f"live availability {applied}, want {a}: 1, {b}: 1 (held jobs hold 2 and 1 GPUs)"
assert p["jobs"] == 5, f"jobs {p['jobs']}: live data must not shrink the plan"
first = [p["cycles"][str(c)]["account"] for c in p["order"][:2]]
assert first == [a, b], f"first two cycles on {first}: free GPUs are filled first"
assert p["registration"]["account"] == a, "registration: first account with GPU slots in config order"
print(f"e2e live: applied {applied}, cycles {[p['cycles'][str(c)]['account'] for c in p['order']]}, jobs {p['jobs']}")
PY
"$SM" registration -n --configfile "$cfg" --profile profiles/slurm --config live=true >"$work/dry_live.log" 2>&1 ||
  { tail -n 30 "$work/dry_live.log" >&2; fail "snakemake -n --config live=true"; }
grep -q "source live (squeue: $acct_a 1 free of 3, $acct_b 1 free of 2)" "$work/dry_live.log" ||
  { grep kintsugi-assign "$work/dry_live.log" >&2; fail "live: true did not use squeue's availability"; }
cleanup_held
say "discover and live availability (held jobs) checked"

# ---- 4. dry runs: --config overrides, targets -------------------------------------------------------------
dry() { "$SM" "$@" -n --configfile "$cfg" --profile profiles/slurm >"$work/dry.log" 2>&1; }
dry registration --config 'cycles=[1,2]' 'live_accounts=[{"name":"'"$acct_a"'","gpu_avail":0},{"name":"'"$acct_b"'","gpu_avail":1}]' ||
  { tail -n 30 "$work/dry.log" >&2; fail "--config with numbers as strings"; }
grep -q "source live (config live_accounts: $acct_a 0 free of 3, $acct_b 1 free of 2); cycles per account {'$acct_b': \[1\], '$acct_a': \[2\]}" "$work/dry.log" ||
  { grep kintsugi-assign "$work/dry.log" >&2; fail "--config overrides not applied"; }
if dry registration --config 'cycles=[1,x]'; then fail "--config cycles=[1,x] accepted"; fi
grep -q "config key cycles\[1\]: 'x' is not an integer" "$work/dry.log" || { tail -n 5 "$work/dry.log" >&2; fail "bad --config number not named"; }
if dry registration --config 'live_accounts=[{"name":"nosuch","gpu_avail":1}]'; then fail "unknown live account accepted"; fi
grep -q "unknown account(s) nosuch" "$work/dry.log" || { tail -n 5 "$work/dry.log" >&2; fail "unknown live account not named"; }
dry registration || { tail -n 30 "$work/dry.log" >&2; fail "snakemake registration -n"; }
if grep -E '^rule qc_' "$work/dry.log"; then fail "snakemake registration pulls in QC rules"; fi
dry all || { tail -n 30 "$work/dry.log" >&2; fail "snakemake all -n"; }
for r in qc_stitch qc_decon qc_edf qc_registration registration; do
  grep -q "^rule $r:" "$work/dry.log" || fail "snakemake all -n lacks rule $r"
done
say "dry runs: overrides, errors and targets checked"

# ---- 5. the workflow through SLURM -----------------------------------------------------------------------
run_snakemake() { # $1 target, $2 log, further arguments to snakemake
  local target=$1 log=$2
  shift 2
  say "snakemake $target $* --profile profiles/slurm (log $log)"
  if ! timeout -k 30 "$SNAKEMAKE_TIMEOUT" "$SM" "$target" "$@" --configfile "${RUN_CFG:-$cfg}" --profile profiles/slurm >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    # Cancel what this run left in the queue, so later runs see a clean cluster.
    ids=$(sed -n 's/.*has been submitted with SLURM jobid \([0-9][0-9]*\).*/\1/p' "$log" | tr '\n' ' ')
    [ -z "$ids" ] || scancel $ids 2>/dev/null || true
    fail "snakemake $target"
  fi
}
run_snakemake registration "$work/snakemake_registration.log"
say "registration workflow done"

# ---- 6. SLURM accounting: jobs, accounts, GPUs, jobs in flight --------------------------------------------
# The per-cycle rules: one fused cycle job (fused: true, the schema's default) or stitch, deconvolve, edf.
per_cycle=$($PY -c 'import json, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
d = json.load(open(sys.argv[2]))["properties"]["fused"]["default"]
print("cycle" if c.get("fused", d) else "stitch deconvolve edf")' "$cfg" internal/config/schema/config.schema.json)
say "per-cycle rules: $per_cycle"
$PY - "$work/assign.json" "$work/expect.json" $per_cycle <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
assert all(v["mode"] == "gpu" for v in a["cycles"].values()), "kintsugi-assign gave a non-GPU cycle"
expect = [{"rule": rule, "wildcards": {"cycle": str(c)}, "account": v["account"], "partition": v["partition"], "gpus": 1}
          for rule in sys.argv[3:] for c, v in a["cycles"].items()]
r = a["registration"]
expect.append({"rule": "registration", "account": r["account"], "partition": r["partition"], "gpus": 1})
json.dump(expect, open(sys.argv[2], "w"), indent=1)
PY
$PY tests/e2e/slurm_check.py --log "$work/snakemake_registration.log" --limits "$limits" \
  --expect "$work/expect.json" --table "$work/sacct_registration.tsv" --max-gpu-jobs "$jobs" --require-gpu-peak \
  --per-account-in-flight --require-running-peak "$jobs" \
  >"$work/slurm_check_registration.log" || { cat "$work/slurm_check_registration.log"; fail "SLURM accounting checks (registration run)"; }
grep '^slurm_check' "$work/slurm_check_registration.log"
n_sub=$(grep -c 'has been submitted with SLURM jobid' "$work/snakemake_registration.log")
n_rules=$(echo $per_cycle | wc -w)
[ "$n_sub" = $((n_rules * CYCLES + 1)) ] || fail "registration run submitted $n_sub SLURM jobs, want $((n_rules * CYCLES + 1))"

# ---- 7. outputs: files, shapes, content ------------------------------------------------------------------------
$PY - "$proj" "$cfg" "$MIN_NONZERO_FRACTION" "$MIN_STD_COUNTS" "$SHAPE_TOL_PX" "$REG_NCC_GAIN_MIN" "$work/names.json" <<'PY' || fail "output checks"
import csv, glob, json, os, re, sys
from xml.etree import ElementTree as ET
import numpy as np, tifffile, yaml
proj, cfgp = sys.argv[1], sys.argv[2]
min_nz, min_std, shape_tol, gain_min = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
cfg = yaml.safe_load(open(cfgp))
edf_files = json.load(open(sys.argv[7]))["edf_files"]   # the Go names (kintsugi-config check), duplicates renamed
def edf_name(c, ch):
    return edf_files[str(c)][ch - 1]
raw_root = os.path.join(proj, "data", "raw")
P = os.path.join(proj, "data", "processed")
fails, counts = [], {"stitched": 0, "deconvolved": 0, "edf": 0, "registered": 0}
def sentinel(path, stage, cyc=None):
    if not os.path.isfile(path):
        fails.append(f"{path} missing"); return
    kv = dict(l.split("=", 1) for l in open(path).read().split("\n") if "=" in l)
    if kv.get("stage") != stage or (cyc is not None and kv.get("cycle") != str(cyc)):
        fails.append(f"{path}: stage/cycle {kv.get('stage')}/{kv.get('cycle')}, want {stage}/{cyc}")
def plane(p, shape=None):
    if not os.path.isfile(p):
        fails.append(f"{p} missing"); return None
    img = tifffile.imread(p)
    if img.dtype != np.uint16 or img.ndim != 2:
        fails.append(f"{p}: {img.dtype} {img.shape}, want 2-D uint16"); return None
    if shape is not None and img.shape != shape:
        fails.append(f"{p}: shape {img.shape}, want {shape}")
    if img.std() < min_std:
        fails.append(f"{p}: std {img.std():.1f} counts (min {min_std}): no content")
    return img
cycles = []
for raw in sorted(glob.glob(os.path.join(raw_root, "cyc*"))):
    cyc = int(re.search(r"cyc0*(\d+)", os.path.basename(raw)).group(1))
    cycles.append(cyc)
    tiles_m = [re.match(r"\d+_(\d{5})_Z(\d{3})_CH(\d+)\.tif$", f) for f in os.listdir(raw)]
    tiles_m = [m for m in tiles_m if m]
    tiles = sorted({int(m.group(1)) for m in tiles_m})
    zs = sorted({int(m.group(2)) for m in tiles_m})
    chs = sorted({int(m.group(3)) for m in tiles_m})
    th, tw = tifffile.imread(os.path.join(raw, tiles_m[0].group(0))).shape
    # stitched
    out = os.path.join(P, "stitched", f"cyc{cyc:02d}")
    sentinel(os.path.join(out, ".snakemake_complete"), "stitch", cyc)
    pos_path = os.path.join(out, "tile_positions.csv")
    want_shape = None  # the mosaic spans the fitted tile positions: (max y_pos + H, max x_pos + W)
    if not os.path.isfile(pos_path):
        fails.append(f"{pos_path} missing")
    else:
        rows = list(csv.DictReader(open(pos_path)))
        if [int(r["tile"]) for r in rows] != tiles:
            fails.append(f"{pos_path}: tiles {[r['tile'] for r in rows]}, want {tiles}")
        ys = [float(r["y_pos"]) for r in rows]; xs = [float(r["x_pos"]) for r in rows]
        if rows and (min(ys) != 0 or min(xs) != 0):
            fails.append(f"{pos_path}: min y_pos/x_pos {min(ys)}/{min(xs)}, want 0/0")
        if rows:
            want_shape = (max(ys) + th, max(xs) + tw)
    shape = None
    for ch in chs:
        for z in zs:
            p = os.path.join(out, f"CH{ch}", f"{z:02d}.tif")
            img = plane(p)
            if img is None:
                continue
            counts["stitched"] += 1
            shape = shape or img.shape
            if want_shape and any(abs(g - w) > shape_tol for g, w in zip(img.shape, want_shape)):
                fails.append(f"{p}: shape {img.shape}, want ({want_shape[0]:.1f}, {want_shape[1]:.1f})"
                             f" +- {shape_tol} px from tile_positions.csv and the tile size")
            nz = float(np.count_nonzero(img)) / img.size
            if nz < min_nz:
                fails.append(f"{p}: non-zero fraction {nz:.3f} (min {min_nz})")
    # deconvolved: one uint16 plane per z, the stitched size
    out = os.path.join(P, "deconvolved", f"cyc{cyc:02d}")
    sentinel(os.path.join(out, ".snakemake_complete"), "decon", cyc)
    if not os.path.isfile(os.path.join(out, "DECONV_parameters.txt")):
        fails.append(f"{out}/DECONV_parameters.txt missing")
    for ch in chs:
        got = sorted(glob.glob(os.path.join(out, f"CH{ch}", "deconv_*.tif")))
        if len(got) != len(zs):
            fails.append(f"{out}/CH{ch}: {len(got)} deconv_*.tif planes, want {len(zs)}")
        for p in got:
            if plane(p, shape) is not None:
                counts["deconvolved"] += 1
    # edf: one marker-named plane per channel, the stitched size
    out = os.path.join(P, "edf", f"cyc{cyc:02d}")
    sentinel(os.path.join(out, ".snakemake_complete"), "edf", cyc)
    for ch in chs:
        if plane(os.path.join(out, edf_name(cyc, ch)), shape) is not None:
            counts["edf"] += 1
# registered: same names, every cycle the same (reference) size
reg = os.path.join(P, "registered")
sentinel(os.path.join(reg, ".snakemake_complete"), "registration")
ref_cycle = int((cfg.get("registration") or {}).get("reference_cycle", 1))
def dapi(d, c):
    fs = sorted(f for f in os.listdir(d) if f.endswith(".tif"))
    ds = [f for f in fs if f.startswith("DAPI")]
    return (ds or fs)[0]
ref_shape = None
for cyc in cycles:
    for ch in chs:
        img = plane(os.path.join(reg, f"cyc{cyc:02d}", edf_name(cyc, ch)), ref_shape)
        if img is not None:
            ref_shape = ref_shape or img.shape
            counts["registered"] += 1
if os.path.isfile(os.path.join(reg, "registered.ome.tif")):
    with tifffile.TiffFile(os.path.join(reg, "registered.ome.tif")) as tf:
        s = tf.series[0]
        n_planes = int(np.prod(s.shape[:-2]))
        if n_planes != len(cycles) * len(chs) or tuple(s.shape[-2:]) != ref_shape:
            fails.append(f"registered.ome.tif: series shape {s.shape}, want {len(cycles) * len(chs)} planes of {ref_shape}")
        # channel order: cycle by cycle in config order, the OME-XML names and markers.csv the same
        want = [edf_name(cyc, ch)[:-4] for cyc in cycles for ch in chs]
        ome = ET.fromstring(tf.ome_metadata)
        ns = {"o": ome.tag.split("}")[0].strip("{")}
        got = [c.get("Name") for c in ome.find("o:Image/o:Pixels", ns).findall("o:Channel", ns)]
        if got != want:
            fails.append(f"registered.ome.tif channels {got}, want config order {want}")
    mpath = os.path.join(reg, "markers.csv")
    if not os.path.isfile(mpath):
        fails.append(f"{mpath} missing")
    else:
        with open(mpath, newline="") as fh:
            rows = list(csv.DictReader(fh))
        mk = [r["marker_name"] for r in rows]
        if mk != want or [int(r["channel_number"]) for r in rows] != list(range(1, len(want) + 1)):
            fails.append(f"markers.csv markers {mk}, want {want} numbered 1..{len(want)}")
        blanks = [r["marker_name"] for r in rows if r["marker_name"].lower().startswith("blank")]
        if any(r["remove"] != "TRUE" for r in rows if r["marker_name"] in blanks):
            fails.append("markers.csv: a blank channel is not marked remove=TRUE")
else:
    fails.append(f"{reg}/registered.ome.tif missing")
# registration improved every cycle's DAPI agreement with the reference (recomputed here)
def ncc(a, b):
    h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    a = a[:h, :w].astype(np.float64).ravel(); b = b[:h, :w].astype(np.float64).ravel()
    return float(np.corrcoef(a, b)[0, 1])
rd = os.path.join(reg, f"cyc{ref_cycle:02d}"); ed = os.path.join(P, "edf", f"cyc{ref_cycle:02d}")
ref_reg, ref_edf = tifffile.imread(os.path.join(rd, dapi(rd, ref_cycle))), tifffile.imread(os.path.join(ed, dapi(ed, ref_cycle)))
worst = None
for cyc in cycles:
    if cyc == ref_cycle:
        continue
    rdir, edir = os.path.join(reg, f"cyc{cyc:02d}"), os.path.join(P, "edf", f"cyc{cyc:02d}")
    before = ncc(ref_edf, tifffile.imread(os.path.join(edir, dapi(edir, cyc))))
    after = ncc(ref_reg, tifffile.imread(os.path.join(rdir, dapi(rdir, cyc))))
    if worst is None or after - before < worst[0]:
        worst = (after - before, cyc, before, after)
    if after - before < gain_min:
        fails.append(f"cycle {cyc}: DAPI NCC with cycle {ref_cycle} {before:.4f} before, {after:.4f} after registration")
if worst:
    print(f"e2e registration: smallest NCC gain {worst[0]:+.4f} (cycle {worst[1]}: {worst[2]:.4f} -> {worst[3]:.4f})")
print(f"e2e outputs: {counts}")
for f in fails[:40]:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails or not all(counts.values()) else 0)
PY

# ---- 7b. stitching accuracy against the ground truth -------------------------------------------------------
for c in $(seq 1 "$CYCLES"); do
  bin/kintsugi-accuracy --project "$proj" --cycle "$c" --json >"$work/accuracy_cyc$c.json" 2>>"$work/accuracy.log" ||
    { tail -n 20 "$work/accuracy.log" >&2; fail "kintsugi-accuracy --cycle $c"; }
done
$PY - "$work" "$CYCLES" "$FLAT_REL_MAX" "$DARK_ERR_MAX" "$DARK_RMS_MAX" "$POS_ERR_MAX" "$SCENE_NCC_MIN" <<'PY' || fail "accuracy"
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
flat_rel_max, dark_err_max, dark_rms_max, pos_max, ncc_min = map(float, sys.argv[3:8])
fails, worst = [], {"flat_rel": (0, ""), "dark": (0, ""), "darkmean": (0, ""), "pos": (0, ""), "ncc": (1, "")}
def track(key, v, where, lower_is_worse=False):
    if (v < worst[key][0]) if lower_is_worse else (v > worst[key][0]):
        worst[key] = (v, where)
for c in range(1, n + 1):
    r = json.load(open(f"{work}/accuracy_cyc{c}.json"))
    if r.get("missing"):
        fails.append(f"cycle {c}: missing outputs {r['missing'][:5]}")
    for ch in r["channels"]:
        w = f"cycle {c} CH{ch['channel']}"
        flat_rel = ch["flat_rms_max"] / ch["flat_baseline_rms"]
        track("flat_rel", flat_rel, f"{w} z{ch['flat_rms_max_z']} (rms {ch['flat_rms_max']:.4f}, uncorrected {ch['flat_baseline_rms']:.4f})")
        track("dark", ch["dark_rms_max"], f"{w} z{ch['dark_rms_max_z']}")
        dm = ch["dark_fit_mean"] - ch["dark_true_mean"]
        track("darkmean", abs(dm), f"{w} (fit {ch['dark_fit_mean']:.1f}, true {ch['dark_true_mean']:.1f})")
        if not flat_rel <= flat_rel_max:
            fails.append(f"{w}: flatfield RMS error {ch['flat_rms_max']:.4f} at z{ch['flat_rms_max_z']} is {flat_rel:.2f} "
                         f"of the uncorrected {ch['flat_baseline_rms']:.4f} (max {flat_rel_max})")
        if not abs(dm) <= dark_err_max:
            fails.append(f"{w}: darkfield mean {ch['dark_fit_mean']:.1f}, true {ch['dark_true_mean']:.1f} counts "
                         f"(want within {dark_err_max})")
        if not ch["dark_rms_max"] <= dark_rms_max:
            fails.append(f"{w}: darkfield RMS error {ch['dark_rms_max']:.1f} counts at z{ch['dark_rms_max_z']} > {dark_rms_max}")
        if ch.get("scene_ncc") is None:
            fails.append(f"{w}: no scene NCC (stitched reference plane or truth scene missing)")
        else:
            track("ncc", ch["scene_ncc"], f"{w} z{ch.get('scene_z')}", lower_is_worse=True)
            if ch["scene_ncc"] < ncc_min:
                fails.append(f"{w}: NCC with the true scene {ch['scene_ncc']:.4f} < {ncc_min}")
    p = r.get("positions")
    if not p:
        fails.append(f"cycle {c}: no tile-position report")
    else:
        track("pos", p["max"], f"cycle {c} tile {p['max_tile']} (rms {p['rms']:.3f})")
        if p["max"] > pos_max:
            fails.append(f"cycle {c}: tile position error {p['max']:.3f} px at tile {p['max_tile']} > {pos_max}")
for k, (v, where) in worst.items():
    print(f"e2e accuracy: worst {k}: {v:.4f} at {where}")
for f in fails:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
say "outputs and stitching accuracy checked"

# ---- 8. snakemake all: the QC reports on the CPU partition -----------------------------------------------
# --forcerun registration: the GPU registration job runs again while qc_stitch/qc_decon/qc_edf run
# beside it (they need only the EDF sentinels), which shows CPU QC jobs are not held back by gpu_jobs.
# Memory escalation on retry: this run's config sets mem_registration below the registration's smallest
# working set (kintsugi-register names it: "raise resources.mem_registration (MB) ... to at least N"; a
# 1 MB budget makes it say so before any work), at 3/4 of it: attempt 1 exits 2 naming
# resources.mem_registration, the profile's retry runs with 2 x that (1.5 N) and succeeds.
need=$(mem_mb=1 bin/kintsugi-register run --config "$proj/.kintsugi/config.json" --device cpu --log-format text 2>&1 |
  sed -n 's/.*resources\.mem_registration (MB).* at least \([0-9][0-9]*\).*/\1/p' | head -n 1 || true)
[ -n "$need" ] || fail "kintsugi-register with a 1 MB budget did not name resources.mem_registration's minimum"
mem_low=$((need * 3 / 4))
cfg_all=$work/config_all.yaml
$PY - "$cfg" "$cfg_all" "$mem_low" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["resources"]["mem_registration"] = int(sys.argv[3])
yaml.safe_dump(c, open(sys.argv[2], "w"), sort_keys=False)
PY
say "registration needs at least $need MB: the all run sets mem_registration $mem_low (attempt 2: $((2 * mem_low)))"
RUN_CFG=$cfg_all run_snakemake all "$work/snakemake_all.log" --forcerun registration
$PY - "$work/assign.json" "$work/expect_qc.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
cpu, reg = a["cpu"], a["registration"]
json.dump([{"rule": r, "account": cpu["account"], "partition": cpu["partition"], "gpus": 0}
           for r in ("qc_stitch", "qc_decon", "qc_edf", "qc_registration", "qc_report")]
          + [{"rule": "registration", "account": reg["account"], "partition": reg["partition"], "gpus": 1}],
          open(sys.argv[2], "w"), indent=1)
PY
$PY tests/e2e/slurm_check.py --log "$work/snakemake_all.log" --limits "$limits" --expect "$work/expect_qc.json" \
  --table "$work/sacct_all.tsv" --max-gpu-jobs "$jobs" --require-cpu-beside --retried registration >"$work/slurm_check_all.log" ||
  { cat "$work/slurm_check_all.log"; fail "SLURM accounting checks (all run: QC jobs without GPU, beside registration)"; }
grep '^slurm_check' "$work/slurm_check_all.log"
n_sub=$(grep -c 'has been submitted with SLURM jobid' "$work/snakemake_all.log")
[ "$n_sub" = 7 ] || fail "all --forcerun registration submitted $n_sub SLURM jobs, want registration twice (the retry) + the 4 QC jobs + qc_report"
reglog=$proj/slurm/logs/snakemake/registration.log
$PY - "$reglog" "$mem_low" <<'PY' || fail "registration log: attempts and memory"
import re, sys
t = open(sys.argv[1]).read()
low = int(sys.argv[2])
heads = re.findall(r"^==== \S+ kintsugi registration \(all cycles\): SLURM job (\d+), attempt (\d+), host \S+, mem_mb (\d+)", t, re.M)
# The registration run's record stays (appended logs), then this run's two attempts.
got = [(int(a), int(m)) for _, a, m in heads]
assert len(heads) == 3 and got[1:] == [(1, low), (2, 2 * low)], f"{sys.argv[1]}: headers (attempt, mem_mb) {got}, want [(1, ...), (1, {low}), (2, {2 * low})]"
part = t.split(f"attempt 1, host")[-1].split("==== ")[0]
assert "resources.mem_registration" in part, "attempt 1 did not name resources.mem_registration"
print(f"e2e retry: registration log keeps 3 job records {got}; attempt 1 refused {low} MB naming resources.mem_registration")
PY
$PY - "$proj" "$CYCLES" <<'PY' || fail "QC outputs"
import glob, json, os, re, struct, sys, zlib
import numpy as np, tifffile
proj, n = sys.argv[1], int(sys.argv[2])
qc = os.path.join(proj, "qc_plots")
fails, pngs = [], 0
def decode_png(path):
    """A PNG decoder's checks, standard library only: signature, chunk CRCs, IHDR, inflated size."""
    b = open(path, "rb").read()
    if b[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    i, idat, ihdr = 8, b"", None
    while i < len(b):
        ln, typ = struct.unpack(">I4s", b[i:i + 8])
        data = b[i + 8:i + 8 + ln]
        if zlib.crc32(typ + data) != struct.unpack(">I", b[i + 8 + ln:i + 12 + ln])[0]:
            raise ValueError(f"bad CRC in chunk {typ}")
        if typ == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data)
        elif typ == b"IDAT":
            idat += data
        i += 12 + ln
    w, h, depth, ctype = ihdr[:4]
    chans = {0: 1, 2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    if depth != 8 or len(raw) != h * (1 + w * chans):
        raise ValueError(f"{w}x{h} depth {depth} colour {ctype}: {len(raw)} bytes inflated")
    return w, h
for stage in ("stitch", "decon", "edf", "registration"):
    s = os.path.join(qc, f".snakemake_complete_{stage}")
    kv = dict(l.split("=", 1) for l in open(s).read().split("\n") if "=" in l) if os.path.isfile(s) else {}
    if kv.get("stage") != f"qc_{stage}" or kv.get("cycles") != str(n):
        fails.append(f"{s}: {kv}")
    d = os.path.join(qc, stage)
    summary = json.load(open(os.path.join(d, "summary.json")))
    for f in glob.glob(os.path.join(d, "*.png")):
        try:
            w, h = decode_png(f)
            pngs += 1
        except Exception as e:
            fails.append(f"{f}: {e}")
    for hm in summary["heatmaps"]:
        w, h = decode_png(os.path.join(d, hm["file"]))
        if (w, h) != (16 * len(hm["cols"]), 16 * len(hm["rows"])):
            fails.append(f"{hm['file']}: {w}x{h} for {len(hm['rows'])} rows x {len(hm['cols'])} cols")
    for c in range(1, n + 1):
        m = json.load(open(os.path.join(d, f"cyc{c:02d}_metrics.json")))
        for ch in m["channels"]:
            if not os.path.isfile(os.path.join(d, ch["overview_png"])):
                fails.append(f"{d}/{ch['overview_png']} missing")
            for p in ch["planes"]:
                img = tifffile.imread(os.path.join(proj, p["file"]))
                want = {"mean": float(img.mean()), "zero_fraction": float((img == 0).mean()),
                        "saturated_fraction": float((img >= 64000).mean()), "max": int(img.max()),
                        "p50": int(np.sort(img, axis=None)[int(np.ceil(0.5 * img.size)) - 1])}
                for k, v in want.items():
                    if abs(p[k] - v) > 1e-6 * max(1, abs(v)):
                        fails.append(f"{stage} cycle {c} {p['file']}: {k} {p[k]}, tifffile says {v}")
        if stage == "registration":
            r = m["registration"]
            if not os.path.isfile(os.path.join(d, r["overlay_png"])) or r["ncc_registered"] is None:
                fails.append(f"registration cycle {c}: {r}")
            if c != r["reference_cycle"] and not r.get("stage_metrics"):
                fails.append(f"registration cycle {c}: the registration stage's metrics were not read")
# The one-page report (rule qc_report, CPU partition): self-contained (every image a data URI, no
# network reference), one section per stage; the original's PDF names beside it.
rep = os.path.join(qc, "report.html")
if not os.path.isfile(rep):
    fails.append(f"{rep} missing")
else:
    html = open(rep, encoding="utf-8").read()
    srcs = re.findall(r'<img[^>]*\ssrc="([^"]*)"', html)
    if len(srcs) < 10 or any(not s.startswith("data:image/") for s in srcs):
        fails.append(f"{rep}: {len(srcs)} images, not all embedded data URIs")
    if re.search(r'(src|href)="(https?:)?//', html):
        fails.append(f"{rep}: refers to the network")
    for cyc in range(1, n + 1):
        if f"cycle {cyc}" not in html.lower() and f"cyc{cyc:02d}" not in html:
            fails.append(f"{rep}: cycle {cyc} not mentioned")
for pdf in ("stitched_summary_heatmaps.pdf", "deconvolved_summary_heatmaps.pdf", "edf_summary_heatmaps.pdf",
            "registration_qc_overlay_grid.pdf"):
    pp = os.path.join(qc, pdf)
    if not os.path.isfile(pp) or open(pp, "rb").read(5) != b"%PDF-":
        fails.append(f"{pp}: missing or not a PDF")
print(f"e2e QC: 4 reports, {pngs} PNGs decoded, metrics match tifffile; report.html and the original's 4 PDFs")
for f in fails[:40]:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
say "QC reports checked"

# ---- 9. validate ------------------------------------------------------------------------------------------------
"$SM" validate --configfile "$cfg" --profile profiles/slurm >"$work/validate.log" 2>&1 || { tail -n 20 "$work/validate.log" >&2; fail "snakemake validate"; }
grep -q "validate: all $((CYCLES * 2)) EDF files present" "$work/validate.log" || fail "validate did not count every EDF file"
victim=$(ls "$proj/data/processed/edf/cyc02/"*.tif | grep -v DAPI | head -n 1)
mv "$victim" "$work/moved.tif"
if "$SM" validate --configfile "$cfg" --profile profiles/slurm >"$work/validate_missing.log" 2>&1; then
  mv "$work/moved.tif" "$victim"; fail "validate passed with $victim missing"
fi
mv "$work/moved.tif" "$victim"
grep -q "validate: 1 of $((CYCLES * 2)) EDF files missing" "$work/validate_missing.log" && grep -qF "  $victim" "$work/validate_missing.log" ||
  { tail -n 20 "$work/validate_missing.log" >&2; fail "validate did not list the missing file"; }
say "validate checked"

say "OK"
[ "${E2E_KEEP:-0}" = 1 ] || [ -n "${KINTSUGI_E2E_DIR:-}" ] || rm -rf "$work"
