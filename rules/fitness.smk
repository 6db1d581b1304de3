# Is each fine-tuned model fit for analysis? (bertology_core/fitness/verdict_stats.py) Its dev metric against the task's
# trivial predictor, with a paired bootstrap interval; fitness.if_unfit decides what the analyses do with an
# unfit model fine-tuned from the pre-trained encoder.


rule model_fitness:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        # a token task's trivial tagger learns from the prepared training split, and tags the dev split's words
        unpack(EXPERIMENT.fitness.trivial_inputs),
        evaluation="results/finetune/{model}/{task}/{state}/seed{seed}/evaluation.json",
        predictions="results/finetune/{model}/{task}/{state}/seed{seed}/predictions.parquet",
    output:
        metrics="results/finetune/{model}/{task}/{state}/seed{seed}/metrics.json",
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        task=EXPERIMENT.task_meaning,
        code=script_code("model_fitness"),
        settings=lambda wc: EXPERIMENT.fitness.task_settings(wc.task),
    log:
        "logs/model_fitness/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/model_fitness/{model}/{task}/{state}/seed{seed}.tsv"
    resources:
        **requests("model_fitness"),
    script:
        "../workflow_scripts/model_fitness.py"


# One checkpoint for every model and run: under skip and fail the analyses of fine-tuned models wait for it,
# and the DAG is re-evaluated with the verdicts (one checkpoint, so the fine-tuning jobs still run side by side).
checkpoint fitness_table:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        EXPERIMENT.fitness.inputs(),
    output:
        multiext(FITNESS_TABLE, *TABLE_FILES),
    params:
        code=script_code("fitness_table"),
        unfit=config["fitness"]["if_unfit"],
        stem=lambda wc, output: output[0].removesuffix(TABLE_FILES[0]),
    log:
        "logs/fitness_table.log",
    benchmark:
        "results/benchmarks/fitness_table.tsv"
    resources:
        **requests("fitness_table"),
    script:
        "../workflow_scripts/fitness_table.py"
