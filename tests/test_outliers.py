"""Outlier LayerNorm dimensions (BERT Busters): the criterion on hand-built weights, the configurations, the engine's
disabling against edited copies, and the statistics."""

from __future__ import annotations

import copy
import json

import numpy as np
import polars as pl
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.structure import UnsupportedStructure, structure
from bertology_core.outliers import layernorms, stats
from bertology_core.inputs.batching import Encoded


def parameters(layers=4, hidden=16, seed=0):
    rng = np.random.default_rng(seed)
    frames = []
    for norm in stats.NORMS:
        for layer in range(layers):
            weight, bias = 1 + 0.05 * rng.normal(size=hidden), 0.05 * rng.normal(size=hidden)
            if norm == "output_norm":
                if layer < 3:
                    weight[5] = 3.0  # out of range in 3 of 4 layers
                if layer == 0:
                    bias[9] = -2.0  # in 1 of 4 layers only
            else:
                weight[11] = 4.0  # the attention-output LayerNorm does not take part in the criterion
            frames.append(pl.DataFrame({"norm": norm, "layer": layer, "dimension": np.arange(hidden), "weight": weight, "bias": bias}))
    return pl.concat(frames)


def test_the_criterion_counts_layers_out_of_range_in_the_output_layernorm():
    table = stats.outlier_table(parameters(), stats.Criterion(sigmas=3, min_layer_share=0.25))
    assert stats.outlier_dimensions(table) == [5]
    row = {r["dimension"]: r for r in table.iter_rows(named=True)}
    assert row[5]["weight_layers"] == 3 and row[9]["bias_layers"] == 1 and row[11]["weight_layers"] == 0
    # a looser share lets the one-layer bias in; a stricter one keeps even dimension 5 out
    assert stats.outlier_dimensions(stats.outlier_table(parameters(), stats.Criterion(3, 0.2))) == [5, 9]
    assert stats.outlier_dimensions(stats.outlier_table(parameters(), stats.Criterion(3, 0.75))) == []
    # a LayerNorm at its initial values (weights 1, biases 0) has no outlier, rather than NaN counted as one
    constant = parameters().with_columns(pl.lit(1.0).alias("weight"), pl.lit(0.0).alias("bias"))
    assert stats.outlier_dimensions(stats.outlier_table(constant, stats.Criterion(3, 0.25))) == []
    # z is per LayerNorm vector, sample standard deviation
    z = stats.standardised(parameters()).filter((pl.col("norm") == "output_norm") & (pl.col("layer") == 0))
    weights = z.sort("dimension")["weight"].to_numpy()
    np.testing.assert_allclose(z.sort("dimension")["z_weight"].to_numpy(), (weights - weights.mean()) / weights.std(ddof=1))


def test_configurations_draw_as_many_other_dimensions_the_same_in_every_placement():
    configs = stats.configurations([2, 7], hidden=16, draws=5, seed=0)
    assert configs[0].kind == "intact" and len(configs) == 1 + 3 * (1 + 5)
    by_placement = {}
    for config in configs[1:]:
        assert len(config.dimensions) == 2
        if config.kind == "random":
            assert not set(config.dimensions) & {2, 7}
            by_placement.setdefault(config.placement, []).append(config.dimensions)
    assert by_placement["output"] == by_placement["attention"] == by_placement["both"]
    assert len(set(by_placement["output"])) > 1  # draws differ from each other
    assert stats.configurations([2, 7], 16, 5, 0) == configs  # seeded
    assert stats.configurations([], 16, 5, 0) == [stats.DimensionSet("intact", "intact")]
    with pytest.raises(ValueError, match="too few others"):
        stats.random_draws(list(range(9)), 16, 1, 0)


def tiny_bert(layers=3):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=37,
                        max_position_embeddings=64, num_labels=2)
    return BertForSequenceClassification(config).eval()


def zeroed_copy(model, dimensions, norms):
    edited = copy.deepcopy(model)
    for part in structure(edited):
        for norm in norms:
            module = getattr(part, norm)
            module.weight.data[list(dimensions)] = 0
            module.bias.data[list(dimensions)] = 0
    return edited


def test_engine_disabling_equals_zeroing_the_weights_of_a_copy():
    model = use_engine(tiny_bert())
    generator = torch.Generator().manual_seed(1)
    data = Encoded([torch.randint(5, 99, (n,), generator=generator).tolist() for n in (7, 12, 4, 9)], None, 0)
    configs = stats.configurations([3, 17], hidden=32, draws=4, seed=0)
    scored = layernorms.evaluate_dimension_sets(model, data, configs, rows_per_pass=8)
    logits = scored.logits
    batch = data.collate(range(len(data)))
    with torch.no_grad():
        intact = model(**batch).logits.numpy()
        np.testing.assert_allclose(logits[0], intact, atol=1e-6)
        np.testing.assert_allclose(scored.reference, np.broadcast_to(intact, scored.reference.shape), atol=1e-6)  # every pass's
        for index in (1, 3, len(configs) - 1):
            config = configs[index]
            reference = zeroed_copy(model, config.dimensions, config.norms)(**batch).logits.numpy()
            np.testing.assert_allclose(logits[index], reference, atol=1e-5)
            assert not np.allclose(logits[index], intact, atol=1e-4)


def test_outlier_disabling_killed_after_a_checkpoint_resumes_to_the_same_logits_bit_for_bit(tmp_path, monkeypatch):
    from bertology_core.models.checkpoint import ArrayCheckpoint
    from bertology_core.scoring import plans
    from conftest import Crash

    model = use_engine(tiny_bert())
    generator = torch.Generator().manual_seed(1)
    data = Encoded([torch.randint(5, 99, (n,), generator=generator).tolist() for n in (7, 12, 4, 9)], None, 0)
    configs = stats.configurations([3, 17], hidden=32, draws=4, seed=0)
    forward, passes = model.forward, []

    def counted(*args, **kwargs):
        passes.append(1)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counted)
    layernorms.evaluate_dimension_sets(model, data, configs, rows_per_pass=8)  # the engine's one probe of the model
    passes.clear()
    whole = layernorms.evaluate_dimension_sets(model, data, configs, rows_per_pass=8)
    every_pass = len(passes)
    saved = ArrayCheckpoint(tmp_path / "outliers", "settings", every_seconds=0)

    def crash(name):
        raise Crash

    monkeypatch.setattr(plans, "failpoint", crash)
    with pytest.raises(Crash):
        layernorms.evaluate_dimension_sets(model, data, configs, rows_per_pass=8, checkpoint=saved)
    done = json.loads((tmp_path / "outliers" / "arrays.json").read_text())["state"]["done"]
    assert done[0] and not all(done)
    monkeypatch.setattr(plans, "failpoint", lambda name: None)
    passes.clear()
    resumed = layernorms.evaluate_dimension_sets(model, data, configs, rows_per_pass=8, checkpoint=saved)
    assert 0 < len(passes) < every_pass  # only the groups not saved
    np.testing.assert_array_equal(resumed.logits, whole.logits)
    np.testing.assert_array_equal(resumed.reference, whole.reference)


def test_layernorm_parameters_read_the_modules_and_refuse_a_pre_norm_encoder():
    model = tiny_bert()
    table = layernorms.layernorm_parameters(model)
    assert table.height == 2 * 3 * 32
    row = table.filter((pl.col("norm") == "attention_norm") & (pl.col("layer") == 1)).sort("dimension")
    np.testing.assert_allclose(row["weight"].to_numpy(), model.bert.encoder.layer[1].attention.output.LayerNorm.weight.detach().numpy())
    from transformers import ModernBertConfig, ModernBertForSequenceClassification
    modern = ModernBertForSequenceClassification(ModernBertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2))
    with pytest.raises(UnsupportedStructure, match="pre-LayerNorm"):
        layernorms.layernorm_parameters(modern)


def run_frame(configs, predictions, labels):
    intact = np.broadcast_to(predictions[0], predictions.shape)
    return stats.predictions_frame(configs, np.arange(len(labels)), labels, predictions, intact, regression=False)


def test_statistics_separate_a_costly_outlier_set_from_harmless_random_draws():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    configs = stats.configurations([1], hidden=8, draws=6, seed=0)
    runs = {}
    for seed in (1, 2):
        predictions = np.tile(labels, (len(configs), 1))
        for index, config in enumerate(configs):
            flip = rng.random(200) < (0.45 if config.kind == "outliers" else 0.03 if config.kind == "random" else 0.0)
            predictions[index] = np.where(flip, 1 - labels, labels)
        runs[seed] = run_frame(configs, predictions, labels)
    deltas, contrast = stats.disabling_statistics(runs, "accuracy", 300, 0.95, 0)
    pooled = deltas.filter(pl.col("seed").is_null())
    assert pooled.filter(pl.col("kind") == "outliers")["verdict"].to_list() == ["loss"] * 3
    assert set(deltas["seed"].drop_nulls().to_list()) == {1, 2} and pooled.height == len(configs) - 1
    for row in contrast.filter(pl.col("seed").is_null()).iter_rows(named=True):
        assert row["outliers_delta"] < row["random_worst"] and row["random_at_or_below_outliers"] == 0
        assert row["ci_high"] < 0 and row["difference"] == pytest.approx(row["outliers_delta"] - row["random_mean_delta"])
    # a model without outlier dimensions has nothing to compare
    empty_deltas, empty_contrast = stats.disabling_statistics(
        {1: run_frame(configs[:1], np.tile(labels, (1, 1)), labels)}, "accuracy", 100, 0.95, 0)
    assert empty_deltas.is_empty() and empty_contrast.is_empty()


def test_a_layernorm_shared_across_depth_counts_once():
    from transformers import AlbertConfig, AlbertForSequenceClassification

    torch.manual_seed(0)
    albert = AlbertForSequenceClassification(AlbertConfig(
        vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64))
    table = layernorms.layernorm_parameters(albert)
    # one shared layer: its two LayerNorms once each, not once per depth (a value out of range would count 4 times)
    assert table.height == 2 * 32 and table["layer"].unique().to_list() == [0]


def seed_run(labels, outlier_dims, rng, draws=4):
    configs = stats.configurations(outlier_dims, hidden=16, draws=draws, seed=0)
    predictions = np.tile(labels, (len(configs), 1))
    for index, config in enumerate(configs):
        flip = rng.random(len(labels)) < (0.4 if config.kind == "outliers" else 0.02 if config.kind == "random" else 0.0)
        predictions[index] = np.where(flip, 1 - labels, labels)
    return run_frame(configs, predictions, labels)


def test_seeds_with_different_outliers_pool_and_a_seed_without_is_left_out():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 150)
    runs = {1: seed_run(labels, [], rng), 2: seed_run(labels, [3, 4], rng), 3: seed_run(labels, [3, 4, 9], rng)}
    deltas, contrast = stats.disabling_statistics(runs, "accuracy", 200, 0.95, 0)
    pooled = contrast.filter(pl.col("seed").is_null())
    assert pooled["pooled_seeds"].to_list() == ["2,3"] * 3 and pooled["seeds_without_outliers"].to_list() == ["1"] * 3
    assert set(contrast["seed"].drop_nulls()) == {2, 3}
    # the across-seed rows cannot name one set of dimensions: the seeds disable different ones
    assert set(deltas.filter(pl.col("seed").is_null() & (pl.col("kind") == "outliers"))["dimensions"]) == {"per seed"}
    assert set(deltas.filter((pl.col("seed") == 3) & (pl.col("kind") == "outliers"))["dimensions"]) == {"3,4,9"}
    # seeds scored on other dev examples cannot be paired
    shifted = runs[3].with_columns(pl.col("idx") + 1000)
    with pytest.raises(ValueError, match="other examples or configurations"):
        stats.disabling_statistics({2: runs[2], 3: shifted}, "accuracy", 50, 0.95, 0)
