# The report stage's input functions, report section, targets and checks; its rules are in
# rules/report.smk (Snakemake's linter asks rules and functions to live in separate files).


def report_inputs(wildcards):
    """The figure specs and tables the report page shows, for every model: those of the sections whose stage runs."""
    from bertology_core.report.report import item_file

    items = [f"results/{item_file(kind, stem)}" for model in MODELS for kind, stem in shown_summaries(model)]
    # the page's layout and section texts (report/) and its template, style and script (package data the code hash
    # does not cover): editing them reruns the page only
    texts = [REPO / "report" / "sections" / f"{anchor}.rst" for anchor in SECTIONS]
    return {"shown": items, "fitness": fitness_inputs(), "layout": str(REPO / "report" / "layout.yaml"),
            "texts": [str(path) for path in texts],  # every one exists (section_texts_problems)
            "page": sorted(str(path) for pattern in ("*.j2", "*.css", "*.js") for path in (REPO / "bertology_core" / "report" / "page").glob(pattern))}


def analysed_seeds(model, task):
    """Every seed of a task whose model fine-tuned from the pre-trained encoder some stage analyses."""
    seeds = {seed for t, seed in dumped_fine_tuned(model) if t == task}
    if states.FINETUNED in disabling_states():
        seeds |= set(swept_seeds(model, task, states.FINETUNED))
    seeds |= {seed for t, seed in pruning_runs(model) if t == task}
    seeds |= {seed for t, seed in probed_states(model) if t == task}
    return sorted(seeds)


def section_runs(model):
    """Report section anchor -> the fine-tuned models (task, state, seed) whose results it shows: the report
    warns in each section that shows an unfit one."""
    return {anchor: section.shows(model) for anchor, section in SECTIONS.items()}


def head_atlas_inputs(wildcards):
    """The per-head summary tables the atlas joins (those this config produces)."""
    model = wildcards.model
    produced = summary_stems(model)
    wanted = {
        "patterns": f"patterns/{model}/summary/heads",
        "features": f"linguistic/{model}/summary/features",
        "cosine": f"attention_change/{model}/summary/cosine",
        "disabling": f"disabling/{model}/summary/heads",
        "importance": f"pruning/{model}/summary/importance",
        "survival": f"pruning/{model}/summary/survival",
        "best_relations": f"probing/{model}/summary/syntactic_heads",
        "roles": f"head_roles/{model}/summary/roles",
    }
    inputs = {name: f"results/{stem}.parquet" for name, stem in wanted.items() if stem in produced}
    if "best_relations" in inputs:
        inputs["relations"] = [f"results/probing/{model}/{state}/head_relations.parquet" for state in syntactic_head_states(model)]
    inputs["fitness"] = fitness_inputs()
    return inputs


def layer_atlas_inputs(wildcards):
    """The per-layer tables the layer atlas joins (those this config produces)."""
    model = wildcards.model
    produced = summary_stems(model)
    inputs = {}
    if f"probing/{model}/summary/probes" in produced:
        inputs["probes"] = f"results/probing/{model}/summary/probes.parquet"
    if layer_mix_states(model):
        inputs["mix"] = f"results/layer_mix/{model}/summary/cumulative.parquet"
    if stage_runs(model, "outliers"):
        inputs["parameters"] = f"results/outliers/{model}/parameters.parquet"
    return inputs


declare_section("atlas", shows=lambda model: sorted({run for anchor in ("claims", "probing") for run in SECTIONS[anchor].shows(model)}))


# every stage's tables and figures on one page, with the head atlas
TARGETS.append(lambda model: ["results/report/index.html"])
