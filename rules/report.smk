# The report: every stage's tables and figures on one self-contained page, and the head and layer atlases (its own
# section of the page, "report").


rule head_atlas:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: runs().head_atlas_inputs(wc.model)),
    output:
        **summary_outputs("report", "results/report/{model}/head_atlas"),
    params:
        code=script_code("head_atlas"),
        fitness_runs=lambda wc: runs().atlas_fitness_runs(wc.model),
    log:
        "logs/head_atlas/{model}.log",
    benchmark:
        "results/benchmarks/head_atlas/{model}.tsv"
    resources:
        mem_mb=memory("head_atlas"),
        runtime=scaled(20),
    script:
        "../workflow_scripts/head_atlas.py"


rule layer_atlas:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: runs().layer_atlas_inputs(wc.model)),
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
        mem_mb=memory("layer_atlas"),
        runtime=scaled(20),
    script:
        "../workflow_scripts/layer_atlas.py"


rule report:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
    conda:
        "../envs/tables.yaml"
    input:
        unpack(lambda wc: runs().report_inputs()),
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
        models=list(PLAN.models),
        # what each section shows (bertology_core/workflow/runs.py, SECTIONS); how it looks is report/'s
        sections=PLAN.section_summaries(),
        section_runs=lambda wc: runs().report_section_shows(),
        unfit=config["fitness"]["unfit"],
        skipped=lambda wc: runs().report_skipped_sections(),
        model_specs=PLAN.models,
        tasks=PLAN.tasks,
        seeds=PLAN.seeds,
    log:
        "logs/report/report.log",
    benchmark:
        "results/benchmarks/report/report.tsv"
    resources:
        mem_mb=memory("report"),
        runtime=scaled(20),
    script:
        "../workflow_scripts/report.py"
