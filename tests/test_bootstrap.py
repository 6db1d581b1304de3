"""Paired bootstrap: metrics on resamples match the GLUE metrics, a hand computation, and the binomial law."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import scipy.stats

from bertology_core.data import tasks
from bertology_core.disabling import stats
from bertology_core.stats import bootstrap
from bertology_core.stats.metrics import compute_metrics


def test_resampled_metrics_equal_the_glue_metrics_on_each_resample():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 60)
    predictions = rng.integers(0, 2, (3, 60))
    scores = rng.normal(size=(2, 60))
    targets = rng.uniform(0, 5, 60)
    indices = bootstrap.resample_indices(60, 25, seed=1)
    for name, task in (("MRPC", tasks.glue_task("MRPC")), ("CoLA", tasks.glue_task("CoLA")), ("STS-B", tasks.glue_task("STS-B"))):
        values, truth = (scores, targets) if task.is_regression else (predictions, labels)
        for metric in task.metrics:
            ours = bootstrap.metric_on_resamples(metric, values, truth, indices)
            for row in range(values.shape[0]):
                for r in range(indices.shape[0]):
                    expected = compute_metrics(task, values[row, indices[r]], truth[indices[r]])[metric]
                    assert ours[row, r] == pytest.approx(expected, abs=1e-9), (name, metric)


def test_paired_deltas_match_a_hand_computation():
    labels = np.array([1, 0, 1, 1])
    reference = np.array([1, 1, 1, 0])  # right on examples 0 and 2
    config = np.array([1, 0, 0, 1])  # right on 0, 1, 3
    indices = np.array([[0, 0, 1, 2], [3, 3, 3, 3], [1, 2, 2, 2]])
    deltas = bootstrap.paired_deltas("accuracy", config[None], reference, labels, indices)
    # full sample: 3/4 - 2/4; resample 1: (1+1+1+0)/4 - (1+1+0+1)/4 = 0; resample 2: 1 - 0; resample 3: 1/4 - 3/4
    assert deltas.delta.tolist() == [0.25]
    assert deltas.resampled.tolist() == [[0.0, 1.0, -0.5]]
    low, high = deltas.interval(0.5)  # 25th and 75th percentiles of (-0.5, 0, 1), linear interpolation
    assert low.tolist() == [-0.25] and high.tolist() == [0.5]


def test_interval_of_a_constructed_case_matches_the_binomial_law():
    # the configuration fixes k of n examples the reference gets wrong and changes nothing else, so the
    # resampled accuracy delta is Binomial(n, k/n) / n: its percentiles are known in closed form
    n, k, resamples = 200, 30, 20000
    labels = np.ones(n, dtype=int)
    reference = np.ones(n, dtype=int)
    reference[:k] = 0
    config = np.ones(n, dtype=int)
    deltas = bootstrap.paired_deltas("accuracy", config[None], reference, labels, bootstrap.resample_indices(n, resamples, 7))
    low, high = deltas.interval(0.95)
    assert deltas.delta[0] == pytest.approx(k / n)
    assert low[0] == pytest.approx(scipy.stats.binom.ppf(0.025, n, k / n) / n, abs=1.5 / n)
    assert high[0] == pytest.approx(scipy.stats.binom.ppf(0.975, n, k / n) / n, abs=1.5 / n)


def _sweep(seed_effects: dict[int, list[int]], n: int = 40) -> pl.DataFrame:
    """A two-configuration sweep (intact, L1H1) per seed: ``seed_effects[seed]`` lists the examples the
    head's disabling fixes (positive) or breaks (negative index - 1); the intact model gets half right."""
    labels = np.array([0, 1] * (n // 2))
    frames = []
    for seed, effects in seed_effects.items():
        intact = labels.copy()
        intact[: n // 2] = 1 - intact[: n // 2]
        head = intact.copy()
        for effect in effects:
            example = effect if effect >= 0 else -effect - 1
            head[example] = labels[example] if effect >= 0 else 1 - labels[example]
        for name, kind, layer, hd, predictions in (("intact", "intact", None, None, intact), ("L1H1", "head", 0, 0, head)):
            frames.append(pl.DataFrame({
                "mode": "uniform", "config": name, "kind": kind, "layer": pl.Series([layer] * n, dtype=pl.Int16),
                "head": pl.Series([hd] * n, dtype=pl.Int16), "idx": np.arange(n), "label": labels,
                "prediction": predictions, "intact_prediction": intact, "seed": seed,
            }))
    return pl.concat(frames)


def test_a_gain_needs_every_seed_and_an_interval_above_zero():
    fixes = list(range(12))  # 12 of 40 examples fixed: a clear gain
    consistent = stats.SweepArrays.from_frame(_sweep({1: fixes, 2: fixes, 3: fixes}))
    table = stats.deltas_table(consistent, "accuracy", 500, 0.95, 0)
    head = table.filter((pl.col("config") == "L1H1") & pl.col("seed").is_null()).row(0, named=True)
    assert head["delta"] == pytest.approx(0.3) and head["ci_low"] > 0 and head["verdict"] == "gain"
    assert head["seeds"] == 3 and head["seeds_positive"] == 3
    # the same mean gain, but one seed's disabling hurts: not a gain
    mixed = stats.SweepArrays.from_frame(_sweep({1: fixes + list(range(12, 18)), 2: fixes + list(range(12, 18)), 3: [-21, -22, -23]}))
    row = stats.deltas_table(mixed, "accuracy", 500, 0.95, 0).filter(
        (pl.col("config") == "L1H1") & pl.col("seed").is_null()).row(0, named=True)
    assert row["delta"] > 0 and row["seeds_positive"] == 2 and row["verdict"] == "none"


def test_selection_is_made_on_one_half_and_reported_on_the_other():
    n = 40
    labels = np.array([0, 1] * (n // 2))
    selection = np.zeros(n, dtype=bool)
    selection[:20] = True
    # the head fixes 6 selection-half examples and breaks 6 report-half ones
    sweep = _sweep({1: [0, 2, 4, 6, 8, 10, -31, -33, -35, -37, -39, -40]}, n)
    arrays = stats.SweepArrays.from_frame(sweep)
    assert np.array_equal(arrays.labels, labels)
    table = stats.selection_table(arrays, selection, "accuracy", 500, 0.95, 0)
    row = table.filter(pl.col("seed") == 1).row(0, named=True)
    assert row["config"] == "L1H1" and row["selection_delta"] == pytest.approx(6 / 20)
    assert row["report_delta"] == pytest.approx(-6 / 20) and row["report_ci_high"] < 0


def test_percentile_interval_of_nothing_is_empty_or_nan_not_an_error():
    low, high = bootstrap.percentile_interval(np.empty((0, 50)), 0.95)  # no configurations (greedy took no step)
    assert low.shape == high.shape == (0,)
    low, high = bootstrap.percentile_interval(np.empty((3, 0)), 0.95)  # no resamples
    assert np.isnan(low).all() and np.isnan(high).all() and low.shape == (3,)
    low, high = bootstrap.percentile_interval(np.array([[np.nan, np.nan], [1.0, 3.0]]), 0.5)
    assert np.isnan(low[0]) and low[1] == 1.5 and high[1] == 2.5


def test_percentile_interval_of_one_statistic_is_two_floats_and_min_share_asks_for_defined_draws():
    draws = np.array([1.0, 2.0, 3.0, np.nan])
    low, high = bootstrap.percentile_interval(draws, 0.5)  # NaN draws left out: the quartiles of (1, 2, 3)
    assert type(low) is float and (low, high) == (1.5, 2.5)
    assert np.isnan(bootstrap.percentile_interval(draws, 0.5, min_share=bootstrap.DEFINED_SHARE)).all()  # 1 of 4 undefined
    assert bootstrap.percentile_interval(draws, 0.5, min_share=0.75) == (1.5, 2.5)  # 3 of 4 defined is enough
    low, high = bootstrap.percentile_interval(np.array([draws, [1.0, 2.0, 3.0, 4.0]]), 0.5, min_share=0.75 + 1e-9)
    assert np.isnan(low[0]) and np.isnan(high[0]) and (low[1], high[1]) == (1.75, 3.25)


@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("metric", ["f1_macro", "matthews_correlation"])
def test_multiclass_metrics_on_resamples_match_sklearn(metric, classes):
    from sklearn.metrics import f1_score, matthews_corrcoef

    score = {"f1_macro": lambda y, p: f1_score(y, p, average="macro", zero_division=0.0),
             "matthews_correlation": matthews_corrcoef}[metric]
    rng = np.random.default_rng(classes)
    labels = rng.integers(0, classes, 120)
    predictions = np.stack([rng.integers(0, classes, 120), np.where(rng.random(120) < 0.7, labels, 0), np.zeros(120, int)])
    indices = bootstrap.resample_indices(120, 30, seed=1)
    want = np.array([[score(labels[i], row[i]) for i in indices] for row in predictions])
    np.testing.assert_allclose(bootstrap.metric_on_resamples(metric, predictions, labels, indices), want, atol=1e-12)


@pytest.mark.parametrize("metric", ["accuracy", "f1_macro", "matthews_correlation"])
def test_no_configuration_to_score_gives_empty_deltas_for_multiclass_metrics(metric):
    """A greedy search where no head helps has no step to report: its deltas on a three-class task are empty, not an
    error (np.max of no predictions)."""
    labels = np.array([0, 1, 2, 2, 1, 0, 2])
    deltas = bootstrap.paired_deltas(metric, np.empty((0, 7), dtype=int), np.empty((0, 7), dtype=int), labels,
                                     bootstrap.resample_indices(7, 50, 0))
    low, high = deltas.interval(0.95)
    assert deltas.delta.shape == low.shape == high.shape == (0,)
