# ---- cycle: the fused job (fused: true): stitch, deconvolve and edf of one cycle as one GPU job ----------
# bin/kintsugi-cycle reads the raw tiles once and hands each stage's planes to the next in memory (on the
# GPU in device stacks); it writes the three stages' outputs and sentinels, byte-identical to the three
# rules' (internal/cyclestage). The three stage rules stay defined (the ruleorder prefers this one while
# fused: true); to rerun one stage alone, run with --config fused=false. keep_intermediates: false leaves
# the stitched and deconvolved planes unwritten. Resources: resources.cpus_/mem_/time_cycle.

ruleorder: cycle > stitch
ruleorder: cycle > deconvolve
ruleorder: cycle > edf


rule cycle:
    input:
        raw_dir=get_raw_dir,
    output:
        SENTINEL["stitch"],
        SENTINEL["decon"],
        SENTINEL["edf"],
    params:
        **_params("kintsugi-cycle", LOGDIR + "/cycle_cyc{cycle}.log", "cycle {cycle}"),
    resources:
        **_gpu_resources("cycle"),
    shell:
        _stage_shell("cycle", CYCLE_ARGS)
