# ---- QC: CPU partition of the helper's CPU assignment, no GPU ------------------------------------------
# bin/kintsugi-qc <stage> writes qc_plots/<stage>/ (per-cycle metrics JSON, PNG overviews and
# heatmaps) and the original's sentinel qc_plots/.snakemake_complete_<stage>. One rule per stage,
# qc_stitch, qc_decon, qc_edf, qc_registration, made by the loop below (`name:`, Snakemake >= 7.21);
# the report page is rules/report.smk. Every directive but shell is evaluated when the rule is
# defined; the shell line is evaluated again when the job runs (inside its SLURM allocation, after
# the loop has ended), so it names no loop variable: the rule's name is {rule}, the stage a param.

rule qc:
    input:
        QC_SENTINELS,
        QC_REPORT,


# stage, its input, the resources keys of its memory and time
for _stage, _input, _mem_key, _time_key in (
    ("stitch", _sentinels("stitch"), "mem_qc", "time_qc"),
    ("decon", _sentinels("decon"), "mem_qc", "time_qc"),
    ("edf", _sentinels("edf"), "mem_qc", "time_qc"),
    ("registration", REGISTERED, "mem_qc_registration", "time_qc_registration"),
):
    rule:
        name:
            f"qc_{_stage}"
        input:
            _input,
        output:
            LAYOUT["qc_sentinel"][_stage],
        params:
            **_params("kintsugi-qc", LOGDIR + f"/qc_{_stage}.log", f"stage {_stage}"),
            stage=_stage,
        resources:
            **_qc_resources(_mem_key, _time_key),
        shell:
            _stage_shell("{rule}", "run --stage {params.stage} --config {params.config:q}", env=QC_ENV)
