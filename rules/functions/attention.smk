# The attention stage's input functions, report section, targets and checks; its rules are in
# rules/attention.smk (Snakemake's linter asks rules and functions to live in separate files).


def dump_file(path):
    """Attention dumps are temp() unless attention.keep_dumps: deleted once every analysis read them."""
    return path if config["attention"]["keep_dumps"] else temp(path)


def attention_states(model, task):
    """Dumped model states of a task (attention.dumped): ``pretrained`` and ``<state>_seed<seed>`` for its fine-tuned
    encoders (those analysed, see rules/fitness.smk)."""
    dumped = []
    for state in config["attention"]["dumped"]:
        if state == states.PRETRAINED:
            dumped.append(states.PRETRAINED)
        elif state in TRAINED_STATES:
            dumped += [states.seeded(state, seed) for seed in SEEDS if analysed(model, task, state, seed)]
    return dumped


def dumped_fine_tuned(model):
    """(task, seed) of every dumped model fine-tuned from the pre-trained encoder."""
    return [(task, split_state(dumped)[1]) for task in TASKS for dumped in attention_states(model, task)
            if states.dumped_state(dumped) == states.FINETUNED]


def dumped_runs(model):
    """(task, state, seed) of every dumped fine-tuned model (the attention analyses' fine-tuned models)."""
    return [(task, *split_state(dumped)) for task in TASKS for dumped in attention_states(model, task) if dumped != states.PRETRAINED]


def dump_attention_inputs(wildcards):
    """The encoder to dump: the resolved pre-trained folder, or a fine-tuned model folder."""
    inputs = {"resolved": f"results/models/{wildcards.model}/resolved.json", "data": f"results/data/{wildcards.task}/dev.parquet"}
    if wildcards.dumped != states.PRETRAINED:
        state, seed = split_state(wildcards.dumped)
        inputs["model"] = f"{run_dir(wildcards.model, wildcards.task, state, seed)}/model"
    return inputs


def attention_dumps(model):
    return [f"results/attention/{model}/{key}.json" for key in dump_keys(model)]


def dump_keys(model):
    """``<task>/<state>`` of every attention dump of ``model`` (the analyses' unit)."""
    return [f"{task}/{dumped}" for task in TASKS for dumped in attention_states(model, task)]


def dump_inputs(model, key):
    """The two Parquet files of one dump."""
    prefix = f"results/attention/{model}/{key}"
    return [f"{prefix}.attention.parquet", f"{prefix}.tokens.parquet"]


# every dump's summary, and under attention.keep_dumps its Parquet files (else temp()); the pre-trained encoder's
# need no fine-tuned model, so they start before the fitness checkpoint
TARGETS.append(attention_dumps)
TARGETS.append(lambda model: [path for key in dump_keys(model) for path in dump_inputs(model, key)]
               if config["attention"]["keep_dumps"] else [])


EARLY_TARGETS.append(
    lambda model: [f"results/attention/{model}/{task}/{states.PRETRAINED}.json" for task in TASKS]
    if states.PRETRAINED in config["attention"]["dumped"] else []
)
