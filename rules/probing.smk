# Layer-wise probes with control tasks (Tenney et al. 2019; Liu et al. 2019; Hewitt & Liang 2019) and
# syntactic heads (Clark et al. 2019) on the Universal Dependencies treebank, per model state.


rule probe_features:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.probing.encoder_inputs(wc.model, wc.probed)),
        train="results/treebank/train.parquet",
        dev="results/treebank/dev.parquet",
    output:
        "results/probing/{model}/{probed}/features.safetensors",
    params:
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("probe_features"),
        sample=EXPERIMENT.probing.sample(),
        pooling=config["probing"]["pooling"],
        max_length=config["probing"]["max_length"],
        batch_size=config["probing"]["batch_size"],
        random_seed=config["probing"]["random_seed"],
    threads: config["probing"]["threads"]
    resources:
        **requests("probe_features"),
        cpus_per_task=config["probing"]["threads"],
        **model_device("probe_features"),
    log:
        "logs/probe_features/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/probe_features/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/probe_features.py"


rule probe_layers:
    conda:
        "../envs/torch.yaml"
    input:
        features="results/probing/{model}/{probed}/features.safetensors",
        resolved="results/models/{model}/resolved.json",
        train="results/treebank/train.parquet",
        dev="results/treebank/dev.parquet",
    output:
        probes="results/probing/{model}/{probed}/probes.parquet",
        # per dev word and layer, right or wrong: what the claims table resamples
        words="results/probing/{model}/{probed}/probe_words.parquet",
    params:
        code=script_code("probe_layers"),
        sample=EXPERIMENT.probing.sample(),
        labels=config["probing"]["labels"],
        min_label_count=config["probing"]["min_label_count"],
        probe=config["probing"]["probe"],
        control_seed=config["probing"]["control_seed"],
        reference_regularisation=lambda wc: EXPERIMENT.probing.reference_regularisation(wc.probed),
        reference_sentences=lambda wc: EXPERIMENT.probing.reference_sentences(wc.probed),
        # not a declared output: Snakemake deletes the outputs of a failed job, and this must survive it
        checkpoint_dir="results/checkpoints/probe_layers/{model}/{probed}",
    threads: config["probing"]["threads"]
    resources:
        **requests("probe_layers"),
        cpus_per_task=config["probing"]["threads"],
        # how often a killed or timed-out job's finished probes are saved (finetune.checkpoint_minutes)
        checkpoint_seconds=EXPERIMENT.finetune.runtime()["checkpoint_seconds"],
    log:
        "logs/probe_layers/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/probe_layers/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/probe_layers.py"


rule syntactic_heads:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.probing.encoder_inputs(wc.model, wc.probed)),
        treebank=lambda wc: f"results/treebank/{config['probing']['syntactic_heads']['split']}.parquet",
    output:
        per_head="results/probing/{model}/{probed}/head_relations.parquet",
        best="results/probing/{model}/{probed}/syntactic_heads.parquet",
        # chosen on half the sentences, reported on the other half
        held_out="results/probing/{model}/{probed}/syntactic_heads_held_out.parquet",
        # Voita et al.'s token-level accuracy per relation and direction, with its own offset baseline (head roles)
        voita="results/probing/{model}/{probed}/syntactic_heads_voita.parquet",
    params:
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("syntactic_heads"),
        settings=config["probing"]["syntactic_heads"],
        max_length=config["probing"]["max_length"],
        seed=config["probing"]["sample_seed"],
    threads: config["probing"]["threads"]
    resources:
        **requests("syntactic_heads"),
        cpus_per_task=config["probing"]["threads"],
        **model_device("syntactic_heads"),
    log:
        "logs/syntactic_heads/{model}/{probed}.log",
    benchmark:
        "results/benchmarks/syntactic_heads/{model}/{probed}.tsv"
    script:
        "../workflow_scripts/syntactic_heads.py"


rule probing_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.probing.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("probing", "results/probing/{model}/summary/probes"),
        **summary_outputs("probing", "results/probing/{model}/summary/syntactic_heads"),
        **summary_outputs("probing", "results/probing/{model}/summary/syntactic_heads_held_out"),
    params:
        code=script_code("probing_summary"),
        states=lambda wc: jobs().of(wc.model).probed,
        head_states=lambda wc: jobs().of(wc.model).syntactic_heads,
        # what the caption says the probes were trained and scored on
        sample={key: config["probing"][key] for key in ("pooling", "train_sentences", "dev_sentences")},
    log:
        "logs/probing_summary/{model}.log",
    benchmark:
        "results/benchmarks/probing_summary/{model}.tsv"
    resources:
        **requests("probing_summary"),
    script:
        "../workflow_scripts/probing_summary.py"
