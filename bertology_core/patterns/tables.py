"""The pattern classifier's tables, read from its report and its labelled frames: class shares per dump (the
paper's fig. 2), each head's dominant class, the labellers' scores and confusion matrices, and the hand labels'
random-sample shares. Torch-free (the summary runs in the light environment, envs/tables.yaml); training, storage
and prediction are in :mod:`bertology_core.patterns.training`.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from scipy.stats import binomtest

from bertology_core.patterns import feature_tables

PAPER_F1 = 0.86  # Kovaleva et al. 2019, on ~400 hand-labelled maps


def classes_not_learnt(report: dict[str, Any]) -> list[str]:
    """The pattern classes the CNN never saw a training label of (it cannot predict them)."""
    return [c for c in feature_tables.CLASSES if not report.get("class_counts", {}).get(c)]


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


def classifier_table(report: dict[str, Any]) -> pl.DataFrame:
    """One row per labeller scored against labels: the CNN cross-validated (on all its training labels and on
    the randomly drawn ones), the rule labeller on the hand labels held out from fitting its thresholds (fitted
    and configured thresholds), both on the test labels when there are any (``interval``: bootstrap over test
    maps), the blind second pass against the first (how far one labeller agrees with itself) and a second
    labeller against the labels (how far two agree): maps, macro F1 (every class; classes with enough labels),
    F1 per class, Cohen's kappa."""
    hand = trained_on_hand_labels_report(report)
    evaluations = [("CNN", "cross-validated on " + ("all the card's labels (made by eye)" if hand else "the rule labels it learnt"),
                    report.get("cnn_cross_validated"))]
    if "cnn_cross_validated_random_sample" in report:
        evaluations.append(("CNN", "cross-validated, the randomly drawn labels", report["cnn_cross_validated_random_sample"]))
    if "rule_labeller" in report:
        rule = report["rule_labeller"]
        evaluations += [("rules, fitted thresholds", f"held out ({rule['held_out']['maps']} maps; fitted on {rule['fitted_on_maps']})", rule["held_out"]),
                        ("rules, configured thresholds", "held out", rule["held_out_with_config_thresholds"])]
        repeated = rule.get("held_out_repeated")
        if repeated and repeated["mean"] is not None:
            evaluations.append(("rules, fitted thresholds", f"held out, mean of {len(repeated['seeds'])} seeded splits (std "
                                f"{repeated['std']:.3f})", {"maps": rule["held_out"]["maps"], "macro_f1": None,
                                                            "macro_f1_frequent_classes": repeated["mean"], "f1_per_class": {}}))
    test = report.get("test")
    if test:
        evaluations = [
            ("CNN", f"test labels ({test['maps']} maps never trained or designed on)", test["cnn"]),
            ("rules, thresholds fitted on every training label", "test labels", test["rules"]),
        ] + evaluations
    rows = [{"labeller": labeller, "evaluation": evaluation, "maps": scores["maps"], "macro_f1": scores["macro_f1"],
             "macro_f1_frequent_classes": scores["macro_f1_frequent_classes"],
             "interval_low": (scores.get("macro_f1_frequent_classes_interval") or [None, None])[0],
             "interval_high": (scores.get("macro_f1_frequent_classes_interval") or [None, None])[1],
             **{f"f1_{c}": scores["f1_per_class"].get(c) for c in feature_tables.CLASSES}, "cohen_kappa": None}
            for labeller, evaluation, scores in evaluations if scores is not None]
    for key, labeller, evaluation in (("second_pass", "second labelling pass", "blind, against the first pass"),
                                      ("second_labeller", "second labeller", "blind, against the labels")):
        second = report.get(key)
        if second:
            rows.append({"labeller": labeller, "evaluation": evaluation, "maps": second["maps"],
                         "macro_f1": second["macro_f1_against_first"],
                         "macro_f1_frequent_classes": second.get("macro_f1_against_first_frequent_classes"),
                         "interval_low": None, "interval_high": None,
                         **{f"f1_{c}": None for c in feature_tables.CLASSES}, "cohen_kappa": second["cohen_kappa"]})
    schema = {f"f1_{c}": pl.Float64 for c in feature_tables.CLASSES} | {
        "cohen_kappa": pl.Float64, "macro_f1_frequent_classes": pl.Float64, "interval_low": pl.Float64, "interval_high": pl.Float64}
    return pl.DataFrame(rows, schema_overrides=schema).with_columns(
        pl.lit(report["labels_source"]).alias("labels_source"),
        pl.lit(", ".join(report.get("frequent_classes", []))).alias("frequent_classes"),
        pl.lit(PAPER_F1).alias("paper_f1"),
    )


def trained_on_hand_labels_report(report: dict[str, Any]) -> bool:
    return feature_tables.trained_on_hand_labels(report["labels_source"])


def confusion_table(report: dict[str, Any]) -> pl.DataFrame:
    """The confusion matrices of :func:`classifier_table`'s rows, long: labeller, hand label, predicted, maps."""
    rows = []
    test = report.get("test") or {}
    for labeller, scores in (("CNN (test labels)", test.get("cnn")), ("rules (test labels)", test.get("rules")),
                             ("CNN (cross-validated)", report.get("cnn_cross_validated")),
                             ("rules, fitted (held out)", report.get("rule_labeller", {}).get("held_out"))):
        if scores is None:
            continue
        labels = scores["confusion"]["labels"]
        for truth, counts in zip(labels, scores["confusion"]["matrix"]):
            rows += [{"labeller": labeller, "hand_label": truth, "predicted": p, "maps": int(n)} for p, n in zip(labels, counts)]
    return pl.DataFrame(rows, schema={"labeller": pl.String, "hand_label": pl.String, "predicted": pl.String, "maps": pl.Int64})


def hand_label_shares(report: dict[str, Any], test: bool = False, level: float = 0.95) -> pl.DataFrame:
    """Class shares of the hand labels' simple random sample per dump (of the test labels' with ``test``), shaped
    like :func:`class_shares`, with a Clopper-Pearson interval over maps (``ci_low``, ``ci_high``): a share is a
    proportion, and a random sample of labelled maps estimates it without any labeller."""
    rows = (report.get("test") or {}).get("hand_label_shares_random_sample") if test else report.get("hand_label_shares_random_sample")
    schema = {"dump": pl.String, "class": pl.String, "maps": pl.UInt32, "share": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64}
    if not rows:
        return pl.DataFrame(schema=schema)
    frame = pl.DataFrame(rows).select(pl.concat_str("task", pl.lit("/"), "state").alias("dump"), pl.col("label").alias("class"),
                                      pl.col("maps").cast(pl.UInt32), "share")
    totals = dict(frame.group_by("dump").agg(pl.col("maps").sum()).iter_rows())
    intervals = [binomtest(int(k), int(totals[d])).proportion_ci(confidence_level=level, method="exact")
                 for d, k in frame.select("dump", "maps").iter_rows()]
    return frame.with_columns(pl.Series("ci_low", [i.low for i in intervals], pl.Float64),
                              pl.Series("ci_high", [i.high for i in intervals], pl.Float64))
