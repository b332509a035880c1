#!/usr/bin/env bash
# The fused cycle through the workflow on the real local SLURM cluster (scripts/slurm-up.sh): the same
# synthetic project (tiny preset, 2 cycles, 2 channels, 3 z-planes, CPU device) is run to registration
# three times, each by `snakemake registration --configfile <cfg> --profile profiles/slurm`:
#   A  fused: false                           rules stitch, deconvolve, edf per cycle (three GPU jobs)
#   B  fused: true                            rule cycle per cycle (one GPU job: bin/kintsugi-cycle)
#   C  fused: true, keep_intermediates: false
# and checks
#   1. from sacct (tests/e2e/slurm_check.py): A ran exactly stitch/deconvolve/edf per cycle + registration,
#      B and C exactly one cycle job per cycle + registration, every job on its assigned account and
#      partition with one GPU;
#   2. B's files under data/processed equal A's, byte for byte (sentinels, DECONV_parameters.txt and the
#      registration's JSON masked of times and of the project directory);
#   3. C's files equal A's less the stitched and deconvolved planes, which C did not write (it writes
#      their QC summaries instead: qc_planes.json and qc_maxproj.tif per channel directory).
# Env: E2E_SNAKEMAKE (default snakemake on PATH), SLURM_TEST_ACCOUNTS (acct_a:3,acct_b:2),
# KINTSUGI_FUSED_DIR (work directory under /tmp/; default a new /tmp/kintsugi-fused.XXXXXX).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
PY=/usr/bin/python3
SM=${E2E_SNAKEMAKE:-snakemake}
ACCOUNTS=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}
export USER=$(id -un)
t0=$(date +%s)
say() { echo "fused [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "fused: FAIL: $*" >&2; echo "fused: work dir kept: $work" >&2; exit 1; }

for b in kintsugi-synth kintsugi-assign kintsugi-cycle kintsugi-stitch kintsugi-decon kintsugi-edf kintsugi-register kintsugi-config; do
  [ -x "bin/$b" ] || { echo "fused: bin/$b missing: run make first" >&2; exit 1; }
done
scontrol ping >/dev/null 2>&1 || { echo "fused: no SLURM controller: run scripts/slurm-up.sh first" >&2; exit 1; }
command -v "$SM" >/dev/null || { echo "fused: $SM not installed (E2E_SNAKEMAKE; scripts/test-deps.sh)" >&2; exit 1; }
if [ -n "${KINTSUGI_FUSED_DIR:-}" ]; then
  work=$KINTSUGI_FUSED_DIR
  case "$work" in /tmp/?*) ;; *) echo "fused: KINTSUGI_FUSED_DIR must be under /tmp/" >&2; exit 1 ;; esac
  rm -rf "$work"; mkdir -p "$work"
else
  work=$(mktemp -d /tmp/kintsugi-fused.XXXXXX)
fi
say "Snakemake $("$SM" --version) ($SM), work dir $work"

# ---- the three projects: the same synthetic data, three configs ----------------------------------------
for v in A B C; do
  bin/kintsugi-synth --preset tiny --ncycles 2 --nchannels 2 --zplanes 3 --out "$work/$v" --device cpu \
    --log-format text >"$work/synth_$v.log" 2>&1 || { tail -n 20 "$work/synth_$v.log" >&2; fail "kintsugi-synth"; }
  case $v in A) fused=false keep=true ;; B) fused=true keep=true ;; C) fused=true keep=false ;; esac
  $PY - "$work/$v/config.yaml" "$work/config_$v.yaml" "$repo" "$ACCOUNTS" "$fused" "$keep" <<'PY'
import sys, yaml
src, dst, repo, accounts, fused, keep = sys.argv[1:]
cfg = yaml.safe_load(open(src))
cfg["kintsugi_dir"] = repo
cfg["device"] = "cpu"  # CI has no GPU; every GPU rule still asks SLURM for one
cfg["fused"], cfg["keep_intermediates"] = fused == "true", keep == "true"
res = cfg.setdefault("resources", {})
for k in ("account", "account_gpu", "account_cpu", "partition_gpu", "partition_cpu", "gpu_slots", "cpu_slots"):
    res.pop(k, None)
res["accounts"] = [{"name": n, "gpu_slots": int(s), "partition_gpu": "gpu", "partition_cpu": "cpu"}
                   for n, s in (a.split(":") for a in accounts.split(","))]
for stage in ("stitch", "decon", "edf", "cycle", "registration"):
    res[f"mem_{stage}"], res[f"time_{stage}"], res[f"cpus_{stage}"] = 1500, 20, 2
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
PY
done
say "three projects synthesised (A: fused false, B: fused true, C: fused true without intermediates)"

# ---- the runs, and what SLURM ran ---------------------------------------------------------------------------
limits=$(echo "$ACCOUNTS" | tr : =)
for v in A B C; do
  log=$work/snakemake_$v.log
  say "snakemake registration, project $v (log $log)"
  if ! timeout -k 30 1800 "$SM" registration --configfile "$work/config_$v.yaml" --profile profiles/slurm >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    ids=$(sed -n 's/.*has been submitted with SLURM jobid \([0-9][0-9]*\).*/\1/p' "$log" | tr '\n' ' ')
    [ -z "$ids" ] || scancel $ids 2>/dev/null || true
    fail "snakemake registration (project $v)"
  fi
  bin/kintsugi-assign --config "$work/config_$v.yaml" --log-level warn >"$work/assign_$v.json" || fail "kintsugi-assign ($v)"
  rules="stitch deconvolve edf"; [ "$v" = A ] || rules=cycle
  $PY - "$work/assign_$v.json" "$work/expect_$v.json" $rules <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
expect = [{"rule": rule, "wildcards": {"cycle": str(c)}, "account": v["account"], "partition": v["partition"], "gpus": 1}
          for rule in sys.argv[3:] for c, v in a["cycles"].items()]
r = a["registration"]
expect.append({"rule": "registration", "account": r["account"], "partition": r["partition"], "gpus": 1})
json.dump(expect, open(sys.argv[2], "w"), indent=1)
PY
  $PY tests/e2e/slurm_check.py --log "$log" --limits "$limits" --expect "$work/expect_$v.json" \
    --table "$work/sacct_$v.tsv" >"$work/slurm_check_$v.log" || { cat "$work/slurm_check_$v.log"; fail "SLURM accounting (project $v)"; }
  n_sub=$(grep -c 'has been submitted with SLURM jobid' "$log")
  want=$(($(grep -c '"rule"' "$work/expect_$v.json")))
  [ "$n_sub" = "$want" ] || fail "project $v: $n_sub SLURM jobs submitted, want $want"
  say "project $v: $n_sub SLURM jobs ($rules per cycle, registration), accounting checked"
done

# ---- the outputs -----------------------------------------------------------------------------------------------
$PY - "$work" <<'PY' || fail "output comparison"
import hashlib, os, re, sys
work = sys.argv[1]
times = re.compile(rb"(^(?:completed|duration_minutes|seconds|[a-z_]*_s)=|deconvolution finished at |elapsed time: |\"(?:seconds|wall_s|elapsed_s|created|completed)[a-z_]*\": ?)[^\n,}]*", re.M)
def tree(v):
    root = os.path.join(work, v, "data", "processed")
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            b = open(p, "rb").read()
            if f == ".snakemake_complete" or f.endswith((".txt", ".json")):
                b = times.sub(rb"\1<t>", b.replace(os.path.join(work, v).encode(), b"<project>"))
            out[os.path.relpath(p, root)] = hashlib.sha256(b).hexdigest()
    return out
a, b, c = tree("A"), tree("B"), tree("C")
plane = re.compile(r"^(stitched|deconvolved)/cyc\d+/CH\d+/(deconv_)?\d+\.tif$")
fails = []
if a != b:
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    fails.append(f"fused (B) differs from the chain (A) in {len(diff)} of {len(a)} files: {diff[:10]}")
inter = [k for k in a if plane.match(k)]
for k, h in a.items():
    if plane.match(k):
        if k in c:
            fails.append(f"C wrote {k} with keep_intermediates false")
    elif c.get(k) != h:
        fails.append(f"C's {k} {'differs from' if k in c else 'missing, in'} A's")
summary = re.compile(r"^(stitched|deconvolved)/cyc\d+/CH\d+/qc_(planes\.json|maxproj\.tif)$")
extra = sorted(k for k in set(c) - set(a) if not summary.match(k))
if extra:
    fails.append(f"C wrote files A did not: {extra[:10]}")
if len(a) < 40 or len(inter) != 2 * 2 * 2 * 3:
    fails.append(f"A has {len(a)} files, {len(inter)} intermediate planes (want 24)")
for f in fails:
    print("fused:", f)
if fails:
    sys.exit(1)
print(f"fused: B = A in all {len(a)} files; C = A less the {len(inter)} intermediate planes")
PY
say "PASS"
rm -rf "$work"
