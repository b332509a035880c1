#!/usr/bin/python3
"""Check, from SLURM accounting, how a Snakemake run used the test cluster.

Reads the log of one run (stdout+stderr of `snakemake --profile profiles/slurm`), maps every
submitted job to its rule and wildcards, queries sacct for those SLURM jobs and checks. Two log forms:
Snakemake 7.x and the slurm executor plugin < 2.6 print "rule X: ... jobid: N ... wildcards: k=v"
blocks and "Job N has been submitted with SLURM jobid S"; plugin >= 2.6 (Snakemake 9) prints no blocks,
only "Job N has been submitted with SLURM jobid S (log: .../slurm_logs/rule_X[/<values>]/S.log)":
the rule and the wildcard values (joined by "_", names not given) are read from that log path.
The checks:

  1. every submitted job is COMPLETED and carries the name Snakemake gave it: with Snakemake 7.x
     JobName snakejob_<rule>_<N>; with Snakemake >= 8 and the slurm executor plugin (the log says
     "SLURM run ID: <uuid>") JobName <uuid> and Comment rule_<rule>_wildcards_<values joined by _>
     (rule_<rule> without wildcards);
  2. every expected job (--expect) ran exactly once, as its own SLURM job, with the expected
     account, partition and AllocTRES gres/gpu count (0 for CPU jobs);
  3. per account, the GPUs of jobs running at once (sacct Start/End, 1 s resolution, intervals
     [Start, End)) never exceed the account's limit (--limits);
  4. GPU jobs in flight at once (from sacct Submit to the End of the job's last srun step, where
     the job's work ends and Snakemake sees it finish; SLURM's own job End can come seconds later
     on a loaded node (epilog, accounting), when Snakemake has already submitted the next job:
     submitted and not finished, pending or
     running) never exceed --max-gpu-jobs, and with --require-gpu-peak reach it (so the limit
     was exercised);
  5. per account whose GPU jobs in flight ever exceeded its limit, the excess really queued in
     SLURM: at least one of its jobs has sacct Reason AssocGrpGRES;
  6. with --require-cpu-beside, some CPU job (no GPU) ran while a GPU job ran;
  7. with --per-account-in-flight, no account ever had more GPU jobs in flight (Submit to End) than
     its limit, and no GPU job pended on AssocGrpGRES at a moment when another account had a free
     slot (fewer of its GPUs running than its limit): work-conserving placement; with
     --require-running-peak N, the GPUs running at once (all accounts) reached N;
  8. with --retried RULE (repeatable), every job of RULE ran twice: attempt 1 FAILED, the retry
     (same rule and wildcards, submitted later) COMPLETED; other jobs ran once.

The report gives per-account peaks and the makespan (first Submit to last End).

Exit status 0 when all hold, 1 with one line per failure otherwise. Standard library only.

--expect is a JSON list of {"rule": str, "wildcards": {name: value}, "account": str,
"partition": str, "gpus": int}; wildcard values compare as strings, or as integers when both are
digits (cycle "01" matches 1); an omitted key is not checked.
"""
import argparse
import datetime as dt
import json
import re
import subprocess
import sys

RULE_RE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
JOBID_RE = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS_RE = re.compile(r"^\s+wildcards: (.*)$")
SUBMIT_RE = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+)(?: \(log: (.*)\)\.)?")
PLUGIN_LOG_RE = re.compile(r"/slurm_logs/(?:rule|group)_([^/]+)/(?:(.+)/)?[^/]+\.log$")
RUN_ID_RE = re.compile(r"SLURM run ID: (\S+)")
SACCT_FIELDS = ["JobIdRaw", "JobName", "Account", "Partition", "State", "AllocTRES",
                "Submit", "Start", "End", "Reason", "Comment"]


def parse_log(path):
    """Return ([{"rule", "smk_jobid", "wildcards", "slurm_jobid"}] in submission order, run_id).
    run_id is the slurm executor plugin's run ID (Snakemake >= 8), None for Snakemake 7.x."""
    jobs = {}  # snakemake jobid -> (rule, wildcards)
    submitted = []
    run_id = None
    rule = wildcards = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = RUN_ID_RE.search(line)
            if m:
                run_id = m.group(1)
                continue
            m = RULE_RE.match(line)
            if m:
                rule, wildcards = m.group(1), {}
                continue
            m = JOBID_RE.match(line)
            if m and rule is not None:
                jobs[m.group(1)] = (rule, wildcards)
                continue
            m = WILDCARDS_RE.match(line)
            if m and rule is not None:
                for item in m.group(1).split(", "):
                    k, _, v = item.partition("=")
                    wildcards[k.strip()] = v.strip()
                continue
            m = SUBMIT_RE.match(line)
            if m:
                smk_id, slurm_id, slurm_log = m.groups()
                if smk_id in jobs:
                    r, w = jobs[smk_id]
                else:  # plugin >= 2.6: rule and wildcard values from the SLURM log path
                    pm = PLUGIN_LOG_RE.search(slurm_log or "")
                    if not pm:
                        raise SystemExit(f"slurm_check: {path}: job {smk_id} submitted but neither its rule block nor a"
                                         f" slurm_logs/rule_<rule>/ log path was found: {line!r}")
                    r = pm.group(1)
                    w = {f"#{i}": v for i, v in enumerate(pm.group(2).split("_"))} if pm.group(2) else {}
                submitted.append({"rule": r, "smk_jobid": smk_id, "wildcards": w, "slurm_jobid": slurm_id})
    return submitted, run_id


def expected_names(job, run_id):
    """(JobName, Comment or None) that Snakemake gives the SLURM job of `job`."""
    if run_id is None:  # Snakemake 7.x built-in executor: -J snakejob_{rule}_{jobid}
        return f"snakejob_{job['rule']}_{job['smk_jobid']}", None
    # slurm executor plugin: --job-name <run uuid> --comment rule_<rule>[_wildcards_<values>]
    vals = "_".join(job["wildcards"].values())
    return run_id, f"rule_{job['rule']}" + (f"_wildcards_{vals}" if vals else "")


def wildcard_of(wildcards, name, index):
    """The value of wildcard `name` (the index-th of its rule): by name from a rule block, by position
    from a plugin >= 2.6 log path (values only, keys #0, #1, ...)."""
    return wildcards.get(name, wildcards.get(f"#{index}"))


def same_value(got, want):
    """Wildcard equality; numbers compare as numbers, so cycle "01" matches 1."""
    if got is None:
        return False
    if got.isdigit() and want.isdigit():
        return int(got) == int(want)
    return got == want


def parse_time(s):
    return dt.datetime.fromisoformat(s) if s and s not in ("Unknown", "None") else None


def gpus_of(tres):
    m = re.search(r"gres/gpu=(\d+)", tres)
    return int(m.group(1)) if m else 0


def sacct(jobids):
    out = subprocess.run(
        ["sacct", "-X", "-P", "-n", "-j", ",".join(jobids), "--format=" + ",".join(SACCT_FIELDS)],
        check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        vals = line.split("|")
        if len(vals) != len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, vals))
        row["gpus"] = gpus_of(row["AllocTRES"])
        row["start"], row["end"], row["submit"] = (parse_time(row["Start"]), parse_time(row["End"]),
                                                   parse_time(row["Submit"]))
        rows[row["JobIdRaw"]] = row
    for jobid, end in step_ends(jobids).items():
        if jobid in rows:
            rows[jobid]["work_end"] = end
    return rows


def step_ends(jobids):
    """The End of each job's last numbered step (N.0, N.1, ...: the srun steps of its job script), by job id."""
    out = subprocess.run(["sacct", "-P", "-n", "-j", ",".join(jobids), "--format=JobIdRaw,End"],
                         check=True, capture_output=True, text=True).stdout
    ends = {}
    for line in out.splitlines():
        jid, _, end = line.partition("|")
        job, _, step = jid.partition(".")
        t = parse_time(end)
        if step.isdigit() and t and (job not in ends or t > ends[job]):
            ends[job] = t
    return ends


def work_end(r):
    """When the job's work ended: its last srun step's End, else the job's End."""
    return r.get("work_end") or r["end"]


def max_concurrent(intervals):
    """Most intervals [start, end) open at once; at equal times ends count before starts."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def retried_attempts(sub, rows, retried):
    """(SLURM job ids of the failed first attempts, failures) for the rules in `retried`: each job of
    such a rule (rule + wildcard values) must have been submitted twice, attempt 1 FAILED, then COMPLETED."""
    groups, failed, fails = {}, set(), []
    for j in sub:
        if j["rule"] in retried:
            groups.setdefault((j["rule"], tuple(j["wildcards"].values())), []).append(j)
    for rule in retried:
        if not any(k[0] == rule for k in groups):
            fails.append(f"--retried {rule}: no job of that rule was submitted")
    for (rule, wc), js in sorted(groups.items()):
        states = [rows.get(j["slurm_jobid"], {}).get("State") for j in js]
        if len(js) != 2 or states[0] != "FAILED" or states[1] != "COMPLETED":
            fails.append(f"{rule} {list(wc)}: SLURM jobs {[j['slurm_jobid'] for j in js]} states {states}, want [FAILED, COMPLETED]"
                         " (attempt 1 fails, the retry succeeds)")
            continue
        failed.add(js[0]["slurm_jobid"])
    return failed, fails


def running_at(rs, t):
    """GPUs of the jobs rs running at time t (intervals [start, end))."""
    return sum(r["gpus"] for r in rs if r["start"] and r["end"] and r["start"] <= t < r["end"])


def idle_slots_while_pending(by_acct, limits):
    """Failures: GPU jobs that pended on AssocGrpGRES (sacct Reason) at a moment when another account
    had fewer of its GPUs running than its limit. The running counts change only at job starts and
    ends, so each pending interval [Submit, Start) is checked at its Submit and at every start/end
    inside it."""
    fails = []
    for acct, rs in sorted(by_acct.items()):
        for r in rs:
            if r["Reason"] != "AssocGrpGRES" or not (r["submit"] and r["start"]) or r["start"] <= r["submit"]:
                continue
            for other, ors in sorted(by_acct.items()):
                if other == acct or other not in limits:
                    continue
                times = [r["submit"]] + [t for o in ors for t in (o["start"], o["end"]) if t and r["submit"] < t < r["start"]]
                for t in sorted(times):
                    n = running_at(ors, t)
                    if n < limits[other]:
                        fails.append(f"SLURM job {r['JobIdRaw']} ({acct}) pended on AssocGrpGRES {r['Submit']}..{r['Start']} while "
                                     f"{other} had {n} of {limits[other]} GPUs running at {t.isoformat()} (a free slot idled)")
                        break
    return fails


def check(sub, run_id, rows, limits, expect=None, max_gpu_jobs=None, require_gpu_peak=False, require_cpu_beside=False,
          require_overflow=False, per_account_in_flight=False, require_running_peak=None, retried=()):
    """All checks on parsed log entries and sacct rows; returns (failures, report lines, table)."""
    fails, report = [], []
    failed_attempts, f = retried_attempts(sub, rows, set(retried))
    fails += f
    lines = ["slurm_jobid\trule\twildcards\taccount\tpartition\tgpus\tstate\treason\tsubmit\tstart\tend\tjobname\tcomment"]
    for j in sub:
        r = rows.get(j["slurm_jobid"])
        wc = ",".join(f"{k}={v}" for k, v in j["wildcards"].items())
        if r is None:
            fails.append(f"SLURM job {j['slurm_jobid']} ({j['rule']} {wc}) not in sacct")
            continue
        j["sacct"] = r
        lines.append("\t".join([j["slurm_jobid"], j["rule"], wc, r["Account"], r["Partition"], str(r["gpus"]),
                                r["State"], r["Reason"], r["Submit"], r["Start"], r["End"], r["JobName"], r["Comment"]]))
        if r["State"] != "COMPLETED" and j["slurm_jobid"] not in failed_attempts:
            fails.append(f"SLURM job {j['slurm_jobid']} ({j['rule']} {wc}): state {r['State']}, want COMPLETED")
        want_name, want_comment = expected_names(j, run_id)
        if r["JobName"] != want_name:
            fails.append(f"SLURM job {j['slurm_jobid']}: JobName {r['JobName']}, want {want_name}")
        if want_comment is not None and r["Comment"] != want_comment:
            fails.append(f"SLURM job {j['slurm_jobid']}: Comment {r['Comment']!r}, want {want_comment!r}")
    done = [j for j in sub if "sacct" in j]

    # 2. expected jobs: each exactly once, own SLURM job, account/partition/gpus.
    if expect is not None:
        used = set()
        for e in expect:
            want_wc = {k: str(v) for k, v in e.get("wildcards", {}).items()}
            hits = [j for j in done if j["rule"] == e["rule"] and j["slurm_jobid"] not in failed_attempts
                    and all(same_value(wildcard_of(j["wildcards"], k, i), v) for i, (k, v) in enumerate(want_wc.items()))]
            what = f"{e['rule']} {want_wc}"
            if len(hits) != 1:
                fails.append(f"{what}: {len(hits)} SLURM jobs, want exactly 1")
                continue
            j = hits[0]
            r = j["sacct"]
            if j["slurm_jobid"] in used:
                fails.append(f"{what}: SLURM job {j['slurm_jobid']} also matched another expected job")
            used.add(j["slurm_jobid"])
            for key, got in (("account", r["Account"]), ("partition", r["Partition"]), ("gpus", r["gpus"])):
                if key in e and got != e[key]:
                    fails.append(f"{what}: SLURM job {j['slurm_jobid']} {key} {got!r}, want {e[key]!r}")
        report.append(f"slurm_check: {len(expect)} expected jobs checked")

    # 3. + 5. per-account GPUs running at once, and queueing of what was in flight beyond the limit.
    by_acct, overflowed = {}, False
    gpu_jobs = [j["sacct"] for j in done if j["sacct"]["gpus"] > 0]
    for r in gpu_jobs:
        by_acct.setdefault(r["Account"], []).append(r)
    for acct, rs in sorted(by_acct.items()):
        if acct not in limits:
            fails.append(f"account {acct}: ran {len(rs)} GPU jobs but has no limit in --limits")
            continue
        timed = [r for r in rs if r["start"] and r["end"] and r["submit"]]
        if len(timed) != len(rs):
            fails.append(f"account {acct}: {len(rs) - len(timed)} GPU jobs without Submit/Start/End in sacct")
        running = max_concurrent([iv for r in timed for iv in [(r["start"], r["end"])] * r["gpus"]])
        in_flight = max_concurrent([iv for r in timed for iv in [(r["submit"], r["end"])] * r["gpus"]])
        queued = [r for r in rs if r["Reason"] == "AssocGrpGRES"]
        in_flight_work = max_concurrent([iv for r in timed for iv in [(r["submit"], work_end(r))] * r["gpus"]])
        report.append(f"slurm_check: account {acct}: {len(rs)} GPU jobs, limit {limits[acct]}, peak {running} "
                      f"running and {in_flight} in flight at once, {len(queued)} pended on AssocGrpGRES")
        if per_account_in_flight and in_flight_work > limits[acct]:
            fails.append(f"account {acct}: {in_flight_work} GPU jobs in flight at once (Submit to the end of their work), "
                         f"limit {limits[acct]}: jobs were submitted beyond the account's slots")
        if running > limits[acct]:
            fails.append(f"account {acct}: {running} GPUs in use at once, limit {limits[acct]}")
        overflowed |= in_flight > limits[acct]
        if in_flight > limits[acct] and not queued:
            fails.append(f"account {acct}: {in_flight} GPU jobs in flight > limit {limits[acct]} but none pended on "
                         f"AssocGrpGRES (the excess did not queue in SLURM)")

    if per_account_in_flight:
        fails += idle_slots_while_pending({a: rs for a, rs in by_acct.items() if a in limits}, limits)
    all_timed = [r for r in gpu_jobs if r["start"] and r["end"]]
    running_all = max_concurrent([iv for r in all_timed for iv in [(r["start"], r["end"])] * r["gpus"]])
    every = [j["sacct"] for j in done if j["sacct"]["submit"] and j["sacct"]["end"]]
    if every:
        t0, t1 = min(r["submit"] for r in every), max(r["end"] for r in every)
        report.append(f"slurm_check: makespan {int((t1 - t0).total_seconds())} s (first Submit {t0.isoformat()} to last End "
                      f"{t1.isoformat()}); GPUs running at once, all accounts: peak {running_all}")
    if require_running_peak is not None and running_all < require_running_peak:
        fails.append(f"GPUs running at once peaked at {running_all}, want {require_running_peak} (every slot busy at some time)")
    if require_overflow and not overflowed:
        fails.append("no account had more GPU jobs in flight than its limit: the queueing check was not exercised")

    # 4. GPU jobs in flight, all accounts together (Snakemake's gpu_jobs limit).
    timed = [r for r in gpu_jobs if r["submit"] and r["end"]]
    peak = max_concurrent([(r["submit"], work_end(r)) for r in timed])
    cpu = [j["sacct"] for j in done if j["sacct"]["gpus"] == 0 and j["sacct"]["start"] and j["sacct"]["end"]]
    beside = sum(1 for c in cpu if any(g["start"] and g["start"] < c["end"] and c["start"] < g["end"] for g in timed))
    report.append(f"slurm_check: {len(gpu_jobs)} GPU jobs, at most {peak} in flight at once (submitted, not ended); "
                  f"{len(cpu)} CPU jobs, {beside} of them running beside a GPU job")
    if require_cpu_beside and not beside:
        fails.append("no CPU job ran while a GPU job ran (CPU QC jobs should run beside GPU jobs)")
    if max_gpu_jobs is not None:
        if peak > max_gpu_jobs:
            fails.append(f"{peak} GPU jobs in flight at once, limit {max_gpu_jobs}")
        if require_gpu_peak and peak != max_gpu_jobs:
            fails.append(f"GPU jobs in flight peaked at {peak}, want exactly {max_gpu_jobs} (the limit was not exercised)")
    return fails, report, "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, help="Snakemake log (stdout+stderr of the run)")
    ap.add_argument("--limits", required=True, help="account=gpus,... e.g. acct_a=3,acct_b=2")
    ap.add_argument("--expect", help="JSON file: expected jobs (see module doc)")
    ap.add_argument("--table", help="write the per-job table (TSV) here")
    ap.add_argument("--max-gpu-jobs", type=int, help="most GPU jobs in flight at once (kintsugi-assign's jobs)")
    ap.add_argument("--require-gpu-peak", action="store_true", help="fail unless GPU jobs in flight reach --max-gpu-jobs")
    ap.add_argument("--require-cpu-beside", action="store_true", help="fail unless some CPU job ran while a GPU job ran")
    ap.add_argument("--require-overflow", action="store_true",
                    help="fail unless some account had more GPU jobs in flight than its limit (so 5. was exercised)")
    ap.add_argument("--per-account-in-flight", action="store_true",
                    help="fail if an account had more GPU jobs in flight than its limit, or a job pended on AssocGrpGRES "
                         "while another account had a free slot (7.)")
    ap.add_argument("--require-running-peak", type=int, help="fail unless the GPUs running at once reach this")
    ap.add_argument("--retried", action="append", default=[], help="RULE whose every job failed once, then succeeded (8.)")
    args = ap.parse_args()

    limits = {}
    for item in args.limits.split(","):
        k, _, v = item.partition("=")
        limits[k] = int(v)
    sub, run_id = parse_log(args.log)
    if not sub:
        raise SystemExit(f"slurm_check: no submitted SLURM jobs found in {args.log}")
    expect = None
    if args.expect:
        with open(args.expect) as f:
            expect = json.load(f)
    rows = sacct([j["slurm_jobid"] for j in sub])
    fails, report, table = check(sub, run_id, rows, limits, expect, args.max_gpu_jobs, args.require_gpu_peak,
                                 args.require_cpu_beside, args.require_overflow, args.per_account_in_flight,
                                 args.require_running_peak, args.retried)
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
    for line in report:
        print(line)
    for f in fails:
        print("FAIL:", f, file=sys.stderr)
    if fails:
        return 1
    print(f"slurm_check: OK ({len(sub)} SLURM jobs, Snakemake {'>= 8 (run ID ' + run_id + ')' if run_id else '7.x'} log)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
