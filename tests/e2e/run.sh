#!/usr/bin/env bash
# End-to-end test of the stitch stage through the real local SLURM cluster and Snakemake.
#
# Needs: bin/ built by `make` (kintsugi-synth, kintsugi-assign, kintsugi-stitch, kintsugi-accuracy),
# the test cluster from scripts/slurm-up.sh (accounts acct_a with 3 GPUs, acct_b with 2), snakemake,
# /usr/bin/python3 with tifffile (Debian packages). Run from anywhere: tests/e2e/run.sh
#
# What it does:
#   1. writes a tiny synthetic project with more cycles than the 5 GPU slots (bin/kintsugi-synth);
#   2. writes a test config from the project's config.yaml: the two test accounts, device cpu
#      (CI has no GPU; the Snakefile passes --device from the config), small job memory;
#   3. runs `snakemake stitch_all --configfile <cfg> --profile profiles/slurm` from the repo root;
#   4. checks, with tests/e2e/slurm_check.py, that every cycle ran as its own SLURM job with
#      gres/gpu=1 under the account bin/kintsugi-assign chose for it, that no account ever ran more
#      GPU jobs at once than its slots, and that the overflow queued in SLURM (AssocGrpGRES);
#   5. checks the outputs: every stitched plane, tile_positions.csv and the sentinel exist; every
#      plane reads back (tifffile) as 2-D uint16 of the size the tile positions imply, with content;
#   6. scores every cycle against the synthetic ground truth with bin/kintsugi-accuracy (flatfield,
#      darkfield, tile positions, scene NCC) against the tolerances below.
# Failures print the worst value and where. About 1.5 min on 2 cores.
#
# Env: KINTSUGI_E2E_DIR  work directory under /tmp/ (default: a new /tmp/kintsugi-e2e.XXXXXX); it
#                        is emptied first and kept afterwards (.ci/run prints its logs)
#      E2E_CYCLES        cycles to synthesise (default 7: more than the 5 GPU slots)
#      E2E_KEEP=1        keep the work directory after success too
set -euo pipefail

# ---- tolerances and settings ------------------------------------------------------------------
CYCLES=${E2E_CYCLES:-7}
ACCOUNTS=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}   # name:gpu_slots, as scripts/slurm-up.sh set them
GPU_PARTITION=gpu
CPU_PARTITION=cpu
MEM_STITCH=1000      # MB per stitch job: a tiny cycle needs far less; keeps 5 jobs under the node's RealMemory
TIME_STITCH=20       # minutes per stitch job (SLURM time limit; a tiny cycle takes seconds)
CPUS_STITCH=2        # cpus_per_task of a stitch job
SNAKEMAKE_TIMEOUT=1800   # s; the whole workflow takes ~1-2 min on 2 cores
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
# worst plane. BaSiC cannot identify a flatfield or darkfield from the 6 tiles of 160x200 px of the
# tiny preset (measured: flatfield RMS error 0.08-0.37, darkfield 0-460 counts for 460 true, worse than
# no correction); its accuracy is asserted at production size (63 tiles of 1440x1920) by
# internal/stitch's TestProductionScaleAccuracy (flatfield <= 5 %, darkfield within 25 counts). Here
# the profile bounds only catch gross failures (a wrong axis, a wrong unit, a non-normalised profile):
FLAT_RMS_MAX=0.6       # flatfield RMS error (fitted vs true, both mean 1); measured worst 0.37
DARK_OVER_MAX=100      # fitted darkfield mean minus true, counts: never far above the truth (a unit
                       # error, e.g. counts vs /65535, is off by thousands); measured worst +12
POS_ERR_MAX=1.0        # tile position error, px, max over tiles after removing the global offset: every
                       # tile shows tissue and overlaps its neighbours by 48-60 px, so phase correlation
                       # is sub-pixel (measured worst 0.18 px); a fallback to the nominal grid is off by
                       # the stage jitter (1.5 px sd per axis) and fails
SCENE_NCC_MIN=0.85     # correlation of the stitched reference plane with the true scene (measured worst
                       # 0.88, limited by the unidentifiable flatfield); a misplaced mosaic drops below

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
PY=/usr/bin/python3                   # Debian's python3 with tifffile (not a pyenv shim on PATH)
export USER=$(id -un) # Snakemake 7.21 checks accounts for $USER; sbatch uses the real user
limits=$(echo "$ACCOUNTS" | tr : =)
t0=$(date +%s)
say() { echo "e2e [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "e2e: FAIL: $*" >&2; echo "e2e: work dir kept: $work" >&2; exit 1; }

# ---- preconditions --------------------------------------------------------------------------------
for b in kintsugi-synth kintsugi-assign kintsugi-stitch kintsugi-accuracy; do
  [ -x "bin/$b" ] || { echo "e2e: bin/$b missing: run make first" >&2; exit 1; }
done
scontrol ping >/dev/null 2>&1 || { echo "e2e: no SLURM controller: run scripts/slurm-up.sh first" >&2; exit 1; }
command -v snakemake >/dev/null || { echo "e2e: snakemake not installed" >&2; exit 1; }
for spec in ${ACCOUNTS//,/ }; do # the cluster's limits must be the slots the config will claim
  got=$(sacctmgr -n -P show assoc account="${spec%%:*}" user= format=grptres 2>/dev/null || true)
  [ "$got" = "gres/gpu=${spec#*:}" ] || {
    echo "e2e: account ${spec%%:*}: cluster GrpTRES '$got', want gres/gpu=${spec#*:} (SLURM_TEST_ACCOUNTS=$ACCOUNTS scripts/slurm-up.sh)" >&2
    exit 1
  }
done
$PY -c 'import tifffile, numpy, yaml' || { echo "e2e: $PY lacks tifffile/numpy/yaml (apt-get install python3-tifffile)" >&2; exit 1; }

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

# ---- 1. synthetic project ----------------------------------------------------------------------------
bin/kintsugi-synth --preset tiny --ncycles "$CYCLES" --out "$proj" >"$work/synth.log" 2>&1 ||
  { tail -n 20 "$work/synth.log" >&2; fail "kintsugi-synth"; }
say "synthesised $CYCLES cycles in $proj"

# ---- 2. test config ---------------------------------------------------------------------------------------
$PY - "$proj/config.yaml" "$cfg" "$repo" "$ACCOUNTS" "$GPU_PARTITION" "$CPU_PARTITION" \
  "$MEM_STITCH" "$TIME_STITCH" "$CPUS_STITCH" <<'PY'
import sys, yaml
src, dst, repo, accounts, pgpu, pcpu, mem, time_, cpus = sys.argv[1:]
cfg = yaml.safe_load(open(src))
cfg["kintsugi_dir"] = repo
cfg["device"] = "cpu"      # CI has no GPU; the stitch rule passes --device from here
res = cfg.setdefault("resources", {})
# Derived totals and the legacy single-account keys would disagree with the test accounts.
for k in ("total_gpu_slots", "total_cpu_slots", "total_slots", "account", "account_gpu", "account_cpu",
          "partition_gpu", "partition_cpu", "gpu_slots", "cpu_slots"):
    res.pop(k, None)
res["accounts"] = [
    {"name": n, "gpu_slots": int(s), "partition_gpu": pgpu, "partition_cpu": pcpu}
    for n, s in (a.split(":") for a in accounts.split(","))
]
res["mem_stitch"], res["time_stitch"], res["cpus_stitch"] = int(mem), int(time_), int(cpus)
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
PY
bin/kintsugi-assign --config "$cfg" >"$work/assign.json" || fail "kintsugi-assign --config $cfg"
say "config $cfg; assignment: $($PY -c 'import json,sys; a=json.load(open(sys.argv[1]));print({c: v["account"] for c, v in a["cycles"].items()})' "$work/assign.json")"

# ---- 3. the workflow through SLURM -----------------------------------------------------------------------
say "snakemake stitch_all --profile profiles/slurm (log $work/snakemake.log)"
if ! timeout -k 30 "$SNAKEMAKE_TIMEOUT" snakemake stitch_all --configfile "$cfg" --profile profiles/slurm \
  >"$work/snakemake.log" 2>&1; then
  tail -n 60 "$work/snakemake.log" >&2
  # Cancel what this run left in the queue, so later runs see a clean cluster.
  ids=$(sed -n 's/.*has been submitted with SLURM jobid \([0-9][0-9]*\).*/\1/p' "$work/snakemake.log" | tr '\n' ' ')
  [ -z "$ids" ] || scancel $ids 2>/dev/null || true
  fail "snakemake stitch_all"
fi
say "workflow done"

# ---- 4. SLURM accounting: one job per cycle, accounts, GPU limits, queueing ------------------------------
$PY - "$work/assign.json" "$work/expect.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
expect = [{"rule": "stitch", "wildcards": {"cycle": str(c)}, "account": v["account"],
           "partition": v["partition"], "gpus": 1} for c, v in a["cycles"].items()]
assert all(v["mode"] == "gpu" for v in a["cycles"].values()), "kintsugi-assign gave a non-GPU cycle"
json.dump(expect, open(sys.argv[2], "w"), indent=1)
PY
$PY tests/e2e/slurm_check.py --log "$work/snakemake.log" --limits "$limits" \
  --expect "$work/expect.json" --table "$work/sacct.tsv" --require-overflow || fail "SLURM accounting checks"

# ---- 5. outputs: files, shapes, content ---------------------------------------------------------------------
$PY - "$proj" "$MIN_NONZERO_FRACTION" "$MIN_STD_COUNTS" "$SHAPE_TOL_PX" <<'PY' || fail "output checks"
import csv, glob, os, re, sys
import numpy as np, tifffile
proj, min_nz, min_std, shape_tol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
raw_root = os.path.join(proj, "data", "raw")
out_root = os.path.join(proj, "data", "processed", "stitched")
fails, planes = [], 0
for raw in sorted(glob.glob(os.path.join(raw_root, "cyc*"))):
    cyc = int(re.search(r"cyc0*(\d+)", os.path.basename(raw)).group(1))
    names = [re.match(r"\d+_(\d{5})_Z(\d{3})_CH(\d+)\.tif$", f) for f in os.listdir(raw)]
    names = [m for m in names if m]
    tiles = sorted({int(m.group(1)) for m in names})
    zs = sorted({int(m.group(2)) for m in names})
    chs = sorted({int(m.group(3)) for m in names})
    th, tw = tifffile.imread(os.path.join(raw, names[0].group(0))).shape
    out = os.path.join(out_root, f"cyc{cyc:02d}")
    for f in ("tile_positions.csv", ".snakemake_complete"):
        if not os.path.isfile(os.path.join(out, f)):
            fails.append(f"{out}/{f} missing")
    sentinel = os.path.join(out, ".snakemake_complete")
    if os.path.isfile(sentinel):
        kv = dict(l.split("=", 1) for l in open(sentinel).read().split("\n") if "=" in l)
        if kv.get("stage") != "stitch" or kv.get("cycle") != str(cyc):
            fails.append(f"{sentinel}: stage/cycle {kv.get('stage')}/{kv.get('cycle')}, want stitch/{cyc}")
    pos_path = os.path.join(out, "tile_positions.csv")
    want_shape = None  # the mosaic spans the fitted tile positions: (max y_pos + H, max x_pos + W)
    if os.path.isfile(pos_path):
        rows = list(csv.DictReader(open(pos_path)))
        if [int(r["tile"]) for r in rows] != tiles:
            fails.append(f"{pos_path}: tiles {[r['tile'] for r in rows]}, want {tiles}")
        ys = [float(r["y_pos"]) for r in rows]; xs = [float(r["x_pos"]) for r in rows]
        if rows and (min(ys) != 0 or min(xs) != 0):
            fails.append(f"{pos_path}: min y_pos/x_pos {min(ys)}/{min(xs)}, want 0/0")
        if rows:
            want_shape = (max(ys) + th, max(xs) + tw)
    for ch in chs:
        for z in zs:
            p = os.path.join(out, f"CH{ch}", f"{z:02d}.tif")
            if not os.path.isfile(p):
                fails.append(f"{p} missing"); continue
            img = tifffile.imread(p)
            planes += 1
            if img.dtype != np.uint16 or img.ndim != 2:
                fails.append(f"{p}: {img.dtype} {img.shape}, want 2-D uint16"); continue
            if want_shape and any(abs(g - w) > shape_tol for g, w in zip(img.shape, want_shape)):
                fails.append(f"{p}: shape {img.shape}, want ({want_shape[0]:.1f}, {want_shape[1]:.1f})"
                             f" +- {shape_tol} px from tile_positions.csv and the tile size")
            nz = float(np.count_nonzero(img)) / img.size
            std = float(img.std())
            if nz < min_nz or std < min_std:
                fails.append(f"{p}: non-zero fraction {nz:.3f} (min {min_nz}), std {std:.1f} counts (min {min_std})")
print(f"e2e outputs: {planes} stitched planes checked")
for f in fails[:40]:
    print("FAIL:", f, file=sys.stderr)
if not planes:
    print("FAIL: no stitched planes found", file=sys.stderr)
sys.exit(1 if fails or not planes else 0)
PY

# ---- 6. accuracy against the ground truth ------------------------------------------------------------------
for c in $(seq 1 "$CYCLES"); do
  bin/kintsugi-accuracy --project "$proj" --cycle "$c" --json >"$work/accuracy_cyc$c.json" 2>>"$work/accuracy.log" ||
    { tail -n 20 "$work/accuracy.log" >&2; fail "kintsugi-accuracy --cycle $c"; }
done
$PY - "$work" "$CYCLES" "$FLAT_RMS_MAX" "$DARK_OVER_MAX" "$POS_ERR_MAX" "$SCENE_NCC_MIN" <<'PY' || fail "accuracy"
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
flat_max, dark_over_max, pos_max, ncc_min = map(float, sys.argv[3:7])
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
        track("darkmean", dm, f"{w} (fit {ch['dark_fit_mean']:.1f}, true {ch['dark_true_mean']:.1f})")
        if not ch["flat_rms_max"] <= flat_max:
            fails.append(f"{w}: flatfield RMS error {ch['flat_rms_max']:.4f} at z{ch['flat_rms_max_z']} > {flat_max}")
        if not (ch["dark_fit_mean"] > -0.5 and dm <= dark_over_max):  # -0.5: rounding of a zero darkfield
            fails.append(f"{w}: darkfield mean {ch['dark_fit_mean']:.1f}, true {ch['dark_true_mean']:.1f} counts "
                         f"(want >= 0 and at most {dark_over_max} above the truth)")
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

say "OK"
[ "${E2E_KEEP:-0}" = 1 ] || [ -n "${KINTSUGI_E2E_DIR:-}" ] || rm -rf "$work"
