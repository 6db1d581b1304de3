"""The fitness stage's declaration: the verdict's settings per task and what the checkpoint reads."""

from __future__ import annotations

from typing import Any

from bertology_core.jobs.experiment import Stage


class Fitness(Stage):
    def task_settings(self, task: str) -> dict[str, Any]:
        """The verdict's settings for one task: the defaults, with the task's margin and reference score."""
        fitness = self.settings()
        return ({k: v for k, v in fitness.items() if k not in ("if_unfit", "per_task", "reference_scores")}
                | {"reference": fitness["reference_scores"].get(task)} | fitness["per_task"].get(task, {}))

    def trivial_inputs(self, wildcards: Any) -> dict[str, str]:
        """What a verdict's trivial predictor reads besides the predictions: a token task's prepared train and dev
        splits (its tagger learns each word's most frequent training label); nothing for a sequence task."""
        if not self.experiment.task(wildcards.task).is_token:
            return {}
        return {split: f"results/data/{wildcards.task}/{split}.parquet" for split in ("train", "dev")}

    def inputs(self) -> list[str]:
        """What the fitness checkpoint reads: the verdict of every fine-tuned run of every model."""
        experiment = self.experiment
        return [f"{experiment.run_dir(model, t, i, s)}/metrics.json" for model in experiment.models
                for t, i, s in experiment.fine_tuned_runs()]
