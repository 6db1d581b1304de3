# The disabling stage's input functions, report section, targets and checks; its rules are in
# rules/disabling.smk (Snakemake's linter asks rules and functions to live in separate files).


def disabling_setting(task, key):
    """A disabling setting of one task: its per_task override, else the default."""
    return config["disabling"]["per_task"].get(task, {}).get(key, config["disabling"][key])


def disabling_states():
    """The swept fine-tuned models: disabling.states that the config fine-tunes at all."""
    return [state for state in config["disabling"]["states"] if state in TRAINED_STATES]


def disabling_seeds(task):
    """The seeds configured for a task's sweeps (fine-tuned for them whether or not they are analysed)."""
    return disabling_setting(task, "seeds") or SEEDS


def swept_seeds(model, task, state):
    """The seeds whose fine-tuned model is swept: the configured ones that are analysed."""
    return [seed for seed in disabling_seeds(task) if analysed(model, task, state, seed)]


def disabling_runs(model):
    """(task, state, seed) of every sweep."""
    return [(task, state, seed) for task in TASKS for state in disabling_states() for seed in swept_seeds(model, task, state)]


def greedy_seeds(model, task, state):
    """Swept seeds that also get the greedy search (none when greedy_steps is 0)."""
    if disabling_setting(task, "greedy_steps") == 0:
        return []
    wanted = disabling_setting(task, "greedy_seeds")
    return [seed for seed in swept_seeds(model, task, state) if wanted is None or seed in wanted]


def disabling_dir(model, task, state, seed):
    return f"results/disabling/{model}/{task}/{state}/seed{seed}"


def disabling_task_states(model):
    """(task, state) of every per-task statistics job: those with at least one swept seed."""
    pairs = {(task, state) for task, state, _ in disabling_runs(model)}
    return [(task, state) for task in TASKS for state in disabling_states() if (task, state) in pairs]


def greedy_runs(model):
    """(task, state, seed) of every greedy search."""
    return [(t, i, s) for t, i in disabling_task_states(model) for s in greedy_seeds(model, t, i)]


def disabling_summary_inputs(wildcards):
    model = wildcards.model
    return {
        "fitness": fitness_inputs(),
        "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in disabling_task_states(model)],
        "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in disabling_task_states(model)],
        "greedy": [f"{disabling_dir(model, t, i, s)}/greedy.parquet" for t, i, s in greedy_runs(model)],
    }


declare_section("disabling", runs=lambda model: bool(disabling_runs(model)), shows=disabling_runs,
                analyses_fine_tuned=lambda model: bool(disabling_runs(model)))
