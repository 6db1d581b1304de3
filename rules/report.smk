# The report: every stage's tables and figures on one self-contained page, and the head atlas.


include: "functions/report.smk"


rule head_atlas:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(head_atlas_inputs),
    output:
        **summary_outputs("atlas", "table", "results/report/{model}/head_atlas", ("table", "figure"), ("figure", "table")),
    params:
        code=script_code("head_atlas"),
        fitness_runs=lambda wc: {task: analysed_seeds(wc.model, task) for task in TASKS},
    log:
        "logs/head_atlas/{model}.log",
    benchmark:
        "results/benchmarks/head_atlas/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/head_atlas.py"


rule layer_atlas:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(layer_atlas_inputs),
    output:
        **summary_outputs("atlas", "table", "results/report/{model}/layer_atlas", ("table", "figure"), ("figure", "table")),
    params:
        code=script_code("layer_atlas"),
        sigmas=config["outliers"]["sigmas"],
    log:
        "logs/layer_atlas/{model}.log",
    benchmark:
        "results/benchmarks/layer_atlas/{model}.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/layer_atlas.py"


rule report:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(report_inputs),
    output:
        report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
            labels={"page": "all stages, one page"},
        ),
    params:
        code=script_code("report"),
        models=list(MODELS),
        # what each section shows, as the stages declare it (rules/*.smk); how it looks is report/'s
        # a function: read when the job is planned, so stages included after this file are on the page too
        sections=lambda wc: {anchor: list(section.summaries) for anchor, section in SECTIONS.items()},
        section_runs=lambda wc: {model: section_runs(model) for model in MODELS},
        unfit=config["analysis"]["unfit"],
        claims_level=config["claims"]["level"],
        skipped=lambda wc: {model: skipped_sections(model) for model in MODELS},
        model_specs=MODELS,
        tasks=TASKS,
        seeds=SEEDS,
    log:
        "logs/report/report.log",
    benchmark:
        "results/benchmarks/report/report.tsv"
    resources:
        mem_mb=scaled(2000),
        runtime=scaled(20),
    script:
        "../workflow_scripts/report.py"
