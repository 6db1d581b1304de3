import math

import numpy as np

from bertology_core.data import tasks
from bertology_core.stats.metrics import METRIC_NAMES, compute_metrics, main_metric_note


def test_accuracy_and_f1_match_hand_computation():
    labels = np.array([1, 1, 1, 0, 0])
    preds = np.array([1, 1, 0, 1, 0])
    out = compute_metrics(tasks.glue_task("MRPC"), preds, labels)
    # tp=2 fp=1 fn=1 -> precision 2/3, recall 2/3, F1 2/3; 3 of 5 correct
    assert out == {"accuracy": 0.6, "f1": 2 / 3}


def test_matthews_matches_formula():
    labels = np.array([1, 1, 1, 0, 0, 0])
    preds = np.array([1, 1, 0, 0, 0, 1])
    tp, tn, fp, fn = 2, 2, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert math.isclose(compute_metrics(tasks.glue_task("CoLA"), preds, labels)["matthews_correlation"], expected)


def test_correlations_for_stsb_and_nan_for_constant_predictions():
    labels = np.array([0.0, 1.0, 2.0, 3.0])
    out = compute_metrics(tasks.glue_task("STS-B"), np.array([0.0, 2.0, 4.0, 7.0]), labels)
    assert out["spearman"] == 1.0 and 0.97 < out["pearson"] < 1.0
    constant = compute_metrics(tasks.glue_task("STS-B"), np.full(4, 2.5), labels)
    assert math.isnan(constant["pearson"]) and math.isnan(constant["spearman"])


def test_a_caption_names_each_task_s_own_main_metric():
    glue = [tasks.glue_task(name) for name in ("STS-B", "MRPC", "CoLA", "SST-2")]
    assert main_metric_note(glue) == "Matthews correlation for CoLA; accuracy for MRPC, SST-2; Pearson r for STS-B"
    assert main_metric_note(glue[1:2]) == "accuracy"
    assert main_metric_note([]) == "each task's main metric"
    # a declared task scores what its declaration lists first, whatever its labels look like
    topics = tasks.Task("topics", ("a", "b", "c"), None, ("f1_macro", "accuracy"))
    assert main_metric_note([topics]) == "macro F1"
    assert main_metric_note([topics, glue[1]]) == "accuracy for MRPC; macro F1 for topics"
    assert set(METRIC_NAMES) >= {m for t in glue + [topics] for m in t.metrics}


def test_the_pruning_curve_caption_names_a_declared_task_s_metric():
    import json

    import polars as pl

    from bertology_core.pruning import summary as pruning_summary

    topics = tasks.Task("topics", ("a", "b", "c"), None, ("f1_macro",))
    curves = pl.DataFrame({"task": ["topics"] * 2, "seed": [1, 1], "step": [0, 1], "share_pruned": [0.0, 0.1],
                           "score": [0.5, 0.4]})
    settings = pruning_summary.PruningSettings(["magnitude"], ["held_out"], 0.9, True, 0.1, 0.1, False, "train", 16,
                                               "token", None, 0)
    chart = pruning_summary.michel_chart(curves, "m", settings, [("topics", 1)], {"topics": topics})
    subtitle = " ".join(json.loads(chart.to_json())["title"]["subtitle"])
    assert "macro F1" in subtitle and "accuracy" not in subtitle and "Pearson" not in subtitle
