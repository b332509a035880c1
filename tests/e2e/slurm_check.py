#!/usr/bin/python3
"""Check, from SLURM accounting, how a Snakemake run used the test cluster.

Reads the Snakemake 7.x log of one run (stdout+stderr of `snakemake --profile profiles/slurm`),
maps every submitted job to its rule and wildcards ("rule X: ... jobid: N ... wildcards: k=v" and
"Job N has been submitted with SLURM jobid S"), queries sacct for those SLURM jobs and checks:

  1. every submitted job is COMPLETED and its sacct JobName is snakejob_<rule>_<N>;
  2. every expected job (--expect) ran exactly once, as its own SLURM job, with the expected
     account, partition and AllocTRES gres/gpu count;
  3. per account, the number of GPU jobs running at once (from sacct Start/End, 1 s resolution,
     intervals [Start, End)) never exceeds the account's limit (--limits);
  4. per account with more GPU jobs than its limit, the overflow really queued in SLURM: at least
     one of its jobs has sacct Reason AssocGrpGRES (the job waited on the account's GrpTRES limit);
     with --require-overflow, some account must have had more GPU jobs than its limit.

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
SUBMIT_RE = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+)")
SACCT_FIELDS = ["JobIdRaw", "JobName", "Account", "Partition", "State", "AllocTRES",
                "Submit", "Start", "End", "Reason", "Reserved"]


def parse_log(path):
    """Return [{"rule", "smk_jobid", "wildcards", "slurm_jobid"}] in submission order."""
    jobs = {}  # snakemake jobid -> (rule, wildcards)
    submitted = []
    rule = wildcards = smk = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = RULE_RE.match(line)
            if m:
                rule, wildcards, smk = m.group(1), {}, None
                continue
            m = JOBID_RE.match(line)
            if m and rule is not None:
                smk = m.group(1)
                jobs[smk] = (rule, wildcards)
                continue
            m = WILDCARDS_RE.match(line)
            if m and rule is not None:
                for item in m.group(1).split(", "):
                    k, _, v = item.partition("=")
                    wildcards[k.strip()] = v.strip()
                continue
            m = SUBMIT_RE.match(line)
            if m:
                smk_id, slurm_id = m.groups()
                if smk_id not in jobs:
                    raise SystemExit(f"slurm_check: {path}: job {smk_id} submitted but its rule block was not found")
                r, w = jobs[smk_id]
                submitted.append({"rule": r, "smk_jobid": smk_id, "wildcards": w, "slurm_jobid": slurm_id})
    return submitted


def same_value(got, want):
    """Wildcard equality; numbers compare as numbers, so cycle "01" matches 1."""
    if got is None:
        return False
    if got.isdigit() and want.isdigit():
        return int(got) == int(want)
    return got == want


def parse_time(s):
    return dt.datetime.fromisoformat(s) if s and s not in ("Unknown", "None") else None


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
        m = re.search(r"gres/gpu=(\d+)", row["AllocTRES"])
        row["gpus"] = int(m.group(1)) if m else 0
        row["start"], row["end"], row["submit"] = (parse_time(row["Start"]), parse_time(row["End"]),
                                                   parse_time(row["Submit"]))
        rows[row["JobIdRaw"]] = row
    return rows


def max_concurrent(intervals):
    """Most intervals [start, end) open at once; at equal times ends count before starts."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, help="Snakemake log (stdout+stderr of the run)")
    ap.add_argument("--limits", required=True, help="account=gpus,... e.g. acct_a=3,acct_b=2")
    ap.add_argument("--expect", help="JSON file: expected jobs (see module doc)")
    ap.add_argument("--table", help="write the per-job table (TSV) here")
    ap.add_argument("--require-overflow", action="store_true",
                    help="fail unless some account ran more GPU jobs than its limit (so 4. was exercised)")
    args = ap.parse_args()

    limits = {}
    for item in args.limits.split(","):
        k, _, v = item.partition("=")
        limits[k] = int(v)

    fails = []
    sub = parse_log(args.log)
    if not sub:
        raise SystemExit(f"slurm_check: no submitted SLURM jobs found in {args.log}")
    rows = sacct([j["slurm_jobid"] for j in sub])

    lines = ["slurm_jobid\trule\twildcards\taccount\tpartition\tgpus\tstate\treason\tsubmit\tstart\tend"]
    for j in sub:
        r = rows.get(j["slurm_jobid"])
        if r is None:
            fails.append(f"SLURM job {j['slurm_jobid']} ({j['rule']} {j['wildcards']}) not in sacct")
            continue
        j["sacct"] = r
        wc = ",".join(f"{k}={v}" for k, v in j["wildcards"].items())
        lines.append("\t".join([j["slurm_jobid"], j["rule"], wc, r["Account"], r["Partition"], str(r["gpus"]),
                                r["State"], r["Reason"], r["Submit"], r["Start"], r["End"]]))
        if r["State"] != "COMPLETED":
            fails.append(f"SLURM job {j['slurm_jobid']} ({j['rule']} {wc}): state {r['State']}, want COMPLETED")
        want_name = f"snakejob_{j['rule']}_{j['smk_jobid']}"
        if r["JobName"] != want_name:
            fails.append(f"SLURM job {j['slurm_jobid']}: JobName {r['JobName']}, want {want_name}")
    table = "\n".join(lines)
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
    done = [j for j in sub if "sacct" in j]

    # 2. expected jobs: each exactly once, own SLURM job, account/partition/gpus.
    if args.expect:
        with open(args.expect) as f:
            expect = json.load(f)
        used = set()
        for e in expect:
            want_wc = {k: str(v) for k, v in e.get("wildcards", {}).items()}
            hits = [j for j in done if j["rule"] == e["rule"]
                    and all(same_value(j["wildcards"].get(k), v) for k, v in want_wc.items())]
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
        print(f"slurm_check: {len(expect)} expected jobs checked")

    # 3. + 4. per-account concurrency of GPU jobs and queueing of the overflow.
    overflowed = False
    by_acct = {}
    for j in done:
        r = j["sacct"]
        if r["gpus"] > 0:
            by_acct.setdefault(r["Account"], []).append(r)
    for acct, rs in sorted(by_acct.items()):
        if acct not in limits:
            fails.append(f"account {acct}: ran {len(rs)} GPU jobs but has no limit in --limits")
            continue
        ivs = [(r["start"], r["end"]) for r in rs if r["start"] and r["end"]]
        if len(ivs) != len(rs):
            fails.append(f"account {acct}: {len(rs) - len(ivs)} GPU jobs without Start/End in sacct")
        # A job with gres/gpu=N occupies N slots; weight intervals by it.
        weighted = [iv for r in rs if r["start"] and r["end"] for iv in [(r["start"], r["end"])] * r["gpus"]]
        peak = max_concurrent(weighted)
        queued = [r for r in rs if r["Reason"] == "AssocGrpGRES"]
        waits = sorted((r["start"] - r["submit"]).total_seconds() for r in rs if r["start"] and r["submit"])
        n_gpus = sum(r["gpus"] for r in rs)
        print(f"slurm_check: account {acct}: {len(rs)} GPU jobs ({n_gpus} GPUs), limit {limits[acct]}, "
              f"peak {peak} at once, {len(queued)} pending on AssocGrpGRES, waits(s) {waits}")
        if peak > limits[acct]:
            fails.append(f"account {acct}: {peak} GPUs in use at once, limit {limits[acct]}")
        overflowed |= n_gpus > limits[acct]
        if n_gpus > limits[acct] and not queued:
            fails.append(f"account {acct}: {n_gpus} GPU jobs > limit {limits[acct]} but none pended on "
                         f"AssocGrpGRES (overflow did not queue in SLURM)")

    if args.require_overflow and not overflowed:
        fails.append("no account ran more GPU jobs than its limit: the queueing check was not exercised")
    for f in fails:
        print("FAIL:", f, file=sys.stderr)
    if fails:
        return 1
    print(f"slurm_check: OK ({len(done)} SLURM jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
