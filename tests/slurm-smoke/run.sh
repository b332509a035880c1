#!/usr/bin/env bash
# Smoke test of the test cluster and profiles/slurm: runs tests/slurm-smoke/Snakefile through
# SLURM (GPU jobs under two accounts, one CPU job) and checks sacct with tests/e2e/slurm_check.py.
# Needs the cluster from scripts/slurm-up.sh. Run from anywhere; ~40 s.
# Env: SMOKE_N_A (5), SMOKE_N_B (3), SMOKE_SECONDS (8), SLURM_TEST_ACCOUNTS (acct_a:3,acct_b:2),
#      SMOKE_KEEP=1 keeps the work directory.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export USER=$(id -un)
n_a=${SMOKE_N_A:-5}
n_b=${SMOKE_N_B:-3}
seconds=${SMOKE_SECONDS:-8}
accounts=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}
acct_a=$(echo "$accounts" | cut -d, -f1 | cut -d: -f1)
acct_b=$(echo "$accounts" | cut -d, -f2 | cut -d: -f1)
limits=$(echo "$accounts" | tr : =)

work=$(mktemp -d /tmp/slurm-smoke.XXXXXX)
[ "${SMOKE_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
echo "slurm-smoke: work dir $work"

start=$(date +%s)
if ! snakemake -d "$work" -s "$repo/tests/slurm-smoke/Snakefile" --profile "$repo/profiles/slurm" \
  --config n_a="$n_a" n_b="$n_b" seconds="$seconds" acct_a="$acct_a" acct_b="$acct_b" \
  >"$work/snakemake.log" 2>&1; then
  tail -n 40 "$work/snakemake.log" >&2
  echo "slurm-smoke: FAIL: snakemake failed" >&2
  exit 1
fi
echo "slurm-smoke: workflow took $(($(date +%s) - start)) s"

/usr/bin/python3 - "$work/expect.json" "$n_a" "$n_b" "$acct_a" "$acct_b" <<'PY'
import json, sys
path, n_a, n_b, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
e = [{"rule": "gpu_a", "wildcards": {"i": i}, "account": a, "partition": "gpu", "gpus": 1} for i in range(1, n_a + 1)]
e += [{"rule": "gpu_b", "wildcards": {"i": i}, "account": b, "partition": "gpu", "gpus": 1} for i in range(1, n_b + 1)]
e += [{"rule": "gather", "account": a, "partition": "cpu", "gpus": 0}]
json.dump(e, open(path, "w"))
PY
/usr/bin/python3 "$repo/tests/e2e/slurm_check.py" --log "$work/snakemake.log" --limits "$limits" \
  --expect "$work/expect.json" --require-overflow

# What the jobs saw: SLURM set the account and one GPU for each.
bad=$(grep -L -E 'gpus=[0-9]+ ' "$work"/results/a/*.txt "$work"/results/b/*.txt || true)
[ -z "$bad" ] || { echo "slurm-smoke: FAIL: no CUDA_VISIBLE_DEVICES in: $bad" >&2; exit 1; }
echo "slurm-smoke: OK"
