# Fine-tuning (states finetuned and scratch) and the pre-trained encoder's evaluation (state pretrained), per (model,
# task, state, seed).


rule finetune:
    conda:
        "../envs/torch.yaml"
    input:
        resolved="results/models/{model}/resolved.json",
        train="results/data/{task}/train.parquet",
        eval=lambda wc: EXPERIMENT.eval_inputs(wc.task),
        tokens=lambda wc: EXPERIMENT.tokens(wc.model, wc.task, EXPERIMENT.max_length(wc.task, wc.state)),
    output:
        model=directory("results/finetune/{model}/{task}/{state}/seed{seed}/model"),
        # the run's record; metrics.json adds the fitness verdict to it (rule model_fitness)
        evaluation="results/finetune/{model}/{task}/{state}/seed{seed}/evaluation.json",
        predictions="results/finetune/{model}/{task}/{state}/seed{seed}/predictions.parquet",
    wildcard_constraints:
        state="|".join(states.TRAINED),
        # not the runs a given classifier fills (rule evaluate_finetuned)
        model=NOT_GIVEN,
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        compile=config["compute"]["compile"],
        code=script_code("finetune"),
        hyperparameters=lambda wc: EXPERIMENT.hyperparameters(wc.task, wc.state),
        eval_splits=lambda wc: EXPERIMENT.eval_splits(wc.task),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/finetune/{model}/{task}/{state}/seed{seed}",
    threads: config["finetune"]["threads"]
    # the longest jobs, and nearly everything waits for them: start them first so the last ones do not
    # run alone at the end of a run
    priority: 20
    resources:
        **requests("finetune", runtime=False, hyperparameters=lambda wc: EXPERIMENT.hyperparameters(wc.task, wc.state)),
        runtime=EXPERIMENT.finetune.training_runtime(lambda wc: EXPERIMENT.hyperparameters(wc.task, wc.state)["epochs"]),
        cpus_per_task=config["finetune"]["threads"],
        **model_device("finetune", lambda wc: EXPERIMENT.hyperparameters(wc.task, wc.state)),
        **EXPERIMENT.finetune.runtime(),
    log:
        "logs/finetune/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/finetune/{model}/{task}/{state}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"


rule evaluate_pretrained:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("evaluate_pretrained")),
        resolved="results/models/{model}/resolved.json",
        eval=lambda wc: EXPERIMENT.eval_inputs(wc.task),
        tokens=lambda wc: EXPERIMENT.tokens(wc.model, wc.task, EXPERIMENT.max_length(wc.task, states.PRETRAINED)),
    output:
        metrics=f"results/finetune/{{model}}/{{task}}/{states.PRETRAINED}/seed{{seed}}/metrics.json",
        predictions=f"results/finetune/{{model}}/{{task}}/{states.PRETRAINED}/seed{{seed}}/predictions.parquet",
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("finetune"),
        # no training settings, so changing them never reruns it
        hyperparameters=lambda wc: EXPERIMENT.finetune.evaluation_parameters(wc.task),
        eval_splits=lambda wc: EXPERIMENT.eval_splits(wc.task),
    threads: config["finetune"]["threads"]
    group: submission_group("evaluate_pretrained")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("evaluate_pretrained"),
        cpus_per_task=config["finetune"]["threads"],
        **model_device("evaluate_pretrained"),
        eval_batch_size=config["finetune"]["eval_batch_size"],
    log:
        "logs/evaluate_pretrained/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/evaluate_pretrained/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"


rule evaluate_finetuned:
    # An already fine-tuned classifier given for a task (models[].finetuned): evaluated on dev and saved as the run's
    # model, as the finetune rule would have left it, so that fitness and every analysis read it alike.
    conda:
        "../envs/torch.yaml"
    input:
        given="results/models/{model}/finetuned/{task}/seed{seed}/resolved.json",
        eval=lambda wc: EXPERIMENT.eval_inputs(wc.task),
        tokens=lambda wc: EXPERIMENT.tokens(wc.model, wc.task, EXPERIMENT.max_length(wc.task, states.FINETUNED)),
    output:
        model=directory(f"results/finetune/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}/model"),
        evaluation=f"results/finetune/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}/evaluation.json",
        predictions=f"results/finetune/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}/predictions.parquet",
    wildcard_constraints:
        # only the runs a given classifier fills
        model=GIVEN,
    params:
        task=EXPERIMENT.task_meaning,
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("finetune"),
        # no training settings, so changing them never reruns it
        hyperparameters=lambda wc: EXPERIMENT.finetune.evaluation_parameters(wc.task, states.FINETUNED),
        eval_splits=lambda wc: EXPERIMENT.eval_splits(wc.task),
    threads: config["finetune"]["threads"]
    resources:
        **requests("evaluate_finetuned"),
        cpus_per_task=config["finetune"]["threads"],
        **model_device("evaluate_finetuned"),
        eval_batch_size=config["finetune"]["eval_batch_size"],
    log:
        "logs/evaluate_finetuned/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/evaluate_finetuned/{model}/{task}/seed{seed}.tsv"
    script:
        "../workflow_scripts/finetune.py"
