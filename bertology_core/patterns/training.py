"""Training data, training, storage and prediction for the pattern CNN (see :mod:`bertology_core.patterns.cnn`).

Labels come from hand labels (:mod:`bertology_core.patterns.label_tables`: keyed by task, state, example idx, layer and head; their
maps come from the labelled dumps, computed for exactly those examples) or, for a model without any, from
the rule labeller, sampled stratified by class. With hand labels the rule labeller's thresholds are fitted
on a training split of them and scored on the held-out rest, and the CNN is scored by stratified
cross-validation on all of them. Test labels (the label card's ``test``: maps labelled after the design was
frozen, never trained, fitted or designed on) score the final CNN and the final rule labeller once; those
scores are the ones a claim may rest on. With rule labels the cross-validated F1 measures how well the CNN
reproduces the rules, not agreement with human judgement; every output says which labels were used.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from sklearn.metrics import f1_score

from bertology_core.patterns import feature_tables, label_tables, tables
from bertology_core.attention.dump_tables import AttentionDump
from bertology_core.data.io import atomic_path
from bertology_core.stats.bootstrap import percentile_interval, resample_indices
from bertology_core.patterns.cnn import (PatternCNN, PatternEnsemble, PatternNet, confusion, cross_validated_f1,
                                                 pack, resized_maps)

LabelsError = label_tables.LabelsError


@dataclass
class TrainedClassifier:
    model: PatternCNN
    image_size: int
    labels_source: str
    training_maps: pl.DataFrame  # task, state, idx, layer, head, label (and the rule labeller's split)
    report: dict[str, Any]
    thresholds: feature_tables.RuleThresholds


def sample_rule_labels(features: dict[str, pl.DataFrame], total: int, seed: int) -> pl.DataFrame:
    """A seeded sample of ``total`` maps, as balanced over the rule classes as their counts allow."""
    pool = pl.concat(
        [frame.select(pl.lit(key).alias("dump"), "example", "idx", "layer", "head", pl.col("rule_label").alias("label"),
                      *feature_tables.FEATURES)
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
        out[group["row"].to_numpy()] = resized_maps(AttentionDump(dump_prefixes[key]), group, image_size)
    return out


def labelled_maps(labels: pl.DataFrame, labelled_prefixes: dict[str, str], image_size: int,
                  thresholds: feature_tables.RuleThresholds) -> tuple[np.ndarray, pl.DataFrame]:
    """Resized maps and features of every hand-labelled map, in the order of ``labels``, from the labelled
    dumps (``task/state`` -> prefix): the maps are found by the example's ``idx``, never by a dump's example number."""
    indexed = labels.with_row_index("row")
    out = np.empty((labels.height, image_size, image_size), dtype=np.float32)
    parts = []
    for (task, state), group in indexed.group_by("task", "state", maintain_order=True):
        key = f"{task}/{state}"
        if key not in labelled_prefixes:
            raise LabelsError(f"no labelled dump for {key} among {sorted(labelled_prefixes)}: the workflow computes one per "
                              "task/state the hand labels name (rule labelled_maps)")
        dump = AttentionDump(labelled_prefixes[key])
        keyed = group.join(dump.tokens().select("example", pl.col("idx").cast(pl.Int64)), on="idx", how="left")
        missing = keyed.filter(pl.col("example").is_null())
        if missing.height:
            raise LabelsError(f"{key}: labelled idx {missing['idx'].unique().sort().to_list()[:5]} are not in {dump.attention_path}")
        keyed = keyed.with_columns(pl.col("example").cast(pl.Int32), pl.col("layer").cast(pl.Int16), pl.col("head").cast(pl.Int16))
        out[keyed["row"].to_numpy()] = resized_maps(dump, keyed, image_size)
        found = feature_tables.dump_features(dump, thresholds, keys=keyed.select("example", "layer", "head"))
        parts.append(keyed.select("row", "example", "layer", "head").join(
            found.drop("idx", "length"), on=["example", "layer", "head"], how="left").drop("example", "layer", "head"))
    features = pl.concat(parts).sort("row").drop("row")
    return out, pl.concat([labels, features], how="horizontal")


def _macro_f1(truth: np.ndarray, predicted: np.ndarray, classes: list[str]) -> float | None:
    # None (JSON null, not NaN) when no class qualifies
    return float(f1_score(truth, predicted, labels=classes, average="macro", zero_division=0)) if classes else None


def _scores(truth: np.ndarray, predicted: np.ndarray, frequent: list[str]) -> dict[str, Any]:
    """Macro F1 over every class the hand labels hold and over the frequent ones, per-class F1, confusion."""
    classes = [c for c in feature_tables.CLASSES if c in set(truth)]
    per_class = f1_score(truth, predicted, labels=classes, average=None, zero_division=0)
    return {
        "maps": int(len(truth)),
        "macro_f1": _macro_f1(truth, predicted, classes),
        "macro_f1_frequent_classes": _macro_f1(truth, predicted, frequent),
        "f1_per_class": {c: float(f) for c, f in zip(classes, per_class)},
        "confusion": confusion(truth, predicted, list(feature_tables.CLASSES)),
    }


RULE_SPLITS = 5  # seeded fitting/held-out splits whose held-out scores give the rule labeller's spread


def repeated_rule_validation(labelled: pl.DataFrame, y: np.ndarray, validation_share: float, seeds: list[int],
                             frequent: list[str]) -> dict[str, Any]:
    """The rule labeller fitted and scored on several seeded splits: a held-out set of a few hundred maps moves
    macro F1 by a few points from one split to the next, so one split's score is one draw of it. Each fit starts
    from :meth:`feature_tables.RuleThresholds.neutral`, never from thresholds that may have seen a split's held-out maps."""
    scores = []
    for split_seed in seeds:
        split = label_tables.validation_split(y, validation_share, split_seed)
        # from a neutral start: the configured thresholds may themselves have been fitted on these labels
        fitted = label_tables.fit_rule_thresholds(labelled.filter(pl.Series(split == "fit")), y[split == "fit"],
                                                    feature_tables.RuleThresholds.neutral())
        held = labelled.filter(pl.Series(split == "held_out"))
        scores.append(_macro_f1(y[split == "held_out"], label_tables.rule_labels(held, fitted), frequent))
    return {"seeds": seeds, "macro_f1_frequent_classes": scores,
            "mean": float(np.mean(scores)) if frequent else None, "std": float(np.std(scores)) if frequent else None}


TEST_RESAMPLES = 1000


def score_on_test(model: PatternCNN, rules: feature_tables.RuleThresholds, test: pl.DataFrame, labelled_prefixes: dict[str, str],
                  image_size: int, thresholds: feature_tables.RuleThresholds, frequent: list[str], seed: int,
                  level: float = 0.95) -> dict[str, Any]:
    """The final CNN and rule labeller (both trained or fitted on every training label) scored once on the test
    labels, with a percentile bootstrap interval of each macro F1 over the test maps and of their difference."""
    maps, labelled = labelled_maps(test, labelled_prefixes, image_size, thresholds)
    truth = labelled["label"].to_numpy()
    # a frequent class the test labels lack would score F1 0 for want of maps, not for errors: scored over the rest
    absent = [c for c in frequent if c not in set(truth)]
    frequent = [c for c in frequent if c in set(truth)]
    predicted = {"cnn": model.predict(pack(maps, feature_tables.feature_matrix(labelled))),
                 "rules": label_tables.rule_labels(labelled, rules)}
    draws = resample_indices(len(truth), TEST_RESAMPLES, seed)
    resampled = {name: np.array([f1_score(truth[d], guess[d], labels=frequent, average="macro", zero_division=0) for d in draws])
                 for name, guess in predicted.items()} if frequent else {}
    out: dict[str, Any] = {"maps": int(len(truth)), "level": level, "resamples": TEST_RESAMPLES,
                           "class_counts": dict(sorted(labelled["label"].value_counts().iter_rows())),
                           "scored_classes": frequent, "frequent_classes_without_test_labels": absent}
    for name, guess in predicted.items():
        out[name] = _scores(truth, guess, frequent)
        if frequent:
            low, high = percentile_interval(resampled[name], level)
            out[name]["macro_f1_frequent_classes_interval"] = [float(low), float(high)]
    if frequent:
        low, high = percentile_interval(resampled["cnn"] - resampled["rules"], level)
        out["cnn_minus_rules_interval"] = [float(low), float(high)]
    out["hand_label_shares_random_sample"] = random_sample_shares(test, "test-random")
    keep = [c for c in ("task", "state", "idx", "layer", "head", "label") if c in labelled.columns]
    out["predictions"] = labelled.select(keep).with_columns(pl.Series("cnn", predicted["cnn"]),
                                                           pl.Series("rules", predicted["rules"])).to_dicts()
    return out


def random_sample_shares(labels: pl.DataFrame, sample: str = "random") -> list[dict[str, Any]]:
    """Class shares of the hand labels drawn as a simple random sample (``sample`` column: ``"random"`` in the
    training labels, ``"test-random"`` in test labels), per dump."""
    if "sample" not in labels.columns:
        return []
    rows = labels.filter(pl.col("sample") == sample)
    if not rows.height:
        return []
    counts = rows.group_by("task", "state", "label").agg(pl.len().alias("maps"))
    counts = counts.with_columns((pl.col("maps") / pl.col("maps").sum().over("task", "state")).alias("share"))
    return counts.sort("task", "state", "label").to_dicts()


def train_classifier(
    features: dict[str, pl.DataFrame], dump_prefixes: dict[str, str], label_set: label_tables.LabelSet | None,
    labelled_prefixes: dict[str, str], train_maps: int, image_size: int, folds: int, epochs: int, seed: int, ensemble: int = 1,
    thresholds: feature_tables.RuleThresholds = feature_tables.RuleThresholds(), validation_share: float = 0.3,
    min_class_labels: int = 20,
) -> TrainedClassifier:
    """Train the CNN on the hand labels of ``label_set`` (:func:`label_tables.load_label_set`) when it holds
    any for the run's dumps, else on a stratified sample of the rule labels; fit and validate the rule
    labeller on hand labels."""
    report: dict[str, Any] = {"image_size": image_size, "epochs": epochs, "ensemble": ensemble,
                              "paper_f1": tables.PAPER_F1}
    fitted = thresholds
    hand_labels = label_set.labels if label_set else None
    if label_set:
        report["hand_labels"] = {"file": label_set.description, "in_file": label_set.in_file, "used": label_set.labels.height,
                                 "left_out": label_set.left_out}
    if hand_labels is not None and hand_labels.height:
        if hand_labels["label"].n_unique() < 2:
            raise LabelsError(f"{label_set.description}: the labels of this run's dumps hold one class only "
                              f"({hand_labels['label'][0]}): a classifier needs two. Fix: label more maps.")
        source = f"{feature_tables.HAND_LABELS} from {label_set.description}"
        maps, labelled = labelled_maps(hand_labels, labelled_prefixes, image_size, thresholds)
        X = pack(maps, feature_tables.feature_matrix(labelled))
        y = labelled["label"].to_numpy()
        counts = dict(sorted(labelled["label"].value_counts().iter_rows()))
        frequent = [c for c in feature_tables.CLASSES if counts.get(c, 0) >= min_class_labels]
        split = label_tables.validation_split(y, validation_share, seed)
        # from a neutral start: the configured thresholds may themselves have been fitted on these labels
        fitted = label_tables.fit_rule_thresholds(labelled.filter(pl.Series(split == "fit")), y[split == "fit"],
                                                    feature_tables.RuleThresholds.neutral())
        held = labelled.filter(pl.Series(split == "held_out"))
        report["rule_labeller"] = {
            "thresholds": asdict(fitted),
            "fitted_on_maps": int((split == "fit").sum()),
            "held_out": _scores(y[split == "held_out"], label_tables.rule_labels(held, fitted), frequent),
            "held_out_with_config_thresholds": _scores(y[split == "held_out"], label_tables.rule_labels(held, thresholds), frequent),
        }
        report["rule_labeller"]["held_out_repeated"] = repeated_rule_validation(
            labelled, y, validation_share, [seed + k for k in range(RULE_SPLITS)], frequent)
        # the labeller the run uses: thresholds fitted on every label (the held-out scores above judge the procedure)
        fitted = label_tables.fit_rule_thresholds(labelled, y, feature_tables.RuleThresholds.neutral())
        report["rule_labeller"]["final_thresholds"] = asdict(fitted)
        labelled = labelled.with_columns(pl.Series("rule_split", split))
        if label_set.second_pass is not None and label_set.second_pass.height:
            report["second_pass"] = label_tables.pass_agreement(hand_labels, label_set.second_pass, frequent)
        if label_set.second_labeller is not None and label_set.second_labeller.height:
            report["second_labeller"] = label_tables.pass_agreement(hand_labels, label_set.second_labeller, frequent)
        report["hand_label_shares_random_sample"] = random_sample_shares(hand_labels)
    else:
        source = "rule-based labels (no labels made by eye for this model): the CNN learns the rules, not a labeller's judgement"
        if label_set:
            source += f"; the labels {label_set.description} hold none of this run's dumps ({label_set.left_out})"
        labelled = sample_rule_labels(features, train_maps, seed)
        X = pack(maps_for(labelled, dump_prefixes, image_size), feature_tables.feature_matrix(labelled))
        y = labelled["label"].to_numpy()
        counts = dict(sorted(labelled["label"].value_counts().iter_rows()))
        frequent = [c for c in feature_tables.CLASSES if counts.get(c, 0) >= min_class_labels]
    population = (labelled["sample"] == "random").fill_null(False).to_numpy() if "sample" in labelled.columns else None
    model = PatternCNN(image_size=image_size, epochs=epochs, seed=seed, ensemble=ensemble)
    cv = cross_validated_f1(model, X, y, folds=folds, seed=seed)
    model.fit(X, y)
    report.update({
        "labels_source": source,
        "training_maps": int(labelled.height),
        "class_counts": counts,
        "min_class_labels": min_class_labels,
        "frequent_classes": frequent,
        "folds": cv["folds"],
        "macro_f1_mean": cv["macro_f1_mean"],
        "macro_f1_std": cv["macro_f1_std"],
        "macro_f1_per_fold": cv["macro_f1_per_fold"],
        "cnn_cross_validated": _scores(y, cv["out_of_fold_predictions"], frequent),
    })
    if population is not None and population.any():  # the maps as they come, not as enriched for rare classes
        report["cnn_cross_validated_random_sample"] = _scores(y[population], cv["out_of_fold_predictions"][population], frequent)
    if label_set and label_set.test is not None and label_set.test.height and hand_labels is not None and hand_labels.height:
        report["test"] = score_on_test(model, fitted, label_set.test, labelled_prefixes, image_size, thresholds, frequent, seed)
    elif label_set and label_set.test_in_file:
        report["test_left_out"] = (f"the label card's {label_set.test_in_file} test labels name none of this run's dumps "
                                   f"({', '.join(f'{k}: {v}' for k, v in label_set.left_out.items())})")
    keep = [c for c in ("task", "state", "dump", "idx", "layer", "head", "label", "sample", "rule_split") if c in labelled.columns]
    return TrainedClassifier(model, image_size, source, labelled.select(keep), report, fitted)


def save_classifier(trained: TrainedClassifier, path: str | os.PathLike[str]) -> None:
    """Weights as safetensors, with classes, image size and label source in its metadata (no pickle)."""
    metadata = {
        "classes": json.dumps([str(c) for c in trained.model.classes_]),
        "image_size": str(trained.image_size),
        "width": str(trained.model.width),
        "ensemble": str(len(trained.model.net_.nets)),
        "features": json.dumps(list(feature_tables.FEATURES)),
        "labels_source": trained.labels_source,
        "rule_thresholds": json.dumps(asdict(trained.thresholds)),
    }
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in trained.model.net_.state_dict().items()}, str(tmp), metadata=metadata)


@dataclass
class LoadedClassifier:
    net: PatternEnsemble
    classes: np.ndarray
    image_size: int
    labels_source: str
    thresholds: feature_tables.RuleThresholds


def load_classifier(path: str | os.PathLike[str]) -> LoadedClassifier:
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    classes = np.array(json.loads(metadata["classes"]))
    names = json.loads(metadata.get("features", "[]"))
    if names != list(feature_tables.FEATURES):
        raise ValueError(f"{path}: a pattern classifier trained on features {names}, not this version's "
                         f"{list(feature_tables.FEATURES)}. Fix: retrain it (rule pattern_classifier).")
    nets = [PatternNet(len(classes), int(metadata["width"]), features=len(names)) for _ in range(int(metadata.get("ensemble", 1)))]
    net = PatternEnsemble(nets)
    net.load_state_dict(load_file(str(path)))
    net.eval()
    thresholds = feature_tables.RuleThresholds.from_dict(json.loads(metadata["rule_thresholds"]))
    return LoadedClassifier(net, classes, int(metadata["image_size"]), metadata["labels_source"], thresholds)


@torch.inference_mode()
def classify_dump(classifier: LoadedClassifier, dump: AttentionDump, features: pl.DataFrame, batch_size: int = 64) -> pl.DataFrame:
    """``features`` plus ``cnn_label`` and ``labels_source`` for every map, one layer at a time (bounded memory), the
    nets run over ``batch_size`` maps a pass (a speed setting: each map's output does not depend on it);
    ``rule_label`` is re-derived with the classifier's rule thresholds (fitted to hand labels when it had any)."""
    features = features.with_columns(pl.Series("rule_label", label_tables.rule_labels(features, classifier.thresholds)))
    parts = []
    for (layer,), group in features.sort("example", "layer", "head").group_by("layer", maintain_order=True):
        maps = torch.from_numpy(resized_maps(dump, group, classifier.image_size))[:, None]
        values = torch.from_numpy(feature_tables.feature_matrix(group))
        probabilities = torch.cat([classifier.net(maps[s : s + batch_size], values[s : s + batch_size])
                                   for s in range(0, len(maps), batch_size)])
        parts.append(group.with_columns(pl.Series("cnn_label", classifier.classes[probabilities.argmax(1).numpy()])))
    return pl.concat(parts).sort("example", "layer", "head").with_columns(pl.lit(classifier.labels_source).alias("labels_source"))
