# The finetune stage's input functions, report section, targets and checks; its rules are in
# rules/finetune.smk (Snakemake's linter asks rules and functions to live in separate files).


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
