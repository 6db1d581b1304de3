"""The disabling stage's declaration (Kovaleva et al. 2019, section 4.6): its per-task settings, the fine-tuned
models it sweeps (and the seeds it adds to fine-tuning), its section and the input lists of its rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, sample_share, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary


class Disabling(Stage):
    section = Section("disabling", (
        Summary("heads", "disabling/{model}/summary/heads", BOTH, ("figure",)),
        Summary("layers", "disabling/{model}/summary/layers", BOTH, ("figure",)),
        Summary("extremes", "disabling/{model}/summary/extremes",
                title='Heads and layers whose disabling helps or hurts most'),
        Summary("greedy", "disabling/{model}/summary/greedy",
                title='Greedy disabling',
                note=('Heads are added one at a time while disabling them raises the score on the selection half of '
                      "dev; each set is reported on the other half. A lone 'intact' row means no single head raised the"
                      " selection half's score.")),
        Summary("selection", "disabling/{model}/summary/selection", shown=()),
    ), title='Disabling heads and layers')
    claimed = True

    @staticmethod
    def folder(model: str, task: str, state: str, seed: int | str) -> str:
        return f"results/disabling/{model}/{task}/{state}/seed{seed}"

    def passes(self, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float | None:
        """A sweep scores every configuration of each of ``modes`` on a sample of ``max_examples`` of its dev examples
        (its task's); a greedy search scores every remaining head on that sample once per step, for ``greedy_steps``
        steps (the first read from the sweep: counted all the same, an upper bound)."""
        if rule not in ("disabling_sweep", "disabling_greedy"):
            return None
        task = wildcards["task"]
        share = sample_share(self.setting(task, "max_examples"), inputs.get("data"))
        if rule == "disabling_greedy":
            return share * self.setting(task, "greedy_steps")
        return share * len(self.settings()["modes"])

    def setting(self, task: str, key: str) -> Any:
        """A disabling setting of one task: its per_task override, else the default."""
        return self.settings()["per_task"].get(task, {}).get(key, self.settings()[key])

    def example_note(self) -> str:
        """What the disabling captions say each task was swept on: ``MRPC 300, RTE all``."""
        return ", ".join(f"{task} {self.setting(task, 'max_examples') or 'all'}" for task in self.experiment.tasks)

    def states(self) -> list[str]:
        """The swept fine-tuned models: disabling.states that the config fine-tunes at all."""
        return [state for state in self.settings()["states"] if state in self.experiment.trained_states]

    def trained_states_read(self) -> set[str]:
        return set(self.states())

    def seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's sweeps (fine-tuned for them whether or not they are analysed)."""
        return self.setting(task, "seeds") or self.experiment.seeds

    def fine_tuned_seeds(self, task: str, state: str, probing: bool) -> set[int]:
        return set(self.seeds(task)) if state in self.states() else set()

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``sweeps``: every analysed (task, state, seed) of the swept states; ``greedy``: those that also get the
        greedy search (greedy_steps not 0, the seed among greedy_seeds)."""
        sweeps = [(task, state, seed) for task in self.experiment.tasks for state in self.states()
                  for seed in self.seeds(task) if fit(task, state, seed)]
        greedy = []
        for task, state, seed in sweeps:
            wanted = self.setting(task, "greedy_seeds")
            if self.setting(task, "greedy_steps") != 0 and (wanted is None or seed in wanted):
                greedy.append((task, state, seed))
        return {"sweeps": sweeps, "greedy": greedy}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(bool(runs.sweeps), runs.sweeps, bool(runs.sweeps))

    def sweep_files(self, jobs: Verdicted, model: str, task: str, state: str) -> list[str]:
        """The sweep of every swept seed of ``task`` fine-tuned into ``state``: what its statistics pool."""
        return [f"{self.folder(model, task, state, seed)}/sweep.parquet" for seed in jobs.of(model).swept_seeds(task, state)]

    def summary_inputs(self, jobs: Verdicted, model: str) -> dict[str, Any]:
        runs = jobs.of(model)
        pairs = runs.disabling_task_states
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in pairs],
            "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in pairs],
            "greedy": [f"{self.folder(model, t, i, s)}/greedy.parquet" for t, i, s in runs.greedy],
        }

    @staticmethod
    def seed_note(jobs: Verdicted, model: str) -> str:
        """What the disabling captions say each statistic pools: ``MRPC 3, STS-B 1`` (swept seeds per task)."""
        runs = jobs.of(model)
        return ", ".join(f"{task} {len(runs.swept_seeds(task, state))}" for task, state in runs.disabling_task_states)

    def fitness_runs(self, jobs: Verdicted, model: str) -> dict[str, list[int]]:
        """Task -> the swept seeds of its models fine-tuned from the pre-trained encoder, which the disabling summary
        labels with their verdicts."""
        return {task: jobs.of(model).swept_seeds(task, states.FINETUNED) for task in self.experiment.tasks}
