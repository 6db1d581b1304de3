"""Statistics of pruning runs that need only numpy: the prunable share of a pruning curve, survival of
elements across seeds, Fleiss' kappa of masks across seeds, the seeds without a lottery ticket and the
lottery table of both protocols (tables jobs import this, not torch)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from bertology_core.disabling.stats import split_halves
from bertology_core.stats.bootstrap import percentile_interval

# How a lottery ticket is chosen and reported (bertology_core.pruning.lottery.protocol_examples); the labels are
# the tables' ``protocol`` column. held_out is the reference the other protocol is compared with.
PROTOCOLS: dict[str, str] = {
    "held_out": "selected on half A, reported on half B",
    "paper": "paper: selected and reported on all of dev",
}
# the examples each protocol's numbers are reported on (a set of :func:`report_sets`)
PROTOCOL_REPORT_SET = {"held_out": "half_b", "paper": "dev"}
KIND_ORDER = {"full": 0, "good": 1, "random": 2, "bad": 3}


def report_sets(dev: pl.DataFrame, stratify: bool, split_seed: int) -> dict[str, np.ndarray]:
    """The dev ``idx`` of every set a network is scored on: ``half_a`` (the held-out protocol chooses on it),
    ``half_b`` (it reports on it) and ``dev``; the halves are
    :func:`bertology_core.disabling.stats.split_halves` of ``dev``'s labels in its row order, as
    :func:`bertology_core.pruning.lottery.protocol_examples` draws them."""
    half_a = split_halves(dev["label"].to_numpy(), stratify, split_seed)
    idx = dev["idx"].to_numpy()
    return {"half_a": idx[half_a], "half_b": idx[~half_a], "dev": idx}


def scores_on_sets(predictions: pl.DataFrame, sets: dict[str, np.ndarray], score) -> dict[str, float]:
    """``score(predictions, labels)`` of a network's per-example dev ``predictions`` (``idx, label,
    prediction``) on each of ``sets`` (name -> dev idx); an idx missing from the predictions is an error."""
    out = {}
    for name, idx in sets.items():
        rows = predictions.filter(pl.col("idx").is_in(idx.tolist()))
        if rows.height != len(idx):
            raise ValueError(f"the predictions hold {rows.height} of the {len(idx)} dev examples of {name}: rerun the network")
        out[name] = float(score(rows["prediction"].to_numpy(), rows["label"].to_numpy()))
    return out


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


def fleiss_kappa_ceiling(masks: np.ndarray) -> float:
    """The largest Fleiss' kappa masks of these sizes could reach: every rater keeps as many subjects as its own mask,
    all from one order of the subjects (nested masks, the most two masks of different sizes can agree). Masks that
    stop at different sizes cannot agree perfectly; where this ceiling is low, a low kappa says little about which
    elements the seeds choose."""
    masks = np.asarray(masks, dtype=bool).reshape(len(masks), -1)
    if len(masks) < 2:
        return float("nan")
    kept = masks.sum(1)
    nested = np.arange(masks.shape[1])[None, :] < kept[:, None]
    return fleiss_kappa(nested)


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
    return percentile_interval(kappas, level)


def drop_seeds_without_ticket(subnetworks: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[str, str, int, str]]]:
    """Leave out the good, random and bad networks of each (task, method, seed, protocol) whose pruning removed
    nothing (``kept_share`` 1): with no ticket all three are the full model, which would pull the rows of
    Prasanna et al.'s table 2 together. ``subnetworks`` has one row per network (``task, method, kind, seed,
    protocol, kept_share``; kind ``full`` rows are kept). Returns the kept rows and the (task, method, seed,
    protocol) left out."""
    keys = ["task", "method", "seed", "protocol"]
    untouched = subnetworks.filter((pl.col("kind") != "full") & (pl.col("kept_share") >= 1.0)).select(keys).unique()
    left_out = sorted(untouched.iter_rows())
    return subnetworks.join(untouched, on=keys, how="anti"), left_out


def lottery_tables(subnetworks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Prasanna et al.'s full / good / random / bad comparison under every protocol, per seed and over seeds.

    ``subnetworks``: one row per (task, seed, method, kind, protocol) with ``metric``, ``score`` (on the
    protocol's report examples), ``half_a``, ``half_b``, ``dev`` (the same network on each set of
    :func:`report_sets`), ``kept_share`` and ``examples`` (the report examples); ``protocol`` a key of
    :data:`PROTOCOLS`. Differences to the held-out protocol's row of the same task, seed, method and kind (0 on
    held-out rows; null where it is missing):

    - ``minus_held_out``: the two protocols' reported numbers, as a reader of each would compare them; it mixes
      the report sets (dev against half B), the tickets and separate re-fine-tuning runs;
    - ``half_b_minus_held_out``: both networks on half B, the examples the held-out ticket never saw: the rows
      differ only in the ticket (and its re-fine-tuning run); 0 for the full model.

    Returns (per seed, over seeds: mean, std, seeds, seed list, kept share, report examples, the means of the
    three sets and of both differences, with the std of ``minus_held_out``); ``protocol`` holds the labels.
    """
    keys = ["task", "method", "kind", "seed"]
    reference = subnetworks.filter(pl.col("protocol") == "held_out").select(
        *keys, pl.col("score").alias("_held_out"), pl.col("half_b").alias("_held_out_half_b"))
    per_seed = (
        subnetworks.join(reference, on=keys, how="left")
        .with_columns((pl.col("score") - pl.col("_held_out")).alias("minus_held_out"),
                      (pl.col("half_b") - pl.col("_held_out_half_b")).alias("half_b_minus_held_out"))
        .drop("_held_out", "_held_out_half_b")
        .with_columns(
            pl.col("kind").replace_strict(KIND_ORDER, return_dtype=pl.Int8).alias("_kind"),
            pl.col("protocol").replace_strict({p: i for i, p in enumerate(PROTOCOLS)}, return_dtype=pl.Int8).alias("_protocol"),
        )
    )
    over_seeds = (
        per_seed.group_by("task", "method", "kind", "protocol", "metric", "_kind", "_protocol").agg(
            pl.col("score").mean().alias("mean"), pl.col("score").std().alias("std"), pl.len().alias("seeds"),
            pl.col("seed").sort().alias("seed_list"), pl.col("kept_share").mean().alias("kept_share"),
            pl.col("examples").max().alias("report_examples"),  # the seeds share dev and its halves
            *[pl.col(name).mean().alias(f"{name}_mean") for name in ("half_a", "half_b", "dev")],
            pl.col("minus_held_out").mean().alias("minus_held_out_mean"), pl.col("minus_held_out").std().alias("minus_held_out_std"),
            pl.col("half_b_minus_held_out").mean().alias("half_b_minus_held_out_mean"),
        )
        .sort("task", "method", "_kind", "_protocol")
        .drop("_kind", "_protocol")
    )
    per_seed = per_seed.sort("task", "method", "_kind", "seed", "_protocol").drop("_kind", "_protocol")
    label = pl.col("protocol").replace_strict(PROTOCOLS, return_dtype=pl.String)
    return per_seed.with_columns(label), over_seeds.with_columns(label)
