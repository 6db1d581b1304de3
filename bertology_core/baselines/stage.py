"""The baselines stage's declaration: its table, and the runs it gathers (every fine-tuned model and the pre-trained
encoder's evaluation)."""

from __future__ import annotations

from bertology_core.data import states
from bertology_core.jobs.experiment import ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import Section, SectionRuns, Summary


class Baselines(Stage):
    # the long table and the numeric summary beside it are rule baselines' own outputs
    section = Section("baselines", (Summary("table", "baselines/{model}/baselines",
            title='Baselines'),),
            title='Baselines: fine-tuned, pre-trained and from scratch')

    def metrics_files(self, model: str) -> list[str]:
        """The metrics.json of every run of the baselines table: the pre-trained encoder's (top-level seeds) and every
        fine-tuned run."""
        experiment = self.experiment
        pretrained = ([(task, states.PRETRAINED, seed) for task in experiment.tasks for seed in experiment.seeds]
                      if states.PRETRAINED in experiment.finetune_states else [])
        return [f"{experiment.run_dir(model, t, s, seed)}/metrics.json" for t, s, seed in pretrained + experiment.fine_tuned_runs()]

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(True, self.experiment.fine_tuned_runs(), None)

    def trained_states_read(self) -> set[str]:
        return set(states.TRAINED)  # every state of the table
