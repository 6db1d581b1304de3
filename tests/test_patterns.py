"""Pattern features, the rule labeller and the 8-layer CNN on hand-built maps."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
import torch

from bertology_core import patterns
from bertology_core.pattern_cnn import PatternCNN, PatternNet, cross_validated_f1, resize_map

# [CLS] a a a a a [SEP] b b b b b [SEP]: two segments of 5 words
SEGMENT_IDS = [None, 0, 0, 0, 0, 0, None, 1, 1, 1, 1, 1, None]
L = len(SEGMENT_IDS)


def masks():
    return patterns.special_masks(SEGMENT_IDS)


def label(attention):
    assert np.allclose(attention.sum(axis=1), 1.0)
    features = patterns.map_features(attention, *masks())
    return patterns.rule_label(features), features


def diagonal_map(offset=1):
    attention = np.zeros((L, L))
    for i in range(L):
        j = i + offset if 0 <= i + offset < L else i - offset
        attention[i, j] = 1.0
    return attention


def test_masks_find_cls_sep_and_segments():
    special, cls, segments = masks()
    assert special.tolist() == [s is None for s in SEGMENT_IDS]
    assert cls.tolist() == [True] + [False] * (L - 1)
    assert segments.tolist() == [-1, 0, 0, 0, 0, 0, -1, 1, 1, 1, 1, 1, -1]


def test_next_token_map_is_diagonal_and_features_match_hand_values():
    kind, features = label(diagonal_map(+1))
    assert kind == "diagonal"
    assert features["diagonal_mass"] == pytest.approx(1.0)
    assert features["self_mass"] == 0.0
    # column means: nobody attends to [CLS]; the [SEP]s (6, 12) are attended by rows 5 and 11 only
    assert features["cls_mass"] == 0.0 and features["sep_mass"] == pytest.approx(2 / L)
    assert features["entropy"] == pytest.approx(0.0, abs=1e-9)


def test_previous_token_map_is_diagonal_too():
    assert label(diagonal_map(-1))[0] == "diagonal"


def test_sep_column_map_is_vertical():
    attention = np.zeros((L, L))
    attention[:, L - 1] = 1.0
    kind, features = label(attention)
    assert kind == "vertical" and features["sep_mass"] == pytest.approx(1.0) and features["cls_mass"] == 0.0


def test_cls_plus_diagonal_map_is_vertical_diagonal():
    attention = 0.5 * diagonal_map(+1)
    attention[:, 0] += 0.5
    kind, features = label(attention)
    assert kind == "vertical_diagonal"
    assert features["special_mass"] == pytest.approx(0.5 + 0.5 * 2 / L)  # [CLS] column + diagonal hits on specials


def test_uniform_attention_within_each_sentence_is_block():
    _, _, segments = masks()
    attention = np.zeros((L, L))
    for i in range(L):
        same = np.flatnonzero(segments == segments[i]) if segments[i] >= 0 else np.arange(L)
        attention[i, same] = 1.0 / len(same)
    kind, features = label(attention)
    assert kind == "block" and features["within_segment"] == pytest.approx(1.0)


def test_uniform_attention_over_everything_is_heterogeneous():
    kind, features = label(np.full((L, L), 1.0 / L))
    assert kind == "heterogeneous"
    assert features["entropy"] == pytest.approx(1.0)
    assert features["within_segment"] == pytest.approx(0.5)  # 5 of the 10 words are in the own sentence


def test_single_sentence_input_has_no_block_feature():
    special, cls, segments = patterns.special_masks([None, 0, 0, 0, None])
    features = patterns.map_features(np.full((5, 5), 0.2), special, cls, segments)
    assert np.isnan(features["within_segment"])


def test_thresholds_come_from_config_and_unknown_keys_fail():
    strict = patterns.RuleThresholds.from_dict({"diagonal": 0.99, "mixed_each": 0.9})
    attention = 0.9 * diagonal_map(+1) + 0.1 / L
    assert patterns.rule_label(patterns.map_features(attention, *masks())) == "diagonal"
    assert patterns.rule_label(patterns.map_features(attention, *masks()), strict) == "heterogeneous"
    with pytest.raises(ValueError, match="diagonl"):
        patterns.RuleThresholds.from_dict({"diagonl": 0.5})


def test_resize_keeps_a_one_token_stripe_and_rows_of_a_shrunk_map():
    attention = np.zeros((64, 64), dtype=np.float32)
    attention[:, 0] = 1.0
    small = resize_map(attention, 16)
    assert small.shape == (16, 16) and small[:, 0].min() > 0 and small[:, 1:].max() == 0
    grown = resize_map(attention[:8, :8] / attention[:8, :8].sum(1, keepdims=True), 16)
    assert grown[:, :2].min() == 1.0 and grown[:, 2:].max() == 0.0


def test_the_cnn_has_eight_conv_layers_with_relu():
    net = PatternNet(classes=5)
    convs = [m for m in net.modules() if m.__class__.__name__ == "Conv2d"]
    relus = [m for m in net.modules() if m.__class__.__name__ == "ReLU"]
    assert len(convs) == 8 and len(relus) == 8


def synthetic_maps(per_class=16, size=16, seed=0):
    """Noisy hand-built maps of four classes, resized like real maps."""
    rng = np.random.default_rng(seed)
    maps, labels = [], []
    for kind in ("vertical", "diagonal", "vertical_diagonal", "heterogeneous"):
        for _ in range(per_class):
            n = int(rng.integers(12, 40))
            attention = rng.random((n, n)) * 0.3
            if kind in ("vertical", "vertical_diagonal"):
                attention[:, 0] += 3.0
            if kind in ("diagonal", "vertical_diagonal"):
                attention[np.arange(1, n), np.arange(n - 1)] += 3.0
            attention /= attention.sum(axis=1, keepdims=True)
            maps.append(resize_map(attention, size))
            labels.append(kind)
    return np.stack(maps), np.array(labels)


def test_the_cnn_learns_separable_patterns_under_cross_validation():
    X, y = synthetic_maps()
    result = cross_validated_f1(PatternCNN(epochs=25, seed=0), X, y, folds=4, seed=0)
    assert result["folds"] == 4 and len(result["macro_f1_per_fold"]) == 4
    assert result["macro_f1_mean"] > 0.9, result
    shuffled = cross_validated_f1(PatternCNN(epochs=25, seed=0), X, np.random.default_rng(1).permutation(y), folds=4)
    assert shuffled["macro_f1_mean"] < 0.6  # labels unrelated to the maps cannot be learned


@pytest.fixture(scope="module")
def small_dump(tmp_path_factory):
    from bertology_core import dumps
    from conftest import tiny_mrpc_dump

    prefix = tmp_path_factory.mktemp("dump") / "untuned"
    tiny_mrpc_dump(prefix, 10)
    return dumps.AttentionDump(prefix), str(prefix)


def test_classifier_trains_on_a_labels_csv_and_says_so(small_dump, tmp_path):
    from bertology_core import pattern_training

    dump, prefix = small_dump
    features = patterns.dump_features(dump)
    assert features.height == 10 * 2 * 4
    # hand labels: call layer-0 maps "vertical", layer-1 maps "diagonal" (a learnable split by layer)
    labels = features.select(pl.lit("MRPC/untuned").alias("dump"), "example", "layer", "head").with_columns(
        pl.when(pl.col("layer") == 0).then(pl.lit("vertical")).otherwise(pl.lit("diagonal")).alias("label"))
    csv = tmp_path / "labels.csv"
    labels.write_csv(csv)
    trained = pattern_training.train_classifier(
        {"MRPC/untuned": features}, {"MRPC/untuned": prefix}, str(csv), train_maps=50, image_size=16, folds=3,
        epochs=3, seed=0)
    assert trained.report["labels_source"] == f"hand labels from {csv}"
    assert trained.report["training_maps"] == 80 and trained.report["class_counts"] == {"diagonal": 40, "vertical": 40}
    assert trained.report["rule_agreement_with_labels"] == 0.0  # the rules call these random maps heterogeneous
    weights = tmp_path / "model.safetensors"
    pattern_training.save_classifier(trained, weights)
    loaded = pattern_training.load_classifier(weights)
    classes = pattern_training.classify_dump(loaded, dump, features)
    assert classes.height == 80 and set(classes["cnn_label"]) <= {"vertical", "diagonal"}
    assert (classes["labels_source"] == f"hand labels from {csv}").all()
    # the loaded model predicts exactly what the trained one does
    X = pattern_training.maps_for(labels, {"MRPC/untuned": prefix}, 16)
    assert (trained.model.predict(X) == loaded.classes[loaded.net(torch.from_numpy(X)[:, None]).argmax(1).numpy()]).all()


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("dump,example,layer,head\nMRPC/untuned,0,0,0\n", "missing column(s) ['label']"),
        ("dump,example,layer,head,label\nMRPC/untuned,0,0,0,stripes\n", "'stripes' is not a class"),
        ("dump,example,layer,head,label\nQQP/untuned,0,0,0,vertical\n", "names dumps this run does not have"),
    ],
)
def test_bad_labels_csv_is_rejected_with_the_fix(tmp_path, rows, message):
    from bertology_core import pattern_training

    csv = tmp_path / "labels.csv"
    csv.write_text(rows)
    with pytest.raises(pattern_training.LabelsError, match=re.escape(message)):
        pattern_training.read_labels_csv(csv, {"MRPC/untuned"})
