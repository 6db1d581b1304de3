# The probing stage's input functions, report section, targets and checks; its rules are in
# rules/probing.smk (Snakemake's linter asks rules and functions to live in separate files).


# --- probing and syntactic heads ---


def probed_runs():
    """(task, seed) of every fine-tuned model the config probes (whether or not it is analysed)."""
    settings = config["probing"]
    if not TREEBANK_SPLITS or states.FINETUNED not in settings["states"] or states.FINETUNED not in TRAINED_STATES:
        return []
    tasks = TASKS if settings["tasks"] is None else [t for t in settings["tasks"] if t in TASKS]
    return [(task, seed) for task in tasks for seed in settings["seeds"] or finetuned_seeds(task, states.FINETUNED, probing=False)]


# the probed states that are no fine-tuned model (their own names; a fine-tuned one is <TASK>_seed<N>)
UNTRAINED_PROBED = (states.PRETRAINED, states.RANDOM_WEIGHTS)


def _state_is_analysed(model, probed):
    if probed in UNTRAINED_PROBED:
        return True
    task, seed = split_state(probed)
    return analysed(model, task, states.FINETUNED, seed)


def probing_states(model):
    """Probed model states: ``pretrained`` (the pre-trained encoder), ``random_weights`` (its architecture with
    random weights, never trained) and ``<task>_seed<seed>`` (fine-tuned from the pre-trained encoder, if analysed)."""
    if not TREEBANK_SPLITS:
        return []
    probed = [s for s in UNTRAINED_PROBED if s in config["probing"]["states"]]
    probed += [states.seeded(task, seed) for task, seed in probed_runs()]
    return [state for state in probed if _state_is_analysed(model, state)]


def probed_states(model):
    """(task, seed) of every probed model fine-tuned from the pre-trained encoder."""
    return [split_state(state) for state in probing_states(model) if state not in UNTRAINED_PROBED]


def syntactic_head_states(model):
    """States whose heads are scored against the treebank (null: the pre-trained encoder and every
    fine-tuned state probed), those analysed."""
    if not TREEBANK_SPLITS:
        return []
    chosen = config["probing"]["syntactic_heads"]["states"]
    scored = [s for s in probing_states(model) if s != states.RANDOM_WEIGHTS] if chosen is None else list(chosen)
    return [state for state in scored if _state_is_analysed(model, state)]


def probing_model_inputs(wildcards):
    """The encoder of a state: the resolved pre-trained folder (pretrained and random_weights, whose weights are
    drawn from its config) or a fine-tuned model folder."""
    inputs = {"resolved": f"results/models/{wildcards.model}/resolved.json"}
    if wildcards.probed not in UNTRAINED_PROBED:
        task, seed = split_state(wildcards.probed)
        inputs["model"] = f"{run_dir(wildcards.model, task, states.FINETUNED, seed)}/model"
    return inputs


def probing_sample():
    """Seeded sentence samples of the treebank splits, shared by extraction and probes."""
    settings = config["probing"]
    return {"train": settings["train_sentences"], "dev": settings["dev_sentences"], "seed": settings["sample_seed"]}


def probing_summary_inputs(wildcards):
    model = wildcards.model
    return {
        "fitness": fitness_inputs(),
        "probes": [f"results/probing/{model}/{state}/probes.parquet" for state in probing_states(model)],
        "heads": [f"results/probing/{model}/{state}/syntactic_heads.parquet" for state in syntactic_head_states(model)],
        "held_out": [f"results/probing/{model}/{state}/syntactic_heads_held_out.parquet" for state in syntactic_head_states(model)],
    }


declare_section("probing", runs=lambda model: bool(probing_states(model)),
                shows=lambda model: [(task, states.FINETUNED, seed) for task, seed in probed_states(model)],
                analyses_fine_tuned=lambda model: bool(probing_states(model)))


def _early_probing_targets(model):
    """The pre-trained encoder's and the random-weights encoder's probes and the pre-trained encoder's syntactic heads:
    no fine-tuned model needed."""
    if not TREEBANK_SPLITS:
        return []
    targets = [f"results/probing/{model}/{s}/probes.parquet" for s in UNTRAINED_PROBED if s in config["probing"]["states"]]
    with ungated():  # parsed before the fitness checkpoint exists; pretrained is never a fine-tuned model
        pretrained_heads = states.PRETRAINED in syntactic_head_states(model)
    return targets + ([f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads.parquet"] if pretrained_heads else [])


EARLY_TARGETS.append(_early_probing_targets)


@check("choices")


def probing_choice_problems():
    """Probing's task and state lists must name tasks the config runs."""
    return named_task_problems(
        {"probing.tasks": config["probing"]["tasks"]},
        {"probing.syntactic_heads.states": config["probing"]["syntactic_heads"]["states"],
         "probing.reference.states": config["probing"]["reference"]["states"]},
    )
