"""The outliers stage's declaration (Kovaleva et al. 2021): the fine-tuned models whose outlier dimensions are
disabled, its config checks, its section and the input lists of its rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, sample_share, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class Outliers(Stage):
    section = Section("outliers", (
        Summary("dimensions", "outliers/{model}/summary/dimensions", BOTH, ("figure", "table"),
                title='Outlier LayerNorm dimensions per model state'),
        Summary("contrast", "outliers/{model}/summary/contrast", BOTH, ("figure", "table"),
                title='Disabling the outlier dimensions against as many random dimensions'),
        Summary("deltas", "outliers/{model}/summary/deltas", shown=()),
    ), title='Outlier LayerNorm dimensions (Kovaleva et al. 2021, BERT Busters)')
    claimed = True

    def passes(self, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float | None:
        """An outlier-disabling job scores a sample of ``max_examples`` of its dev examples with the outlier dimensions
        disabled and with each of ``random_draws`` random sets of as many."""
        if rule != "outlier_disabling":
            return None
        settings = self.settings()
        return (settings["random_draws"] + 1) * sample_share(settings["max_examples"], inputs.get("data"))

    def tasks(self) -> list[str]:
        """The tasks whose models fine-tuned from the pre-trained encoder get their outlier dimensions disabled."""
        wanted = self.settings()["tasks"]
        return self.experiment.tasks if wanted is None else [task for task in wanted if task in self.experiment.tasks]

    def seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's outlier disabling: outliers.seeds, or the disabling stage's seeds (where the
        config's stages leave disabling out: the top-level seeds, which are fine-tuned whatever runs)."""
        seeds = self.settings()["seeds"]
        if seeds is not None:
            return seeds
        return self.experiment.disabling.seeds(task) if self.experiment.runs_stage("disabling") else self.experiment.seeds

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``outliers``: every analysed (task, seed) of its tasks and seeds (none when no model is fine-tuned from the
        pre-trained encoder)."""
        if states.FINETUNED not in self.experiment.trained_states:
            return {"outliers": []}
        return {"outliers": [(task, seed) for task in self.tasks() for seed in self.seeds(task) if fit(task, states.FINETUNED, seed)]}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        # the pre-trained encoder's outlier dimensions are found whatever else runs
        return SectionRuns(True, [(t, states.FINETUNED, s) for t, s in runs.outliers], bool(runs.outliers))

    def problems(self) -> list[str]:
        """Outlier tasks must be configured, and their seeds fine-tuned anyway (the stage adds no fine-tuning run)."""
        experiment = self.experiment
        problems = experiment.named_task_problems({"outliers.tasks": self.settings()["tasks"]})
        if states.FINETUNED not in experiment.trained_states:
            return problems
        for task in self.tasks():
            fine_tuned = experiment.finetuned_seeds(task, states.FINETUNED)
            missing = sorted(set(self.seeds(task)) - set(fine_tuned))
            if missing:
                named = "outliers.seeds" if self.settings()["seeds"] is not None else "outliers.seeds (default: the disabling stage's)"
                problems.append(f"{named} {missing} are not fine-tuned for {task} (fine-tuned seeds: {fine_tuned}): "
                                "the outliers stage fine-tunes no model of its own. Fix: add them to seeds (or the disabling "
                                "stage's seeds), or name fine-tuned ones.")
        return problems

    def models(self, jobs: Verdicted, model: str) -> list[str]:
        """The folder of every fine-tuned model whose outlier dimensions are found (and disabled)."""
        return [f"{self.experiment.run_dir(model, t, states.FINETUNED, s)}/model" for t, s in jobs.of(model).outliers]

    @staticmethod
    def disabling_files(jobs: Verdicted, model: str, task: str) -> list[str]:
        """The outlier disabling of every seed of ``task``: what its statistics pool."""
        return [f"results/outliers/{model}/{task}/seed{seed}/disabling.parquet" for seed in jobs.of(model).outlier_seeds(task)]

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """The verdicts, the outlier dimensions found and every task's statistics."""
        tasks = jobs.of(model).outlier_tasks
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "parameters": f"results/outliers/{model}/parameters.parquet",
            "dimensions": f"results/outliers/{model}/dimensions.parquet",
            "deltas": [f"results/outliers/{model}/{task}/deltas.parquet" for task in tasks],
            "contrast": [f"results/outliers/{model}/{task}/contrast.parquet" for task in tasks],
        }
