"""Hand labels of attention maps (Kovaleva et al. 2019's five classes): keys, reading and checks, the
labelling sample, sheets to label from, agreement between passes, and the rule labeller fitted to them.

A label names the map it judges by what the map *is*, never by where a dump happened to put it:
``task, state, idx, layer, head`` (``idx`` is the example's id in its task, ``state`` the dumped state, e.g. ``pretrained``
or ``finetuned/seed1``: :mod:`bertology_core.data.states`). Changing ``attention.seed`` or ``attention.max_examples`` therefore cannot
re-point a label to another map: the labelled examples' maps are computed for them (rule
``labelled_maps``) whether the analysis sample holds them or not.

A label set is a CSV (columns ``task, state, idx, layer, head, label``; other columns are kept as
provenance) with a JSON card beside it naming the model it was made on (``model_spec``,
``weights_sha256``), the labels file, and optionally: the same labeller's blind second pass over a share of
them (``second_pass``: consistency with oneself), another labeller's blind labels of a share of them
(``second_labeller``: agreement between labellers), and **test labels** (``test``): maps labelled after the
labellers' design was frozen, never trained, fitted or designed on, on which the classifiers are scored once.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import os
import struct
import zlib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from bertology_core.data import tasks, states
from bertology_core.patterns import feature_tables

KEY = ("task", "state", "idx", "layer", "head")
STATE = re.compile(states.DUMPED_PATTERN)
COLUMNS = (*KEY, "label")


class LabelsError(ValueError):
    """A label file that cannot be used: the message names the file, the line and the field."""


# ---------------------------------------------------------------------------------------------- reading


def read_labels(path: str | os.PathLike[str], layers: int | None = None, heads: int | None = None) -> pl.DataFrame:
    """The labels of ``path``, checked line by line, one row per key (``line`` = its line in the file).

    Errors name ``path:line`` and the field: a missing column, a class that is not one of the five, a
    layer or head outside the model (when ``layers``/``heads`` are given), a key labelled twice with
    different classes (both lines). A key repeated with the same class is kept once."""
    path = Path(path)
    if not path.is_file():
        raise LabelsError(f"{path}: label file not found. Fix: point patterns.labels_csv (or the label card) at it.")
    rows: list[dict[str, Any]] = []
    first_line: dict[tuple, tuple[int, str]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise LabelsError(f"{path}:1: missing column(s) {missing}. Fix: the header must hold {list(COLUMNS)} "
                              "(labels name the idx of the example, not its place in a dump).")
        for line, record in enumerate(reader, start=2):
            label = (record["label"] or "").strip()
            if label not in feature_tables.CLASSES:
                raise LabelsError(f"{path}:{line}: field 'label' = {label!r} is not a class. "
                                  f"Allowed: {list(feature_tables.CLASSES)}.")
            values: dict[str, Any] = {"task": (record["task"] or "").strip(), "state": (record["state"] or "").strip()}
            if not tasks.TASK_NAME.fullmatch(values["task"]):
                raise LabelsError(f"{path}:{line}: field 'task' = {values['task']!r} is not a task name (letters, digits, "
                                  "'.', '_' and '-', as the config's tasks are spelt).")
            if not STATE.fullmatch(values["state"]):
                raise LabelsError(f"{path}:{line}: field 'state' = {values['state']!r} is not a model state. Fix: "
                                  f"{states.PRETRAINED}, {states.FINETUNED}/seed<N> or {states.SCRATCH}/seed<N>.")
            for field, limit in (("idx", None), ("layer", layers), ("head", heads)):
                text = (record[field] or "").strip()
                try:
                    number = int(text)
                except ValueError:
                    raise LabelsError(f"{path}:{line}: field {field!r} = {text!r} is not an integer.") from None
                if number < 0 or (limit is not None and number >= limit):
                    bound = f"0..{limit - 1}" if limit is not None else ">= 0"
                    raise LabelsError(f"{path}:{line}: field {field!r} = {number} is outside {bound} for this model.")
                values[field] = number
            key = tuple(values[c] for c in KEY)
            if key in first_line:
                earlier, earlier_label = first_line[key]
                if earlier_label != label:
                    raise LabelsError(f"{path}:{line}: field 'label' = {label!r} conflicts with {path}:{earlier} "
                                      f"({earlier_label!r}) for the same map {dict(zip(KEY, key))}. Fix: keep one.")
                continue
            first_line[key] = (line, label)
            rows.append({**values, "label": label, "sample": (record.get("sample") or "").strip() or None, "line": line})
    if not rows:
        raise LabelsError(f"{path}: no labels.")
    schema = {"task": pl.String, "state": pl.String, "idx": pl.Int64, "layer": pl.Int32, "head": pl.Int32,
              "label": pl.String, "sample": pl.String, "line": pl.Int32}
    return pl.DataFrame(rows, schema=schema)


@dataclass(frozen=True)
class LabelCard:
    """The JSON card of a label set: which model's maps, which files, who labelled them and how."""

    model_spec: str
    weights_sha256: str
    labels: str
    second_pass: str | None = None
    second_labeller: str | None = None  # another labeller's blind labels of some of the same maps
    test: str | None = None  # maps never trained, fitted or designed on: the classifiers' final scores
    states: dict[str, str] | None = None  # task/state of a fine-tuned model -> recipe_fingerprint of its training
    labelled_by: str = ""
    method: str = ""
    date: str = ""

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "LabelCard":
        path = Path(path)
        try:
            values = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise LabelsError(f"{path}:{error.lineno}: not valid JSON ({error.msg}).") from None
        known = {f.name for f in fields(cls)}
        missing = [name for name in ("model_spec", "weights_sha256", "labels") if name not in values]
        if missing:
            raise LabelsError(f"{path}: missing field(s) {missing}.")
        return cls(**{k: v for k, v in values.items() if k in known})

    def labels_path(self, card_path: str | os.PathLike[str]) -> Path:
        return Path(card_path).parent / self.labels

    def second_pass_path(self, card_path: str | os.PathLike[str]) -> Path | None:
        return Path(card_path).parent / self.second_pass if self.second_pass else None

    def files(self, card_path: str | os.PathLike[str]) -> dict[str, Path]:
        """Every label file the card names, by role (``labels``, ``second_pass``, ``second_labeller``, ``test``);
        a file that is not beside the card is an error naming the card's field."""
        roles = {"labels": self.labels, "second_pass": self.second_pass, "second_labeller": self.second_labeller,
                 "test": self.test}
        files = {role: Path(card_path).parent / name for role, name in roles.items() if name}
        for role, path in files.items():
            if not path.is_file():
                raise LabelsError(f"{card_path}: field {role!r} = {roles[role]!r}: no such file beside the card ({path}). "
                                  f"Fix: correct the file name, or drop the field.")
        return files

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_label_card(labels_dir: str | os.PathLike[str] | None, model_spec: str) -> Path | None:
    """The card in ``labels_dir`` made on ``model_spec`` (None when there is none). Two cards for one spec
    are an error: which labels train the classifier must not depend on file order."""
    if not labels_dir or not Path(labels_dir).is_dir():
        return None
    matches = [p for p in sorted(Path(labels_dir).glob("*.json")) if LabelCard.read(p).model_spec == model_spec]
    if len(matches) > 1:
        raise LabelsError(f"{labels_dir}: several label cards for {model_spec}: {[str(p) for p in matches]}. Fix: keep one.")
    return matches[0] if matches else None


def check_card_matches_model(card: LabelCard, card_path: str | os.PathLike[str], weights_sha256: str) -> None:
    """Labels judge one model's maps: a card whose weights differ from the resolved model's is an error."""
    if card.weights_sha256 != weights_sha256:
        raise LabelsError(f"{card_path}: field 'weights_sha256' = {card.weights_sha256[:12]}... but the model resolved to "
                          f"weights {weights_sha256[:12]}...: these labels were made on other weights. Fix: label this "
                          "model's maps, or set patterns.labels_dir: null to train on the rule labels.")


# ---------------------------------------------------------------------------------------------- the sample


def draw_sample(features: dict[str, pl.DataFrame], random_per_dump: int, enriched_per_class: int, seed: int) -> pl.DataFrame:
    """The maps to label: a simple random sample of ``random_per_dump`` maps from each dump (it estimates the
    class shares without bias) plus ``enriched_per_class`` maps from each class of the rule labeller, drawn
    from the rest (so rare classes are present). ``features``: dump key ``task/state`` -> its features
    frame (``idx, layer, head, rule_label``). Returns ``task, state, idx, layer, head, sample``."""
    rng = np.random.default_rng(seed)
    pool = pl.concat(
        [frame.select(pl.lit(key.split("/")[0]).alias("task"), pl.lit(key.split("/", 1)[1]).alias("state"),
                      pl.col("idx").cast(pl.Int64), pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32),
                      "rule_label")
         for key, frame in sorted(features.items())]
    )
    chosen = []
    for (task, state), group in pool.group_by("task", "state", maintain_order=True):
        take = rng.choice(group.height, size=min(random_per_dump, group.height), replace=False)
        chosen.append(group[np.sort(take)].with_columns(pl.lit("random").alias("sample")))
    random_part = pl.concat(chosen)
    rest = pool.join(random_part, on=list(KEY), how="anti")
    for label in feature_tables.CLASSES:
        group = rest.filter(pl.col("rule_label") == label)
        take = rng.choice(group.height, size=min(enriched_per_class, group.height), replace=False)
        chosen.append(group[np.sort(take)].with_columns(pl.lit("enriched").alias("sample")))
    return pl.concat(chosen).select(*KEY, "sample")


def blind_order(keys: pl.DataFrame, seed: int) -> pl.DataFrame:
    """``keys`` shuffled with a seed: the labeller sees neither the dump nor the sample a map came from."""
    order = np.random.default_rng(seed).permutation(keys.height)
    return keys[order]


# ---------------------------------------------------------------------------------------------- sheets

_DIGITS = {  # 3 x 5 bitmap font for the cell numbers
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111",
}


def png(pixels: np.ndarray) -> bytes:
    """An RGB ``[height, width, 3]`` uint8 image as PNG bytes (zlib from the standard library)."""
    height, width, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def _draw_number(canvas: np.ndarray, number: int, top: int, left: int, scale: int = 2) -> None:
    for position, digit in enumerate(str(number)):
        bits = np.array([int(b) for b in _DIGITS[digit]], dtype=bool).reshape(5, 3)
        block = np.kron(bits, np.ones((scale, scale), dtype=bool))
        x = left + position * 4 * scale
        canvas[top : top + block.shape[0], x : x + block.shape[1]][block] = (0, 0, 160)


def label_sheet(maps: list[np.ndarray], specials: list[np.ndarray], columns: int = 5, cell: int = 168) -> bytes:
    """One PNG of ``maps`` in a grid, numbered 1.. row by row; darker = more attention (linear, scaled to
    each map's largest weight, as the paper's figures); red ticks above and left of a map mark the
    positions of special tokens ([CLS], [SEP]) so stripes on them can be told from stripes on words.

    Each map sits inside a thin grey frame with a white gap, so a stripe on the first or last token (a [CLS]
    or final [SEP] column) reads as a stripe, not as the map's edge."""
    rows = -(-len(maps) // columns)
    margin, tick, label_height, gap = 8, 5, 14, 3
    pitch = cell + margin + tick + 2 + 2 * gap
    canvas = np.full((rows * (pitch + label_height), columns * pitch, 3), 255, dtype=np.uint8)
    for number, (attention, special) in enumerate(zip(maps, specials)):
        row, column = divmod(number, columns)
        top = row * (pitch + label_height) + label_height + gap
        left = column * pitch + tick + 2 + gap
        _draw_number(canvas, number + 1, top - gap - label_height + 2, left - gap)
        length = attention.shape[0]
        index = np.arange(cell) * length // cell
        shade = attention / max(float(attention.max()), 1e-9)
        image = np.round(255 * (1.0 - shade[np.ix_(index, index)])).astype(np.uint8)
        canvas[top : top + cell, left : left + cell] = image[:, :, None]
        frame_top, frame_left, frame_bottom, frame_right = top - gap - 1, left - gap - 1, top + cell + gap, left + cell + gap
        canvas[frame_top, frame_left : frame_right + 1] = canvas[frame_bottom, frame_left : frame_right + 1] = 170
        canvas[frame_top : frame_bottom + 1, frame_left] = canvas[frame_top : frame_bottom + 1, frame_right] = 170
        for position in np.flatnonzero(special):
            span = np.flatnonzero(index == position)
            canvas[frame_top - tick : frame_top, left + span] = (220, 0, 0)
            canvas[top + span, frame_left - tick : frame_left] = (220, 0, 0)
    return png(canvas)


# ---------------------------------------------------------------------------------------------- agreement


def pass_agreement(first: pl.DataFrame, second: pl.DataFrame, frequent: list[str] | None = None) -> dict[str, Any]:
    """Cohen's kappa and raw agreement of a blind second pass with the first, on the keys both label, and the
    second pass's macro F1 against the first (over every class, and over ``frequent`` classes when given)."""
    # lazy: this module is read while the workflow is parsed (rules/common.smk); sklearn takes ~1.5 s
    from sklearn.metrics import cohen_kappa_score, f1_score

    joined = first.select(*KEY, "label").join(second.select(*KEY, pl.col("label").alias("second")), on=list(KEY))
    if joined.height < second.height:
        raise LabelsError(f"{second.height - joined.height} label(s) of the second pass name maps the first pass does not label. "
                          "Fix: draw the second pass from the first (tools/label_patterns.py second-pass).")
    classes = [c for c in feature_tables.CLASSES if c in set(joined["label"])]
    return {
        "maps": joined.height,
        "cohen_kappa": float(cohen_kappa_score(joined["label"], joined["second"])),
        "agreement": float((joined["label"] == joined["second"]).mean()),
        # the second pass scored like a classifier against the first: the ceiling a labeller's macro F1 can be read against
        "macro_f1_against_first": float(f1_score(joined["label"], joined["second"], labels=classes, average="macro", zero_division=0)),
        "macro_f1_against_first_frequent_classes": float(f1_score(
            joined["label"], joined["second"], labels=frequent, average="macro", zero_division=0)) if frequent else None,
    }


# ---------------------------------------------------------------------------------------------- the rule labeller


def rule_labels(features: pl.DataFrame, thresholds: feature_tables.RuleThresholds) -> np.ndarray:
    """:func:`feature_tables.rule_label` of every row of a features frame."""
    columns = ("stripe_excess", "band_excess", "line_excess", "within_segment")
    rows = features.select(columns).iter_rows()
    return np.array([feature_tables.rule_label(dict(zip(columns, row)), thresholds) for row in rows], dtype=object)


def validation_split(labels: np.ndarray, held_out_share: float, seed: int) -> np.ndarray:
    """``"fit"`` or ``"held_out"`` per label, stratified by class (not stratified at all when a class has a
    single label)."""
    # lazy: this module is read while the workflow is parsed (rules/common.smk); sklearn takes ~1.5 s
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels)
    values, counts = np.unique(labels, return_counts=True)
    stratify = labels if counts.min() >= 2 else None
    _, held = train_test_split(np.arange(len(labels)), test_size=held_out_share, random_state=seed, stratify=stratify)
    split = np.full(len(labels), "fit", dtype=object)
    split[held] = "held_out"
    return split


THRESHOLD_GRID = tuple(np.round(np.arange(0.025, 1.0, 0.025), 3))


def fit_rule_thresholds(features: pl.DataFrame, labels: np.ndarray, start: feature_tables.RuleThresholds,
                        rounds: int = 4) -> feature_tables.RuleThresholds:
    """Thresholds of the rule labeller that maximise macro F1 against ``labels`` (over the classes they hold),
    by coordinate ascent from ``start``: each threshold in turn over a grid of 0.025 steps (``structure``:
    0.05 steps up to 2), keeping a change only when it raises macro F1, until a round changes nothing.
    Deterministic; fit it on labels you do not report it on."""
    # lazy: this module is read while the workflow is parsed (rules/common.smk); sklearn takes ~1.5 s
    from sklearn.metrics import f1_score

    labels = np.asarray(labels, dtype=object)
    classes = [c for c in feature_tables.CLASSES if c in set(labels)]

    def score(candidate: feature_tables.RuleThresholds) -> float:
        return float(f1_score(labels, rule_labels(features, candidate), labels=classes, average="macro", zero_division=0))

    best, best_score = start, score(start)
    for _ in range(rounds):
        changed = False
        for field in fields(feature_tables.RuleThresholds):
            grid = tuple(round(2 * v, 3) for v in THRESHOLD_GRID) if field.name == "structure" else THRESHOLD_GRID
            for value in grid:
                try:
                    candidate = replace(best, **{field.name: float(value)})
                except ValueError:  # shares that would leave no vertical_diagonal
                    continue
                candidate_score = score(candidate)
                if candidate_score > best_score + 1e-12:
                    best, best_score, changed = candidate, candidate_score, True
        if not changed:
            break
    return best


def recipe_fingerprint(evaluation: dict[str, Any]) -> str:
    """What makes a fine-tuned model the one labels were made on, from its ``evaluation.json``: the
    pre-trained weights, task, state, seed, training examples and hyperparameters (sha256 of them). Unlike a
    hash of the fine-tuned weights it does not change with the CPU's floating-point kernels.

    The hashed fields keep the format they had before :mod:`bertology_core.data.states`: the state under the name
    :data:`~bertology_core.data.states.FINGERPRINT_NAMES` gives it, so that the shipped cards' fingerprints match."""
    fields = {"weights_sha256": evaluation["model"]["weights_sha256"], "task": evaluation["task"],
              "init": states.FINGERPRINT_NAMES[evaluation["state"]],
              "seed": evaluation["seed"], "train_examples": evaluation["train_examples"],
              "hyperparameters": evaluation["hyperparameters"]}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


@dataclass
class LabelSet:
    """A run's hand labels, what was left out and why, and how to name them in outputs."""

    labels: pl.DataFrame
    second_pass: pl.DataFrame | None
    description: str
    in_file: int
    left_out: dict[str, str]  # task/state -> why its labels were not used
    second_labeller: pl.DataFrame | None = None
    test: pl.DataFrame | None = None  # the test labels of this run's dumps (empty when the file names none of them)
    test_in_file: int = 0


def check_test_disjoint(labels: pl.DataFrame, test: pl.DataFrame, test_path: str | os.PathLike[str],
                        labels_path: str | os.PathLike[str] = "the labels file") -> None:
    """Test labels must name maps the training labels do not: a map in both would be scored on after training on it."""
    both = test.join(labels.select(*KEY, pl.col("line").alias("training_line")), on=list(KEY))
    if both.height:
        first = both.row(0, named=True)
        raise LabelsError(f"{test_path}:{first['line']}: the map {dict((k, first[k]) for k in KEY)} is also a training label "
                          f"({labels_path}:{first['training_line']}); {both.height} test map(s) in all. Fix: test labels "
                          "must name maps the training labels do not (tools/label_patterns.py test-sample --exclude).")


def check_relabelled_subset(labels: pl.DataFrame, relabelled: pl.DataFrame, relabelled_path: str | os.PathLike[str],
                            labels_path: str | os.PathLike[str], role: str) -> None:
    """A second pass or a second labeller relabels maps of the training labels: a map the labels do not name is an
    error naming its line."""
    stray = relabelled.join(labels.select(*KEY), on=list(KEY), how="anti")
    if stray.height:
        first = stray.row(0, named=True)
        tool = "second-pass" if role == "second_pass" else "test-sample --recheck-from"
        raise LabelsError(f"{relabelled_path}:{first['line']}: the map {dict((k, first[k]) for k in KEY)} is not labelled in "
                          f"{labels_path}; {stray.height} such map(s) in all. Fix: the card's {role!r} relabels maps of the "
                          f"labels (draw them with tools/label_patterns.py {tool}).")


def load_label_set(labels_path: str | os.PathLike[str], card_path: str | os.PathLike[str] | None,
                   second_pass_path: str | os.PathLike[str] | None, resolved: dict[str, Any],
                   dump_keys: list[str], recipes: dict[str, dict[str, Any]] | None = None,
                   test_path: str | os.PathLike[str] | None = None,
                   second_labeller_path: str | os.PathLike[str] | None = None) -> LabelSet:
    """A run's hand labels (and blind second pass, second labeller, test labels): checked against the resolved
    model (the card's weights, layers and heads), limited to the run's dumps (``task/state``) and, for
    fine-tuned states the card fingerprints, to models fine-tuned with the same recipe (``recipes``:
    task/state -> evaluation.json)."""
    card = LabelCard.read(card_path) if card_path else None
    if card:
        check_card_matches_model(card, card_path, resolved["weights_sha256"])
    layers, heads = resolved["num_hidden_layers"], resolved["num_attention_heads"]
    first = read_labels(labels_path, layers, heads)
    test = read_labels(test_path, layers, heads) if test_path else None
    if test is not None:
        check_test_disjoint(first, test, test_path, labels_path)
    left_out = {}
    named = pl.concat([frame.select("task", "state") for frame in (first, test) if frame is not None])
    for key in sorted(set(named.select(pl.concat_str("task", pl.lit("/"), "state")).to_series())):
        if key not in dump_keys:
            left_out[key] = "not a dump of this run"
        elif card and card.states and key in card.states and recipes and key in recipes \
                and recipe_fingerprint(recipes[key]) != card.states[key]:
            left_out[key] = "labelled on a model fine-tuned with another recipe (the card's states)"
    keep = [k for k in dump_keys if k not in left_out]

    def in_run(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(pl.concat_str("task", pl.lit("/"), "state").is_in(keep))

    def relabelled(path: str | os.PathLike[str] | None, role: str) -> pl.DataFrame | None:
        if not path:
            return None
        frame = read_labels(path, layers, heads)
        check_relabelled_subset(first, frame, path, labels_path, role)
        return in_run(frame)

    who = f", labelled by {card.labelled_by}" if card and card.labelled_by else ""
    return LabelSet(in_run(first), relabelled(second_pass_path, "second_pass"), f"{Path(labels_path).name}{who}", first.height,
                    left_out, second_labeller=relabelled(second_labeller_path, "second_labeller"),
                    test=in_run(test) if test is not None else None, test_in_file=test.height if test is not None else 0)


def labelled_examples(frame: pl.DataFrame, wanted: list[int], source: str) -> pl.DataFrame:
    """The rows of a prepared split whose ``idx`` the hand labels name; an idx the split does not hold is an
    error naming it."""
    missing = sorted(set(wanted) - set(frame["idx"].to_list()))
    if missing:
        raise LabelsError(f"{source}: field 'idx' has no example {missing[:5]}{' ...' if len(missing) > 5 else ''}, which hand "
                          "labels name. Fix: label maps of examples of this split (the labels' task and idx), or raise "
                          "data.max_eval_examples (or the task's) if it sampled them out.")
    return frame.filter(pl.col("idx").is_in(wanted))
