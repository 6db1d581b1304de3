# Head importance and iterative head pruning (Michel et al. 2019) and lottery tickets (Prasanna et al.
# 2020): magnitude (m) and structured (s) pruning of each fine-tuned model, good/random/bad subnetworks
# re-fine-tuned from the pre-trained weights, survival across seeds and Fleiss' kappa. Each ticket is found
# under a protocol: held_out chooses it on half A of dev and reports on half B; paper (Prasanna et al.'s)
# chooses and reports on dev.


rule head_importance:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("head_importance")),
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, states.FINETUNED, wc.seed)}/model",
        importance=lambda wc: EXPERIMENT.pruning.importance_data(wc.task),
        dev="results/data/{task}/dev.parquet",
    output:
        importance=f"{PRUNE_DIR}/importance.parquet",
        curve=f"{PRUNE_DIR}/michel_curve.parquet",
        # per step and dev example: what the claims table resamples
        predictions=f"{PRUNE_DIR}/michel_predictions.parquet",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("head_importance"),
        importance=EXPERIMENT.pruning.params("michel"),
        step_share=config["pruning"]["michel_step_share"],
        recompute=config["pruning"]["michel_recompute"],
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.FINETUNED),
        dev_sample=EXPERIMENT.pruning.dev_sample(),
    # the long single jobs start beside the sweeps instead of trailing the run alone
    priority: 10
    threads: config["pruning"]["threads"]
    group: submission_group("head_importance")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("head_importance"),
        cpus_per_task=config["pruning"]["threads"],
        **model_device("head_importance"),
        batch_size=config["pruning"]["batch_size"],  # speed and memory only
    log:
        "logs/head_importance/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/head_importance/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/head_importance.py"


rule lottery_pruning:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("lottery_pruning")),
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, states.FINETUNED, wc.seed)}/model",
        importance=lambda wc: EXPERIMENT.pruning.importance_data(wc.task),
        dev="results/data/{task}/dev.parquet",
    output:
        mask=f"{PRUNE_DIR}/{{method}}_{{protocol}}_mask.safetensors",
        curve=f"{PRUNE_DIR}/{{method}}_{{protocol}}_curve.parquet",
        # the chosen iteration and the full model on the report examples (the tables' reference)
        ticket=f"{PRUNE_DIR}/{{method}}_{{protocol}}_ticket.json",
    wildcard_constraints:
        method="m|s",
        protocol="held_out|paper",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("lottery_pruning"),
        selection=lambda wc: EXPERIMENT.pruning.lottery_split(wc.protocol),
        # s-pruning ranks by importance at pruning.ticket_importance_granularity (Prasanna et al.'s batch by default)
        importance=lambda wc: EXPERIMENT.pruning.params("ticket") if wc.method == "s" else None,
        keep=config["pruning"]["keep"],
        keep_above_constant=config["pruning"]["keep_above_constant"],
        method=lambda wc: EXPERIMENT.pruning.lottery_method(wc.method),
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.FINETUNED),
        # a sample of the choosing examples (held_out's half A); the paper's protocol chooses on all of dev
        dev_sample=lambda wc: EXPERIMENT.pruning.dev_sample() if wc.protocol == "held_out" else {"examples": None, "seed": 0},
        batch_size=config["pruning"]["batch_size"],
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/lottery_pruning/{model}/{task}/seed{seed}/{method}_{protocol}",
    priority: 10
    threads: config["pruning"]["threads"]
    group: submission_group("lottery_pruning")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("lottery_pruning"),
        cpus_per_task=config["pruning"]["threads"],
        **model_device("lottery_pruning"),
        # how often a killed or timed-out job's scores and importance are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
    log:
        "logs/lottery_pruning/{model}/{task}/seed{seed}/{method}_{protocol}.log",
    benchmark:
        "results/benchmarks/lottery_pruning/{model}/{task}/seed{seed}/{method}_{protocol}.tsv"
    script:
        "../workflow_scripts/lottery_pruning.py"


rule compact_model:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("compact_model")),
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, states.FINETUNED, wc.seed)}/model",
        mask=f"{PRUNE_DIR}/s_held_out_mask.safetensors",
        dev="results/data/{task}/dev.parquet",
    output:
        model=directory(f"{PRUNE_DIR}/s_compact"),
        summary=f"{PRUNE_DIR}/s_compact.json",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("compact_model"),
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.FINETUNED),
        dev_sample=EXPERIMENT.pruning.dev_sample(),
    threads: config["pruning"]["threads"]
    group: submission_group("compact_model")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("compact_model"),
        cpus_per_task=config["pruning"]["threads"],
        **model_device("compact_model"),
        batch_size=config["pruning"]["batch_size"],  # speed and memory only
    log:
        "logs/compact_model/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/compact_model/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/compact_model.py"


rule subnetwork_finetune:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("subnetwork_finetune")),
        unpack(lambda wc: EXPERIMENT.pruning.subnetwork_inputs(wc.model, wc.task, wc.seed, wc.network)),
    output:
        metrics=f"{PRUNE_DIR}/subnetworks/{{network}}.json",
        predictions=f"{PRUNE_DIR}/subnetworks/{{network}}.predictions.parquet",
    wildcard_constraints:
        network="full|[ms]-(good|random|bad)-(held_out|paper)",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        compile=config["compute"]["compile"],
        code=script_code("subnetwork_finetune"),
        hyperparameters=lambda wc: EXPERIMENT.pruning.subnetwork_recipe(wc.task),
        eval_batch_size=config["finetune"]["eval_batch_size"],
        max_train_examples=config["pruning"]["subnetwork_max_train_examples"],
        subsample_seed=config["data"]["subsample_seed"],
        sample_seed=config["pruning"]["sample_seed"],
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/subnetwork_finetune/{model}/{task}/seed{seed}/{network}",
    # fine-tuning runs, the longest jobs of the stage: start them as soon as their mask exists, not at the end
    priority: 15
    threads: config["finetune"]["threads"]
    group: submission_group("subnetwork_finetune")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("subnetwork_finetune", runtime=False, hyperparameters=lambda wc: EXPERIMENT.pruning.subnetwork_recipe(wc.task)),
        runtime=EXPERIMENT.finetune.training_runtime(lambda wc: EXPERIMENT.pruning.subnetwork_recipe(wc.task)["epochs"],
                                      lambda wc: config["pruning"]["subnetwork_max_train_examples"]),
        cpus_per_task=config["finetune"]["threads"],
        **model_device("subnetwork_finetune", lambda wc: EXPERIMENT.pruning.subnetwork_recipe(wc.task)),
        **EXPERIMENT.finetune.runtime(),
    log:
        "logs/subnetwork_finetune/{model}/{task}/seed{seed}/{network}.log",
    benchmark:
        "results/benchmarks/subnetwork_finetune/{model}/{task}/seed{seed}/{network}.tsv"
    script:
        "../workflow_scripts/subnetwork_finetune.py"


rule pruning_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.pruning.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("pruning", "results/pruning/{model}/summary/importance"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/michel"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/lottery_curves"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/survival"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/lottery"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/lottery_seeds"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/stability"),
        **summary_outputs("pruning", "results/pruning/{model}/summary/compact"),
    params:
        code=script_code("pruning_summary"),
        tasks=EXPERIMENT.task_meanings(),
        runs=lambda wc: jobs().of(wc.model).pruned,
        subnetwork_runs=lambda wc: jobs().of(wc.model).subnetworks,
        methods=config["pruning"]["methods"],
        protocols=EXPERIMENT.pruning.lottery_protocols(),
        networks=EXPERIMENT.pruning.subnetwork_names(),
        keep=config["pruning"]["keep"],
        keep_above_constant=config["pruning"]["keep_above_constant"],
        tolerance=config["pruning"]["michel_tolerance"],
        step_share=config["pruning"]["michel_step_share"],
        recompute=config["pruning"]["michel_recompute"],
        # what the captions say each result was chosen and scored on
        data={key: config["pruning"][key] for key in ("importance_split", "importance_examples", "importance_granularity",
                                                      "ticket_importance_granularity", "dev_examples", "split_seed")},
        bootstrap={k: config["pruning"][f"kappa_{k}"] for k in ("resamples", "level", "seed")},
        recipe_note=lambda wc: EXPERIMENT.pruning.recipe_note(jobs(), wc.model),
    log:
        "logs/pruning_summary/{model}.log",
    benchmark:
        "results/benchmarks/pruning_summary/{model}.tsv"
    resources:
        **requests("pruning_summary"),
    script:
        "../workflow_scripts/pruning_summary.py"
