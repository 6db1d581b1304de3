# GLUE splits normalised to Parquet (idx, sentence1, sentence2, label), optionally subsampled.


rule prepare_data:
    conda:
        "../envs/tables.yaml"
    input:
        prepare_data_input,
    output:
        "results/data/{task}/{split}.parquet",
    params:
        code=library_code("glue", "io"),
        source=config["data"]["source"],
        max_examples=max_examples,
        seed=config["data"]["subsample_seed"],
    log:
        "logs/prepare_data/{task}/{split}.log",
    benchmark:
        "results/benchmarks/prepare_data/{task}/{split}.tsv"
    resources:
        mem_mb=2000,
        runtime=30,
    script:
        "../workflow_scripts/prepare_data.py"
