"""A task's metrics, as GLUE defines them and as a declared task names them (bertology_core.data.tasks).

Accuracy, binary F1 (positive class: the label with id 1, GLUE's "equivalent"/"duplicate"), macro F1 (the unweighted
mean of the F1 of each class the labels or predictions hold), Matthews correlation (CoLA), and Pearson/Spearman correlation (STS-B).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology_core.data.tasks import Task


# how a caption or a column title names each metric a declaration may list
METRIC_NAMES = {
    "accuracy": "accuracy", "f1": "F1", "f1_macro": "macro F1", "matthews_correlation": "Matthews correlation",
    "pearson": "Pearson r", "spearman": "Spearman rho",
}


def main_metric_note(tasks: Iterable[Task]) -> str:
    """What a caption says a "dev score" is: each task's main metric (its declaration's first), named as
    :data:`METRIC_NAMES` does, with the tasks that have it ("accuracy for MRPC, SST-2; Pearson r for STS-B"); the
    metric's name alone where every task has the same one; with no task, "each task's main metric". Never a task list written into a caption by hand: a
    declared task scores what its declaration says."""
    by_metric: dict[str, list[str]] = {}
    for task in sorted(tasks, key=lambda t: t.name):
        by_metric.setdefault(task.main_metric, []).append(task.name)
    if not by_metric:
        return "each task's main metric"
    if len(by_metric) == 1:
        return METRIC_NAMES[next(iter(by_metric))]
    return "; ".join(f"{METRIC_NAMES[metric]} for {', '.join(names)}" for metric, names in by_metric.items())


def compute_metrics(task: Task, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics for class ids (classification) or scores (regression)."""
    out: dict[str, float] = {}
    for name in task.metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(labels, predictions))
        elif name == "f1":
            out[name] = float(f1_score(labels, predictions, pos_label=1, zero_division=0.0))
        elif name == "f1_macro":
            # over the classes the labels or predictions hold (sklearn's default), as the bootstrap's
            out[name] = float(f1_score(labels, predictions, average="macro", zero_division=0.0))
        elif name == "matthews_correlation":
            out[name] = float(matthews_corrcoef(labels, predictions))
        elif name == "pearson":
            out[name] = _correlation(stats.pearsonr, predictions, labels)
        elif name == "spearman":
            out[name] = _correlation(stats.spearmanr, predictions, labels)
        else:  # pragma: no cover - a declaration names only the metrics above (tasks.declare checks)
            raise ValueError(f"unknown metric {name}")
    return out


def _correlation(fn, predictions: np.ndarray, labels: np.ndarray) -> float:
    # A constant prediction has no defined correlation: report NaN rather than a made-up 0.
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return float("nan")
    return float(fn(predictions, labels)[0])
