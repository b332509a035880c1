# ---- QC report: CPU partition of the helper's CPU assignment, no GPU ----------------------------------
# bin/kintsugi-qc report reads every stage's QC outputs (qc_plots/<stage>/), the stage logs under
# slurm/logs/snakemake/, the tile positions, BaSiC profiles and registration transforms, and writes
# qc_plots/report.html (one self-contained page) and the original's PDF summaries. Included by the
# Snakefile after rules/qc.smk (it uses QC_SENTINELS, QC_REPORT, LOGDIR, _params, _qc_resources and
# _stage_shell of rules/common.smk: quoted shell line, appended per-job log with a header, mem_mb x
# attempt on retries); `all` and `qc` pull it in through QC_REPORT.

rule qc_report:
    input:
        QC_SENTINELS,
    output:
        QC_REPORT,
        QC_DIR + "/stitched_summary_heatmaps.pdf",
        QC_DIR + "/deconvolved_summary_heatmaps.pdf",
        QC_DIR + "/edf_summary_heatmaps.pdf",
        QC_DIR + "/registration_qc_overlay_grid.pdf",
    params:
        **_params("kintsugi-qc", LOGDIR + "/qc_report.log", "report"),
    resources:
        **_qc_resources("mem_qc_report", "time_qc_report"),
    shell:
        _stage_shell("qc_report", "report --config {params.config:q}", env=QC_ENV)
