# ---- deconvolve: one GPU job per cycle (stitched -> data/processed/deconvolved/cycNN) ------------------

rule deconvolve:
    input:
        SENTINEL["stitch"],
    output:
        SENTINEL["decon"],
    params:
        **_params("kintsugi-decon", LOGDIR + "/decon_cyc{cycle}.log", "cycle {cycle}"),
    resources:
        **_gpu_resources("decon"),
    shell:
        _stage_shell("deconvolve", CYCLE_ARGS)
