"""The probing stage's declaration (Tenney et al. 2019, Hewitt and Liang 2019, Clark et al. 2019): the probed states
(and the seeds it adds to fine-tuning), the treebank samples, the reference probe, its config checks, its section and
the summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, UNTRAINED_PROBED, Fit, ModelRuns, Stage, TaskSeed, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class Probing(Stage):
    section = Section("probing", (
        Summary("probes", "probing/{model}/summary/probes", BOTH, ("figure", "table"),
                title='Probes per layer: accuracy, control accuracy, selectivity, stopping epoch, converged reference',
                note=('Each probe stops on a held-out share of the training sentences (never dev): epoch = the epoch '
                      'whose weights it kept, epochs_run = when it stopped (no layer improved for '
                      "probing.probe.patience epochs). reference_* = scikit-learn's LogisticRegression run to "
                      'convergence on the same features (probing.reference.states): the difference is how much the '
                      "probe's stopping and regularisation move accuracy and selectivity.")),
        Summary("heads", "probing/{model}/summary/syntactic_heads",
                title='Syntactic heads (Clark et al. 2019, table 1)',
                note=("As Clark et al. did, each relation's best head and best offset are chosen on the sentences they "
                      'are scored on, which flatters the head (144 candidates per direction against 6 offsets); the '
                      'next table does not.')),
        Summary("held_out", "probing/{model}/summary/syntactic_heads_held_out",
                title='Syntactic heads chosen on half the sentences, scored on the other half',
                note=('Head and offset chosen on a seeded half of the sentences, accuracies on the other half; '
                      "difference = head minus offset, with a bootstrap interval over the report half's sentences "
                      '(probing.syntactic_heads.resamples, level).')),
    ), title='Probing and syntactic heads')
    claimed = True
    # memory (bertology_core/jobs/needs.py): every layer's word features, whole
    memory = {"probe_layers": "holds"}

    def passes(self, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float | None:
        """A probe job trains, per label set, a probe and a control probe per layer for at most ``probe.max_epochs``
        epochs over the features (early stopping may end them sooner: the request holds the longest)."""
        settings = self.settings()
        return settings["probe"]["max_epochs"] * len(settings["labels"]) if rule == "probe_layers" else None

    def passes_run(self, rule: str, wildcards: Mapping[str, str], outputs: Mapping[str, str]) -> float | None:
        """Per label set, the epochs its probes and control probes ran (their mean over layers), summed."""
        if rule != "probe_layers":
            return None
        probes = pl.read_parquet(outputs["probes"], columns=["labels", "epochs_run", "control_epochs_run"])
        per_set = probes.group_by("labels").agg(((pl.col("epochs_run") + pl.col("control_epochs_run")) / 2).mean())
        return float(per_set["epochs_run"].sum())

    def probed_runs(self) -> list[TaskSeed]:
        """(task, seed) of every fine-tuned model the config probes (whether or not it is analysed)."""
        probing, experiment = self.settings(), self.experiment
        if not experiment.treebank_splits or states.FINETUNED not in probing["states"] or states.FINETUNED not in experiment.trained_states:
            return []
        tasks = experiment.tasks if probing["tasks"] is None else [t for t in probing["tasks"] if t in experiment.tasks]
        return [(task, seed) for task in tasks
                for seed in probing["seeds"] or experiment.finetuned_seeds(task, states.FINETUNED, probing=False)]

    def fine_tuned_seeds(self, task: str, state: str, probing: bool) -> set[int]:
        if state != states.FINETUNED or not probing:
            return set()
        seeds = {seed for probed, seed in self.probed_runs() if probed == task}
        chosen = self.settings()["syntactic_heads"]["states"] if self.experiment.treebank_splits else None
        return seeds | {states.split_run_name(s)[2] for s in chosen or [] if states.is_run_name(s) and states.split_run_name(s)[0] == task}

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``probed``: the analysed probed states (pretrained, random_weights, <TASK>/finetuned/seed<N>);
        ``syntactic_heads``: those whose heads are scored against the treebank (every probed state but random weights,
        or syntactic_heads.states)."""
        if not self.experiment.treebank_splits:
            return {"probed": [], "syntactic_heads": []}

        def state_fit(probed: str) -> bool:
            return probed in UNTRAINED_PROBED or fit(*states.split_run_name(probed))

        probing = self.settings()
        candidates = [s for s in UNTRAINED_PROBED if s in probing["states"]]
        candidates += [states.run_name(task, states.FINETUNED, seed) for task, seed in self.probed_runs()]
        probed = [state for state in candidates if state_fit(state)]
        chosen = probing["syntactic_heads"]["states"]
        scored = [s for s in probed if s != states.RANDOM_WEIGHTS] if chosen is None else list(chosen)
        return {"probed": probed, "syntactic_heads": [state for state in scored if state_fit(state)]}

    def early_targets(self, model: str) -> list[str]:
        if not self.experiment.treebank_splits:
            return []
        targets = [f"results/probing/{model}/{s}/probes.parquet" for s in UNTRAINED_PROBED if s in self.settings()["states"]]
        # pretrained is never a fine-tuned model: whatever the verdicts, its heads are scored if chosen
        if states.PRETRAINED in self.experiment.every_model_fit.of(model).syntactic_heads:
            targets.append(f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads.parquet")
        return targets

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(bool(runs.probed), [(task, states.FINETUNED, seed) for task, seed in runs.probed_fine_tuned], bool(runs.probed))

    # -- each job's settings --

    def encoder_inputs(self, model: str, probed: str) -> dict[str, str]:
        """The encoder of a probed state: the resolved pre-trained folder (pretrained and random_weights, whose weights
        are drawn from its config) and, for ``<TASK>/finetuned/seed<N>``, the fine-tuned model folder."""
        inputs = {"resolved": f"results/models/{model}/resolved.json"}
        if probed not in UNTRAINED_PROBED:
            inputs["model"] = f"{self.experiment.run_dir(model, *states.split_run_name(probed))}/model"
        return inputs

    def sample(self) -> dict[str, Any]:
        """Seeded sentence samples of the treebank splits, shared by extraction and probes."""
        probing = self.settings()
        return {"train": probing["train_sentences"], "dev": probing["dev_sentences"], "seed": probing["sample_seed"]}

    def reference_regularisation(self, probed: str) -> float | None:
        """The reference probe's regularisation for a state probing.reference names (None: no reference probe)."""
        reference = self.settings()["reference"]
        return reference["regularisation"] if probed in reference["states"] else None

    def reference_sentences(self, probed: str) -> int | None:
        """The reference probe's sentence cap for a state probing.reference names (None: none, or no reference)."""
        reference = self.settings()["reference"]
        return reference["max_train_sentences"] if probed in reference["states"] else None

    def problems(self) -> list[str]:
        probing = self.settings()
        return self.experiment.named_task_problems(
            {"probing.tasks": probing["tasks"]},
            {"probing.syntactic_heads.states": probing["syntactic_heads"]["states"],
             "probing.reference.states": probing["reference"]["states"]},
        )

    @staticmethod
    def summary_inputs(jobs: Verdicted, model: str) -> dict[str, Any]:
        runs = jobs.of(model)
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "probes": [f"results/probing/{model}/{state}/probes.parquet" for state in runs.probed],
            "heads": [f"results/probing/{model}/{state}/syntactic_heads.parquet" for state in runs.syntactic_heads],
            "held_out": [f"results/probing/{model}/{state}/syntactic_heads_held_out.parquet" for state in runs.syntactic_heads],
        }
