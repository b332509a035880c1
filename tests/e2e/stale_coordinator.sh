#!/usr/bin/env bash
# Stale-coordinator test on the real local SLURM cluster (scripts/slurm-up.sh) through Snakemake and
# profiles/slurm (issue 20, point 3): the Snakemake coordinator is killed with SIGKILL while its
# deconvolve jobs run; its SLURM jobs go on (orphans). Then the one command of README "Killed
# coordinator" is run once:
#   snakemake --unlock <same arguments> && snakemake <target> <same arguments>
# The rerun submits new deconvolve jobs for the same cycles; each finds its output locked by a live
# orphan with the same parameters, waits for it, and exits 0 without redoing the work once the
# orphan completed the output. Checked:
#   - the rerun exits 0 and everything completes (every stage's sentinel, registration);
#   - every orphan and every new job ended COMPLETED 0:0 (sacct); nothing was "removed as corrupted"
#     by Snakemake; no finished output deleted or rewritten: the stitch sentinels are the first run's
#     (same inode and mtime), each decon sentinel is the orphan's (its completed= time before the
#     orphan's End: never rewritten afterwards);
#   - each cycle was deconvolved once: a new decon job that ran while its orphan held the output
#     waited for it (its log names the orphan's SLURM job and says "nothing to do"; at least one
#     must), one that pended on its account's GPU limit until the orphan ended found the output
#     complete and ran nothing; the orphan's own record ("cycle deconvolved") is still in the per-job
#     log (appended with a header per job, never replaced);
#   - no lock file or staging directory is left.
#
#   flock /tmp/kintsugi-slurm.lock tests/e2e/stale_coordinator.sh     # ~5-6 min on 2 cores
#
# Needs: bin/ built by `make`, the test cluster (scripts/slurm-up.sh), snakemake, /usr/bin/python3
# with yaml. Env:
#   STALE_DIR          work directory under /tmp/ (default: a new /tmp/kintsugi-stale.XXXXXX; kept on
#                      failure, and with STALE_KEEP=1)
#   STALE_DECON_ITER   decon.iterations of the test config (default 800, stop_criterion 0: every
#                      iteration runs, ~0.08 s each with two jobs on 2 idle cores: the orphans outlive the
#                      kill, the unlock and the rerun's start)
#   STALE_SNAKEMAKE    snakemake command (default: snakemake on PATH)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
PY=/usr/bin/python3
SM=${STALE_SNAKEMAKE:-snakemake}
ACCOUNTS=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}
ITER=${STALE_DECON_ITER:-800}
CYCLES=2
TIMEOUT=1200   # s per Snakemake run
export USER=$(id -un) # Snakemake 7.21 checks accounts for $USER
t0=$(date +%s)
say() { echo "stale [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "stale: FAIL: $*" >&2; echo "stale: work directory kept: $work" >&2; exit 1; }

for b in kintsugi-synth kintsugi-assign kintsugi-stitch kintsugi-decon kintsugi-edf kintsugi-register; do
  [ -x "bin/$b" ] || { echo "stale: bin/$b missing: run make first" >&2; exit 1; }
done
scontrol ping >/dev/null 2>&1 || { echo "stale: no SLURM controller: run scripts/slurm-up.sh first" >&2; exit 1; }
command -v "$SM" >/dev/null || { echo "stale: $SM not installed" >&2; exit 1; }

work=${STALE_DIR:-$(mktemp -d /tmp/kintsugi-stale.XXXXXX)}
case "$work" in /tmp/?*) rm -rf "$work" && mkdir -p "$work" ;; *) echo "stale: STALE_DIR must be under /tmp/" >&2; exit 1 ;; esac
proj=$work/project
cfg=$work/config.yaml
processed=$proj/data/processed
logdir=$proj/slurm/logs/snakemake
coordinator=""
# The EXIT trap must keep the script's exit status: it runs after the final `rm -rf "$work"` too,
# where the job-ID scan below finds no logs (under set -e and pipefail a failed scan here once
# turned a PASS into exit 1).
cleanup() {
  local rc=$?
  set +e
  [ -z "$coordinator" ] || kill -9 "$coordinator" 2>/dev/null
  # Cancel whatever this test left in the queue (its jobs run under its project's config).
  ids=$(cat "$work"/sm*.log 2>/dev/null | sed -n 's/.*has been submitted with SLURM jobid \([0-9][0-9]*\).*/\1/p' | sort -u | tr '\n' ' ')
  for j in $ids; do [ -z "$(squeue -h -j "$j" 2>/dev/null)" ] || scancel "$j" 2>/dev/null; done
  exit "$rc"
}
trap cleanup EXIT

# ---- project and config: tiny synthetic, 2 cycles, 1 channel, 3 z-planes, device cpu -------------
bin/kintsugi-synth --preset tiny --ncycles $CYCLES --nchannels 1 --zplanes 3 --out "$proj" --device cpu \
  --log-format text >"$work/synth.log" 2>&1 || { tail -n 20 "$work/synth.log" >&2; fail "kintsugi-synth"; }
$PY - "$proj/config.yaml" "$cfg" "$repo" "$ACCOUNTS" "$ITER" <<'PY'
import sys, yaml
src, dst, repo, accounts, iters = sys.argv[1:]
cfg = yaml.safe_load(open(src))
cfg["kintsugi_dir"] = repo
cfg["device"] = "cpu"   # no GPU here; every GPU job still asks for --gres=gpu:1 on the fake GPUs
cfg["decon"] = {"iterations": int(iters), "stop_criterion": 0}
cfg["fused"] = False    # the test kills the coordinator while separate decon jobs hold their outputs
res = cfg.setdefault("resources", {})
for k in ("total_gpu_slots", "total_cpu_slots", "total_slots", "account", "account_gpu", "account_cpu",
          "partition_gpu", "partition_cpu", "gpu_slots", "cpu_slots"):
    res.pop(k, None)
res["accounts"] = [{"name": n, "gpu_slots": int(s), "partition_gpu": "gpu", "partition_cpu": "cpu"}
                   for n, s in (a.split(":") for a in accounts.split(","))]
for stage in ("stitch", "decon", "edf", "registration", "qc"):
    res[f"mem_{stage}"], res[f"time_{stage}"], res[f"cpus_{stage}"] = 1500, 20, 2
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
PY
args=(registration --configfile "$cfg" --profile profiles/slurm)
say "work directory $work; decon.iterations $ITER; $($SM --version | head -1) ($SM)"

# ---- 1. the first coordinator, killed with SIGKILL while both decon jobs hold their outputs -------
setsid "$SM" "${args[@]}" >"$work/sm1.log" 2>&1 &
coordinator=$!
locks=("$processed/deconvolved/.cyc01.lock" "$processed/deconvolved/.cyc02.lock")
for i in $(seq 1 1200); do
  [ -f "${locks[0]}" ] && [ -f "${locks[1]}" ] && break
  kill -0 "$coordinator" 2>/dev/null || { tail -n 40 "$work/sm1.log" >&2; fail "the first coordinator ended before both decon jobs ran"; }
  sleep 0.5
done
[ -f "${locks[0]}" ] && [ -f "${locks[1]}" ] || fail "the decon jobs did not start within 10 min"
kill -9 "$coordinator"
wait "$coordinator" 2>/dev/null || true
coordinator=""
declare -A orphan
for c in 1 2; do
  orphan[$c]=$(sed -n 's/^job=//p' "${locks[$((c - 1))]}")
  [ -n "${orphan[$c]}" ] || fail "cycle $c: the decon lock names no SLURM job"
  st=$(squeue -h -j "${orphan[$c]}" -o %T 2>/dev/null || true)
  [ "$st" = RUNNING ] || fail "cycle $c: orphan job ${orphan[$c]} is '$st' right after the kill, want RUNNING (raise STALE_DECON_ITER)"
done
stitch_before=$(stat -c '%n %i %Y' "$processed"/stitched/cyc0*/.snakemake_complete)
say "coordinator killed (SIGKILL) while decon jobs ${orphan[1]} (cycle 1) and ${orphan[2]} (cycle 2) run"

# ---- 2. the README's one command to continue, run once -------------------------------------------
say "rerun: $SM --unlock ... && $SM ${args[*]}"
if ! timeout -k 30 $TIMEOUT bash -c '"$0" --unlock "${@:2}" >"$1.unlock" 2>&1 && "$0" "${@:2}"' \
    "$SM" "$work/sm2.log" "${args[@]}" >"$work/sm2.log" 2>&1; then
  tail -n 60 "$work/sm2.log.unlock" "$work/sm2.log" >&2
  fail "the rerun after the killed coordinator failed"
fi
say "rerun completed"

# ---- 3. checks ------------------------------------------------------------------------------------------
for f in "$processed"/stitched/cyc0{1,2}/.snakemake_complete "$processed"/deconvolved/cyc0{1,2}/.snakemake_complete \
         "$processed"/edf/cyc0{1,2}/.snakemake_complete "$processed"/registered/.snakemake_complete; do
  [ -s "$f" ] || fail "$f missing after the rerun"
done
! grep -n "Removing output files of failed job" "$work/sm2.log" || fail "Snakemake removed the output of a failed job"
grep -q "Nothing to be done\|steps (100%) done" "$work/sm2.log" || { tail -n 20 "$work/sm2.log" >&2; fail "the rerun did not finish its DAG"; }
[ "$(stat -c '%n %i %Y' "$processed"/stitched/cyc0*/.snakemake_complete)" = "$stitch_before" ] ||
  fail "the finished stitch outputs were deleted or rewritten by the rerun"
left=$(find "$processed" -maxdepth 2 \( -name '.*.lock*' -o -name '.*.partial-*' \) -printf '%P ' 2>/dev/null)
[ -z "$left" ] || fail "left behind: $left"
# new decon jobs of the rerun: the submission line after each "rule deconvolve:" block (7.21) that
# names cycle c, or the plugin's "Job N has been submitted" lines (>= 8)
declare -A newjob
for c in 1 2; do
  newjob[$c]=$($PY - "$work/sm2.log" "$c" <<'PY'
import re, sys
text, cyc = open(sys.argv[1]).read(), sys.argv[2]
jobs = {}   # snakemake jobid -> cycle, for rule deconvolve
for m in re.finditer(r"rule deconvolve:\n((?:    .*\n)+)", text):
    block = m.group(1)
    j, w = re.search(r"jobid: (\d+)", block), re.search(r"wildcards: cycle=(\d+)", block)
    if j and w:
        jobs[j.group(1)] = str(int(w.group(1)))
for m in re.finditer(r"Job (\d+) has been submitted with SLURM jobid (\d+)(?: \(log: (.*)\))?", text):
    sj, ext, log = m.groups()
    plugin = re.search(r"/slurm_logs/rule_deconvolve/(\d+)/", log or "")   # plugin >= 2.6: no rule blocks
    if jobs.get(sj) == str(int(cyc)) or (plugin and str(int(plugin.group(1))) == str(int(cyc))):
        print(ext)
        break
PY
)
  [ -n "${newjob[$c]}" ] || { grep -n "deconvolve\|submitted" "$work/sm2.log" | head -20 >&2; fail "cycle $c: the rerun submitted no decon job"; }
done
$PY - "$work" "$logdir" "$processed" "${orphan[1]}" "${orphan[2]}" "${newjob[1]}" "${newjob[2]}" <<'PY' || fail "job and log checks"
import os, re, subprocess, sys, datetime
work, logdir, processed, o1, o2, n1, n2 = sys.argv[1:]
def sacct(j):
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", j, "-o", "JobID,State,ExitCode,Start,End"],
                         capture_output=True, text=True, check=True).stdout.split("\n")[0].split("|")
    return out
waited_cycles = 0
for c, (o, n) in {1: (o1, n1), 2: (o2, n2)}.items():
    so, sn = sacct(o), sacct(n)
    assert so[1] == "COMPLETED" and so[2] == "0:0", f"cycle {c}: orphan job {o}: {so}"
    assert sn[1] == "COMPLETED" and sn[2] == "0:0", f"cycle {c}: new job {n}: {sn}"
    sent = f"{processed}/deconvolved/cyc{c:02d}/.snakemake_complete"
    # its content is the orphan's: completed= (UTC) not after the orphan's End (local time; Snakemake
    # may touch the file, so its mtime says nothing)
    kv = dict(l.split("=", 1) for l in open(sent).read().split("\n") if "=" in l)
    done = datetime.datetime.fromisoformat(kv["completed"].replace("Z", "+00:00"))
    end = datetime.datetime.fromisoformat(so[4]).astimezone()
    assert done <= end + datetime.timedelta(seconds=1), f"cycle {c}: {sent} completed {done}, after the orphan ended {end}: rewritten"
    # Both jobs append to one per-job log (their lines interleave): the orphan's header and result
    # once, the deconvolution done once.
    log = open(f"{logdir}/decon_cyc{c:02d}.log").read()
    assert len(re.findall(rf"(?m)^==== .*SLURM job {o}\b", log)) == 1, f"cycle {c}: orphan {o}'s record missing or replaced:\n{log[-3000:]}"
    assert log.count("cycle deconvolved") == 1 and log.count("channel deconvolved") == 1, f"cycle {c}: deconvolution done twice or never:\n{log[-3000:]}"
    if re.search(rf"(?m)^==== .*SLURM job {n}\b", log):
        # the new job ran its command while the orphan held the output: it waited
        for want in ("waiting for the job writing this output with the same parameters", f"SLURM job {o} ", "nothing to do"):
            assert want in log, f"cycle {c}: the new job {n}'s record lacks {want!r}:\n{log[-3000:]}"
        how = "waited for it and did nothing"
        waited_cycles += 1
    else:
        # it pended (account limit) until the orphan ended; Snakemake inside the job found the output complete
        # (its command never ran). Snakemake starts up inside the allocation for a few seconds before it
        # looks at the outputs, so the job may start up to STARTUP_S before the orphan's output was
        # complete (the sentinel's completed=), not only after the orphan's SLURM End.
        STARTUP_S = 10
        start = datetime.datetime.fromisoformat(sn[3]).astimezone()
        assert start >= done - datetime.timedelta(seconds=STARTUP_S), (
            f"cycle {c}: new job {n} ran from {sn[3]}, {STARTUP_S} s or more before the orphan's output was complete ({done}), but left no record")
        how = "started after it ended (pended), found the output complete and ran nothing"
    print(f"stale: cycle {c}: orphan {o} {so[3]}..{so[4]} COMPLETED; new job {n} {sn[3]}..{sn[4]} COMPLETED, {how}; records in {os.path.basename(logdir)}/decon_cyc{c:02d}.log")
assert waited_cycles >= 1, "no new job met its orphan running: the wait was not exercised (raise STALE_DECON_ITER)"
PY
say "PASS: killed coordinator, one rerun: everything completed, no output deleted, both jobs' logs kept"
[ "${STALE_KEEP:-0}" = 1 ] || rm -rf "$work"
