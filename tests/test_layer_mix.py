"""Tenney et al.'s scalar mix and cumulative scoring: the formulas, and a synthetic case whose answer is known."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import torch

from bertology_core.layer_mix import cumulative_probes, stats
from bertology_core.probing.probes import ProbeSettings
from bertology_core.stats.bootstrap import DEFINED_SHARE, percentile_interval

SETTINGS = ProbeSettings(max_epochs=50, patience=3, validation_share=0.1, batch_size=256, learning_rate=0.01,
                         weight_decay=1e-4, seed=0)


def test_expected_layer_and_center_of_gravity_formulas():
    # Delta = [0.25, 0, 0.5, 0] over layers 1..4: (1 * 0.25 + 3 * 0.5) / 0.75
    assert stats.expected_layer(np.array([0.25, 0.5, 0.5, 1.0, 1.0])) == pytest.approx(7 / 3)
    assert stats.center_of_gravity(np.array([0.0, 0.5, 0.0, 0.5])) == pytest.approx(2.0)
    assert stats.center_of_gravity(np.array([1.0, 0.0, 0.0])) == 0.0
    # nothing added beyond the embeddings, or less than nothing: undefined
    assert np.isnan(stats.expected_layer(np.array([0.6, 0.6, 0.6])))
    assert np.isnan(stats.expected_layer(np.array([0.6, 0.5, 0.55])))
    batch = stats.expected_layer(np.array([[0.25, 0.5, 0.5, 1.0, 1.0], [0.2, 0.2, 0.2, 0.2, 0.6]]))
    np.testing.assert_allclose(batch, [7 / 3, 4.0])


def test_an_expected_layer_outside_the_layers_is_undefined():
    # negative Deltas stay in Tenney et al.'s formula: Delta = [0.3, -0.1, 0.2, 0] gives (0.3 - 0.2 + 0.6) / 0.4
    assert stats.expected_layer(np.array([0.1, 0.4, 0.3, 0.5, 0.5])) == pytest.approx(1.75)
    # but where gains and losses nearly cancel the ratio leaves [1, L]: Delta = [0.5, -0.4, 0, 0] gives -0.3 / 0.1 = -3,
    # Delta = [-0.1, 0, 0, 0.2] gives 0.7 / 0.1 = 7 of 4 layers: undefined, like a total gain that is not positive
    assert np.isnan(stats.expected_layer(np.array([0.1, 0.6, 0.2, 0.2, 0.2])))
    assert np.isnan(stats.expected_layer(np.array([0.3, 0.2, 0.2, 0.2, 0.4])))
    # the ends of [1, L] are in it: all the gain at layer 1, or all at layer L
    np.testing.assert_allclose(stats.expected_layer(np.array([[0.1, 0.4, 0.4, 0.4, 0.4], [0.1, 0.1, 0.1, 0.1, 0.7]])), [1.0, 4.0])
    # in the resamples too: a dev set whose formula gives -3 has no resample with an expected layer, so no interval
    correct = np.zeros((5, 1000), dtype=bool)
    correct[:, :100] = True  # Score(P_0) = 0.1 ...
    correct[1, 100:600] = True  # ... 0.6 at layer 1, 0.2 from layer 2 on
    correct[2:, 100:200] = True
    draws = stats.resampled_expected_layers({"odd": correct}, {"odd": np.arange(1000) // 10}, 200, 0)["odd"]
    assert np.isnan(draws).all() and np.isnan(percentile_interval(draws, 0.95, min_share=DEFINED_SHARE)).all()


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
    probes = cumulative_probes.fit_cumulative_probes(x[:, :2000], y[:2000], 4, SETTINGS, sentences[:2000])
    # probe k mixes layers 0..k only
    assert np.all(np.triu(probes.mix.numpy(), k=1) == 0)
    np.testing.assert_allclose(probes.mix.numpy().sum(axis=1), 1.0, atol=1e-6)
    scores = cumulative_probes.cumulative_correct(probes, x[:, 2000:], y[2000:]).mean(axis=1)
    assert scores[0] < 0.35 and 0.4 < scores[1] < 0.6 and 0.4 < scores[2] < 0.6 and scores[3] > 0.9
    assert stats.expected_layer(scores) == pytest.approx(7 / 3, abs=0.2)
    # the full mix leans on the layers that hold the label (1 and 3 and what carries them up), not on the embeddings
    assert probes.mix[-1, 0] < 0.05


def test_mix_tables_and_the_paired_difference():
    x, y, sentences = residual_stream(3000)
    probes = cumulative_probes.fit_cumulative_probes(x[:, :2000], y[:2000], 4, SETTINGS, sentences[:2000])
    correct = cumulative_probes.cumulative_correct(probes, x[:, 2000:], y[2000:])
    cumulative, summary = cumulative_probes.layer_mix_tables("toy", probes, correct, sentences[2000:], 200, 0.95, 0)
    assert cumulative["layer"].to_list() == [0, 1, 2, 3, 4] and np.isnan(cumulative["delta"][0])
    row = summary.row(0, named=True)
    assert row["layers"] == 4 and row["ci_low"] <= row["expected_layer"] <= row["ci_high"]
    assert row["expected_layer_share"] == pytest.approx(row["expected_layer"] / 4)
    # a second label set that is only the second bit: its information enters at layer 3 (a label set whose information
    # all enters at layer 1 would do as well, but its resamples fall below layer 1 half the time: undefined)
    second_only = cumulative_probes.fit_cumulative_probes(x[:, :2000], y[:2000] % 2, 2, SETTINGS, sentences[:2000])
    words = pl.concat([
        pl.DataFrame({"labels": name, "layer": np.repeat(np.arange(5), 1000).astype(np.int16),
                      "sentence": np.tile(sentences[2000:], 5).astype(np.int32), "correct": c.reshape(-1)})
        for name, c in (("both", correct), ("second", cumulative_probes.cumulative_correct(second_only, x[:, 2000:], y[2000:] % 2)))])
    point, draws = stats.expected_layer_difference(words, lower="both", higher="second", resamples=200, seed=0)
    assert point > 0.4 and np.isfinite(draws).all() and np.quantile(draws, 0.025) > 0
    # layers that add (almost) nothing: two more dev words right at the top than in the embeddings is a positive
    # total gain, but the formula gives 8.5 of 4 layers: beyond the last layer, so no expected layer
    rng = np.random.default_rng(1)
    flat = np.repeat(rng.random(1000)[None, :] < 0.5, 5, axis=0)
    flat[1:4, np.flatnonzero(flat[0])[:3]] = False  # Delta_1 = -0.003
    flat[4, np.flatnonzero(~flat[0])[:2]] = True  # Delta_4 = +0.005
    assert np.isnan(stats.expected_layer(flat.mean(axis=1)))
    _, flat_summary = cumulative_probes.layer_mix_tables("flat", probes, flat, sentences[2000:], 200, 0.95, 0)
    flat_row = flat_summary.row(0, named=True)
    assert np.isnan(flat_row["expected_layer"]) and np.isnan(flat_row["ci_low"]) and np.isnan(flat_row["expected_layer_share"])
    # two words of two sentences gain, one at layer 1 and one at layer 3: the formula gives 2, inside [1, 4], but one
    # resample in eight draws neither sentence, and has no gain at all: too often undefined, no expected layer
    sparse = np.repeat(rng.random(1000)[None, :] < 0.5, 5, axis=0)
    gaining = np.flatnonzero(~sparse[0])[[0, 50]]
    sparse[1:, gaining[0]] = sparse[3:, gaining[1]] = True
    assert len(set(sentences[2000:][gaining])) == 2
    assert stats.expected_layer(sparse.mean(axis=1)) == pytest.approx(2.0)
    sparse_row = cumulative_probes.layer_mix_tables("sparse", probes, sparse, sentences[2000:], 200, 0.95, 0)[1].row(0, named=True)
    assert np.isnan(sparse_row["expected_layer"]) and np.isnan(sparse_row["ci_low"]) and np.isnan(sparse_row["expected_layer_max"])
    with pytest.raises(ValueError, match="no cumulative probes for label set 'upos'"):
        stats.expected_layer_difference(words, lower="upos", higher="both", resamples=10, seed=0)


def test_mean_expected_layers_skip_states_without_one():
    summary = pl.DataFrame({"labels": ["upos", "upos", "deprel", "deprel"], "state": ["a", "b", "a", "b"],
                            "expected_layer": [1.5, float("nan"), float("nan"), float("nan")]})
    assert stats.mean_expected_layers(summary) == "deprel none (0 of 2 states), upos 1.50 (1 of 2 states)"


def fixed_probes(gravity_layer: int, layers: int = 5) -> cumulative_probes.MixedProbes:
    """Stand-in cumulative probes whose full mix puts all its weight on ``gravity_layer`` (the tables read only the mix,
    the scale and the epochs)."""
    mix = torch.zeros(layers, layers)
    mix[-1, gravity_layer] = 1.0
    return cumulative_probes.MixedProbes(mix, torch.ones(layers), torch.zeros(layers, 1, 2), torch.zeros(layers, 2),
                                 torch.zeros(layers, 1, 1), torch.ones(layers, 1, 1), np.arange(layers), layers + 3)


def thresholded(u: np.ndarray, accuracy: list[float]) -> np.ndarray:
    """``[probes, words]``: word ``i`` right at layer ``k`` when ``u_i < accuracy[k]`` (so a word right at ``k`` stays right
    above it when the accuracies rise)."""
    return u[None, :] < np.asarray(accuracy)[:, None]


def test_the_interval_covers_probe_seeds_that_disagree():
    # two probe trainings of one label set: seed 0 finds the information at layer 1 (E = (0.5 + 0.2) / 0.6 = 7/6),
    # seed 1 mostly at layer 3 (E = (0.1 + 1.5) / 0.6 = 8/3); 3000 dev words in 300 sentences
    u = np.random.default_rng(3).random(3000)
    sentences = np.arange(3000) // 10
    correct = np.stack([thresholded(u, [0.2, 0.7, 0.8, 0.8, 0.8]), thresholded(u, [0.2, 0.3, 0.3, 0.8, 0.8])])
    cumulative, summary = cumulative_probes.layer_mix_tables("toy", [fixed_probes(1), fixed_probes(3)], correct, sentences, 400, 0.95, 0)
    row = summary.row(0, named=True)
    per_seed = stats.expected_layer(correct.mean(axis=-1))
    assert row["probe_seeds"] == 2 and row["expected_layer"] == pytest.approx(per_seed.mean())
    assert (row["expected_layer_min"], row["expected_layer_max"]) == pytest.approx((per_seed.min(), per_seed.max()))
    assert row["expected_layer_min"] == pytest.approx(7 / 6, abs=0.1) and row["expected_layer_max"] == pytest.approx(8 / 3, abs=0.1)
    assert (row["center_of_gravity"], row["center_of_gravity_min"], row["center_of_gravity_max"]) == (2.0, 1.0, 3.0)
    # one seed fixed: the interval covers sentence sampling only, a narrow band around that seed's estimate
    _, one = cumulative_probes.layer_mix_tables("toy", fixed_probes(1), correct[0], sentences, 400, 0.95, 0)
    one_row = one.row(0, named=True)
    assert one_row["probe_seeds"] == 1 and one_row["expected_layer"] == pytest.approx(per_seed[0])
    assert one_row["ci_low"] <= per_seed[0] <= one_row["ci_high"] and one_row["ci_high"] - one_row["ci_low"] < 0.3
    # both seeds: each resample draws one of them, so the interval reaches from one seed's estimate to the other's
    assert row["ci_low"] < per_seed[0] + 0.1 and row["ci_high"] > per_seed[1] - 0.1
    assert row["ci_high"] - row["ci_low"] > 4 * (one_row["ci_high"] - one_row["ci_low"])
    draws = stats.resampled_expected_layers({"toy": correct}, {"toy": sentences}, 400, 0)["toy"]
    assert 0.4 < np.mean(draws < 2) < 0.6  # about half the resamples use each seed
    # the cumulative table: per layer the means over seeds and the seeds' range
    assert cumulative["probe_seeds"].to_list() == [2] * 5
    np.testing.assert_allclose(cumulative["cumulative_accuracy"], correct.mean(axis=-1).mean(axis=0))
    np.testing.assert_allclose(cumulative["delta_max"][1:], np.diff(correct.mean(axis=-1), axis=1).max(axis=0))
    assert cumulative["mix_weight"].to_list() == [0, 0.5, 0, 0.5, 0] and cumulative["mix_weight_max"].to_list() == [0, 1, 0, 1, 0]
    # one seed as [1, probes, words] draws exactly what [probes, words] draws: the sentence bootstrap alone
    np.testing.assert_array_equal(
        stats.resampled_expected_layers({"toy": correct[:1]}, {"toy": sentences}, 100, 5)["toy"],
        stats.resampled_expected_layers({"toy": correct[0]}, {"toy": sentences}, 100, 5)["toy"])


def words_table(name: str, seeds: list[int], correct: np.ndarray, sentences: np.ndarray) -> pl.DataFrame:
    """The per-word table as :func:`cumulative_probes.layer_mix_label_sets` writes it, from ``[probe_seeds, probes, words]``."""
    _, layers, count = correct.shape
    return pl.DataFrame({
        "labels": name, "probe_seed": np.repeat(seeds, layers * count).astype(np.int32),
        "layer": np.tile(np.repeat(np.arange(layers), count), len(seeds)).astype(np.int16),
        "sentence": np.tile(sentences, len(seeds) * layers).astype(np.int32), "correct": correct.reshape(-1)})


def test_expected_layer_difference_pairs_probe_seeds():
    # seed 7 puts the part of speech at layer 1 and the relations at 2; seed 9 puts them at 3 and 4. Paired by seed the
    # difference is 1 in every resample; a seed drawn apart for each label set would give 2 - 3 or 4 - 1 half the time
    u = np.random.default_rng(4).random(2000)
    sentences = np.arange(2000) // 8
    lower = np.stack([thresholded(u, [0.2, 0.8, 0.8, 0.8, 0.8]), thresholded(u, [0.2, 0.2, 0.2, 0.8, 0.8])])
    higher = np.stack([thresholded(u, [0.2, 0.2, 0.8, 0.8, 0.8]), thresholded(u, [0.2, 0.2, 0.2, 0.2, 0.8])])
    words = pl.concat([words_table("upos", [7, 9], lower, sentences), words_table("deprel", [7, 9], higher, sentences)])
    point, draws = stats.expected_layer_difference(words, lower="upos", higher="deprel", resamples=300, seed=0)
    assert point == pytest.approx(1.0) and draws.shape == (300,)
    np.testing.assert_allclose(draws, 1.0)
    _, correct, _ = stats.words_correct(words, "upos")
    np.testing.assert_array_equal(correct, lower)
    alone = stats.resampled_expected_layers({"upos": lower}, {"upos": sentences}, 300, 0)["upos"]
    assert set(np.round(alone, 6)) == {1.0, 3.0}  # both seeds are drawn
    # the point is the mean over seeds of each seed's difference
    unequal = pl.concat([words_table("upos", [7, 9], lower, sentences), words_table("deprel", [7, 9], higher[::-1], sentences)])
    point, draws = stats.expected_layer_difference(unequal, "upos", "deprel", 300, 0)
    assert point == pytest.approx(((4 - 1) + (2 - 3)) / 2) and set(np.round(draws, 6)) == {3.0, -1.0}
    # a table written before probe seeds (no probe_seed column) is one seed
    old = words.filter(pl.col("probe_seed") == 9).drop("probe_seed")
    point, draws = stats.expected_layer_difference(old, "upos", "deprel", 100, 0)
    assert point == pytest.approx(1.0) and np.allclose(draws, 1.0)
    with pytest.raises(ValueError, match="different probe seeds"):
        stats.expected_layer_difference(words.filter((pl.col("labels") == "deprel") | (pl.col("probe_seed") == 7)),
                                                  "upos", "deprel", 10, 0)


def test_probe_settings_take_each_probe_seed():
    probe = {"max_epochs": 5, "patience": 2, "validation_share": 0.2, "batch_size": 64, "learning_rate": 0.01, "weight_decay": 0.0}
    settings = cumulative_probes.probe_settings(probe, [0, 3])
    assert [s.seed for s in settings] == [0, 3] and settings[1] == ProbeSettings(**probe, seed=3)
    with pytest.raises(ValueError, match="replaced by layer_mix.probe_seeds"):
        cumulative_probes.probe_settings(probe | {"seed": 0}, [0])
    with pytest.raises(ValueError, match="distinct"):
        cumulative_probes.probe_settings(probe, [1, 1])
    # two seeds train different probes (their own minibatch order and held-out sentences) on the same data
    x, y, sentences = residual_stream(600)
    quick = [dataclasses.replace(SETTINGS, seed=seed, max_epochs=2) for seed in (0, 1)]
    fitted = [cumulative_probes.fit_cumulative_probes(x, y, 4, s, sentences) for s in quick]
    assert not torch.equal(fitted[0].weight, fitted[1].weight) and not torch.equal(fitted[0].mean, fitted[1].mean)


def test_a_layer_mix_killed_after_a_checkpoint_resumes_to_the_same_tables(tmp_path, monkeypatch):
    """Each label set's probes of each seed are saved as they are done; killed at the second save, the rerun reads
    the saved probes back (their weights, epochs and dev words), fits only the rest and gives the same three tables."""
    from bertology_core.models import checkpoint
    from conftest import Crash, crash_at
    from test_probing import zipf_words

    features, tags, types, sentences = zipf_words(600, 60, seed=5)
    # three layers (embeddings and two more), the tag readable more clearly higher up
    noise = np.random.default_rng(0).normal(size=(3, *features.shape[1:])).astype(np.float32)
    features = np.concatenate([features * scale + noise[i] for i, scale in enumerate((0.2, 0.6, 1.0))])
    frames = {split: pl.DataFrame({"forms": [list(types[sentences == s]) for s in np.unique(sentences[part])],
                                   "upos": [[f"T{t}" for t in tags[sentences == s]] for s in np.unique(sentences[part])]})
              for split, part in (("train", slice(0, 450)), ("dev", slice(450, None)))}
    tensors = {"train": features[:, :450], "dev": features[:, 450:], "train_complete": np.ones(450, bool),
               "dev_complete": np.ones(150, bool)}
    seeds = [dataclasses.replace(SETTINGS, seed=seed, max_epochs=3) for seed in (0, 1)]

    def run(saved=None):
        return cumulative_probes.layer_mix_label_sets(frames, tensors, {"upos": {"field": "upos"}, "again": {"field": "upos"}},
                                                      seeds, 1, True, resamples=50, level=0.9, seed=0, checkpoint=saved)

    whole = run()
    saved = checkpoint.ArrayCheckpoint(tmp_path / "mix", "settings", every_seconds=0)
    monkeypatch.setattr(checkpoint, "failpoint", crash_at(2))
    with pytest.raises(Crash):
        run(saved)
    monkeypatch.setattr(checkpoint, "failpoint", lambda name: None)
    fits, real_fit = [], cumulative_probes.fit_cumulative_probes
    monkeypatch.setattr(cumulative_probes, "fit_cumulative_probes", lambda *args: fits.append(1) or real_fit(*args))
    resumed = run(saved)
    assert all(a.equals(b) for a, b in zip(resumed, whole)) and (tmp_path / "mix").exists()
    assert len(fits) == 2  # the second label set's two seeds
