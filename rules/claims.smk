# The claims table: each seed paper's claim that this run tests, the paper's number, this run's with its
# interval, and a verdict (bertology_core/claims/stats.py).


rule claims:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.claims.inputs(jobs(), wc.model)),
    output:
        **summary_outputs("claims", "results/claims/{model}/headline"),
        **summary_outputs("claims", "results/claims/{model}/claims"),
    params:
        code=script_code("claims"),
        tasks=EXPERIMENT.task_meanings(),
        runs=lambda wc: EXPERIMENT.claims.runs_read(jobs(), wc.model),
        settings=config["claims"],
        tolerance=config["pruning"]["michel_tolerance"],
        importance={key: config["pruning"][key] for key in ("importance_split", "importance_examples", "importance_granularity")},
        label_sets=config["probing"]["labels"],
        out="results/claims/{model}/claims",
        headline="results/claims/{model}/headline",
    log:
        "logs/claims/{model}.log",
    benchmark:
        "results/benchmarks/claims/{model}.tsv"
    resources:
        **requests("claims"),
    script:
        "../workflow_scripts/claims.py"
