"""Pattern features, the rule labeller and the 8-layer CNN on hand-built maps."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from bertology_core.patterns import feature_tables
from bertology_core.patterns.cnn import PatternCNN, PatternNet, cross_validated_f1, pack, resize_map

# [CLS] a a a a a [SEP] b b b b b [SEP]: two segments of 5 words
SEGMENT_IDS = [None, 0, 0, 0, 0, 0, None, 1, 1, 1, 1, 1, None]
L = len(SEGMENT_IDS)


def masks():
    return feature_tables.special_masks(SEGMENT_IDS)


def label(attention):
    assert np.allclose(attention.sum(axis=1), 1.0)
    features = feature_tables.map_features(attention, *masks())
    return feature_tables.rule_label(features), features


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


def test_the_cnn_features_of_a_next_token_map_and_a_stripe_match_hand_values():
    _, diagonal = label(diagonal_map(+1))
    assert diagonal["next_mass"] == pytest.approx((L - 1) / L) and diagonal["previous_mass"] == pytest.approx(1 / L)
    assert diagonal["argmax_band_share"] == 1.0 and diagonal["argmax_self_share"] == 0.0
    assert diagonal["off_band_stripe_mass"] == 0.0  # every weight is on the band (the last row on its previous token)
    assert diagonal["row_max"] == 1.0 and diagonal["log_length"] == pytest.approx(np.log(L))
    stripe = np.zeros((L, L))
    stripe[:, 3] = 1.0
    _, vertical = label(stripe)
    assert vertical["argmax_modal_share"] == 1.0 and vertical["stripe_consistency"] == 1.0
    assert vertical["column_entropy"] == pytest.approx(0.0, abs=1e-9) and vertical["second_column_mass"] == 0.0
    # rows 2, 3, 4 attend to column 3 within one token: the band holds them; the rest is the off-band stripe
    assert vertical["off_band_stripe_mass"] == pytest.approx((L - 3) / L) and vertical["off_band_stripe_share"] == pytest.approx(1.0)
    features = pl.DataFrame([diagonal, vertical])
    assert feature_tables.feature_matrix(features).shape == (2, len(feature_tables.FEATURES))
    # no attention off the band: within_segment is undefined (NaN), -1 for the CNN
    assert np.isnan(diagonal["within_segment"]) and feature_tables.feature_matrix(features)[0, feature_tables.FEATURES.index("within_segment")] == -1.0


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


def within_sentence_map():
    """Every word attends uniformly to its own sentence; special tokens to everything."""
    _, _, segments = masks()
    attention = np.zeros((L, L))
    for i in range(L):
        same = np.flatnonzero(segments == segments[i]) if segments[i] >= 0 else np.arange(L)
        attention[i, same] = 1.0 / len(same)
    return attention


def test_uniform_attention_within_each_sentence_is_block():
    attention = within_sentence_map()
    kind, features = label(attention)
    assert kind == "block" and features["within_segment"] == pytest.approx(1.0)


def test_uniform_attention_over_everything_is_heterogeneous():
    kind, features = label(np.full((L, L), 1.0 / L))
    assert kind == "heterogeneous"
    assert features["entropy"] == pytest.approx(1.0)
    # off the diagonal band a word at a sentence's edge sees 3 own words of 8, the others 2 of 7
    per_word = [3 / 8, 2 / 7, 2 / 7, 2 / 7, 3 / 8]
    assert features["within_segment"] == pytest.approx(np.mean(per_word))


def test_self_attention_map_is_diagonal_not_block():
    """Every token on itself: the line a person sees along the diagonal, though it stays in its own sentence."""
    kind, features = label(np.eye(L))
    assert kind == "diagonal"
    assert features["band_mass"] == pytest.approx(1.0) and features["self_mass"] == pytest.approx(1.0)
    assert np.isnan(features["within_segment"])  # no attention off the band to judge a block by


def test_stripe_on_a_content_token_is_vertical():
    """A stripe on a full stop (a non-special token) is vertical too, as people label it (with a trace of
    self-attention far fainter than the stripe)."""
    attention = np.zeros((L, L))
    attention[:, 5] = 0.9
    attention[np.arange(L), np.arange(L)] += 0.1
    kind, features = label(attention)
    assert kind == "vertical"
    assert features["special_mass"] == pytest.approx(0.1 * 3 / L)
    assert features["content_stripe_mass"] == pytest.approx(0.9 + 0.1 / L)
    assert features["stripe_mass"] == pytest.approx(0.9 + 3 * 0.1 / L)  # k = 3 special tokens: the 3 largest columns


def test_lines_parallel_to_the_diagonal_in_a_pair_are_diagonal():
    """Each word attends to its counterpart in the other sentence (offset +6 in the first half, -6 after): the
    lines in the off-diagonal squares that the labelling guide counts as diagonal; no band, a weak stripe."""
    attention = np.zeros((L, L))
    for i in range(L):
        attention[i, i + 6 if i + 6 < L else i - 6] = 1.0
    kind, features = label(attention)
    assert kind == "diagonal" and features["band_excess"] == 0.0
    # rows 0..6 on offset +6 (7 of 13) is the best 3-offset window. The baseline is the map whose rows are the
    # column masses (column 0: 0, column 6: 2/13, the rest 1/13): its best window, offsets 2-4, holds the columns
    # from 2, 3 and 4 on: (12 + 11 + 10) / 13 / 13
    assert features["line_mass"] == pytest.approx(7 / L)
    baseline = (12 + 11 + 10) / L**2
    assert features["line_excess"] == pytest.approx((7 / L - baseline) / (1 - baseline))
    assert features["stripe_excess"] == pytest.approx(0.1)  # column 6 gets 2 rows, the next two 1: 4/13 over 3/13
    assert feature_tables.parallel_line_mass(np.eye(4)) == 0.0  # too short to hold a line off the band


def test_block_with_a_diagonal_line_inside_is_diagonal_but_a_faint_one_stays_block():
    uniform = within_sentence_map()
    assert label(0.6 * np.eye(L) + 0.4 * uniform)[0] == "diagonal"
    kind, features = label(0.1 * np.eye(L) + 0.9 * uniform)
    assert kind == "block" and features["within_segment"] == pytest.approx(1.0)


def test_single_sentence_input_has_no_block_feature():
    special, cls, segments = feature_tables.special_masks([None, 0, 0, 0, None])
    features = feature_tables.map_features(np.full((5, 5), 0.2), special, cls, segments)
    assert np.isnan(features["within_segment"])


@pytest.mark.parametrize("length", [5, 6, 7, 13, 40])
def test_a_stripe_draws_no_line(length):
    """A column crosses every diagonal once, so a stripe alone holds 'lines' of its own mass: against the map of
    its column masses it has no line excess, and a short [CLS] stripe stays vertical."""
    attention = np.zeros((length, length))
    attention[:, 0] = 1.0
    special, cls, segments = feature_tables.special_masks([None] + [0] * (length - 2) + [None])
    features = feature_tables.map_features(attention, special, cls, segments)
    assert features["line_mass"] > 0 and features["line_excess"] == pytest.approx(0.0, abs=1e-12)
    assert feature_tables.rule_label(features) == "vertical"


def test_a_within_sentence_map_under_a_stripe_is_not_block():
    """Block needs no stripe structure: the same sentence blocks under a [CLS] stripe are vertical."""
    attention = 0.3 * within_sentence_map()
    attention[:, 0] += 0.7
    kind, features = label(attention)
    assert features["within_segment"] == pytest.approx(1.0) and features["stripe_excess"] >= feature_tables.RuleThresholds().structure
    assert kind == "vertical"


def test_rule_thresholds_refuse_ranges_that_break_the_rule():
    with pytest.raises(ValueError, match="structure must be above 0"):
        feature_tables.RuleThresholds(structure=0.0)
    with pytest.raises(ValueError, match="diagonal_share <= vertical_share"):
        feature_tables.RuleThresholds(diagonal_share=0.9, vertical_share=0.5)
    features = {"stripe_excess": 0.0, "band_excess": 0.0, "line_excess": 0.0, "within_segment": None}
    assert feature_tables.rule_label(features) == "heterogeneous"  # a null within_segment reads as no second segment


def test_thresholds_come_from_config_and_unknown_keys_fail():
    attention = 0.9 * diagonal_map(+1) + 0.1 / L
    features = feature_tables.map_features(attention, *masks())
    assert feature_tables.rule_label(features) == "diagonal"
    assert feature_tables.rule_label(features, feature_tables.RuleThresholds.from_dict({"structure": 1.5})) == "heterogeneous"
    assert feature_tables.rule_label(features, feature_tables.RuleThresholds.from_dict({"diagonal_share": 0.0, "vertical_share": 0.0})) == "vertical"
    with pytest.raises(ValueError, match="diagonl"):
        feature_tables.RuleThresholds.from_dict({"diagonl": 0.5})


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
    maps, y = synthetic_maps()
    X = pack(maps)
    result = cross_validated_f1(PatternCNN(image_size=16, epochs=40, seed=0), X, y, folds=4, seed=0)
    assert result["folds"] == 4 and len(result["macro_f1_per_fold"]) == 4
    assert result["macro_f1_mean"] > 0.9, result
    shuffled = cross_validated_f1(PatternCNN(image_size=16, epochs=40, seed=0), X, np.random.default_rng(1).permutation(y), folds=4)
    assert shuffled["macro_f1_mean"] < 0.6  # labels unrelated to the maps cannot be learned


def test_the_cnn_reads_the_features_beside_the_map():
    """Maps of pure noise, classes told apart only by a feature on a large scale: the linear layer reads the
    standardised features (without them the CNN is at chance)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.array(["diagonal", "vertical"]), 32)
    maps = rng.random((64, 16, 16)).astype(np.float32)
    feature = np.where(y == "vertical", 1000.0, 900.0) + rng.normal(0, 10, 64)
    with_features = cross_validated_f1(PatternCNN(image_size=16, epochs=15, seed=0), pack(maps, feature[:, None]), y, folds=4)
    without = cross_validated_f1(PatternCNN(image_size=16, epochs=15, seed=0), pack(maps), y, folds=4)
    assert with_features["macro_f1_mean"] > 0.95 and without["macro_f1_mean"] < 0.75, (with_features, without)
    with pytest.raises(ValueError, match="with pack"):
        PatternCNN(image_size=32).fit(pack(maps), y)


@pytest.fixture(scope="module")
def small_dump(tmp_path_factory):
    from bertology_core.attention import dump_tables
    from conftest import tiny_mrpc_dump

    prefix = tmp_path_factory.mktemp("dump") / "pretrained"
    tiny_mrpc_dump(prefix, 10)
    return dump_tables.AttentionDump(prefix), str(prefix)


RESOLVED = {"weights_sha256": "any", "num_hidden_layers": 2, "num_attention_heads": 4}


def hand_label_csv(features, path, task="MRPC", state="pretrained"):
    """Hand labels keyed by idx: layer-0 maps "vertical", layer-1 maps "diagonal" (a split the CNN can learn)."""
    labels = features.select(pl.lit(task).alias("task"), pl.lit(state).alias("state"), "idx", "layer", "head").with_columns(
        pl.when(pl.col("layer") == 0).then(pl.lit("vertical")).otherwise(pl.lit("diagonal")).alias("label"))
    labels.write_csv(path)
    return labels


def test_classifier_trains_on_hand_labels_and_says_so(small_dump, tmp_path):
    from bertology_core.patterns import label_tables, tables, training

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    assert features.height == 10 * 2 * 4
    csv = tmp_path / "labels.csv"
    hand_label_csv(features, csv)
    label_set = label_tables.load_label_set(csv, None, None, RESOLVED, ["MRPC/pretrained", "RTE/pretrained"])
    assert label_set.in_file == 80 and label_set.left_out == {}
    trained = training.train_classifier(
        {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, label_set, {"MRPC/pretrained": prefix},
        train_maps=50, image_size=16, folds=3, epochs=3, seed=0, min_class_labels=20, ensemble=2)
    report = trained.report
    assert report["labels_source"] == "labels made by eye from labels.csv" and report["ensemble"] == 2
    assert len(trained.model.net_.nets) == 2
    assert report["hand_labels"] == {"file": "labels.csv", "in_file": 80, "used": 80, "left_out": {}}
    assert report["training_maps"] == 80 and report["class_counts"] == {"diagonal": 40, "vertical": 40}
    assert report["frequent_classes"] == ["vertical", "diagonal"]
    rule = report["rule_labeller"]
    assert rule["fitted_on_maps"] + rule["held_out"]["maps"] == 80 and rule["held_out"]["maps"] == 24
    cnn = report["cnn_cross_validated"]
    assert cnn["maps"] == 80 and np.array(cnn["confusion"]["matrix"]).sum() == 80
    assert cnn["confusion"]["labels"] == list(feature_tables.CLASSES)
    table = tables.classifier_table(report)
    assert table["labeller"].to_list() == ["CNN", "rules, fitted thresholds", "rules, configured thresholds", "rules, fitted thresholds"]
    repeated = report["rule_labeller"]["held_out_repeated"]
    assert repeated["seeds"] == [0, 1, 2, 3, 4] and len(repeated["macro_f1_frequent_classes"]) == 5
    assert repeated["macro_f1_frequent_classes"][0] == pytest.approx(report["rule_labeller"]["held_out"]["macro_f1_frequent_classes"])
    assert table["macro_f1_frequent_classes"][3] == pytest.approx(np.mean(repeated["macro_f1_frequent_classes"]))
    assert feature_tables.labeller_validated(report, 0.0)[0] and not feature_tables.labeller_validated(report, 1.01)[0]
    weights = tmp_path / "model.safetensors"
    training.save_classifier(trained, weights)
    loaded = training.load_classifier(weights)
    assert loaded.thresholds == trained.thresholds
    classes = training.classify_dump(loaded, dump, features)
    assert classes.height == 80 and set(classes["cnn_label"]) <= {"vertical", "diagonal"}
    assert (classes["labels_source"] == "labels made by eye from labels.csv").all()
    assert training.classify_dump(loaded, dump, features, batch_size=7).equals(classes)  # a speed setting only
    # the loaded model predicts exactly what the trained one does
    maps, labelled = training.labelled_maps(label_tables.read_labels(csv), {"MRPC/pretrained": prefix}, 16, feature_tables.RuleThresholds())
    values = feature_tables.feature_matrix(labelled)
    probabilities = loaded.net(torch.from_numpy(maps)[:, None], torch.from_numpy(values))
    assert len(loaded.net.nets) == 2 and torch.allclose(probabilities.sum(1), torch.ones(len(maps)))
    assert np.allclose(trained.model.predict_proba(pack(maps, values)), probabilities.detach().numpy(), atol=1e-6)
    assert (trained.model.predict(pack(maps, values)) == loaded.classes[probabilities.argmax(1).numpy()]).all()


def test_the_rule_fit_never_starts_from_the_configured_thresholds(small_dump, tmp_path):
    """The configured thresholds may have been fitted on the same labels: the fitted thresholds and every split of
    the repeated validation start from a neutral point, so they do not depend on what is configured."""
    from bertology_core.patterns import label_tables, training

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    hand_label_csv(features, tmp_path / "labels.csv")
    label_set = label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"])
    configured = (feature_tables.RuleThresholds(), feature_tables.RuleThresholds(structure=1e-3, diagonal_share=0.0, vertical_share=0.0))
    # the two configurations label these maps differently, so equal fits below are not an accident of the fixture
    assert (label_tables.rule_labels(features, configured[0]) != label_tables.rule_labels(features, configured[1])).any()
    reports = [training.train_classifier(
        {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, label_set, {"MRPC/pretrained": prefix}, train_maps=50,
        image_size=16, folds=2, epochs=1, seed=0, min_class_labels=20, thresholds=thresholds).report["rule_labeller"]
        for thresholds in configured]
    assert reports[0]["thresholds"] == reports[1]["thresholds"]
    assert reports[0]["held_out_repeated"] == reports[1]["held_out_repeated"]


def test_a_classifier_of_other_features_is_refused_with_the_fix(tmp_path):
    from safetensors.torch import save_file

    from bertology_core.patterns import training

    path = tmp_path / "model.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata={"classes": '["vertical"]', "image_size": "8", "width": "8",
                                                           "features": '["cls_mass"]', "labels_source": "x", "rule_thresholds": "{}"})
    with pytest.raises(ValueError, match="retrain it"):
        training.load_classifier(path)


def test_without_hand_labels_the_cnn_learns_the_rule_labels_and_says_so(small_dump):
    from bertology_core.patterns import tables, training

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    trained = training.train_classifier(
        {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, None, {}, train_maps=40, image_size=16, folds=2, epochs=2, seed=0)
    report = trained.report
    assert report["labels_source"].startswith("rule-based labels") and "rule_labeller" not in report
    assert report["training_maps"] == 40 and trained.thresholds == feature_tables.RuleThresholds()
    assert tables.classifier_table(report)["evaluation"].to_list() == ["cross-validated on the rule labels it learnt"]
    assert feature_tables.labeller_validated(report, 0.0) == (False, report["labels_source"])


def test_labels_keyed_by_idx_find_the_same_maps_in_another_sample(small_dump, tmp_path):
    """A label names task, state, GLUE idx, layer and head: a dump of another sample (other examples, other
    example numbers) that holds the labelled examples gives the same maps and features."""
    from bertology_core.patterns import label_tables, training
    from conftest import tiny_mrpc_dump

    dump, prefix = small_dump
    shifted = tmp_path / "shifted"
    tiny_mrpc_dump(shifted, 10, skip=5)  # examples 5..14: idx 5..9 are in both, under other example numbers
    first = feature_tables.dump_features(dump)
    overlap = first.filter(pl.col("idx").is_in(list(range(5, 10))))
    hand_label_csv(overlap, tmp_path / "labels.csv")
    labels = label_tables.read_labels(tmp_path / "labels.csv")
    X_a, features_a = training.labelled_maps(labels, {"MRPC/pretrained": prefix}, 16, feature_tables.RuleThresholds())
    X_b, features_b = training.labelled_maps(labels, {"MRPC/pretrained": str(shifted)}, 16, feature_tables.RuleThresholds())
    assert np.allclose(X_a, X_b, atol=1e-4)
    assert np.allclose(features_a["stripe_mass"].to_numpy(), features_b["stripe_mass"].to_numpy(), atol=1e-4)
    from bertology_core.attention.dump_tables import AttentionDump

    examples_a = dict(dump.tokens().select("idx", "example").iter_rows())
    examples_b = dict(AttentionDump(shifted).tokens().select("idx", "example").iter_rows())
    assert any(examples_a[i] != examples_b[i] for i in range(5, 10))  # the dumps number the examples differently


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("task,state,idx,layer,head\nMRPC,pretrained,0,0,0\n", "labels.csv:1: missing column(s) ['label']"),
        ("task,state,idx,layer,head,label\nMRPC,pretrained,0,0,0,stripes\n", "labels.csv:2: field 'label' = 'stripes' is not a class"),
        ("task,state,idx,layer,head,label\nMRPC,pretrained,0,9,0,vertical\n", "labels.csv:2: field 'layer' = 9 is outside 0..1"),
        ("task,state,idx,layer,head,label\nMRPC,pretrained,x,0,0,vertical\n", "labels.csv:2: field 'idx' = 'x' is not an integer"),
        ("task,state,idx,layer,head,label\nMR/PC,pretrained,1,0,0,vertical\n", "labels.csv:2: field 'task' = 'MR/PC' is not a task name"),
        ("task,state,idx,layer,head,label\nMRPC,finetuned,1,0,0,vertical\n", "labels.csv:2: field 'state' = 'finetuned' is not a model state"),
        ("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\nMRPC,pretrained,4,0,1,block\nMRPC,pretrained,3,0,1,diagonal\n",
         "labels.csv:4: field 'label' = 'diagonal' conflicts with"),
    ],
)
def test_bad_labels_are_rejected_with_file_line_and_fix(tmp_path, rows, message):
    from bertology_core.patterns import label_tables

    csv = tmp_path / "labels.csv"
    csv.write_text(rows)
    with pytest.raises(label_tables.LabelsError, match=re.escape(message)):
        label_tables.read_labels(csv, layers=2, heads=4)


def test_a_conflicting_label_names_both_lines(tmp_path):
    from bertology_core.patterns import label_tables

    csv = tmp_path / "labels.csv"
    csv.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\nMRPC,pretrained,3,0,1,vertical\nMRPC,pretrained,3,0,1,block\n")
    with pytest.raises(label_tables.LabelsError, match=re.escape(f"{csv}:4: field 'label' = 'block' conflicts with {csv}:2")):
        label_tables.read_labels(csv)
    csv.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\nMRPC,pretrained,3,0,1,vertical\n")
    assert label_tables.read_labels(csv).height == 1  # the same label twice is one label


def test_test_labels_score_the_final_classifiers_once_and_never_train_them(small_dump, tmp_path):
    from sklearn.metrics import f1_score

    from bertology_core.patterns import label_tables, tables, training
    from bertology_core.patterns.cnn import pack

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    labels = hand_label_csv(features, tmp_path / "all.csv")
    held = sorted(labels["idx"].unique().to_list())[-3:]
    labels.filter(~pl.col("idx").is_in(held)).write_csv(tmp_path / "labels.csv")
    # test labels that contradict the training labels' rule: had they trained anything, the outputs below would move
    flipped = labels.filter(pl.col("idx").is_in(held)).with_columns(
        pl.when(pl.col("label") == "vertical").then(pl.lit("diagonal")).otherwise(pl.lit("vertical")).alias("label"))
    flipped.write_csv(tmp_path / "test.csv")

    def train(test_path):
        label_set = label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"], test_path=test_path)
        return label_set, training.train_classifier(
            {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, label_set, {"MRPC/pretrained": prefix},
            train_maps=50, image_size=16, folds=3, epochs=3, seed=0, min_class_labels=5, ensemble=1)

    label_set, trained = train(tmp_path / "test.csv")
    _, without = train(None)
    assert label_set.labels.height == 56 and label_set.test.height == 24 and "test" not in without.report
    # the same CNN, cross-validation and rule thresholds with and without the test labels
    assert trained.report["cnn_cross_validated"] == without.report["cnn_cross_validated"]
    assert trained.report["rule_labeller"] == without.report["rule_labeller"] and trained.thresholds == without.thresholds
    maps, labelled = training.labelled_maps(label_set.test, {"MRPC/pretrained": prefix}, 16, feature_tables.RuleThresholds())
    rows = pack(maps, feature_tables.feature_matrix(labelled))
    np.testing.assert_array_equal(trained.model.predict_proba(rows), without.model.predict_proba(rows))
    test = trained.report["test"]
    assert test["maps"] == 24 and test["class_counts"] == {"diagonal": 12, "vertical": 12}
    assert test["scored_classes"] == ["vertical", "diagonal"] and test["frequent_classes_without_test_labels"] == []
    predictions = pl.DataFrame(test["predictions"])
    assert predictions["cnn"].to_list() == list(without.model.predict(rows))
    assert predictions["rules"].to_list() == list(label_tables.rule_labels(labelled, without.thresholds))
    for name in ("cnn", "rules"):  # scored against the test labels, not the training labels' rule
        expected = f1_score(flipped.sort("idx", "layer", "head")["label"], predictions.sort("idx", "layer", "head")[name],
                            labels=["vertical", "diagonal"], average="macro", zero_division=0)
        assert test[name]["macro_f1_frequent_classes"] == pytest.approx(expected)
        assert len(test[name]["macro_f1_frequent_classes_interval"]) == 2
    assert trained.thresholds == feature_tables.RuleThresholds(**trained.report["rule_labeller"]["final_thresholds"])
    f1 = test["cnn"]["macro_f1_frequent_classes"]
    validated, text = feature_tables.labeller_validated(trained.report, f1)
    assert validated and "24 test labels never trained or designed on" in text and "95% bootstrap" in text
    assert feature_tables.labeller_validated(trained.report, f1 + 0.01)[0] is False
    table = tables.classifier_table(trained.report)
    assert table["evaluation"][0].startswith("test labels (24 maps")
    assert table["interval_low"][0] == test["cnn"]["macro_f1_frequent_classes_interval"][0]
    assert set(tables.confusion_table(trained.report)["labeller"]) >= {"CNN (test labels)", "rules (test labels)"}


def test_a_frequent_class_without_test_labels_is_left_out_of_the_test_score(small_dump, tmp_path):
    from bertology_core.patterns import label_tables, training

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    labels = hand_label_csv(features, tmp_path / "all.csv")
    held = sorted(labels["idx"].unique().to_list())[-3:]
    labels.filter(~pl.col("idx").is_in(held)).write_csv(tmp_path / "labels.csv")
    labels.filter(pl.col("idx").is_in(held) & (pl.col("label") == "vertical")).write_csv(tmp_path / "test.csv")
    label_set = label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"], test_path=tmp_path / "test.csv")
    report = training.train_classifier(
        {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, label_set, {"MRPC/pretrained": prefix},
        train_maps=50, image_size=16, folds=3, epochs=3, seed=0, min_class_labels=5, ensemble=1).report
    test = report["test"]
    assert test["scored_classes"] == ["vertical"] and test["frequent_classes_without_test_labels"] == ["diagonal"]
    predicted = pl.DataFrame(test["predictions"])["cnn"]
    from sklearn.metrics import f1_score

    assert test["cnn"]["macro_f1_frequent_classes"] == pytest.approx(
        f1_score(["vertical"] * len(predicted), predicted, labels=["vertical"], average="macro", zero_division=0))


def test_test_labels_of_no_dump_of_the_run_are_said_and_the_gate_falls_back_to_cross_validation(small_dump, tmp_path):
    from bertology_core.patterns import label_tables, training

    dump, prefix = small_dump
    features = feature_tables.dump_features(dump)
    hand_label_csv(features, tmp_path / "labels.csv")
    (tmp_path / "test.csv").write_text("task,state,idx,layer,head,label\nMRPC,finetuned/seed7,3,0,1,vertical\n")
    label_set = label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"], test_path=tmp_path / "test.csv")
    assert label_set.test.height == 0 and label_set.test_in_file == 1
    report = training.train_classifier(
        {"MRPC/pretrained": features}, {"MRPC/pretrained": prefix}, label_set, {"MRPC/pretrained": prefix},
        train_maps=50, image_size=16, folds=3, epochs=2, seed=0, min_class_labels=5, ensemble=1).report
    assert "test" not in report and "finetuned/seed7: not a dump of this run" in report["test_left_out"]
    assert feature_tables.labeller_validated(report, 0.0)[1].startswith("the label card's 1 test labels name none of this run's dumps")


def test_a_second_labeller_naming_maps_the_labels_lack_is_refused_with_its_line(tmp_path):
    from bertology_core.patterns import label_tables

    (tmp_path / "labels.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\n")
    (tmp_path / "second.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,diagonal\nMRPC,pretrained,9,0,1,vertical\n")
    with pytest.raises(label_tables.LabelsError, match=re.escape(f"{tmp_path / 'second.csv'}:3: the map") + ".*not labelled in .*"
                       "second_labeller"):
        label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"],
                                      second_labeller_path=tmp_path / "second.csv")


def test_a_card_naming_a_missing_test_file_names_the_field(tmp_path):
    from bertology_core.patterns import label_tables

    (tmp_path / "labels.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\n")
    card = tmp_path / "m.json"
    card.write_text('{"model_spec": "x", "weights_sha256": "a", "labels": "labels.csv", "test": "tset.csv"}')
    with pytest.raises(label_tables.LabelsError, match=re.escape(f"{card}: field 'test' = 'tset.csv': no such file beside the card")):
        label_tables.LabelCard.read(card).files(card)


def test_test_labels_that_name_a_training_map_are_refused_with_both_lines(tmp_path):
    from bertology_core.patterns import label_tables

    (tmp_path / "labels.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\nMRPC,pretrained,4,0,1,diagonal\n")
    (tmp_path / "test.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,5,0,1,vertical\nMRPC,pretrained,4,0,1,vertical\n")
    with pytest.raises(label_tables.LabelsError, match=re.escape(f"{tmp_path / 'test.csv'}:3: the map") + ".*"
                       + re.escape(f"training label ({tmp_path / 'labels.csv'}:3)")):
        label_tables.load_label_set(tmp_path / "labels.csv", None, None, RESOLVED, ["MRPC/pretrained"], test_path=tmp_path / "test.csv")


def test_a_label_card_made_on_other_weights_is_refused(tmp_path):
    from bertology_core.patterns import label_tables

    (tmp_path / "labels.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\n")
    card = tmp_path / "m.json"
    card.write_text('{"model_spec": "package:x", "weights_sha256": "aaaa", "labels": "labels.csv"}')
    assert label_tables.find_label_card(tmp_path, "package:x") == card and label_tables.find_label_card(tmp_path, "other") is None
    resolved = {"weights_sha256": "bbbb", "num_hidden_layers": 2, "num_attention_heads": 4}
    with pytest.raises(label_tables.LabelsError, match="field 'weights_sha256'.*made on other weights"):
        label_tables.load_label_set(tmp_path / "labels.csv", card, None, resolved, ["MRPC/pretrained"])
    resolved["weights_sha256"] = "aaaa"
    label_set = label_tables.load_label_set(tmp_path / "labels.csv", card, None, resolved, ["RTE/pretrained"])
    assert label_set.labels.height == 0 and label_set.second_pass is None  # labels of dumps the run does not make are not used
    assert label_set.left_out == {"MRPC/pretrained": "not a dump of this run"}


def test_labels_of_a_model_fine_tuned_with_another_recipe_are_left_out(tmp_path):
    from bertology_core.patterns import label_tables

    evaluation = {"model": {"weights_sha256": "aaaa"}, "task": "MRPC", "state": "finetuned", "seed": 1, "train_examples": 3668,
                  "hyperparameters": {"learning_rate": 2e-5, "epochs": 3}}
    (tmp_path / "labels.csv").write_text("task,state,idx,layer,head,label\nMRPC,pretrained,3,0,1,vertical\n"
                                         "MRPC,finetuned/seed1,3,0,1,diagonal\n")
    card = tmp_path / "m.json"
    card.write_text(json.dumps({"model_spec": "x", "weights_sha256": "aaaa", "labels": "labels.csv",
                                "states": {"MRPC/finetuned/seed1": label_tables.recipe_fingerprint(evaluation)}}))
    resolved = {"weights_sha256": "aaaa", "num_hidden_layers": 2, "num_attention_heads": 4}
    keys = ["MRPC/pretrained", "MRPC/finetuned/seed1"]
    same = label_tables.load_label_set(tmp_path / "labels.csv", card, None, resolved, keys, {"MRPC/finetuned/seed1": evaluation})
    assert same.labels.height == 2 and same.left_out == {}
    other = {**evaluation, "hyperparameters": {"learning_rate": 1e-4, "epochs": 3}}
    changed = label_tables.load_label_set(tmp_path / "labels.csv", card, None, resolved, keys, {"MRPC/finetuned/seed1": other})
    assert changed.labels["state"].to_list() == ["pretrained"] and "another recipe" in changed.left_out["MRPC/finetuned/seed1"]
    # the fingerprint's format predates the state names (the state hashed as states.FINGERPRINT_NAMES spells it,
    # "init": "pretrained" for finetuned), so the shipped cards still match; this is what that format gives for `evaluation`
    assert label_tables.recipe_fingerprint(evaluation) == "765265590b6df30ae2a7e68a575a8ac9fe0dfef4153a4c18795f8b677ad290b2"


@pytest.mark.parametrize("truth_structure", [0.6, 1.2])
def test_rule_thresholds_fitted_to_labels_recover_the_labelling_rule(truth_structure):
    """Labels made with more structure required than the start: coordinate ascent finds it, above 1 too (the
    structure is a sum of two excesses)."""
    from bertology_core.patterns import label_tables

    rng = np.random.default_rng(0)
    stripe, band = rng.uniform(0, 1.5, 400), rng.uniform(0, 0.05, 400)
    features = pl.DataFrame({"stripe_excess": stripe, "band_excess": band, "line_excess": np.zeros(400),
                             "within_segment": np.full(400, np.nan)})
    truth = np.where(stripe + band >= truth_structure, "vertical", "heterogeneous")
    start = feature_tables.RuleThresholds.neutral()
    assert (label_tables.rule_labels(features, start) != truth).sum() >= 10
    fitted = label_tables.fit_rule_thresholds(features, truth, start)
    assert abs(fitted.structure - truth_structure) <= 0.05
    assert (label_tables.rule_labels(features, fitted) == truth).mean() > 0.98


def test_validation_split_is_stratified_and_seeded():
    from bertology_core.patterns import label_tables

    labels = np.array(["vertical"] * 60 + ["diagonal"] * 30 + ["block"] * 10)
    split = label_tables.validation_split(labels, 0.3, seed=0)
    assert (split == "held_out").sum() == 30
    assert [(split[labels == c] == "held_out").sum() for c in ("vertical", "diagonal", "block")] == [18, 9, 3]
    assert (split == label_tables.validation_split(labels, 0.3, seed=0)).all()


def test_blind_second_pass_kappa():
    from bertology_core.patterns import label_tables

    keys = {"task": ["MRPC"] * 4, "state": ["pretrained"] * 4, "idx": [1, 2, 3, 4], "layer": [0] * 4, "head": [0] * 4}
    first = pl.DataFrame({**keys, "label": ["vertical", "vertical", "diagonal", "diagonal"]})
    second = pl.DataFrame({**keys, "label": ["vertical", "diagonal", "diagonal", "diagonal"]})
    result = label_tables.pass_agreement(first, second)
    assert result["maps"] == 4 and result["agreement"] == 0.75
    assert result["macro_f1_against_first"] == pytest.approx((2 / 3 + 0.8) / 2)  # F1 vertical 2/3, diagonal 0.8
    assert result["cohen_kappa"] == pytest.approx(0.5)  # p_o 0.75, p_e 0.5


def test_label_sheet_is_a_png_of_the_grid():
    from bertology_core.patterns import label_tables

    maps = [np.eye(5), np.full((7, 7), 1 / 7)]
    specials = [np.array([True, False, False, False, True]), np.zeros(7, dtype=bool)]
    data = label_tables.label_sheet(maps, specials, columns=2, cell=20)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"IHDR" in data[:20]


# Checks of scikit-learn's estimator contract that cannot apply to PatternCNN, and why
PATTERN_CNN_NOT_APPLICABLE = {
    "check_classifiers_train": (
        "the first image_size**2 columns are a map the CNN standardises per map (it reads a map's shape, not its "
        "scale), so the checks' data, whose first column is a one-pixel 'map', lose that column; the CNN learns "
        "separable maps in test_the_cnn_learns_separable_patterns_under_cross_validation"
    ),
}


@parametrize_with_checks([PatternCNN(image_size=1, epochs=30, batch_size=8)],
                         expected_failed_checks=lambda estimator: PATTERN_CNN_NOT_APPLICABLE)
def test_the_pattern_cnn_keeps_scikit_learns_estimator_contract(estimator, check):
    check(estimator)
