"""Token tasks (a label per word; bertology_core/data/tasks.py): declared, read from CoNLL-U, JSON Lines, Parquet or a
Hugging Face dataset, every bad sentence refused with its file, line or sentence, and field; word pieces aligned to
words (bertology_core/inputs/batching.py); scored over words and BIO spans (bertology_core/stats/metrics.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from bertology_core.data import tasks, treebank
from bertology_core.inputs import batching
from bertology_core.models.loading import load_tokenizer
from bertology_core.stats import metrics
from conftest import FIXTURES, REPO, SHARED_DATA, TINY_BERT

UD_SMOKE = FIXTURES / "ud_smoke"
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
UPOS = tasks.shipped_declarations()["EWT-UPOS"]["labels"]


def ner(tmp_path: Path, rows: dict[str, list[dict]], fmt: str = "jsonl", **changes) -> tasks.Task:
    """A BIO task of one's own from JSON Lines (or Parquet) files under ``tmp_path``."""
    for split, records in rows.items():
        path = tmp_path / f"{split}.{fmt}"
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        else:
            pl.DataFrame(records).write_parquet(path)
    raw = {"kind": "token", "scheme": "BIO", "labels": NER_LABELS,
           "files": {"splits": {split: f"{split}.{fmt}" for split in rows}, "text": "tokens", "label": "tags"}} | changes
    return tasks.declare("ner", raw, tmp_path)


TRAIN = [{"tokens": ["Ada", "Lovelace", "lived", "in", "London"], "tags": ["B-PER", "I-PER", "O", "O", "B-LOC"]},
         {"tokens": ["Paris", "is", "big"], "tags": ["B-LOC", "O", "O"]}]
DEV = [{"tokens": ["Alan", "Turing", "left", "New", "York"], "tags": ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]}]


def test_the_shipped_token_tasks_are_declared_with_their_kind_scheme_and_metrics():
    shipped = tasks.declared_tasks({}, {"glue_dir": "glue_data", "ud_dir": "ud"})
    upos, conll = shipped["EWT-UPOS"], shipped["CoNLL-2003"]
    assert upos.is_token and upos.scheme is None and upos.metrics == ("accuracy", "f1_macro") and len(UPOS) == 17
    assert upos.files.path("dev") == Path("ud/en_ewt-ud-dev.conllu") and upos.files.columns.label == "upos"
    assert conll.is_token and conll.scheme == "BIO" and conll.main_metric == "span_f1"
    assert conll.hub.dataset == "lhoestq/conll2003" and conll.hub.columns == tasks.Columns(("tokens",), "ner_tags")
    assert upos.label_dtype == pl.List(pl.Int64) and not shipped["MRPC"].is_token
    # a sequence task's params are what they were before token tasks; a token task's say its kind and scheme
    assert set(shipped["MRPC"].meaning()) == {"name", "label_names", "label_range", "metrics"}
    assert tasks.Task.from_meaning(conll.meaning()) == tasks.Task(
        "CoNLL-2003", conll.label_names, None, conll.metrics, kind="token", scheme="BIO")


def test_ewt_upos_reads_the_real_treebank_as_the_probing_reader_does():
    folder = SHARED_DATA / "ud_ewt"
    if not folder.is_dir():
        pytest.skip(f"UD English EWT not found at {folder}")
    task = tasks.declared_tasks({}, {"glue_dir": "glue_data", "ud_dir": folder})["EWT-UPOS"]
    frames = {split: tasks.read_files(task, split) for split in task.splits}
    assert tasks.check_splits(task, frames, task.files) == []  # the release's own overlaps only (known_overlap)
    for split, frame in frames.items():
        reference = treebank.read_conllu(task.files.path(split))  # conllu's parser, the trees validated
        assert frame["words"].to_list() == reference["forms"].to_list()
        assert frame["label"].to_list() == [[UPOS.index(tag) for tag in tags] for tags in reference["upos"].to_list()]
        assert frame["sentence1"].to_list() == [" ".join(words) for words in reference["forms"].to_list()]
        assert frame["idx"].to_list() == list(range(frame.height))
    assert frames["train"].height > 12_000 and frames["train"]["words"].list.len().sum() > 200_000


def test_conllu_gives_syntactic_words_and_the_declared_column(tmp_path):
    raw = {"kind": "token", "labels": UPOS, "files": {"dir": str(UD_SMOKE), "label": "upos",
                                                      "splits": {"train": "smoke-ud-train.conllu", "dev": "smoke-ud-dev.conllu"}}}
    task = tasks.declare("pos", raw, REPO)
    assert task.files.format == "conllu"  # from the files' extension
    train = tasks.read_files(task, "train")
    assert train["words"][1].to_list() == ["I", "do", "n't", "like", "green", "eggs", "."]  # 2-3 don't: its words
    assert train["words"][2].to_list()[:6] == ["She", "reads", "books", "and", "he", "writes"]  # 5.1: an empty node
    assert [UPOS[i] for i in train["label"][1]] == ["PRON", "AUX", "PART", "VERB", "ADJ", "NOUN", "PUNCT"]
    xpos = tasks.declare("xpos", raw | {"labels": ["DT", "NN", "VBD", "IN", ".", "PRP", "VBP", "RB", "VB", "JJ", "NNS",
                                                   "VBZ", "CC", "NNP", "MD", ",", "VBG", "TO", "WDT", "VBN"],
                                        "files": raw["files"] | {"label": "xpos"}}, REPO)
    assert tasks.read_files(xpos, "train")["label"][0].to_list()[:3] == [0, 1, 2]
    with pytest.raises(tasks.DataError, match=r"smoke-ud-train.conllu:3 \(sent_id smoke-train-1\), word 1 \('The'\): "
                                              r"field 'upos' = 'DET' is not a pos label"):
        tasks.read_files(tasks.declare("pos", raw | {"labels": ["NOUN", "VERB"]}, REPO), "train")


@pytest.mark.parametrize("change, message", [
    ({"files": {"format": "conllu", "label": "form", "splits": {"train": "a", "dev": "b"}}},
     r"files.label: 'form' is not a CoNLL-U column a word's label can be read from"),
    ({"files": {"format": "conllu", "text": "words", "label": "upos", "splits": {"train": "a", "dev": "b"}}},
     r"a CoNLL-U file's words are its FORM column"),
    ({"files": {"format": "csv", "text": "w", "label": "t", "splits": {"train": "a", "dev": "b"}}},
     r"files.format: 'csv' does not hold a token task's examples"),
    ({"files": {"text": ["a", "b"], "label": "t", "splits": {"train": "a.jsonl", "dev": "b.jsonl"}}},
     r"a token task's text is one column"),
    ({"range": [0, 1], "labels": None}, r"a token task labels words with names"),
    ({"scheme": "BIO", "labels": ["O", "I-PER"]}, r"\['I-PER'\] have no B- label to start their span. Fix: add \['B-PER'\]"),
    ({"scheme": "BIO", "labels": ["B-PER", "I-PER"]}, r"O is missing"),
    ({"scheme": "BIO", "labels": ["O", "PER"]}, r"under scheme BIO every label is O, B-<type> or I-<type>"),
    ({"metrics": ["span_f1"]}, r"span_f1 scores the spans of a BIO scheme; t declares none"),
    ({"metrics": ["matthews_correlation"]}, r"\['matthews_correlation'\] do not score a token task"),
    ({"kind": "tokens"}, r"kind: 'tokens' is not a task kind"),
])
def test_a_bad_token_declaration_names_its_key_and_fix(tmp_path, change, message):
    raw = {"kind": "token", "labels": ["O", "B-PER", "I-PER"],
           "files": {"splits": {"train": "a.jsonl", "dev": "b.jsonl"}, "text": "w", "label": "t"}} | change
    with pytest.raises(tasks.DataError, match=message):
        tasks.declare("t", raw, tmp_path)
    with pytest.raises(tasks.DataError, match="a span scheme belongs to a token task"):
        tasks.declare("s", {"labels": ["O", "B-X"], "scheme": "BIO", "files": raw["files"] | {"text": "w"}}, tmp_path)
    with pytest.raises(tasks.DataError, match="does not hold a sequence task's examples"):
        tasks.declare("s", {"labels": ["a", "b"], "files": {"format": "conllu", "label": "upos",
                                                            "splits": {"train": "a", "dev": "b"}}}, tmp_path)


def test_json_lines_and_parquet_read_alike(tmp_path):
    (tmp_path / "j").mkdir()
    (tmp_path / "p").mkdir()
    json_task = ner(tmp_path / "j", {"train": TRAIN, "dev": DEV})
    parquet_task = ner(tmp_path / "p", {"train": TRAIN, "dev": DEV}, fmt="parquet")
    for split in ("train", "dev"):
        frame = tasks.read_files(json_task, split)
        assert frame.equals(tasks.read_files(parquet_task, split))
    assert frame.schema == pl.Schema({"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String,
                                      "words": pl.List(pl.String), "label": pl.List(pl.Int64)})
    assert frame.row(0) == (0, "Alan Turing left New York", None, DEV[0]["tokens"], [1, 2, 0, 3, 4])


@pytest.mark.parametrize("sentence, message", [
    ({"tokens": ["Ada", "left"], "tags": ["B-PER"]}, r"dev.jsonl:2: 2 words in field 'tokens', 1 labels in field 'tags'"),
    ({"tokens": ["Ada", "left"], "tags": ["B-PER", "B-ORG"]},
     r"dev.jsonl:2, word 2 \('left'\): field 'tags' = 'B-ORG' is not a ner label"),
    ({"tokens": ["Ada", "Lovelace"], "tags": ["O", "I-PER"]},
     r"dev.jsonl:2, word 2 \('Lovelace'\): field 'tags' = 'I-PER' follows 'O': an I- without its B-. Fix: tag the span's "
     r"first word B-PER"),
    ({"tokens": ["in", "New", "York"], "tags": ["O", "B-LOC", "I-PER"]}, r"'I-PER' follows 'B-LOC': an I- without its B-"),
    ({"tokens": [], "tags": []}, r"dev.jsonl:2: field 'tokens' is an empty sentence \(idx 1\)"),
    ({"tokens": ["Ada", " "], "tags": ["B-PER", "O"]}, r"dev.jsonl:2: field 'tokens', word 2 = ' ' is not a word"),
    ({"tokens": "Ada left", "tags": ["B-PER", "O"]}, r"field 'tokens' = 'Ada left' is a str, not a list of words"),
    ({"tokens": ["Ada"], "tags": "B-PER"}, r"field 'tags' = 'B-PER' is a str, not a list of labels"),
])
def test_a_bad_sentence_names_its_file_line_word_and_field(tmp_path, sentence, message):
    task = ner(tmp_path, {"train": TRAIN, "dev": [DEV[0], sentence]})
    with pytest.raises(tasks.DataError, match=message):
        tasks.read_files(task, "dev")


def test_a_broken_conllu_line_and_a_sentence_repeated_across_splits(tmp_path):
    text = (UD_SMOKE / "smoke-ud-dev.conllu").read_text().split("\n")
    (tmp_path / "train.conllu").write_text((UD_SMOKE / "smoke-ud-train.conllu").read_text())
    broken = [line.rsplit("\t", 1)[0] if i == 3 else line for i, line in enumerate(text)]
    (tmp_path / "dev.conllu").write_text("\n".join(broken))
    raw = {"kind": "token", "labels": UPOS, "files": {"label": "upos", "splits": {"train": "train.conllu", "dev": "dev.conllu"}}}
    task = tasks.declare("pos", raw, tmp_path)
    with pytest.raises(tasks.DataError, match=r"dev.conllu:4: 9 tab-separated fields, CoNLL-U has 10"):
        tasks.read_files(task, "dev")
    (tmp_path / "dev.conllu").write_text((UD_SMOKE / "smoke-ud-train.conllu").read_text())
    frames = {split: tasks.read_files(task, split) for split in task.splits}
    assert "have the same text as one of split 'train'" in tasks.check_splits(task, frames, task.files)[0]


def test_a_hub_token_dataset_is_read_offline_with_its_classlabel_names(tmp_path, monkeypatch):
    """CoNLL-2003 as the Hub serves it (Parquet with a list of ClassLabel ids), from a folder laid out as the dataset."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    declared = tasks.shipped_declarations()["CoNLL-2003"]
    names = declared["labels"]
    features = datasets.Features({"id": datasets.Value("string"), "tokens": datasets.List(datasets.Value("string")),
                                  "ner_tags": datasets.List(datasets.ClassLabel(names=names))})
    folder = tmp_path / "conll2003" / "data"
    rows = {"train": [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
                      (["Peter", "Blackburn"], ["B-PER", "I-PER"])],
            "validation": [(["CRICKET", "-", "LEICESTERSHIRE", "TAKE", "OVER"], ["O", "O", "B-ORG", "O", "O"])]}
    for split, sentences in rows.items():
        datasets.Dataset.from_dict({"id": [str(i) for i in range(len(sentences))], "tokens": [w for w, _ in sentences],
                                    "ner_tags": [[names.index(t) for t in tags] for _, tags in sentences]},
                                   features=features).to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))
    task = tasks.declare("CoNLL-2003", declared | {"hub": declared["hub"] | {"dataset": str(folder.parent)}}, tmp_path)
    train = tasks.read_split(task, "train", task.hub)
    assert train["words"].to_list() == [w for w, _ in rows["train"]]
    assert [[names[i] for i in ids] for ids in train["label"].to_list()] == [t for _, t in rows["train"]]
    swapped = tasks.declare("CoNLL-2003", declared | {"labels": [names[0], *names[3:5], *names[1:3], *names[5:]],
                                                      "hub": declared["hub"] | {"dataset": str(folder.parent)}}, tmp_path)
    with pytest.raises(tasks.DataError, match=r"field 'ner_tags' holds class ids of \['O', 'B-PER'.*the task declares "
                                              r"labels \['O', 'B-ORG'"):
        tasks.read_split(swapped, "train", swapped.hub)


def test_the_label_of_a_word_goes_on_its_first_piece_and_cut_words_are_counted():
    tokenizer = load_tokenizer(TINY_BERT)
    frame = pl.DataFrame({"idx": [0, 1], "sentence1": ["", ""], "sentence2": [None, None],
                          "words": [["unaffable", "cats", "sat"], ["a"] * 20], "label": [[0, 1, 2], [0] * 20]})
    table = batching.token_table(frame, tokenizer, max_length=12)
    first = table.row(0, named=True)
    pieces = tokenizer.convert_ids_to_tokens(first["input_ids"])
    expected = tokenizer(["unaffable", " cats", " sat"], is_split_into_words=True).word_ids()
    assert len(pieces) == len(expected) and first["word_index"] == batching.first_pieces(expected)
    assert sorted(w for w in first["word_index"] if w >= 0) == [0, 1, 2]
    assert first["word_index"][0] == -1 and first["word_index"][-1] == -1  # [CLS], [SEP]
    for word, start in enumerate(i for i, w in enumerate(first["word_index"]) if w >= 0):
        assert expected[start] == word and (start == 0 or expected[start - 1] != word)
    second = table.row(1, named=True)
    assert second["full_length"] == 22 and len(second["input_ids"]) == 12 and second["unread_words"] == 10
    encoded = batching.from_table(table, 0, 12)
    assert encoded.truncated == 1 and encoded.unread_words == 10 and encoded.word_index[1].tolist().count(-1) == 2
    assert batching.first_pieces([None, 0, 0, 1, None, 2, 2, 2, None]) == [-1, 0, -1, 1, -1, 2, -1, -1, -1]


def test_token_metrics_pool_words_and_span_f1_is_seqevals_on_hand_made_spans():
    seqeval = pytest.importorskip("seqeval.metrics")
    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1", "accuracy", "f1_macro"), kind="token", scheme="BIO")
    O, BP, IP, BL, IL = range(5)
    gold = [np.array([BP, IP, O, BL]), np.array([O, BL, IL, O, BP])]
    # spans: gold PER(0-1) LOC(3) | LOC(1-2) PER(4); predicted PER(0-1) LOC(3) | LOC(1) PER(3-4): 2 of 4 right each way
    predicted = [np.array([BP, IP, O, BL]), np.array([O, BL, O, BP, IP])]
    scores = metrics.compute_metrics(task, predicted, gold)
    assert scores["span_f1"] == pytest.approx(0.5)
    names = [[NER_LABELS[i] for i in s] for s in gold], [[NER_LABELS[i] for i in s] for s in predicted]
    assert scores["span_f1"] == pytest.approx(seqeval.f1_score(*names))
    assert scores["accuracy"] == pytest.approx(6 / 9)  # words pooled over the sentences
    # conlleval's reading (seqeval's default): an I-PER after O opens a span, which matches a gold PER of one word
    lenient = metrics.compute_metrics(task, [np.array([IP, O])], [np.array([BP, O])])
    assert lenient["span_f1"] == 1.0 and lenient["accuracy"] == 0.5
    with pytest.raises(ValueError, match="differ in their sentences or their words"):
        metrics.compute_metrics(task, [np.array([O])], [np.array([O, O])])


def test_the_trivial_tagger_takes_each_words_most_frequent_training_label():
    predict = metrics.word_majority_predictor([["the", "run", "run"], ["a", "run", "the"]], [[0, 2, 1], [0, 2, 0]])
    assert predict(["run", "the", "unseen", "a"]).tolist() == [2, 0, 0, 0]  # run: 2 twice, 1 once; unseen: overall 0
    tie = metrics.word_majority_predictor([["x", "x"]], [[3, 1]])
    assert tie(["x", "y"]).tolist() == [1, 1]  # a tie goes to the lower class id, for the word and overall


def test_a_token_task_in_tasks_is_refused_until_its_stages_exist():
    from bertology_core.workflow import jobs
    from test_jobs import load_config

    plan = jobs.experiment(load_config("configs/smoke.yaml") | {"tasks": ["MRPC", "EWT-UPOS"]}, REPO)
    assert any("config 'tasks' names 'EWT-UPOS', a token task" in problem for problem in jobs.problems(plan))
