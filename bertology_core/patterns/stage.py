"""The patterns stage's declaration: its section, the hand labels that train the pattern classifier, and the input
lists of its rules (every dump, the labelled maps, the classified maps)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary

# the hand-label files the pattern classifier reads, by role
LABEL_FILE_ROLES = ("labels", "card", "second_pass", "second_labeller", "test")


@dataclasses.dataclass(frozen=True)
class HandLabels:
    """A model's hand labels of attention maps, as read and checked from ``patterns.labels_csv`` or the label set in
    ``patterns.labels_dir`` whose card names the model (bertology_core.patterns.label_tables). ``files``: the label
    files by role (labels, second_pass, second_labeller, test); ``card``: the card's path, if any; ``maps``: every
    (task, dumped state, example idx) the training and test labels name, sorted."""

    files: Mapping[str, str]
    card: str | None
    maps: tuple[tuple[str, str, int], ...]


def hand_labels(files: Mapping[str, Any], card: Any, maps: Iterable[tuple[str, str, int]]) -> HandLabels:
    """A HandLabels from what was read: paths as text, the maps unique and sorted."""
    return HandLabels({role: str(path) for role, path in files.items()}, str(card) if card else None, tuple(sorted(set(maps))))


def label_files(labels: HandLabels | None) -> list[str]:
    """Every file of a model's hand labels (none without them): a Hub model is checked against them (rule check_model)."""
    return list(labels.files.values()) if labels else []


class Patterns(Stage):
    section = Section("patterns", (
        Summary("classifier", "patterns/{model}/summary/classifier",
                title='Pattern labellers against hand labels'),
        Summary("shares", "patterns/{model}/summary/shares", BOTH, ("figure",)),
        Summary("heads", "patterns/{model}/summary/heads", BOTH, ("figure",)),
        Summary("confusion", "patterns/{model}/summary/confusion", shown=()),
    ), title='Self-attention patterns')
    claimed = True
    # memory (bertology_core/jobs/needs.py): the CNN reads every dump of a model a layer's row groups at a time (1.1 GB
    # at 6 GB of dumps, measured); the features and the maps' classes grow with the dump they read
    memory = {"pattern_classifier": "chunks"}
    reads = ("attention",)

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(True, runs.dumped_runs, bool(runs.dumped_fine_tuned))

    @staticmethod
    def hand_label_set(jobs: Verdicted, model: str, labels: HandLabels | None) -> dict[str, Any] | None:
        """The hand labels that train ``model``'s pattern CNN, or None: the label files by role, ``card``, and ``idx``:
        per labelled dump of this run (``task/state``), the example idx whose maps are computed for the classifier."""
        if labels is None:
            return None
        keys = set(jobs.of(model).dump_keys)
        idx: dict[str, list[int]] = {}
        for task, state, number in labels.maps:
            if f"{task}/{state}" in keys:
                idx.setdefault(f"{task}/{state}", []).append(number)
        if not idx:
            return None
        return {**labels.files, "card": labels.card, "idx": idx}

    def labelled_dumps(self, jobs: Verdicted, model: str, labels: HandLabels | None) -> dict[str, str]:
        """The labelled dumps (maps of the hand-labelled examples) of ``model``: ``task/state`` -> path prefix."""
        labelled = self.hand_label_set(jobs, model, labels)
        return {key: f"results/patterns/{model}/labelled/{key}" for key in (labelled["idx"] if labelled else {})}

    def labelled_recipe_keys(self, jobs: Verdicted, model: str, labels: HandLabels | None) -> list[str]:
        """The labelled dumps of fine-tuned models (their recipes are checked against the label card)."""
        return [key for key in self.labelled_dumps(jobs, model, labels) if key.split("/", 1)[1] != states.PRETRAINED]

    def classifier_inputs(self, jobs: Verdicted, model: str, labels: HandLabels | None) -> dict[str, Any]:
        """The pattern CNN's inputs: every dump and its features, the labelled maps, the recipes of the labelled
        fine-tuned models and the hand-label files."""
        keys = jobs.of(model).dump_keys
        recipes = []
        for key in self.labelled_recipe_keys(jobs, model, labels):
            task, dumped = key.split("/", 1)
            recipes.append(f"{self.experiment.run_dir(model, task, *states.split_seeded(dumped))}/evaluation.json")
        labelled = self.hand_label_set(jobs, model, labels) or {}
        return {
            "features": [f"results/patterns/{model}/{key}.features.parquet" for key in keys],
            "dumps": self.experiment.attention.every_dump_file(jobs, model),
            "resolved": f"results/models/{model}/resolved.json",
            "labelled": [f"{prefix}.{kind}.parquet" for prefix in self.labelled_dumps(jobs, model, labels).values()
                         for kind in ("attention", "tokens")],
            "recipes": recipes,
            **{name: path for name, path in labelled.items() if name in LABEL_FILE_ROLES and path},
        }

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        """Every dump's classified maps, the classifier's report and the verdicts."""
        return {
            "classes": [f"results/patterns/{model}/{key}.classes.parquet" for key in jobs.of(model).dump_keys],
            "report": f"results/patterns/{model}/classifier/report.json",
            "fitness": f"{FITNESS_TABLE}.parquet",
        }
