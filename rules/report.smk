# The report: every stage's tables and figures on one self-contained page, and the head and layer atlases (its own
# section of the page, "report").


rule head_atlas:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.report.head_atlas_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("report", "results/report/{model}/head_atlas"),
    params:
        code=script_code("head_atlas"),
        fitness_runs=lambda wc: EXPERIMENT.report.atlas_fitness_runs(jobs(), wc.model),
    log:
        "logs/head_atlas/{model}.log",
    benchmark:
        "results/benchmarks/head_atlas/{model}.tsv"
    resources:
        **requests("head_atlas"),
    script:
        "../workflow_scripts/head_atlas.py"


rule layer_atlas:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.report.layer_atlas_inputs(jobs(), wc.model)),
    output:
        **summary_outputs("report", "results/report/{model}/layer_atlas"),
    params:
        code=script_code("layer_atlas"),
        sigmas=config["outliers"]["sigmas"],
    log:
        "logs/layer_atlas/{model}.log",
    benchmark:
        "results/benchmarks/layer_atlas/{model}.tsv"
    resources:
        **requests("layer_atlas"),
    script:
        "../workflow_scripts/layer_atlas.py"


rule report:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: EXPERIMENT.report.inputs(jobs())),
    output:
        report(
            "results/report/index.html",
            caption="../report/index.rst",
            # beside the atlases, the report stage's tables (category: its section)
            category="report",
            subcategory="page",
            labels={"page": "all stages, one page"},
        ),
    params:
        code=script_code("report"),
        models=list(EXPERIMENT.models),
        # what each section shows (each stage's section: bertology_core/<stage>/stage.py); how it looks is report/'s
        sections=EXPERIMENT.section_summaries(),
        # the sections' titles and their tables' titles and notes, as the stages declare them
        titles=EXPERIMENT.section_titles(),
        tables=EXPERIMENT.table_texts(),
        section_runs=lambda wc: EXPERIMENT.report.section_shows(jobs()),
        unfit=config["fitness"]["if_unfit"],
        skipped=lambda wc: EXPERIMENT.report.skipped_sections(jobs()),
        left_out=EXPERIMENT.left_out(),
        model_specs=EXPERIMENT.models,
        tasks=EXPERIMENT.tasks,
        seeds=EXPERIMENT.seeds,
    log:
        "logs/report/report.log",
    benchmark:
        "results/benchmarks/report/report.tsv"
    resources:
        **requests("report"),
    script:
        "../workflow_scripts/report.py"
