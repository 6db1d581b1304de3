"""A task's metrics, as GLUE defines them and as a declared task names them (bertology_core.data.tasks).

Accuracy, binary F1 (positive class: the label with id 1, GLUE's "equivalent"/"duplicate"), macro F1 (the unweighted
mean of the F1 of each class the labels or predictions hold), Matthews correlation (CoLA), and Pearson/Spearman correlation (STS-B).

A token task is scored over its words, every word of every sentence pooled (a word with no piece in the input, predicted
-1, counts as wrong): accuracy and macro F1 as above, and span F1
(``span_f1``, a BIO scheme's): the F1 of the spans predicted against the gold spans, a span counting when its type and
both ends agree, as seqeval computes it in its default mode (the CoNLL shared task's conlleval: a predicted I-X after
O opens a span, as conlleval reads it). Its trivial predictor (:func:`word_majority_predictor`) tags each word with the
label it has most often in training, and a word never seen there with the most frequent label overall.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology_core.data.tasks import Task


# how a caption or a column title names each metric a declaration may list
METRIC_NAMES = {
    "accuracy": "accuracy", "f1": "F1", "f1_macro": "macro F1", "matthews_correlation": "Matthews correlation",
    "pearson": "Pearson r", "spearman": "Spearman rho", "span_f1": "span F1",
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


def compute_metrics(task: Task, predictions: Sequence[np.ndarray] | np.ndarray,
                    labels: Sequence[np.ndarray] | np.ndarray) -> dict[str, float]:
    """The task's metrics for class ids (classification) or scores (regression); for a token task, ``predictions`` and
    ``labels`` hold each sentence's class ids, one array per sentence (the words of a sentence in order)."""
    if task.is_token:
        return token_metrics(task, predictions, labels)
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


def sentence_rows(predictions: Sequence[np.ndarray] | np.ndarray, labels: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``predictions`` as one array per sentence of ``labels``: as given, or a flat array of every word's (the words of
    the sentences end to end, as the scoring loops return them) cut at the sentences' lengths."""
    if isinstance(predictions, np.ndarray) and predictions.dtype != object and predictions.ndim == 1:
        lengths = [len(sentence) for sentence in labels]
        if len(predictions) != sum(lengths):
            raise ValueError(f"token_metrics: {len(predictions)} words predicted for {sum(lengths)} words")
        return np.split(predictions, np.cumsum(lengths)[:-1]) if lengths else []
    return [np.asarray(p) for p in predictions]


def token_metrics(task: Task, predictions: Sequence[np.ndarray] | np.ndarray, labels: Sequence[np.ndarray]) -> dict[str, float]:
    """A token task's metrics over every word of the sentences (see the module's docstring). ``labels``: each
    sentence's class ids (a list of arrays, or a predictions table's list column as numpy gives it); ``predictions``
    the same, or every word's end to end."""
    predictions = sentence_rows(predictions, labels)
    if len(predictions) != len(labels) or any(len(p) != len(g) for p, g in zip(predictions, labels, strict=True)):
        raise ValueError("token_metrics: predictions and labels differ in their sentences or their words")
    flat_predictions = np.concatenate([np.asarray(p) for p in predictions]) if len(predictions) else np.zeros(0, int)
    flat_labels = np.concatenate([np.asarray(g) for g in labels]) if len(labels) else np.zeros(0, int)
    out: dict[str, float] = {}
    for name in task.metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(flat_labels, flat_predictions))
        elif name == "f1_macro":  # over the classes the words or predictions hold; -1 (no prediction) is none
            classes = sorted((set(flat_labels.tolist()) | set(flat_predictions.tolist())) - {-1})
            out[name] = float(f1_score(flat_labels, flat_predictions, labels=classes, average="macro", zero_division=0.0))
        elif name == "span_f1":
            out[name] = span_f1(task, predictions, labels)
        else:  # pragma: no cover - tasks.declare allows a token task these metrics only
            raise ValueError(f"unknown token metric {name}")
    return out


def span_f1(task: Task, predictions: Sequence[np.ndarray], labels: Sequence[np.ndarray]) -> float:
    """F1 of a BIO task's predicted spans against its gold spans, by seqeval (default mode: conlleval's); a word
    predicted -1 (no prediction: it had no piece in the input) reads as O."""
    from seqeval.metrics import f1_score as seqeval_f1  # imported here: only BIO tasks need it

    names = np.asarray([*(task.label_names or ()), "O"], dtype=object)  # id -1 indexes the "O" appended
    return float(seqeval_f1([names[np.asarray(g)].tolist() for g in labels],
                            [names[np.asarray(p)].tolist() for p in predictions], zero_division=0))


def word_majority_predictor(words: Iterable[Sequence[str]], labels: Iterable[Sequence[int]]) -> Callable[[Sequence[str]], np.ndarray]:
    """A token task's trivial predictor, learnt from training sentences: a word's most frequent training label (the
    lowest class id on a tie), and for a word never seen in training the most frequent label overall. Words are
    matched as written (case kept), as the classic most-frequent-tag baseline does."""
    by_word: dict[str, Counter[int]] = {}
    overall: Counter[int] = Counter()
    for sentence, tags in zip(words, labels, strict=True):
        for word, tag in zip(sentence, tags, strict=True):
            by_word.setdefault(word, Counter())[int(tag)] += 1
            overall[int(tag)] += 1
    if not overall:
        raise ValueError("word_majority_predictor: no training word")

    def most_frequent(counts: Counter[int]) -> int:
        return min(counts, key=lambda tag: (-counts[tag], tag))

    fallback = most_frequent(overall)
    table = {word: most_frequent(counts) for word, counts in by_word.items()}
    return lambda sentence: np.array([table.get(word, fallback) for word in sentence], dtype=np.int64)
