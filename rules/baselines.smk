# The baselines table per model (Kovaleva et al. 2019, Table 1 shape).


include: "functions/baselines.smk"


rule baselines:
    conda:
        "../envs/tables.yaml"
    input:
        metrics=lambda wc: metrics_files(wc.model),
        fitness=fitness_inputs(),
    output:
        long="results/tables/{model}/baselines_long.parquet",
        parquet="results/tables/{model}/baselines.parquet",
        csv=report_file("baselines", "results/tables/{model}/baselines.csv", "table"),
        markdown="results/tables/{model}/baselines.md",
    params:
        code=script_code("baselines"),
    log:
        "logs/baselines/{model}.log",
    benchmark:
        "results/benchmarks/baselines/{model}.tsv"
    resources:
        mem_mb=scaled(1000),
        runtime=scaled(10),
    script:
        "../workflow_scripts/baselines.py"
