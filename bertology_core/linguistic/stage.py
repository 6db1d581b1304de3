"""The linguistic stage's declaration: the tasks whose language a spaCy pipeline tags, its section and the
summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.jobs.experiment import FITNESS_TABLE, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class Linguistic(Stage):
    section = Section("linguistic", (
        Summary("features", "linguistic/{model}/summary/features", BOTH, ("figure",)),
        Summary("relations", "linguistic/{model}/summary/relations", BOTH, ("figure",)),
        Summary("cls", "linguistic/{model}/summary/cls", BOTH, ("figure",)),
    ), title='Attention to linguistic features, [CLS], [SEP] and token types')
    # memory (bertology_core/jobs/needs.py): it holds the spaCy parses of the whole dev set beside a layer of the dump
    memory = {"linguistic_scores": "holds"}
    reads = ("attention",)

    def spacy_model(self, wildcards: Any) -> str:
        """The spaCy pipeline that tags a task's dev sentences: linguistic.spacy_models by the task's language."""
        return self.settings()["spacy_models"][self.experiment.task(wildcards.task).language]

    def tasks(self) -> list[str]:
        """The tasks whose language has a spaCy pipeline (linguistic.spacy_models): the linguistic stage's."""
        experiment = self.experiment
        return [task for task in experiment.tasks if experiment.task(task).language in self.settings()["spacy_models"]]

    def left_out(self) -> list[str]:
        """Why each task the linguistic stage leaves out is left out (what its section says)."""
        experiment = self.experiment
        return [f"{task}: its language {experiment.task(task).language!r} has no spaCy pipeline in linguistic.spacy_models"
                for task in experiment.tasks if task not in self.tasks()]

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        return {"linguistic_tasks": self.tasks()}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(bool(runs.linguistic_keys), [run for run in runs.dumped_runs if run[0] in runs.linguistic_tasks], None)

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """Every dump's linguistic score tables, by kind."""
        keys = jobs.of(model).linguistic_keys
        return {kind: [f"results/linguistic/{model}/{key}.{kind}.parquet" for key in keys]
                for kind in ("features", "relations", "cls_shares", "cls_max")} | {"fitness": f"{FITNESS_TABLE}.parquet"}
