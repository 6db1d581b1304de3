# Layer-wise probes with control tasks (Tenney et al. 2019; Liu et al. 2019; Hewitt & Liang 2019) and
# syntactic heads (Clark et al. 2019) on the Universal Dependencies treebank, per model state.


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


rule probe_features:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(probing_model_inputs),
        train="results/treebank/train.parquet",
        dev="results/treebank/dev.parquet",
    output:
        "results/probing/{model}/{probed}/features.safetensors",
    params:
        code=script_code("probe_features"),
        sample=probing_sample(),
        pooling=config["probing"]["pooling"],
        max_length=config["probing"]["max_length"],
        batch_size=config["probing"]["batch_size"],
        random_seed=config["probing"]["random_seed"],
    threads: config["probing"]["threads"]
    resources:
        mem_mb=scaled(6000),
        runtime=scaled(60),
        cpus_per_task=config["probing"]["threads"],
        gpu=MODEL_JOB_GPUS,
    log:
        "logs/probe_features/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/probe_features/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/probe_features.py"


rule probe_layers:
    conda:
        "../envs/torch.yaml"
    input:
        features="results/probing/{model}/{probed}/features.safetensors",
        resolved="results/models/{model}/resolved.json",
        train="results/treebank/train.parquet",
        dev="results/treebank/dev.parquet",
    output:
        probes="results/probing/{model}/{probed}/probes.parquet",
        # per dev word and layer, right or wrong: what the claims table resamples
        words="results/probing/{model}/{probed}/probe_words.parquet",
    params:
        code=script_code("probe_layers"),
        sample=probing_sample(),
        labels=config["probing"]["labels"],
        min_label_count=config["probing"]["min_label_count"],
        probe=config["probing"]["probe"],
        control_seed=config["probing"]["control_seed"],
        reference_regularisation=lambda wc: config["probing"]["reference"]["regularisation"]
        if wc.probed in config["probing"]["reference"]["states"] else None,
    threads: config["probing"]["threads"]
    resources:
        mem_mb=scaled(6000),
        runtime=scaled(60),
        cpus_per_task=config["probing"]["threads"],
    log:
        "logs/probe_layers/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/probe_layers/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/probe_layers.py"


rule syntactic_heads:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(probing_model_inputs),
        treebank=lambda wc: f"results/treebank/{config['probing']['syntactic_heads']['split']}.parquet",
    output:
        per_head="results/probing/{model}/{probed}/head_relations.parquet",
        best="results/probing/{model}/{probed}/syntactic_heads.parquet",
        # chosen on half the sentences, reported on the other half
        held_out="results/probing/{model}/{probed}/syntactic_heads_held_out.parquet",
    params:
        code=script_code("syntactic_heads"),
        settings=config["probing"]["syntactic_heads"],
        max_length=config["probing"]["max_length"],
        seed=config["probing"]["sample_seed"],
    threads: config["probing"]["threads"]
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(60),
        cpus_per_task=config["probing"]["threads"],
        gpu=MODEL_JOB_GPUS,
    log:
        "logs/syntactic_heads/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/syntactic_heads/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/syntactic_heads.py"


rule probing_summary:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(probing_summary_inputs),
    output:
        **summary_outputs("probing", "probes", "results/probing/{model}/summary/probes", ("table", "figure"), ("figure", "table")),
        **summary_outputs("probing", "heads", "results/probing/{model}/summary/syntactic_heads"),
        **summary_outputs("probing", "held_out", "results/probing/{model}/summary/syntactic_heads_held_out"),
    params:
        code=script_code("probing_summary"),
        states=lambda wc: probing_states(wc.model),
        head_states=lambda wc: syntactic_head_states(wc.model),
        # what the caption says the probes were trained and scored on
        sample={key: config["probing"][key] for key in ("pooling", "train_sentences", "dev_sentences")},
    log:
        "logs/probing_summary/{model}.log",
    benchmark:
        "results/benchmarks/probing_summary/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/probing_summary.py"


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
