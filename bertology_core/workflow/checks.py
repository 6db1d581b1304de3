"""The checks made when the workflow is parsed, before any job: the config's choices, then the input files it names.

Each check is a function of the :class:`~bertology_core.jobs.experiment.Experiment` that returns its problems, one line each
(empty when none). :class:`ParseChecks` runs them in order and tells the first kind that finds problems as one error
(rules/common.smk raises it): a later check may read what an earlier one found missing (the tasks' files, a model's
config.json), so it runs only once the earlier ones pass. Kinds, in order:

1. the config's choices (:func:`bertology_core.workflow.jobs.problems`);
2. the tasks' local files missing; 3. local CoNLL-U files missing;
4. package and folder models this config cannot use (a Hub id is checked by rule check_model);
5. report sections with no text;
6. the hand labels, every line (the first error stops: later files are not read);
7. only in the main process (a cluster job parses the workflow again and need not reread the data): the files'
   contents, every problem at once: the tasks' splits (a Hub dataset: whether it can be reached), CoNLL-U files, hand labels naming an example the dev split lacks.

The hand labels read by check 6 are kept (:attr:`ParseChecks.hand_labels`): the rules look them up. Tested without
Snakemake in tests/test_checks.py. This module imports neither torch nor Snakemake.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path

import polars as pl

from bertology_core.data import states, tasks, treebank
from bertology_core.models import compatibility
from bertology_core.patterns import label_tables
from bertology_core.jobs.experiment import Experiment
from bertology_core.patterns.stage import HandLabels, hand_labels as labels_read
from bertology_core.workflow import configuration, jobs

# a model's hand labels as read: what the rules look up, and every label frame by role, with its lines
LabelData = tuple[HandLabels, dict[str, pl.DataFrame]]


# --- the models --------------------------------------------------------------------------------------------------


def model_folder(experiment: Experiment, model: str) -> Path | None:
    """The folder of a package or folder spec (relative paths: to the repository); None for a Hub id (fetched and
    checked by rule check_model). A spec that names no folder raises compatibility.ModelSpecError."""
    spec = experiment.models[model]
    if spec.startswith(compatibility.PACKAGE_PREFIX):
        return compatibility.package_model_folder(spec.removeprefix(compatibility.PACKAGE_PREFIX))
    return compatibility.spec_folder(spec, experiment.repo)


def one_model_problems(experiment: Experiment, model: str) -> list[str]:
    """Why a package or folder model cannot be used by this config (architecture, tokenizer, label counts,
    positions). A Hub id is checked by rule check_model, before any other model job."""
    try:
        folder = model_folder(experiment, model)
    except compatibility.ModelSpecError as error:
        return [str(error)]
    if folder is None:
        return []
    if not folder.is_dir():
        return [f"folder {folder} does not exist. Fix: point spec at a save_pretrained() folder (relative paths are "
                "relative to the repository), or at a Hub id."]
    if not compatibility.is_hf_folder(folder):
        return [f"folder {folder} has no config.json or no *.safetensors weights. Fix: save the model with "
                "save_pretrained() (safetensors; .bin pickles are refused)."]
    return compatibility.model_problems(folder, **experiment.model_requirements())


def given_problems(experiment: Experiment, model: str) -> list[str]:
    """Why a fine-tuned classifier given as a folder or package (models[].finetuned) cannot stand for its task's
    fine-tuned model, where the model's spec is a folder or package too (else rule resolve_finetuned checks it, before
    any model job): its label count and names, positions and geometry (its tokenizer: by that rule)."""
    try:
        encoder = model_folder(experiment, model)
    except compatibility.ModelSpecError:
        return []  # said by one_model_problems
    if encoder is None or not compatibility.is_hf_folder(encoder):
        return []
    found = []
    for (name, task, seed), spec in experiment.given_runs().items():
        try:
            folder = compatibility.local_folder(spec, experiment.repo) if name == model else None
        except compatibility.ModelSpecError as error:  # a package that is not installed
            found.append(f"finetuned.{task} (seed {seed}) {spec!r}: {error}")
            continue
        if folder is None or not compatibility.is_hf_folder(folder):
            continue  # a Hub id, or a missing folder (Experiment.given_problems)
        declared = experiment.task(task)
        lengths = {"max_length": experiment.max_length(task, states.FINETUNED)}
        found += [f"finetuned.{task} (seed {seed}) {spec!r}: {problem}" for problem in
                  compatibility.given_classifier_problems(folder, task, declared.label_names, encoder, lengths, declared.kind)]
    return found


def model_problems(experiment: Experiment) -> list[str]:
    """Every problem of every model, each naming the model and its spec (and the fine-tuned classifiers given)."""
    return [f"{name}: spec {spec!r}: {problem}" for name, spec in experiment.models.items()
            for problem in one_model_problems(experiment, name) or given_problems(experiment, name)]


# --- the files the config names ----------------------------------------------------------------------------------


def missing_task_files(experiment: Experiment) -> list[Path]:
    """Every local file the tasks' sources declare that does not exist (none for Hub data)."""
    return [Path(path) for task in experiment.tasks for path in experiment.task_files(task).values() if not Path(path).is_file()]


def missing_treebank_files(experiment: Experiment) -> list[str]:
    """Every CoNLL-U file of treebank.dir that does not exist (downloads: fetched by download_treebank)."""
    if not experiment.config["treebank"]["dir"]:
        return []
    return [str(experiment.treebank_file(split)) for split in experiment.treebank_splits if not experiment.treebank_file(split).is_file()]


def missing_section_texts(experiment: Experiment) -> list[str]:
    """The report sections with no text (report/sections/<anchor>.rst)."""
    return jobs.section_texts_missing(experiment)


# --- the hand labels ---------------------------------------------------------------------------------------------


def read_hand_labels(experiment: Experiment, model: str) -> LabelData | None:
    """(HandLabels, every label frame by role, with its lines) of ``model``'s hand labels, or None: every line checked
    (for a package or folder model, layers and heads against its config.json); test labels must name maps the
    training labels do not, and a second pass or labeller a subset of them. A bad line raises
    label_tables.LabelsError."""
    settings = experiment.config["patterns"]
    if settings["labels_csv"]:
        files, card = {"labels": experiment.repo_path(settings["labels_csv"])}, None
    else:
        card = label_tables.find_label_card(experiment.repo_path(settings["labels_dir"]) if settings["labels_dir"] else None,
                                              experiment.models[model])
        if card is None:
            return None
        files = label_tables.LabelCard.read(card).files(card)
    folder = model_folder(experiment, model)
    geometry = compatibility.geometry(compatibility.read_config(folder)) if folder is not None else (None, None)
    frames = {role: label_tables.read_labels(path, *geometry) for role, path in files.items()}
    for role, frame in frames.items():
        # a label set may name tasks this config does not run, but not one that no declaration knows (a typo)
        for task, line in frame.filter(~pl.col("task").is_in(list(experiment.declared))).select("task", "line").head(1).iter_rows():
            raise label_tables.LabelsError(
                f"{files[role]}:{line}: field 'task' = {task!r} is not a declared task"
                f"{configuration.did_you_mean(task, experiment.declared)}. Fix: correct the name, or declare the task.")
    if "test" in frames:
        label_tables.check_test_disjoint(frames["labels"], frames["test"], files["test"], files["labels"])
    for role in ("second_pass", "second_labeller"):
        if role in frames:
            label_tables.check_relabelled_subset(frames["labels"], frames[role], files[role], files["labels"], role)
    named = pl.concat([frames[role].select("task", "state", "idx") for role in ("labels", "test") if role in frames])
    return labels_read(files, card, named.iter_rows()), frames


# --- the files' contents -----------------------------------------------------------------------------------------


def task_problems(experiment: Experiment) -> tuple[list[str], dict[str, pl.DataFrame]]:
    """(problems, dev split by task) of the tasks' local files: every split read and checked once (format, columns,
    texts, labels, ids, encoding), each problem naming the file and line, then across splits (an example in two). A
    Hub dataset's rows are checked by its prepare_data jobs, the first jobs of a run (:func:`hub_warnings`)."""
    problems, dev_frames = [], {}
    for name in experiment.tasks:
        task, source = experiment.task(name), experiment.source(name)
        if isinstance(source, tasks.Hub):
            continue
        frames = {}
        for split in task.splits:
            try:
                frames[split] = tasks.read_split(task, split, source)
                experiment.rows_read[(name, split)] = frames[split].height
            except tasks.DataError as error:
                problems.append(str(error))
        if len(frames) == len(task.splits):
            problems += tasks.check_splits(task, frames, source)
            dev_frames[name] = frames["dev"]
    return problems, dev_frames


def hub_warnings(experiment: Experiment) -> list[str]:
    """Why each task's Hugging Face dataset cannot be loaded here (offline and not in the cache, an unknown id,
    configuration or split), read from its metadata only. Warnings, not errors: a dry run (planning a cluster run on a
    login node, say) needs no data, and Snakemake does not tell a Snakefile whether it is one; a real run stops at its
    first jobs, prepare_data (priority 100, before any model job), with the same message."""
    return [problem for name in experiment.tasks if isinstance(source := experiment.source(name), tasks.Hub)
            for problem in hub_problems(experiment.task(name), source)]


def hub_problems(task: tasks.Task, hub: tasks.Hub) -> list[str]:
    """Why a task's Hugging Face dataset cannot be loaded here (offline and not in the cache, unknown id or
    configuration), read from its metadata only; empty when it can."""
    try:
        import datasets
    except ImportError:
        return [f"{task.name}: a Hugging Face dataset needs the datasets package. Fix: pip install -e '.[hub]'."]
    try:
        builder = datasets.load_dataset_builder(hub.dataset, hub.config, revision=hub.revision)
    except Exception as error:  # offline, unreachable or unknown: datasets raises many types; each gets the same fix
        return [tasks.hub_unreachable_message(task, hub, error)]
    known = set((builder.info.splits or {}).keys())
    if known and (absent := [name for name in hub.splits.values() if name not in known]):
        return [f"{task.name}: dataset {hub.dataset} has no split {', '.join(map(repr, absent))} (it has {sorted(known)}). Fix: "
                f"name its splits in task_declarations.{task.name}.hub.splits."]
    return []


def treebank_problems(experiment: Experiment) -> list[str]:
    """Format and encoding of the local CoNLL-U files (downloads: checked by prepare_treebank)."""
    problems = []
    for split in experiment.treebank_splits if experiment.config["treebank"]["dir"] else []:
        try:
            treebank.validate(experiment.treebank_file(split))
        except treebank.TreebankError as error:
            problems.append(str(error))
    return problems


def hand_label_data_problems(experiment: Experiment, model: str, labelled: LabelData | None, dev_frames: Mapping[str, pl.DataFrame]) -> list[str]:
    """Hand labels (training and test) of the dumps this config would make that name an example idx the task's dev split
    (as prepared: subsampled by max_eval_examples) does not hold, each naming the label file's line. ``labelled``:
    the model's hand labels as read (:func:`read_hand_labels`); ``dev_frames``: task -> local dev split. (Against Hub
    data: checked by labelled_maps.)"""
    if labelled is None:
        return []
    labels, frames = labelled
    keys = set(experiment.every_model_fit.of(model).dump_keys)  # the fitness checkpoint cannot be read while parsing
    problems = []
    for task, frame in dev_frames.items():
        sample = tasks.subsample(frame, experiment.data_limits(task)["max_eval_examples"], experiment.config["data"]["subsample_seed"])
        held = set(sample["idx"].to_list())
        for role in ("labels", "test"):
            if role not in frames:
                continue
            for state, idx, line in frames[role].filter(pl.col("task") == task).select("state", "idx", "line").iter_rows():
                if f"{task}/{state}" in keys and idx not in held:
                    subsampled = " (in its seeded sample of data.max_eval_examples)" if sample.height < frame.height else ""
                    problems.append(f"{labels.files[role]}:{line}: field 'idx' = {idx}: {task}'s dev split holds no such "
                                    f"example{subsampled}. Fix: label maps of examples of {task} dev, or raise max_eval_examples.")
    return problems


def data_problems(experiment: Experiment, hand_labels: Mapping[str, LabelData | None]) -> list[str]:
    """Every problem with the files' contents at once: the tasks' splits, the CoNLL-U files, then each model's hand
    labels against the dev splits (``hand_labels``: model -> its hand labels as read)."""
    problems, dev_frames = task_problems(experiment)
    problems += treebank_problems(experiment)
    return problems + [problem for model in experiment.models for problem in hand_label_data_problems(experiment, model, hand_labels[model], dev_frames)]


# --- every check, in order ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """One kind of check: ``problems()`` lists what is wrong (empty: nothing); ``message`` tells them as one error."""

    name: str
    problems: Callable[[], list[str]]
    message: Callable[[list[str]], str]


def _missing_treebank_message(missing: list[str]) -> str:
    return ("config 'treebank': CoNLL-U file(s) not found:\n  " + "\n  ".join(missing)
            + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
            "UD_English-EWT, or set treebank.dir: null to skip the treebank stages.")


def _missing_texts_message(missing: list[str]) -> str:
    return (f"report/sections: no text for the section(s) {missing} their stages declare. Fix: write "
            f"report/sections/<anchor>.rst (a paragraph: what the section shows, from which paper).")


class ParseChecks:
    """Every check of a config and of the input files it names, in order (the module's docstring lists them).
    ``main_process``: whether the files' contents are read too (False in a cluster job, which parses the workflow
    again)."""

    def __init__(self, experiment: Experiment, main_process: bool = True) -> None:
        self.experiment = experiment
        self.main_process = main_process
        # model -> its hand labels as read, or None; filled by the hand-label check
        self.hand_labels: dict[str, LabelData | None] = {}

    def checks(self) -> list[Check]:
        experiment = self.experiment
        listed = [
            Check("config", functools.partial(jobs.problems, experiment), lambda problems: "config:\n  " + "\n  ".join(problems)),
            Check("task_files", lambda: missing_task_files(experiment), tasks.missing_files_message),
            Check("treebank_files", lambda: missing_treebank_files(experiment), _missing_treebank_message),
            Check("models", lambda: model_problems(experiment),
                  lambda problems: "config 'models':\n" + "\n".join(f"  {problem}" for problem in problems)),
            Check("section_texts", lambda: missing_section_texts(experiment), _missing_texts_message),
            Check("hand_labels", self._read_hand_labels, lambda problems: "\n".join(problems)),
        ]
        if self.main_process:
            listed.append(Check("data", lambda: data_problems(experiment, self.hand_labels),
                                lambda problems: "Bad input data (nothing was run):\n" + "\n".join(problems)))
        return listed

    def _read_hand_labels(self) -> list[str]:
        """Every model's hand labels, read once and kept; the first bad line is the problem (later ones unread)."""
        try:
            for model in self.experiment.models:
                self.hand_labels[model] = read_hand_labels(self.experiment, model)
        except label_tables.LabelsError as error:
            return [f"patterns: {error}"]
        return []

    def warnings(self) -> list[str]:
        """What the run should hear before it starts but that need not stop it (in the main process only)."""
        return hub_warnings(self.experiment) if self.main_process else []

    def label_warnings(self) -> list[str]:
        """Hand labels name examples by task and idx: where the config's ``task_declarations`` replaces a shipped task
        that a model's hand labels name, reading its examples from another source than the shipped declaration does
        (in the run's ``data.source``), they hold only if that source keeps the shipped examples and their ids, which
        nothing here can check (in the main process only, as :meth:`warnings`)."""
        if not self.main_process:
            return []
        experiment, shipped = self.experiment, tasks.shipped_declarations()
        replaced = set()
        for name in set(experiment.config["task_declarations"]) & set(shipped) & set(experiment.tasks):
            theirs = tasks.declare(name, shipped[name], experiment.shipped_dirs()[tasks.shipped_dir_key(name)])
            ours = experiment.task(name)
            if (experiment.source(name), ours.known_overlap, ours.known_empty) != (
                    theirs.source(experiment.config["data"]["source"]), theirs.known_overlap, theirs.known_empty):
                replaced.add(name)
        key = "patterns.labels_csv" if experiment.config["patterns"]["labels_csv"] else "patterns.labels_dir"
        out = []
        for model, read in self.hand_labels.items():
            named = {task for task, _, _ in read[0].maps} if read else set()
            for name in sorted(replaced & named):
                out.append(f"patterns: the hand labels of {model} ({read[0].files['labels']}) name {name} examples by idx, "
                           f"labelled on the shipped {name}, which task_declarations.{name} replaces with other data: they "
                           f"are right only if yours keeps the shipped examples and ids. Else set {key}: null (or label "
                           "your own, docs/stages.md, 'Attention analyses').")
        return out

    def first_error(self) -> str | None:
        """The message of the first check, in order, that finds problems (None: every check passed). The checks after
        it are not run."""
        for check in self.checks():
            if problems := check.problems():
                return check.message(problems)
        return None

    def labels(self, model: str) -> HandLabels | None:
        """``model``'s hand labels (what the rules look up), or None."""
        read = self.hand_labels.get(model)
        return read[0] if read else None
