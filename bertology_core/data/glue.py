"""GLUE tasks: label sets, metrics, and loaders for the classic TSV layout and the Hub.

Every split is normalised to one schema, ``idx, sentence1, sentence2, label``:
``sentence2`` is null for single-sentence tasks, ``label`` is the Hugging Face
``glue`` dataset's integer class id (so local and Hub data agree) or a float for
the regression task STS-B.

The classic layout is the one written by GLUE's ``download_glue_data.py``
(``glue_data/<TASK>/{train,dev}.tsv``). Files are read as GLUE's own
``_read_tsv`` did: tab-separated with quoting disabled (sentences contain ``"``),
the header skipped where the task has one, and the column positions of the
reference ``*Processor`` classes. A UTF-8 BOM (MRPC's header has one) is stripped.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from bertology_core.data import io

SCHEMA = {"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String}


class DataError(ValueError):
    """Bad or missing input data; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task as GLUE defines it.

    ``label_names`` follows the Hugging Face ``nyu-mll/glue`` ClassLabel order so
    that ids agree between sources; ``None`` marks regression (STS-B).
    ``local_labels`` maps the raw label strings of the classic TSV to those ids.
    """

    name: str
    hub_config: str
    label_names: tuple[str, ...] | None
    local_labels: dict[str, int] | None
    metrics: tuple[str, ...]
    # classic TSV: file stem per split, whether a header line exists, and
    # column positions (as in transformers' legacy glue processors).
    local_files: dict[str, str]
    has_header: bool
    text_a_col: int
    text_b_col: int | None
    label_col: int
    idx_col: int | None
    expected_columns: int | None = None  # rows with another count are malformed
    hub_columns: tuple[str, str | None] = ("sentence1", "sentence2")
    hub_splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "dev": "validation"})
    # examples of the official release whose text is empty, by split (idx): left out with a warning; any other
    # empty text is refused
    known_empty: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.local_files)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.local_files if s != "train")


_BINARY = {"0": 0, "1": 1}

TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in [
        GlueTask(
            "CoLA", "cola", ("unacceptable", "acceptable"), _BINARY, ("matthews_correlation",),
            {"train": "train", "dev": "dev"}, has_header=False,
            text_a_col=3, text_b_col=None, label_col=1, idx_col=None, expected_columns=4,
            hub_columns=("sentence", None),
        ),
        GlueTask(
            "SST-2", "sst2", ("negative", "positive"), _BINARY, ("accuracy",),
            {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=0, text_b_col=None, label_col=1, idx_col=None, expected_columns=2,
            hub_columns=("sentence", None),
        ),
        GlueTask(
            "MRPC", "mrpc", ("not_equivalent", "equivalent"), _BINARY, ("accuracy", "f1"),
            {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=3, text_b_col=4, label_col=0, idx_col=None, expected_columns=5,
        ),
        GlueTask(
            "STS-B", "stsb", None, None, ("pearson", "spearman"),
            {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=7, text_b_col=8, label_col=-1, idx_col=0,
        ),
        GlueTask(
            "QQP", "qqp", ("not_duplicate", "duplicate"), _BINARY, ("accuracy", "f1"),
            {"train": "train", "dev": "dev"}, has_header=True,
            # column 0 is Quora's pair id, not a running index: idx is the row number, as on the Hub
            text_a_col=3, text_b_col=4, label_col=5, idx_col=None, expected_columns=6,
            hub_columns=("question1", "question2"),
            # question2 is empty in these two training pairs, the only ones in any QQP split (huggingface/datasets#277)
            known_empty={"train": (310137, 362246)},
        ),
        GlueTask(
            "MNLI", "mnli", ("entailment", "neutral", "contradiction"),
            {"entailment": 0, "neutral": 1, "contradiction": 2}, ("accuracy",),
            {"train": "train", "dev": "dev_matched", "dev_mismatched": "dev_mismatched"},
            has_header=True, text_a_col=8, text_b_col=9, label_col=-1, idx_col=0,
            hub_columns=("premise", "hypothesis"),
            hub_splits={"train": "train", "dev": "validation_matched", "dev_mismatched": "validation_mismatched"},
        ),
        GlueTask(
            "QNLI", "qnli", ("entailment", "not_entailment"), {"entailment": 0, "not_entailment": 1},
            ("accuracy",), {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=1, text_b_col=2, label_col=3, idx_col=0, expected_columns=4,
            hub_columns=("question", "sentence"),
        ),
        GlueTask(
            "RTE", "rte", ("entailment", "not_entailment"), {"entailment": 0, "not_entailment": 1},
            ("accuracy",), {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=1, text_b_col=2, label_col=3, idx_col=0, expected_columns=4,
        ),
        GlueTask(
            "WNLI", "wnli", ("not_entailment", "entailment"), _BINARY, ("accuracy",),
            {"train": "train", "dev": "dev"}, has_header=True,
            text_a_col=1, text_b_col=2, label_col=3, idx_col=0, expected_columns=4,
        ),
    ]
}


def get_task(name: str) -> GlueTask:
    try:
        return TASKS[name]
    except KeyError:
        raise DataError(
            f"Unknown GLUE task {name!r}. Known tasks: {', '.join(TASKS)} (names are case-sensitive)."
        ) from None


def local_path(task: GlueTask, split: str, glue_dir: str | Path) -> Path:
    return Path(glue_dir) / task.name / f"{task.local_files[split]}.tsv"


def missing_local_files(tasks: list[str], glue_dir: str | Path) -> list[Path]:
    """Every classic-layout file the given tasks need that does not exist."""
    return [
        local_path(get_task(t), split, glue_dir)
        for t in tasks
        for split in get_task(t).splits
        if not local_path(get_task(t), split, glue_dir).is_file()
    ]


def missing_files_message(missing: list[Path], glue_dir: str | Path) -> str:
    listed = "\n".join(f"  - {p}" for p in missing)
    return (
        f"GLUE data not found: {len(missing)} file(s) missing under data.glue_dir={glue_dir}:\n{listed}\n"
        "Fix it one of two ways:\n"
        "  1. point data.glue_dir at a folder in the classic layout <glue_dir>/<TASK>/{train,dev}.tsv "
        "(as written by GLUE's download_glue_data.py; MNLI uses dev_matched.tsv and dev_mismatched.tsv), or\n"
        "  2. set data.source: hub to download the tasks from the Hugging Face Hub (nyu-mll/glue).\n"
        "Or remove the task from `tasks`."
    )


def read_local(task: GlueTask, split: str, glue_dir: str | Path) -> pl.DataFrame:
    """Read one split of the classic GLUE TSV layout into the normalised schema."""
    path = local_path(task, split, glue_dir)
    if not path.is_file():
        raise DataError(missing_files_message([path], glue_dir))
    try:
        rows = _read_rows(task, path, split)
    except UnicodeDecodeError:
        raise DataError(io.not_utf8_message(path)) from None
    if not rows:
        raise DataError(f"{path}: split {split!r} of {task.name} has no examples. Fix: supply a non-empty file.")
    return _frame(task, rows)


@contextlib.contextmanager
def _long_csv_fields() -> Iterator[None]:
    """GLUE rows can be long (MNLI's parses): csv's default limit of 128 KiB per field is raised while a split is
    read, and restored after (it is process-wide)."""
    previous = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _read_rows(task: GlueTask, path: Path, split: str) -> list[tuple[int, str, str | None, object]]:
    rows: list[tuple[int, str, str | None, object]] = []
    position = 0  # the row's number among the data rows: idx where the layout has no index column
    with _long_csv_fields(), path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header: list[str] | None = next(reader, None) if task.has_header else None
        needed = max(c for c in (task.text_a_col, task.text_b_col or 0, task.label_col, task.idx_col or 0) if c >= 0) + 1
        if header is not None and task.expected_columns is not None and len(header) != task.expected_columns:
            raise DataError(
                f"{path}:1: the header has {len(header)} tab-separated columns ({', '.join(header)}); the classic "
                f"GLUE layout of {task.name} has {task.expected_columns}. Fix: restore the missing column(s) or "
                f"re-export {task.name} in the classic GLUE layout."
            )
        for line_no, row in enumerate(reader, start=2 if task.has_header else 1):
            if not row or row == [""]:
                continue
            if (task.expected_columns is not None and len(row) != task.expected_columns) or len(row) < needed:
                cols = task.expected_columns or f">= {needed}"
                raise DataError(
                    f"{path}:{line_no}: expected {cols} tab-separated columns"
                    f"{' (header: ' + ', '.join(header) + ')' if header else ''}, found {len(row)}. "
                    f"Fix: repair the line (a stray tab or newline inside a sentence) or re-export {task.name} "
                    "in the classic GLUE layout."
                )
            raw_label = row[task.label_col].strip()
            label = _parse_label(task, raw_label, path, line_no, header)
            idx = _parse_idx(task, row, path, line_no, header) if task.idx_col is not None else position
            position += 1
            text_b = row[task.text_b_col] if task.text_b_col is not None else None
            empty = [column for column in (task.text_a_col, task.text_b_col) if column is not None and not row[column].strip()]
            if empty and idx in task.known_empty.get(split, ()):
                logging.warning("%s:%d: idx %d has an empty text in the official release; left out", path, line_no, idx)
                continue
            if empty:
                name = header[empty[0]] if header else f"column {empty[0] + 1}"
                raise DataError(
                    f"{path}:{line_no}: field {name!r} is empty; every example needs its text (an empty sentence "
                    "would be trained on and scored as [CLS] [SEP] alone). Fix: restore the sentence, or delete the line."
                )
            rows.append((idx, row[task.text_a_col], text_b, label))
    return rows


def _parse_idx(task: GlueTask, row: list[str], path: Path, line_no: int, header: list[str] | None) -> int:
    assert task.idx_col is not None
    raw = row[task.idx_col].strip()
    try:
        return int(raw)
    except ValueError:
        column = header[task.idx_col] if header else f"column {task.idx_col + 1}"
        raise DataError(
            f"{path}:{line_no}: field {column!r} = {raw!r} is not an integer; it is the example's idx, which every "
            f"output names the example by. Fix: give the line its integer index, or re-export {task.name} in the "
            "classic GLUE layout."
        ) from None


def _parse_label(task: GlueTask, raw: str, path: Path, line_no: int, header: list[str] | None) -> object:
    column = header[task.label_col] if header else f"column {task.label_col + 1}"
    if task.is_regression:
        try:
            return float(raw)
        except ValueError:
            raise DataError(
                f"{path}:{line_no}: field {column!r} = {raw!r} is not a number; {task.name} is a regression task "
                "with similarity scores in [0, 5]. Fix: correct the score."
            ) from None
    assert task.local_labels is not None
    if raw not in task.local_labels:
        raise DataError(
            f"{path}:{line_no}: field {column!r} = {raw!r} is not a {task.name} label. "
            f"Allowed: {sorted(task.local_labels)}. Fix: correct the label or check that the file belongs to {task.name}."
        )
    return task.local_labels[raw]


def _frame(task: GlueTask, rows: list[tuple[int, str, str | None, object]]) -> pl.DataFrame:
    label_dtype = pl.Float64 if task.is_regression else pl.Int64
    return pl.DataFrame(rows, schema={**SCHEMA, "label": label_dtype}, orient="row")


def read_hub(task: GlueTask, split: str, dataset: str = "nyu-mll/glue") -> pl.DataFrame:
    """Load one split from the Hugging Face Hub through ``datasets`` (needs network or a cache)."""
    try:
        import datasets  # imported lazily: only Hub users pay for it (the project's `hub` extra)
    except ImportError:
        raise DataError(f"GLUE {task.name} from the Hugging Face Hub (data.source: hub) needs the datasets package. Fix: "
                        "pip install -e '.[hub]' (or use a local copy: data.source: local, data.glue_dir).") from None

    try:
        data = datasets.load_dataset(dataset, task.hub_config, split=task.hub_splits[split])
    except Exception as error:  # offline, unreachable or unknown: datasets raises many types; each gets the same fix
        raise DataError(
            f"GLUE {task.name} ({split}) could not be loaded from the Hugging Face Hub (dataset {dataset}, config "
            f"{task.hub_config}): {type(error).__name__}: {error}. Fix: connect this machine to the internet (and unset "
            "HF_HUB_OFFLINE), or bring the data over from a machine that has internet: there, run "
            f"`python -c \"import datasets; datasets.load_dataset('{dataset}', '{task.hub_config}')\"` for each task, copy "
            "its ~/.cache/huggingface/datasets folder to the same place here, and run with HF_HUB_OFFLINE=1; or use a "
            "folder in the classic GLUE layout (data.source: local, data.glue_dir)."
        ) from error
    col_a, col_b = task.hub_columns
    rows = [
        (int(r["idx"]), r[col_a], r[col_b] if col_b else None, float(r["label"]) if task.is_regression else int(r["label"]))
        for r in data
    ]
    return _frame(task, rows)


def validate_labels(task: GlueTask, frame: pl.DataFrame, source: str) -> None:
    """Reject labels outside the task's label set (e.g. the Hub's -1 for hidden test labels)."""
    if task.is_regression:
        bad = frame.filter(pl.col("label").is_null() | (pl.col("label") < 0) | (pl.col("label") > 5))
        allowed = "scores in [0, 5]"
    else:
        bad = frame.filter(pl.col("label").is_null() | ~pl.col("label").is_between(0, task.num_labels - 1))
        allowed = f"ids 0..{task.num_labels - 1} ({', '.join(task.label_names or ())})"
    if bad.height:
        raise DataError(
            f"{source}: {bad.height} example(s) of {task.name} have field 'label' outside {allowed}, "
            f"first idx {bad['idx'][0]} with label {bad['label'][0]}. Fix: use a split with gold labels "
            "(GLUE test labels are hidden) or correct the labels."
        )


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


def subsample(frame: pl.DataFrame, max_examples: int | None, seed: int, order: str = "idx") -> pl.DataFrame:
    """A seeded sample of at most ``max_examples`` rows, kept in the original order (of column ``order``:
    ``idx`` for GLUE, ``sentence`` for a treebank)."""
    if max_examples is None or frame.height <= max_examples:
        return frame
    return frame.sample(n=max_examples, seed=seed, shuffle=False).sort(order)


def prepare_split(
    task_name: str,
    split: str,
    source: str,
    glue_dir: str | Path | None,
    max_examples: int | None,
    seed: int,
) -> pl.DataFrame:
    """Load, validate and subsample one split in the normalised schema."""
    task = get_task(task_name)
    if source == "local":
        assert glue_dir is not None
        frame = read_local(task, split, glue_dir)
        origin = str(local_path(task, split, glue_dir))
    elif source == "hub":
        frame = read_hub(task, split)
        origin = f"hub nyu-mll/glue {task.hub_config}/{task.hub_splits[split]}"
    else:
        raise DataError(f"data.source must be 'local' or 'hub', not {source!r}.")
    return subsample(check_split(task, frame, origin, split), max_examples, seed)


def check_split(task: GlueTask, frame: pl.DataFrame, origin: str, split: str | None = None) -> pl.DataFrame:
    """``frame`` if its idx are unique, its texts not empty and its labels in the task's label set, else a DataError
    naming ``origin``. The examples of ``split`` whose text the official release leaves empty (``known_empty``) are
    left out, with a warning."""
    if known := task.known_empty.get(split or "", ()):
        blank = pl.any_horizontal(pl.col(c).fill_null("").str.strip_chars() == "" for c in ("sentence1", "sentence2")
                                  if frame[c].null_count() < frame.height)
        left_out = pl.col("idx").is_in(list(known)) & blank
        if dropped := frame.filter(left_out)["idx"].to_list():
            logging.warning("%s: idx %s have an empty text in the official release; left out", origin, dropped)
        frame = frame.filter(~left_out)
    for column in ("sentence1", "sentence2"):
        if column == "sentence2" and frame[column].null_count() == frame.height:
            continue  # a single-sentence task
        empty = frame.filter(pl.col(column).is_null() | (pl.col(column).str.strip_chars() == ""))
        if empty.height:
            raise DataError(f"{origin}: field {column!r} is empty in {empty.height} example(s), first idx {empty['idx'][0]}; "
                            "every example needs its text. Fix: restore the sentences, or drop those examples.")
    repeated = frame.filter(pl.col("idx").is_duplicated())
    if repeated.height:
        raise DataError(f"{origin}: field 'idx' is not unique ({repeated['idx'][0]} appears {repeated.height} times in all). "
                        "Fix: give every example its own index.")
    validate_labels(task, frame, origin)
    return frame
