"""The report stage's declaration: the head and layer atlases (its own tables) and the page's inputs: what every
section shows for every model, which sections were skipped, and the page's layout, texts and template."""

from __future__ import annotations

from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, FineTuned, Section, SectionRuns, Summary
from bertology_core.summaries.files import item_file


class Report(Stage):
    # the head and layer atlases: the report stage's own tables (results/report/)
    section = Section("report", (
        Summary("table", "report/{model}/head_atlas", BOTH, ("figure", "table"),
                title='Head atlas'),
        Summary("table", "report/{model}/layer_atlas", BOTH, ("figure", "table"),
                title='Layer atlas'),
    ), title='Head and layer atlases')

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        probed = [(task, states.FINETUNED, seed) for task, seed in runs.probed_fine_tuned]
        return SectionRuns(True, sorted(set(self.experiment.claims.shows(runs)) | set(probed)), None)

    @staticmethod
    def atlas_fitness_runs(jobs: Verdicted, model: str) -> dict[str, list[int]]:
        """Task -> every seed whose model fine-tuned from the pre-trained encoder a per-head stage analyses: the head
        atlas labels their rows with the verdicts."""
        return {task: jobs.of(model).analysed_seeds(task) for task in jobs.experiment.tasks}

    @staticmethod
    def head_atlas_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """The per-head summary tables the atlas joins (those this config produces)."""
        produced = {stem for _, stem in jobs.shown_summaries(model)}
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
        inputs: dict[str, Any] = {name: f"results/{stem}.parquet" for name, stem in wanted.items() if stem in produced}
        if "best_relations" in inputs:
            inputs["relations"] = [f"results/probing/{model}/{state}/head_relations.parquet" for state in jobs.of(model).syntactic_heads]
        inputs["fitness"] = f"{FITNESS_TABLE}.parquet"
        return inputs

    @staticmethod
    def layer_atlas_inputs(jobs: Verdicted, model: str) -> dict[str, str]:
        """The per-layer tables the layer atlas joins (those this config produces)."""
        produced = {stem for _, stem in jobs.shown_summaries(model)}
        inputs = {}
        if f"probing/{model}/summary/probes" in produced:
            inputs["probes"] = f"results/probing/{model}/summary/probes.parquet"
        if jobs.of(model).layer_mix:
            inputs["mix"] = f"results/layer_mix/{model}/summary/cumulative.parquet"
        if jobs.stage_runs(model, "outliers"):
            inputs["parameters"] = f"results/outliers/{model}/parameters.parquet"
        return inputs

    def section_shows(self, jobs: Verdicted) -> dict[str, dict[str, list[FineTuned]]]:
        """Model -> section anchor -> the fine-tuned models it shows: what the report page warns about."""
        return {model: jobs.section_shows(model) for model in self.experiment.models}

    def skipped_sections(self, jobs: Verdicted) -> dict[str, list[str]]:
        """Model -> the sections the report page says were skipped."""
        return {model: jobs.skipped_sections(model) for model in self.experiment.models}

    def inputs(self, jobs: Verdicted) -> dict[str, Any]:
        """The figure specs and tables the report page shows for every model (those of the sections whose stage runs),
        and the page's layout and section texts (report/) and its template, style and script (package data the code
        hash does not cover): editing them reruns the page only."""
        repo = self.experiment.repo
        page = repo / "bertology_core" / "report" / "page"
        return {
            "shown": [f"results/{item_file(kind, stem)}" for model in self.experiment.models for kind, stem in jobs.shown_summaries(model)],
            "fitness": f"{FITNESS_TABLE}.parquet",
            "layout": str(repo / "report" / "layout.yaml"),
            "texts": [str(repo / "report" / "sections" / f"{section.anchor}.rst") for section in self.experiment.sections()],
            "page": sorted(str(path) for pattern in ("*.j2", "*.css", "*.js") for path in page.glob(pattern)),
        }
