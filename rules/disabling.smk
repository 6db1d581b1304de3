# Head and layer disabling (Kovaleva et al. 2019, section 4.6): sweeps of every single head and whole
# layer of each fine-tuned model, paired-bootstrap statistics over dev examples and seeds, split-half
# selection and a greedy multi-head search.


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


rule disabling_sweep:
    conda:
        "../envs/torch.yaml"
    input:
        model=lambda wc: f"{run_dir(wc.model, wc.task, wc.state, wc.seed)}/model",
        data="results/data/{task}/dev.parquet",
    output:
        sweep="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.parquet",
        summary="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.json",
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        code=script_code("disabling_sweep"),
        modes=config["disabling"]["modes"],
        layers=config["disabling"]["layers"],
        max_examples=lambda wc: disabling_setting(wc.task, "max_examples"),
        subsample_seed=config["data"]["subsample_seed"],
        max_length=lambda wc: hyperparameters(wc.task, wc.state)["max_length"],
    threads: config["disabling"]["threads"]
    priority: 10  # long, and the statistics wait for every seed's sweep
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(120),
        cpus_per_task=config["disabling"]["threads"],
        gpu=MODEL_JOB_GPUS,
        rows_per_pass=config["disabling"]["rows_per_pass"],  # speed and memory only
    log:
        "logs/disabling_sweep/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/disabling_sweep/{model}/{task}/{state}/seed{seed}.tsv"
    script:
        "../workflow_scripts/disabling_sweep.py"


rule disabling_greedy:
    conda:
        "../envs/torch.yaml"
    input:
        model=lambda wc: f"{run_dir(wc.model, wc.task, wc.state, wc.seed)}/model",
        data="results/data/{task}/dev.parquet",
        sweep="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.parquet",
    output:
        table=multiext("results/disabling/{model}/{task}/{state}/seed{seed}/greedy", ".parquet", ".csv", ".md"),
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        code=script_code("disabling_greedy"),
        mode=config["disabling"]["modes"][0],
        max_steps=lambda wc: disabling_setting(wc.task, "greedy_steps"),
        split_seed=config["disabling"]["split_seed"],
        resamples=config["disabling"]["resamples"],
        level=config["disabling"]["level"],
        bootstrap_seed=config["disabling"]["bootstrap_seed"],
        max_length=lambda wc: hyperparameters(wc.task, wc.state)["max_length"],
    threads: config["disabling"]["threads"]
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(120),
        cpus_per_task=config["disabling"]["threads"],
        gpu=MODEL_JOB_GPUS,
        rows_per_pass=config["disabling"]["rows_per_pass"],  # speed and memory only
    log:
        "logs/disabling_greedy/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/disabling_greedy/{model}/{task}/{state}/seed{seed}.tsv"
    script:
        "../workflow_scripts/disabling_greedy.py"


rule disabling_stats:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: [f"{disabling_dir(wc.model, wc.task, wc.state, seed)}/sweep.parquet" for seed in swept_seeds(wc.model, wc.task, wc.state)],
    output:
        deltas="results/disabling/{model}/{task}/{state}/deltas.parquet",
        selection="results/disabling/{model}/{task}/{state}/selection.parquet",
    params:
        code=script_code("disabling_stats"),
        seeds=lambda wc: swept_seeds(wc.model, wc.task, wc.state),
        resamples=config["disabling"]["resamples"],
        level=config["disabling"]["level"],
        bootstrap_seed=config["disabling"]["bootstrap_seed"],
        split_seed=config["disabling"]["split_seed"],
    log:
        "logs/disabling_stats/{model}/{task}/{state}.log",
    benchmark:
        "results/benchmarks/disabling_stats/{model}/{task}/{state}.tsv"
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(30),
    script:
        "../workflow_scripts/disabling_stats.py"


rule disabling_summary:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(disabling_summary_inputs),
    output:
        **summary_outputs("disabling", "heads", "results/disabling/{model}/summary/heads", ("table", "figure"), ("figure",)),
        **summary_outputs("disabling", "layers", "results/disabling/{model}/summary/layers", ("table", "figure"), ("figure",)),
        **summary_outputs("disabling", "extremes", "results/disabling/{model}/summary/extremes"),
        **summary_outputs("disabling", "greedy", "results/disabling/{model}/summary/greedy"),
        **summary_outputs("disabling", "selection", "results/disabling/{model}/summary/selection", shown=()),
    params:
        code=script_code("disabling_summary"),
        out="results/disabling/{model}/summary",
        modes=config["disabling"]["modes"],
        level=config["disabling"]["level"],
        extremes=config["disabling"]["extremes"],
        greedy_runs=lambda wc: [(t, s) for t, _, s in greedy_runs(wc.model)],
        seed_note=lambda wc: ", ".join(f"{t} {len(swept_seeds(wc.model, t, i))}" for t, i in disabling_task_states(wc.model)),
        fitness_runs=lambda wc: {t: swept_seeds(wc.model, t, states.FINETUNED) for t in TASKS},
        example_note=lambda wc: ", ".join(f"{t} {disabling_setting(t, 'max_examples') or 'all'}" for t in TASKS),
    log:
        "logs/disabling_summary/{model}.log",
    benchmark:
        "results/benchmarks/disabling_summary/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/disabling_summary.py"


declare_section("disabling", runs=lambda model: bool(disabling_runs(model)), shows=disabling_runs,
                analyses_fine_tuned=lambda model: bool(disabling_runs(model)))
