"""Training data, training, storage and prediction for the pattern CNN (see :mod:`pattern_cnn`).

Labels come from a user's CSV (``dump, example, layer, head, label``; made with the annotation
page) or, when there is none, from the rule-based labeller, sampled stratified by class. With rule
labels the cross-validated F1 measures how well the CNN reproduces the rules, not agreement with
human judgement; the report says which labels were used, and so does every output built on it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from safetensors.torch import load_file, save_file

from bertology_core import patterns
from bertology_core.dumps import AttentionDump
from bertology_core.io import atomic_path
from bertology_core.pattern_cnn import PatternCNN, PatternNet, cross_validated_f1

PAPER_F1 = 0.86  # Kovaleva et al. 2019, on ~400 hand-labelled maps


class LabelsError(ValueError):
    pass


@dataclass
class TrainedClassifier:
    model: PatternCNN
    image_size: int
    labels_source: str
    training_maps: pl.DataFrame  # dump, example, layer, head, label
    report: dict[str, Any]


def read_labels_csv(path: str | os.PathLike[str], known_dumps: set[str]) -> pl.DataFrame:
    """The user's labels, checked: columns, classes, dumps that exist."""
    frame = pl.read_csv(path, schema_overrides={"dump": pl.String, "label": pl.String})
    missing = {"dump", "example", "layer", "head", "label"} - set(frame.columns)
    if missing:
        raise LabelsError(f"{path}: missing column(s) {sorted(missing)}. Fix: export the CSV from the annotation page "
                          "(columns dump, example, layer, head, label).")
    bad = frame.filter(~pl.col("label").is_in(list(patterns.CLASSES)))
    if bad.height:
        raise LabelsError(f"{path}: field 'label' = {bad['label'][0]!r} is not a class. Allowed: {list(patterns.CLASSES)}.")
    unknown = set(frame["dump"].unique()) - known_dumps
    if unknown:
        raise LabelsError(f"{path}: field 'dump' names dumps this run does not have: {sorted(unknown)}. "
                          f"Known: {sorted(known_dumps)}. Fix: label maps of configured tasks and states.")
    if frame["label"].n_unique() < 2:
        raise LabelsError(f"{path}: needs at least two classes to train a classifier.")
    return frame.select("dump", pl.col("example").cast(pl.Int32), pl.col("layer").cast(pl.Int32),
                        pl.col("head").cast(pl.Int32), "label")


def sample_rule_labels(features: dict[str, pl.DataFrame], total: int, seed: int) -> pl.DataFrame:
    """A seeded sample of ``total`` maps, as balanced over the rule classes as their counts allow."""
    pool = pl.concat(
        [frame.select(pl.lit(key).alias("dump"), "example", "layer", "head", pl.col("rule_label").alias("label"))
         for key, frame in features.items()]
    )
    rng = np.random.default_rng(seed)
    classes = sorted(pool["label"].unique())
    quota = max(1, total // len(classes))
    chosen: list[pl.DataFrame] = []
    for label in classes:
        rows = pool.filter(pl.col("label") == label)
        take = rng.choice(rows.height, size=min(quota, rows.height), replace=False)
        chosen.append(rows[np.sort(take)])
    sample = pl.concat(chosen)
    if sample.height < total:  # top up from the larger classes
        rest = pool.join(sample, on=["dump", "example", "layer", "head"], how="anti")
        take = rng.choice(rest.height, size=min(total - sample.height, rest.height), replace=False)
        sample = pl.concat([sample, rest[np.sort(take)]])
    return sample.sort("dump", "example", "layer", "head")


def maps_for(rows: pl.DataFrame, dump_prefixes: dict[str, str], image_size: int) -> np.ndarray:
    """Resized maps for ``rows`` (``dump, example, layer, head``), in the rows' order."""
    out = np.empty((rows.height, image_size, image_size), dtype=np.float32)
    indexed = rows.with_row_index("row")
    for (key,), group in indexed.group_by("dump"):
        out[group["row"].to_numpy()] = patterns.resized_maps(AttentionDump(dump_prefixes[key]), group, image_size)
    return out


def train_classifier(
    features: dict[str, pl.DataFrame], dump_prefixes: dict[str, str], labels_csv: str | None, train_maps: int,
    image_size: int, folds: int, epochs: int, seed: int,
) -> TrainedClassifier:
    if labels_csv:
        labelled = read_labels_csv(labels_csv, set(features))
        source = f"{patterns.HAND_LABELS} from {labels_csv}"
    else:
        labelled = sample_rule_labels(features, train_maps, seed)
        source = "rule-based labels (no patterns.labels_csv): the CNN learns the rules, not human judgement"
    X = maps_for(labelled, dump_prefixes, image_size)
    y = labelled["label"].to_numpy()
    model = PatternCNN(epochs=epochs, seed=seed)
    cv = cross_validated_f1(model, X, y, folds=folds, seed=seed)
    model.fit(X, y)
    rule_agreement = None
    if labels_csv:  # how often the transparent rules agree with the humans, on the same maps
        keyed = pl.concat([f.select(pl.lit(k).alias("dump"), "example", "layer", "head", "rule_label") for k, f in features.items()])
        joined = labelled.join(keyed, on=["dump", "example", "layer", "head"], how="left")
        rule_agreement = float((joined["rule_label"] == joined["label"]).mean())
    report = {
        "labels_source": source,
        "training_maps": int(labelled.height),
        "class_counts": dict(sorted(labelled["label"].value_counts().iter_rows())),
        "image_size": image_size,
        "epochs": epochs,
        "folds": cv["folds"],
        "macro_f1_mean": cv["macro_f1_mean"],
        "macro_f1_std": cv["macro_f1_std"],
        "macro_f1_per_fold": cv["macro_f1_per_fold"],
        "f1_per_class": cv["f1_per_class"],
        "rule_agreement_with_labels": rule_agreement,
        "paper_f1": PAPER_F1,
    }
    return TrainedClassifier(model, image_size, source, labelled, report)


def save_classifier(trained: TrainedClassifier, path: str | os.PathLike[str]) -> None:
    """Weights as safetensors, with classes, image size and label source in its metadata (no pickle)."""
    metadata = {
        "classes": json.dumps([str(c) for c in trained.model.classes_]),
        "image_size": str(trained.image_size),
        "width": str(trained.model.width),
        "labels_source": trained.labels_source,
    }
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in trained.model.net_.state_dict().items()}, str(tmp), metadata=metadata)


@dataclass
class LoadedClassifier:
    net: PatternNet
    classes: np.ndarray
    image_size: int
    labels_source: str


def load_classifier(path: str | os.PathLike[str]) -> LoadedClassifier:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    classes = np.array(json.loads(metadata["classes"]))
    net = PatternNet(len(classes), int(metadata["width"]))
    net.load_state_dict(load_file(str(path)))
    net.eval()
    return LoadedClassifier(net, classes, int(metadata["image_size"]), metadata["labels_source"])


@torch.inference_mode()
def classify_dump(classifier: LoadedClassifier, dump: AttentionDump, features: pl.DataFrame) -> pl.DataFrame:
    """``features`` plus ``cnn_label`` and ``labels_source`` for every map, one layer at a time (bounded memory)."""
    parts = []
    for (layer,), group in features.sort("example", "layer", "head").group_by("layer", maintain_order=True):
        maps = torch.from_numpy(patterns.resized_maps(dump, group, classifier.image_size))[:, None]
        logits = torch.cat([classifier.net(maps[s : s + 1024]) for s in range(0, len(maps), 1024)])
        parts.append(group.with_columns(pl.Series("cnn_label", classifier.classes[logits.argmax(1).numpy()])))
    return pl.concat(parts).sort("example", "layer", "head").with_columns(pl.lit(classifier.labels_source).alias("labels_source"))


def class_shares(frames: dict[str, pl.DataFrame], label: str) -> pl.DataFrame:
    """Share of each class per dump key (``task/state``), the paper's fig. 2."""
    rows = pl.concat([f.select(pl.lit(k).alias("dump"), pl.col(label).alias("class")) for k, f in frames.items()])
    counts = rows.group_by("dump", "class").agg(pl.len().alias("maps"))
    return counts.with_columns((pl.col("maps") / pl.col("maps").sum().over("dump")).alias("share")).sort("dump", "class")


def dominant_class(frame: pl.DataFrame, label: str) -> pl.DataFrame:
    """Per (layer, head): the most frequent class over examples and its share."""
    counts = frame.group_by("layer", "head", label).agg(pl.len().alias("maps"))
    counts = counts.with_columns((pl.col("maps") / pl.col("maps").sum().over("layer", "head")).alias("share"))
    return (
        counts.sort(["layer", "head", "maps", label], descending=[False, False, True, False])
        .group_by("layer", "head", maintain_order=True)
        .first()
        .rename({label: "dominant_class"})
        .sort("layer", "head")
    )
