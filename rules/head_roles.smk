# Head roles (Voita et al. 2019): confidence, positional, rare-token and syntactic heads of every attention dump, how
# they relate to Michel et al.'s importance and to disabling; and Hard Concrete head gates trained with the L0
# penalty on the pruned fine-tuned models, against Michel et al.'s pruning curve of the same model.


rule head_roles:
    conda:
        "../envs/torch.yaml"
    input:
        # what the rare-token role counts the model's word pieces on: head_roles.frequency_corpus where set (an input,
        # so that editing it reruns the roles), else the task's training split
        unpack(EXPERIMENT.head_roles.frequency_inputs),
        dump=lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{wc.dumped}"),
        resolved="results/models/{model}/resolved.json",
    output:
        roles="results/head_roles/{model}/{task}/{dumped}.parquet",
    wildcard_constraints:
        dumped=states.DUMPED_PATTERN,
    params:
        code=script_code("head_roles"),
        dump="results/attention/{model}/{task}/{dumped}",
        # the rare-token role counts only examples whose rarest piece is not among this many most frequent pieces
        rare_top_frequent=config["head_roles"]["rare_top_frequent"],
        # recorded in the roles table, named by the summary's note
        frequency_source=EXPERIMENT.head_roles.frequency_source(),
    log:
        "logs/head_roles/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/head_roles/{model}/{task}/{dumped}.tsv"
    resources:
        **requests("head_roles"),
    script:
        "../workflow_scripts/head_roles.py"


rule head_gates:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("head_gates")),
        model=lambda wc: f"{EXPERIMENT.run_dir(wc.model, wc.task, states.FINETUNED, wc.seed)}/model",
        train="results/data/{task}/train.parquet",
        dev="results/data/{task}/dev.parquet",
        tokens=lambda wc: EXPERIMENT.tokens(wc.model, wc.task, EXPERIMENT.max_length(wc.task, states.FINETUNED)),
        # Michel et al.'s ordering, scored at the gates' number of heads
        importance=f"{PRUNE_DIR}/importance.parquet",
    output:
        record=f"{GATE_DIR}/{{weights}}_strength{{strength}}.json",
        predictions=f"{GATE_DIR}/{{weights}}_strength{{strength}}.predictions.parquet",
    wildcard_constraints:
        weights="trained|frozen",
        strength=r"[0-9.e+-]+",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("head_gates"),
        settings={k: v for k, v in config["head_roles"]["gates"].items() if k not in ("tasks", "seeds", "strengths", "encoder")},
        hyperparameters=lambda wc: EXPERIMENT.hyperparameters(wc.task, states.FINETUNED),
        subsample_seed=config["data"]["subsample_seed"],
        dev_sample=EXPERIMENT.pruning.dev_sample(),
        normalize_by_layer=config["pruning"]["normalize_by_layer"],
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/head_gates/{model}/{task}/seed{seed}/{weights}_strength{strength}",
    priority: 10
    threads: config["head_roles"]["threads"]
    group: submission_group("head_gates")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("head_gates", runtime=False, hyperparameters=lambda wc: EXPERIMENT.hyperparameters(wc.task, states.FINETUNED)),
        runtime=EXPERIMENT.finetune.training_runtime(lambda wc: config["head_roles"]["gates"]["epochs"],
                                      lambda wc: config["head_roles"]["gates"]["train_examples"]),
        cpus_per_task=config["head_roles"]["threads"],
        **model_device("head_gates", lambda wc: EXPERIMENT.hyperparameters(wc.task, states.FINETUNED)),
        **EXPERIMENT.finetune.runtime(),
    log:
        "logs/head_gates/{model}/{task}/seed{seed}/{weights}_strength{strength}.log",
    benchmark:
        "results/benchmarks/head_gates/{model}/{task}/seed{seed}/{weights}_strength{strength}.tsv"
    script:
        "../workflow_scripts/head_gates.py"


rule head_roles_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.head_roles.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("head_roles", "results/head_roles/{model}/summary/roles"),
        **summary_outputs("head_roles", "results/head_roles/{model}/summary/importance_relations"),
        **summary_outputs("head_roles", "results/head_roles/{model}/summary/gates"),
    params:
        code=script_code("head_roles_summary"),
        tasks=EXPERIMENT.task_meanings(),
        runs=lambda wc: EXPERIMENT.head_roles.summary_runs(jobs(), wc.model),
        thresholds=config["head_roles"]["thresholds"],
        syntactic_relations=config["head_roles"]["syntactic_relations"],
        rare_top_frequent=config["head_roles"]["rare_top_frequent"],
        bootstrap={k: config["head_roles"][k] for k in ("resamples", "level", "seed")},
        out="results/head_roles/{model}/summary",
    log:
        "logs/head_roles_summary/{model}.log",
    benchmark:
        "results/benchmarks/head_roles_summary/{model}.tsv"
    resources:
        **requests("head_roles_summary"),
    script:
        "../workflow_scripts/head_roles_summary.py"
