# Attention to linguistic features and token-to-token attention (Kovaleva et al. 2019, sections 4.4-4.5).


rule spacy_tokens:
    conda:
        "../envs/torch.yaml"
    input:
        "results/data/{task}/dev.parquet",
    output:
        "results/linguistic/spacy/{task}.parquet",
    params:
        code=script_code("spacy_tokens"),
        model=EXPERIMENT.linguistic.spacy_model,
    log:
        "logs/spacy_tokens/{task}.log",
    benchmark:
        "results/benchmarks/spacy_tokens/{task}.tsv"
    resources:
        **requests("spacy_tokens"),
    script:
        "../workflow_scripts/spacy_tokens.py"


rule linguistic_scores:
    conda:
        "../envs/torch.yaml"
    input:
        dump=lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{wc.dumped}"),
        data="results/data/{task}/dev.parquet",
        spacy="results/linguistic/spacy/{task}.parquet",
        resolved="results/models/{model}/resolved.json",
    output:
        multiext("results/linguistic/{model}/{task}/{dumped}.", "features.parquet", "relations.parquet", "cls_shares.parquet", "cls_max.parquet"),
    params:
        code=script_code("linguistic_scores"),
        dump_prefix="results/attention/{model}/{task}/{dumped}",
        directions=[list(d) for d in config["linguistic"]["directions"]],
    log:
        "logs/linguistic_scores/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/linguistic_scores/{model}/{task}/{dumped}.tsv"
    resources:
        **requests("linguistic_scores"),
    script:
        "../workflow_scripts/linguistic_scores.py"


rule linguistic_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.linguistic.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("linguistic", "results/linguistic/{model}/summary/features"),
        **summary_outputs("linguistic", "results/linguistic/{model}/summary/relations"),
        **summary_outputs("linguistic", "results/linguistic/{model}/summary/cls"),
    params:
        code=script_code("linguistic_summary"),
        dump_keys=lambda wc: jobs().of(wc.model).linguistic_keys,
        left_out=EXPERIMENT.linguistic.left_out(),
        fine_tuned=lambda wc: jobs().of(wc.model).dumped_fine_tuned,
        out="results/linguistic/{model}/summary",
        examples=config["attention"]["max_examples"],
    log:
        "logs/linguistic_summary/{model}.log",
    benchmark:
        "results/benchmarks/linguistic_summary/{model}.tsv"
    resources:
        **requests("linguistic_summary"),
    script:
        "../workflow_scripts/linguistic_summary.py"
