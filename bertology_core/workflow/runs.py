"""Which jobs a config makes, as data: the runs of every stage, computed once from the validated config.

Two objects, so that the type says what waits for the fitness checkpoint:

- :class:`Plan`, built once when the workflow is parsed from the validated config alone: the models, tasks and seeds,
  every fine-tuning run, each job's settings (hyper-parameters, samples, pruning protocols), the report's sections,
  the targets that rest on no fine-tuned model and every problem with the config's choices. Nothing here depends on
  whether a fine-tuned model turned out fit, so fine-tuning and everything before the checkpoint read only this.
- :class:`Runs`, a Plan under one set of fitness verdicts: what every analysis stage runs for each model
  (:class:`ModelRuns`), what each report section shows, the targets of ``all`` and the input lists of the rules that
  gather a stage. Under ``fitness.unfit: warn`` (or with no fine-tuned model for a verdict to decide on) the verdicts
  change nothing and :attr:`Plan.every_model_fit` is the answer; under ``skip`` and ``fail`` the workflow builds a Runs
  from the fitness checkpoint's table (rules/common.smk, ``runs()``).

Run keys are plain tuples, ``(task, state, seed)`` or ``(task, seed)``, because the rules pass them on to the workflow
scripts as params, and Snakemake decides whether params changed by their ``repr``.

The workflow's rule files only look things up here; the unit tests (tests/test_runs.py) build the same objects from a
config file without Snakemake. This module imports neither torch nor Snakemake.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bertology_core.data import states, tasks
from bertology_core.summaries.files import FIGURE_FILES, TABLE_FILES, item_file
from bertology_core.workflow import configuration

FineTuned = tuple[str, str, int]  # (task, state, seed): one fine-tuning run of a model
TaskSeed = tuple[str, int]  # (task, seed): a model fine-tuned from the pre-trained encoder (state finetuned)
Subnetwork = tuple[str, int, str]  # (task, seed, network): one re-fine-tuned subnetwork of a pruned model
GateJob = tuple[str, int, str, str]  # (task, seed, weights, strength as paths spell it): one head-gate training
Verdicts = Mapping[tuple[str, str, str, int], bool]  # (model, task, state, seed) -> fit for analysis


# the fitness verdicts (a table: TABLE_FILES), which every summary reads to label its rows
FITNESS_TABLE = "results/fitness/fitness"
# where the treebank's files are downloaded to under treebank.url
TREEBANK_DOWNLOADED = "results/treebank/source"
# one pruned model's folder: the models fine-tuned from the pre-trained encoder are pruned (state finetuned)
PRUNE_DIR = f"results/pruning/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}"
# the head gates of one pruned model (the head_roles stage trains them beside Michel et al.'s curve of that model)
GATE_DIR = "results/head_roles/{model}/gates/{task}/seed{seed}"
# the probed states that are no fine-tuned model (their own names; a fine-tuned one is <TASK>/finetuned/seed<N>)
UNTRAINED_PROBED = (states.PRETRAINED, states.RANDOM_WEIGHTS)
# the hand-label files the pattern classifier reads, by role
LABEL_FILE_ROLES = ("labels", "card", "second_pass", "second_labeller", "test")
# the sections whose results the claims read (bertology_core/report/claims.py names them so), not every section: a
# new stage does not rerun the claims
CLAIMED_SECTIONS = ("patterns", "attention_change", "disabling", "pruning", "probing", "head_roles", "outliers", "layer_mix")


# every stage, by its one name: its rule file (rules/<stage>.smk, which the Snakefile includes), its package
# (bertology_core/<stage>/ where it has code of its own), its folder under results/, its report section and its config
# key. The order is the pipeline's, for a reader: Snakemake orders jobs by their files, not by this list.
STAGES = ("data", "treebank", "models", "finetune", "fitness", "baselines", "attention", "patterns", "attention_change",
          "linguistic", "disabling", "pruning", "probing", "head_roles", "outliers", "layer_mix", "claims", "report")

# --- the report's sections -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Summary:
    """One summary a stage writes for each model: a tidy table (figures.write_table) and/or a figure
    (figures.save_chart) at ``stem`` (under results/, with ``{model}``). ``name``: the rule's output name (what its
    script writes to); ``files``: what is written (``table``, ``figure``); ``shown``: what the report page shows of it,
    in order (none: written for the claims, the atlases or a reader, but not on the page)."""

    name: str
    stem: str
    files: tuple[str, ...] = ("table",)
    shown: tuple[str, ...] = ("table",)

    def paths(self) -> list[str]:
        """Every file written (under results/, with ``{model}``): the page links each table's files, so each is a
        target of ``all`` and a deleted one is written again by the next run."""
        return [self.stem + ext for kind in self.files for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES)]


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the report page (report/sections/<anchor>.rst says what it shows, from which paper) and the
    summaries its stage writes."""

    anchor: str
    summaries: tuple[Summary, ...]

    def shown(self) -> list[tuple[str, str]]:
        """(kind, stem) of every item the page shows, in order."""
        return [(kind, summary.stem) for summary in self.summaries for kind in summary.shown]

    def paths(self) -> list[str]:
        return list(dict.fromkeys(path for summary in self.summaries for path in summary.paths()))


_BOTH = ("table", "figure")

# in the order the page's sections are declared (report/layout.yaml orders how they look)
SECTIONS: tuple[Section, ...] = (
    # the long table and the numeric summary beside it are rule baselines' own outputs
    Section("baselines", (Summary("table", "baselines/{model}/baselines"),)),
    Section("patterns", (
        Summary("classifier", "patterns/{model}/summary/classifier"),
        Summary("shares", "patterns/{model}/summary/shares", _BOTH, ("figure",)),
        Summary("heads", "patterns/{model}/summary/heads", _BOTH, ("figure",)),
        Summary("confusion", "patterns/{model}/summary/confusion", shown=()),
    )),
    Section("attention_change", (
        Summary("cosine", "attention_change/{model}/summary/cosine", _BOTH, ("figure",)),
        Summary("layers", "attention_change/{model}/summary/cosine_by_layer", shown=()),
    )),
    Section("linguistic", (
        Summary("features", "linguistic/{model}/summary/features", _BOTH, ("figure",)),
        Summary("relations", "linguistic/{model}/summary/relations", _BOTH, ("figure",)),
        Summary("cls", "linguistic/{model}/summary/cls", _BOTH, ("figure",)),
    )),
    Section("disabling", (
        Summary("heads", "disabling/{model}/summary/heads", _BOTH, ("figure",)),
        Summary("layers", "disabling/{model}/summary/layers", _BOTH, ("figure",)),
        Summary("extremes", "disabling/{model}/summary/extremes"),
        Summary("greedy", "disabling/{model}/summary/greedy"),
        Summary("selection", "disabling/{model}/summary/selection", shown=()),
    )),
    Section("pruning", (
        Summary("importance", "pruning/{model}/summary/importance", _BOTH, ("figure",)),
        Summary("michel", "pruning/{model}/summary/michel", _BOTH, ("figure",)),
        Summary("curves", "pruning/{model}/summary/lottery_curves", _BOTH, ("figure",)),
        Summary("survival", "pruning/{model}/summary/survival", _BOTH, ("figure",)),
        Summary("lottery", "pruning/{model}/summary/lottery"),
        Summary("lottery_seeds", "pruning/{model}/summary/lottery_seeds"),
        Summary("stability", "pruning/{model}/summary/stability"),
        Summary("compact", "pruning/{model}/summary/compact"),
    )),
    Section("probing", (
        Summary("probes", "probing/{model}/summary/probes", _BOTH, ("figure", "table")),
        Summary("heads", "probing/{model}/summary/syntactic_heads"),
        Summary("held_out", "probing/{model}/summary/syntactic_heads_held_out"),
    )),
    Section("head_roles", (
        Summary("roles", "head_roles/{model}/summary/roles", _BOTH, ("figure",)),
        Summary("relations", "head_roles/{model}/summary/importance_relations", _BOTH, _BOTH),
        Summary("gates", "head_roles/{model}/summary/gates", _BOTH, _BOTH),
    )),
    Section("outliers", (
        Summary("dimensions", "outliers/{model}/summary/dimensions", _BOTH, ("figure", "table")),
        Summary("contrast", "outliers/{model}/summary/contrast", _BOTH, ("figure", "table")),
        Summary("deltas", "outliers/{model}/summary/deltas", shown=()),
    )),
    Section("layer_mix", (
        Summary("expected", "layer_mix/{model}/summary/expected_layers", _BOTH, ("figure", "table")),
        Summary("cumulative", "layer_mix/{model}/summary/cumulative", shown=()),
    )),
    Section("claims", (Summary("table", "claims/{model}/claims"),)),
    # the head and layer atlases: the report stage's own tables (rules/report.smk, results/report/)
    Section("report", (
        Summary("table", "report/{model}/head_atlas", _BOTH, ("figure", "table")),
        Summary("table", "report/{model}/layer_atlas", _BOTH, ("figure", "table")),
    )),
)


def summary(section: str, stem: str) -> Summary:
    """The summary of ``section`` at ``stem`` (under results/, with ``{model}``): what a rule's outputs write. A
    ``KeyError`` names both when the section table does not hold it, so that a rule and the table cannot drift."""
    for candidate in next((s for s in SECTIONS if s.anchor == section), Section(section, ())).summaries:
        if candidate.stem == stem:
            return candidate
    raise KeyError(f"section {section!r} declares no summary at {stem!r} (bertology_core/workflow/runs.py, SECTIONS)")


@dataclasses.dataclass(frozen=True)
class SectionRuns:
    """A section for one model under one set of verdicts. ``runs``: whether its stage runs (its summaries are then
    targets of ``all`` and shown on the page); ``shows``: the fine-tuned models (task, state, seed) whose results it
    shows (the page warns about unfit ones); ``analyses_fine_tuned``: whether its stage analyses a model fine-tuned
    from the pre-trained encoder, None for a stage that only reports on them (``fitness.unfit: skip`` can leave the
    others empty, and the page then says why)."""

    runs: bool
    shows: list[FineTuned]
    analyses_fine_tuned: bool | None


# --- hand labels -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HandLabels:
    """A model's hand labels of attention maps, as read and checked from ``patterns.labels_csv`` or the label set in
    ``patterns.labels_dir`` whose card names the model (bertology_core.patterns.pattern_labels). ``files``: the label
    files by role (labels, second_pass, second_labeller, test); ``card``: the card's path, if any; ``maps``: every
    (task, dumped state, example idx) the training and test labels name, sorted."""

    files: Mapping[str, str]
    card: str | None
    maps: tuple[tuple[str, str, int], ...]


# --- the config's choices --------------------------------------------------------------------------------------


class Plan:
    """Everything the validated config decides by itself: models, tasks, seeds, the fine-tuning runs, each job's
    settings, and the problems with its choices. ``repo``: where relative paths of the config point."""

    def __init__(self, config: Mapping[str, Any], repo: str | Path) -> None:
        self.config = config
        self.repo = Path(repo)
        self.models: dict[str, str] = {m["name"]: m["spec"] for m in config["models"]}
        self.tasks: list[str] = list(config["tasks"])
        # every declared task (the shipped ones, then task_declarations), or why the declarations cannot be read
        try:
            self.declared: dict[str, tasks.Task] = tasks.declared_tasks(config["task_declarations"], self.glue_dir(), self.repo)
            self.declaration_problems: list[str] = []
        except tasks.DataError as error:
            self.declared, self.declaration_problems = {}, [str(error)]
        self.seeds: list[int] = list(config["seeds"])
        # fine-tuning's states this config runs (bertology_core.data.states), and those a fine-tuning job trains
        self.finetune_states: list[str] = list(config["finetune"]["states"])
        self.trained_states: list[str] = [s for s in self.finetune_states if s in states.TRAINED]
        treebank = config["treebank"]
        self.treebank_splits: list[str] = list(treebank["files"]) if treebank["dir"] or treebank["url"] else []

    # -- paths --

    def repo_path(self, path: str | Path) -> Path:
        """Relative config paths are relative to the repository, wherever snakemake runs."""
        path = Path(path).expanduser()
        return path if path.is_absolute() else self.repo / path

    def glue_dir(self) -> Path:
        return self.repo_path(self.config["data"]["glue_dir"])

    def treebank_file(self, split: str) -> Path:
        """A split's CoNLL-U file: in treebank.dir, or downloaded from treebank.url (rule download_treebank)."""
        name = self.config["treebank"]["files"][split]
        treebank = self.config["treebank"]
        return Path(TREEBANK_DOWNLOADED) / name if treebank["url"] else self.repo_path(treebank["dir"]) / name

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
        kept = ("labels", "range", "known_empty", "known_overlap", "overlap")
        return {"name": name, "declaration": {key: raw[key] for key in kept if key in raw} | {kind: raw[kind]}}

    def task_meaning(self, wildcards: Any) -> dict[str, Any]:
        """A job's params: what its task's labels mean and how it is scored (tasks.Task.meaning)."""
        return self.task(wildcards.task).meaning()

    def spacy_model(self, wildcards: Any) -> str:
        """The spaCy pipeline that tags a task's dev sentences: linguistic.spacy_models by the task's language."""
        return self.config["linguistic"]["spacy_models"][self.task(wildcards.task).language]

    def linguistic_tasks(self) -> list[str]:
        """The tasks whose language has a spaCy pipeline (linguistic.spacy_models): the linguistic stage's."""
        return [task for task in self.tasks if self.task(task).language in self.config["linguistic"]["spacy_models"]]

    def linguistic_left_out(self) -> list[str]:
        """Why each task the linguistic stage leaves out is left out (what its section says)."""
        return [f"{task}: its language {self.task(task).language!r} has no spaCy pipeline in linguistic.spacy_models"
                for task in self.tasks if task not in self.linguistic_tasks()]

    def task_meanings(self) -> dict[str, dict[str, Any]]:
        """Every configured task's meaning, by name: the params of the jobs that gather tasks."""
        return {name: self.task(name).meaning() for name in self.tasks}

    @staticmethod
    def run_dir(model: str, task: str, state: str, seed: int | str) -> str:
        return f"results/finetune/{model}/{task}/{state}/seed{seed}"

    @staticmethod
    def pruning_dir(model: str, task: str, seed: int | str) -> str:
        return PRUNE_DIR.format(model=model, task=task, seed=seed)

    @staticmethod
    def disabling_dir(model: str, task: str, state: str, seed: int | str) -> str:
        return f"results/disabling/{model}/{task}/{state}/seed{seed}"

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
            inputs["model"] = f"{self.run_dir(model, task, state, seed)}/model"
        return inputs

    def probed_encoder_inputs(self, model: str, probed: str) -> dict[str, str]:
        """The encoder of a probed state: the resolved pre-trained folder (pretrained and random_weights, whose weights
        are drawn from its config) and, for ``<TASK>/finetuned/seed<N>``, the fine-tuned model folder."""
        inputs = {"resolved": f"results/models/{model}/resolved.json"}
        if probed not in UNTRAINED_PROBED:
            inputs["model"] = f"{self.run_dir(model, *states.split_run_name(probed))}/model"
        return inputs

    def subnetwork_inputs(self, model: str, task: str, seed: int | str, network: str) -> dict[str, str]:
        """What re-fine-tuning one subnetwork reads: the pre-trained folder and the data, the ticket's mask (but for
        ``full``), and for the bad magnitude subnetwork the fine-tuned model whose smallest weights it keeps."""
        inputs = {
            "resolved": f"results/models/{model}/resolved.json",
            "train": f"results/data/{task}/train.parquet",
            "dev": f"results/data/{task}/dev.parquet",
            "tokens": self.tokens(model, task, self.subnetwork_recipe(task)["max_length"]),
        }
        if network != "full":
            method, kind, protocol = network.split("-")
            inputs["mask"] = f"{self.pruning_dir(model, task, seed)}/{method}_{protocol}_mask.safetensors"
            if (method, kind) == ("m", "bad"):
                inputs["finetuned_model"] = f"{self.run_dir(model, task, states.FINETUNED, seed)}/model"
        return inputs

    # -- each job's settings --

    def data_limits(self, task: str) -> dict[str, int | None]:
        """max_train_examples / max_eval_examples for one task: defaults, then per-task overrides."""
        data = self.config["data"]
        limits = {"max_train_examples": data["max_train_examples"], "max_eval_examples": data["max_eval_examples"]}
        limits.update(data["per_task"].get(task, {}))
        return limits

    def max_examples(self, task: str, split: str) -> int | None:
        return self.data_limits(task)["max_train_examples" if split == "train" else "max_eval_examples"]

    def eval_splits(self, task: str) -> list[str]:
        return list(self.task(task).eval_splits)

    def eval_inputs(self, task: str) -> list[str]:
        return [f"results/data/{task}/{split}.parquet" for split in self.eval_splits(task)]

    def task_data(self, task: str) -> list[str]:
        """Every prepared split of a task, train first (what its token file holds)."""
        return [f"results/data/{task}/train.parquet", *self.eval_inputs(task)]

    @staticmethod
    def tokens(model: str, task: str, max_length: int) -> str:
        """A task's splits tokenised with a model's tokenizer, cut at ``max_length`` (rule tokenize_data)."""
        return f"results/data/{task}/tokens/{model}.max{max_length}.parquet"

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

    def evaluation_parameters(self, task: str) -> dict[str, Any]:
        """The pre-trained encoder's evaluation: no training settings, so changing them never reruns it."""
        return {"max_length": self.max_length(task, states.PRETRAINED)}

    def finetune_runtime(self) -> dict[str, int]:
        """How a fine-tuning job runs, not what it computes: resources, so a change reruns nothing (a checkpoint
        interval of 0 means none: by steps only, or by time only)."""
        finetune = self.config["finetune"]
        return {
            "eval_batch_size": finetune["eval_batch_size"],
            "checkpoint_steps": finetune["checkpoint_steps"] or 0,
            "checkpoint_seconds": round(60 * finetune["checkpoint_minutes"]) if finetune["checkpoint_minutes"] else 0,
        }

    def training_runtime(self, epochs: Callable[[Any], float], max_examples: Callable[[Any], int | None] = lambda wc: None) -> Callable[..., int]:
        """The ``runtime`` resource (minutes) of a training job: ``compute.training_minutes_per_10k_examples`` per
        epoch (``epochs(wildcards)``) over the task's training examples (the prepared split's row count, from its
        Parquet footer, at most ``max_examples(wildcards)``), at least ``compute.training_min_minutes``, times the
        attempt (a retried job asks for more). Snakemake evaluates it again once the job's input exists, before it
        schedules the job; until then (a dry run before the data is prepared) it is the least."""
        compute = self.config["compute"]
        rate, least = compute["training_minutes_per_10k_examples"], compute["training_min_minutes"]

        def runtime(wildcards: Any, input: Any, attempt: int) -> int:  # noqa: A002 - Snakemake's argument name
            train = getattr(input, "train", None)
            if train is None:
                raise ValueError("training_runtime: the rule's input names no `train` split. Fix: name the training "
                                 "split's input `train`.")
            if not Path(train).exists():
                return attempt * least
            examples = pq.ParquetFile(train).metadata.num_rows
            cap = max_examples(wildcards)
            if cap is not None:
                examples = min(examples, cap)
            return attempt * max(least, math.ceil(rate * epochs(wildcards) * examples / 10_000))

        return runtime

    def fitness_settings(self, task: str) -> dict[str, Any]:
        """The verdict's settings for one task: the defaults, with the task's margin."""
        fitness = self.config["fitness"]
        return {k: v for k, v in fitness.items() if k not in ("unfit", "per_task")} | fitness["per_task"].get(task, {})

    def disabling_setting(self, task: str, key: str) -> Any:
        """A disabling setting of one task: its per_task override, else the default."""
        return self.config["disabling"]["per_task"].get(task, {}).get(key, self.config["disabling"][key])

    def disabling_example_note(self) -> str:
        """What the disabling captions say each task was swept on: ``MRPC 300, RTE all``."""
        return ", ".join(f"{task} {self.disabling_setting(task, 'max_examples') or 'all'}" for task in self.tasks)

    def importance_data(self, task: str) -> str:
        return f"results/data/{task}/{self.config['pruning']['importance_split']}.parquet"

    def pruning_params(self) -> dict[str, Any]:
        """The importance settings every pruning job depends on; the batch size only under batch granularity, whose
        batches it makes (elsewhere it changes speed only, so changing it reruns nothing)."""
        pruning = self.config["pruning"]
        keys = ("importance_split", "importance_examples", "importance_granularity", "normalize_by_layer")
        return {key: pruning[key] for key in keys} | {
            "subsample_seed": self.config["data"]["subsample_seed"],
            "importance_batch_size": pruning["batch_size"] if pruning["importance_granularity"] == "batch" else None,
        }

    def pruning_dev_sample(self) -> dict[str, Any]:
        """The dev examples that score pruning decisions: a seeded subsample, or all of dev (examples null)."""
        return {"examples": self.config["pruning"]["dev_examples"], "seed": self.config["data"]["subsample_seed"]}

    def lottery_protocols(self) -> list[str]:
        """How lottery tickets are chosen and reported: held_out (chosen on half A of dev, reported on half B)
        always; paper (Prasanna et al.'s: chosen and reported on dev) beside it with pruning.paper_protocol."""
        return ["held_out"] + (["paper"] if self.config["pruning"]["paper_protocol"] else [])

    def lottery_split(self, protocol: str) -> dict[str, int]:
        """What a protocol's halves of dev depend on (so that only its jobs rerun): the split seed for held_out."""
        return {"split_seed": self.config["pruning"]["split_seed"]} if protocol == "held_out" else {}

    def lottery_method(self, method: str) -> dict[str, Any]:
        """The settings of magnitude (m) or structured (s) pruning."""
        pruning = self.config["pruning"]
        if method == "m":
            return {"rate": pruning["m_rate"], "max_iterations": pruning["m_max_iterations"]}
        return {k: pruning[f"s_{k}"] for k in ("head_share", "mlps_per_step", "refine")}

    def subnetwork_reference_retrained(self) -> bool:
        """Whether the full model is re-fine-tuned as the reference (the subnetworks' recipe departs from
        fine-tuning's), rather than taken from the fine-tuning run itself."""
        pruning = self.config["pruning"]
        return pruning["subnetwork_max_train_examples"] is not None or pruning["subnetwork_epochs"] is not None

    def subnetwork_names(self) -> list[str]:
        """``full`` (when re-fine-tuned) and ``<method>-<kind>-<protocol>``: a ticket's subnetworks per protocol."""
        pruning = self.config["pruning"]
        methods = pruning["subnetwork_methods"] or pruning["methods"]
        names = [f"{m}-{kind}-{p}" for m in methods for p in self.lottery_protocols() for kind in pruning["subnetworks"]]
        return (["full"] if names and self.subnetwork_reference_retrained() else []) + names

    def subnetwork_recipe(self, task: str) -> dict[str, Any]:
        """Re-fine-tuning hyper-parameters of the subnetworks: fine-tuning's, with pruning's overrides."""
        values = self.hyperparameters(task, states.FINETUNED)
        if self.config["pruning"]["subnetwork_epochs"] is not None:
            values["epochs"] = self.config["pruning"]["subnetwork_epochs"]
        return values

    def probing_sample(self) -> dict[str, Any]:
        """Seeded sentence samples of the treebank splits, shared by extraction and probes."""
        probing = self.config["probing"]
        return {"train": probing["train_sentences"], "dev": probing["dev_sentences"], "seed": probing["sample_seed"]}

    def reference_regularisation(self, probed: str) -> float | None:
        """The reference probe's regularisation for a state probing.reference names (None: no reference probe)."""
        reference = self.config["probing"]["reference"]
        return reference["regularisation"] if probed in reference["states"] else None

    def reference_sentences(self, probed: str) -> int | None:
        """The reference probe's sentence cap for a state probing.reference names (None: none, or no reference)."""
        reference = self.config["probing"]["reference"]
        return reference["max_train_sentences"] if probed in reference["states"] else None

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

    # -- the seeds of each stage, whether or not their models turn out fit --

    def disabling_states(self) -> list[str]:
        """The swept fine-tuned models: disabling.states that the config fine-tunes at all."""
        return [state for state in self.config["disabling"]["states"] if state in self.trained_states]

    def disabling_seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's sweeps (fine-tuned for them whether or not they are analysed)."""
        return self.disabling_setting(task, "seeds") or self.seeds

    def pruning_tasks(self) -> list[str]:
        """The tasks whose models fine-tuned from the pre-trained encoder are pruned."""
        wanted = self.config["pruning"]["tasks"]
        if states.FINETUNED not in self.trained_states:
            return []
        return [task for task in self.tasks if wanted is None or task in wanted]

    def pruning_seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's pruning (fine-tuned for it whether or not they are analysed)."""
        pruning = self.config["pruning"]
        return pruning["per_task"].get(task, {}).get("seeds") or pruning["seeds"] or self.seeds

    def subnetwork_seeds(self, task: str) -> list[int]:
        """Pruned seeds whose subnetworks are re-fine-tuned (pruning.per_task.<TASK>.subnetwork_seeds; null: all)."""
        wanted = self.config["pruning"]["per_task"].get(task, {}).get("subnetwork_seeds")
        return self.pruning_seeds(task) if wanted is None else list(wanted)

    def probed_runs(self) -> list[TaskSeed]:
        """(task, seed) of every fine-tuned model the config probes (whether or not it is analysed)."""
        probing = self.config["probing"]
        if not self.treebank_splits or states.FINETUNED not in probing["states"] or states.FINETUNED not in self.trained_states:
            return []
        tasks = self.tasks if probing["tasks"] is None else [t for t in probing["tasks"] if t in self.tasks]
        return [(task, seed) for task in tasks
                for seed in probing["seeds"] or self.finetuned_seeds(task, states.FINETUNED, probing=False)]

    def outlier_tasks(self) -> list[str]:
        """The tasks whose models fine-tuned from the pre-trained encoder get their outlier dimensions disabled."""
        wanted = self.config["outliers"]["tasks"]
        return self.tasks if wanted is None else [task for task in wanted if task in self.tasks]

    def outlier_seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's outlier disabling: outliers.seeds, or the disabling stage's seeds."""
        seeds = self.config["outliers"]["seeds"]
        return self.disabling_seeds(task) if seeds is None else seeds

    def finetuned_seeds(self, task: str, state: str = states.FINETUNED, probing: bool = True) -> list[int]:
        """Every seed a task is fine-tuned with into ``state``: the top-level seeds and the extra seeds of its
        disabling sweeps, pruning and probing (``probing``: with probing's, which default to these)."""
        seeds = set(self.seeds)
        if state in self.disabling_states():
            seeds |= set(self.disabling_seeds(task))
        if state == states.FINETUNED:
            if task in self.pruning_tasks():
                seeds |= set(self.pruning_seeds(task))
            if probing:
                seeds |= {seed for probed, seed in self.probed_runs() if probed == task}
                chosen = self.config["probing"]["syntactic_heads"]["states"] if self.treebank_splits else None
                seeds |= {states.split_run_name(s)[2] for s in chosen or [] if states.is_run_name(s) and states.split_run_name(s)[0] == task}
        return sorted(seeds)

    def fine_tuned_runs(self) -> list[FineTuned]:
        """Every (task, state, seed) the config fine-tunes: the top-level seeds of every trained state, and the
        extra seeds of the disabling sweeps, pruning and probing."""
        runs = {(task, state, seed) for task in self.tasks for state in self.trained_states for seed in self.finetuned_seeds(task, state)}
        return sorted(runs, key=lambda run: (self.tasks.index(run[0]), run[1], run[2]))

    def metrics_files(self, model: str) -> list[str]:
        """The metrics.json of every run of the baselines table: the pre-trained encoder's (top-level seeds) and every
        fine-tuned run."""
        pretrained = ([(task, states.PRETRAINED, seed) for task in self.tasks for seed in self.seeds]
                      if states.PRETRAINED in self.finetune_states else [])
        return [f"{self.run_dir(model, t, s, seed)}/metrics.json" for t, s, seed in pretrained + self.fine_tuned_runs()]

    def fitness_inputs(self) -> list[str]:
        """What the fitness checkpoint reads: the verdict of every fine-tuned run of every model."""
        return [f"{self.run_dir(model, t, i, s)}/metrics.json" for model in self.models for t, i, s in self.fine_tuned_runs()]

    # -- the runs under verdicts, and what rests on none --

    def runs(self, verdicts: Verdicts | None = None) -> Runs:
        """The runs under ``verdicts`` (None: every model counts as fit)."""
        return Runs(self, verdicts)

    @functools.cached_property
    def every_model_fit(self) -> Runs:
        """What the config runs were every fine-tuned model fit: the answer under fitness.unfit warn, and the only
        question that can be asked while the workflow is parsed (before the fitness checkpoint)."""
        return Runs(self, None)

    @functools.cached_property
    def needs_verdicts(self) -> bool:
        """Whether the fitness verdicts decide what runs: fitness.unfit is skip or fail and some analysis would use a
        model fine-tuned from the pre-trained encoder. Otherwise every_model_fit is the answer and nothing waits for
        the fitness checkpoint."""
        if self.config["fitness"]["unfit"] == "warn":
            return False
        return any(self.every_model_fit.of(model).fine_tuned_candidates() for model in self.models)

    def early_targets(self) -> list[str]:
        """Targets of ``all`` that rest on no fine-tuned model (the treebank, the pre-trained encoder's dumps, probes and
        syntactic heads), listed apart so that they are scheduled before the fitness checkpoint is done."""
        targets = []
        for model in self.models:
            targets += [f"results/treebank/{split}.parquet" for split in self.treebank_splits]
            if states.PRETRAINED in self.config["attention"]["dumped"]:
                targets += [f"results/attention/{model}/{task}/{states.PRETRAINED}.json" for task in self.tasks]
            if self.treebank_splits:
                targets += [f"results/probing/{model}/{s}/probes.parquet" for s in UNTRAINED_PROBED
                            if s in self.config["probing"]["states"]]
                # pretrained is never a fine-tuned model: whatever the verdicts, its heads are scored if chosen
                if states.PRETRAINED in self.every_model_fit.of(model).syntactic_heads:
                    targets.append(f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads.parquet")
        return list(dict.fromkeys(targets))

    def section_summaries(self) -> dict[str, list[tuple[str, str]]]:
        """Section anchor -> (kind, stem) of every item the page shows: the page's content, in order."""
        return {section.anchor: section.shown() for section in SECTIONS}

    # -- the config's choices --

    def problems(self) -> list[str]:
        """Every choice of the config that the workflow cannot run, one line each (empty when none): names that
        repeat, per-task settings of tasks not run, runs chosen that the config does not make, intervals at another
        level than the claims read them. Checked when the workflow is parsed, before any job, rather than a task
        silently dropped or fine-tuned anyway."""
        config = self.config
        problems = []
        names = [m["name"] for m in config["models"]]
        if len(set(names)) != len(names):
            problems.append(f"config 'models': the name(s) {sorted({n for n in names if names.count(n) > 1})} are given "
                            "to more than one entry. Fix: give every model a unique name.")
        problems += self.declaration_problems + [
            f"config 'tasks' names {task!r}, which is not declared{configuration.did_you_mean(task, self.declared)}. Fix: "
            f"declare it under task_declarations (see README, 'Your own task'), or choose from {sorted(self.declared)}."
            for task in self.tasks if task not in self.declared and self.declared]
        problems += configuration.per_task_problems(config, self.tasks)
        if config["treebank"]["dir"] and config["treebank"]["url"]:
            problems.append("config 'treebank': both dir and url are set. Fix: set the one the files come from, the "
                            "other to null.")
        return problems + self._pruning_problems() + self._probing_problems() + self._gate_problems() + \
            self._outlier_problems() + self._layer_mix_problems() + self._claims_problems()

    def _named_task_problems(self, task_lists: Mapping[str, list[str] | None],
                             state_lists: Mapping[str, list[str] | None] | None = None) -> list[str]:
        """Every list that picks tasks (or <TASK>/finetuned/seed<N> states) for one stage must name tasks in ``tasks``.
        (per_task overrides are not such lists: configuration.per_task_problems checks them.)"""
        named = [(key, task, task) for key, tasks in task_lists.items() for task in tasks or []]
        named += [(key, state, states.split_run_name(state)[0]) for key, chosen in (state_lists or {}).items()
                  for state in chosen or [] if states.is_run_name(state)]
        return [f"{key} names {name}, {'which' if name == task else f'whose task {task}'} is not in tasks {self.tasks}. "
                f"Fix: add {task} to tasks, or drop {name} from {key}." for key, name, task in named if task not in self.tasks]

    def _pruning_problems(self) -> list[str]:
        pruning = self.config["pruning"]
        problems = self._named_task_problems({"pruning.tasks": pruning["tasks"]})
        for task, settings in pruning["per_task"].items():
            wanted = settings.get("subnetwork_seeds") or []
            if wanted and task not in self.pruning_tasks():
                problems.append(f"pruning.per_task.{task}.subnetwork_seeds: {task} is not pruned (pruning.tasks, tasks). "
                                "Fix: prune the task or drop its subnetwork_seeds.")
            elif set(wanted) - set(self.pruning_seeds(task)):
                problems.append(f"pruning.per_task.{task}.subnetwork_seeds {sorted(wanted)} names seeds that are not pruned "
                                f"({self.pruning_seeds(task)}). Fix: add them to pruning.per_task.{task}.seeds or drop them.")
        unpruned = sorted(set(pruning["subnetwork_methods"] or []) - set(pruning["methods"]))
        if unpruned:
            problems.append(f"pruning.subnetwork_methods names {unpruned}, not in pruning.methods {pruning['methods']}. "
                            "Fix: add them to pruning.methods or drop them.")
        if pruning["importance_split"] == "dev" and "s" in pruning["methods"]:
            # s-pruning's order comes from importance: on all of dev, half B would help choose the held-out ticket
            problems.append("pruning.importance_split: dev lets the dev half that reports s-pruning's ticket choose which heads "
                            "it prunes. Fix: importance_split: train (the default), or drop s from pruning.methods.")
        return problems

    def _probing_problems(self) -> list[str]:
        probing = self.config["probing"]
        return self._named_task_problems(
            {"probing.tasks": probing["tasks"]},
            {"probing.syntactic_heads.states": probing["syntactic_heads"]["states"],
             "probing.reference.states": probing["reference"]["states"]},
        )

    def _gate_problems(self) -> list[str]:
        """Gate tasks and seeds must be pruned ones: the gates are compared with Michel et al.'s curve of the same model."""
        gates = self.config["head_roles"]["gates"]
        pruned = self.pruning_tasks()
        problems = self._named_task_problems({"head_roles.gates.tasks": gates["tasks"]})
        for task in [t for t in gates["tasks"] or [] if t in self.tasks]:
            if task not in pruned:
                problems.append(f"head_roles.gates.tasks names {task}, which is not pruned (pruning.tasks: "
                                f"{self.config['pruning']['tasks']}): the gates are compared with Michel et al.'s curve of the "
                                "same model. Fix: add it to pruning.tasks or drop it.")
            elif gates["seeds"] is not None and not set(gates["seeds"]) & set(self.pruning_seeds(task)):
                problems.append(f"head_roles.gates.seeds {gates['seeds']} names no pruned seed of {task} "
                                f"({self.pruning_seeds(task)}). Fix: use one of them or set seeds: null.")
        candidates = [task for task in pruned if gates["tasks"] is None or task in gates["tasks"]]
        if candidates and gates["seeds"] is not None and not any(set(gates["seeds"]) & set(self.pruning_seeds(t)) for t in candidates):
            problems.append(f"head_roles.gates.seeds {gates['seeds']} names no seed that is pruned (pruning seeds: "
                            f"{ {task: self.pruning_seeds(task) for task in pruned} }): no gates would be trained. "
                            "Fix: name a pruned seed, set seeds: null, or tasks: [] for no gates.")
        if gates["tasks"] != [] and pruned and self.config["pruning"]["michel_recompute"]:
            problems.append("head_roles.gates are compared with Michel et al.'s order computed once (the curve without "
                            "recomputation), but pruning.michel_recompute is true. Fix: set pruning.michel_recompute: false, "
                            "or head_roles.gates.tasks: [] for no gates.")
        if gates["tasks"] != [] and pruned and not self.config["attention"]["dumped"]:
            problems.append("head_roles.gates are summarised with the head roles of the attention dumps, and attention.dumped "
                            "is empty. Fix: dump a state (attention.dumped: [pretrained, finetuned]) or set head_roles.gates.tasks: [].")
        low, high = gates["stretch"]
        if not (low < 0 and high > 1):
            problems.append(f"head_roles.gates.stretch {gates['stretch']}: the L0 penalty needs low < 0 and high > 1 "
                            "(Louizos et al.). Fix: use [-0.1, 1.1].")
        return problems

    def _outlier_problems(self) -> list[str]:
        """Outlier tasks must be configured, and their seeds fine-tuned anyway (the stage adds no fine-tuning run)."""
        problems = self._named_task_problems({"outliers.tasks": self.config["outliers"]["tasks"]})
        if states.FINETUNED not in self.trained_states:
            return problems
        for task in self.outlier_tasks():
            fine_tuned = self.finetuned_seeds(task, states.FINETUNED)
            missing = sorted(set(self.outlier_seeds(task)) - set(fine_tuned))
            if missing:
                problems.append(f"outliers.seeds {missing} are not fine-tuned for {task} (fine-tuned seeds: {fine_tuned}): "
                                "the outliers stage fine-tunes no model of its own. Fix: add them to seeds (or the disabling "
                                "stage's seeds), or name fine-tuned ones.")
        return problems

    def _layer_mix_problems(self) -> list[str]:
        """layer_mix.states must name states the probing stage probes."""
        chosen = self.config["layer_mix"]["states"]
        if not chosen or not self.treebank_splits:
            return []
        probed = {state for model in self.models for state in self.every_model_fit.of(model).probed}
        missing = [state for state in chosen if state not in probed]
        if not missing:
            return []
        return [(f"layer_mix.states names {missing}, which the probing stage does not probe (probed: {sorted(probed)}). "
                 "Fix: choose among them (probing.states, probing.tasks, probing.seeds decide what is probed) or set "
                 "layer_mix.states: null.")]

    def _claims_problems(self) -> list[str]:
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


# --- the runs under verdicts -----------------------------------------------------------------------------------


def _task_seed(probed: str) -> TaskSeed:
    """(task, seed) of a probed model fine-tuned from the pre-trained encoder (``MRPC/finetuned/seed1``)."""
    task, _, seed = states.split_run_name(probed)
    return task, seed


@dataclasses.dataclass(frozen=True)
class ModelRuns:
    """What every analysis stage runs for one model, under one set of verdicts: each list holds only analysed
    models (those fit, or every one under fitness.unfit warn), in the order the stage's inputs and params list them."""

    dumps: list[tuple[str, str]]  # (task, dumped state) of every attention dump: pretrained, <state>/seed<N>
    attention_change: list[TaskSeed]  # fine-tuned models compared with the pre-trained encoder's dump
    sweeps: list[FineTuned]  # disabling sweeps
    greedy: list[FineTuned]  # sweeps that also get the greedy multi-head search
    pruned: list[TaskSeed]  # head importance, Michel et al.'s curve, lottery tickets
    subnetworks: list[Subnetwork]  # re-fine-tuned subnetworks of the pruned models
    gated: list[TaskSeed]  # pruned models that get L0 head gates
    gates: list[GateJob]  # every head-gate training
    probed: list[str]  # probed states: pretrained, random_weights, <TASK>/finetuned/seed<N>
    syntactic_heads: list[str]  # states whose heads are scored against the treebank
    layer_mix: list[str]  # probed states that get Tenney et al.'s scalar mixes
    outliers: list[TaskSeed]  # fine-tuned models whose outlier dimensions are disabled
    linguistic_tasks: list[str] = dataclasses.field(default_factory=list)  # tasks whose language spaCy can tag

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
        return [_task_seed(state) for state in self.probed if state not in UNTRAINED_PROBED]

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
        :attr:`Plan.every_model_fit`, those whose verdict decides something."""
        seeded = [_task_seed(s) for s in self.syntactic_heads if s not in UNTRAINED_PROBED]
        sweeps = [(t, seed) for t, state, seed in self.sweeps if state == states.FINETUNED]
        return {*self.dumped_fine_tuned, *self.attention_change, *sweeps, *self.pruned, *self.probed_fine_tuned, *seeded,
                *self.outliers}


class Runs:
    """A :class:`Plan` under one set of fitness verdicts: what every analysis stage runs, what each report section
    shows, the targets of ``all`` and the input lists of the rules that gather a stage."""

    def __init__(self, plan: Plan, verdicts: Verdicts | None = None) -> None:
        self.plan = plan
        self.config = plan.config
        self.verdicts = verdicts
        self._models: dict[str, ModelRuns] = {}

    def analysed(self, model: str, task: str, state: str, seed: int) -> bool:
        """Whether the analyses use the model fine-tuned into ``state`` with ``seed``: always under warn, and for the
        from-scratch baselines; under skip only if it is fit; under fail the fitness checkpoint itself stops the run
        if a model is unfit, so what remains is fit."""
        if self.verdicts is None or self.config["fitness"]["unfit"] == "warn" or state != states.FINETUNED:
            return True
        return self.verdicts[(model, task, state, int(seed))]

    def of(self, model: str) -> ModelRuns:
        """What every analysis stage runs for ``model`` (computed on first use)."""
        if model not in self._models:
            self._models[model] = self._model_runs(model)
        return self._models[model]

    def _model_runs(self, model: str) -> ModelRuns:
        plan, config = self.plan, self.config
        fit = functools.partial(self.analysed, model)
        finetuned = states.FINETUNED
        trains_finetuned = finetuned in plan.trained_states

        dumped = config["attention"]["dumped"]
        dumps = []
        for task in plan.tasks:
            for state in dumped:
                if state == states.PRETRAINED:
                    dumps.append((task, states.PRETRAINED))
                elif state in plan.trained_states:
                    dumps += [(task, states.seeded(state, seed)) for seed in plan.seeds if fit(task, state, seed)]
        changed = ([(task, seed) for task in plan.tasks for seed in plan.seeds if fit(task, finetuned, seed)]
                   if {states.PRETRAINED, finetuned} <= set(dumped) and trains_finetuned else [])

        sweeps = [(task, state, seed) for task in plan.tasks for state in plan.disabling_states()
                  for seed in plan.disabling_seeds(task) if fit(task, state, seed)]
        greedy = []
        for task, state, seed in sweeps:
            wanted = plan.disabling_setting(task, "greedy_seeds")
            if plan.disabling_setting(task, "greedy_steps") != 0 and (wanted is None or seed in wanted):
                greedy.append((task, state, seed))

        pruned = [(task, seed) for task in plan.pruning_tasks() for seed in plan.pruning_seeds(task) if fit(task, finetuned, seed)]
        networks = plan.subnetwork_names()
        subnetworks = [(t, s, n) for t, s in pruned if s in plan.subnetwork_seeds(t) for n in networks]
        gates = config["head_roles"]["gates"]
        gated = [(task, seed) for task, seed in pruned
                 if (gates["tasks"] is None or task in gates["tasks"]) and (gates["seeds"] is None or seed in gates["seeds"])]
        # a penalty strength as paths spell it: Python's shortest round-trip form (0.01, 0.3, 1e-05)
        gate_jobs = [(task, seed, weights, repr(float(strength))) for task, seed in gated
                     for weights in gates["weights"] for strength in gates["strengths"]]

        def state_fit(probed: str) -> bool:
            if probed in UNTRAINED_PROBED:
                return True
            return fit(*states.split_run_name(probed))

        probed, syntactic, mixed = [], [], []
        if plan.treebank_splits:
            candidates = [s for s in UNTRAINED_PROBED if s in config["probing"]["states"]]
            candidates += [states.run_name(task, finetuned, seed) for task, seed in plan.probed_runs()]
            probed = [state for state in candidates if state_fit(state)]
            chosen = config["probing"]["syntactic_heads"]["states"]
            scored = [s for s in probed if s != states.RANDOM_WEIGHTS] if chosen is None else list(chosen)
            syntactic = [state for state in scored if state_fit(state)]
            mix_chosen = config["layer_mix"]["states"]
            mixed = probed if mix_chosen is None else [state for state in probed if state in mix_chosen]

        outliers = ([(task, seed) for task in plan.outlier_tasks() for seed in plan.outlier_seeds(task) if fit(task, finetuned, seed)]
                    if trains_finetuned else [])
        return ModelRuns(dumps=dumps, attention_change=changed, sweeps=sweeps, greedy=greedy, pruned=pruned,
                         subnetworks=subnetworks, gated=gated, gates=gate_jobs, probed=probed, syntactic_heads=syntactic,
                         layer_mix=list(mixed), outliers=outliers, linguistic_tasks=plan.linguistic_tasks())

    # -- the report's sections --

    def sections(self, model: str) -> dict[str, SectionRuns]:
        """Every section for ``model``, in SECTIONS' order."""
        runs = self.of(model)
        finetuned = states.FINETUNED
        pruning_shows = [(task, finetuned, seed) for task, seed in runs.pruned]
        probing_shows = [(task, finetuned, seed) for task, seed in runs.probed_fine_tuned]
        claims_shows = sorted(set(runs.dumped_runs + runs.sweeps + pruning_shows))
        found = {
            "baselines": SectionRuns(True, self.plan.fine_tuned_runs(), None),
            "patterns": SectionRuns(True, runs.dumped_runs, bool(runs.dumped_fine_tuned)),
            "attention_change": SectionRuns(bool(runs.attention_change), [(t, finetuned, s) for t, s in runs.attention_change],
                                            bool(runs.attention_change)),
            "linguistic": SectionRuns(bool(runs.linguistic_keys),
                                      [run for run in runs.dumped_runs if run[0] in runs.linguistic_tasks], None),
            "disabling": SectionRuns(bool(runs.sweeps), runs.sweeps, bool(runs.sweeps)),
            "pruning": SectionRuns(bool(runs.pruned), pruning_shows, bool(runs.pruned)),
            "probing": SectionRuns(bool(runs.probed), probing_shows, bool(runs.probed)),
            "head_roles": SectionRuns(bool(runs.dumps), sorted(set(runs.dumped_runs) | {(t, finetuned, s) for t, s in runs.gated}),
                                      bool(runs.dumped_runs or runs.gated)),
            # the pre-trained encoder's outlier dimensions are found whatever else runs
            "outliers": SectionRuns(True, [(t, finetuned, s) for t, s in runs.outliers], bool(runs.outliers)),
            "layer_mix": SectionRuns(bool(runs.layer_mix), runs.layer_mix_fine_tuned, bool(runs.layer_mix_fine_tuned)),
            "claims": SectionRuns(True, claims_shows, None),
            "report": SectionRuns(True, sorted(set(claims_shows) | set(probing_shows)), None),
        }
        # a section with no rule here shows no fine-tuned model and runs whenever its summaries are asked for
        return {section.anchor: found.get(section.anchor, SectionRuns(True, [], None)) for section in SECTIONS}

    def stage_runs(self, model: str, anchor: str) -> bool:
        """Whether this config runs the stage behind a report section for ``model``."""
        return self.sections(model)[anchor].runs

    def section_shows(self, model: str) -> dict[str, list[FineTuned]]:
        """Section anchor -> the fine-tuned models (task, state, seed) whose results it shows: the report warns in
        each section that shows an unfit one."""
        return {anchor: section.shows for anchor, section in self.sections(model).items()}

    def skipped_sections(self, model: str) -> list[str]:
        """Sections whose stage would analyse fine-tuned models of ``model`` were every model fit, but has no fit model
        to run on (fitness.unfit: skip)."""
        would = self.plan.every_model_fit.sections(model)
        now = self.sections(model)
        return sorted(anchor for anchor, section in would.items() if section.analyses_fine_tuned and not now[anchor].analyses_fine_tuned)

    def shown_summaries(self, model: str) -> list[tuple[str, str]]:
        """(kind, stem under results/) of every item the page shows for ``model``: those of the sections whose stage
        runs."""
        running = self.sections(model)
        return [(kind, stem.format(model=model)) for section in SECTIONS if running[section.anchor].runs for kind, stem in section.shown()]

    def summary_files(self, model: str) -> list[str]:
        """Every file of every summary this config produces for ``model`` (under results/): ``all`` asks for these."""
        running = self.sections(model)
        return [path.format(model=model) for section in SECTIONS if running[section.anchor].runs for path in section.paths()]

    # -- the targets of `all` --

    def targets(self, model: str) -> list[str]:
        """What ``all`` asks for of ``model``: the fitness table (which the page links), the treebank, every attention
        dump's summary (and its Parquet files under attention.keep_dumps, else temp()), the annotation page, the report
        page, and every file of every summary of the stages that run."""
        runs = self.of(model)
        targets = [FITNESS_TABLE + ext for ext in TABLE_FILES]
        targets += [f"results/treebank/{split}.parquet" for split in self.plan.treebank_splits]
        targets += [f"results/attention/{model}/{key}.json" for key in runs.dump_keys]
        if self.config["attention"]["keep_dumps"]:
            targets += self.every_dump_file(model)
        targets += [f"results/patterns/{model}/annotate.html", "results/report/index.html"]
        return targets + [f"results/{path}" for path in sorted(self.summary_files(model))]

    def all_targets(self) -> list[str]:
        return list(dict.fromkeys(target for model in self.plan.models for target in self.targets(model)))

    # -- what the rules that gather a stage read --

    def dump_prefixes(self, model: str) -> list[str]:
        """The path prefix of every attention dump of ``model`` (``results/attention/<model>/<task>/<dumped state>``),
        in the order of its dump keys."""
        return [f"results/attention/{model}/{key}" for key in self.of(model).dump_keys]

    def every_dump_file(self, model: str) -> list[str]:
        """Both Parquet files of every attention dump of ``model`` (the annotation page and the pattern CNN read them)."""
        return [path for key in self.of(model).dump_keys for path in self.plan.dump_files(model, key)]

    def hand_label_set(self, model: str, labels: HandLabels | None) -> dict[str, Any] | None:
        """The hand labels that train ``model``'s pattern CNN, or None: the label files by role, ``card``, and ``idx``:
        per labelled dump of this run (``task/state``), the example idx whose maps are computed for the classifier."""
        if labels is None:
            return None
        keys = set(self.of(model).dump_keys)
        idx: dict[str, list[int]] = {}
        for task, state, number in labels.maps:
            if f"{task}/{state}" in keys:
                idx.setdefault(f"{task}/{state}", []).append(number)
        if not idx:
            return None
        return {**labels.files, "card": labels.card, "idx": idx}

    def labelled_dumps(self, model: str, labels: HandLabels | None) -> dict[str, str]:
        """The labelled dumps (maps of the hand-labelled examples) of ``model``: ``task/state`` -> path prefix."""
        labelled = self.hand_label_set(model, labels)
        return {key: f"results/patterns/{model}/labelled/{key}" for key in (labelled["idx"] if labelled else {})}

    def labelled_recipe_keys(self, model: str, labels: HandLabels | None) -> list[str]:
        """The labelled dumps of fine-tuned models (their recipes are checked against the label card)."""
        return [key for key in self.labelled_dumps(model, labels) if key.split("/", 1)[1] != states.PRETRAINED]

    def pattern_classifier_inputs(self, model: str, labels: HandLabels | None) -> dict[str, Any]:
        """The pattern CNN's inputs: every dump and its features, the labelled maps, the recipes of the labelled
        fine-tuned models and the hand-label files."""
        keys = self.of(model).dump_keys
        recipes = []
        for key in self.labelled_recipe_keys(model, labels):
            task, dumped = key.split("/", 1)
            recipes.append(f"{self.plan.run_dir(model, task, *states.split_seeded(dumped))}/evaluation.json")
        labelled = self.hand_label_set(model, labels) or {}
        return {
            "features": [f"results/patterns/{model}/{key}.features.parquet" for key in keys],
            "dumps": self.every_dump_file(model),
            "resolved": f"results/models/{model}/resolved.json",
            "labelled": [f"{prefix}.{kind}.parquet" for prefix in self.labelled_dumps(model, labels).values()
                         for kind in ("attention", "tokens")],
            "recipes": recipes,
            **{name: path for name, path in labelled.items() if name in LABEL_FILE_ROLES and path},
        }

    def pattern_summary_inputs(self, model: str) -> dict[str, Any]:
        """Every dump's classified maps, the classifier's report and the verdicts."""
        return {
            "classes": [f"results/patterns/{model}/{key}.classes.parquet" for key in self.of(model).dump_keys],
            "report": f"results/patterns/{model}/classifier/report.json",
            "fitness": f"{FITNESS_TABLE}.parquet",
        }

    def attention_change_summary_inputs(self, model: str) -> dict[str, Any]:
        """The per-head cosines of every fine-tuned model compared with the pre-trained encoder, and the verdicts."""
        return {
            "changes": [f"results/attention_change/{model}/{task}/seed{seed}.parquet" for task, seed in self.of(model).attention_change],
            "fitness": f"{FITNESS_TABLE}.parquet",
        }

    def linguistic_inputs(self, model: str) -> dict[str, Any]:
        """Every dump's linguistic score tables, by kind."""
        keys = self.of(model).linguistic_keys
        return {kind: [f"results/linguistic/{model}/{key}.{kind}.parquet" for key in keys]
                for kind in ("features", "relations", "cls_shares", "cls_max")} | {"fitness": f"{FITNESS_TABLE}.parquet"}

    def sweep_files(self, model: str, task: str, state: str) -> list[str]:
        """The sweep of every swept seed of ``task`` fine-tuned into ``state``: what its statistics pool."""
        return [f"{self.plan.disabling_dir(model, task, state, seed)}/sweep.parquet" for seed in self.of(model).swept_seeds(task, state)]

    def disabling_summary_inputs(self, model: str) -> dict[str, Any]:
        runs = self.of(model)
        pairs = runs.disabling_task_states
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in pairs],
            "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in pairs],
            "greedy": [f"{self.plan.disabling_dir(model, t, i, s)}/greedy.parquet" for t, i, s in runs.greedy],
        }

    def disabling_seed_note(self, model: str) -> str:
        """What the disabling captions say each statistic pools: ``MRPC 3, STS-B 1`` (swept seeds per task)."""
        runs = self.of(model)
        return ", ".join(f"{task} {len(runs.swept_seeds(task, state))}" for task, state in runs.disabling_task_states)

    def disabling_fitness_runs(self, model: str) -> dict[str, list[int]]:
        """Task -> the swept seeds of its models fine-tuned from the pre-trained encoder, which the disabling summary
        labels with their verdicts."""
        return {task: self.of(model).swept_seeds(task, states.FINETUNED) for task in self.plan.tasks}

    def pruning_summary_inputs(self, model: str) -> dict[str, Any]:
        runs, plan = self.of(model), self.plan
        methods, protocols = self.config["pruning"]["methods"], plan.lottery_protocols()
        folders = [(plan.pruning_dir(model, t, s), t, s) for t, s in runs.pruned]
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "importance": [f"{folder}/importance.parquet" for folder, _, _ in folders],
            "michel": [f"{folder}/michel_curve.parquet" for folder, _, _ in folders],
            "curves": [f"{folder}/{m}_{p}_curve.parquet" for folder, _, _ in folders for m in methods for p in protocols],
            "tickets": [f"{folder}/{m}_{p}_ticket.json" for folder, _, _ in folders for m in methods for p in protocols],
            # survival and stability: the held-out tickets
            "masks": [f"{folder}/{m}_held_out_mask.safetensors" for folder, _, _ in folders for m in methods],
            "compact": [f"{folder}/s_compact.json" for folder, _, _ in folders if "s" in methods],
            "subnetworks": [f"{plan.pruning_dir(model, t, s)}/subnetworks/{n}.json" for t, s, n in runs.subnetworks],
            "subnetwork_predictions": [f"{plan.pruning_dir(model, t, s)}/subnetworks/{n}.predictions.parquet"
                                       for t, s, n in runs.subnetworks],
            # the fine-tuned models' own dev predictions: the full reference when it is not re-fine-tuned
            "finetuned_predictions": [f"{plan.run_dir(model, t, states.FINETUNED, s)}/predictions.parquet" for _, t, s in folders],
            "dev": sorted({f"results/data/{t}/dev.parquet" for _, t, _ in folders}),
        }

    def pruning_recipe_note(self, model: str) -> str:
        """What the subnetworks' table says about how they were re-fine-tuned."""
        pruning = self.config["pruning"]
        if not self.of(model).subnetworks:
            return "none re-fine-tuned (pruning.subnetworks or every subnetwork_seeds is empty): the table holds the fine-tuned models only"
        if self.plan.subnetwork_reference_retrained():
            return (f"re-fine-tuned on {pruning['subnetwork_max_train_examples'] or 'all'} train examples, "
                    f"{pruning['subnetwork_epochs'] or 'the fine-tuning'} epochs; full = the same recipe")
        return "re-fine-tuned with the fine-tuning recipe; full = the fine-tuned model"

    def probing_summary_inputs(self, model: str) -> dict[str, Any]:
        runs = self.of(model)
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "probes": [f"results/probing/{model}/{state}/probes.parquet" for state in runs.probed],
            "heads": [f"results/probing/{model}/{state}/syntactic_heads.parquet" for state in runs.syntactic_heads],
            "held_out": [f"results/probing/{model}/{state}/syntactic_heads_held_out.parquet" for state in runs.syntactic_heads],
        }

    def gate_file(self, model: str, job: GateJob, suffix: str) -> str:
        task, seed, weights, strength = job
        return f"{GATE_DIR.format(model=model, task=task, seed=seed)}/{weights}_strength{strength}.{suffix}"

    def head_roles_summary_inputs(self, model: str) -> dict[str, Any]:
        runs = self.of(model)
        swept = [(task, state) for task, state in runs.disabling_task_states if state == states.FINETUNED]
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "roles": [f"results/head_roles/{model}/{key}.parquet" for key in runs.dump_keys],
            # Voita et al.'s token-level accuracy per relation and direction (the syntactic role)
            "voita": [f"results/probing/{model}/{state}/syntactic_heads_voita.parquet" for state in runs.syntactic_heads],
            "importance": [f"{self.plan.pruning_dir(model, t, s)}/importance.parquet" for t, s in runs.pruned],
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
            # in the order of head_roles_runs' keys, which the summary pairs them with
            "michel": [f"{self.plan.pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in runs.gate_curves],
            "gates": [self.gate_file(model, job, "json") for job in runs.gates],
            "gate_predictions": [self.gate_file(model, job, "predictions.parquet") for job in runs.gates],
            "dev": sorted({f"results/data/{t}/dev.parquet" for t, _, _, _ in runs.gates}),
        }

    def head_roles_runs(self, model: str) -> dict[str, list[Any]]:
        """What the head roles summary needs to read its inputs: the key of each per-run file, in input order."""
        runs = self.of(model)
        return {"roles": runs.dump_keys, "importance": runs.pruned, "michel": runs.gate_curves, "gates": runs.gates}

    def outlier_models(self, model: str) -> list[str]:
        """The folder of every fine-tuned model whose outlier dimensions are found (and disabled)."""
        return [f"{self.plan.run_dir(model, t, states.FINETUNED, s)}/model" for t, s in self.of(model).outliers]

    def outlier_disabling_files(self, model: str, task: str) -> list[str]:
        """The outlier disabling of every seed of ``task``: what its statistics pool."""
        return [f"results/outliers/{model}/{task}/seed{seed}/disabling.parquet" for seed in self.of(model).outlier_seeds(task)]

    def outliers_summary_inputs(self, model: str) -> dict[str, Any]:
        """The verdicts, the outlier dimensions found and every task's statistics."""
        tasks = self.of(model).outlier_tasks
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "parameters": f"results/outliers/{model}/parameters.parquet",
            "dimensions": f"results/outliers/{model}/dimensions.parquet",
            "deltas": [f"results/outliers/{model}/{task}/deltas.parquet" for task in tasks],
            "contrast": [f"results/outliers/{model}/{task}/contrast.parquet" for task in tasks],
        }

    def layer_mix_summary_inputs(self, model: str) -> dict[str, Any]:
        """The verdicts and the scalar mixes of every mixed state."""
        mixed = self.of(model).layer_mix
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "summaries": [f"results/layer_mix/{model}/{state}/summary.parquet" for state in mixed],
            "cumulative": [f"results/layer_mix/{model}/{state}/cumulative.parquet" for state in mixed],
        }

    def claims_inputs(self, model: str) -> dict[str, Any]:
        """Every per-example or per-element table the claims resample, from the stages this config runs."""
        runs, plan = self.of(model), self.plan
        swept = [(task, state) for task, state in runs.disabling_task_states if state == states.FINETUNED]
        inputs: dict[str, Any] = {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "report": f"results/patterns/{model}/classifier/report.json",
            "classes": [f"results/patterns/{model}/{task}/{states.seeded(states.FINETUNED, seed)}.classes.parquet"
                        for task, seed in runs.dumped_fine_tuned],
            "changes": [f"results/attention_change/{model}/{task}/seed{seed}.examples.parquet" for task, seed in runs.attention_change],
            "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in swept],
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
            "michel_curves": [f"{plan.pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in runs.pruned],
            "michel_predictions": [f"{plan.pruning_dir(model, t, s)}/michel_predictions.parquet" for t, s in runs.pruned],
        }
        if runs.pruned:
            inputs["stability"] = f"results/pruning/{model}/summary/stability.parquet"
        if states.PRETRAINED in runs.syntactic_heads:
            inputs["syntactic"] = f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads_held_out.parquet"
        if runs.dumps:
            inputs["role_relations"] = f"results/head_roles/{model}/summary/importance_relations.parquet"
            inputs["gates"] = f"results/head_roles/{model}/summary/gates.parquet"
        inputs["outlier_contrast"] = [f"results/outliers/{model}/{task}/contrast.parquet" for task in runs.outlier_tasks]
        if states.PRETRAINED in runs.layer_mix:
            inputs["mix_words"] = f"results/layer_mix/{model}/{states.PRETRAINED}/words.parquet"
        if states.PRETRAINED in runs.probed:
            inputs["probe_words"] = f"results/probing/{model}/{states.PRETRAINED}/probe_words.parquet"
        return inputs

    def claims_runs(self, model: str) -> dict[str, Any]:
        """What the claims script needs to read its inputs: the (task, seed) of each per-model file, the seeds each
        per-task table pools, and what each stage did (ran, skipped by fitness.unfit, not run)."""
        runs, tasks = self.of(model), self.plan.tasks
        skipped, sections = self.skipped_sections(model), self.sections(model)
        swept = states.FINETUNED in self.plan.disabling_states()
        return {
            "classes": runs.dumped_fine_tuned,
            "changes": runs.attention_change,
            "pruned": runs.pruned,
            "swept_seeds": {task: runs.swept_seeds(task, states.FINETUNED) for task in tasks if swept},
            "pruned_seeds": {task: [s for t, s in runs.pruned if t == task] for task in tasks},
            "stages": {anchor: "skipped" if anchor in skipped else "ran" if sections[anchor].runs else "not run"
                       for anchor in CLAIMED_SECTIONS},
        }

    def atlas_fitness_runs(self, model: str) -> dict[str, list[int]]:
        """Task -> every seed whose model fine-tuned from the pre-trained encoder a per-head stage analyses: the head
        atlas labels their rows with the verdicts."""
        return {task: self.of(model).analysed_seeds(task) for task in self.plan.tasks}

    def head_atlas_inputs(self, model: str) -> dict[str, Any]:
        """The per-head summary tables the atlas joins (those this config produces)."""
        produced = {stem for _, stem in self.shown_summaries(model)}
        wanted = {
            "patterns": f"patterns/{model}/summary/heads",
            "features": f"linguistic/{model}/summary/features",
            "cosine": f"attention_change/{model}/summary/cosine",
            "disabling": f"disabling/{model}/summary/heads",
            "importance": f"pruning/{model}/summary/importance",
            "survival": f"pruning/{model}/summary/survival",
            "best_relations": f"probing/{model}/summary/syntactic_heads",
            "roles": f"head_roles/{model}/summary/roles",
        }
        inputs: dict[str, Any] = {name: f"results/{stem}.parquet" for name, stem in wanted.items() if stem in produced}
        if "best_relations" in inputs:
            inputs["relations"] = [f"results/probing/{model}/{state}/head_relations.parquet" for state in self.of(model).syntactic_heads]
        inputs["fitness"] = f"{FITNESS_TABLE}.parquet"
        return inputs

    def layer_atlas_inputs(self, model: str) -> dict[str, str]:
        """The per-layer tables the layer atlas joins (those this config produces)."""
        produced = {stem for _, stem in self.shown_summaries(model)}
        inputs = {}
        if f"probing/{model}/summary/probes" in produced:
            inputs["probes"] = f"results/probing/{model}/summary/probes.parquet"
        if self.of(model).layer_mix:
            inputs["mix"] = f"results/layer_mix/{model}/summary/cumulative.parquet"
        if self.stage_runs(model, "outliers"):
            inputs["parameters"] = f"results/outliers/{model}/parameters.parquet"
        return inputs

    def report_section_shows(self) -> dict[str, dict[str, list[FineTuned]]]:
        """Model -> :meth:`section_shows`: what the report page warns about, for every model."""
        return {model: self.section_shows(model) for model in self.plan.models}

    def report_skipped_sections(self) -> dict[str, list[str]]:
        """Model -> :meth:`skipped_sections`: the sections the report page says were skipped, for every model."""
        return {model: self.skipped_sections(model) for model in self.plan.models}

    def report_inputs(self) -> dict[str, Any]:
        """The figure specs and tables the report page shows for every model (those of the sections whose stage runs),
        and the page's layout and section texts (report/) and its template, style and script (package data the code
        hash does not cover): editing them reruns the page only."""
        repo = self.plan.repo
        page = repo / "bertology_core" / "report" / "page"
        return {
            "shown": [f"results/{item_file(kind, stem)}" for model in self.plan.models for kind, stem in self.shown_summaries(model)],
            "fitness": f"{FITNESS_TABLE}.parquet",
            "layout": str(repo / "report" / "layout.yaml"),
            "texts": [str(repo / "report" / "sections" / f"{section.anchor}.rst") for section in SECTIONS],
            "page": sorted(str(path) for pattern in ("*.j2", "*.css", "*.js") for path in page.glob(pattern)),
        }


def section_texts_missing(repo: str | Path) -> list[str]:
    """The sections with no text (report/sections/<anchor>.rst): the page's intro, and the caption Snakemake's report
    needs for the section's files."""
    return [section.anchor for section in SECTIONS if not (Path(repo) / "report" / "sections" / f"{section.anchor}.rst").is_file()]


def hand_labels(files: Mapping[str, Any], card: Any, maps: Iterable[tuple[str, str, int]]) -> HandLabels:
    """A HandLabels from what was read: paths as text, the maps unique and sorted."""
    return HandLabels({role: str(path) for role, path in files.items()}, str(card) if card else None, tuple(sorted(set(maps))))


def label_files(labels: HandLabels | None) -> list[str]:
    """Every file of a model's hand labels (none without them): a Hub model is checked against them (rule check_model)."""
    return list(labels.files.values()) if labels else []
