# ---- registration: one GPU job for every cycle (edf -> data/processed/registered) ----------------------

rule registration:
    input:
        _sentinels("edf"),
    output:
        REGISTERED,
    params:
        **_params("kintsugi-register", LOGDIR + "/registration.log", "all cycles"),
    resources:
        **_gpu_resources("registration", lambda wc: REG_ASSIGN),
    shell:
        _stage_shell("registration", "run --config {params.config:q} --device {params.device:q}")
