"""Which jobs a config makes, as data: every stage's declaration bound to one experiment, and its runs under the
fitness verdicts as one table.

Each stage declares itself in its own package (``bertology_core/<stage>/stage.py``, a
:class:`~bertology_core.jobs.experiment.Stage`): its settings, its runs, its config checks, its section and the input
lists of its rules. This module holds the one list of stages, in the pipeline's order, and two objects, so that the
type says what waits for the fitness checkpoint:

- the :class:`~bertology_core.jobs.experiment.Experiment` (:func:`experiment`), built once when the workflow is parsed
  from the validated config alone, its stages bound (``experiment.pruning``). Nothing there depends on whether a
  fine-tuned model turned out fit, so fine-tuning and everything before the checkpoint read only it.
- :class:`Jobs`, the experiment under one set of fitness verdicts: what every stage runs for each model
  (:class:`~bertology_core.jobs.experiment.ModelRuns`; :meth:`Jobs.table` as rows), what each report section shows and
  the targets of ``all``. Under ``fitness.if_unfit: warn`` (or with no fine-tuned model for a verdict to decide on) the
  verdicts change nothing and ``experiment.every_model_fit`` is the answer; under ``skip`` and ``fail`` the workflow
  builds a Jobs from the fitness checkpoint's table (rules/common.smk, ``jobs()``).

The workflow's rule files only look things up here and in the stages; the unit tests (tests/test_jobs.py) build the
same objects from a config file without Snakemake. This module imports neither torch nor Snakemake; a run that succeeds writes its
jobs table to ``results/jobs.parquet`` (the Snakefile's onsuccess).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, Experiment, ModelRuns, Stage, Verdicts
from bertology_core.jobs.sections import FineTuned, Section, SectionRuns, Summary
from bertology_core.summaries.files import TABLE_FILES
from bertology_core.workflow import configuration

# every stage, by its one name: its rule file (rules/<stage>.smk, which the Snakefile includes), its package
# (bertology_core/<stage>/, whose stage.py declares it, where it has code of its own), its folder under results/, its
# report section and its config key. The order is the pipeline's: a stage's runs may read those of the stages before
# it, and the report's sections are declared in it (report/layout.yaml orders how they look).
STAGES = ("data", "treebank", "models", "finetune", "fitness", "baselines", "attention", "patterns", "attention_change",
          "linguistic", "disabling", "pruning", "probing", "head_roles", "outliers", "layer_mix", "claims", "report")


# the stages whose rules need nothing beyond the experiment's shared lookups: no declaration of their own
UNDECLARED = ("data", "treebank", "models")
# their rules' memory where it grows otherwise than by default (Stage.memory): the token writer reads the tokenizer
# (a model's folder) and holds its splits' text whole, writing their tokens a chunk at a time
UNDECLARED_MEMORY = {"tokenize_data": "holds"}


def memory_declared() -> dict[str, str]:
    """How each rule's memory grows with what its jobs read, where its stage declares it (``Stage.memory``)."""
    return UNDECLARED_MEMORY | {rule: kind for name in STAGES for rule, kind in declaration(name).memory.items()}


def passes(experiment: Experiment) -> Callable[[str, Mapping[str, str], Mapping[str, Any]], float]:
    """The most times a job (its rule, wildcards and named inputs) may go over what it reads, where its stage's
    settings say (``Stage.passes``); else once."""

    def of(rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float:
        for stage in experiment.stages.values():
            found = stage.passes(rule, wildcards, inputs)
            if found is not None:
                return float(found)
        return 1.0
    return of


def passes_run(experiment: Experiment, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any],
               outputs: Mapping[str, str]) -> float:
    """How many times a finished job went over what it read (``Stage.passes_run``, from its named ``outputs``; else
    :func:`passes`)."""
    for stage in experiment.stages.values():
        found = stage.passes_run(rule, wildcards, outputs)
        if found is not None:
            return float(found)
    return passes(experiment)(rule, wildcards, inputs)


def declaration(name: str) -> type[Stage]:
    """The stage's declaration: the Stage class of ``bertology_core/<name>/stage.py``, or the bare :class:`Stage` for
    one of :data:`UNDECLARED`."""
    if name in UNDECLARED:
        return Stage
    module_name = f"bertology_core.{name}.stage"
    if importlib.util.find_spec(f"bertology_core.{name}") is None or importlib.util.find_spec(module_name) is None:
        raise TypeError(f"the stage {name!r} has no declaration. Fix: write bertology_core/{name}/stage.py with its Stage "
                        "class (docs/development.md, 'Adding a stage').")
    module = importlib.import_module(module_name)
    found = [value for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, Stage) and value.__module__ == module_name]
    if len(found) != 1:
        raise TypeError(f"{module_name} must declare one Stage class, found {[c.__name__ for c in found]}")
    return found[0]


def experiment(config: Mapping[str, Any], repo: str | Path) -> Experiment:
    """The validated config's experiment, every stage bound to it in the pipeline's order."""
    return Experiment(config, repo).bind(((name, declaration(name)) for name in STAGES), Jobs)


# --- the config's choices ----------------------------------------------------------------------------------------


def problems(experiment: Experiment) -> list[str]:
    """Every choice of the config that the workflow cannot run, one line each (empty when none): names that repeat,
    per-task settings of tasks not run, then each stage's (runs chosen that the config does not make, intervals at
    another level than the claims read them). Checked when the workflow is parsed, before any job, rather than a task
    silently dropped or fine-tuned anyway."""
    config = experiment.config
    found = []
    names = [m["name"] for m in config["models"]]
    if len(set(names)) != len(names):
        found.append(f"config 'models': the name(s) {sorted({n for n in names if names.count(n) > 1})} are given "
                     "to more than one entry. Fix: give every model a unique name.")
    found += experiment.declaration_problems + [
        f"config 'tasks' names {task!r}, which is not declared{configuration.did_you_mean(task, experiment.declared)}. Fix: "
        f"declare it under task_declarations (see docs/data.md, 'Your own task'), or choose from {sorted(experiment.declared)}."
        for task in experiment.tasks if task not in experiment.declared and experiment.declared]
    found += configuration.per_task_problems(config, experiment.tasks, declared=experiment.declared)
    if config["treebank"]["dir"] and config["treebank"]["url"]:
        found.append("config 'treebank': both dir and url are set. Fix: set the one the files come from, the other to null.")
    found += experiment.given_problems()
    for name, stage in experiment.stages.items():
        if experiment.runs_stage(name):
            found += stage.problems()
    return found


def warnings(experiment: Experiment) -> list[str]:
    """What the config asks for that is ignored, one line each: said when the workflow is parsed, nothing stops."""
    return configuration.per_task_ignored(experiment.config, experiment.tasks, experiment.declared)


def summary(experiment: Experiment, section: str, stem: str) -> Summary:
    """The summary of ``section`` at ``stem`` (under results/, with ``{model}``): what a rule's outputs write. A
    ``KeyError`` names both when the stage does not declare it, so that a rule and its stage cannot drift."""
    declared = next((s for s in experiment.sections() if s.anchor == section), Section(section, ()))
    for candidate in declared.summaries:
        if candidate.stem == stem:
            return candidate
    raise KeyError(f"section {section!r} declares no summary at {stem!r} (bertology_core/{section}/stage.py)")


def section_texts_missing(experiment: Experiment) -> list[str]:
    """The sections with no text (report/sections/<anchor>.rst): the page's intro, and the caption Snakemake's report
    needs for the section's files."""
    return [section.anchor for section in experiment.sections()
            if not (experiment.repo / "report" / "sections" / f"{section.anchor}.rst").is_file()]


# --- the runs under verdicts -------------------------------------------------------------------------------------


class Jobs:
    """An :class:`Experiment` under one set of fitness verdicts: what every stage runs, what each report section
    shows and the targets of ``all``."""

    def __init__(self, experiment: Experiment, verdicts: Verdicts | None = None) -> None:
        self.experiment = experiment
        self.config = experiment.config
        self.verdicts = verdicts
        self._models: dict[str, ModelRuns] = {}
        self._declared_by: dict[str, str] = {}

    def analysed(self, model: str, task: str, state: str, seed: int) -> bool:
        """Whether the analyses use the model fine-tuned into ``state`` with ``seed``: always under warn, and for the
        from-scratch baselines; under skip only if it is fit; under fail the fitness checkpoint itself stops the run
        if a model is unfit, so what remains is fit."""
        if self.verdicts is None or self.config["fitness"]["if_unfit"] == "warn" or state != states.FINETUNED:
            return True
        return self.verdicts[(model, task, state, int(seed))]

    def of(self, model: str) -> ModelRuns:
        """What every stage runs for ``model`` (computed on first use): each stage's fields, in the stages' order."""
        if model not in self._models:
            fit = functools.partial(self.analysed, model)
            found: dict[str, Any] = {}
            for name, stage in self.experiment.stages.items():
                fields = stage.runs(model, fit, found)
                if not self.experiment.runs_stage(name):  # left out by the config's stages: its fields, empty
                    fields = {field: type(value)() for field, value in fields.items()}
                if taken := set(fields) & set(found):
                    raise TypeError(f"the stage {name!r} declares runs {sorted(taken)}, which "
                                    f"{sorted({self._declared_by[f] for f in taken})} declared first")
                self._declared_by.update(dict.fromkeys(fields, name))
                found.update(fields)
            self._models[model] = ModelRuns(**found)
        return self._models[model]

    def table(self) -> pl.DataFrame:
        """The jobs table: one row per run of every model (``model``, the ``stage`` that declares it, ``runs``: the
        kind of run, ``task``, ``state``, ``seed``, ``key``), what the rules look up."""
        rows = [{"model": model, "stage": self._declared_by[row["runs"]], **row}
                for model in self.experiment.models for row in self.of(model).rows()]
        schema = {"model": pl.String, "stage": pl.String, "runs": pl.String, "task": pl.String, "state": pl.String,
                  "seed": pl.Int64, "key": pl.String}
        return pl.DataFrame(rows, schema=schema)

    # -- the report's sections --

    def sections(self, model: str) -> dict[str, SectionRuns]:
        """Every section for ``model``, in the stages' order."""
        runs = self.of(model)
        return {stage.section.anchor: stage.section_runs(self, model, runs) if self.experiment.runs_stage(name)
                else SectionRuns(False, [], None)
                for name, stage in self.experiment.stages.items() if stage.section is not None}

    def stage_runs(self, model: str, anchor: str) -> bool:
        """Whether this config runs the stage behind a report section for ``model``."""
        return self.sections(model)[anchor].runs

    def section_shows(self, model: str) -> dict[str, list[FineTuned]]:
        """Section anchor -> the fine-tuned models (task, state, seed) whose results it shows: the report warns in
        each section that shows an unfit one."""
        return {anchor: section.shows for anchor, section in self.sections(model).items()}

    def skipped_sections(self, model: str) -> list[str]:
        """Sections whose stage would analyse fine-tuned models of ``model`` were every model fit, but has no fit model
        to run on (fitness.if_unfit: skip)."""
        would = self.experiment.every_model_fit.sections(model)
        now = self.sections(model)
        return sorted(anchor for anchor, section in would.items() if section.analyses_fine_tuned and not now[anchor].analyses_fine_tuned)

    def shown_summaries(self, model: str) -> list[tuple[str, str]]:
        """(kind, stem under results/) of every item the page shows for ``model``: those of the sections whose stage
        runs."""
        running = self.sections(model)
        return [(kind, stem.format(model=model)) for section in self.experiment.sections() if running[section.anchor].runs
                for kind, stem in section.shown()]

    def summary_files(self, model: str) -> list[str]:
        """Every file of every summary this config produces for ``model`` (under results/): ``all`` asks for these."""
        running = self.sections(model)
        return [path.format(model=model) for section in self.experiment.sections() if running[section.anchor].runs
                for path in section.paths()]

    # -- the targets of `all` --

    def targets(self, model: str) -> list[str]:
        """What ``all`` asks for of ``model``: the fitness table (which the page links), the treebank, every attention
        dump's summary (and its Parquet files under attention.keep_dumps, else temp()), the annotation page, the report
        page, and every file of every summary of the stages that run."""
        runs = self.of(model)
        targets = [FITNESS_TABLE + ext for ext in TABLE_FILES]
        targets += [f"results/treebank/{split}.parquet" for split in self.experiment.treebank_splits]
        targets += [f"results/attention/{model}/{key}.json" for key in runs.dump_keys]
        if self.config["attention"]["keep_dumps"]:
            targets += self.experiment.attention.every_dump_file(self, model)
        if self.experiment.runs_stage("patterns"):
            targets.append(f"results/patterns/{model}/annotate.html")
        targets.append("results/report/index.html")
        return targets + [f"results/{path}" for path in sorted(self.summary_files(model))]

    def all_targets(self) -> list[str]:
        return list(dict.fromkeys(target for model in self.experiment.models for target in self.targets(model)))

