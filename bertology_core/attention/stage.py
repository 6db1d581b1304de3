"""The attention stage's declaration: which models' attention is dumped (the unit of every attention analysis) and
the files of a dump."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import Fit, Stage, Verdicted


class Attention(Stage):
    @staticmethod
    def dump_files(model: str, key: str) -> list[str]:
        """The two Parquet files of one attention dump (``key``: ``<task>/<dumped state>``)."""
        prefix = f"results/attention/{model}/{key}"
        return [f"{prefix}.attention.parquet", f"{prefix}.tokens.parquet"]

    def encoder_inputs(self, model: str, task: str, dumped: str) -> dict[str, str]:
        """What dumping a model's attention reads: the resolved pre-trained folder, the task's dev split, and for a
        fine-tuned model (``<state>/seed<N>``) its folder."""
        inputs = {"resolved": f"results/models/{model}/resolved.json", "data": f"results/data/{task}/dev.parquet"}
        if dumped != states.PRETRAINED:
            state, seed = states.split_seeded(dumped)
            inputs["model"] = f"{self.experiment.run_dir(model, task, state, seed)}/model"
        return inputs

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``dumps``: (task, dumped state) for every task and attention.dumped state (a trained one per top-level
        seed whose model is analysed)."""
        experiment, dumps = self.experiment, []
        for task in experiment.tasks:
            for state in self.settings()["dumped"]:
                if state == states.PRETRAINED:
                    dumps.append((task, states.PRETRAINED))
                elif state in experiment.trained_states:
                    dumps += [(task, states.seeded(state, seed)) for seed in experiment.seeds if fit(task, state, seed)]
        return {"dumps": dumps}

    def trained_states_read(self) -> set[str]:
        return set(self.settings()["dumped"]) & set(states.TRAINED)

    def early_targets(self, model: str) -> list[str]:
        if states.PRETRAINED not in self.settings()["dumped"]:
            return []
        return [f"results/attention/{model}/{task}/{states.PRETRAINED}.json" for task in self.experiment.tasks]

    @staticmethod
    def dump_prefixes(jobs: Verdicted, model: str) -> list[str]:
        """The path prefix of every attention dump of ``model`` (``results/attention/<model>/<task>/<dumped state>``),
        in the order of its dump keys."""
        return [f"results/attention/{model}/{key}" for key in jobs.of(model).dump_keys]

    def every_dump_file(self, jobs: Verdicted, model: str) -> list[str]:
        """Both Parquet files of every attention dump of ``model`` (the annotation page and the pattern CNN read them)."""
        return [path for key in jobs.of(model).dump_keys for path in self.dump_files(model, key)]
