# Change of self-attention after fine-tuning (Kovaleva et al. 2019, section 4.3): per head, the
# cosine between the pre-trained and the fine-tuned model's maps of the same dev examples.


rule attention_change:
    conda:
        "../envs/torch.yaml"
    input:
        before=lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{states.PRETRAINED}"),
        after=lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{states.seeded(states.FINETUNED, wc.seed)}"),
    output:
        heads="results/attention_change/{model}/{task}/seed{seed}.parquet",
        # per example, layer and head: what the claims table resamples
        examples="results/attention_change/{model}/{task}/seed{seed}.examples.parquet",
    params:
        code=script_code("attention_change"),
        before=f"results/attention/{{model}}/{{task}}/{states.PRETRAINED}",
        after=f"results/attention/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}",
    log:
        "logs/attention_change/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/attention_change/{model}/{task}/seed{seed}.tsv"
    resources:
        **requests("attention_change"),
    script:
        "../workflow_scripts/attention_change.py"


rule attention_change_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.attention_change.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("attention_change", "results/attention_change/{model}/summary/cosine"),
        **summary_outputs("attention_change", "results/attention_change/{model}/summary/cosine_by_layer"),
    params:
        code=script_code("attention_change_summary"),
        task_seeds=lambda wc: jobs().of(wc.model).attention_change,
        out="results/attention_change/{model}/summary",
        examples=config["attention"]["max_examples"],
    log:
        "logs/attention_change_summary/{model}.log",
    benchmark:
        "results/benchmarks/attention_change_summary/{model}.tsv"
    resources:
        **requests("attention_change_summary"),
    script:
        "../workflow_scripts/attention_change_summary.py"
