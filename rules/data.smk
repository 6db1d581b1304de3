# GLUE splits normalised to Parquet (idx, sentence1, sentence2, label), optionally subsampled.


def prepare_data_input(wildcards):
    # Depend on the TSV itself, so an edited file reruns what uses it.
    if config["data"]["source"] != "local":
        return []
    return str(glue.local_path(glue.get_task(wildcards.task), wildcards.split, glue_dir()))


def max_examples(wildcards):
    key = "max_train_examples" if wildcards.split == "train" else "max_eval_examples"
    return data_limits(wildcards.task)[key]


rule prepare_data:
    input:
        prepare_data_input,
    output:
        "results/data/{task}/{split}.parquet",
    params:
        source=config["data"]["source"],
        glue_dir=lambda wc: str(glue_dir()),
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
