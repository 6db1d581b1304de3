"""The attention_change stage's declaration: the fine-tuned models compared with the pre-trained encoder's dump
(Kovaleva et al. 2019), its section and the summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class AttentionChange(Stage):
    section = Section("attention_change", (
        Summary("cosine", "attention_change/{model}/summary/cosine", BOTH, ("figure",)),
        Summary("layers", "attention_change/{model}/summary/cosine_by_layer", shown=()),
    ), title='Change of attention after fine-tuning')
    claimed = True
    reads = ("attention",)

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``attention_change``: (task, seed) of every analysed fine-tuned model, when both it and the pre-trained
        encoder are dumped."""
        experiment, finetuned = self.experiment, states.FINETUNED
        dumped = self.config["attention"]["dumped"]
        changed = ([(task, seed) for task in experiment.tasks for seed in experiment.seeds if fit(task, finetuned, seed)]
                   if {states.PRETRAINED, finetuned} <= set(dumped) and finetuned in experiment.trained_states else [])
        return {"attention_change": changed}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        changed = runs.attention_change
        return SectionRuns(bool(changed), [(t, states.FINETUNED, s) for t, s in changed], bool(changed))

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """The per-head cosines of every fine-tuned model compared with the pre-trained encoder, and the verdicts."""
        return {
            "changes": [f"results/attention_change/{model}/{task}/seed{seed}.parquet" for task, seed in jobs.of(model).attention_change],
            "fitness": f"{FITNESS_TABLE}.parquet",
        }
