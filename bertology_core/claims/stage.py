"""The claims stage's declaration: its table, its check that every stage's intervals are at claims.level, and what
its job reads (each claimed stage's per-example or per-element tables, and what each claimed stage did)."""

from __future__ import annotations

from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import Section, SectionRuns, Summary


class Claims(Stage):
    section = Section("claims", (
        Summary("headline", "claims/{model}/headline", title="Claims: one verdict per claim"),
        Summary("table", "claims/{model}/claims", title="Each model's rows, each task's seeds pooled, each labelling pass"),),
        title='Claims: the papers against this run')

    @staticmethod
    def shows(runs: ModelRuns) -> list[tuple[str, str, int]]:
        """The fine-tuned models whose results the claims read."""
        return sorted(set(runs.dumped_runs + runs.sweeps + [(task, states.FINETUNED, seed) for task, seed in runs.pruned]))

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(True, self.shows(runs), None)

    def problems(self) -> list[str]:
        """The claims read the intervals the stages computed: each must be at claims.level, which the verdicts assume."""
        config = self.config
        level = config["claims"]["level"]
        stage_levels = {"disabling.level": config["disabling"]["level"], "pruning.kappa_level": config["pruning"]["kappa_level"],
                        "probing.syntactic_heads.level": config["probing"]["syntactic_heads"]["level"],
                        "head_roles.level": config["head_roles"]["level"], "outliers.level": config["outliers"]["level"],
                        "layer_mix.level": config["layer_mix"]["level"]}
        differing = {key: value for key, value in stage_levels.items() if value != level}
        if not differing:
            return []
        return [(f"{', '.join(f'{k}: {v}' for k, v in differing.items())} differ from claims.level ({level}): the claims' "
                 "verdicts read those stages' intervals as intervals at claims.level. Fix: set them to the same level.")]

    def inputs(self, jobs: Verdicted, model: str) -> dict[str, Any]:
        """Every per-example or per-element table the claims resample, from the stages this config runs."""
        runs, pruning = jobs.of(model), self.experiment.pruning
        swept = [(task, state) for task, state in runs.disabling_task_states if state == states.FINETUNED]
        patterns = jobs.stage_runs(model, "patterns")
        inputs: dict[str, Any] = {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "classes": [f"results/patterns/{model}/{task}/{states.seeded(states.FINETUNED, seed)}.classes.parquet"
                        for task, seed in runs.dumped_fine_tuned if patterns],
            "changes": [f"results/attention_change/{model}/{task}/seed{seed}.examples.parquet" for task, seed in runs.attention_change],
            "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in swept],
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
            "michel_curves": [f"{pruning.folder(model, t, s)}/michel_curve.parquet" for t, s in runs.pruned],
            "michel_predictions": [f"{pruning.folder(model, t, s)}/michel_predictions.parquet" for t, s in runs.pruned],
        }
        if patterns:
            inputs["report"] = f"results/patterns/{model}/classifier/report.json"
        if runs.pruned:
            inputs["stability"] = f"results/pruning/{model}/summary/stability.parquet"
        if states.PRETRAINED in runs.syntactic_heads:
            inputs["syntactic"] = f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads_held_out.parquet"
        if runs.dumps and jobs.stage_runs(model, "head_roles"):
            inputs["role_relations"] = f"results/head_roles/{model}/summary/importance_relations.parquet"
            inputs["gates"] = f"results/head_roles/{model}/summary/gates.parquet"
        inputs["outlier_contrast"] = [f"results/outliers/{model}/{task}/contrast.parquet" for task in runs.outlier_tasks]
        if runs.outlier_tasks:  # which fine-tuned models have no outlier dimension at all: a finding, not a missing run
            inputs["outlier_dimensions"] = f"results/outliers/{model}/summary/dimensions.parquet"
        if states.PRETRAINED in runs.layer_mix:
            inputs["mix_words"] = f"results/layer_mix/{model}/{states.PRETRAINED}/words.parquet"
        if states.PRETRAINED in runs.probed:
            inputs["probe_words"] = f"results/probing/{model}/{states.PRETRAINED}/probe_words.parquet"
        return inputs

    def runs_read(self, jobs: Verdicted, model: str) -> dict[str, Any]:
        """What the claims script needs to read its inputs: the (task, seed) of each per-model file, the seeds each
        per-task table pools, and what each claimed stage did (ran, skipped by fitness.if_unfit, not run)."""
        runs, experiment = jobs.of(model), self.experiment
        skipped, sections = jobs.skipped_sections(model), jobs.sections(model)
        swept = states.FINETUNED in experiment.disabling.states()
        return {
            "classes": runs.dumped_fine_tuned if jobs.stage_runs(model, "patterns") else [],
            "changes": runs.attention_change,
            "pruned": runs.pruned,
            "swept_seeds": {task: runs.swept_seeds(task, states.FINETUNED) for task in experiment.tasks if swept},
            "pruned_seeds": {task: [s for t, s in runs.pruned if t == task] for task in experiment.tasks},
            "outlier_tasks": list(runs.outlier_tasks),
            "stages": {anchor: "skipped" if anchor in skipped else "ran" if sections[anchor].runs else "not run"
                       for anchor in experiment.claimed_sections()},
        }
