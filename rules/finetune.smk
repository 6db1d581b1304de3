# Fine-tuning (states finetuned and scratch) and the pre-trained encoder's evaluation (state pretrained), per (model,
# task, state, seed).


def fine_tuned_runs():
    """Every (task, state, seed) the config fine-tunes: the top-level seeds of every trained state, and the
    extra seeds of the disabling sweeps, pruning and probing."""
    runs = set()
    for task in TASKS:
        for state in TRAINED_STATES:
            runs |= {(task, state, seed) for seed in finetuned_seeds(task, state)}
    return sorted(runs, key=lambda run: (TASKS.index(run[0]), run[1], run[2]))


def finetuned_seeds(task, state=states.FINETUNED, probing=True):
    """Every seed a task is fine-tuned with into ``state``: the top-level seeds and the extra seeds of its
    disabling sweeps, pruning and probing."""
    seeds = set(SEEDS)
    if state in disabling_states():
        seeds |= set(disabling_seeds(task))
    if state == states.FINETUNED:
        if task in configured_pruning_tasks():
            seeds |= set(pruning_seeds(task))
        if probing:
            seeds |= {seed for probed, seed in probed_runs() if probed == task}
            chosen = config["probing"]["syntactic_heads"]["states"] if TREEBANK_SPLITS else None
            seeds |= {split_state(s)[1] for s in chosen or [] if states.is_seeded(s) and split_state(s)[0] == task}
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
        model=directory("results/finetune/{model}/{task}/{state}/seed{seed}/model"),
        # the run's record; metrics.json adds the fitness verdict to it (rule model_fitness)
        evaluation="results/finetune/{model}/{task}/{state}/seed{seed}/evaluation.json",
        predictions="results/finetune/{model}/{task}/{state}/seed{seed}/predictions.parquet",
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        code=script_code("finetune"),
        hyperparameters=lambda wc: hyperparameters(wc.task, wc.state),
        eval_splits=lambda wc: eval_splits(wc.task),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/finetune/{model}/{task}/{state}/seed{seed}",
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
        "logs/finetune/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/finetune/{model}/{task}/{state}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"


rule evaluate_pretrained:
    conda:
        "../envs/torch.yaml"
    input:
        resolved="results/models/{model}/resolved.json",
        eval=eval_inputs,
    output:
        metrics=f"results/finetune/{{model}}/{{task}}/{states.PRETRAINED}/seed{{seed}}/metrics.json",
        predictions=f"results/finetune/{{model}}/{{task}}/{states.PRETRAINED}/seed{{seed}}/predictions.parquet",
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
        "logs/evaluate_pretrained/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/evaluate_pretrained/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"
