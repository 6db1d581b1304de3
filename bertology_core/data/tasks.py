"""Tasks as the config declares them: where a task's examples are, what its labels mean, how it is scored.

A task is a declaration (``task_declarations`` in the config; GLUE's nine ship in ``glue.yaml`` beside this module,
written the same way): its label names in a fixed order (classification) or its score range (regression), its
metrics (the first, or ``main_metric``, is the one every stage reports), its language, and one or two sources:
``files`` (CSV, TSV, JSON Lines or Parquet, one file per split) and ``hub`` (a Hugging Face dataset: id,
configuration, revision, split names). Each source says which of its columns hold the text(s), the label and
optionally the example's integer id (else the row number within the split).

Every split is normalised to one schema, ``idx, sentence1, sentence2, label``: ``sentence2`` is null for
single-sentence tasks, ``label`` the class id (the label's position among the declared names) or a float score.

A task is of one of two kinds. ``sequence`` (the default): a label per example, as above. ``token``: a label per word
(part-of-speech tags, dependency relations, named entities), read from CoNLL-U (``files.format: conllu``; ``label``
names its column: ``upos``, ``xpos``, ``deprel``...; multiword tokens give way to the syntactic words they contain and
empty nodes are left out, as in UD's basic trees), from JSON Lines or Parquet with a list of words and a list of
labels (``text``: the words' column, ``label``: the labels'), or from a Hugging Face dataset (CoNLL-2003's ``tokens``
and ``ner_tags``, its ClassLabel names checked against the declared labels). Its normalised rows add ``words`` (the
sentence's words) and make ``label`` the list of their class ids; ``sentence1`` is the words joined by single spaces
(what a reader sees, and what the overlap check compares). A token task may declare ``scheme: BIO`` (IOB2: a span
starts with ``B-X`` and goes on with ``I-X``), so that spans are scored (``span_f1``, seqeval's definition); then every
label is ``O``, ``B-X`` or ``I-X`` and a word tagged ``I-X`` must follow ``B-X`` or ``I-X``.

Delimited files are read with the csv module, so that every problem names its line: ``quoting: false`` reads them
as GLUE's own ``_read_tsv`` did (quoting disabled: its sentences contain ``"``); a UTF-8 BOM (MRPC's header has one)
is stripped. A raw label is looked up among the declared names (JSON/Parquet booleans as ``false``/``true``); where
no declared name is itself an integer, an integer label is read as the position of a name (GLUE's ``0``/``1``).

Checked before anything is trained (:func:`check_splits`): a missing column or split, a label outside the names or
the range, an empty text (for a token task: an empty sentence or word, words and labels of different lengths, an
``I-`` without its ``B-`` under BIO), a duplicated id, an example whose id or text is also in another split, non-UTF-8 bytes,
an unrecognised format. The official GLUE release has empty texts (QQP) and examples repeated across its splits
(CoLA, STS-B): its declarations list them (``known_empty``, ``known_overlap``), so they are left out or allowed by
name while anything else is refused.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from bertology_core.data import io

SCHEMA = {"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String}
# the declarations that ship with the project, one file per collection, and the key of the config's data section
# naming the folder their files are under (GLUE's classic layout; UD treebanks' CoNLL-U files)
SHIPPED = {Path(__file__).with_name("glue.yaml"): "glue_dir", Path(__file__).with_name("tagging.yaml"): "ud_dir"}
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet", ".conllu": "conllu"}
TOKEN_FORMATS = ("conllu", "jsonl", "parquet")
CLASSIFICATION_METRICS = ("accuracy", "f1", "f1_macro", "matthews_correlation")
REGRESSION_METRICS = ("pearson", "spearman")
# a token task's: accuracy and macro F1 over its words, span F1 over the spans of a BIO scheme
TOKEN_METRICS = ("accuracy", "f1_macro", "span_f1")
KINDS = ("sequence", "token")
SCHEMES = ("BIO",)
# the columns of a CoNLL-U word line, as a token task's label names them (id, form and head are no labels)
CONLLU_FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
CONLLU_LABELS = ("lemma", "upos", "xpos", "feats", "deprel", "deps", "misc")
REQUIRED_SPLITS = ("train", "dev")
# a task's and a split's name are folders and file names in every results path
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class DataError(ValueError):
    """Bad or missing input data; the message names the file, the field and the fix."""


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where a source holds an example: its text column(s) (one or two), its label column, its id column (None: the
    row number within the split)."""

    text: tuple[str, ...]
    label: str
    id: str | None = None

    @classmethod
    def read(cls, raw: Mapping[str, Any], key: str, kind: str = "sequence") -> Columns:
        if raw.get("format") == "conllu":
            if raw.get("text") not in (None, "form", ["form"]) or raw.get("id") is not None:
                raise DataError(f"{key}: a CoNLL-U file's words are its FORM column and its sentences are numbered in "
                                "file order. Fix: leave text and id out of the declaration.")
            if raw.get("label") not in CONLLU_LABELS:
                raise DataError(f"{key}.label: {raw.get('label')!r} is not a CoNLL-U column a word's label can be read "
                                f"from. Fix: one of {list(CONLLU_LABELS)}.")
            return cls(("form",), raw["label"])
        text = raw.get("text")
        text = (text,) if isinstance(text, str) else tuple(text or ())
        if kind == "token" and len(text) != 1:
            raise DataError(f"{key}.text: {raw.get('text')!r}: a token task's text is one column, holding each "
                            "sentence's list of words. Fix: text: <the words' column> (label: the labels' column).")
        if not 1 <= len(text) <= 2 or not all(isinstance(t, str) and t for t in text):
            raise DataError(f"{key}.text: {raw.get('text')!r} is not one or two column names. Fix: text: [sentence] or "
                            "text: [premise, hypothesis].")
        if not isinstance(raw.get("label"), str):
            raise DataError(f"{key}.label: {raw.get('label')!r} is not a column name. Fix: label: <the label's column>.")
        columns = cls(text, raw["label"], raw.get("id"))
        if len(set(columns.names())) != len(columns.names()):
            raise DataError(f"{key}: text {list(text)}, label {columns.label!r} and id {columns.id!r} name a column twice. "
                            "Fix: each names a column of its own.")
        return columns

    def names(self) -> list[str]:
        return [*self.text, self.label, *([self.id] if self.id else [])]


@dataclasses.dataclass(frozen=True)
class Files:
    """Local files, one per split (``splits``: split -> path under ``dir``)."""

    dir: Path
    splits: Mapping[str, str]
    columns: Columns
    format: str | None = None  # None: from each file's extension
    header: bool = True  # delimited files: the first line names the columns
    column_names: tuple[str, ...] | None = None  # delimited files without a header: every column, in order
    quoting: bool = True  # delimited files: fields may be quoted ("a, b"); false reads every quote as text

    def path(self, split: str) -> Path:
        return self.dir / self.splits[split]

    def at(self, paths: Mapping[str, str | Path]) -> Files:
        """The same files, found at ``paths`` (split -> path: where a job was given them)."""
        return dataclasses.replace(self, dir=Path(), splits={split: str(path) for split, path in paths.items()})

    def format_of(self, split: str) -> str:
        """The file's format: the declared one, else from its extension; a DataError names both when neither is
        known."""
        if self.format:
            return self.format
        path = self.path(split)
        known = FORMATS.get(path.suffix.lower())
        if known is None:
            raise DataError(f"{path}: file format {path.suffix or '(no extension)'!r} not recognised. Fix: name the file "
                            f"*.csv, *.tsv, *.jsonl or *.parquet, or declare files.format ({', '.join(FORMATS.values())}).")
        return known


@dataclasses.dataclass(frozen=True)
class Hub:
    """A Hugging Face dataset: ``dataset`` (a Hub id, or a folder laid out as a Hub dataset), its configuration and
    revision, ``splits``: split -> the dataset's split name."""

    dataset: str
    splits: Mapping[str, str]
    columns: Columns
    config: str | None = None
    revision: str | None = None

    def origin(self, split: str) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"hub {self.dataset}{at} {self.config or ''}/{self.splits[split]}".replace(" /", " ")


@dataclasses.dataclass(frozen=True)
class Task:
    """One declared task. ``label_names`` (classification, in the declared order: their positions are the class
    ids) or ``label_range`` (regression); ``metrics``: the main metric first."""

    name: str
    label_names: tuple[str, ...] | None
    label_range: tuple[float, float] | None
    metrics: tuple[str, ...]
    language: str | None = None
    files: Files | None = None
    hub: Hub | None = None
    known_empty: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    known_overlap: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    overlap: str = "error"  # an example in two splits: an error, or (a release not checked here) a warning
    kind: str = "sequence"  # KINDS: a label per example, or per word
    scheme: str | None = None  # a token task's labels' span scheme (SCHEMES), None where they tag words alone

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def is_token(self) -> bool:
        return self.kind == "token"

    @property
    def stratifies(self) -> bool:
        """Whether a split of its examples in halves keeps each class's share (a label per example: classification;
        not regression, nor a token task, whose sentence holds many labels)."""
        return not self.is_regression and not self.is_token

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def main_metric(self) -> str:
        return self.metrics[0]

    @property
    def label_dtype(self) -> type[pl.DataType]:
        """A label's (and a prediction's) type in a table: a score (regression), a class id, or (a token task) the class
        ids of a sentence's words."""
        if self.is_token:
            return pl.List(pl.Int64)
        return pl.Float64 if self.is_regression else pl.Int64

    def predictions(self, logits: np.ndarray) -> np.ndarray:
        """What the model predicts from its ``[..., num_labels]`` logits: the score (regression) or the class id of the
        highest logit (the first, on a tie); for a token task's word with no piece in the input (NaN logits), -1."""
        if self.is_regression:
            return logits[..., 0]
        if self.is_token:
            unread = np.isnan(logits).any(-1)
            return np.where(unread, -1, np.where(unread[..., None], 0.0, logits).argmax(-1))
        return logits.argmax(-1)

    @property
    def splits(self) -> tuple[str, ...]:
        source = self.files or self.hub
        assert source is not None
        return tuple(source.splits)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.splits if s != "train")

    def source(self, preferred: str) -> Files | Hub:
        """The source a run reads: ``preferred`` (data.source: local or hub) where the task declares both."""
        if self.files is not None and (preferred == "local" or self.hub is None):
            return self.files
        assert self.hub is not None
        return self.hub

    def meaning(self) -> dict[str, Any]:
        """What a job that scores or trains on the prepared data needs of the task (its params: a change reruns
        it); not where the data came from, nor its language (only the linguistic stage reads that)."""
        meaning = {"name": self.name, "label_names": list(self.label_names) if self.label_names else None,
                   "label_range": list(self.label_range) if self.label_range else None, "metrics": list(self.metrics)}
        # a sequence task's params stay as they were before token tasks existed: its jobs are not rerun for them
        return meaning | ({"kind": self.kind, "scheme": self.scheme} if self.is_token else {})

    @classmethod
    def from_meaning(cls, meaning: Mapping[str, Any]) -> Task:
        """The task a job was given as params (:meth:`meaning`)."""
        return cls(meaning["name"], tuple(meaning["label_names"]) if meaning["label_names"] else None,
                   tuple(meaning["label_range"]) if meaning["label_range"] else None, tuple(meaning["metrics"]),
                   kind=meaning.get("kind", "sequence"), scheme=meaning.get("scheme"))


# --- declarations ------------------------------------------------------------------------------------------------


def declare(name: str, raw: Mapping[str, Any], folder: str | Path, key: str = "task_declarations") -> Task:
    """The task a declaration describes (``raw``: one entry of ``task_declarations``, as the config schema checks
    its shape). ``folder``: where ``files.dir`` (or, without one, the file paths) are relative to. Every problem
    raises a DataError naming the config key and the fix."""
    key = f"{key}.{name}"
    if not TASK_NAME.fullmatch(name):
        raise DataError(f"{key}: {name!r} is not a task name. Fix: letters, digits, '.', '_' and '-', starting with a "
                        "letter or digit (it names a folder in every results path).")
    kind, scheme = raw.get("kind", "sequence"), raw.get("scheme")
    if kind not in KINDS:
        raise DataError(f"{key}.kind: {kind!r} is not a task kind. Fix: sequence (a label per example) or token (a "
                        "label per word).")
    labels, value_range = raw.get("labels"), raw.get("range")
    if kind == "token" and labels is None:
        raise DataError(f"{key}: a token task labels words with names. Fix: declare labels (every tag, in a fixed "
                        "order), not range.")
    if (labels is None) == (value_range is None):
        raise DataError(f"{key}: declare either labels (classification: the names, in a fixed order) or range "
                        "(regression: [low, high]), not both or neither.")
    if labels is not None:
        labels = tuple(("true" if label else "false") if isinstance(label, bool) else str(label) for label in labels)
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise DataError(f"{key}.labels: {list(labels)} must be two or more distinct names.")
    if scheme is not None:
        if kind != "token" or scheme not in SCHEMES:
            raise DataError(f"{key}.scheme: {scheme!r}: a span scheme belongs to a token task and is one of "
                            f"{list(SCHEMES)}. Fix: declare kind: token and scheme: BIO, or leave scheme out.")
        _check_bio_labels(labels, f"{key}.labels")
    if value_range is not None:
        low, high = (float(v) for v in value_range)
        if not low < high:
            raise DataError(f"{key}.range: {value_range} must be [low, high] with low < high.")
        value_range = (low, high)
    if kind == "token":
        default, allowed, what = (("span_f1", "accuracy") if scheme else ("accuracy", "f1_macro")), TOKEN_METRICS, "token"
    elif labels is None:
        default, allowed, what = ("pearson", "spearman"), REGRESSION_METRICS, "regression"
    else:
        default, allowed, what = ("accuracy",), CLASSIFICATION_METRICS, "classification"
    metrics = tuple(raw.get("metrics") or default)
    if wrong := [m for m in metrics if m not in allowed]:
        raise DataError(f"{key}.metrics: {wrong} do not score a {what} task. Fix: choose from {list(allowed)}.")
    if "span_f1" in metrics and scheme is None:
        raise DataError(f"{key}.metrics: span_f1 scores the spans of a BIO scheme; {name} declares none. Fix: declare "
                        "scheme: BIO (labels O, B-X, I-X), or score with accuracy and f1_macro.")
    if "f1" in metrics and labels is not None and len(labels) != 2:
        raise DataError(f"{key}.metrics: f1 is binary F1 (of the label with id 1, {labels[1]!r}); "
                        f"{name} has {len(labels)} labels. Fix: use f1_macro.")
    main = raw.get("main_metric") or metrics[0]
    if main not in metrics:
        raise DataError(f"{key}.main_metric: {main!r} is not among its metrics {list(metrics)}. Fix: add it to metrics.")
    metrics = (main, *(m for m in metrics if m != main))
    files = hub = None
    if raw.get("files"):
        spec = dict(raw["files"])
        splits = _splits(spec, f"{key}.files")
        if not spec.get("format") and splits and all(Path(f).suffix.lower() == ".conllu" for f in splits.values()):
            spec["format"] = "conllu"
        if spec.get("format") not in ((None, *TOKEN_FORMATS) if kind == "token" else (None, *set(FORMATS.values()) - {"conllu"})):
            raise DataError(f"{key}.files.format: {spec.get('format')!r} does not hold a {kind} task's examples. Fix: "
                            + ("a token task reads conllu, jsonl or parquet (a list of words and a list of labels)."
                               if kind == "token" else "a sequence task reads csv, tsv, jsonl or parquet; for a label "
                               "per word declare kind: token."))
        base = Path(folder) / Path(spec.get("dir", "")).expanduser()
        files = Files(base, splits, Columns.read(spec, f"{key}.files", kind), spec.get("format"),
                      spec.get("header", True), tuple(spec["column_names"]) if spec.get("column_names") else None,
                      spec.get("quoting", True))
        if not files.header and not files.column_names:
            raise DataError(f"{key}.files: header: false needs column_names (every column of the file, in order).")
    if raw.get("hub"):
        spec = raw["hub"]
        hub = Hub(spec["dataset"], _splits(spec, f"{key}.hub"), Columns.read(spec, f"{key}.hub", kind), spec.get("config"),
                  spec.get("revision"))
    if files is None and hub is None:
        raise DataError(f"{key}: no source. Fix: declare files (a file per split) or hub (a Hugging Face dataset).")
    if files is not None and hub is not None and set(files.splits) != set(hub.splits):
        raise DataError(f"{key}: files and hub declare different splits ({sorted(files.splits)} vs {sorted(hub.splits)}).")
    known = {kind: {split: tuple(ids) for split, ids in (raw.get(kind) or {}).items()} for kind in ("known_empty", "known_overlap")}
    declared_splits = (files or hub).splits  # type: ignore[union-attr]
    if stray := [f"{kind}.{split}" for kind, by_split in known.items() for split in by_split if split not in declared_splits]:
        raise DataError(f"{key}: {', '.join(stray)} name(s) a split the task does not declare ({list(declared_splits)}).")
    overlap = raw.get("overlap", "error")
    if overlap not in ("error", "warn"):
        raise DataError(f"{key}.overlap: {overlap!r} is not error or warn.")
    return Task(name, labels, value_range, metrics, raw.get("language"), files, hub, **known, overlap=overlap, kind=kind,
                scheme=scheme)


def _check_bio_labels(labels: tuple[str, ...], key: str) -> None:
    """A BIO (IOB2) scheme's labels: ``O``, and for each span type X both ``B-X`` and (if any span is longer than a word)
    ``I-X``; an ``I-X`` without ``B-X`` could never start a span."""
    wrong = [label for label in labels if label != "O" and not re.fullmatch(r"[BI]-\S+", label)]
    if wrong or "O" not in labels:
        raise DataError(f"{key}: under scheme BIO every label is O, B-<type> or I-<type>, and O is one of them; "
                        f"{wrong if wrong else 'O is missing'}. Fix: name the labels so (B-PER, I-PER, O), or leave "
                        "scheme out.")
    if orphans := [label for label in labels if label.startswith("I-") and "B-" + label[2:] not in labels]:
        raise DataError(f"{key}: {orphans} have no B- label to start their span. Fix: add "
                        f"{['B-' + label[2:] for label in orphans]}.")


def _splits(spec: Mapping[str, Any], key: str) -> dict[str, str]:
    splits = dict(spec.get("splits") or {})
    if wrong := [split for split in splits if not SPLIT_NAME.fullmatch(str(split))]:
        raise DataError(f"{key}.splits: {wrong} are not split names. Fix: letters, digits, '_' and '-' (a split names "
                        "a file of every prepared task).")
    if missing := [s for s in REQUIRED_SPLITS if s not in splits]:
        raise DataError(f"{key}.splits: no {' or '.join(missing)} split. Fix: declare a train and a dev split (further "
                        "splits are evaluated beside dev).")
    return splits


def shipped_declarations() -> dict[str, Any]:
    """The declarations that ship with the project (GLUE's nine in glue.yaml; UD English EWT's part-of-speech tagging and CoNLL-2003's named entities in tagging.yaml), as written."""
    return {name: raw for path in SHIPPED for name, raw in yaml.safe_load(path.read_text()).items()}


def shipped_dir_key(name: str) -> str:
    """The key of the config's data section naming the folder a shipped task's files are under."""
    return next(key for path, key in SHIPPED.items() if name in yaml.safe_load(path.read_text()))


def declared_tasks(declarations: Mapping[str, Any], shipped_dirs: Mapping[str, str | Path] | str | Path,
                   repo: str | Path = ".") -> dict[str, Task]:
    """Every task: the shipped declarations (their files under ``shipped_dirs``: the config's data key of each
    collection, glue_dir and ud_dir, to its folder; one folder for all), then the config's ``task_declarations``
    (``declarations``; paths relative to ``repo``), which may replace a shipped one."""
    shipped = {}
    for path, key in SHIPPED.items():
        folder = shipped_dirs if isinstance(shipped_dirs, (str, Path)) else shipped_dirs[key]
        shipped |= {name: declare(name, raw, folder) for name, raw in yaml.safe_load(path.read_text()).items()}
    return shipped | {name: declare(name, raw, repo) for name, raw in declarations.items()}


def glue_task(name: str, glue_dir: str | Path = "glue_data") -> Task:
    """A shipped task by name, its files under ``glue_dir`` (for the library's users that have no config)."""
    tasks = declared_tasks({}, glue_dir)
    if name not in tasks:
        raise DataError(f"Unknown task {name!r}. Shipped tasks: {', '.join(tasks)} (names are case-sensitive); "
                        "declare others under task_declarations.")
    return tasks[name]


# --- reading -----------------------------------------------------------------------------------------------------

# (position among the split's rows, where it is: "path:line" or the Hub split and row, id or None, texts, raw label)
RawRow = tuple[int, str, Any, tuple[Any, ...], Any]


def read_split(task: Task, split: str, source: Files | Hub) -> pl.DataFrame:
    """One split in the normalised schema, every row checked (columns, text, label, id)."""
    if split not in source.splits:
        raise DataError(f"{task.name}: no split {split!r} declared. Fix: add it to the declaration's splits.")
    rows = _read_hub(task, split, source) if isinstance(source, Hub) else _read_file(task, split, source)
    return _normalise(task, split, rows, source.columns, origin(source, split))


def declared_files(task: Task) -> Files:
    """The task's declared files; a DataError where it declares none."""
    if task.files is None:
        raise DataError(f"{task.name} declares no files. Fix: declare task_declarations.{task.name}.files, or read its "
                        "Hugging Face dataset.")
    return task.files


def read_files(task: Task, split: str) -> pl.DataFrame:
    """One split from the task's declared files (:func:`read_split`)."""
    return read_split(task, split, declared_files(task))


def origin(source: Files | Hub, split: str) -> str:
    return str(source.path(split)) if isinstance(source, Files) else source.origin(split)


def missing_files(tasks: Iterable[Task]) -> list[Path]:
    """Every declared file of these tasks' local sources that does not exist."""
    return [task.files.path(split) for task in tasks if task.files is not None for split in task.splits
            if not task.files.path(split).is_file()]


def missing_files_message(missing: list[Path]) -> str:
    listed = "\n".join(f"  - {p}" for p in missing)
    return (
        f"Task data not found: {len(missing)} file(s) missing:\n{listed}\n"
        "Fix: point the task's files at existing files (task_declarations.<TASK>.files.dir and splits; GLUE's: "
        "data.glue_dir, a folder in the classic layout <glue_dir>/<TASK>/{train,dev}.tsv as written by GLUE's "
        "download_glue_data.py, MNLI with dev_matched.tsv and dev_mismatched.tsv), or set data.source: hub for tasks "
        "that declare a Hugging Face dataset (GLUE's: nyu-mll/glue). Or remove the task from `tasks`."
    )


@contextlib.contextmanager
def _long_csv_fields() -> Iterator[None]:
    """Rows can be long (MNLI's parses): csv's default limit of 128 KiB per field is raised while a split is read,
    and restored after (it is process-wide)."""
    previous = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _read_file(task: Task, split: str, files: Files) -> Iterator[RawRow]:
    path = files.path(split)
    if not path.is_file():
        raise DataError(missing_files_message([path]))
    kind = files.format_of(split)
    if (kind == "conllu" and not task.is_token) or (task.is_token and kind not in TOKEN_FORMATS):
        raise DataError(f"{path}: a {kind} file does not hold {task.name}'s examples (a {task.kind} task). Fix: "
                        + ("a token task reads CoNLL-U, JSON Lines or Parquet." if task.is_token else
                           "CoNLL-U labels words: declare kind: token."))
    if kind in ("csv", "tsv", "jsonl", "conllu"):
        with path.open("rb") as handle:
            head = handle.read(4096)
        if head.startswith(b"PAR1") or b"\0" in head:
            raise DataError(f"{path}: a binary file{' (Parquet)' if head.startswith(b'PAR1') else ''}, not {kind} text. Fix: "
                            "declare its real format (files.format, or the file's extension).")
    try:
        if kind in ("csv", "tsv"):
            yield from _read_delimited(path, files, "," if kind == "csv" else "\t")
        elif kind == "jsonl":
            yield from _read_json_lines(path, files.columns)
        elif kind == "parquet":
            yield from _read_parquet(path, files.columns)
        elif kind == "conllu":
            yield from _read_conllu(path, files.columns.label)
        else:
            raise DataError(f"{path}: files.format {kind!r} not recognised. Fix: one of {', '.join(FORMATS.values())}.")
    except UnicodeDecodeError:
        raise DataError(io.not_utf8_message(path)) from None


def _missing_columns(where: str, wanted: Iterable[str], present: list[str]) -> DataError:
    absent = [c for c in wanted if c not in present]
    return DataError(f"{where}: no column {', '.join(map(repr, absent))} (the file has {', '.join(map(repr, present))}). "
                     "Fix: name the columns the file has in the task's declaration (text, label, id), or rename them in "
                     "the file.")


def _read_delimited(path: Path, files: Files, delimiter: str) -> Iterator[RawRow]:
    quoting = csv.QUOTE_MINIMAL if files.quoting else csv.QUOTE_NONE
    separated = "tab" if delimiter == "\t" else "comma"
    with _long_csv_fields(), path.open(encoding="utf-8-sig", newline="") as handle:
        # strict: a quote in the middle of a field, or one never closed, is an error rather than a silent guess
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting, strict=True)
        start = 1
        try:
            names = next(reader, None) if files.header else list(files.column_names or ())
            if names is None:
                raise DataError(f"{path}: the file is empty (no header line). Fix: supply the split's examples.")
            names = [name.strip() for name in names]
            if repeated := sorted({name for name in names if names.count(name) > 1}):
                raise DataError(f"{path}:1: the header names {repeated} more than once. Fix: give every column its own name.")
            wanted = files.columns.names()
            if any(c not in names for c in wanted):
                raise _missing_columns(f"{path}:1" if files.header else f"{path}: files.column_names", wanted, names)
            at = [names.index(c) for c in wanted]
            n_text = len(files.columns.text)
            position = 0
            start = reader.line_num + 1
            for row in reader:
                line = f"{start}" if reader.line_num == start else f"{start}-{reader.line_num}"
                if reader.line_num != start and len(row) > 1:
                    raise DataError(
                        f"{path}:{line}: one record spans lines {line}: a quoted field holds a line break, or a quote "
                        "is not closed. Fix: close the quote, or replace the line breaks inside the text by spaces"
                        + ("" if delimiter == "," else ", or declare files.quoting: false if quotes are part of the text")
                        + ".")
                start = reader.line_num + 1
                if not row or row == [""]:
                    continue
                if len(row) != len(names):
                    raise DataError(
                        f"{path}:{line}: expected {len(names)} {separated}-separated fields ({', '.join(names)}), found "
                        f"{len(row)}. Fix: repair the line (a stray {'tab' if separated == 'tab' else 'comma or quote'} or a "
                        f"newline inside a text)" + ("" if files.quoting else ", or declare files.quoting: true if its "
                                                    "fields are quoted") + ".")
                values = [row[i] for i in at]
                yield (position, f"{path}:{line}", values[n_text + 1] if files.columns.id else None,
                       tuple(values[:n_text]), values[n_text])
                position += 1
        except csv.Error as error:
            raise DataError(f"{path}:{start}: {error} (a quote inside a field, or one never closed, in the record that "
                            "starts on this line). Fix: "
                            "double the quotes inside a quoted field (\"\"), quote the field"
                            + (", or declare files.quoting: false if quotes are part of the text" if delimiter == "\t" else "")
                            + ".") from None


def _read_json_lines(path: Path, columns: Columns) -> Iterator[RawRow]:
    wanted = columns.names()
    position = 0
    with path.open(encoding="utf-8-sig") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(f"{path}:{line_no}: not a JSON object ({error.msg}). Fix: one JSON object per line.") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{line_no}: a JSON {type(record).__name__}, not an object. Fix: one JSON object "
                                "per line, with the declared fields.")
            if any(c not in record for c in wanted):
                raise _missing_columns(f"{path}:{line_no}", wanted, list(record))
            yield (position, f"{path}:{line_no}", record[columns.id] if columns.id else None,
                   tuple(record[c] for c in columns.text), record[columns.label])
            position += 1


def _read_parquet(path: Path, columns: Columns) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as error:  # pyarrow raises several types for a file that is not Parquet
        raise DataError(f"{path}: not a Parquet file ({type(error).__name__}: {error}). Fix: write it with "
                        "polars/pandas/pyarrow, or declare its real format (files.format).") from None
    wanted = columns.names()
    if any(c not in schema.names for c in wanted):
        raise _missing_columns(str(path), wanted, list(schema.names))
    table = pl.read_parquet(path, columns=list(dict.fromkeys(wanted)))
    for position, record in enumerate(table.iter_rows(named=True)):
        yield (position, f"{path}: row {position + 1}", record[columns.id] if columns.id else None,
               tuple(record[c] for c in columns.text), record[columns.label])


def _read_conllu(path: Path, column: str) -> Iterator[RawRow]:
    """The sentences of a CoNLL-U file as (words, labels of ``column``): syntactic words only (a multiword token's
    range line, ``3-4 don't``, gives way to the words it contains; empty nodes, ``5.1``, are left out). Each line is
    checked for its ten tab-separated fields and its word id; the trees are not (a tagging file may leave HEAD
    ``_``: the probing stages' reader, bertology_core.data.treebank, checks trees)."""
    at = CONLLU_FIELDS.index(column)
    position, words, labels, first, sent_id = 0, [], [], 0, None
    with path.open(encoding="utf-8-sig") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip():
                if first:
                    yield (position, f"{path}:{first}" + (f" (sent_id {sent_id})" if sent_id else ""), None, (words,),
                           labels)
                    position += 1
                words, labels, first, sent_id = [], [], 0, None
                continue
            if line.startswith("#"):
                if match := re.fullmatch(r"#\s*sent_id\s*=\s*(.*?)\s*", line):
                    sent_id = match.group(1)
                continue
            fields = line.split("\t")
            if len(fields) != len(CONLLU_FIELDS):
                raise DataError(f"{path}:{number}: {len(fields)} tab-separated fields, CoNLL-U has 10 (ID FORM LEMMA UPOS "
                                "XPOS FEATS HEAD DEPREL DEPS MISC). Fix: separate the fields by single tabs, _ for an "
                                "empty one.")
            first = first or number
            if re.fullmatch(r"[1-9][0-9]*-[1-9][0-9]*|[0-9]+\.[1-9][0-9]*", fields[0]):
                continue  # a multiword token's range, or an empty node
            if not re.fullmatch(r"[1-9][0-9]*", fields[0]) or int(fields[0]) != len(words) + 1:
                raise DataError(f"{path}:{number}: field 'ID' = {fields[0]!r}, expected word {len(words) + 1} of the "
                                "sentence. Fix: number the words 1, 2, ... (ranges 3-4 and empty nodes 5.1 allowed), "
                                "with a blank line after each sentence.")
            words.append(fields[1])
            labels.append(fields[at])
    if first:
        yield (position, f"{path}:{first}" + (f" (sent_id {sent_id})" if sent_id else ""), None, (words,), labels)


def _read_hub(task: Task, split: str, hub: Hub) -> Iterator[RawRow]:
    data = load_hub_split(task, split, hub)
    wanted = hub.columns.names()
    if any(c not in data.column_names for c in wanted):
        raise _missing_columns(hub.origin(split), wanted, list(data.column_names))
    feature = data.features.get(hub.columns.label)
    if task.is_token:  # a list of labels: its items' feature (datasets' List or Sequence) holds the names
        feature = getattr(feature, "feature", None)
    names = getattr(feature, "names", None)
    if names is not None and task.is_regression:
        raise DataError(f"{hub.origin(split)}: field {hub.columns.label!r} holds class ids of {list(names)}; {task.name} "
                        "is declared a regression task (range). Fix: declare its labels, or name its score column.")
    if names is not None and tuple(names) != task.label_names:
        raise DataError(f"{hub.origin(split)}: field {hub.columns.label!r} holds class ids of {list(names)}, the task "
                        f"declares labels {list(task.label_names or ())}. Fix: declare the dataset's names in its order, "
                        "so that ids agree.")
    for position, record in enumerate(data.select_columns(list(dict.fromkeys(wanted)))):
        label = record[hub.columns.label]
        if names is not None:  # class ids of the dataset's own names (checked equal to the declared ones)
            label = [_hub_name(item, names) for item in label] if task.is_token and isinstance(label, list) else (
                _hub_name(label, names))
        yield (position, f"{hub.origin(split)} row {position + 1}", record[hub.columns.id] if hub.columns.id else None,
               tuple(record[c] for c in hub.columns.text), label)


def _hub_name(label: Any, names: list[str]) -> Any:
    return names[label] if isinstance(label, int) and 0 <= label < len(names) else label


def load_hub_split(task: Task, split: str, hub: Hub) -> Any:
    """One split through ``datasets`` (network, its cache, or a folder laid out as a Hub dataset)."""
    try:
        import datasets  # imported lazily: only Hub users pay for it (the project's `hub` extra)
    except ImportError:
        raise DataError(f"{task.name} from the Hugging Face Hub needs the datasets package. Fix: pip install -e '.[hub]' "
                        "(or declare the task's files and set data.source: local).") from None
    try:
        return datasets.load_dataset(hub.dataset, hub.config, split=hub.splits[split], revision=hub.revision)
    except Exception as error:  # offline, unreachable or unknown: datasets raises many types; each gets the same fix
        raise DataError(hub_unreachable_message(task, hub, error)) from error


def hub_unreachable_message(task: Task, hub: Hub, error: BaseException) -> str:
    arguments = ", ".join([repr(hub.dataset), *([repr(hub.config)] if hub.config else []),
                           *([f"revision={hub.revision!r}"] if hub.revision else [])])
    return (
        f"{task.name}: dataset {hub.dataset}{' config ' + hub.config if hub.config else ''}"
        f"{' revision ' + hub.revision if hub.revision else ''} could not be loaded ({type(error).__name__}: "
        f"{str(error)[:300]}). Fix: check the dataset, config, revision and split names in the task's declaration "
        f"(splits: {dict(hub.splits)}); without internet, connect this machine (and unset HF_HUB_OFFLINE), or bring "
        "the data over as files from a machine that has internet: there, run "
        f"`python -c \"import datasets; d = datasets.load_dataset({arguments}); "
        "[d[s].to_parquet(f'{s}.parquet') for s in d]\"`, copy the Parquet files here and declare them as the task's "
        "files (task_declarations.<TASK>.files, with data.source: local); or copy that machine's "
        "~/.cache/huggingface/datasets folder to the same place here and run with HF_HUB_OFFLINE=1."
    )


# --- checking ----------------------------------------------------------------------------------------------------


def _label_id(task: Task, raw: Any, where: str, column: str) -> float | int:
    if task.is_regression:
        assert task.label_range is not None
        low, high = task.label_range
        try:
            value = math.nan if isinstance(raw, bool) else float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if math.isnan(value):
            raise DataError(f"{where}: field {column!r} = {raw!r} is not a number; {task.name} is a regression task with "
                            f"scores in [{low:g}, {high:g}]. Fix: correct the score.")
        if not low <= value <= high:
            raise DataError(f"{where}: field {column!r} = {raw!r} is outside {task.name}'s range [{low:g}, {high:g}]. Fix: "
                            "correct the score, or the declared range.")
        return value
    assert task.label_names is not None
    names = task.label_names
    if isinstance(raw, bool):  # a JSON or Parquet boolean: the name false/true, whatever its case
        text = next((name for name in names if name.lower() == str(raw).lower()), str(raw).lower())
    elif isinstance(raw, float) and raw.is_integer():
        text = str(int(raw))  # an integer written as a float (a column with missing values, say)
    else:
        text = None if raw is None else str(raw).strip()
    if text in names:
        return names.index(text)
    numbered = not any(name.lstrip("-").isdigit() for name in names)
    if numbered and text is not None and text.lstrip("-").isdigit() and 0 <= int(text) < task.num_labels:
        return int(text)
    ids = f" or their ids 0..{task.num_labels - 1}" if numbered else " (the names are integers: a label is read as a name)"
    hint = (" YAML reads unquoted yes/no/on/off/true/false as booleans: quote the names in the declaration."
            if {"true", "false"} & set(names) else "")
    raise DataError(f"{where}: field {column!r} = {raw!r} is not a {task.name} label. Allowed: {list(names)}{ids}. Fix: "
                    "correct the label (a hidden test label such as -1 has no place in a scored split), or add it to the "
                    f"task's declared labels.{hint}")


def _normalise(task: Task, split: str, rows: Iterable[RawRow], columns: Columns, source: str) -> pl.DataFrame:
    records: list[tuple[Any, ...]] = []
    lookup = {name: i for i, name in enumerate(task.label_names or ())}  # a token's label, found in one step
    first_at: dict[int, str] = {}
    known_empty = set(task.known_empty.get(split, ()))
    for position, where, raw_id, texts, raw_label in rows:
        idx = position if columns.id is None else _integer_id(raw_id, where, columns.id)
        if idx in first_at:
            raise DataError(f"{where}: field {columns.id!r} = {idx} is not unique: {first_at[idx]} has it too. Fix: give "
                            "every example its own id, or leave id out of the declaration (the row number).")
        if columns.id is not None:
            first_at[idx] = where
        if task.is_token:
            words = _words(task, texts[0], raw_label, where, columns)
            if words is None:
                if idx in known_empty:
                    logging.warning("%s: idx %d is an empty sentence in the official release; left out", where, idx)
                    continue
                raise DataError(f"{where}: field {columns.text[0]!r} is an empty sentence (idx {idx}): no word to label. "
                                "Fix: delete the sentence, or restore its words.")
            ids = [lookup.get(label) if isinstance(label, str) else None for label in raw_label]
            if None in ids:
                ids = [_label_id(task, label, f"{where}, word {i + 1} ({words[i]!r})", columns.label)
                       for i, label in enumerate(raw_label)]
            if task.scheme == "BIO":
                _check_bio(task, words, ids, where, columns.label)
            records.append((idx, " ".join(words), None, words, ids))
            continue
        if wrong := [i for i, text in enumerate(texts) if text is not None and not isinstance(text, str)]:
            raise DataError(f"{where}: field {columns.text[wrong[0]]!r} = {texts[wrong[0]]!r} is a "
                            f"{type(texts[wrong[0]]).__name__}, not text. Fix: name the text column(s) in text.")
        if empty := [i for i, text in enumerate(texts) if text is None or not text.strip()]:
            if idx in known_empty:
                logging.warning("%s: idx %d has an empty text in the official release; left out", where, idx)
                continue
            raise DataError(f"{where}: field {columns.text[empty[0]]!r} is empty (idx {idx}); every example needs its text "
                            "(an empty sentence would be trained on and scored as [CLS] [SEP] alone). Fix: restore the "
                            "text, or delete the example.")
        records.append((idx, texts[0], texts[1] if len(texts) > 1 else None,
                        _label_id(task, raw_label, where, columns.label)))
    if not records:
        raise DataError(f"{source}: split {split!r} of {task.name} has no examples. Fix: supply a non-empty split.")
    if task.is_token:
        return pl.DataFrame(records, schema={**SCHEMA, "words": pl.List(pl.String), "label": task.label_dtype},
                            orient="row")
    return pl.DataFrame(records, schema={**SCHEMA, "label": task.label_dtype}, orient="row")


def _words(task: Task, words: Any, labels: Any, where: str, columns: Columns) -> list[str] | None:
    """A token task's sentence: its words, checked against its labels (None: an empty sentence)."""
    text, label = columns.text[0], columns.label
    if isinstance(words, str) or not isinstance(words, (list, tuple)):
        raise DataError(f"{where}: field {text!r} = {str(words)[:80]!r} is a {type(words).__name__}, not a list of words. "
                        "Fix: name the column that holds each sentence's words as a list (text), or split the "
                        "sentence into its words.")
    if not isinstance(labels, (list, tuple)):
        raise DataError(f"{where}: field {label!r} = {str(labels)[:80]!r} is a {type(labels).__name__}, not a list of "
                        "labels. Fix: name the column that holds a label per word (label).")
    if not words:
        return None
    if bad := [i for i, word in enumerate(words) if not isinstance(word, str) or not word.strip()]:
        raise DataError(f"{where}: field {text!r}, word {bad[0] + 1} = {words[bad[0]]!r} is not a word (empty, or not "
                        "text). Fix: restore the word, or remove it and its label.")
    if len(words) != len(labels):
        raise DataError(f"{where}: {len(words)} words in field {text!r}, {len(labels)} labels in field {label!r}. Fix: "
                        "give every word one label.")
    return list(words)


def _check_bio(task: Task, words: list[str], ids: list[int], where: str, column: str) -> None:
    """Under a BIO (IOB2) scheme a span starts with B-X: an I-X whose previous word is neither B-X nor I-X is refused
    (IOB1 data, which starts a span with I-, would be scored as other spans than it means)."""
    names = task.label_names or ()
    previous = "O"
    for i, label in enumerate(ids):
        name = names[label]
        if name.startswith("I-") and previous[2:] != name[2:]:
            raise DataError(f"{where}, word {i + 1} ({words[i]!r}): field {column!r} = {name!r} follows {previous!r}: an "
                            f"I- without its B-. Fix: tag the span's first word B-{name[2:]} (IOB2); data in IOB1, where "
                            "a span starts with I-, needs converting to IOB2 first.")
        previous = name


def _integer_id(raw: Any, where: str, column: str | None) -> int:
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        value = int(str(raw).strip()) if not isinstance(raw, (int, float)) else int(raw)
        if not -(2**63) <= value < 2**63:
            raise ValueError
        return value
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{where}: field {column!r} = {raw!r} is not an integer id (64-bit); every output names an example "
                        "by its integer id. Fix: give the example an integer id, or leave id out of the declaration (the "
                        "row number within the split).") from None


def _overlap_key(first: str, second: str | None) -> tuple[str, ...]:
    """An example's text(s) as the model reads them, whitespace collapsed: what makes two examples the same input."""
    return tuple(" ".join(text.split()) for text in (first, second) if text is not None)


def overlap_problems(task: Task, frames: Mapping[str, pl.DataFrame], where: Mapping[str, str], by_id: bool) -> list[str]:
    """Examples of a later split (train, then dev, then the others as declared) whose id (where the source declares
    one) or text(s) are also in an earlier split: a model evaluated on what it was trained on. ``by_id``: the source
    declares ids (row numbers repeat across splits by construction). ``known_overlap`` lists (by the later split and
    its idx) the ones an official release has. ``where``: each split's origin."""
    problems = []
    seen: dict[str, tuple[set[int], dict[tuple[str, ...], int]]] = {}
    order = [s for s in REQUIRED_SPLITS if s in frames] + [s for s in frames if s not in REQUIRED_SPLITS]
    for split in order:
        frame = frames[split]
        allowed = set(task.known_overlap.get(split, ()))
        texts = [_overlap_key(a, b) for a, b in zip(frame["sentence1"].to_list(), frame["sentence2"].to_list(), strict=True)]
        ids = frame["idx"].to_list()
        for earlier, (earlier_ids, earlier_texts) in seen.items():
            same_id = [idx for idx in ids if by_id and idx in earlier_ids and idx not in allowed]
            if same_id:
                problems.append(f"{where[split]}: {len(same_id)} example(s) have an id also in split {earlier!r} "
                                f"({where[earlier]}), first id {same_id[0]}. Fix: ids identify examples across splits; "
                                "remove each from one split, or, if your ids number each split's rows, leave id out of "
                                "the declaration.")
            same_text = [(idx, earlier_texts[text]) for idx, text in zip(ids, texts, strict=True)
                         if text in earlier_texts and idx not in allowed]
            if same_text:
                problems.append(f"{where[split]}: {len(same_text)} example(s) have the same text as one of split "
                                f"{earlier!r} ({where[earlier]}), first idx {same_text[0][0]} (idx {same_text[0][1]} "
                                f"there): a model would be scored on what it was trained on. Fix: remove each from one "
                                f"of the splits (idx {[idx for idx, _ in same_text][:20]}).")
        seen[split] = (set(ids), {t: i for i, t in zip(ids, texts, strict=True)})
    return problems


def prepare_split(task: Task, split: str, source: Files | Hub, max_examples: int | None, seed: int) -> pl.DataFrame:
    """Read and check every split of the task (one split's examples may not be in another), then the seeded sample
    of ``split``."""
    frames = {name: read_split(task, name, source) for name in task.splits}
    if problems := check_splits(task, frames, source):
        raise DataError("\n".join(problems))
    return subsample(frames[split], max_examples, seed)


def prepare_files(task: Task, split: str, max_examples: int | None, seed: int) -> pl.DataFrame:
    """:func:`prepare_split` from the task's declared files."""
    return prepare_split(task, split, declared_files(task), max_examples, seed)


def check_splits(task: Task, frames: Mapping[str, pl.DataFrame], source: Files | Hub) -> list[str]:
    """The problems across a task's splits (each split read by :func:`read_split`): an example in two. Under
    ``overlap: warn`` (a release whose overlaps were not listed) they are logged as warnings instead."""
    problems = overlap_problems(task, frames, {split: origin(source, split) for split in frames}, source.columns.id is not None)
    if task.overlap == "warn":
        for problem in problems:
            logging.warning("%s (overlap: warn: not stopped)", problem)
        return []
    return problems


# --- the normalised frames ---------------------------------------------------------------------------------------


def tokenizer_text(text: str | None) -> str | None:
    """A sentence as every stage gives it to the tokenizer: without trailing whitespace. Every SST-2 sentence
    ends with a space; WordPiece and SentencePiece tokenizers drop it, but a byte-level BPE tokenizer (RoBERTa,
    ModernBERT) keeps it as a piece of its own (``Ġ``) after the last word, an input that would follow a quirk
    of the file. Leading whitespace is kept, so character offsets into the sentence are those of the data (the
    linguistic features align spaCy's tokens to word pieces by them)."""
    return None if text is None else text.rstrip()


def sentence_texts(frame: pl.DataFrame) -> tuple[list[str], list[str | None] | None]:
    """``sentence1`` and, unless it is null in every row, ``sentence2`` of a frame in the normalised schema, as
    the tokenizer is given them (:func:`tokenizer_text`)."""
    first = [text.rstrip() for text in frame["sentence1"].to_list()]
    if frame["sentence2"].null_count() == frame.height:
        return first, None
    return first, [tokenizer_text(text) for text in frame["sentence2"].to_list()]


def scored_units(task: Task, frame: pl.DataFrame) -> dict[str, np.ndarray]:
    """What a score is counted over in a split's rows: each example's ``idx`` and ``label``; for a token task each word
    of each example, in order: its example's ``idx``, its position ``word`` and its ``label``."""
    if not task.is_token:
        return {"idx": frame["idx"].to_numpy(), "label": frame["label"].to_numpy()}
    lengths = frame["label"].list.len().to_numpy().astype(np.int64)
    return {"idx": np.repeat(frame["idx"].to_numpy(), lengths),
            "word": np.concatenate([np.arange(n) for n in lengths]).astype(np.int64) if len(lengths) else np.zeros(0, np.int64),
            "label": frame["label"].explode().to_numpy().astype(np.int64)}


def subsample(frame: pl.DataFrame, max_examples: int | None, seed: int, order: str = "idx") -> pl.DataFrame:
    """A seeded sample of at most ``max_examples`` rows, kept in the original order (of column ``order``:
    ``idx`` for a task, ``sentence`` for a treebank)."""
    if max_examples is None or frame.height <= max_examples:
        return frame
    return frame.sample(n=max_examples, seed=seed, shuffle=False).sort(order)
