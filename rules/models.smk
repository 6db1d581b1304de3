# Resolve every model spec once; downstream jobs read the folder and hashes from the record.


rule resolve_model:
    conda:
        "../envs/torch.yaml"
    input:
        local_model_files,
    output:
        "results/models/{model}/resolved.json",
    params:
        code=script_code("resolve_model"),
        spec=lambda wc: MODELS[wc.model],
    log:
        "logs/resolve_model/{model}.log",
    benchmark:
        "results/benchmarks/resolve_model/{model}.tsv"
    priority: 100
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(60),
    script:
        "../workflow_scripts/resolve_model.py"
