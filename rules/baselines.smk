# The baselines table per model (Kovaleva et al. 2019, Table 1 shape).


def metrics_files(model):
    """The metrics.json of every run of the baselines table: the pre-trained encoder's (top-level seeds) and every
    fine-tuned run."""
    pretrained = [(task, states.PRETRAINED, seed) for task in TASKS for seed in SEEDS] if states.PRETRAINED in FINETUNE_STATES else []
    return [f"{run_dir(model, t, s, seed)}/metrics.json" for t, s, seed in pretrained + fine_tuned_runs()]


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


declare_section("baselines", shows=lambda model: fine_tuned_runs(), summaries=[("table", "tables/{model}/baselines")])
