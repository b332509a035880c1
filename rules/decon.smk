# ---- deconvolve: one GPU job per cycle (stitched -> data/processed/deconvolved/cycNN) ------------------

rule deconvolve:
    input:
        PROCESSED + "/stitched/cyc{cycle}/.snakemake_complete",
    output:
        PROCESSED + "/deconvolved/cyc{cycle}/.snakemake_complete",
    params:
        **_params("kintsugi-decon", LOGDIR + "/decon_cyc{cycle}.log", "cycle {cycle}"),
    resources:
        **_gpu_resources("decon"),
    shell:
        _stage_shell("deconvolve", CYCLE_ARGS)
