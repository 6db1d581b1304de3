"""Paired bootstrap over evaluation examples, vectorised over configurations and resamples.

The question a disabling sweep asks is "does configuration c score better than the intact model on this
dev set, beyond what the choice of dev examples explains?". The paired bootstrap answers it (Efron &
Tibshirani 1993; Koehn 2004 for NLP): draw ``R`` resamples of the ``n`` dev examples with replacement,
score the configuration and the reference on the *same* resample, and take the percentile interval of
the ``R`` differences. Pairing removes the between-example variance both models share, which is why
the intervals of small deltas are much narrower than those of the scores themselves.

Metrics are computed from sufficient statistics (counts, sums), so ``[configs, resamples]`` scores
come out of a few array operations; their definitions are the GLUE ones of :mod:`bertology_core.stats.metrics`
(accuracy, binary F1 of class 1, macro F1 over the classes present, Matthews correlation (binary, or its multiclass
form: Gorodkin 2004, as sklearn), Pearson, Spearman with average ranks).

A token task's unit is the sentence (:class:`Sentences`): a resample draws sentences, and each word counts as often as
its sentence was drawn (words of a sentence are not independent draws: resampling them would make intervals too
narrow). Accuracy and macro F1 pool the drawn sentences' words; span F1 (a BIO scheme's, seqeval's default mode) adds
each drawn sentence's counts of correct, predicted and gold spans.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

SUPPORTED_METRICS = ("accuracy", "f1", "f1_macro", "matthews_correlation", "pearson", "spearman", "span_f1")
# the share of resamples that must define a statistic for its interval (percentile_interval's min_share) where a
# statistic can be undefined on a resample: no interval when more than 1% of them leave it undefined
DEFINED_SHARE = 0.99


def _multiclass(metric: str, predictions: np.ndarray, labels: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Macro F1 (the classes a resample's labels or predictions hold, each F1 weighted alike, as sklearn's
    ``f1_score(average="macro")``) or multiclass Matthews correlation, from per-class weighted counts -> ``[C, R]``."""
    classes = int(max(labels.max(), predictions.max(initial=0))) + 1  # no rows: a greedy search with no step
    true = np.stack([(labels == k).astype(np.float64) @ weights for k in range(classes)])  # [K, R]
    hit = np.stack([((predictions == k) & (labels == k)).astype(np.float64) @ weights for k in range(classes)])  # [K, C, R]
    predicted = np.stack([(predictions == k).astype(np.float64) @ weights for k in range(classes)])  # [K, C, R]
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "f1_macro":
            present = (true[:, None, :] + predicted) > 0
            f1 = np.where(present, 2 * hit / np.where(present, true[:, None, :] + predicted, 1), 0.0)
            return f1.sum(axis=0) / present.sum(axis=0)
        correct = hit.sum(axis=0)
        covariance = correct * size - np.einsum("kcr,kr->cr", predicted, true)
        denominator = np.sqrt((size**2 - (predicted**2).sum(axis=0)) * (size**2 - (true**2).sum(axis=0))[None, :])
        return np.where(denominator > 0, covariance / np.where(denominator > 0, denominator, 1), 0.0)


@dataclass(frozen=True)
class Sentences:
    """A token task's words, laid end to end in the flat prediction and label arrays, grouped into sentences (the
    units a bootstrap draws): ``offsets`` ``[S + 1]`` bound each sentence's words; ``label_names`` name the class
    ids, from which a BIO task's spans are read (``span_f1``)."""

    offsets: np.ndarray
    label_names: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of_word(self) -> np.ndarray:
        """``[W]``: each word's sentence."""
        return np.repeat(np.arange(len(self)), np.diff(self.offsets))

    @classmethod
    def of(cls, sentences: list[list[int]] | list[np.ndarray], label_names: tuple[str, ...] | None = None) -> "Sentences":
        return cls.of_lengths([len(sentence) for sentence in sentences], label_names)

    @classmethod
    def of_lengths(cls, lengths: Any, label_names: tuple[str, ...] | None = None) -> "Sentences":
        return cls(np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64), label_names)

    @classmethod
    def of_runs(cls, sentence_of_word: np.ndarray, label_names: tuple[str, ...] | None = None) -> "Sentences":
        """The sentences of words laid end to end, each word's sentence id given (a sentence's words adjacent)."""
        ids = np.asarray(sentence_of_word)
        if not len(ids):
            return cls(np.zeros(1, dtype=np.int64), label_names)
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        if len(np.unique(ids[starts])) != len(starts):
            raise ValueError("a sentence's words must be adjacent")
        return cls(np.concatenate([starts, [len(ids)]]).astype(np.int64), label_names)

    def subset(self, words: np.ndarray) -> "Sentences":
        """The sentences a word mask ``[W]`` keeps (whole sentences only: a mask that splits one is refused)."""
        kept = np.bincount(self.of_word(), weights=np.asarray(words, dtype=np.float64), minlength=len(self))
        lengths = np.diff(self.offsets)
        if np.any((kept > 0) & (kept < lengths)):
            raise ValueError("a word mask must keep or drop whole sentences")
        return Sentences.of_lengths(lengths[kept > 0], self.label_names)

    def expand(self, chosen: np.ndarray) -> np.ndarray:
        """A mask over sentences ``[S]`` as a mask over their words ``[W]``."""
        return np.repeat(np.asarray(chosen, dtype=bool), np.diff(self.offsets))


def span_counts(predictions: np.ndarray, labels: np.ndarray, sentences: Sentences) -> np.ndarray:
    """``[C, S, 3]``: for each configuration's predictions ``[C, W]`` and each sentence, its correct, predicted and gold
    spans, as seqeval's default mode reads BIO tags (a predicted class id -1, no prediction, is read as O)."""
    from seqeval.metrics.sequence_labeling import get_entities

    if sentences.label_names is None:
        raise ValueError("span_f1 reads spans from the labels' names: the Sentences were built without the task's labels")
    names = np.asarray([*sentences.label_names, "O"], dtype=object)  # id -1 indexes the "O" appended

    def spans(row: np.ndarray) -> list[set[tuple[str, int, int]]]:
        tags = names[row]
        out = []
        for start, end in zip(sentences.offsets[:-1], sentences.offsets[1:], strict=True):
            out.append({(kind, a, b) for kind, a, b in get_entities(tags[start:end].tolist())})
        return out

    gold = spans(np.asarray(labels))
    # configurations often predict alike (a head whose disabling changes nothing): each distinct row is read once
    rows, inverse = np.unique(np.atleast_2d(predictions), axis=0, return_inverse=True)
    counts = np.zeros((len(rows), len(sentences), 3))
    for c, row in enumerate(rows):
        for s, (found, true) in enumerate(zip(spans(row), gold, strict=True)):
            counts[c, s] = (len(found & true), len(found), len(true))
    return counts[inverse.reshape(-1)]


def span_f1_of_counts(counts: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``[C, R]`` span F1 from :func:`span_counts` ``[C, S, 3]`` and each resample's draws of every sentence ``[S, R]``."""
    correct, found, true = np.einsum("csk,sr->ckr", counts, drawn).transpose(1, 0, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(found + true > 0, 2 * correct / (found + true), 0.0)  # seqeval's zero_division 0


def sentence_draws(indices: np.ndarray, sentences: int) -> np.ndarray:
    """``[S, R]``: how often each resample ``indices`` ``[R, S']`` draws each sentence."""
    return np.stack([np.bincount(row, minlength=sentences) for row in indices]).T.astype(np.float64)


def resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n]`` example indices drawn with replacement (a seeded numpy Generator)."""
    if n < 1:
        raise ValueError("the bootstrap needs at least one example")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def metric_on_resamples(metric: str, predictions: np.ndarray, labels: np.ndarray, indices: np.ndarray,
                        sentences: Sentences | None = None) -> np.ndarray:
    """``metric`` of each row of ``predictions`` ``[C, n]`` on each resample ``indices`` ``[R, n]`` -> ``[C, R]``.
    For a token task, ``predictions`` ``[C, W]`` and ``labels`` ``[W]`` hold every word, ``sentences`` groups them,
    and ``indices`` ``[R, S]`` draws sentences.

    Undefined values (F1 without positives, a constant prediction's correlation) are NaN, as in
    :func:`bertology_core.stats.metrics.compute_metrics`.
    """
    predictions = np.atleast_2d(predictions)
    labels = np.asarray(labels)
    if sentences is not None:
        if metric not in ("accuracy", "f1_macro", "span_f1"):
            raise ValueError(f"{metric} does not score a token task")
        drawn = sentence_draws(indices, len(sentences))  # [S, R]
        if metric == "span_f1":
            return span_f1_of_counts(span_counts(predictions, labels, sentences), drawn)
        weights = drawn[sentences.of_word()]  # [W, R]: a word counts as often as its sentence was drawn
        if metric == "accuracy":
            return ((predictions == labels).astype(np.float64) @ weights) / weights.sum(axis=0)
        return _multiclass(metric, predictions, labels, weights, 0)
    n = labels.shape[0]
    if metric in ("accuracy", "f1", "f1_macro", "matthews_correlation"):
        weights = np.stack([np.bincount(row, minlength=n) for row in indices]).T.astype(np.float64)  # [n, R]
        size = indices.shape[1]
        if metric == "accuracy":
            return ((predictions == labels).astype(np.float64) @ weights) / size
        if metric == "f1_macro" or (metric == "matthews_correlation" and not set(np.unique(labels)) | set(np.unique(predictions)) <= {0, 1}):
            return _multiclass(metric, predictions, labels, weights, size)
        if not set(np.unique(labels)) <= {0, 1}:
            raise ValueError(f"{metric} is implemented for binary labels 0/1 only")
        positive, truth = (predictions == 1).astype(np.float64), (labels == 1).astype(np.float64)
        tp = (positive * truth) @ weights
        fp = (positive * (1 - truth)) @ weights
        fn = ((1 - positive) * truth) @ weights
        with np.errstate(invalid="ignore", divide="ignore"):
            if metric == "f1":
                return np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), np.nan)
            tn = size - tp - fp - fn
            denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
            # sklearn's convention: MCC is 0 when a marginal is empty
            return np.where(denominator > 0, (tp * tn - fp * fn) / np.where(denominator > 0, denominator, 1), 0.0)
    if metric in ("pearson", "spearman"):
        out = np.empty((predictions.shape[0], indices.shape[0]))
        truth = labels[indices].astype(np.float64)  # [R, n]
        if metric == "spearman":
            truth = stats.rankdata(truth, axis=-1)
        for row, values in enumerate(predictions):
            drawn = values[indices].astype(np.float64)
            if metric == "spearman":
                drawn = stats.rankdata(drawn, axis=-1)
            out[row] = rowwise_pearson(drawn, truth)
        return out
    raise ValueError(f"unknown metric {metric!r}; supported: {SUPPORTED_METRICS}")


def rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson's r of each row of ``a`` with the matching row of ``b`` (broadcast along the last axis); NaN where either
    row is constant (or its spread underflows to zero)."""
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    denominator = np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (a * b).sum(-1) / np.where(denominator > 0, denominator, 1), np.nan)


def percentile_interval(draws: np.ndarray, level: float,
                        min_share: float = 0.0) -> tuple[np.ndarray, np.ndarray] | tuple[float, float]:
    """The ``level`` (e.g. 0.95) percentile interval of bootstrap ``draws`` along the last axis: numpy's
    ``nanpercentile`` (linear interpolation) at ``100 (1 - level) / 2`` and its complement, ignoring NaN draws (an
    undefined statistic on a resample). NaN where every draw is NaN or there are none, and where fewer than
    ``min_share`` of the draws are finite (``min_share=0.99``: no interval when more than 1% of the resamples leave
    the statistic undefined; 0, the default, never). Arrays of ``draws``' leading shape; for 1-D ``draws``, two
    floats. The one percentile interval of the library: every stage's bootstrap interval is this one."""
    draws = np.asarray(draws, dtype=np.float64)
    tail = 100 * (1 - level) / 2
    if draws.size == 0:  # no statistics (shape [0, R]) or no draws (shape [C, 0])
        low, high = np.full(draws.shape[:-1], np.nan), np.full(draws.shape[:-1], np.nan)
    else:
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, as documented
            low, high = np.nanpercentile(draws, [tail, 100 - tail], axis=-1)
        if min_share:
            undefined = np.isfinite(draws).sum(-1) < min_share * draws.shape[-1]
            low, high = np.where(undefined, np.nan, low), np.where(undefined, np.nan, high)
    if draws.ndim == 1:
        return float(low), float(high)
    return low, high


@dataclass(frozen=True)
class PairedDeltas:
    """Point estimates and resampled differences of ``C`` configurations against one reference."""

    delta: np.ndarray  # [C] metric(config) - metric(reference) on the full sample
    resampled: np.ndarray  # [C, R] the same difference on each resample

    def interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        """Percentile interval at ``level`` (e.g. 0.95), NaN-aware."""
        return percentile_interval(self.resampled, level)


def paired_deltas(
    metric: str, predictions: np.ndarray, reference: np.ndarray, labels: np.ndarray, indices: np.ndarray,
    sentences: Sentences | None = None,
) -> PairedDeltas:
    """Each configuration's metric minus the reference's, on the full sample and on the same resamples (a token task's:
    over words, ``sentences`` grouping them, ``indices`` drawing sentences).

    ``reference`` is one row ``[n]`` shared by every configuration, or one row per configuration ``[C, n]`` (the
    intact model as scored in that configuration's own forward pass); equal rows are scored once."""
    predictions = np.atleast_2d(predictions)
    rows, inverse = np.unique(np.atleast_2d(reference), axis=0, return_inverse=True)
    inverse = np.broadcast_to(inverse.reshape(-1), (predictions.shape[0],))
    full = np.arange(labels.shape[0] if sentences is None else len(sentences))[None, :]
    both = np.vstack([rows, predictions])
    if metric == "span_f1" and sentences is not None:  # the spans read once for the full sample and the resamples
        counts = span_counts(both, labels, sentences)
        point = span_f1_of_counts(counts, sentence_draws(full, len(sentences)))[:, 0]
        resampled = span_f1_of_counts(counts, sentence_draws(indices, len(sentences)))
    else:
        point = metric_on_resamples(metric, both, labels, full, sentences)[:, 0]
        resampled = metric_on_resamples(metric, both, labels, indices, sentences)
    base = len(rows)
    return PairedDeltas(delta=point[base:] - point[inverse], resampled=resampled[base:] - resampled[inverse])
