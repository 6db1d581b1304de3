# Where each probing label set's information sits across depth (Tenney et al. 2019): scalar-mix probes over layers
# 0..l for every l (cumulative scoring), on the probing stage's word features, for the probed states.


include: "functions/layer_mix.smk"


rule layer_mix:
    conda:
        "../envs/torch.yaml"
    input:
        features="results/probing/{model}/{probed}/features.safetensors",
        resolved="results/models/{model}/resolved.json",
        train="results/treebank/train.parquet",
        dev="results/treebank/dev.parquet",
    output:
        cumulative="results/layer_mix/{model}/{probed}/cumulative.parquet",
        summary="results/layer_mix/{model}/{probed}/summary.parquet",
        # per probe seed, dev word and cumulative probe, right or wrong: what paired comparisons between label sets resample
        words="results/layer_mix/{model}/{probed}/words.parquet",
    params:
        code=script_code("layer_mix"),
        sample=probing_sample(),
        labels=config["probing"]["labels"],
        min_label_count=config["probing"]["min_label_count"],
        probe=config["layer_mix"]["probe"],
        probe_seeds=config["layer_mix"]["probe_seeds"],
        bootstrap={key: config["layer_mix"][key] for key in ("resamples", "level", "seed")},
    threads: config["layer_mix"]["threads"]
    resources:
        mem_mb=scaled(6000),
        runtime=scaled(60),
        cpus_per_task=config["layer_mix"]["threads"],
    log:
        "logs/layer_mix/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/layer_mix/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/layer_mix.py"


rule layer_mix_summary:
    conda:
        "../envs/tables.yaml"
    input:
        fitness=fitness_inputs(),
        summaries=lambda wc: [f"results/layer_mix/{wc.model}/{state}/summary.parquet" for state in layer_mix_states(wc.model)],
        cumulative=lambda wc: [f"results/layer_mix/{wc.model}/{state}/cumulative.parquet" for state in layer_mix_states(wc.model)],
    output:
        **summary_outputs("layer_mix", "expected", "results/layer_mix/{model}/summary/expected_layers", ("table", "figure"), ("figure", "table")),
        **summary_outputs("layer_mix", "cumulative", "results/layer_mix/{model}/summary/cumulative", shown=()),
    params:
        code=script_code("layer_mix_summary"),
        states=lambda wc: layer_mix_states(wc.model),
        sample={key: config["probing"][key] for key in ("pooling", "train_sentences", "dev_sentences")},
        level=config["layer_mix"]["level"],
    log:
        "logs/layer_mix_summary/{model}.log",
    benchmark:
        "results/benchmarks/layer_mix_summary/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/layer_mix_summary.py"
