"""Probing and syntactic heads on hand-made sentences: word-piece alignment, pooling, control labels,
probes, Clark et al.'s word-level attention, head accuracy and offset baseline, all checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bertology_core.probing import probes, syntactic_heads
from conftest import TINY_BERT

WORDS = ["A", "dog", "barked", "loudly", "."]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TINY_BERT)


def test_words_align_to_their_pieces_and_truncation_drops_cut_words(tokenizer):
    aligned = probes.align_words(tokenizer, [WORDS], max_length=64)
    # the tiny vocabulary splits "barked" into 6 pieces and "loudly" into 5: [CLS] a dog b ##a ... . [SEP]
    assert aligned.piece_words[0] == [-1, 0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, -1]
    assert aligned.complete[0].all() and aligned.num_words == [5]
    cut = probes.align_words(tokenizer, [WORDS], max_length=12)  # [CLS] + 10 pieces + [SEP]: "loudly" loses pieces
    assert cut.piece_words[0] == [-1, 0, 1, 2, 2, 2, 2, 2, 2, 3, 3, -1]
    assert cut.complete[0].tolist() == [True, True, True, False, False]


def test_first_and_mean_pooling_by_hand(tokenizer):
    aligned = probes.align_words(tokenizer, [WORDS], max_length=64)
    first = probes.pooling_matrix(aligned.piece_words[0], 5, "first", 16)
    mean = probes.pooling_matrix(aligned.piece_words[0], 5, "mean", 16)
    assert first[2].nonzero()[0].tolist() == [3] and first.sum() == 5
    assert np.allclose(mean[2, 3:9], 1 / 6) and mean[2].sum() == pytest.approx(1) and mean[:, [0, 15]].sum() == 0
    model = AutoModel.from_pretrained(TINY_BERT)
    features, complete = probes.word_representations(model, aligned, "mean")
    assert features.shape == (model.config.num_hidden_layers + 1, 5, model.config.hidden_size) and complete.all()
    with torch.no_grad():
        states = model(input_ids=torch.tensor([aligned.input_ids[0]]), output_hidden_states=True).hidden_states
    expected = torch.stack(states)[:, 0, 3:9].mean(dim=1)  # "barked": the mean of its 6 pieces, every layer
    assert np.allclose(features[:, 2], expected.numpy(), atol=1e-5)
    # stored in float16 (as probe_features stores them): the float32 result, rounded
    half, _ = probes.word_representations(model, aligned, "mean", dtype=np.float16)
    assert half.dtype == np.float16 and np.array_equal(half, torch.from_numpy(features).to(torch.float16).numpy())
    # or written into a given array (probe_features: a memory map of its output file), which must be of their shape
    given = np.zeros_like(half)
    filled, _ = probes.word_representations(model, aligned, "mean", dtype=np.float16, out=given)
    assert filled is given and np.array_equal(given, half)
    with pytest.raises(ValueError, match="out is a float16"):
        probes.word_representations(model, aligned, "mean", dtype=np.float16, out=given[:, :4])


def test_control_labels_are_fixed_per_type_and_follow_the_label_distribution():
    labels = np.array([0] * 700 + [1] * 200 + [2] * 100)
    types = [f"w{i}" for i in range(3000)]
    control = probes.control_labels(types, labels, 3, seed=1)
    assert control == probes.control_labels(list(reversed(types)), labels, 3, seed=1)  # order does not matter
    shares = np.bincount(list(control.values()), minlength=3) / len(control)
    assert np.allclose(shares, [0.7, 0.2, 0.1], atol=0.03)
    assert control != probes.control_labels(types, labels, 3, seed=2)


SETTINGS = dict(max_epochs=60, patience=3, validation_share=0.2, batch_size=100, learning_rate=0.01, weight_decay=1e-4, seed=0)


def layered_data(words=1200, seed=0):
    """Layer 0: noise; layer 1: the label written linearly into the features (plus noise). 10 words a sentence."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=words)
    noise = rng.normal(size=(words, 8))
    signal = noise.copy()
    signal[np.arange(words), labels] += 3.0
    return np.stack([noise, signal]).astype(np.float32), labels, np.arange(words) // 10


def test_layer_probes_find_the_layer_that_holds_the_labels():
    features, labels, sentences = layered_data()
    probe = probes.fit_layer_probes(features[:, :1000], labels[:1000], 4, probes.ProbeSettings(**SETTINGS), sentences[:1000])
    accuracy = probes.probe_accuracy(probe, features[:, 1000:], labels[1000:])
    assert accuracy[0] < 0.4 and accuracy[1] > 0.9
    # each layer keeps its own best epoch: the noise layer's comes early, the signal layer keeps improving
    assert probe.best_epoch.shape == (2,) and probe.best_epoch[0] < probe.best_epoch[1]
    assert probe.held_out_loss[1] < probe.held_out_loss[0] and probe.epochs_run <= SETTINGS["max_epochs"]


def test_probes_stop_once_no_layer_improves_on_held_out_sentences():
    """Labels unrelated to the features: held-out loss stops improving soon, and training stops ``patience``
    epochs after the last improvement, far before the cap."""
    rng = np.random.default_rng(2)
    features = rng.normal(size=(2, 1000, 32)).astype(np.float32)
    labels = rng.integers(0, 3, size=1000)
    probe = probes.fit_layer_probes(features, labels, 3, probes.ProbeSettings(**SETTINGS), np.arange(1000) // 10)
    assert probe.epochs_run == probe.best_epoch.max() + SETTINGS["patience"] < 20, probe


def test_held_out_sentences_keep_each_sentence_on_one_side():
    sentences = np.repeat(np.arange(20), 3)
    held = probes.held_out_sentences(sentences, 0.25, seed=0)
    assert len(np.unique(sentences[held])) == 5 and not set(sentences[held]) & set(sentences[~held])
    assert (held == probes.held_out_sentences(sentences, 0.25, seed=0)).all()
    assert probes.held_out_sentences(np.array([0, 0, 1]), 0.01, 0).sum() in (1, 2)  # at least one sentence held out
    with pytest.raises(ValueError, match="2 training sentences"):
        probes.held_out_sentences(np.zeros(5, int), 0.1, 0)


def test_the_early_stopped_probe_matches_a_converged_logistic_regression():
    """On data a linear model can mostly but not perfectly separate, our probe's dev accuracy is within 0.03
    of scikit-learn's LogisticRegression run to convergence (C = 1), layer by layer."""
    rng = np.random.default_rng(1)
    words = 3000
    labels = rng.integers(0, 5, size=words)
    centres = rng.normal(size=(5, 16))
    features = np.stack([centres[labels] * scale + rng.normal(size=(words, 16)) for scale in (0.3, 0.8)]).astype(np.float32)
    sentences = np.arange(words) // 12
    probe = probes.fit_layer_probes(features[:, :2000], labels[:2000], 5, probes.ProbeSettings(**SETTINGS), sentences[:2000])
    ours = probes.probe_accuracy(probe, features[:, 2000:], labels[2000:])
    reference = probes.reference_accuracy(features[:, :2000], labels[:2000], features[:, 2000:], labels[2000:], 1.0)
    assert 0.3 < reference[0] < reference[1] < 0.95, reference  # neither trivial nor separable
    assert np.abs(ours - reference).max() < 0.03, (ours, reference)


def zipf_words(words: int, types: int, seed: int):
    """Sentences of word types drawn from a Zipf law; a type's vector is fixed plus a little noise per token,
    its task label depends on the type (one of 4 classes, like a tag) and on a noisy feature direction."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, types + 1)
    draws = rng.choice(types, size=words, p=(1 / ranks) / (1 / ranks).sum())
    vectors = rng.normal(size=(types, 24))
    tags = rng.integers(0, 4, size=types)
    vectors[np.arange(types), tags] += 1.5  # the tag is linearly readable, not perfectly
    features = (vectors[draws] + 0.5 * rng.normal(size=(words, 24)))[None].astype(np.float32)
    return features, tags[draws], np.array([f"t{d}" for d in draws]), np.arange(words) // 15


def test_selectivity_of_the_early_stopped_probe_matches_a_converged_logistic_regression():
    """Hewitt and Liang's control task on Zipf-distributed word types (memorising rare types is what the control
    probe needs, so its stopping moves selectivity most): our probe's task accuracy, control accuracy and
    selectivity are each within 0.03 of scikit-learn's LogisticRegression (C = 1) fitted to the same words."""
    features, tags, types, sentences = zipf_words(4000, 600, seed=3)
    train, dev = slice(0, 3000), slice(3000, None)
    control = probes.control_labels(list(types), tags[train], 4, seed=0)
    control_labels = np.array([control[t] for t in types])
    settings = probes.ProbeSettings(**SETTINGS)
    fitted = ~probes.held_out_sentences(sentences[train], settings.validation_share, settings.seed)
    ours, reference = {}, {}
    for kind, labels in (("task", tags), ("control", control_labels)):
        probe = probes.fit_layer_probes(features[:, train], labels[train], 4, settings, sentences[train])
        ours[kind] = probes.probe_accuracy(probe, features[:, dev], labels[dev])[0]
        reference[kind] = probes.reference_accuracy(features[:, train][:, fitted], labels[train][fitted], features[:, dev], labels[dev], 1.0)[0]
    assert 0.3 < reference["control"] < reference["task"] < 0.97, reference  # neither trivial nor separable
    assert abs(ours["task"] - reference["task"]) < 0.03 and abs(ours["control"] - reference["control"]) < 0.03, (ours, reference)
    selectivity = ours["task"] - ours["control"], reference["task"] - reference["control"]
    assert abs(selectivity[0] - selectivity[1]) < 0.03, selectivity


def test_the_reference_refuses_to_report_an_unconverged_fit(monkeypatch):
    features, labels, _ = layered_data(300)
    monkeypatch.setattr(probes, "REFERENCE_MAX_ITERATIONS", 2)
    with pytest.raises(RuntimeError, match="did not converge in 2 lbfgs iterations. Fix: a smaller probing.reference.regularisation"):
        probes.reference_accuracy(features, labels, features, labels, 1.0)


def test_task_and_control_probes_share_one_stopping_rule_and_unseen_dev_types_get_a_label(monkeypatch):
    import polars as pl

    rng = np.random.default_rng(0)
    forms = [["the", "dog", "ran"], ["a", "cat", "sat"], ["the", "cat", "ran"], ["a", "dog", "sat"]] * 5
    upos = [["DET", "NOUN", "VERB"]] * 20
    frames = {"train": pl.DataFrame({"forms": forms, "upos": upos}),
              "dev": pl.DataFrame({"forms": [["the", "zebra", "ran"]], "upos": [["DET", "NOUN", "VERB"]]})}  # "zebra": unseen
    tensors = {"train": rng.normal(size=(2, 60, 4)).astype(np.float32), "dev": rng.normal(size=(2, 3, 4)).astype(np.float32),
               "train_complete": np.ones(60, bool), "dev_complete": np.ones(3, bool)}
    calls = []
    real = probes.fit_layer_probes

    def recording(train, labels, classes, settings, sentences):
        calls.append((settings, np.asarray(sentences).copy(), np.asarray(labels).copy()))
        return real(train, labels, classes, settings, sentences)

    monkeypatch.setattr(probes, "fit_layer_probes", recording)
    settings = probes.ProbeSettings(**SETTINGS)
    table, words = probes.probe_label_sets(frames, tensors, {"upos": {"field": "upos"}}, settings, 1, 0, lowercase=True)
    (task_settings, task_sentences, task_labels), (control_settings, control_sentences, control_labels) = calls
    assert task_settings == control_settings == settings and np.array_equal(task_sentences, control_sentences)
    assert not np.array_equal(task_labels, control_labels) or len(set(task_labels)) == 1
    # every dev word, the unseen type included, is scored under both kinds
    assert words.group_by("kind").len().sort("kind")["len"].to_list() == [2 * 3, 2 * 3]
    assert table["control_accuracy"].is_between(0, 1).all() and table["epochs_run"].min() >= 1


def test_a_capped_reference_is_fitted_on_a_sentence_sample_beside_a_probe_fitted_on_the_same_sentences(monkeypatch):
    """probing.reference.max_train_sentences: the reference and the probe set beside it see the same seeded sample of
    training sentences (the same for task and control), their held-out sentences left out of the reference; uncapped,
    the reported probe itself is set beside the reference, on the words it trained on."""
    import polars as pl

    features, tags, types, sentences = zipf_words(1200, 100, seed=5)
    frames = {split: pl.DataFrame({"forms": [list(types[sentences == s]) for s in np.unique(sentences[part])],
                                   "upos": [[f"T{t}" for t in tags[sentences == s]] for s in np.unique(sentences[part])]})
              for split, part in (("train", slice(0, 900)), ("dev", slice(900, None)))}
    tensors = {"train": features[:, :900], "dev": features[:, 900:], "train_complete": np.ones(900, bool),
               "dev_complete": np.ones(300, bool)}
    settings = probes.ProbeSettings(**SETTINGS)
    fits, references = [], []
    real_fit, real_reference = probes.fit_layer_probes, probes.reference_accuracy
    monkeypatch.setattr(probes, "fit_layer_probes", lambda train, labels, *rest: fits.append(train.shape[1]) or real_fit(train, labels, *rest))
    monkeypatch.setattr(probes, "reference_accuracy", lambda train, labels, *rest: references.append(
        train.rows(layers=0)) or real_reference(train, labels, *rest))
    uncapped, _ = probes.probe_label_sets(frames, tensors, {"upos": {"field": "upos"}}, settings, 1, 0, lowercase=True,
                                           reference_regularisation=1.0, reference_sentences=None)
    assert fits == [900, 900]  # no extra probe: the reported one is beside the reference
    assert uncapped["reference_probe_accuracy"].to_list() == uncapped["accuracy"].to_list()
    held = probes.held_out_sentences(sentences[:900], settings.validation_share, settings.seed)
    assert uncapped["reference_train_words"].to_list() == [int((~held).sum())]
    assert np.array_equal(references[0], features[0, :900][~held])
    fits.clear(), references.clear()
    capped, _ = probes.probe_label_sets(frames, tensors, {"upos": {"field": "upos"}}, settings, 1, 0, lowercase=True,
                                         reference_regularisation=1.0, reference_sentences=20)
    sample = probes.sentence_sample(sentences[:900], 20, settings.seed)
    assert len(np.unique(sentences[:900][sample])) == 20 and fits == [900, int(sample.sum()), 900, int(sample.sum())]
    fitted = np.flatnonzero(sample)[~probes.held_out_sentences(sentences[:900][sample], settings.validation_share, settings.seed)]
    assert np.array_equal(references[0], features[0, fitted]) and np.array_equal(references[1], features[0, fitted])
    assert capped["reference_train_words"].to_list() == [len(fitted)]
    assert capped["accuracy"].to_list() == uncapped["accuracy"].to_list()  # the reported probe is the same
    # beside the reference: the probe fitted by the same rule on the sampled sentences, scored on the same dev words
    vocabulary = probes.label_vocabulary([f"T{t}" for t in tags[:900]], 1)
    dev_ids = probes.encode_labels([f"T{t}" for t in tags[900:]], vocabulary)
    train_ids = probes.encode_labels([f"T{t}" for t in tags[:900]], vocabulary)
    beside = real_fit(features[:, :900][:, sample], train_ids[sample], len(vocabulary), settings, sentences[:900][sample])
    assert capped["reference_probe_accuracy"].to_list() == probes.probe_accuracy(beside, features[:, 900:], dev_ids).tolist()
    # the sample is not the probe's held-out sentences (the two draws use different streams of the seed)
    assert not np.array_equal(sample, probes.held_out_sentences(sentences[:900], settings.validation_share, settings.seed))
    assert capped["reference_accuracy"].is_between(0, 1).all()


def test_word_level_attention_sums_over_attended_pieces_and_averages_over_attending_pieces():
    # pieces: [CLS] w0 w1a w1b w2 [SEP]
    piece_words = [-1, 0, 1, 1, 2, -1]
    probs = np.array([
        [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
        [0.1, 0.2, 0.3, 0.2, 0.1, 0.1],  # w0: to w1 = 0.3 + 0.2
        [0.0, 0.6, 0.1, 0.1, 0.1, 0.1],  # w1a
        [0.2, 0.2, 0.2, 0.0, 0.4, 0.0],  # w1b: w1 from = mean of w1a and w1b
        [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],
        [0.2, 0.2, 0.2, 0.2, 0.1, 0.1],
    ])
    words = syntactic_heads.word_level_attention(probs[None, None], piece_words, 3)[0, 0]
    expected = np.array([
        [0.2, 0.5, 0.1],
        [(0.6 + 0.2) / 2, (0.2 + 0.2) / 2, (0.1 + 0.4) / 2],
        [0.1, 0.2, 0.5],
    ])
    assert np.allclose(words, expected)
    # the diagonal never wins: w2's largest weight is on itself, so it predicts w1 (1-based 2)
    assert syntactic_heads.predicted_heads(words, "dep->head").tolist() == [2, 1, 2]
    # head<-dep: the head of word i is the word that attends most to i
    assert syntactic_heads.predicted_heads(words, "head<-dep").tolist() == [2, 1, 2]


def test_offset_baseline_clamps_to_the_root_and_the_last_word():
    assert syntactic_heads.offset_predictions(4, -1).tolist() == [0, 1, 2, 3]
    assert syntactic_heads.offset_predictions(4, 1).tolist() == [2, 3, 4, 4]
    assert syntactic_heads.offset_predictions(4, -3).tolist() == [0, 0, 0, 1]


def test_relation_accuracy_best_head_and_baseline_by_hand():
    # "the dog barked ." : det(dog<-the), nsubj(barked<-dog), root, punct; 1 layer, 2 heads
    heads, relations = [2, 3, 0, 3], ["det", "nsubj", "root", "punct"]
    attention = np.zeros((1, 2, 4, 4))
    attention[0, 0] = [[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]]  # head 0: every word to its head
    attention[0, 1] = [[0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]]  # head 1: mostly wrong
    counts = syntactic_heads.RelationCounts(1, 2)
    counts.add(attention, heads, relations, np.ones(4, bool))
    counts.add(attention, heads, relations, np.array([True, False, True, True]))  # "dog" has no representation
    table = counts.best(min_words=1)
    det = table.filter(table["relation"] == "det").row(0, named=True)
    # the second sentence cannot predict "dog" (not a candidate): det is right once in two
    assert det["words"] == 2 and (det["layer"], det["head"]) == (0, 0) and det["accuracy"] == 0.5
    assert det["direction"] == "dep->head" and det["clark_name"] == "1-1"
    # offset +1 puts the head of "the" on "dog", right in both sentences
    assert det["baseline_offset"] == 1 and det["baseline_accuracy"] == 1.0
    assert set(table["relation"]) == {"all", "det", "nsubj"}  # root and punct are left out of the table
    everything = table.filter(table["relation"] == "all").row(0, named=True)
    assert everything["words"] == 7  # the "all" row counts every evaluated word, root and punct included
    per_head = counts.per_head()
    assert per_head.height == 5 * 2 * 1 * 2  # relations (with all) x directions x layers x heads


def test_relation_probe_input_pairs_each_word_with_its_head():
    import polars as pl

    frame = pl.DataFrame({"heads": [[2, 0, 2], [0, 1]]})  # two sentences: heads are 1-based, 0 = root
    assert probes.head_positions(frame).tolist() == [1, -1, 1, -1, 3]
    features = np.arange(5, dtype=np.float16)[None, :, None]  # one layer, word i's vector = [i]
    pairs = probes.WordFeatures(features, np.arange(5), probes.head_positions(frame))
    assert pairs.shape == (1, 5, 2) and pairs.rows()[0].tolist() == [[0, 1], [1, 0], [2, 1], [3, 0], [4, 3]]  # root: zeros
    assert pairs.rows().dtype == np.float32 and pairs.subset(np.array([4, 1])).rows(layers=0).tolist() == [[4, 3], [1, 0]]
    assert probes.head_has_representation(np.array([True, False, True, True, True]), frame).tolist() == [False, True, False, True, True]


def test_word_features_standardise_a_layer_at_a_time_as_over_the_whole_tensor():
    rng = np.random.default_rng(0)
    stored = (rng.standard_normal((3, 4001, 24)) * 3 + 1).astype(np.float16)
    heads = rng.integers(-1, 4001, 4001)
    for view in (probes.WordFeatures(stored, np.arange(4001)), probes.WordFeatures(stored, np.arange(4001), heads)):
        picked = view.subset(rng.random(4001) > 0.3)
        whole = torch.from_numpy(picked.rows())  # every word's features at once, as the probes held them
        mean, std = picked.statistics()
        assert torch.equal(mean, whole.mean(dim=1, keepdim=True)) and torch.equal(std, whole.std(dim=1, keepdim=True))
        rows = np.array([5, 0, 17])
        assert np.array_equal(picked.rows(rows), whole.numpy()[:, rows])


def test_probe_features_are_written_and_read_through_memory_maps_with_the_same_probes(tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    from bertology_core.data import mapped

    rng = np.random.default_rng(1)
    layers, words, hidden = 3, 6000, 32
    values = (rng.standard_normal((layers, words, hidden)) * 2).astype(np.float16)
    complete = (rng.random(words) > 0.1).astype(np.uint8)
    path = tmp_path / "features.safetensors"
    with mapped.write_mapped(path, {"train": (values.shape, np.float16), "train_complete": ((words,), np.uint8)},
                             {"pooling": "first"}) as tensors:
        for start in range(0, words, 1000):  # filled a batch at a time, as probe_features does
            tensors["train"][:, start:start + 1000] = values[:, start:start + 1000]
        tensors["train_complete"][:] = complete
    assert not list(tmp_path.glob(".tmp-*"))  # renamed into place
    # a safetensors file: safetensors itself reads it
    loaded = load_file(str(path))
    assert np.array_equal(loaded["train"], values) and np.array_equal(loaded["train_complete"], complete)
    stored, metadata = mapped.read_mapped(path)
    assert isinstance(stored["train"], np.memmap) and metadata == {"pooling": "first"}
    # probes on the map equal probes on the array in memory, bit for bit, with the map released as it is read
    monkeypatch.setattr(mapped, "RELEASE_EVERY", 1 << 16)  # released many times over
    labels = (values[1, :, 0] > 0).astype(np.int64) + (values[2, :, 1] > 0)
    sentences = np.repeat(np.arange(words // 20), 20)
    settings = probes.ProbeSettings(max_epochs=2, patience=1, validation_share=0.1, batch_size=256, learning_rate=0.01,
                                     weight_decay=1e-4, seed=0)
    heads = rng.integers(-1, words, words)
    for found in (None, heads):
        in_memory = probes.fit_layer_probes(probes.WordFeatures(values, np.arange(words), found), labels, 3, settings, sentences)
        on_map = probes.fit_layer_probes(probes.WordFeatures(stored["train"], np.arange(words), found), labels, 3, settings, sentences)
        assert torch.equal(in_memory.weight, on_map.weight) and torch.equal(in_memory.std, on_map.std)
        assert np.array_equal(probes.probe_correct(in_memory, probes.WordFeatures(values, np.arange(words), found), labels),
                              probes.probe_correct(on_map, probes.WordFeatures(stored["train"], np.arange(words), found), labels))
    # chunked scoring (held-out losses, dev labels) equals scoring every word at once, and an odd chunk size too
    reference = {}
    for size in (10**9, 97):
        monkeypatch.setattr(probes, "WORDS_PER_CHUNK", size)
        fitted = probes.fit_layer_probes(probes.WordFeatures(stored["train"], np.arange(words)), labels, 3, settings, sentences)
        found = (fitted.weight, fitted.held_out_loss, probes.probe_correct(fitted, stored["train"], labels))
        if not reference:
            reference = found
        assert torch.equal(found[0], reference[0]) and np.array_equal(found[1], reference[1]) and np.array_equal(found[2], reference[2])
    # the layout probe_features writes (float16 features and uint8 masks of two splits, an odd word count): each
    # tensor starts aligned to its dtype, and metadata must be strings
    layout = {"train": ((2, 7, 4), np.float16), "train_complete": ((7,), np.uint8), "dev": ((2, 5, 4), np.float16),
              "dev_complete": ((5,), np.uint8)}
    with mapped.write_mapped(tmp_path / "layout.safetensors", layout) as tensors:
        tensors["dev"][:] = 2.0
    found, _ = mapped.read_mapped(tmp_path / "layout.safetensors")
    assert all(array.ctypes.data % array.itemsize == 0 for array in found.values()) and float(found["dev"].sum()) == 80.0
    with pytest.raises(TypeError, match="strings"):
        with mapped.write_mapped(tmp_path / "bad.safetensors", layout, {"sentences": 3}):
            pass
    # a truncated file is refused with its name
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="features.safetensors.*truncated"):
        mapped.read_mapped(path)


def test_a_map_read_in_full_is_released_from_resident_memory_as_the_gathers_go(tmp_path, monkeypatch):
    from bertology_core.data import mapped

    def resident_mb() -> float:
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024

    path = tmp_path / "big.safetensors"
    layers, words, hidden = 4, 60_000, 512  # 234 MB of float16
    with mapped.write_mapped(path, {"train": ((layers, words, hidden), np.float16)}) as tensors:
        tensors["train"][:] = 1.0
    stored, _ = mapped.read_mapped(path)
    before = resident_mb()
    assert float(stored["train"].sum(dtype=np.float32)) == layers * words * hidden
    assert resident_mb() - before > 200  # what a job has read through a map is resident...
    mapped.release(stored["train"][1])  # ...until released (a view releases its map)
    assert resident_mb() - before < 20
    # gathers release the map once RELEASE_EVERY bytes were gathered since the last release
    released = []
    monkeypatch.setattr(mapped, "_release_mapping", lambda found: released.append(found))
    monkeypatch.setattr(mapped, "_gathered", {})
    view = probes.WordFeatures(stored["train"], np.arange(words))
    order = np.random.default_rng(0).permutation(words)
    for start in range(0, words, 512):  # 2 MB a gather
        assert view.rows(order[start:start + 512]).shape == (layers, len(order[start:start + 512]), hidden)
    assert len(released) == (layers * words * hidden * 2) // mapped.RELEASE_EVERY  # the float16 bytes gathered
    view.rows(np.arange(3))  # an array in memory is never released
    in_memory = probes.WordFeatures(np.ones((2, 10, 4), np.float16), np.arange(10))
    monkeypatch.setattr(mapped, "RELEASE_EVERY", 1)
    count = len(released)
    in_memory.rows()
    assert len(released) == count


def test_held_out_best_head_is_chosen_on_one_half_of_the_sentences_and_scored_on_the_other():
    # sentence 0 (selection): head 0 right on det; sentences 1-2 (report): head 1 right, head 0 wrong on det
    heads, relations = [2, 3, 0, 3], ["det", "nsubj", "root", "punct"]
    right, wrong = np.zeros((4, 4)), np.zeros((4, 4))
    right[:] = [[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]]  # every word to its head
    wrong[:] = [[0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]]
    counts = syntactic_heads.RelationCounts(1, 2)
    counts.add(np.stack([right, wrong])[None], heads, relations, np.ones(4, bool))
    for _ in range(2):
        counts.add(np.stack([wrong, right])[None], heads, relations, np.ones(4, bool))
    selection = np.array([True, False, False])
    table = syntactic_heads.held_out_best(counts, selection, resamples=200, min_words=1)
    det = table.filter(table["relation"] == "det").row(0, named=True)
    # chosen on sentence 0 (head 0, perfect there), it is wrong on every report sentence
    assert (det["layer"], det["head"]) == (0, 0) and det["selection_accuracy"] == 1.0 and det["accuracy"] == 0.0
    assert det["selection_words"] == 1 and det["report_words"] == 2
    # the best offset (+1, chosen on sentence 0) is right on both report sentences: the difference is -1, surely
    assert det["baseline_offset"] == 1 and det["baseline_accuracy"] == 1.0
    assert det["difference"] == -1.0 and det["ci_low"] == det["ci_high"] == -1.0
    # on all three sentences, Clark et al.'s protocol would pick head 1 (right twice): choosing on the reported
    # data is what the held-out table avoids
    assert counts.best(min_words=1).filter(counts.best(min_words=1)["relation"] == "det")["head"][0] == 1


def test_voita_accuracy_is_counted_per_direction_at_token_level_with_each_directions_own_baseline():
    # pieces: [CLS] the dog bark ##ed loudly [SEP]; det(dog<-the), nsubj(barked<-dog), root, advmod(barked<-loudly)
    piece_words = [-1, 0, 1, 2, 2, 3, -1]
    heads, relations = [2, 3, 0, 3], ["det", "nsubj", "root", "advmod"]
    maps = np.zeros((1, 2, 7, 7))
    # head 0: the verb's two pieces attend to the subject ("dog", piece 2); the subject attends to "the"
    for query, key in ((1, 2), (2, 1), (3, 2), (4, 2), (5, 1)):
        maps[0, 0, query, key] = 1.0
    # head 1: "dog"'s largest weight is [SEP], its largest real one "##ed" (a piece of its head word: a hit);
    # the verb's first piece attends to the subject, its second to "loudly"
    maps[0, 1, 2, [6, 4]] = [0.6, 0.3]
    for query, key in ((1, 5), (3, 2), (4, 5), (5, 4)):
        maps[0, 1, query, key] = 1.0
    counts = syntactic_heads.VoitaCounts(1, 2)
    counts.add(maps, piece_words, heads, relations, np.ones(4, bool))
    table = counts.table(min_pairs=1)
    assert set(table["relation"]) == {"det", "nsubj", "advmod"}  # root has no head word; punct would be left out
    row = {(r["relation"], r["direction"], r["head"]): r for r in table.iter_rows(named=True)}
    # head->dep: each of the split verb's pieces is a trial; offsets from them to "dog" are -1 and -2, one each
    verb = row[("nsubj", "head->dep", 0)]
    assert verb["trials"] == 2 and verb["accuracy"] == 1.0
    assert verb["baseline_offset"] == -1 and verb["baseline_accuracy"] == 0.5  # a tie: the smallest |offset|
    assert row[("nsubj", "head->dep", 1)]["accuracy"] == 0.5  # one piece of two
    # dep->head: one trial ("dog"), offsets +1 and +2 both land on "barked": a baseline that is always right
    subject = row[("nsubj", "dep->head", 0)]
    assert subject["trials"] == 1 and subject["accuracy"] == 0.0
    assert subject["baseline_offset"] == 1 and subject["baseline_accuracy"] == 1.0
    assert row[("nsubj", "dep->head", 1)]["accuracy"] == 1.0  # [SEP] is not a key the maximum is taken over
    # a pair with a word that is not complete is left out; min_pairs leaves out a rare relation
    counts.add(maps, piece_words, heads, relations, np.array([True, False, True, True]))
    assert counts.pairs == {"det": 1, "nsubj": 1, "advmod": 2}
    assert set(counts.table(min_pairs=2)["relation"]) == {"advmod"}
    only = syntactic_heads.VoitaCounts(1, 2, frozenset({"nsubj"}))
    only.add(maps, piece_words, heads, relations, np.ones(4, bool))
    assert set(only.table()["relation"]) == {"nsubj"} and only.table().height == 2 * 2  # directions x heads


def test_voita_counts_come_from_the_same_pass_as_clark_et_als_and_match_the_models_attention(tokenizer):
    from bertology_core.engine.attention_function import use_engine

    aligned = probes.align_words(tokenizer, [WORDS], max_length=64)  # "barked" 6 pieces (2-7), "loudly" 5 (8-12)
    heads, relations = [2, 3, 0, 3, 3], ["det", "nsubj", "root", "advmod", "punct"]
    model = use_engine(AutoModel.from_pretrained(TINY_BERT).eval())
    counts = syntactic_heads.relation_counts(model, aligned, [heads], [relations])
    voita = counts.voita.table(min_pairs=1)
    assert counts.words["all"] == 5 and set(voita["relation"]) == {"det", "nsubj", "advmod"}
    trials = {(r["relation"], r["direction"]): r["trials"] for r in voita.iter_rows(named=True)}
    assert trials[("nsubj", "head->dep")] == 6 and trials[("nsubj", "dep->head")] == 1
    assert trials[("advmod", "dep->head")] == 5 and trials[("advmod", "head->dep")] == 6
    # by hand from the eager attention: the verb's pieces' argmax over real keys on "dog" (piece 2)
    eager = AutoModel.from_pretrained(TINY_BERT, attn_implementation="eager").eval()
    with torch.no_grad():
        maps = torch.stack(eager(torch.tensor([aligned.input_ids[0]]), output_attentions=True).attentions)[:, 0].numpy()
    pieces = np.asarray(aligned.piece_words[0])
    word_of_maximum = pieces[np.where(pieces >= 0, maps, -np.inf).argmax(-1)]  # [layers, heads, pieces]
    for dependent, (head, relation) in enumerate(zip(heads, relations)):
        if relation in ("root", "punct"):
            continue
        for direction, query, target in (("dep->head", dependent, head - 1), ("head->dep", head - 1, dependent)):
            expected = (word_of_maximum[:, :, pieces == query] == target).mean(-1)
            got = voita.filter((voita["relation"] == relation) & (voita["direction"] == direction)).sort("layer", "head")
            np.testing.assert_allclose(got["accuracy"].to_numpy(), expected.reshape(-1))


def test_probes_killed_after_a_checkpoint_resume_to_the_same_tables(tmp_path, monkeypatch):
    """Each label set's task and control probes are saved as they are done; killed at the third save (the second
    label set's task probes), the rerun reads back what was saved, fits only the rest and gives the same tables."""
    import polars as pl

    from bertology_core.models import checkpoint
    from conftest import Crash, crash_at

    features, tags, types, sentences = zipf_words(600, 60, seed=5)
    frames = {split: pl.DataFrame({"forms": [list(types[sentences == s]) for s in np.unique(sentences[part])],
                                   "upos": [[f"T{t}" for t in tags[sentences == s]] for s in np.unique(sentences[part])]})
              for split, part in (("train", slice(0, 450)), ("dev", slice(450, None)))}
    tensors = {"train": features[:, :450], "dev": features[:, 450:], "train_complete": np.ones(450, bool),
               "dev_complete": np.ones(150, bool)}
    settings = probes.ProbeSettings(**SETTINGS)
    label_sets = {"upos": {"field": "upos"}, "upos_again": {"field": "upos"}}

    def run(saved=None):
        return probes.probe_label_sets(frames, tensors, label_sets, settings, 1, 0, lowercase=True, reference_regularisation=1.0,
                                       checkpoint=saved)

    table, words = run()
    saved = checkpoint.ArrayCheckpoint(tmp_path / "probes", "settings", every_seconds=0)
    monkeypatch.setattr(checkpoint, "failpoint", crash_at(3))
    with pytest.raises(Crash):
        run(saved)
    monkeypatch.setattr(checkpoint, "failpoint", lambda name: None)
    fits, real_fit = [], probes.fit_layer_probes
    monkeypatch.setattr(probes, "fit_layer_probes", lambda *args: fits.append(1) or real_fit(*args))
    resumed, resumed_words = run(saved)
    assert resumed.equals(table) and resumed_words.equals(words) and (tmp_path / "probes").exists()
    assert len(fits) == 1  # the second label set's control probes: the three saved fits are read back
