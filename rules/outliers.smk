# Outlier LayerNorm dimensions (Kovaleva et al. 2021, "BERT Busters"): found in the pre-trained encoder and every
# fine-tuned model of outliers.tasks by the paper's criterion, and disabled through the attention engine against as
# many random dimensions, per seed and across seeds.


rule outlier_dimensions:
    conda:
        "../envs/torch.yaml"
    input:
        resolved="results/models/{model}/resolved.json",
        models=lambda wc: EXPERIMENT.outliers.models(jobs(), wc.model),
    output:
        parameters="results/outliers/{model}/parameters.parquet",
        dimensions="results/outliers/{model}/dimensions.parquet",
    params:
        code=script_code("outlier_dimensions"),
        runs=lambda wc: jobs().of(wc.model).outliers,
        criterion={key: config["outliers"][key] for key in ("sigmas", "min_layer_share")},
    resources:
        **requests("outlier_dimensions"),
    log:
        "logs/outlier_dimensions/{model}.log",
    benchmark:
        "results/benchmarks/outlier_dimensions/{model}.tsv"
    script:
        "../workflow_scripts/outlier_dimensions.py"


rule outlier_disabling:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("outlier_disabling")),
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, states.FINETUNED, wc.seed)}/model",
        data="results/data/{task}/dev.parquet",
    output:
        predictions="results/outliers/{model}/{task}/seed{seed}/disabling.parquet",
        record="results/outliers/{model}/{task}/seed{seed}/disabling.json",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("outlier_disabling"),
        criterion={key: config["outliers"][key] for key in ("sigmas", "min_layer_share")},
        draws=config["outliers"]["random_draws"],
        random_seed=config["outliers"]["random_seed"],
        max_examples=config["outliers"]["max_examples"],
        subsample_seed=config["data"]["subsample_seed"],
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.FINETUNED),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/outlier_disabling/{model}/{task}/seed{seed}",
    threads: config["outliers"]["threads"]
    group: submission_group("outlier_disabling")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("outlier_disabling"),
        cpus_per_task=config["outliers"]["threads"],
        **model_device("outlier_disabling"),
        rows_per_pass=config["disabling"]["rows_per_pass"],  # speed and memory only
        # how often a killed or timed-out job's finished groups are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
    log:
        "logs/outlier_disabling/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/outlier_disabling/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/outlier_disabling.py"


rule outlier_stats:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: EXPERIMENT.outliers.disabling_files(jobs(), wc.model, wc.task),
    output:
        deltas="results/outliers/{model}/{task}/deltas.parquet",
        contrast="results/outliers/{model}/{task}/contrast.parquet",
    params:
        task=EXPERIMENT.task_meaning,
        code=script_code("outlier_stats"),
        seeds=lambda wc: jobs().of(wc.model).outlier_seeds(wc.task),
        resamples=config["outliers"]["resamples"],
        level=config["outliers"]["level"],
        bootstrap_seed=config["outliers"]["bootstrap_seed"],
    resources:
        **requests("outlier_stats"),
    log:
        "logs/outlier_stats/{model}/{task}.log",
    benchmark:
        "results/benchmarks/outlier_stats/{model}/{task}.tsv"
    script:
        "../workflow_scripts/outlier_stats.py"


rule outliers_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.outliers.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("outliers", "results/outliers/{model}/summary/dimensions"),
        **summary_outputs("outliers", "results/outliers/{model}/summary/contrast"),
        **summary_outputs("outliers", "results/outliers/{model}/summary/deltas"),
    params:
        code=script_code("outliers_summary"),
        tasks=lambda wc: jobs().of(wc.model).outlier_tasks,
        task_meanings=EXPERIMENT.task_meanings(),
        fitness_runs=lambda wc: jobs().of(wc.model).outlier_seeds_by_task,
        criterion={key: config["outliers"][key] for key in ("sigmas", "min_layer_share")},
        level=config["outliers"]["level"],
        examples=config["outliers"]["max_examples"],
    log:
        "logs/outliers_summary/{model}.log",
    benchmark:
        "results/benchmarks/outliers_summary/{model}.tsv"
    resources:
        **requests("outliers_summary"),
    script:
        "../workflow_scripts/outliers_summary.py"
