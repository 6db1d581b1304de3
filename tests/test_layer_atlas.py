"""The layer atlas joins the per-layer tables on (state, layer), each optional."""

from __future__ import annotations

import polars as pl

from bertology_core.report import layer_atlas


def test_layer_atlas_joins_probes_mix_and_layernorms_on_state_and_layer():
    probes = pl.DataFrame({"state": ["pretrained"] * 4 + ["MRPC/finetuned/seed1"] * 4, "labels": ["upos", "upos", "deprel", "deprel"] * 2,
                           "layer": [0, 1, 0, 1] * 2, "accuracy": [0.5, 0.9, 0.4, 0.7, 0.5, 0.8, 0.4, 0.6],
                           "selectivity": [0.1, 0.3, 0.0, 0.2, 0.1, 0.2, 0.0, 0.1]})
    mix = pl.DataFrame({"state": ["pretrained"] * 2, "labels": ["upos"] * 2, "layer": [0, 1], "mix_weight": [0.2, 0.8],
                        "delta": [None, 0.4]})
    # the outliers stage's transformer layer 0 is the atlas's layer 1 (the hidden state after it)
    parameters = pl.DataFrame({"state": ["pretrained"] * 3 + ["finetuned"] * 3, "task": [None] * 3 + ["MRPC"] * 3,
                               "seed": [None] * 3 + [1] * 3, "norm": ["output_norm"] * 2 + ["attention_norm"] + ["output_norm"] * 3,
                               "layer": [0] * 6, "dimension": [0, 1, 0, 0, 1, 2], "z_weight": [5.0, 0.1, 9.0, 0.2, 0.1, 0.3],
                               "z_bias": [0.1, -4.0, 0.0, 0.0, 0.0, 3.5]},
                              schema_overrides={"task": pl.String, "seed": pl.Int64})
    atlas = layer_atlas.layer_atlas("m", probes, mix, parameters, sigmas=3.0)
    assert atlas["state"].to_list() == ["pretrained", "pretrained", "MRPC/finetuned/seed1", "MRPC/finetuned/seed1"]
    row = atlas.filter((pl.col("state") == "pretrained") & (pl.col("layer") == 1)).row(0, named=True)
    assert (row["probe_upos"], row["selectivity_deprel"], row["mix_weight_upos"], row["cumulative_gain_upos"]) == (0.9, 0.2, 0.8, 0.4)
    # the attention-output LayerNorm's z of 9 is not counted
    assert (row["output_norm_weights_out_of_range"], row["output_norm_biases_out_of_range"], row["output_norm_max_abs_z"]) == (1, 1, 5.0)
    tuned = atlas.filter((pl.col("state") == "MRPC/finetuned/seed1") & (pl.col("layer") == 1)).row(0, named=True)
    assert tuned["output_norm_biases_out_of_range"] == 1 and tuned["mix_weight_upos"] is None
    assert layer_atlas.layer_atlas("m").is_empty()
