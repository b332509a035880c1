#!/usr/bin/python3
"""Unit tests of slurm_check.py on recorded log excerpts (no SLURM needed):
Snakemake 7.21's built-in executor and Snakemake >= 8 with snakemake-executor-plugin-slurm
(jobs named by the run ID, rule and wildcards in the job comment). Run: python3 -m unittest
tests/e2e/test_slurm_check.py (tests/e2e/run.sh does)."""
import datetime as dt
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_check as sc  # noqa: E402

LOG_7 = """\
kintsugi-assign: source static; cycles per account {'acct_a': [1, 2, 3, 6, 7], 'acct_b': [4, 5]}
Building DAG of jobs...
Using shell: /usr/bin/bash
[Mon Nov 30 15:50:01 2026]
rule stitch:
    input: /tmp/p/data/raw/cyc03
    output: /tmp/p/data/processed/stitched/cyc03/.snakemake_complete
    log: /tmp/p/slurm/logs/snakemake/stitch_cyc03.log
    jobid: 9
    reason: Missing output files: /tmp/p/data/processed/stitched/cyc03/.snakemake_complete
    wildcards: cycle=03
    resources: mem_mb=1000, runtime=20, cpus_per_task=2, slurm_account=acct_a, slurm_partition=gpu, gpu_jobs=1, slurm_extra=--gres=gpu:1

Job 9 has been submitted with SLURM jobid 41 (log: /work/main/.snakemake/slurm_logs/rule_stitch/41.log).
[Mon Nov 30 15:52:11 2026]
rule qc_stitch:
    input: /tmp/p/data/processed/stitched/cyc03/.snakemake_complete
    output: /tmp/p/qc_plots/.snakemake_complete_stitch
    jobid: 23
    reason: Missing output files: /tmp/p/qc_plots/.snakemake_complete_stitch
    resources: mem_mb=1000, runtime=120, cpus_per_task=2, slurm_account=acct_a, slurm_partition=cpu

Job 23 has been submitted with SLURM jobid 42 (log: /work/main/.snakemake/slurm_logs/rule_qc_stitch/42.log).
"""

RUN_ID = "9f1c2d3e-1111-4a2b-8c3d-0123456789ab"
LOG_8 = f"""\
Using profile profiles/slurm for setting default command line arguments.
SLURM run ID: {RUN_ID}
Building DAG of jobs...
[Mon Nov 30 15:50:01 2026]
rule edf:
    input: /tmp/p/data/processed/deconvolved/cyc02/.snakemake_complete
    output: /tmp/p/data/processed/edf/cyc02/.snakemake_complete
    log: /tmp/p/slurm/logs/snakemake/edf_cyc02.log
    jobid: 4
    reason: Missing output files: /tmp/p/data/processed/edf/cyc02/.snakemake_complete
    wildcards: cycle=02
    resources: mem_mb=1000, runtime=20, cpus_per_task=2, slurm_account=acct_a, slurm_partition=gpu, gpu_jobs=1, gres=gpu:1

Job 4 has been submitted with SLURM jobid 77 (log: /work/main/.snakemake/slurm_logs/rule_edf/02/77.log).
[Mon Nov 30 15:50:30 2026]
rule registration:
    input: /tmp/p/data/processed/edf/cyc02/.snakemake_complete
    output: /tmp/p/data/processed/registered/.snakemake_complete
    jobid: 1
    reason: Missing output files: /tmp/p/data/processed/registered/.snakemake_complete
    resources: mem_mb=2000, runtime=20, cpus_per_task=2, slurm_account=acct_a, slurm_partition=gpu, gpu_jobs=1, gres=gpu:1

Job 1 has been submitted with SLURM jobid 78 (log: /work/main/.snakemake/slurm_logs/rule_registration/78.log).
"""

T0 = dt.datetime(2026, 11, 30, 15, 50, 0)


def row(jobid, name, acct, part, gpus, submit, start, end, comment="", reason="None", state="COMPLETED"):
    t = lambda s: T0 + dt.timedelta(seconds=s)  # noqa: E731
    return {"JobIdRaw": jobid, "JobName": name, "Account": acct, "Partition": part, "State": state,
            "AllocTRES": "cpu=2,mem=1000M,node=1" + (f",gres/gpu={gpus}" if gpus else ""), "gpus": gpus,
            "Reason": reason, "Comment": comment, "Submit": str(t(submit)), "Start": str(t(start)), "End": str(t(end)),
            "submit": t(submit), "start": t(start), "end": t(end)}


def parse(text):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
    try:
        return sc.parse_log(f.name)
    finally:
        os.unlink(f.name)


class ParseTest(unittest.TestCase):
    def test_snakemake7(self):
        sub, run_id = parse(LOG_7)
        self.assertIsNone(run_id)
        self.assertEqual([(j["rule"], j["smk_jobid"], j["slurm_jobid"], j["wildcards"]) for j in sub],
                         [("stitch", "9", "41", {"cycle": "03"}), ("qc_stitch", "23", "42", {})])
        self.assertEqual(sc.expected_names(sub[0], run_id), ("snakejob_stitch_9", None))

    def test_snakemake8_plugin(self):
        sub, run_id = parse(LOG_8)
        self.assertEqual(run_id, RUN_ID)
        self.assertEqual([(j["rule"], j["slurm_jobid"]) for j in sub], [("edf", "77"), ("registration", "78")])
        self.assertEqual(sc.expected_names(sub[0], run_id), (RUN_ID, "rule_edf_wildcards_02"))
        self.assertEqual(sc.expected_names(sub[1], run_id), (RUN_ID, "rule_registration"))

    def test_missing_rule_block(self):
        with self.assertRaises(SystemExit):
            parse("Job 5 has been submitted with SLURM jobid 9 (log: x).\n")

    def test_plugin_2_6_submission_lines(self):
        # plugin >= 2.6: no rule blocks; the rule and the wildcard values come from the log path.
        sub, run_id = parse(f"SLURM run ID: {RUN_ID}\n"
                            "Job 3 has been submitted with SLURM jobid 51 (log: /r/.snakemake/slurm_logs/rule_edf/04/51.log).\n"
                            "Job 0 has been submitted with SLURM jobid 52 (log: /r/.snakemake/slurm_logs/rule_registration/52.log).\n")
        self.assertEqual([(j["rule"], j["wildcards"], j["slurm_jobid"]) for j in sub],
                         [("edf", {"#0": "04"}, "51"), ("registration", {}, "52")])
        self.assertEqual(sc.expected_names(sub[0], run_id), (RUN_ID, "rule_edf_wildcards_04"))


class CheckTest(unittest.TestCase):
    def test_plugin_names_and_expectations(self):
        sub, run_id = parse(LOG_8)
        rows = {"77": row("77", RUN_ID, "acct_a", "gpu", 1, 0, 1, 30, "rule_edf_wildcards_02"),
                "78": row("78", RUN_ID, "acct_a", "gpu", 1, 31, 32, 60, "rule_registration")}
        expect = [{"rule": "edf", "wildcards": {"cycle": 2}, "account": "acct_a", "partition": "gpu", "gpus": 1},
                  {"rule": "registration", "account": "acct_a", "partition": "gpu", "gpus": 1}]
        fails, _, _ = sc.check(sub, run_id, rows, {"acct_a": 3}, expect, max_gpu_jobs=1, require_gpu_peak=True)
        self.assertEqual(fails, [])
        rows["77"]["Comment"] = "rule_edf_wildcards_03"
        rows["78"]["JobName"] = "snakejob_registration_1"
        rows["78"]["Partition"] = "cpu"
        fails, _, _ = sc.check(sub, run_id, rows, {"acct_a": 3}, expect)
        self.assertEqual(len(fails), 3, fails)
        self.assertTrue(any("Comment 'rule_edf_wildcards_03'" in f for f in fails), fails)

    def test_gpu_jobs_in_flight(self):
        # Three GPU jobs, two accounts: all three submitted by t=2, so 3 in flight at once although
        # only two run together; one CPU job running beside them.
        sub = [{"rule": "stitch", "smk_jobid": str(i), "wildcards": {"cycle": f"0{i}"}, "slurm_jobid": str(i)} for i in (1, 2, 3)]
        sub.append({"rule": "qc_stitch", "smk_jobid": "4", "wildcards": {}, "slurm_jobid": "4"})
        rows = {"1": row("1", "snakejob_stitch_1", "acct_a", "gpu", 1, 0, 1, 20),
                "2": row("2", "snakejob_stitch_2", "acct_a", "gpu", 1, 1, 20, 40, reason="AssocGrpGRES"),
                "3": row("3", "snakejob_stitch_3", "acct_b", "gpu", 1, 2, 3, 30),
                "4": row("4", "snakejob_qc_stitch_4", "acct_a", "cpu", 0, 5, 6, 10)}
        fails, report, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1}, None, max_gpu_jobs=3, require_gpu_peak=True)
        self.assertEqual(fails, [], report)
        self.assertTrue(any("at most 3 in flight" in l and "1 of them running beside" in l for l in report), report)
        rows["4"]["start"], rows["4"]["end"] = rows["3"]["end"], rows["3"]["end"] + dt.timedelta(seconds=9)
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1}, require_cpu_beside=True)
        self.assertEqual(fails, [], "job 2 (acct_a) still runs until t=40")
        rows["4"]["start"], rows["4"]["end"] = T0 + dt.timedelta(seconds=40), T0 + dt.timedelta(seconds=50)
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1}, require_cpu_beside=True)
        self.assertEqual(fails, ["no CPU job ran while a GPU job ran (CPU QC jobs should run beside GPU jobs)"])
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1}, None, max_gpu_jobs=2)
        self.assertEqual(fails, ["3 GPU jobs in flight at once, limit 2"])
        # acct_a had 2 in flight with limit 1: without an AssocGrpGRES wait that is a failure.
        rows["2"]["Reason"] = "None"
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1})
        self.assertTrue(any("none pended on AssocGrpGRES" in f for f in fails), fails)
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 2, "acct_b": 1}, require_overflow=True)
        self.assertEqual(fails, ["no account had more GPU jobs in flight than its limit: the queueing check was not exercised"])
        # Two acct_a jobs running at once break its limit of 1.
        rows["2"]["start"] = rows["1"]["start"]
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1})
        self.assertTrue(any("2 GPUs in use at once, limit 1" in f for f in fails), fails)

    def test_in_flight_ends_with_the_last_step(self):
        # Job 1's SLURM End comes 3 s after its srun step ended; Snakemake submitted job 2 at the
        # step's end: one in flight at a time, not two.
        sub = [{"rule": "stitch", "smk_jobid": str(i), "wildcards": {"cycle": f"0{i}"}, "slurm_jobid": str(i)} for i in (1, 2)]
        rows = {"1": row("1", "snakejob_stitch_1", "acct_a", "gpu", 1, 0, 1, 23),
                "2": row("2", "snakejob_stitch_2", "acct_a", "gpu", 1, 20, 24, 40)}
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 2}, None, max_gpu_jobs=1)
        self.assertEqual(fails, ["2 GPU jobs in flight at once, limit 1"])
        rows["1"]["work_end"] = T0 + dt.timedelta(seconds=20)
        fails, report, _ = sc.check(sub, None, rows, {"acct_a": 2}, None, max_gpu_jobs=1, require_gpu_peak=True)
        self.assertEqual(fails, [], report)

    def test_max_concurrent(self):
        t = lambda s: T0 + dt.timedelta(seconds=s)  # noqa: E731
        self.assertEqual(sc.max_concurrent([(t(0), t(10)), (t(10), t(20)), (t(5), t(15))]), 2)
        self.assertEqual(sc.max_concurrent([]), 0)

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


class RecordedLogTest(unittest.TestCase):
    """Logs recorded from real `snakemake registration` runs of tests/e2e/run.sh (7 cycles) on the local
    SLURM: Debian's Snakemake 7.21, and Snakemake 9.25.2 with snakemake-executor-plugin-slurm 2.7.1
    (no rule blocks: rule and wildcards from the submission lines' log paths)."""

    def check_registration_run(self, name, want_run_id):
        path = os.path.join(TESTDATA, name)
        self.assertTrue(os.path.isfile(path), f"{path} missing")
        sub, run_id = sc.parse_log(path)
        self.assertEqual(run_id is not None, want_run_id)
        got = sorted((j["rule"], int(next(iter(j["wildcards"].values()), 0))) for j in sub)
        want = sorted([(r, c) for r in ("stitch", "deconvolve", "edf") for c in range(1, 8)] + [("registration", 0)])
        self.assertEqual(got, want)
        self.assertEqual(len({j["slurm_jobid"] for j in sub}), 22)
        return sub, run_id

    def test_snakemake_7_21(self):
        sub, run_id = self.check_registration_run("snakemake-7.21-registration.log", False)
        self.assertTrue(all(sc.expected_names(j, run_id)[0] == f"snakejob_{j['rule']}_{j['smk_jobid']}" for j in sub))

    def test_snakemake_9_25_2_plugin_2_7_1(self):
        sub, run_id = self.check_registration_run("snakemake-9.25.2-registration.log", True)
        j = next(j for j in sub if j["rule"] == "edf")
        self.assertEqual(sc.expected_names(j, run_id), (run_id, "rule_edf_wildcards_" + j["wildcards"]["#0"]))
        self.assertEqual(sc.wildcard_of(j["wildcards"], "cycle", 0), j["wildcards"]["#0"])



class WorkConservingTest(unittest.TestCase):
    def jobs(self, n):
        return [{"rule": "stitch", "smk_jobid": str(i), "wildcards": {"cycle": f"0{i}"}, "slurm_jobid": str(i)} for i in range(1, n + 1)]

    def test_pending_while_another_account_idles(self):
        # acct_a (1 slot) has job 2 pending on AssocGrpGRES 1..20 while acct_b (1 slot) ran nothing
        # after t=10: a free slot idled while work waited.
        sub = self.jobs(3)
        rows = {"1": row("1", "snakejob_stitch_1", "acct_a", "gpu", 1, 0, 1, 20),
                "2": row("2", "snakejob_stitch_2", "acct_a", "gpu", 1, 1, 20, 40, reason="AssocGrpGRES"),
                "3": row("3", "snakejob_stitch_3", "acct_b", "gpu", 1, 0, 1, 10)}
        limits = {"acct_a": 1, "acct_b": 1}
        fails, _, _ = sc.check(sub, None, rows, limits)
        self.assertEqual(fails, [], "without --per-account-in-flight the old checks hold")
        fails, _, _ = sc.check(sub, None, rows, limits, per_account_in_flight=True)
        self.assertEqual(len(fails), 2, fails)
        self.assertTrue(any("account acct_a: 2 GPU jobs in flight at once" in f for f in fails), fails)
        self.assertTrue(any("SLURM job 2 (acct_a) pended on AssocGrpGRES" in f and "acct_b had 0 of 1" in f for f in fails), fails)
        # acct_b busy for the whole wait: no idle slot; job 2 submitted when job 1 ended.
        rows["3"]["end"] = T0 + dt.timedelta(seconds=25)
        rows["2"]["submit"] = rows["1"]["end"]
        fails, _, _ = sc.check(sub, None, rows, limits, per_account_in_flight=True)
        self.assertEqual(fails, [], "acct_b busy while job 2 waited, and acct_a never over its slot")

    def test_running_peak_and_makespan(self):
        sub = self.jobs(2)
        rows = {"1": row("1", "snakejob_stitch_1", "acct_a", "gpu", 1, 0, 1, 20),
                "2": row("2", "snakejob_stitch_2", "acct_b", "gpu", 1, 0, 20, 40)}
        fails, report, _ = sc.check(sub, None, rows, {"acct_a": 1, "acct_b": 1}, require_running_peak=2)
        self.assertEqual(fails, ["GPUs running at once peaked at 1, want 2 (every slot busy at some time)"])
        self.assertTrue(any("makespan 40 s" in l for l in report), report)

    def test_retried(self):
        sub = self.jobs(1) + [{"rule": "stitch", "smk_jobid": "1", "wildcards": {"cycle": "01"}, "slurm_jobid": "9"}]
        rows = {"1": row("1", "snakejob_stitch_1", "acct_a", "gpu", 1, 0, 1, 2, state="FAILED"),
                "9": row("9", "snakejob_stitch_1", "acct_a", "gpu", 1, 3, 4, 20)}
        expect = [{"rule": "stitch", "wildcards": {"cycle": 1}, "account": "acct_a", "gpus": 1}]
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1}, expect, retried=["stitch"])
        self.assertEqual(fails, [])
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1}, expect)
        self.assertTrue(any("state FAILED" in f for f in fails) and any("2 SLURM jobs, want exactly 1" in f for f in fails), fails)
        rows["1"]["State"] = "COMPLETED"
        fails, _, _ = sc.check(sub, None, rows, {"acct_a": 1}, expect, retried=["stitch"])
        self.assertTrue(any("want [FAILED, COMPLETED]" in f for f in fails), fails)
        fails, _, _ = sc.check(sub[:1], None, rows, {"acct_a": 1}, expect, retried=["registration"])
        self.assertEqual(fails, ["--retried registration: no job of that rule was submitted"])


if __name__ == "__main__":
    unittest.main()
