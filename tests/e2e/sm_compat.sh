#!/usr/bin/env bash
# The workflow's compatibility functions (rules/common.smk: _sm_resource_limit, _sm_set_resource_limit,
# _sm_is_main_process, _sm_configfiles) under every installed Snakemake: Debian's 7.21 and each
# venv of scripts/test-deps.sh ($KINTSUGI_SM_VENVS/<version>, default /opt/kintsugi-sm: 9.25.2, and
# 9.16.3 / 9.16.2 where installed). Per version, `snakemake -n` of the workflow on a tiny synthetic
# project with accounts acct_a (3 GPU slots) and acct_b (2):
#   --resources gpu_jobs=99 gpu_0=99   -> lowered to the plan: gpu_jobs 5, acct_a 3, acct_b 2;
#   --resources gpu_jobs=2 gpu_1=1     -> kept: gpu_jobs 2, acct_b 1 (a smaller limit is never raised);
# the lines are printed by the main process only (so _sm_is_main_process said so), and name the
# --configfile path (_sm_configfiles); `--config fused=true` plans one cycle job per cycle, fused=false
# the three stage jobs. No SLURM needed. Run: tests/e2e/sm_compat.sh [workdir]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
VENVS=${KINTSUGI_SM_VENVS:-/opt/kintsugi-sm}
work=${1:-$(mktemp -d /tmp/kintsugi-smcompat.XXXXXX)}
fail() { echo "sm_compat: FAIL: $*" >&2; exit 1; }
rm -rf "$work"; mkdir -p "$work"
bin/kintsugi-synth --preset tiny --ncycles 2 --out "$work/p" --kintsugi-dir "$repo" --device cpu --log-level warn >"$work/synth.log" 2>&1 ||
  { cat "$work/synth.log" >&2; fail kintsugi-synth; }
cfg=$work/p/config.yaml
/usr/bin/python3 - "$cfg" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["resources"]["accounts"] = [{"name": "acct_a", "gpu_slots": 3, "partition_gpu": "gpu", "partition_cpu": "cpu"},
                              {"name": "acct_b", "gpu_slots": 2, "partition_gpu": "gpu", "partition_cpu": "cpu"}]
yaml.safe_dump(c, open(sys.argv[1], "w"), sort_keys=False)
PY
sms=(/usr/bin/snakemake)
for d in "$VENVS"/*/; do [ -x "$d/bin/snakemake" ] && sms+=("${d%/}/bin/snakemake"); done
[ ${#sms[@]} -ge 2 ] || fail "no Snakemake 9 venv under $VENVS (scripts/test-deps.sh)"
for sm in "${sms[@]}"; do
  v=$("$sm" --version)
  for case in "gpu_jobs=99 gpu_0=99|<= 5 (resource gpu_jobs); per account: acct_a <= 3 (resource gpu_0), acct_b <= 2 (resource gpu_1)" \
              "gpu_jobs=2 gpu_1=1|<= 2 (resource gpu_jobs); per account: acct_a <= 3 (resource gpu_0), acct_b <= 1 (resource gpu_1)"; do
    res=${case%%|*} want=${case#*|}
    # shellcheck disable=SC2086
    (cd "$work" && "$sm" -s "$repo/Snakefile" registration -n --configfile "$cfg" --cores 1 --resources $res >"$work/dry-$v.log" 2>&1) ||
      { tail -n 20 "$work/dry-$v.log" >&2; fail "Snakemake $v: snakemake -n --resources $res"; }
    grep -qF "kintsugi: GPU jobs in flight $want" "$work/dry-$v.log" ||
      { grep 'kintsugi' "$work/dry-$v.log" >&2; fail "Snakemake $v, --resources $res: want 'GPU jobs in flight $want'"; }
    grep -qF "['$cfg']" "$work/dry-$v.log" || { grep 'config files' "$work/dry-$v.log" >&2; fail "Snakemake $v: config files not ['$cfg']"; }
  done
  # fused: true makes one cycle job per cycle (rules/cycle.smk, its ruleorder over the stage rules);
  # fused: false the three stage jobs.
  for f in true false; do
    (cd "$work" && "$sm" -s "$repo/Snakefile" registration -n --configfile "$cfg" --cores 1 --config fused=$f >"$work/dry-$v-fused.log" 2>&1) ||
      { tail -n 20 "$work/dry-$v-fused.log" >&2; fail "Snakemake $v: snakemake -n --config fused=$f"; }
    got="$(grep -cE '^rule cycle:' "$work/dry-$v-fused.log" || true) $(grep -cE '^rule (stitch|deconvolve|edf):' "$work/dry-$v-fused.log" || true)"
    want="0 6"; [ $f = true ] && want="2 0"
    [ "$got" = "$want" ] || fail "Snakemake $v, fused=$f: cycle and stage jobs '$got', want '$want'"
  done
  echo "sm_compat: Snakemake $v ($sm): limits lowered and kept, main process, config files, fused rule choice: OK"
done
