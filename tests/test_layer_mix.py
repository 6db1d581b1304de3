"""Tenney et al.'s scalar mix and cumulative scoring: the formulas, and a synthetic case whose answer is known."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bertology_core import layer_mix, layer_mix_stats
from bertology_core.probing import ProbeSettings

SETTINGS = ProbeSettings(max_epochs=50, patience=3, validation_share=0.1, batch_size=256, learning_rate=0.01,
                         weight_decay=1e-4, seed=0)


def test_expected_layer_and_center_of_gravity_formulas():
    # Delta = [0.25, 0, 0.5, 0] over layers 1..4: (1 * 0.25 + 3 * 0.5) / 0.75
    assert layer_mix_stats.expected_layer(np.array([0.25, 0.5, 0.5, 1.0, 1.0])) == pytest.approx(7 / 3)
    assert layer_mix_stats.center_of_gravity(np.array([0.0, 0.5, 0.0, 0.5])) == pytest.approx(2.0)
    assert layer_mix_stats.center_of_gravity(np.array([1.0, 0.0, 0.0])) == 0.0
    # nothing added beyond the embeddings, or less than nothing: undefined
    assert np.isnan(layer_mix_stats.expected_layer(np.array([0.6, 0.6, 0.6])))
    assert np.isnan(layer_mix_stats.expected_layer(np.array([0.6, 0.5, 0.55])))
    batch = layer_mix_stats.expected_layer(np.array([[0.25, 0.5, 0.5, 1.0, 1.0], [0.2, 0.2, 0.2, 0.2, 0.6]]))
    np.testing.assert_allclose(batch, [7 / 3, 4.0])


def residual_stream(n: int, seed: int = 0):
    """Five layers of a residual stream (each layer adds to the one below): the first bit of a 4-class label enters at
    layer 1, the second at layer 3. Cumulative accuracy: ~1/4 at layer 0, ~1/2 at 1-2, ~1 from 3 on; the expected
    layer is (1 x 1/4 + 3 x 1/2) / (3/4) = 7/3."""
    rng = np.random.default_rng(seed)
    first, second = rng.integers(0, 2, n), rng.integers(0, 2, n)
    x = np.empty((5, n, 8), np.float32)
    x[0] = rng.normal(size=(n, 8))
    for layer in range(1, 5):
        x[layer] = x[layer - 1] + 0.3 * rng.normal(size=(n, 8))
        if layer == 1:
            x[layer, :, 0] += 3 * (2 * first - 1)
        if layer == 3:
            x[layer, :, 1] += 3 * (2 * second - 1)
    return x, first * 2 + second, np.arange(n) // 10


def test_cumulative_scoring_recovers_where_information_enters():
    x, y, sentences = residual_stream(3000)
    probes = layer_mix.fit_cumulative_probes(x[:, :2000], y[:2000], 4, SETTINGS, sentences[:2000])
    # probe k mixes layers 0..k only
    assert np.all(np.triu(probes.mix.numpy(), k=1) == 0)
    np.testing.assert_allclose(probes.mix.numpy().sum(axis=1), 1.0, atol=1e-6)
    scores = layer_mix.cumulative_correct(probes, x[:, 2000:], y[2000:]).mean(axis=1)
    assert scores[0] < 0.35 and 0.4 < scores[1] < 0.6 and 0.4 < scores[2] < 0.6 and scores[3] > 0.9
    assert layer_mix_stats.expected_layer(scores) == pytest.approx(7 / 3, abs=0.2)
    # the full mix leans on the layers that hold the label (1 and 3 and what carries them up), not on the embeddings
    assert probes.mix[-1, 0] < 0.05


def test_mix_tables_and_the_paired_difference():
    x, y, sentences = residual_stream(3000)
    probes = layer_mix.fit_cumulative_probes(x[:, :2000], y[:2000], 4, SETTINGS, sentences[:2000])
    correct = layer_mix.cumulative_correct(probes, x[:, 2000:], y[2000:])
    cumulative, summary = layer_mix.layer_mix_tables("toy", probes, correct, sentences[2000:], 200, 0.95, 0)
    assert cumulative["layer"].to_list() == [0, 1, 2, 3, 4] and np.isnan(cumulative["delta"][0])
    row = summary.row(0, named=True)
    assert row["layers"] == 4 and row["ci_low"] <= row["expected_layer"] <= row["ci_high"]
    assert row["expected_layer_share"] == pytest.approx(row["expected_layer"] / 4)
    # a second label set that is only the first bit: its information enters at layer 1
    first_only = layer_mix.fit_cumulative_probes(x[:, :2000], y[:2000] // 2, 2, SETTINGS, sentences[:2000])
    words = pl.concat([
        pl.DataFrame({"labels": name, "layer": np.repeat(np.arange(5), 1000).astype(np.int16),
                      "sentence": np.tile(sentences[2000:], 5).astype(np.int32), "correct": c.reshape(-1)})
        for name, c in (("both", correct), ("first", layer_mix.cumulative_correct(first_only, x[:, 2000:], y[2000:] // 2)))])
    point, draws = layer_mix_stats.expected_layer_difference(words, lower="first", higher="both", resamples=200, seed=0)
    assert point > 0.8 and np.quantile(draws, 0.025) > 0
    # layers that add (almost) nothing: two more dev words right at the top than in the embeddings is a positive
    # total gain, so the formula gives a number (8.5 of 4 layers), but resampling sentences flips its sign: no expected layer
    rng = np.random.default_rng(1)
    flat = np.repeat(rng.random(1000)[None, :] < 0.5, 5, axis=0)
    flat[1:4, np.flatnonzero(flat[0])[:3]] = False  # Delta_1 = -0.003
    flat[4, np.flatnonzero(~flat[0])[:2]] = True  # Delta_4 = +0.005
    assert layer_mix_stats.expected_layer(flat.mean(axis=1)) == pytest.approx(8.5)  # beyond the last layer
    _, flat_summary = layer_mix.layer_mix_tables("flat", probes, flat, sentences[2000:], 200, 0.95, 0)
    flat_row = flat_summary.row(0, named=True)
    assert np.isnan(flat_row["expected_layer"]) and np.isnan(flat_row["ci_low"]) and np.isnan(flat_row["expected_layer_share"])
    with pytest.raises(ValueError, match="no cumulative probes for label set 'upos'"):
        layer_mix_stats.expected_layer_difference(words, lower="upos", higher="both", resamples=10, seed=0)


def test_mean_expected_layers_skip_states_without_one():
    summary = pl.DataFrame({"labels": ["upos", "upos", "deprel", "deprel"], "state": ["a", "b", "a", "b"],
                            "expected_layer": [1.5, float("nan"), float("nan"), float("nan")]})
    assert layer_mix_stats.mean_expected_layers(summary) == "deprel none (0 of 2 states), upos 1.50 (1 of 2 states)"
