"""What a config decides, shared by every stage: the models, tasks and seeds, every fine-tuning run, the settings jobs
of several stages read, and :class:`Stage`, the base of each stage's declaration.

Each stage declares itself in its own package (``bertology_core/<stage>/stage.py``): its settings, the runs it makes
for a model (as fields of :class:`ModelRuns`, from the config and the fitness verdicts), its config checks, its
section of the report and the input lists of its rules. The workflow (``bertology_core.workflow.jobs``) binds them to
one :class:`Experiment` in the stages' order; a stage is then ``experiment.<stage>``.

Run keys are plain tuples, ``(task, state, seed)`` or ``(task, seed)``, because the rules pass them on to the workflow
scripts as params, and Snakemake decides whether params changed by their ``repr``. Torch-free and Snakemake-free."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bertology_core.data import states, tasks
from bertology_core.models import compatibility
from bertology_core.jobs.sections import FineTuned, Section, SectionRuns

TaskSeed = tuple[str, int]  # (task, seed): a model fine-tuned from the pre-trained encoder (state finetuned)
Subnetwork = tuple[str, int, str]  # (task, seed, network): one re-fine-tuned subnetwork of a pruned model
GateJob = tuple[str, int, str, str]  # (task, seed, weights, strength as paths spell it): one head-gate training
Verdicts = Mapping[tuple[str, str, str, int], bool]  # (model, task, state, seed) -> fit for analysis
Fit = Callable[[str, str, int], bool]  # (task, state, seed) -> whether the analyses use that model

# the fitness verdicts (a table: TABLE_FILES), which every summary reads to label its rows
FITNESS_TABLE = "results/fitness/fitness"
# where the treebank's files are downloaded to under treebank.url
TREEBANK_DOWNLOADED = "results/treebank/source"
# the stages that run whatever the config's stages list: the data, the models, fine-tuning and its verdicts, and
# what reports (the claims table and the page say which analysis stages were left out)
ALWAYS = ("data", "treebank", "models", "finetune", "fitness", "claims", "report")
# the stages that read the treebank: without one of them it is neither read nor downloaded
TREEBANK_READERS = ("probing", "layer_mix")
# the probed states that are no fine-tuned model (their own names; a fine-tuned one is <TASK>/finetuned/seed<N>)
UNTRAINED_PROBED = (states.PRETRAINED, states.RANDOM_WEIGHTS)


def task_seed(probed: str) -> TaskSeed:
    """(task, seed) of a probed model fine-tuned from the pre-trained encoder (``MRPC/finetuned/seed1``)."""
    task, _, seed = states.split_run_name(probed)
    return task, seed


# --- the runs of one model --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelRuns:
    """What every analysis stage runs for one model, under one set of verdicts (each field filled by the stage that
    declares it, :meth:`Stage.runs`): each list holds only analysed models (those fit, or every one under fitness.if_unfit
    warn), in the order the stage's inputs and params list them. :meth:`rows` is the same as a table."""

    dumps: list[tuple[str, str]]  # (task, dumped state) of every attention dump: pretrained, <state>/seed<N>
    attention_change: list[TaskSeed]  # fine-tuned models compared with the pre-trained encoder's dump
    linguistic_tasks: list[str]  # tasks whose language spaCy can tag
    sweeps: list[FineTuned]  # disabling sweeps
    greedy: list[FineTuned]  # sweeps that also get the greedy multi-head search
    pruned: list[TaskSeed]  # head importance, Michel et al.'s curve, lottery tickets
    subnetworks: list[Subnetwork]  # re-fine-tuned subnetworks of the pruned models
    probed: list[str]  # probed states: pretrained, random_weights, <TASK>/finetuned/seed<N>
    syntactic_heads: list[str]  # states whose heads are scored against the treebank
    gated: list[TaskSeed]  # pruned models that get L0 head gates
    gates: list[GateJob]  # every head-gate training
    outliers: list[TaskSeed]  # fine-tuned models whose outlier dimensions are disabled
    layer_mix: list[str]  # probed states that get Tenney et al.'s scalar mixes

    def rows(self) -> list[dict[str, Any]]:
        """One row per run: ``runs`` (the field), ``task``, ``state``, ``seed`` and ``key`` (the rest of a run's key:
        a subnetwork's name, a gate's weights and strength), each null where the run has none."""
        found = []
        for field in dataclasses.fields(self):
            for run in getattr(self, field.name):
                found.append({"runs": field.name, **_columns(field.name, run)})
        return found

    @property
    def dump_keys(self) -> list[str]:
        """``<task>/<dumped state>`` of every dump: the unit of the attention analyses (and of head roles)."""
        return [f"{task}/{dumped}" for task, dumped in self.dumps]

    @property
    def linguistic_keys(self) -> list[str]:
        """The dumps the linguistic stage scores: those of tasks whose language has a spaCy pipeline."""
        return [f"{task}/{dumped}" for task, dumped in self.dumps if task in self.linguistic_tasks]

    @property
    def dumped_fine_tuned(self) -> list[TaskSeed]:
        """(task, seed) of every dumped model fine-tuned from the pre-trained encoder."""
        return [(task, states.split_seeded(d)[1]) for task, d in self.dumps if states.dumped_state(d) == states.FINETUNED]

    @property
    def dumped_runs(self) -> list[FineTuned]:
        """(task, state, seed) of every dumped fine-tuned model (from the pre-trained encoder or from scratch)."""
        return [(task, *states.split_seeded(d)) for task, d in self.dumps if d != states.PRETRAINED]

    @property
    def disabling_task_states(self) -> list[tuple[str, str]]:
        """(task, state) of every per-task statistics job: those with at least one swept seed."""
        return list(dict.fromkeys((task, state) for task, state, _ in self.sweeps))

    @property
    def gate_curves(self) -> list[TaskSeed]:
        """(task, seed) of every pruned model with head gates: Michel et al.'s curve of each is scored beside them."""
        return sorted({(task, seed) for task, seed, _, _ in self.gates})

    @property
    def greedy_task_seeds(self) -> list[TaskSeed]:
        """(task, seed) of every greedy search, in order (what the disabling summary reads them by)."""
        return [(task, seed) for task, _, seed in self.greedy]

    def swept_seeds(self, task: str, state: str) -> list[int]:
        return [seed for t, i, seed in self.sweeps if (t, i) == (task, state)]

    @property
    def probed_fine_tuned(self) -> list[TaskSeed]:
        """(task, seed) of every probed model fine-tuned from the pre-trained encoder."""
        return [task_seed(state) for state in self.probed if state not in UNTRAINED_PROBED]

    @property
    def layer_mix_fine_tuned(self) -> list[FineTuned]:
        return [(t, states.FINETUNED, s) for t, s in self.probed_fine_tuned
                if states.run_name(t, states.FINETUNED, s) in self.layer_mix]

    @property
    def outlier_tasks(self) -> list[str]:
        return list(dict.fromkeys(task for task, _ in self.outliers))

    def outlier_seeds(self, task: str) -> list[int]:
        return [seed for t, seed in self.outliers if t == task]

    @property
    def outlier_seeds_by_task(self) -> dict[str, list[int]]:
        """Task -> its disabled seeds: the runs the outliers summary labels with their verdicts."""
        return {task: self.outlier_seeds(task) for task in self.outlier_tasks}

    def analysed_seeds(self, task: str) -> list[int]:
        """Every seed of a task whose model fine-tuned from the pre-trained encoder some per-head stage analyses (the
        head atlas labels their rows with the verdicts)."""
        seeds = {seed for t, seed in self.dumped_fine_tuned if t == task}
        seeds |= {seed for t, state, seed in self.sweeps if t == task and state == states.FINETUNED}
        seeds |= {seed for t, seed in self.pruned if t == task}
        seeds |= {seed for t, seed in self.probed_fine_tuned if t == task}
        return sorted(seeds)

    def fine_tuned_candidates(self) -> set[TaskSeed]:
        """(task, seed) of every model fine-tuned from the pre-trained encoder that some stage analyses: under
        :attr:`Experiment.every_model_fit`, those whose verdict decides something."""
        seeded = [task_seed(s) for s in self.syntactic_heads if s not in UNTRAINED_PROBED]
        sweeps = [(t, seed) for t, state, seed in self.sweeps if state == states.FINETUNED]
        return {*self.dumped_fine_tuned, *self.attention_change, *sweeps, *self.pruned, *self.probed_fine_tuned, *seeded,
                *self.outliers}


def _columns(field: str, run: Any) -> dict[str, Any]:
    """A run's key as the jobs table's columns (task, state, seed, key)."""
    row: dict[str, Any] = {"task": None, "state": None, "seed": None, "key": None}
    if isinstance(run, str):  # a task (linguistic_tasks) or a probed state
        if field == "linguistic_tasks":
            return row | {"task": run}
        if run in UNTRAINED_PROBED:
            return row | {"state": run}
        task, state, seed = states.split_run_name(run)
        return row | {"task": task, "state": state, "seed": seed}
    if field == "dumps":
        task, dumped = run
        if dumped == states.PRETRAINED:
            return row | {"task": task, "state": dumped}
        state, seed = states.split_seeded(dumped)
        return row | {"task": task, "state": state, "seed": int(seed)}
    if len(run) == 3 and isinstance(run[1], str) and not isinstance(run[2], str):  # (task, state, seed)
        return row | {"task": run[0], "state": run[1], "seed": int(run[2])}
    # (task, seed, *rest): state finetuned
    return row | {"task": run[0], "state": states.FINETUNED, "seed": int(run[1]), "key": "/".join(map(str, run[2:])) or None}


# --- a stage's declaration ---------------------------------------------------------------------------------------


class Verdicted(Protocol):
    """The runs under one set of verdicts (bertology_core.workflow.jobs.Jobs), as the stages read them."""

    experiment: Experiment

    def of(self, model: str) -> ModelRuns: ...

    def stage_runs(self, model: str, anchor: str) -> bool: ...

    def sections(self, model: str) -> dict[str, SectionRuns]: ...

    def section_shows(self, model: str) -> dict[str, list[FineTuned]]: ...

    def skipped_sections(self, model: str) -> list[str]: ...

    def shown_summaries(self, model: str) -> list[tuple[str, str]]: ...


def sample_share(examples: int | None, path: Any) -> float:
    """The share of a Parquet file's rows a job scores when it samples ``examples`` of them (None: all); 1 where the
    file does not exist yet (a plan made before the data: the most it may be)."""
    if examples is None or path is None or not Path(str(path)).exists():
        return 1.0
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(str(path)).metadata.num_rows
    return min(1.0, examples / rows) if rows else 1.0


class Stage:
    """A stage of the workflow, declared in its package (``bertology_core/<stage>/stage.py``): one name (its rule
    file, package, results folder, report section and config key), the section it shows, whether the claims read it,
    its settings, the runs it makes, the problems with its config choices, the input lists of its rules and how their
    memory and time grow. A stage without a package of its own (data, treebank, models) is this base: a name and nothing else."""

    name: ClassVar[str] = ""
    # its report section, if it shows one
    section: ClassVar[Section | None] = None
    # whether the claims (bertology_core/claims/) read its results: a stage they do not read does not rerun them
    claimed: ClassVar[bool] = False
    # how its rules' memory grows with the megabytes a job reads (bertology_core/jobs/needs.py, MEMORY_KINDS), where
    # not as by default: a job that reads a model takes its data a batch at a time (no growth), any other holds it
    memory: ClassVar[Mapping[str, str]] = {}
    # the stages whose runs it reads: asking for it in the config's stages brings them (Experiment.selected)
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self, experiment: Experiment, name: str | None = None) -> None:
        self.experiment = experiment
        self.config = experiment.config
        if name is not None:
            self.name = name

    def settings(self) -> Mapping[str, Any]:
        """Its config section (``config[<stage>]``)."""
        return self.config[self.name]

    def passes(self, rule: str, wildcards: Mapping[str, str], inputs: Mapping[str, Any]) -> float | None:
        """The most times a job of one of its rules (``wildcards`` and named ``inputs``: the job's) may go over what it
        reads, as its settings allow (a probe's epochs, a greedy search's steps; a share below 1 where it scores a sample
        of its data): a factor of the job's time request (bertology_core/jobs/needs.py). None: not one of its rules, or
        once."""
        return None

    def passes_run(self, rule: str, wildcards: Mapping[str, str], outputs: Mapping[str, str]) -> float | None:
        """How many times a finished job went over what it read, from its named ``outputs`` (early stopping ends a probe
        before its most epochs): what its time is fitted on. None: :meth:`passes`."""
        return None

    def problems(self) -> list[str]:
        """Every choice of its config section the workflow cannot run, one line each with the fix."""
        return []

    def fine_tuned_seeds(self, task: str, state: str, probing: bool) -> set[int]:
        """Seeds it needs ``task`` fine-tuned with into ``state`` beyond the top-level seeds (``probing``: whether the
        probing stage's count)."""
        return set()

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """Its fields of :class:`ModelRuns` for ``model`` (``found``: those of the stages before it)."""
        return {}

    def early_targets(self, model: str) -> list[str]:
        """Targets of ``all`` that rest on no fine-tuned model (scheduled before the fitness checkpoint is done)."""
        return []

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        """Whether its section runs for ``model``, and what it shows (by default: whenever asked, no fine-tuned model)."""
        return SectionRuns(True, [], None)

    def trained_states_read(self) -> set[str]:
        """The trained states (beyond ``finetuned``) whose fine-tuned models it reads: where the config's stages leave
        it out, those are not fine-tuned for it (:meth:`Experiment.fine_tuned_states`)."""
        return set()


# --- the config's shared choices ----------------------------------------------------------------------------------


class Experiment:
    """Everything the validated config decides by itself, shared by the stages: models, tasks, seeds, the fine-tuning
    runs, the settings read by jobs of several stages. ``repo``: where relative paths of the config point. The stages
    (``stages``, in the pipeline's order) are bound by the workflow; each is also an attribute (``experiment.pruning``)."""

    def __init__(self, config: Mapping[str, Any], repo: str | Path) -> None:
        self.config = config
        self.repo = Path(repo)
        self.models: dict[str, str] = {m["name"]: m["spec"] for m in config["models"]}
        # model -> task -> the already fine-tuned classifiers given for it (models[].finetuned: the key is the state
        # they fill), the i-th for the task's i-th fine-tuned seed: no fine-tuning job runs for those
        self.given: dict[str, dict[str, list[str]]] = {
            m["name"]: {task: [found] if isinstance(found, str) else list(found)
                        for task, found in (m.get(states.FINETUNED) or {}).items()}
            for m in config["models"]}
        self.tasks: list[str] = list(config["tasks"])
        # every declared task (the shipped ones, then task_declarations), or why the declarations cannot be read
        try:
            self.declared: dict[str, tasks.Task] = tasks.declared_tasks(config["task_declarations"], self.shipped_dirs(), self.repo)
            self.declaration_problems: list[str] = []
        except tasks.DataError as error:
            self.declared, self.declaration_problems = {}, [str(error)]
        self.seeds: list[int] = list(config["seeds"])
        # fine-tuning's states this config runs (bertology_core.data.states), and those a fine-tuning job trains
        self.finetune_states: list[str] = list(config["finetune"]["states"])
        self.trained_states: list[str] = [s for s in self.finetune_states if s in states.TRAINED]
        treebank = config["treebank"]
        self.treebank_splits: list[str] = list(treebank["files"]) if treebank["dir"] or treebank["url"] else []
        self.stages: dict[str, Stage] = {}
        self._under: Callable[[Experiment, Verdicts | None], Verdicted] | None = None
        # examples of each (task, split) of local files, as read (by the checks, or :meth:`source_rows`)
        self.rows_read: dict[tuple[str, str], int] = {}

    def bind(self, declared: Iterable[tuple[str, type[Stage]]],
             under: Callable[[Experiment, Verdicts | None], Verdicted]) -> Experiment:
        """Bind each (name, declaration) in the pipeline's order, and how the runs under verdicts are built
        (``under(experiment, verdicts)``); returns itself. A declared stage is also an attribute (``experiment.pruning``),
        which must not hide one of the experiment's own."""
        self.stages = {name: declaration(self, name) for name, declaration in declared}
        for name, stage in self.stages.items():
            if type(stage) is Stage:  # no declaration of its own (data, treebank, models): nothing to look up
                continue
            if hasattr(self, name):
                raise TypeError(f"the stage {name!r} would hide Experiment.{name}. Fix: rename one of them.")
            setattr(self, name, stage)
        self._under = under
        # the config's stages and those they read; every other stage is left out of the plan
        asked = self.config.get("stages")
        self.selected: set[str] = set(self.stages)
        if asked is not None:
            self.selected = {name for name in self.stages if name in ALWAYS}
            pending = [name for name in asked if name in self.stages]
            while pending:
                name = pending.pop()
                if name not in self.selected:
                    self.selected.add(name)
                    pending += list(self.stages[name].reads)
            # the treebank is read by the stages that probe it alone
            if not self.selected & set(TREEBANK_READERS):
                self.treebank_splits = []
        return self

    def runs_stage(self, name: str) -> bool:
        """Whether the config's stages (with those they read) include ``name``."""
        return name in self.selected

    def left_out(self) -> list[str]:
        """The analysis stages the config's stages leave out, in the pipeline's order."""
        return [name for name in self.stages if name not in self.selected]

    def _bound(self) -> dict[str, Stage]:
        """The stages; an experiment whose stages are not bound would answer for the top-level seeds only."""
        if self._under is None:
            raise RuntimeError("the stages are not bound: build the experiment with bertology_core.workflow.jobs.experiment")
        return self.stages

    # -- paths --

    def repo_path(self, path: str | Path) -> Path:
        """Relative config paths are relative to the repository, wherever snakemake runs."""
        path = Path(path).expanduser()
        return path if path.is_absolute() else self.repo / path

    def shipped_dirs(self) -> dict[str, Path]:
        """The folders the shipped declarations' files are under, by their key in the config's data section."""
        return {key: self.repo_path(self.config["data"][key]) for key in tasks.SHIPPED.values()}

    def treebank_file(self, split: str) -> Path:
        """A split's CoNLL-U file: in treebank.dir, or downloaded from treebank.url (rule download_treebank)."""
        name = self.config["treebank"]["files"][split]
        treebank = self.config["treebank"]
        return Path(TREEBANK_DOWNLOADED) / name if treebank["url"] else self.repo_path(treebank["dir"]) / name

    @staticmethod
    def run_dir(model: str, task: str, state: str, seed: int | str) -> str:
        return f"results/finetune/{model}/{task}/{state}/seed{seed}"

    @staticmethod
    def tokens(model: str, task: str, max_length: int) -> str:
        """A task's splits tokenised with a model's tokenizer, cut at ``max_length`` (rule tokenize_data)."""
        return f"results/data/{task}/tokens/{model}.max{max_length}.parquet"

    # -- the tasks --

    def task(self, name: str) -> tasks.Task:
        return self.declared[name]

    def source(self, task: str) -> tasks.Files | tasks.Hub:
        """Where a task's examples are read from: its files, or its Hugging Face dataset (data.source picks where a
        task declares both)."""
        return self.task(task).source(self.config["data"]["source"])

    def task_files(self, task: str) -> dict[str, str]:
        """prepare_data's input: every split's local file, keyed ``split_<split>``, so an edited file reruns what uses
        it (none for Hub data). Every split, as each job checks that no example of its split is in another."""
        source = self.source(task)
        return {f"split_{split}": str(source.path(split)) for split in source.splits} if isinstance(source, tasks.Files) else {}

    def task_declaration(self, wildcards: Any) -> dict[str, Any]:
        """prepare_data's params: what the prepared data depends on in the task's declaration, as written (the source
        it is read from, its labels or range, the release's known flaws), so that changing it reruns the task's data
        and what reads it, and changing anything else (metrics, language, the other source) does not."""
        name = wildcards.task
        raw = self.config["task_declarations"].get(name) or tasks.shipped_declarations()[name]
        kind = "files" if isinstance(self.source(name), tasks.Files) else "hub"
        kept = ("kind", "scheme", "labels", "range", "known_empty", "known_overlap", "overlap")
        return {"name": name, "declaration": {key: raw[key] for key in kept if key in raw} | {kind: raw[kind]}}

    def task_meaning(self, wildcards: Any) -> dict[str, Any]:
        """A job's params: what its task's labels mean and how it is scored (tasks.Task.meaning)."""
        return self.task(wildcards.task).meaning()

    def task_meanings(self) -> dict[str, dict[str, Any]]:
        """Every configured task's meaning, by name: the params of the jobs that gather tasks."""
        return {name: self.task(name).meaning() for name in self.tasks}

    # -- the data and the fine-tuning recipe every model job reads --

    def data_limits(self, task: str) -> dict[str, int | None]:
        """max_train_examples / max_eval_examples for one task: defaults, then per-task overrides."""
        data = self.config["data"]
        limits = {"max_train_examples": data["max_train_examples"], "max_eval_examples": data["max_eval_examples"]}
        limits.update(data["per_task"].get(task, {}))
        return limits

    def source_rows(self, task: str, split: str) -> int | None:
        """How many examples a task's split has in its local files (as the checks read them; None for a Hub
        dataset, or files that cannot be read): what a job's requests count before the prepared split exists."""
        if (task, split) not in self.rows_read:
            source = self.source(task)
            if isinstance(source, tasks.Hub):
                return None
            try:
                self.rows_read[(task, split)] = tasks.read_split(self.task(task), split, source).height
            except tasks.DataError:
                return None
        return self.rows_read[(task, split)]

    def max_examples(self, task: str, split: str) -> int | None:
        return self.data_limits(task)["max_train_examples" if split == "train" else "max_eval_examples"]

    def eval_splits(self, task: str) -> list[str]:
        return list(self.task(task).eval_splits)

    def eval_inputs(self, task: str) -> list[str]:
        return [f"results/data/{task}/{split}.parquet" for split in self.eval_splits(task)]

    def task_data(self, task: str) -> list[str]:
        """Every prepared split of a task, train first (what its token file holds)."""
        return [f"results/data/{task}/train.parquet", *self.eval_inputs(task)]

    def hyperparameters(self, task: str, state: str) -> dict[str, Any]:
        """Fine-tuning hyper-parameters of one job: defaults, then per-task, then per-state overrides. Passed as
        params, so changing one task's value reruns exactly that task's jobs."""
        finetune = self.config["finetune"]
        values = dict(finetune["hyperparameters"])
        values.update(finetune["per_task"].get(task, {}))
        values.update(finetune["per_state"].get(state, {}))
        return values

    def max_length(self, task: str, state: str) -> int:
        """Where a model's inputs are cut: as it was trained."""
        return self.hyperparameters(task, state)["max_length"]

    def model_requirements(self) -> dict[str, Any]:
        """What the config asks of every model: each task's label count (1: regression) and every max_length it sets,
        by config key (the models must have that many positions)."""
        finetune = self.config["finetune"]
        lengths = {}
        if "max_length" in finetune["hyperparameters"]:
            lengths["finetune.hyperparameters.max_length"] = finetune["hyperparameters"]["max_length"]
        for section in ("per_task", "per_state"):
            for name, values in finetune[section].items():
                if "max_length" in values:
                    lengths[f"finetune.{section}.{name}.max_length"] = values["max_length"]
        if self.treebank_splits:
            lengths["probing.max_length"] = self.config["probing"]["max_length"]
        return {"label_counts": {task: self.task(task).num_labels for task in self.tasks}, "max_lengths": lengths}

    # -- the fine-tuning runs: the top-level seeds, and those the stages add --

    def finetuned_seeds(self, task: str, state: str = states.FINETUNED, probing: bool = True) -> list[int]:
        """Every seed a task is fine-tuned with into ``state``: the top-level seeds and the extra seeds the stages need
        (the disabling sweeps', pruning's and probing's; ``probing``: with probing's, which default to these)."""
        seeds = set(self.seeds)
        for name, stage in self._bound().items():
            if self.runs_stage(name):
                seeds |= stage.fine_tuned_seeds(task, state, probing)
        return sorted(seeds)

    def fine_tuned_states(self) -> list[str]:
        """The trained states the config fine-tunes: ``finetuned``, and another only where a stage it runs reads it
        (every one under the default stages: the baselines table)."""
        read = {states.FINETUNED}
        for name, stage in self._bound().items():
            if self.runs_stage(name):
                read |= stage.trained_states_read()
        return [state for state in self.trained_states if state in read]

    def fine_tuned_runs(self) -> list[FineTuned]:
        """Every (task, state, seed) the config fine-tunes (or is given: :meth:`given_runs`): the top-level seeds of
        every trained state, and the extra seeds of the disabling sweeps, pruning and probing."""
        runs = {(task, state, seed) for task in self.tasks for state in self.fine_tuned_states() for seed in self.finetuned_seeds(task, state)}
        return sorted(runs, key=lambda run: (self.tasks.index(run[0]), run[1], run[2]))

    # -- already fine-tuned classifiers, given in the config --

    def given_runs(self) -> dict[tuple[str, str, int], str]:
        """(model, task, seed) -> the spec of the fine-tuned classifier given for that run (models[].finetuned): the
        i-th given for a task fills its i-th fine-tuned seed. Only tasks the config runs; :meth:`given_problems` says
        where the counts differ."""
        found = {}
        for model, by_task in self.given.items():
            for task, specs in by_task.items():
                if task in self.tasks:
                    found.update({(model, task, seed): spec for seed, spec in zip(self.finetuned_seeds(task), specs)})
        return found

    def given_pattern(self) -> str:
        """A regular expression of the run folders the given classifiers fill (``<model>/<task>/finetuned/seed<N>/``),
        for the wildcard constraints that keep fine-tuning out of them; empty when none."""
        return "|".join(re.escape(f"{model}/{task}/{states.FINETUNED}/seed{seed}/") for model, task, seed in self.given_runs())

    def given_problems(self) -> list[str]:
        """Every models[].finetuned the workflow cannot use: a task it does not run, another count of classifiers
        than the task has fine-tuned seeds, a config that fine-tunes no ``finetuned`` state."""
        found = []
        for model, by_task in self.given.items():
            for task, specs in by_task.items():
                key = f"models[{model}].finetuned.{task}"
                if task not in self.tasks:
                    close = [name for name in self.tasks if name.lower() == task.lower()]
                    found.append(f"{key}: {task} is not in tasks {self.tasks}"
                                 f"{f' (did you mean {close[0]!r}?)' if close else ''}. Fix: add {task} to tasks, or drop "
                                 f"{task} from models[{model}].finetuned.")
                    continue
                if states.FINETUNED not in self.trained_states:
                    found.append(f"{key}: finetune.states {self.finetune_states} has no {states.FINETUNED}, the state a "
                                 f"given classifier fills. Fix: add {states.FINETUNED} to finetune.states.")
                    continue
                for spec in specs:
                    folder = compatibility.spec_folder(spec, self.repo)
                    if folder is not None and not folder.is_dir():
                        found.append(f"{key}: {spec!r} names the folder {folder}, which does not exist (relative paths: to "
                                     "this repository). Fix: point it at the folder save_pretrained() wrote.")
                    elif folder is not None and not compatibility.is_hf_folder(folder):
                        found.append(f"{key}: {spec!r} names the folder {folder}, which has no config.json or no "
                                     "*.safetensors weights. Fix: point it at a folder save_pretrained() wrote with "
                                     "safetensors (the default; .bin pickles are refused).")
                seeds = self.finetuned_seeds(task)
                if len(specs) != len(seeds):
                    adding = [name for name, stage in self._bound().items() if self.runs_stage(name)
                              and stage.fine_tuned_seeds(task, states.FINETUNED, True) - set(self.seeds)]
                    why = f"seeds {self.seeds}" + (f", with the extra seeds of {', '.join(adding)}" if adding else "")
                    found.append(f"{key} gives {len(specs)} classifier(s), but {task} is fine-tuned with {len(seeds)} "
                                 f"seed(s) {seeds} ({why}; the stages the config's stages leave out add none); the i-th "
                                 f"classifier fills the i-th seed. Fix: give {len(seeds)} classifier(s), or set seeds (and "
                                 f"the stages' seeds) to {len(specs)} seed(s).")
        return found

    def named_task_problems(self, task_lists: Mapping[str, list[str] | None],
                            state_lists: Mapping[str, list[str] | None] | None = None) -> list[str]:
        """Every list that picks tasks (or <TASK>/finetuned/seed<N> states) for one stage must name tasks in ``tasks``.
        (per_task overrides are not such lists: configuration.per_task_problems checks them.)"""
        named = [(key, task, task) for key, tasks in task_lists.items() for task in tasks or []]
        named += [(key, state, states.split_run_name(state)[0]) for key, chosen in (state_lists or {}).items()
                  for state in chosen or [] if states.is_run_name(state)]
        return [f"{key} names {name}, {'which' if name == task else f'whose task {task}'} is not in tasks {self.tasks}. "
                f"Fix: add {task} to tasks, or drop {name} from {key}." for key, name, task in named if task not in self.tasks]

    # -- the runs under verdicts, and what rests on none --

    def jobs(self, verdicts: Verdicts | None = None) -> Verdicted:
        """The runs under ``verdicts`` (None: every model counts as fit)."""
        self._bound()
        assert self._under is not None
        return self._under(self, verdicts)

    @functools.cached_property
    def every_model_fit(self) -> Verdicted:
        """What the config runs were every fine-tuned model fit: the answer under fitness.if_unfit warn, and the only
        question that can be asked while the workflow is parsed (before the fitness checkpoint)."""
        return self.jobs(None)

    @functools.cached_property
    def needs_verdicts(self) -> bool:
        """Whether the fitness verdicts decide what runs: fitness.if_unfit is skip or fail and some analysis would use a
        model fine-tuned from the pre-trained encoder. Otherwise every_model_fit is the answer and nothing waits for
        the fitness checkpoint."""
        if self.config["fitness"]["if_unfit"] == "warn":
            return False
        return any(self.every_model_fit.of(model).fine_tuned_candidates() for model in self.models)

    def early_targets(self) -> list[str]:
        """Targets of ``all`` that rest on no fine-tuned model (the treebank, the pre-trained encoder's dumps, probes and
        syntactic heads), listed apart so that they are scheduled before the fitness checkpoint is done."""
        targets = []
        for model in self.models:
            targets += [f"results/treebank/{split}.parquet" for split in self.treebank_splits]
            for name, stage in self._bound().items():
                if self.runs_stage(name):
                    targets += stage.early_targets(model)
        return list(dict.fromkeys(targets))

    def sections(self) -> list[Section]:
        """Every stage's section, in the stages' order."""
        return [stage.section for stage in self._bound().values() if stage.section is not None]

    def section_summaries(self) -> dict[str, list[tuple[str, str]]]:
        """Section anchor -> (kind, stem) of every item the page shows: the page's content, in order."""
        return {section.anchor: section.shown() for section in self.sections()}

    def section_titles(self) -> dict[str, str]:
        """Section anchor -> the page's title of the section, where its stage gives one."""
        return {section.anchor: section.title for section in self.sections() if section.title}

    def table_texts(self) -> dict[str, tuple[str, str]]:
        """Stem (with ``{model}``) -> (title, note) the page shows with a table, where its stage gives them."""
        return {summary.stem: (summary.title, summary.note) for section in self.sections() for summary in section.summaries
                if summary.title or summary.note}

    def claimed_sections(self) -> list[str]:
        """The sections whose results the claims read (not every section: a new stage does not rerun the claims)."""
        return [stage.name for stage in self.stages.values() if stage.claimed]
