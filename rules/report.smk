# ---- QC report: CPU partition of the helper's CPU assignment, no GPU ----------------------------------
# bin/kintsugi-qc report reads every stage's QC outputs (qc_plots/<stage>/), the stage logs under
# slurm/logs/snakemake/, the tile positions, BaSiC profiles and registration transforms, and writes
# qc_plots/report.html (one self-contained page) and the original's PDF summaries. Included by the
# Snakefile after the QC rules (it uses QC_ASSIGN, QC_SENTINELS, QC_REPORT, LOGDIR, CONFIG_JSON, BIN, _res,
# _need); `all` and `qc` pull it in through QC_REPORT.

rule qc_report:
    input:
        QC_SENTINELS,
    output:
        QC_REPORT,
        QC_DIR + "/stitched_summary_heatmaps.pdf",
        QC_DIR + "/deconvolved_summary_heatmaps.pdf",
        QC_DIR + "/edf_summary_heatmaps.pdf",
        QC_DIR + "/registration_qc_overlay_grid.pdf",
    log:
        LOGDIR + "/qc_report.log",
    params:
        config=CONFIG_JSON,
        bin=BIN,
    resources:
        slurm_account=QC_ASSIGN["account"],
        slurm_partition=QC_ASSIGN["partition"],
        cpus_per_task=_res("cpus_qc", 2),
        mem_mb=_res("mem_qc_report", 8000),
        runtime=_res("time_qc_report", 30),
    shell:
        _need("kintsugi-qc") +
        "{params.bin}/kintsugi-qc report --config {params.config} --log-format text > {log} 2>&1"
