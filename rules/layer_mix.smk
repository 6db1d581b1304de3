# Where each probing label set's information sits across depth (Tenney et al. 2019): scalar-mix probes over layers
# 0..l for every l (cumulative scoring), on the probing stage's word features, for the probed states.


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
        sample=EXPERIMENT.probing.sample(),
        labels=config["probing"]["labels"],
        min_label_count=config["probing"]["min_label_count"],
        probe=config["layer_mix"]["probe"],
        probe_seeds=config["layer_mix"]["probe_seeds"],
        bootstrap={key: config["layer_mix"][key] for key in ("resamples", "level", "seed")},
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/layer_mix/{model}/{probed}",
    threads: config["layer_mix"]["threads"]
    resources:
        **requests("layer_mix"),
        cpus_per_task=config["layer_mix"]["threads"],
        # how often a killed or timed-out job's finished probes are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
    log:
        "logs/layer_mix/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/layer_mix/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/layer_mix.py"


rule layer_mix_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.layer_mix.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("layer_mix", "results/layer_mix/{model}/summary/expected_layers"),
        **summary_outputs("layer_mix", "results/layer_mix/{model}/summary/cumulative"),
    params:
        code=script_code("layer_mix_summary"),
        states=lambda wc: jobs().of(wc.model).layer_mix,
        sample={key: config["probing"][key] for key in ("pooling", "train_sentences", "dev_sentences")},
        level=config["layer_mix"]["level"],
    log:
        "logs/layer_mix_summary/{model}.log",
    benchmark:
        "results/benchmarks/layer_mix_summary/{model}.tsv"
    resources:
        **requests("layer_mix_summary"),
    script:
        "../workflow_scripts/layer_mix_summary.py"
