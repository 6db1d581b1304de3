# The report: every stage's tables and figures on one self-contained page, and the head atlas.


rule head_atlas:
    conda:
        "../envs/tables.yaml"
    input:
        unpack(head_atlas_inputs),
    output:
        table=multiext("results/report/{model}/head_atlas", *TABLE_FILES),
        figure=multiext("results/report/{model}/head_atlas", *FIGURE_FILES),
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
