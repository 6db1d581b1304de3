"""The layer_mix stage's declaration (Tenney et al. 2019): the probed states that get scalar mixes, its config check,
its section and the summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from bertology_core.jobs.experiment import FITNESS_TABLE, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class LayerMix(Stage):
    section = Section("layer_mix", (
        Summary("expected", "layer_mix/{model}/summary/expected_layers", BOTH, ("figure", "table"),
                title='Centers of gravity and expected layers per label set and model state'),
        Summary("cumulative", "layer_mix/{model}/summary/cumulative", shown=()),
    ), title='Where linguistic information sits across layers (Tenney et al. 2019)')
    claimed = True
    # memory (bertology_core/jobs/needs.py): every layer's word features, whole
    memory = {"layer_mix": "holds"}
    reads = ("probing",)

    def passes(self, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float | None:
        """A mix job trains its cumulative probes per label set and probe seed for at most ``probe.max_epochs`` epochs
        over the features (the request holds the longest)."""
        if rule != "layer_mix":
            return None
        settings = self.settings()
        return settings["probe"]["max_epochs"] * len(settings["probe_seeds"]) * len(self.config["probing"]["labels"])

    def passes_run(self, rule: str, wildcards: Mapping[str, str], outputs: Mapping[str, str]) -> float | None:
        """Per label set, the most epochs any of its probes ran times its probe seeds, summed."""
        if rule != "layer_mix":
            return None
        cumulative = pl.read_parquet(outputs["cumulative"], columns=["labels", "probe_seeds", "epochs_run_max"])
        per_set = cumulative.group_by("labels").agg((pl.col("epochs_run_max") * pl.col("probe_seeds")).max())
        return float(per_set["epochs_run_max"].sum())

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``layer_mix``: the probed states that layer_mix.states chooses (null: every probed state)."""
        chosen, probed = self.settings()["states"], found["probed"]
        return {"layer_mix": list(probed if chosen is None else [state for state in probed if state in chosen])}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(bool(runs.layer_mix), runs.layer_mix_fine_tuned, bool(runs.layer_mix_fine_tuned))

    def problems(self) -> list[str]:
        """layer_mix.states must name states the probing stage probes."""
        chosen, experiment = self.settings()["states"], self.experiment
        if not chosen or not experiment.treebank_splits:
            return []
        probed = {state for model in experiment.models for state in experiment.every_model_fit.of(model).probed}
        missing = [state for state in chosen if state not in probed]
        if not missing:
            return []
        return [(f"layer_mix.states names {missing}, which the probing stage does not probe (probed: {sorted(probed)}). "
                 "Fix: choose among them (probing.states, probing.tasks, probing.seeds decide what is probed) or set "
                 "layer_mix.states: null.")]

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """The verdicts and the scalar mixes of every mixed state."""
        mixed = jobs.of(model).layer_mix
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "summaries": [f"results/layer_mix/{model}/{state}/summary.parquet" for state in mixed],
            "cumulative": [f"results/layer_mix/{model}/{state}/cumulative.parquet" for state in mixed],
        }
