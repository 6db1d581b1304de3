import math

import numpy as np

from bertology_core.data import tasks
from bertology_core.stats.metrics import compute_metrics


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
