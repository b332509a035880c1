# ---- stitch: one GPU job per cycle (raw tiles -> data/processed/stitched/cycNN) -----------------------
# Per-job logs (slurm/logs/snakemake/<stage>_cycNN.log) are params, not log: Snakemake removes a declared
# log before it reruns a job; these are appended to, one header per job (rules/common.smk: _stage_shell).

rule stitch_all:
    input:
        _sentinels("stitch"),


def get_raw_dir(wc):
    return _raw_cycle_dir(int(wc.cycle))


rule stitch:
    input:
        raw_dir=get_raw_dir,
    output:
        SENTINEL["stitch"],
    params:
        **_params("kintsugi-stitch", LOGDIR + "/stitch_cyc{cycle}.log", "cycle {cycle}"),
    resources:
        **_gpu_resources("stitch"),
    shell:
        _stage_shell("stitch", CYCLE_ARGS)
