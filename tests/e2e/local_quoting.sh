#!/usr/bin/env bash
# Shell safety and retries through Snakemake, locally (--cores, device cpu, no SLURM), under the
# Snakemake given as $SNAKEMAKE (default: snakemake on PATH):
#   1. a tiny synthetic project (bin/kintsugi-synth) in a directory whose name holds spaces, both
#      quotes, $(...), `...`, ';', '&', a glob, a newline-free unicode run; `snakemake -n -p` and a real
#      run of `registration` must work, every per-job log must be under the project, and nothing may be
#      created outside it (the parent directory, the working directory and /tmp are compared before
#      and after; the command substitutions would create marker files if a shell ran them);
#   2. memory escalation with retries: the EDF budget is set below the stage's smallest working set
#      (resources.mem_edf: MEM_EDF_LOW MB), so attempt 1 of every edf job exits 2 naming
#      resources.mem_edf, and attempt 2 (mem_mb = 2 x mem_edf) succeeds; checked from the appended
#      per-job logs (both attempts' headers and the refusal kept in one file);
#   3. a rerun (--forcerun stitch of one cycle) appends to the cycle's log: the first record is kept.
# Run: tests/e2e/local_quoting.sh [workdir under /tmp]; SNAKEMAKE=/opt/kintsugi-sm/9.25.2/bin/snakemake ...
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
SM=${SNAKEMAKE:-snakemake}
PY=/usr/bin/python3
MEM_EDF_LOW=${MEM_EDF_LOW:-50}   # MB: below the tiny preset's EDF smallest working set (68 MiB, kintsugi-edf says), 2 x above it
base=${1:-$(mktemp -d /tmp/kintsugi-quoting.XXXXXX)}
case "$base" in /tmp/?*) ;; *) echo "local_quoting: work dir must be under /tmp/" >&2; exit 1 ;; esac
t0=$(date +%s)
say() { echo "local_quoting [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "local_quoting: FAIL: $*" >&2; echo "local_quoting: work dir kept: $base" >&2; exit 1; }
for b in kintsugi-synth kintsugi-stitch kintsugi-decon kintsugi-edf kintsugi-register; do
  [ -x "bin/$b" ] || { echo "local_quoting: bin/$b missing: run make first" >&2; exit 1; }
done
rm -rf "$base"
mkdir -p "$base/parent" "$base/cwd"
# Every shell metacharacter that matters; the two $(...) / `...` would create marker files in $base.
name="my proj 'q' \"dq\" \$(touch $base/pwned1) \`touch $base/pwned2\`; x & * ünï €"
proj=$base/parent/$name
# Outside the project: every entry under $base (parent, cwd) and, since /tmp is shared with other
# processes, those new entries of /tmp and / whose name is a word of the project name (what word
# splitting of an unquoted path creates, e.g. /tmp/wf-q/parent/my).
snap() { (cd "$base" && find . -path "./parent/$name" -prune -o -print | LC_ALL=C sort); ls -A /tmp / | sed 's|^|/|'; }

bin/kintsugi-synth --preset tiny --ncycles 2 --out "$proj" --kintsugi-dir "$repo" --device cpu --log-level warn >"$base/synth.log" 2>&1 ||
  { cat "$base/synth.log" >&2; fail "kintsugi-synth into $proj"; }
cfg=$proj/config.yaml
$PY - "$cfg" "$MEM_EDF_LOW" <<'PY'
import sys, yaml
p, low = sys.argv[1], int(sys.argv[2])
c = yaml.safe_load(open(p))
c["fused"] = False  # the stage rules: the per-stage rerun and the EDF job's memory retry below
r = c.setdefault("resources", {})
for s in ("stitch", "decon", "edf", "registration"):
    r[f"mem_{s}"], r[f"cpus_{s}"] = 1000, 1
r["mem_edf"] = low
yaml.safe_dump(c, open(p, "w"), sort_keys=False, allow_unicode=True)
PY
# SLURM names: an account or partition that is not a SLURM name (shell or sbatch metacharacters) is
# refused when the workflow starts, naming the key (schema pattern; the Go loader of kintsugi-assign too).
i=0
for kv in "name=lab account" 'name=a;touch x' 'partition_gpu=gpu;touch /tmp/pwned;#' 'partition_cpu=$(id)' "partition_gpu=gpu,a'b"; do
  i=$((i + 1)); key=${kv%%=*} val=${kv#*=}
  $PY - "$cfg" "$base/badname$i.yaml" "$key" "$val" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["resources"]["accounts"][0][sys.argv[3]] = sys.argv[4]
yaml.safe_dump(c, open(sys.argv[2], "w"), sort_keys=False, allow_unicode=True)
PY
  if (cd "$base/cwd" && "$SM" -s "$repo/Snakefile" registration -n --configfile "$base/badname$i.yaml" --cores 1 >"$base/badname$i.log" 2>&1); then
    fail "resources.accounts[0].$key=$val accepted"
  fi
  grep -qF "resources.accounts[0].$key" "$base/badname$i.log" || { tail -n 5 "$base/badname$i.log" >&2; fail "refusal of $key=$val does not name the key"; }
done
rm -f "$base"/badname*
say "bad SLURM account/partition names refused, naming the key"
snap >"$base/before.txt"

# 1. dry run with the shell lines printed, then the real run (cwd outside the project).
(cd "$base/cwd" && "$SM" -s "$repo/Snakefile" registration -n -p --configfile "$cfg" --cores 2 >"$base/dry.log" 2>&1) ||
  { tail -n 30 "$base/dry.log" >&2; fail "snakemake -n -p"; }
$PY -c 'import shlex, sys; t = open(sys.argv[1]).read(); q = shlex.quote(sys.argv[2] + "/.kintsugi/config.json")
sys.exit(0 if t.count("--config " + q) >= 2 else 1)' "$base/dry.log" "$proj" ||
  { grep -m2 'kintsugi-stitch' "$base/dry.log" >&2; fail "the dry run's shell lines do not carry the quoted (shlex) config path"; }
say "dry run (-n -p) OK under $("$SM" --version)"
(cd "$base/cwd" && "$SM" -s "$repo/Snakefile" registration --configfile "$cfg" --cores 2 --retries 1 >"$base/run.log" 2>&1) ||
  { tail -n 40 "$base/run.log" >&2; fail "snakemake registration (local, --cores 2, --retries 1)"; }
say "local registration run OK"
[ -f "$proj/data/processed/registered/.snakemake_complete" ] || fail "registered sentinel missing under the project"

# 3. a rerun appends.
(cd "$base/cwd" && "$SM" -s "$repo/Snakefile" "$proj/data/processed/stitched/cyc01/.snakemake_complete" --configfile "$cfg" \
  --cores 2 --forcerun stitch --allowed-rules stitch >"$base/rerun.log" 2>&1) ||
  { tail -n 40 "$base/rerun.log" >&2; fail "snakemake --forcerun stitch"; }

snap >"$base/after.txt"
$PY - "$base" "$proj" "$MEM_EDF_LOW" <<'PY' || fail "checks"
import glob, os, re, sys
base, proj, low = sys.argv[1], sys.argv[2], int(sys.argv[3])
fails = []
before, after = open(f"{base}/before.txt").read().split("\n"), open(f"{base}/after.txt").read().split("\n")
new = sorted(set(after) - set(before) - {"./after.txt", "./before.txt", "./run.log", "./rerun.log", "./dry.log", "./cwd/.snakemake"})
new = [n for n in new if not n.startswith("./cwd/.snakemake/")]
words = set(re.split(r"""[\s'"`$();&*/]+""", os.path.relpath(proj, os.path.join(base, "parent")))) - {""}
new = [n for n in new if n.startswith("./") or n[1:] in words]
if new:
    fails.append(f"created outside the project: {new[:10]}")
for m in ("pwned1", "pwned2"):
    if os.path.exists(os.path.join(base, m)):
        fails.append(f"{base}/{m} exists: a shell ran a command substitution from project_dir")
logs = os.path.join(proj, "slurm", "logs", "snakemake")
hdr = re.compile(r"^==== \S+ kintsugi (\w+) \((.*)\): SLURM job (\S+), attempt (\d+), host \S+, mem_mb (\d+)", re.M)
for cyc in (1, 2):
    f = os.path.join(logs, f"edf_cyc{cyc:02d}.log")
    t = open(f).read() if os.path.isfile(f) else ""
    heads = hdr.findall(t)
    att = [(int(a), int(m)) for _, _, _, a, m in heads]
    if att != [(1, low), (2, 2 * low)]:
        fails.append(f"{f}: attempts/mem_mb {att}, want [(1, {low}), (2, {2 * low})] (memory escalation)")
    if "resources.mem_edf" not in t.split("attempt 2")[0]:
        fails.append(f"{f}: attempt 1 did not refuse naming resources.mem_edf")
f = os.path.join(logs, "stitch_cyc01.log")
heads = hdr.findall(open(f).read()) if os.path.isfile(f) else []
if len(heads) != 2:
    fails.append(f"{f}: {len(heads)} job headers after a --forcerun, want 2 (the log is appended to, not replaced)")
for f in fails:
    print("FAIL:", f, file=sys.stderr)
print(f"local_quoting: edf attempts {low} MB (refused) -> {2 * low} MB (ok); stitch log records {len(heads)}; nothing outside the project")
sys.exit(1 if fails else 0)
PY
say "OK"
