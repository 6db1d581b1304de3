# Change of self-attention after fine-tuning (Kovaleva et al. 2019, section 4.3): per head, the
# cosine between the pre-trained and the fine-tuned model's maps of the same dev examples.


include: "functions/attention_change.smk"


rule attention_change:
    conda:
        "../envs/torch.yaml"
    input:
        before=lambda wc: dump_inputs(wc.model, f"{wc.task}/{states.PRETRAINED}"),
        after=lambda wc: dump_inputs(wc.model, f"{wc.task}/{states.seeded(states.FINETUNED, wc.seed)}"),
    output:
        heads="results/attention_change/{model}/{task}/seed{seed}.parquet",
        # per example, layer and head: what the claims table resamples
        examples="results/attention_change/{model}/{task}/seed{seed}.examples.parquet",
    params:
        code=script_code("attention_change"),
        before=f"results/attention/{{model}}/{{task}}/{states.PRETRAINED}",
        after=f"results/attention/{{model}}/{{task}}/{states.FINETUNED}_seed{{seed}}",
    log:
        "logs/attention_change/{model}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/attention_change/{model}/{task}/seed{seed}.tsv"
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(30),
    script:
        "../workflow_scripts/attention_change.py"


rule attention_change_summary:
    conda:
        "../envs/tables.yaml"
    input:
        changes=lambda wc: [f"results/attention_change/{wc.model}/{task}/seed{seed}.parquet" for task, seed in attention_change_runs(wc.model)],
        fitness=fitness_inputs(),
    output:
        **summary_outputs("change", "cosine", "results/attention_change/{model}/summary/cosine", ("table", "figure"), ("figure",)),
        **summary_outputs("change", "layers", "results/attention_change/{model}/summary/cosine_by_layer", shown=()),
    params:
        code=script_code("attention_change_summary"),
        task_seeds=lambda wc: attention_change_runs(wc.model),
        out="results/attention_change/{model}/summary",
        examples=config["attention"]["max_examples"],
    log:
        "logs/attention_change_summary/{model}.log",
    benchmark:
        "results/benchmarks/attention_change_summary/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/attention_change_summary.py"
