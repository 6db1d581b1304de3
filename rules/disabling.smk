# Head and layer disabling (Kovaleva et al. 2019, section 4.6): sweeps of every single head and whole
# layer of each fine-tuned model, paired-bootstrap statistics over dev examples and seeds, split-half
# selection and a greedy multi-head search.


rule disabling_sweep:
    conda:
        "../envs/torch.yaml"
    input:
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, wc.state, wc.seed)}/model",
        data="results/data/{task}/dev.parquet",
    output:
        sweep="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.parquet",
        summary="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.json",
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("disabling_sweep"),
        modes=config["disabling"]["modes"],
        layers=config["disabling"]["layers"],
        max_examples=lambda wc: EXPERIMENT.disabling.setting(wc.task, "max_examples"),
        subsample_seed=config["data"]["subsample_seed"],
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, wc.state),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/disabling_sweep/{model}/{task}/{state}/seed{seed}",
    threads: config["disabling"]["threads"]
    priority: 10  # long, and the statistics wait for every seed's sweep
    resources:
        **requests("disabling_sweep"),
        cpus_per_task=config["disabling"]["threads"],
        **model_device("disabling_sweep"),
        rows_per_pass=config["disabling"]["rows_per_pass"],  # speed and memory only
        # how often a killed or timed-out job's finished groups are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
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
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, wc.state, wc.seed)}/model",
        data="results/data/{task}/dev.parquet",
        sweep="results/disabling/{model}/{task}/{state}/seed{seed}/sweep.parquet",
    output:
        table=multiext("results/disabling/{model}/{task}/{state}/seed{seed}/greedy", *TABLE_FILES),
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("disabling_greedy"),
        mode=config["disabling"]["modes"][0],
        max_steps=lambda wc: EXPERIMENT.disabling.setting(wc.task, "greedy_steps"),
        split_seed=config["disabling"]["split_seed"],
        resamples=config["disabling"]["resamples"],
        level=config["disabling"]["level"],
        bootstrap_seed=config["disabling"]["bootstrap_seed"],
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, wc.state),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/disabling_greedy/{model}/{task}/{state}/seed{seed}",
    threads: config["disabling"]["threads"]
    resources:
        **requests("disabling_greedy"),
        cpus_per_task=config["disabling"]["threads"],
        **model_device("disabling_greedy"),
        rows_per_pass=config["disabling"]["rows_per_pass"],  # speed and memory only
        # how often a killed or timed-out job's finished steps are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
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
        lambda wc: EXPERIMENT.disabling.sweep_files(jobs(), wc.model, wc.task, wc.state),
    output:
        deltas="results/disabling/{model}/{task}/{state}/deltas.parquet",
        selection="results/disabling/{model}/{task}/{state}/selection.parquet",
    params:
        task=EXPERIMENT.task_meaning,
        code=script_code("disabling_stats"),
        seeds=lambda wc: jobs().of(wc.model).swept_seeds(wc.task, wc.state),
        resamples=config["disabling"]["resamples"],
        level=config["disabling"]["level"],
        bootstrap_seed=config["disabling"]["bootstrap_seed"],
        split_seed=config["disabling"]["split_seed"],
    log:
        "logs/disabling_stats/{model}/{task}/{state}.log",
    benchmark:
        "results/benchmarks/disabling_stats/{model}/{task}/{state}.tsv"
    resources:
        **requests("disabling_stats"),
    script:
        "../workflow_scripts/disabling_stats.py"


rule disabling_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.disabling.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("disabling", "results/disabling/{model}/summary/heads"),
        **summary_outputs("disabling", "results/disabling/{model}/summary/layers"),
        **summary_outputs("disabling", "results/disabling/{model}/summary/extremes"),
        **summary_outputs("disabling", "results/disabling/{model}/summary/greedy"),
        **summary_outputs("disabling", "results/disabling/{model}/summary/selection"),
    params:
        code=script_code("disabling_summary"),
        tasks=EXPERIMENT.task_meanings(),
        out="results/disabling/{model}/summary",
        modes=config["disabling"]["modes"],
        level=config["disabling"]["level"],
        extremes=config["disabling"]["extremes"],
        greedy_runs=lambda wc: jobs().of(wc.model).greedy_task_seeds,
        seed_note=lambda wc: EXPERIMENT.disabling.seed_note(jobs(), wc.model),
        fitness_runs=lambda wc: EXPERIMENT.disabling.fitness_runs(jobs(), wc.model),
        example_note=EXPERIMENT.disabling.example_note(),
    log:
        "logs/disabling_summary/{model}.log",
    benchmark:
        "results/benchmarks/disabling_summary/{model}.tsv"
    resources:
        **requests("disabling_summary"),
    script:
        "../workflow_scripts/disabling_summary.py"
