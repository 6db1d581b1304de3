# Resolve every model spec once; downstream jobs read the folder and hashes from the record.


rule check_model:
    # where Snakemake runs, with the network: a cluster's nodes read what it fetched (rules/common.smk)
    localrule: True
    # A Hub model only (folders and packages are checked when the workflow is parsed): fetched once and checked
    # against this config (architecture, tokenizer, label counts, positions, hand-label layers and heads) before
    # resolve_model, and so before any other model job.
    conda:
        "../envs/torch.yaml"
    input:
        hand_labels=lambda wc: label_files(hand_labels(wc.model)),
    output:
        "results/models/{model}/checked.json",
    params:
        code=script_code("check_model"),
        spec=lambda wc: EXPERIMENT.models[wc.model],
        requirements=EXPERIMENT.model_requirements(),
        model_cache=MODEL_CACHE,
    log:
        "logs/check_model/{model}.log",
    benchmark:
        "results/benchmarks/check_model/{model}.tsv"
    priority: 100
    resources:
        **requests("check_model"),
    script:
        "../workflow_scripts/check_model.py"


rule resolve_model:
    # where Snakemake runs, with the network: a cluster's nodes read what it fetched (rules/common.smk)
    localrule: True
    conda:
        "../envs/torch.yaml"
    input:
        unpack(lambda wc: model_files(wc.model)),
    output:
        model="results/models/{model}/resolved.json",
    params:
        code=script_code("resolve_model"),
        spec=lambda wc: EXPERIMENT.models[wc.model],
        model_cache=MODEL_CACHE,
    log:
        "logs/resolve_model/{model}.log",
    benchmark:
        "results/benchmarks/resolve_model/{model}.tsv"
    priority: 100
    resources:
        **requests("resolve_model"),
    script:
        "../workflow_scripts/resolve_model.py"


rule resolve_finetuned:
    # where Snakemake runs, with the network: a cluster's nodes read what it fetched (rules/common.smk)
    localrule: True
    # An already fine-tuned classifier given for a task (models[].finetuned): fetched, checked against the task's
    # labels and the pre-trained encoder beside it, before its evaluation (rule evaluate_finetuned) and any analysis.
    conda:
        "../envs/torch.yaml"
    input:
        unpack(lambda wc: given_files(wc.model, wc.task, wc.seed)),
        encoder="results/models/{model}/resolved.json",
    output:
        "results/models/{model}/finetuned/{task}/seed{seed}/resolved.json",
    params:
        code=script_code("resolve_finetuned"),
        spec=lambda wc: EXPERIMENT.given_runs()[(wc.model, wc.task, int(wc.seed))],
        task=EXPERIMENT.task_meaning,
        max_lengths=lambda wc: {"max_length": EXPERIMENT.max_length(wc.task, states.FINETUNED)},
        model_cache=MODEL_CACHE,
    log:
        "logs/resolve_finetuned/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/resolve_finetuned/{model}/{task}/seed{seed}.tsv"
    priority: 100
    resources:
        **requests("resolve_finetuned"),
    script:
        "../workflow_scripts/resolve_finetuned.py"
