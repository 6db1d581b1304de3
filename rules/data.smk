# GLUE splits normalised to Parquet (idx, sentence1, sentence2, label), optionally subsampled.


rule prepare_data:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: PLAN.local_glue_file(wc.task, wc.split),
    output:
        "results/data/{task}/{split}.parquet",
    params:
        code=script_code("prepare_data"),
        source=config["data"]["source"],
        max_examples=lambda wc: PLAN.max_examples(wc.task, wc.split),
        seed=config["data"]["subsample_seed"],
    log:
        "logs/prepare_data/{task}/{split}.log",
    benchmark:
        "results/benchmarks/prepare_data/{task}/{split}.tsv"
    # validation jobs first: bad data fails the run before any model job starts
    priority: 100
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(30),
    script:
        "../workflow_scripts/prepare_data.py"
