"""Statistics of disabling sweeps: paired bootstrap intervals per seed and across seeds, and selection
without leakage (choose on one half of dev, report on the other).

A configuration's *delta* is its metric minus the intact model's, on the same examples, in points of the
task's main metric (its declaration's: accuracy for most GLUE tasks; Pearson for STS-B). Across seeds the delta is the mean of the
seeds' deltas, and its interval comes from the same example resamples applied to every seed (the seeds
share the dev set), so it reflects the choice of dev examples for the average model. Seed-to-seed
variance is shown by the per-seed rows and enters the verdict:

- ``gain``: every seed's delta is positive and the across-seed interval excludes zero;
- ``loss``: every seed's delta is negative and the interval excludes zero;
- ``none`` otherwise. With one seed, "every seed" is that seed (``seeds`` says how many there were).

These are per-configuration intervals: over the ~L x H configurations of a sweep some will exclude zero
by chance (about 5% at level 0.95), which is why the best head is chosen and reported on different halves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from bertology_core.data.tasks import Task
from bertology_core.stats.bootstrap import PairedDeltas, Sentences, paired_deltas, resample_indices

CONFIG_COLUMNS = ["mode", "config", "kind", "layer", "head"]


def split_halves(labels: np.ndarray, stratify: bool, seed: int) -> np.ndarray:
    """Boolean mask of the *selection* half of the examples (the rest is the *report* half).

    A seeded permutation; with ``stratify`` each class is split in two separately, so both halves
    keep dev's label balance. Odd counts give the extra example to the report half.
    """
    rng = np.random.default_rng(seed)
    selection = np.zeros(len(labels), dtype=bool)
    groups = [np.flatnonzero(labels == value) for value in np.unique(labels)] if stratify else [np.arange(len(labels))]
    for members in groups:
        chosen = rng.permutation(members)[: len(members) // 2]
        selection[chosen] = True
    return selection


def example_halves(task: Task, dev: pl.DataFrame, seed: int) -> np.ndarray:
    """:func:`split_halves` of a dev sample's examples (sorted by idx): stratified by label for a classification task;
    not for a regression task, nor for a token task (a sentence holds many labels)."""
    return split_halves(dev["label"].to_numpy(), stratify=task.stratifies, seed=seed)


@dataclass(frozen=True)
class SweepArrays:
    """One mode's sweep of every seed as arrays aligned by example (dev ``idx`` order); a token task's by word (``idx``,
    then the word's position), ``sentences`` grouping the words of each example."""

    configs: pl.DataFrame  # CONFIG_COLUMNS, one row per configuration, intact first
    seeds: list[int]
    idx: np.ndarray  # [n]: each unit's example
    labels: np.ndarray  # [n]
    predictions: np.ndarray  # [seeds, configs, n]
    intact: np.ndarray  # [seeds, configs, n]: the intact model's predictions in each configuration's own forward pass
    sentences: Sentences | None = None  # a token task's: its units are words

    def examples(self, units: np.ndarray) -> int:
        """How many examples a unit mask holds (a token task's: sentences)."""
        return int(units.sum()) if self.sentences is None else len(self.sentences.subset(units))

    def halves(self, task: Task, seed: int) -> np.ndarray:
        """The selection half of the units (:func:`example_halves`, a token task's whole sentences)."""
        if self.sentences is None:
            return split_halves(self.labels, stratify=task.stratifies, seed=seed)
        return self.sentences.expand(split_halves(np.zeros(len(self.sentences)), stratify=False, seed=seed))

    @classmethod
    def from_frame(cls, sweeps: pl.DataFrame, label_names: tuple[str, ...] | None = None) -> "SweepArrays":
        """``sweeps``: the sweep Parquets of one mode with a ``seed`` column; ``label_names``: the task's (a token task's
        spans are read from them)."""
        if sweeps["mode"].n_unique() != 1:
            raise ValueError("SweepArrays holds one mode; filter the sweeps by mode first")
        configs = (
            sweeps.select(CONFIG_COLUMNS).unique()
            .with_columns((pl.col("kind") != "intact").alias("_not_intact"))
            .sort("_not_intact", "kind", "layer", "head", nulls_last=True).drop("_not_intact")
        )
        seeds = sorted(sweeps["seed"].unique().to_list())
        keys = ["idx", "word"] if "word" in sweeps.columns else ["idx"]
        units = sweeps.filter((pl.col("seed") == seeds[0]) & (pl.col("kind") == "intact")).sort(keys)
        arrays = {column: [by_configuration(sweeps.filter(pl.col("seed") == seed), configs, units.select(keys), column)
                           for seed in seeds] for column in ("prediction", "intact_prediction")}
        idx = units["idx"].to_numpy()
        sentences = Sentences.of_runs(idx, label_names) if "word" in keys else None
        return cls(configs, seeds, idx, units["label"].to_numpy(), np.stack(arrays["prediction"]),
                   np.stack(arrays["intact_prediction"]), sentences)


def by_configuration(frame: pl.DataFrame, configs: pl.DataFrame, units: pl.DataFrame, column: str) -> np.ndarray:
    """``column`` of a per-example (a token task's: per-word) predictions frame as ``[configs, units]``: the rows in
    ``configs``' order, the columns in ``units``' (its key columns: idx, and word); every (configuration, unit) must be
    there, once."""
    keys = units.columns
    ordered = frame.join(configs.select("config").with_row_index("_config"), on="config", how="inner").sort("_config", *keys)
    expected = pl.concat([units] * configs.height)
    if ordered.height != expected.height or not ordered.select(keys).equals(expected) or ordered[column].null_count():
        raise ValueError(f"the predictions lack some (configuration, example) values of {column}, or repeat some: every "
                         "seed's predictions must cover the same dev examples")
    return ordered[column].to_numpy().reshape(configs.height, units.height)


def pooled_over_seeds(per_seed: list[PairedDeltas]) -> PairedDeltas:
    """The across-seed delta: the mean of the seeds' deltas, on the same example resamples (the seeds share dev)."""
    return PairedDeltas(np.mean([d.delta for d in per_seed], axis=0), np.mean([d.resampled for d in per_seed], axis=0))


def seed_verdicts(deltas: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The verdict rule (module docstring) from every seed's deltas ``[seeds, C]`` and the across-seed interval."""
    seeds = deltas.shape[0]
    positive, negative = (deltas > 0).sum(0), (deltas < 0).sum(0)
    # a bound of exactly zero, computed as a mean over seeds, can come out as +-1e-17: not above zero
    tolerance = 1e-9
    return np.where((positive == seeds) & (low > tolerance), "gain",
                    np.where((negative == seeds) & (high < -tolerance), "loss", "none"))


def deltas_table(arrays: SweepArrays, metric: str, resamples: int, level: float, seed: int, examples: np.ndarray | None = None) -> pl.DataFrame:
    """Per configuration: each seed's score, delta and interval (``seed`` set) and the across-seed
    row (``seed`` null) with the verdict; on all examples or on the ``examples`` mask."""
    mask = np.ones(arrays.idx.shape[0], bool) if examples is None else examples
    labels = arrays.labels[mask]
    sentences = arrays.sentences.subset(mask) if arrays.sentences is not None else None
    indices = resample_indices(arrays.examples(mask), resamples, seed)
    rows = []
    per_seed = []
    for position, seed_value in enumerate(arrays.seeds):
        predictions = arrays.predictions[position][:, mask]  # [C, n]; row 0 is intact
        deltas = paired_deltas(metric, predictions, arrays.intact[position][:, mask], labels, indices, sentences)
        low, high = deltas.interval(level)
        per_seed.append(deltas)
        rows.append(arrays.configs.with_columns(
            pl.lit(seed_value, dtype=pl.Int64).alias("seed"),
            pl.Series("delta", deltas.delta), pl.Series("ci_low", low), pl.Series("ci_high", high),
        ))
    across = pooled_over_seeds(per_seed)
    mean_delta = across.delta
    low, high = across.interval(level)
    stacked = np.stack([d.delta for d in per_seed])
    positive, negative = (stacked > 0).sum(0), (stacked < 0).sum(0)
    seeds = len(arrays.seeds)
    verdict = seed_verdicts(stacked, low, high)
    pooled = arrays.configs.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("seed"),
        pl.Series("delta", mean_delta), pl.Series("ci_low", low), pl.Series("ci_high", high),
    )
    table = pl.concat(rows + [pooled])
    summary = arrays.configs.with_columns(
        pl.Series("seeds", [seeds] * arrays.configs.height, dtype=pl.Int64),
        pl.Series("seeds_positive", positive, dtype=pl.Int64),
        pl.Series("seeds_negative", negative, dtype=pl.Int64),
        pl.Series("delta_std_over_seeds", stacked.std(0, ddof=1) if seeds > 1 else np.full(stacked.shape[1], np.nan)),
        pl.Series("verdict", verdict),
    )
    return table.join(summary, on=CONFIG_COLUMNS, how="left", nulls_equal=True).with_columns(
        pl.lit(metric).alias("metric"), pl.lit(arrays.examples(mask)).alias("examples")
    )


def selection_table(arrays: SweepArrays, selection: np.ndarray, metric: str, resamples: int, level: float, seed: int) -> pl.DataFrame:
    """The best configuration of each kind (head, layer) chosen on the selection half, reported on the
    other half: per seed, and across seeds (chosen by the mean selection-half delta)."""
    choose = deltas_table(arrays, metric, resamples, level, seed, selection)
    report = deltas_table(arrays, metric, resamples, level, seed, ~selection)
    rows = []
    for kind in ("head", "layer"):
        candidates = choose.filter(pl.col("kind") == kind)
        if candidates.is_empty():
            continue
        for seed_value in [*arrays.seeds, None]:
            pool = candidates.filter(pl.col("seed").is_null() if seed_value is None else pl.col("seed") == seed_value)
            best = pool.sort(["delta", "layer", "head"], descending=[True, False, False], nulls_last=True).row(0, named=True)
            reported = report.filter(
                (pl.col("config") == best["config"])
                & (pl.col("seed").is_null() if seed_value is None else pl.col("seed") == seed_value)
            ).row(0, named=True)
            rows.append({
                "mode": best["mode"], "kind": kind, "seed": seed_value, "config": best["config"],
                "layer": best["layer"], "head": best["head"],
                "selection_delta": best["delta"], "report_delta": reported["delta"],
                "report_ci_low": reported["ci_low"], "report_ci_high": reported["ci_high"],
                "selection_examples": arrays.examples(selection), "report_examples": arrays.examples(~selection),
            })
    return pl.DataFrame(rows, schema_overrides={"seed": pl.Int64, "layer": pl.Int16, "head": pl.Int16})


def extremes(pooled: pl.DataFrame, count: int, columns: list[str]) -> pl.DataFrame:
    """The ``count`` best and worst configurations of each kind (head, layer) per task and mode, by their
    across-seed delta (``pooled``: the rows of :func:`deltas_table` with no seed); ties keep the table's (layer, head)
    order, so the choice is deterministic. ``columns``: what to keep after ``task, mode, kind, end``."""
    ranked = pooled.filter(pl.col("kind").is_in(["head", "layer"])).with_columns(
        pl.col("delta").rank("ordinal", descending=True).over("task", "mode", "kind").alias("rank_best"),
        pl.col("delta").rank("ordinal").over("task", "mode", "kind").alias("rank_worst"),
    )
    return pl.concat([
        ranked.filter(pl.col("rank_best") <= count).with_columns(pl.lit("best").alias("end")),
        ranked.filter(pl.col("rank_worst") <= count).with_columns(pl.lit("worst").alias("end")),
    ]).select(["task", "mode", "kind", "end", *columns]).sort(
        "task", "mode", "kind", "end", "delta", "layer", "head", descending=[False, False, False, False, True, False, False],
        nulls_last=True)
