# The outliers stage's input functions, report section and checks; its rules are in rules/outliers.smk (Snakemake's
# linter asks rules and functions to live in separate files).


def outlier_configured_tasks():
    wanted = config["outliers"]["tasks"]
    return TASKS if wanted is None else [task for task in wanted if task in TASKS]


def outlier_configured_seeds(task):
    """The seeds configured for a task's disablings: outliers.seeds, or the disabling stage's seeds."""
    seeds = config["outliers"]["seeds"]
    return disabling_seeds(task) if seeds is None else seeds


def outlier_seeds(model, task):
    """The analysed fine-tuned models of ``task`` whose outliers are disabled."""
    return [seed for seed in outlier_configured_seeds(task) if analysed(model, task, states.FINETUNED, seed)]


def outlier_runs(model):
    """(task, seed) of every disabled fine-tuned model."""
    if states.FINETUNED not in TRAINED_STATES:
        return []
    return [(task, seed) for task in outlier_configured_tasks() for seed in outlier_seeds(model, task)]


def outlier_tasks(model):
    return list(dict.fromkeys(task for task, _ in outlier_runs(model)))


declare_section("outliers", runs=lambda model: True,
                shows=lambda model: [(task, states.FINETUNED, seed) for task, seed in outlier_runs(model)],
                analyses_fine_tuned=lambda model: bool(outlier_runs(model)))


@check("choices")


def outlier_choice_problems():
    """Outlier tasks must be configured, and their seeds fine-tuned anyway (the stage adds no fine-tuning run)."""
    problems = named_task_problems({"outliers.tasks": config["outliers"]["tasks"]})
    if states.FINETUNED not in TRAINED_STATES:
        return problems
    for task in outlier_configured_tasks():
        missing = sorted(set(outlier_configured_seeds(task)) - set(finetuned_seeds(task, states.FINETUNED)))
        if missing:
            problems.append(f"outliers.seeds {missing} are not fine-tuned for {task} (fine-tuned seeds: "
                            f"{sorted(finetuned_seeds(task, states.FINETUNED))}): the outliers stage fine-tunes no model of "
                            "its own. Fix: add them to seeds (or the disabling stage's seeds), or name fine-tuned ones.")
    return problems
