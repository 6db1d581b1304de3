# The baselines table per model (Kovaleva et al. 2019, Table 1 shape).


rule baselines:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        metrics=lambda wc: EXPERIMENT.baselines.metrics_files(wc.model),
        fitness=f"{FITNESS_TABLE}.parquet",
    output:
        # the table (Table 1 shape), and beside it one row per run and metric, and their mean and std as numbers
        **summary_outputs("baselines", "results/baselines/{model}/baselines"),
        long="results/baselines/{model}/baselines_long.parquet",
        summary="results/baselines/{model}/baselines_summary.parquet",
    params:
        code=script_code("baselines"),
    log:
        "logs/baselines/{model}.log",
    benchmark:
        "results/benchmarks/baselines/{model}.tsv"
    resources:
        **requests("baselines"),
    script:
        "../workflow_scripts/baselines.py"
