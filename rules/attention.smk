# Attention dumps per (model, task, model state): the input of every attention analysis.


def dump_file(path):
    """Attention dumps are temp() unless attention.keep_dumps: deleted once every analysis read them."""
    return path if config["attention"]["keep_dumps"] else temp(path)


def attention_states(model, task):
    """Dumped model states of a task: ``untuned`` and ``<init>_seed<seed>`` for its fine-tuned encoders
    (those analysed, see rules/fitness.smk)."""
    states = []
    for init in config["attention"]["states"]:
        if init == "untuned":
            states.append("untuned")
        elif init in TRAINED_INITS:
            states += [f"{init}_seed{seed}" for seed in SEEDS if analysed(model, task, init, seed)]
    return states


def state_init(state):
    return "untuned" if state == "untuned" else split_state(state)[0]


def dumped_fine_tuned(model):
    """(task, seed) of every dumped model fine-tuned from the pre-trained encoder."""
    return [(task, split_state(state)[1]) for task in TASKS for state in attention_states(model, task)
            if state.startswith("pretrained_seed")]


def dumped_runs(model):
    """(task, init, seed) of every dumped fine-tuned model (the attention analyses' fine-tuned models)."""
    return [(task, *split_state(state)) for task in TASKS for state in attention_states(model, task) if state != "untuned"]


def dump_attention_inputs(wildcards):
    """The encoder to dump: the resolved pre-trained folder, or a fine-tuned model folder."""
    inputs = {"resolved": f"results/models/{wildcards.model}/resolved.json", "data": f"results/data/{wildcards.task}/dev.parquet"}
    if wildcards.state != "untuned":
        init, seed = split_state(wildcards.state)
        inputs["model"] = f"{run_dir(wildcards.model, wildcards.task, init, seed)}/model"
    return inputs


def attention_dumps(model):
    return [f"results/attention/{model}/{key}.json" for key in dump_keys(model)]


def dump_keys(model):
    """``<task>/<state>`` of every attention dump of ``model`` (the analyses' unit)."""
    return [f"{task}/{state}" for task in TASKS for state in attention_states(model, task)]


def dump_inputs(model, key):
    """The two Parquet files of one dump."""
    prefix = f"results/attention/{model}/{key}"
    return [f"{prefix}.attention.parquet", f"{prefix}.tokens.parquet"]


# every dump's summary (the Parquet dumps are temp() unless attention.keep_dumps); the pre-trained encoder's need
# no fine-tuned model, so they start before the fitness checkpoint
TARGETS.append(attention_dumps)
EARLY_TARGETS.append(
    lambda model: [f"results/attention/{model}/{task}/untuned.json" for task in TASKS] if "untuned" in config["attention"]["states"] else []
)


rule dump_attention:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(dump_attention_inputs),
    output:
        attention=dump_file("results/attention/{model}/{task}/{state}.attention.parquet"),
        tokens=dump_file("results/attention/{model}/{task}/{state}.tokens.parquet"),
        summary="results/attention/{model}/{task}/{state}.json",
    params:
        code=script_code("dump_attention"),
        max_examples=config["attention"]["max_examples"],
        seed=config["attention"]["seed"],
        batch_size=config["attention"]["batch_size"],
        bits=config["attention"]["bits"],
        # cut inputs as the dumped model was trained
        max_length=lambda wc: hyperparameters(wc.task, state_init(wc.state))["max_length"],
    threads: config["attention"]["threads"]
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(60),
        cpus_per_task=config["attention"]["threads"],
        gpu=MODEL_JOB_GPUS,
    log:
        "logs/dump_attention/{model}/{task}/{state}.log",
    benchmark:
        "results/benchmarks/dump_attention/{model}/{task}/{state}.tsv"
    script:
        "../workflow_scripts/dump_attention.py"
