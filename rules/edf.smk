# ---- edf: one GPU job per cycle (deconvolved -> data/processed/edf/cycNN, marker-named files) ----------

rule edf:
    input:
        SENTINEL["decon"],
    output:
        SENTINEL["edf"],
    params:
        **_params("kintsugi-edf", LOGDIR + "/edf_cyc{cycle}.log", "cycle {cycle}"),
    resources:
        **_gpu_resources("edf"),
    shell:
        _stage_shell("edf", CYCLE_ARGS)


# ---- validate: every marker-named EDF file exists (the original's check) --------------------------------

rule validate:
    run:
        want = [os.path.join(os.path.dirname(SENTINEL["edf"].replace("{cycle}", cyc_fmt(c))), name) for c in CYCLES for name in EDF_FILES[c]]
        missing = [p for p in want if not os.path.isfile(p)]
        if missing:
            print(f"validate: {len(missing)} of {len(want)} EDF files missing:", file=sys.stderr)
            for p in missing[:20]:
                print(f"  {p}", file=sys.stderr)
            if len(missing) > 20:
                print(f"  ... and {len(missing) - 20} more", file=sys.stderr)
            raise WorkflowError(f"validate: {len(missing)} EDF files missing")
        print(f"validate: all {len(want)} EDF files present ({len(CYCLES)} cycles x {len(CHANNELS)} channels)")
