# The head roles stage's input functions, report section, targets and checks; its rules are in
# rules/head_roles.smk (Snakemake's linter asks rules and functions to live in separate files).


def head_role_dumps(model):
    """Every attention dump of ``model`` (``<task>/<dumped state>``): each gets its roles."""
    return dump_keys(model)


def gate_runs(model):
    """(task, seed) of every pruned fine-tuned model that gets L0 head gates (head_roles.gates.tasks and seeds)."""
    wanted = config["head_roles"]["gates"]
    return [(task, seed) for task, seed in pruning_runs(model)
            if (wanted["tasks"] is None or task in wanted["tasks"]) and (wanted["seeds"] is None or seed in wanted["seeds"])]


def gate_strength(value):
    """How a penalty strength is spelled in paths: Python's shortest round-trip form (0.01, 0.3, 1e-05)."""
    return repr(float(value))


def gate_jobs(model):
    """(task, seed, weights, strength) of every gate-training job."""
    gates = config["head_roles"]["gates"]
    return [(task, seed, weights, gate_strength(strength)) for task, seed in gate_runs(model)
            for weights in gates["weights"] for strength in gates["strengths"]]


def gate_file(model, task, seed, weights, strength, suffix):
    return f"{pruning_dir(model, task, seed)}/gates/{weights}_strength{strength}.{suffix}"


def head_roles_summary_inputs(wildcards):
    model = wildcards.model
    syntactic = syntactic_head_states(model)
    swept = [(task, state) for task, state in disabling_task_states(model) if state == states.FINETUNED]
    jobs = gate_jobs(model)
    return {
        "fitness": fitness_inputs(),
        "roles": [f"results/head_roles/{model}/{key}.parquet" for key in head_role_dumps(model)],
        # Voita et al.'s token-level accuracy per relation and direction (the syntactic role)
        "voita": [f"results/probing/{model}/{state}/syntactic_heads_voita.parquet" for state in syntactic],
        "importance": [f"{pruning_dir(model, t, s)}/importance.parquet" for t, s in pruning_runs(model)],
        "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
        "michel": [f"{pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in {(t, s) for t, s, _, _ in jobs}],
        "gates": [gate_file(model, *job, "json") for job in jobs],
        "gate_predictions": [gate_file(model, *job, "predictions.parquet") for job in jobs],
        "dev": sorted({f"results/data/{t}/dev.parquet" for t, _, _, _ in jobs}),
    }


def head_roles_runs(model):
    """What the summary needs to read its inputs: the key of each per-run file, in input order."""
    return {
        "roles": head_role_dumps(model),
        "importance": pruning_runs(model),
        "michel": sorted({(t, s) for t, s, _, _ in gate_jobs(model)}),
        "gates": gate_jobs(model),
    }


declare_section("roles", runs=lambda model: bool(head_role_dumps(model)),
                shows=lambda model: sorted(set(dumped_runs(model)) | {(t, states.FINETUNED, s) for t, s in gate_runs(model)}),
                analyses_fine_tuned=lambda model: bool(dumped_runs(model) or gate_runs(model)))


@check("choices")


def gate_choice_problems():
    """Gate tasks and seeds must be pruned ones: the gates are compared with Michel et al.'s curve of the same model."""
    gates = config["head_roles"]["gates"]
    problems = named_task_problems({"head_roles.gates.tasks": gates["tasks"]})
    for task in [t for t in gates["tasks"] or [] if t in TASKS]:
        if task not in configured_pruning_tasks():
            problems.append(f"head_roles.gates.tasks names {task}, which is not pruned (pruning.tasks: {config['pruning']['tasks']}): "
                            "the gates are compared with Michel et al.'s curve of the same model. Fix: add it to pruning.tasks or drop it.")
        elif gates["seeds"] is not None and not set(gates["seeds"]) & set(pruning_seeds(task)):
            problems.append(f"head_roles.gates.seeds {gates['seeds']} names no pruned seed of {task} ({pruning_seeds(task)}). "
                            f"Fix: use one of them or set seeds: null.")
    candidates = [task for task in configured_pruning_tasks() if gates["tasks"] is None or task in gates["tasks"]]
    if candidates and gates["seeds"] is not None and not any(set(gates["seeds"]) & set(pruning_seeds(task)) for task in candidates):
        problems.append(f"head_roles.gates.seeds {gates['seeds']} names no seed that is pruned (pruning seeds: "
                        f"{ {task: pruning_seeds(task) for task in configured_pruning_tasks()} }): no gates would be trained. "
                        "Fix: name a pruned seed, set seeds: null, or tasks: [] for no gates.")
    if gates["tasks"] != [] and configured_pruning_tasks() and config["pruning"]["michel_recompute"]:
        problems.append("head_roles.gates are compared with Michel et al.'s order computed once (the curve without "
                        "recomputation), but pruning.michel_recompute is true. Fix: set pruning.michel_recompute: false, "
                        "or head_roles.gates.tasks: [] for no gates.")
    if gates["tasks"] != [] and configured_pruning_tasks() and not config["attention"]["dumped"]:
        problems.append("head_roles.gates are summarised with the head roles of the attention dumps, and attention.dumped "
                        "is empty. Fix: dump a state (attention.dumped: [pretrained, finetuned]) or set head_roles.gates.tasks: [].")
    low, high = gates["stretch"]
    if not (low < 0 and high > 1):
        problems.append(f"head_roles.gates.stretch {gates['stretch']}: the L0 penalty needs low < 0 and high > 1 (Louizos et al.). "
                        "Fix: use [-0.1, 1.1].")
    return problems
