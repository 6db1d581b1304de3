"""GLUE metrics, as the GLUE benchmark defines them per task.

Accuracy, binary F1 (positive class 1: "equivalent"/"duplicate"), Matthews
correlation (CoLA), and Pearson/Spearman correlation (STS-B).
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology_core.data.glue import GlueTask


def compute_metrics(task: GlueTask, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's GLUE metrics for class ids (classification) or scores (STS-B)."""
    out: dict[str, float] = {}
    for name in task.metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(labels, predictions))
        elif name == "f1":
            out[name] = float(f1_score(labels, predictions, pos_label=1, zero_division=0.0))
        elif name == "matthews_correlation":
            out[name] = float(matthews_corrcoef(labels, predictions))
        elif name == "pearson":
            out[name] = _correlation(stats.pearsonr, predictions, labels)
        elif name == "spearman":
            out[name] = _correlation(stats.spearmanr, predictions, labels)
        else:  # pragma: no cover - the task registry only names the metrics above
            raise ValueError(f"unknown metric {name}")
    return out


def _correlation(fn, predictions: np.ndarray, labels: np.ndarray) -> float:
    # A constant prediction has no defined correlation: report NaN rather than a made-up 0.
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return float("nan")
    return float(fn(predictions, labels)[0])


def primary_metric(task: GlueTask) -> str:
    return task.metrics[0]
