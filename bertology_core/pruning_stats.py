"""Statistics of pruning runs that need only numpy: the prunable share of a pruning curve, survival of
elements across seeds, Fleiss' kappa of masks across seeds and the seeds without a lottery ticket (tables
jobs import this, not torch)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl


def prunable_share(shares: Sequence[float], scores: Sequence[float], tolerance: float = 0.01) -> float:
    """The largest share pruned, walking a pruning curve from the full model (``shares[0] == 0``), before
    the score first drops more than ``tolerance`` (relative) below the full model's (Michel et al.:
    "within 1%")."""
    full = scores[0]
    best = 0.0
    for share, score in zip(shares[1:], scores[1:]):
        if not score >= full - tolerance * abs(full):
            break
        best = share
    return float(best)


def survival(masks: np.ndarray) -> np.ndarray:
    """Share of seeds in which each element survives: ``masks`` ``[seeds, ...]`` -> ``[...]``."""
    return np.asarray(masks, dtype=float).mean(0)


def fleiss_kappa(masks: np.ndarray) -> float:
    """Fleiss' kappa of binary masks ``[raters (seeds), subjects (elements)]``: agreement on which elements
    survive beyond what the survival rate alone would give (Fleiss 1971; Prasanna et al. 2020 use it for
    masks across seeds). NaN with one rater, or when every mask keeps (or drops) everything.

    Computed in closed form from how many subjects have each kept-count, so it costs nothing for millions
    of weights; the tests check it against statsmodels' ``fleiss_kappa``."""
    masks = np.asarray(masks, dtype=bool).reshape(len(masks), -1)
    raters = masks.shape[0]
    if raters < 2:
        return float("nan")
    return float(_kappa_from_histogram(_kept_histogram(masks), raters))


def _kept_histogram(masks: np.ndarray) -> np.ndarray:
    """How many subjects are kept by exactly k raters, k = 0..raters."""
    return np.bincount(masks.sum(0), minlength=masks.shape[0] + 1).astype(float)


def _kappa_from_histogram(subjects_with: np.ndarray, raters: int) -> np.ndarray:
    """Fleiss' kappa from kept-count histograms ``[..., raters + 1]`` (NaN where chance agreement is 1)."""
    subjects = subjects_with.sum(-1)
    k = np.arange(raters + 1, dtype=float)
    p_kept = (subjects_with * k).sum(-1) / (subjects * raters)
    chance = p_kept**2 + (1 - p_kept) ** 2
    # per-subject agreement P_i = (sum_j n_ij^2 - n) / (n (n - 1)), averaged over subjects
    agreement = (subjects_with * (k**2 + (raters - k) ** 2 - raters)).sum(-1) / (subjects * raters * (raters - 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(chance < 1.0, (agreement - chance) / (1 - chance), np.nan)


def fleiss_kappa_interval(masks: np.ndarray, resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`fleiss_kappa` over the subjects (elements resampled with
    replacement; the raters, i.e. seeds, are fixed). A resample of subjects only changes how many subjects
    have each kept-count, so it is a multinomial draw from that histogram: millions of weights cost nothing."""
    masks = np.asarray(masks, dtype=bool).reshape(len(masks), -1)
    raters = masks.shape[0]
    if raters < 2:
        return float("nan"), float("nan")
    histogram = _kept_histogram(masks)
    draws = np.random.default_rng(seed).multinomial(int(histogram.sum()), histogram / histogram.sum(), size=resamples)
    kappas = _kappa_from_histogram(draws.astype(float), raters)
    tail = 100 * (1 - level) / 2
    if np.isnan(kappas).all():
        return float("nan"), float("nan")
    low, high = np.nanpercentile(kappas, [tail, 100 - tail])
    return float(low), float(high)


def drop_seeds_without_ticket(subnetworks: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[str, str, int]]]:
    """Leave out the good, random and bad networks of each (task, method, seed) whose pruning removed
    nothing (``kept_share`` 1): with no ticket all three are the full model, which would pull the rows of
    Prasanna et al.'s table 2 together. ``subnetworks`` has one row per network (``task, method, kind, seed,
    kept_share``; kind ``full`` rows are kept). Returns the kept rows and the (task, method, seed) left out."""
    untouched = subnetworks.filter((pl.col("kind") != "full") & (pl.col("kept_share") >= 1.0)).select("task", "method", "seed").unique()
    left_out = sorted(untouched.iter_rows())
    return subnetworks.join(untouched, on=["task", "method", "seed"], how="anti"), left_out
