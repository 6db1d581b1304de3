"""Is a fine-tuned model fit for analysis? Its dev score against the task's trivial predictor.

An analysis of a model that has learnt nothing of its task (Kovaleva et al. 2019, Michel et al. 2019 and
Prasanna et al. 2020 all study models 15-30 points above the majority class) says nothing about what
fine-tuning put into the model: disabling a head cannot hurt a constant predictor, and every pruned
subnetwork is as good as the full one. So every fine-tuned model gets a verdict before it is analysed.

- **Trivial predictor**: for a classification task the best constant prediction, i.e. the class that scores
  best when predicted for every dev example (for accuracy: the majority class of dev, 0.684 on MRPC); for a
  regression task (STS-B) a constant prediction, whose Pearson correlation is undefined and counted as 0.
  The class is picked on each bootstrap resample anew, so a model that predicts one class everywhere is never
  fit, whatever the training labels' majority. Choosing the baseline on dev only makes the test harder to
  pass: the verdict is conservative. For a token task, the classic most-frequent-tag tagger
  (:func:`bertology_core.stats.metrics.word_majority_predictor`: each word's most frequent training label, else the
  most frequent label overall), learnt on the training split: a constant tag says little about a tagger (about 0.17
  accuracy on EWT's UPOS), the lexical baseline is what a tagger must beat (about 0.86 there); its interval resamples
  sentences.
- **Difference**: the task's main metric (its declaration's: accuracy for most GLUE tasks, Matthews correlation
  for CoLA, Pearson for STS-B) of the model minus that of the trivial predictor, on the full dev set, with a paired bootstrap
  percentile interval over dev examples (:mod:`bertology_core.stats.bootstrap`: both scored on the same resamples).
- **Verdict**, one of three (``strength``):

  - *unfit* when the interval's lower bound is not above ``margin`` (default 0: the model does not beat the trivial
    predictor beyond what the choice of dev examples explains) or dev holds fewer than ``min_examples`` examples (a
    bootstrap of a handful says nothing). Unfit models are what ``fitness.if_unfit`` acts on.
  - *weak* when it beats the trivial predictor but its lower bound does not clear the *fit margin*: ``weak_share``
    (default 0.25) of the distance from the trivial predictor to the task's ``reference`` score, a published BERT-base
    dev score (config ``fitness.reference_scores``: the transformers text-classification example's bert-base-cased
    dev results, e.g. RTE 65.70, MRPC accuracy 84.07). The papers analyse models 15-30 points above the trivial
    predictor; a model whose gain over it is not surely a quarter of BERT-base's inflates disabling gains and prunable
    shares (a near-constant predictor loses little to any change). The share applies to the interval's lower bound,
    so it must leave room for the interval: a model at BERT-base's own RTE score (65.7 on 277 dev examples) has a
    lower bound about 5 points above the trivial 52.7, clear of a quarter of the 13-point gap (3.3) but not of half
    of it (6.5): half would call BERT-base itself weak. Weak models are analysed, and every claim
    resting on one says so. Without a reference score (a task of one's own that declares none) a model above the
    margin is fit, and the table says that no fit margin applied.
  - *fit* otherwise.

  A margin is in the metric's own units (0.02 = 2 accuracy points).

Models fine-tuned from scratch (random weights) are baselines: their verdict is reported (they are expected to be
unfit), never acted on. The table's ``state`` column names each model's state (:mod:`bertology_core.data.states`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from bertology_core.data import states
from bertology_core.stats.bootstrap import Sentences, metric_on_resamples, percentile_interval, resample_indices
from bertology_core.data.tasks import Task

FIT, UNFIT = "fit", "UNFIT"
STRONG, WEAK, NOT_FIT = "fit", "weak", "unfit"  # the verdict's three levels (``strength``)
# the column every summary table gets: null for rows that rest on no fine-tuned model (the pre-trained encoder)
COLUMN = "fit_for_analysis"
VERDICT_COLUMNS = ("model", "task", "state", "seed", "metric", "score", "trivial_score", "delta", "ci_low", "ci_high",
                   "margin", "fit_margin", "reference_score", "fit", "strength", "trivial_predictor", "given")


@dataclass(frozen=True)
class FitnessSettings:
    """``margin``: the lower bound of the interval must be above it (else unfit); ``weak_share`` and ``reference``:
    the lower bound must clear ``weak_share`` of the distance from the trivial score to the ``reference`` score (else
    weak; no reference: not judged); ``min_examples``: fewer dev examples cannot make a model fit; ``resamples``,
    ``level`` and ``seed``: the paired bootstrap's."""

    margin: float = 0.0
    weak_share: float = 0.25
    reference: float | None = None
    min_examples: int = 20
    resamples: int = 1000
    level: float = 0.95
    seed: int = 0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "FitnessSettings":
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def constant_scores(task: Task, labels: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``[classes, resamples]``: the primary metric of predicting each class for every example, on each
    resample ``indices`` ``[R, n]`` (a regression task has no class: ``[0, R]``)."""
    if task.is_regression:
        return np.zeros((0, indices.shape[0]))
    constants = np.repeat(np.arange(task.num_labels)[:, None], labels.shape[0], axis=1)
    return metric_on_resamples(task.main_metric, constants, labels, indices)


def assess(task: Task, predictions: np.ndarray | Sequence[np.ndarray], labels: np.ndarray | Sequence[np.ndarray],
           settings: FitnessSettings, trivial: Sequence[np.ndarray] | None = None) -> dict[str, Any]:
    """The verdict of one model from its dev ``predictions`` (class ids, or scores for regression) and the dev
    ``labels``: score, trivial score, difference with its interval, ``fit``. For a token task each is a sentence's
    class ids per word, and ``trivial`` the trivial tagger's (learnt on train)."""
    metric = task.main_metric
    sentences = None
    if task.is_token:
        if trivial is None:
            raise ValueError(f"{task.name}: a token task's verdict needs the trivial tagger's predictions")
        sentences = Sentences.of(list(labels), task.label_names)
        lengths = [[len(sentence) for sentence in values] for values in (labels, predictions, trivial)]
        if lengths[1] != lengths[0] or lengths[2] != lengths[0]:
            raise ValueError(f"{task.name}: the predictions, labels and trivial tags differ in their sentences or words")
        trivial = np.concatenate([np.asarray(t) for t in trivial])
        predictions, labels = (np.concatenate([np.asarray(x) for x in values]) for values in (predictions, labels))
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    n = labels.shape[0] if sentences is None else len(sentences)
    indices = resample_indices(n, settings.resamples, settings.seed)
    full = np.arange(n)[None, :]
    score = float(metric_on_resamples(metric, predictions[None, :], labels, full, sentences)[0, 0])
    resampled_score = metric_on_resamples(metric, predictions[None, :], labels, indices, sentences)[0]
    if task.is_token:
        trivial_score = float(metric_on_resamples(metric, trivial[None, :], labels, full, sentences)[0, 0])
        resampled_trivial = metric_on_resamples(metric, trivial[None, :], labels, indices, sentences)[0]
        described = ("each word's most frequent training label (a word not in train: the most frequent label), "
                     "sentences resampled")
    elif task.is_regression:
        trivial_score, resampled_trivial = 0.0, np.zeros_like(resampled_score)
        described = "a constant prediction (its correlation is undefined: counted as 0)"
    else:
        on_dev = constant_scores(task, labels, full)[:, 0]
        trivial_score, best = float(on_dev.max()), int(on_dev.argmax())
        resampled_trivial = constant_scores(task, labels, indices).max(axis=0)
        name = task.label_names[best] if task.label_names else str(best)
        described = f"the best constant prediction on dev (class {best}: {name}), re-chosen on every resample"
    low, high = (float(x) for x in percentile_interval(resampled_score - resampled_trivial, settings.level))
    enough = n >= settings.min_examples
    fit = bool(enough and np.isfinite(low) and low > settings.margin)
    fit_margin = fit_margin_of(trivial_score, settings)
    strength = NOT_FIT if not fit else WEAK if fit_margin is not None and not low > fit_margin else STRONG
    return {
        "metric": metric, "score": score, "trivial_score": trivial_score, "trivial_predictor": described,
        "delta": score - trivial_score, "ci_low": low, "ci_high": high, "examples": int(n), "fit": fit,
        "fit_margin": fit_margin, "strength": strength,
        "reason": _reason(metric, score, trivial_score, low, high, settings, fit, n, fit_margin, strength),
        **{f"settings_{k}": v for k, v in asdict(settings).items()},
    }


def fit_margin_of(trivial_score: float, settings: FitnessSettings) -> float | None:
    """How far above the trivial predictor a model's lower bound must be to be fit rather than weak: ``weak_share`` of
    the distance from the trivial score to the reference score (never below ``margin``); None without a reference."""
    if settings.reference is None:
        return None
    return max(settings.margin, settings.weak_share * (settings.reference - trivial_score))


def _reason(metric: str, score: float, trivial: float, low: float, high: float, settings: FitnessSettings, fit: bool,
            examples: int, fit_margin: float | None = None, strength: str = STRONG) -> str:
    if examples < settings.min_examples:
        return (f"only {examples} dev examples, fewer than fitness.min_examples ({settings.min_examples}): "
                "too few to judge the model, so it is not fit")
    interval = f"{settings.level:.0%} interval of the difference [{low:+.3f}, {high:+.3f}]"
    relation = "above" if fit else "not above"
    reason = (f"{metric} {score:.3f} vs trivial {trivial:.3f}: {interval}; its lower bound is {relation} the margin "
              f"{settings.margin:+.3f}")
    if not fit:
        return reason
    if fit_margin is None:
        return reason + "; no reference score for this task (fitness.reference_scores): no fit margin applied"
    return (reason + f"; {'not ' if strength == WEAK else ''}above the fit margin {fit_margin:+.3f} ({settings.weak_share:.0%} "
            f"of the way from trivial to the reference {settings.reference:.3f}): {strength}")


def verdict_row(model: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the verdict table from a fine-tuned model's ``metrics.json`` record."""
    fitness = record["fitness"]
    return {
        "model": model, "task": record["task"], "state": record["state"], "seed": int(record["seed"]),
        "metric": fitness["metric"], "score": fitness["score"], "trivial_score": fitness["trivial_score"],
        "delta": fitness["delta"], "ci_low": fitness["ci_low"], "ci_high": fitness["ci_high"],
        "margin": fitness["settings_margin"], "fit_margin": fitness.get("fit_margin"),
        "reference_score": fitness.get("settings_reference"), "fit": fitness["fit"],
        # fit, weak or unfit (a record written before weak existed: fit or unfit)
        "strength": fitness.get("strength") or (STRONG if fitness["fit"] else NOT_FIT),
        "trivial_predictor": fitness["trivial_predictor"],
        # the spec of a classifier given in the config (models[].finetuned) in place of fine-tuning it here
        "given": record.get("given"),
    }


def verdict_table(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    schema = {"model": pl.String, "task": pl.String, "state": pl.String, "seed": pl.Int64, "metric": pl.String,
              "score": pl.Float64, "trivial_score": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "margin": pl.Float64, "fit_margin": pl.Float64, "reference_score": pl.Float64,
              "fit": pl.Boolean, "strength": pl.String, "trivial_predictor": pl.String,
              "given": pl.String}
    return pl.DataFrame(list(rows), schema=schema).sort("model", "task", "state", "seed")


def unfit_message(unfit: pl.DataFrame) -> str:
    """What the ``fail`` policy prints: every unfit model, its numbers, and the fixes."""
    lines = [
        f"  {r['model']} {r['task']} seed {r['seed']}: {r['metric']} {r['score']:.3f} vs trivial {r['trivial_score']:.3f}, "
        f"difference {r['delta']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], not above the margin {r['margin']:+.3f}"
        for r in unfit.iter_rows(named=True)
    ]
    return (
        "fitness.if_unfit is 'fail' and these models fine-tuned from the pre-trained encoder are not fit for analysis:\n"
        + "\n".join(lines)
        + "\nFix: fine-tune them better (finetune.hyperparameters / finetune.per_task: more data, epochs, another "
        "learning rate), or set fitness.if_unfit: skip (leave them out of the analyses) or warn (analyse them with a "
        "warning); fitness.margin sets how far above the trivial predictor a model must be."
    )


def seeds_by_task(runs: Iterable[Sequence[Any]]) -> dict[str, list[int]]:
    """``(task, seed)`` pairs -> task -> its seeds, in order (the ``runs`` a :class:`Verdicts` pools)."""
    grouped: dict[str, list[int]] = {}
    for task, seed in runs:
        grouped.setdefault(str(task), []).append(int(seed))
    return grouped


class Verdicts:
    """The verdicts of one model's fine-tuned runs, to label the rows of a summary table.

    ``runs`` maps each task to the fine-tuning seeds (of ``state``, by default finetuned) that the table's
    task-level rows aggregate; a row resting on several seeds is fit only when every one of them is."""

    def __init__(self, table: pl.DataFrame, model: str, runs: Mapping[str, Sequence[int]] | None = None,
                 state: str = states.FINETUNED):
        rows = table.filter((pl.col("model") == model) & (pl.col("state") == state))
        self.fit = {(t, int(s)): bool(f) for t, s, f in rows.select("task", "seed", "fit").iter_rows()}
        weak = rows.filter(pl.col("strength") == WEAK) if "strength" in rows.columns else rows.clear()
        self.weak = {(t, int(s)) for t, s in weak.select("task", "seed").iter_rows()}
        self.runs = {task: [int(s) for s in seeds] for task, seeds in (runs or {}).items()}

    def label(self, task: str, seeds: Sequence[int]) -> str | None:
        """``fit``, ``weak`` (one seed), ``weak: seed 2 (1 of 3)``, ``UNFIT`` (one seed), ``UNFIT: seed 2 (1 of 3)``,
        ``UNFIT: all 3 seeds``; None when no verdict applies (no fine-tuned model of those seeds). Weak models are
        analysed (fit for analysis), but a reader should know: above the trivial predictor, its lower bound less than a quarter of the way to the
        task's reference score."""
        known = [s for s in seeds if (task, s) in self.fit]
        if not known:
            return None
        unfit = [s for s in known if not self.fit[(task, s)]]
        if not unfit:
            weak = [s for s in known if (task, s) in self.weak]
            if not weak:
                return FIT
            if len(known) == 1:
                return WEAK
            return f"{WEAK}: seed{'s' if len(weak) > 1 else ''} {', '.join(map(str, weak))} ({len(weak)} of {len(known)})"
        if len(known) == 1:
            return UNFIT
        if len(unfit) == len(known):
            return f"{UNFIT}: all {len(known)} seeds"
        return f"{UNFIT}: seed{'s' if len(unfit) > 1 else ''} {', '.join(map(str, unfit))} ({len(unfit)} of {len(known)})"

    def annotate(self, frame: pl.DataFrame, *, seed: str | None = None, state: str | None = None) -> pl.DataFrame:
        """``frame`` with the :data:`COLUMN` column. Each row's models are found from, in this order:

        - ``state``: a column naming the model state: ``TASK/finetuned/seedN``, or ``finetuned/seedN`` beside a
          ``task`` column, ``fine-tuned`` (the label) or ``difference`` (all of ``runs[task]``); any other
          value (``pretrained``, ``random_weights``, ``TASK/scratch/seedN``, ``pre-trained``) rests on no model
          fine-tuned from the pre-trained encoder: null;
        - ``seed``: a column of seeds (a null seed: the row pools ``runs[task]``);
        - neither: the row pools ``runs[task]``.
        """
        values = []
        for row in frame.iter_rows(named=True):
            task, seeds = row.get("task"), None
            if state is not None:
                task, seeds = self._parse_state(row[state], task)
            elif seed is not None and row[seed] is not None:
                seeds = [int(row[seed])]
            elif task is not None:
                seeds = self.runs.get(task, [])
            values.append(None if task is None or seeds is None else self.label(task, seeds))
        return frame.with_columns(pl.Series(COLUMN, values, dtype=pl.String))

    def _parse_state(self, value: str | None, task: str | None) -> tuple[str | None, list[int] | None]:
        if value is None:
            return task, None
        if value in (states.label(states.FINETUNED), states.DIFFERENCE):
            return task, self.runs.get(task, []) if task else None
        if states.is_run_name(value):  # MRPC/finetuned/seed1
            named_task, state, seed = states.split_run_name(value)
        elif states.is_seeded(value):  # finetuned/seed1, beside a task column
            (state, seed), named_task = states.split_seeded(value), task
        else:
            return task, None
        if state != states.FINETUNED:  # a model fine-tuned from scratch: no verdict applies
            return task, None
        return named_task, [seed]
