# A declared task's splits normalised to Parquet (idx, sentence1, sentence2, label), optionally subsampled.


rule prepare_data:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.task_files(wc.task)),
    output:
        "results/data/{task}/{split}.parquet",
    params:
        code=script_code("prepare_data"),
        task=EXPERIMENT.task_declaration,
        max_examples=lambda wc: EXPERIMENT.max_examples(wc.task, wc.split),
        seed=config["data"]["subsample_seed"],
    log:
        "logs/prepare_data/{task}/{split}.log",
    benchmark:
        "results/benchmarks/prepare_data/{task}/{split}.tsv"
    # validation jobs first: bad data fails the run before any model job starts
    priority: 100
    resources:
        **requests("prepare_data"),
    script:
        "../workflow_scripts/prepare_data.py"


# A task's splits tokenised once per model and cut length: the jobs that train or evaluate on whole splits read them
# instead of each tokenising again.
rule tokenize_data:
    conda:
        "../envs/torch.yaml"
    input:
        data=lambda wc: EXPERIMENT.task_data(wc.task),
        resolved="results/models/{model}/resolved.json",
    output:
        "results/data/{task}/tokens/{model}.max{max_length}.parquet",
    wildcard_constraints:
        max_length=r"\d+",
    params:
        code=script_code("tokenize_data"),
    threads: config["finetune"]["threads"]
    # every fine-tuning job (priority 20) waits for it
    priority: 25
    log:
        "logs/tokenize_data/{task}/{model}.max{max_length}.log",
    benchmark:
        "results/benchmarks/tokenize_data/{task}/{model}.max{max_length}.tsv"
    resources:
        **requests("tokenize_data"),
    script:
        "../workflow_scripts/tokenize_data.py"
