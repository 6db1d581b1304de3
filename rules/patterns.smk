# Self-attention pattern classification (Kovaleva et al. 2019, section 4.1, fig. 1-2):
# per-map features and rule labels -> CNN trained on hand labels (maps of the labelled examples computed for
# them) or rule labels, rule labeller fitted to hand labels -> classes of every map -> shares per task and
# per-head dominant class. Plus the annotation page to make hand labels.


rule pattern_features:
    conda:
        "../envs/torch.yaml"
    input:
        lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{wc.dumped}"),
    output:
        "results/patterns/{model}/{task}/{dumped}.features.parquet",
    params:
        code=script_code("pattern_features"),
        rules=config["patterns"]["rules"],
        dump_prefix="results/attention/{model}/{task}/{dumped}",
    log:
        "logs/pattern_features/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/pattern_features/{model}/{task}/{dumped}.tsv"
    resources:
        **requests("pattern_features"),
    script:
        "../workflow_scripts/pattern_features.py"


rule labelled_maps:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("labelled_maps")),
        unpack(lambda wc: EXPERIMENT.attention.encoder_inputs(wc.model, wc.task, wc.dumped)),
    output:
        attention="results/patterns/{model}/labelled/{task}/{dumped}.attention.parquet",
        tokens="results/patterns/{model}/labelled/{task}/{dumped}.tokens.parquet",
        summary="results/patterns/{model}/labelled/{task}/{dumped}.json",
    params:
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("labelled_maps"),
        only_idx=lambda wc: EXPERIMENT.patterns.hand_label_set(jobs(), wc.model, hand_labels(wc.model))["idx"][f"{wc.task}/{wc.dumped}"],
        batch_size=config["attention"]["batch_size"],
        bits=config["attention"]["bits"],
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.dumped_state(wc.dumped)),
    threads: config["attention"]["threads"]
    group: submission_group("labelled_maps")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("labelled_maps"),
        cpus_per_task=config["attention"]["threads"],
        **model_device("labelled_maps"),
    log:
        "logs/labelled_maps/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/labelled_maps/{model}/{task}/{dumped}.tsv"
    script:
        "../workflow_scripts/labelled_maps.py"


rule pattern_classifier:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.patterns.classifier_inputs(jobs(), wc.model, hand_labels(wc.model))),
    output:
        weights="results/patterns/{model}/classifier/model.safetensors",
        report="results/patterns/{model}/classifier/report.json",
        training_maps="results/patterns/{model}/classifier/training_maps.parquet",
    params:
        code=script_code("pattern_classifier"),
        dump_keys=lambda wc: jobs().of(wc.model).dump_keys,
        dump_prefixes=lambda wc: EXPERIMENT.attention.dump_prefixes(jobs(), wc.model),
        labelled_keys=lambda wc: list(EXPERIMENT.patterns.labelled_dumps(jobs(), wc.model, hand_labels(wc.model))),
        recipe_keys=lambda wc: EXPERIMENT.patterns.labelled_recipe_keys(jobs(), wc.model, hand_labels(wc.model)),
        labelled_prefixes=lambda wc: list(EXPERIMENT.patterns.labelled_dumps(jobs(), wc.model, hand_labels(wc.model)).values()),
        rules=config["patterns"]["rules"],
        validation_share=config["patterns"]["validation_share"],
        min_class_labels=config["patterns"]["min_class_labels"],
        train_maps=config["patterns"]["train_maps"],
        image_size=config["patterns"]["image_size"],
        cv_folds=config["patterns"]["cv_folds"],
        epochs=config["patterns"]["epochs"],
        ensemble=config["patterns"]["ensemble"],
        seed=config["patterns"]["seed"],
    threads: 1
    log:
        "logs/pattern_classifier/{model}.log",
    benchmark:
        "results/benchmarks/pattern_classifier/{model}.tsv"
    resources:
        **requests("pattern_classifier"),
    script:
        "../workflow_scripts/pattern_classifier.py"


rule classify_maps:
    conda:
        "../envs/torch.yaml"
    input:
        weights="results/patterns/{model}/classifier/model.safetensors",
        features="results/patterns/{model}/{task}/{dumped}.features.parquet",
        dump=lambda wc: EXPERIMENT.attention.dump_files(wc.model, f"{wc.task}/{wc.dumped}"),
    output:
        "results/patterns/{model}/{task}/{dumped}.classes.parquet",
    params:
        code=script_code("classify_maps"),
        dump_prefix="results/attention/{model}/{task}/{dumped}",
    threads: 1
    log:
        "logs/classify_maps/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/classify_maps/{model}/{task}/{dumped}.tsv"
    resources:
        **requests("classify_maps"),
        batch_size=config["patterns"]["classify_batch_size"],  # speed and memory only
    script:
        "../workflow_scripts/classify_maps.py"


rule pattern_summary:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.patterns.summary_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("patterns", "results/patterns/{model}/summary/classifier"),
        **summary_outputs("patterns", "results/patterns/{model}/summary/shares"),
        **summary_outputs("patterns", "results/patterns/{model}/summary/heads"),
        **summary_outputs("patterns", "results/patterns/{model}/summary/confusion"),
    params:
        code=script_code("pattern_summary"),
        dump_keys=lambda wc: jobs().of(wc.model).dump_keys,
        out="results/patterns/{model}/summary",
        examples=config["attention"]["max_examples"],
    log:
        "logs/pattern_summary/{model}.log",
    benchmark:
        "results/benchmarks/pattern_summary/{model}.tsv"
    resources:
        **requests("pattern_summary"),
    script:
        "../workflow_scripts/pattern_summary.py"


rule annotation_page:
    conda:
        "../envs/torch.yaml"
    input:
        lambda wc: EXPERIMENT.attention.every_dump_file(jobs(), wc.model),
    output:
        "results/patterns/{model}/annotate.html",
    params:
        code=script_code("annotation_page"),
        dump_keys=lambda wc: jobs().of(wc.model).dump_keys,
        dump_prefixes=lambda wc: EXPERIMENT.attention.dump_prefixes(jobs(), wc.model),
        maps=config["patterns"]["annotation_maps"],
        seed=config["patterns"]["seed"],
    log:
        "logs/annotation_page/{model}.log",
    benchmark:
        "results/benchmarks/annotation_page/{model}.tsv"
    resources:
        **requests("annotation_page"),
    script:
        "../workflow_scripts/annotation_page.py"
