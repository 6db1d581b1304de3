# Fine-tuning (pretrained and random init) and the untuned evaluation, per (model, task, init, seed).


def fine_tuned_runs():
    """Every (task, init, seed) the config fine-tunes: the top-level seeds of every trained init, and the
    extra seeds of the disabling sweeps, pruning and probing."""
    runs = set()
    for task in TASKS:
        for init in TRAINED_INITS:
            runs |= {(task, init, seed) for seed in finetuned_seeds(task, init)}
    return sorted(runs, key=lambda run: (TASKS.index(run[0]), run[1], run[2]))


def finetuned_seeds(task, init="pretrained", probing=True):
    """Every seed a task is fine-tuned with from ``init``: the top-level seeds and the extra seeds of its
    disabling sweeps, pruning and probing."""
    seeds = set(SEEDS)
    if init in disabling_inits():
        seeds |= set(disabling_seeds(task))
    if init == "pretrained":
        if task in configured_pruning_tasks():
            seeds |= set(pruning_seeds(task))
        if probing:
            seeds |= {seed for probed, seed in probed_runs() if probed == task}
            chosen = config["probing"]["syntactic_heads"]["states"] if TREEBANK_SPLITS else None
            seeds |= {split_state(s)[1] for s in chosen or [] if s not in ("untuned", "random") and split_state(s)[0] == task}
    return sorted(seeds)


# How a fine-tuning job runs, not what it computes: resources, so a change reruns nothing (a checkpoint interval of
# 0 means none: by steps only, or by time only)
FINETUNE_RUNTIME = {
    "eval_batch_size": config["finetune"]["eval_batch_size"],
    "checkpoint_steps": config["finetune"]["checkpoint_steps"] or 0,
    "checkpoint_seconds": round(60 * config["finetune"]["checkpoint_minutes"]) if config["finetune"]["checkpoint_minutes"] else 0,
}


rule finetune:
    conda:
        "../envs/torch.yaml"
    input:
        resolved="results/models/{model}/resolved.json",
        train="results/data/{task}/train.parquet",
        eval=eval_inputs,
    output:
        model=directory("results/finetune/{model}/{task}/{init}/seed{seed}/model"),
        # the run's record; metrics.json adds the fitness verdict to it (rule model_fitness)
        evaluation="results/finetune/{model}/{task}/{init}/seed{seed}/evaluation.json",
        predictions="results/finetune/{model}/{task}/{init}/seed{seed}/predictions.parquet",
    wildcard_constraints:
        init="random|pretrained",
    params:
        code=script_code("finetune"),
        hyperparameters=lambda wc: hyperparameters(wc.task, wc.init),
        eval_splits=lambda wc: eval_splits(wc.task),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/finetune/{model}/{task}/{init}/seed{seed}",
    threads: config["finetune"]["threads"]
    # the longest jobs, and nearly everything waits for them: start them first so the last ones do not
    # run alone at the end of a run
    priority: 20
    resources:
        mem_mb=scaled(config["finetune"]["mem_mb"]),
        runtime=scaled(240),
        cpus_per_task=config["finetune"]["threads"],
        gpu=MODEL_JOB_GPUS,
        **FINETUNE_RUNTIME,
    log:
        "logs/finetune/{model}/{task}/{init}/seed{seed}.log",
    benchmark:
        "results/benchmarks/finetune/{model}/{task}/{init}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"


rule evaluate_untuned:
    conda:
        "../envs/torch.yaml"
    input:
        resolved="results/models/{model}/resolved.json",
        eval=eval_inputs,
    output:
        metrics="results/finetune/{model}/{task}/untuned/seed{seed}/metrics.json",
        predictions="results/finetune/{model}/{task}/untuned/seed{seed}/predictions.parquet",
    params:
        code=script_code("finetune"),
        # no training settings, so changing them never reruns it
        hyperparameters=lambda wc: evaluation_parameters(wc.task),
        eval_splits=lambda wc: eval_splits(wc.task),
    threads: config["finetune"]["threads"]
    resources:
        mem_mb=scaled(config["finetune"]["mem_mb"]),
        runtime=scaled(30),
        cpus_per_task=config["finetune"]["threads"],
        gpu=MODEL_JOB_GPUS,
        eval_batch_size=config["finetune"]["eval_batch_size"],
    log:
        "logs/evaluate_untuned/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/evaluate_untuned/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"
