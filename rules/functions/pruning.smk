# The pruning stage's input functions, report section, targets and checks; its rules are in
# rules/pruning.smk (Snakemake's linter asks rules and functions to live in separate files).


# the models fine-tuned from the pre-trained encoder are pruned (state finetuned)
PRUNE_DIR = f"results/pruning/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}"


def configured_pruning_tasks():
    wanted = config["pruning"]["tasks"]
    if states.FINETUNED not in TRAINED_STATES:
        return []
    return [task for task in TASKS if wanted is None or task in wanted]


def pruning_seeds(task):
    """The seeds configured for a task's pruning (fine-tuned for it whether or not they are analysed)."""
    return config["pruning"]["per_task"].get(task, {}).get("seeds") or config["pruning"]["seeds"] or SEEDS


def pruning_runs(model):
    """(task, seed) of every pruned fine-tuned model: the configured ones that are analysed."""
    return [(task, seed) for task in configured_pruning_tasks() for seed in pruning_seeds(task) if analysed(model, task, states.FINETUNED, seed)]


def subnetwork_seeds(task):
    """Pruned seeds whose subnetworks are re-fine-tuned (pruning.per_task.<TASK>.subnetwork_seeds; null: all)."""
    wanted = config["pruning"]["per_task"].get(task, {}).get("subnetwork_seeds")
    return pruning_seeds(task) if wanted is None else list(wanted)


def pruning_dir(model, task, seed):
    return PRUNE_DIR.format(model=model, task=task, seed=seed)


def subnetwork_recipe(task):
    """Re-fine-tuning hyper-parameters of the subnetworks: fine-tuning's, with pruning's overrides."""
    values = hyperparameters(task, states.FINETUNED)
    if config["pruning"]["subnetwork_epochs"] is not None:
        values["epochs"] = config["pruning"]["subnetwork_epochs"]
    return values


def subnetwork_reference_retrained():
    """Whether the full model is re-fine-tuned as the reference (the subnetworks' recipe departs from
    fine-tuning's), rather than taken from the fine-tuning run itself."""
    return config["pruning"]["subnetwork_max_train_examples"] is not None or config["pruning"]["subnetwork_epochs"] is not None


def subnetwork_names():
    """``full`` (when re-fine-tuned) and ``<method>-<kind>-<protocol>``: a ticket's subnetworks per protocol."""
    kinds = config["pruning"]["subnetworks"]
    methods = config["pruning"]["subnetwork_methods"] or config["pruning"]["methods"]
    names = [f"{method}-{kind}-{protocol}" for method in methods for protocol in lottery_protocols() for kind in kinds]
    return (["full"] if names and subnetwork_reference_retrained() else []) + names


def lottery_protocols():
    """How lottery tickets are chosen and reported: held_out (chosen on half A of dev, reported on half B)
    always; paper (Prasanna et al.'s: chosen and reported on dev) beside it with pruning.paper_protocol."""
    return ["held_out"] + (["paper"] if config["pruning"]["paper_protocol"] else [])


def lottery_split(protocol):
    """What a protocol's halves of dev depend on (so that only its jobs rerun): the split seed for held_out."""
    return {"split_seed": config["pruning"]["split_seed"]} if protocol == "held_out" else {}


def subnetwork_runs(model):
    """(task, seed, network) of every re-fine-tuned subnetwork."""
    return [(t, s, n) for t, s in pruning_runs(model) if s in subnetwork_seeds(t) for n in subnetwork_names()]


def pruning_summary_inputs(wildcards):
    model, methods = wildcards.model, config["pruning"]["methods"]
    runs = pruning_runs(model)
    return {
        "fitness": fitness_inputs(),
        "importance": [f"{pruning_dir(model, t, s)}/importance.parquet" for t, s in runs],
        "michel": [f"{pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in runs],
        "curves": [f"{pruning_dir(model, t, s)}/{m}_{p}_curve.parquet" for t, s in runs for m in methods for p in lottery_protocols()],
        "tickets": [f"{pruning_dir(model, t, s)}/{m}_{p}_ticket.json" for t, s in runs for m in methods for p in lottery_protocols()],
        # survival and stability: the held-out tickets
        "masks": [f"{pruning_dir(model, t, s)}/{m}_held_out_mask.safetensors" for t, s in runs for m in methods],
        "compact": [f"{pruning_dir(model, t, s)}/s_compact.json" for t, s in runs if "s" in methods],
        "subnetworks": [f"{pruning_dir(model, t, s)}/subnetworks/{n}.json" for t, s, n in subnetwork_runs(model)],
        "subnetwork_predictions": [f"{pruning_dir(model, t, s)}/subnetworks/{n}.predictions.parquet" for t, s, n in subnetwork_runs(model)],
        # the fine-tuned models' own dev predictions: the full reference when it is not re-fine-tuned
        "finetuned_predictions": [f"{run_dir(model, t, states.FINETUNED, s)}/predictions.parquet" for t, s in runs],
        "dev": sorted({f"results/data/{t}/dev.parquet" for t, _ in runs}),
    }


def importance_data(wildcards):
    return f"results/data/{wildcards.task}/{config['pruning']['importance_split']}.parquet"


def pruning_params():
    """The importance settings every pruning job depends on; the batch size only under batch granularity, whose
    batches it makes (elsewhere it changes speed only, so changing it reruns nothing)."""
    keys = ("importance_split", "importance_examples", "importance_granularity", "normalize_by_layer")
    batched = config["pruning"]["importance_granularity"] == "batch"
    return {key: config["pruning"][key] for key in keys} | {
        "subsample_seed": config["data"]["subsample_seed"],
        "importance_batch_size": config["pruning"]["batch_size"] if batched else None,
    }


def pruning_dev_sample():
    """The dev examples that score pruning decisions: a seeded subsample, or all of dev (examples null)."""
    return {"examples": config["pruning"]["dev_examples"], "seed": config["data"]["subsample_seed"]}


def subnetwork_inputs(wildcards):
    inputs = {
        "resolved": f"results/models/{wildcards.model}/resolved.json",
        "train": f"results/data/{wildcards.task}/train.parquet",
        "dev": f"results/data/{wildcards.task}/dev.parquet",
    }
    if wildcards.network != "full":
        method, kind, protocol = wildcards.network.split("-")
        inputs["mask"] = f"{pruning_dir(wildcards.model, wildcards.task, wildcards.seed)}/{method}_{protocol}_mask.safetensors"
        if (method, kind) == ("m", "bad"):  # the smallest weights of the fine-tuned model
            inputs["finetuned_model"] = f"{run_dir(wildcards.model, wildcards.task, states.FINETUNED, wildcards.seed)}/model"
    return inputs


declare_section("pruning", runs=lambda model: bool(pruning_runs(model)),
                shows=lambda model: [(task, states.FINETUNED, seed) for task, seed in pruning_runs(model)],
                analyses_fine_tuned=lambda model: bool(pruning_runs(model)))


@check("choices")


def pruning_choice_problems():
    """Choices of pruning runs that name a task or seed the config does not run: caught when the workflow is parsed,
    not after fine-tuning (and not silently ignored)."""
    problems = named_task_problems({"pruning.tasks": config["pruning"]["tasks"]})
    for task, settings in config["pruning"]["per_task"].items():
        wanted = settings.get("subnetwork_seeds") or []
        if wanted and task not in configured_pruning_tasks():
            problems.append(f"pruning.per_task.{task}.subnetwork_seeds: {task} is not pruned (pruning.tasks, tasks). "
                            "Fix: prune the task or drop its subnetwork_seeds.")
        elif set(wanted) - set(pruning_seeds(task)):
            problems.append(f"pruning.per_task.{task}.subnetwork_seeds {sorted(wanted)} names seeds that are not pruned "
                            f"({pruning_seeds(task)}). Fix: add them to pruning.per_task.{task}.seeds or drop them.")
    unpruned = sorted(set(config["pruning"]["subnetwork_methods"] or []) - set(config["pruning"]["methods"]))
    if unpruned:
        problems.append(f"pruning.subnetwork_methods names {unpruned}, not in pruning.methods {config['pruning']['methods']}. "
                        "Fix: add them to pruning.methods or drop them.")
    if config["pruning"]["importance_split"] == "dev" and "s" in config["pruning"]["methods"]:
        # s-pruning's order comes from importance: on all of dev, half B would help choose the held-out ticket
        problems.append("pruning.importance_split: dev lets the dev half that reports s-pruning's ticket choose which heads "
                        "it prunes. Fix: importance_split: train (the default), or drop s from pruning.methods.")
    return problems
