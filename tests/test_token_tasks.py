"""Token tasks (a label per word; bertology_core/data/tasks.py): declared, read from CoNLL-U, JSON Lines, Parquet or a
Hugging Face dataset, every bad sentence refused with its file, line or sentence, and field; word pieces aligned to
words (bertology_core/inputs/batching.py); scored over words and BIO spans (bertology_core/stats/metrics.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
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


# --- fine-tuning, evaluation and the verdict of a tagger -------------------------------------------------------------


def test_targets_sit_on_first_pieces_and_word_logits_come_back_in_word_order():
    from bertology_core.finetune import training

    tokenizer = load_tokenizer(TINY_BERT)
    frame = pl.DataFrame({"idx": [0, 1, 2], "sentence1": ["", "", ""], "sentence2": [None, None, None],
                          "words": [["unaffable", "cats"], ["a"] * 20, ["dogs", "\u200b", "sat"]],
                          "label": [[1, 2], list(range(20)), [3, 4, 5]]})
    encoded = batching.from_table(batching.token_table(frame, tokenizer, max_length=12), 0, 12)
    labels = batching.frame_labels(tasks.Task("t", tuple("abcdefghijklmnopqrst"), None, ("accuracy",), kind="token"), frame)
    batch = encoded.collate([2, 0])
    width = batch["input_ids"].shape[1]
    targets = encoded.piece_labels(labels, [2, 0], width)
    words = [encoded.word_index[i].tolist() for i in (2, 0)]
    for row, (example, index) in enumerate(zip((2, 0), words)):
        for position in range(width):
            word = index[position] if position < len(index) else -1
            assert targets[row, position] == (frame["label"][example][word] if word >= 0 else -100)
    assert encoded.words.tolist() == [2, 20, 3] and encoded.unread_words == 10 + 1  # cut, and a zero-width word
    positions = encoded.word_positions([2, 0], width)
    assert positions.tolist() == [22, 24, 0, 1]  # dogs, sat (the zero-width word 23 has no piece); then 0's two words

    class Echo(torch.nn.Module):  # logits that name the piece: position and example
        config = type("Config", (), {"num_labels": 2})()

        def parameters(self):
            return iter([torch.zeros(1)])

        def forward(self, input_ids, **_):
            rows, width = input_ids.shape
            grid = torch.stack([input_ids.float(), torch.arange(width).expand(rows, width).float()], dim=-1)
            return type("Out", (), {"logits": grid})()

    task = tasks.Task("t", ("x", "y"), None, ("accuracy",), kind="token")
    logits = training.predict(Echo(), encoded, batch_size=2)
    assert logits.shape == (25, 2) and np.isnan(logits[23]).all() and np.isnan(logits[12:22]).all()
    first = [i for i, w in enumerate(encoded.word_index[2].tolist()) if w >= 0]
    assert logits[[22, 24], 1].tolist() == first and logits[22, 0] == encoded.input_ids[2][first[0]]
    table = training.predictions_frame(task, frame.with_columns(pl.Series("label", [[0, 1], [0] * 20, [1, 1, 0]])), logits)
    assert table["prediction"][2].to_list()[1] == -1 and len(table["logits"][1]) == 20
    scores = training.prediction_metrics(task, table)
    flat = [p for row in table["prediction"].to_list() for p in row]
    gold = [g for row in table["label"].to_list() for g in row]
    assert scores["accuracy"] == pytest.approx(np.mean(np.array(flat) == np.array(gold)))


def test_a_tagger_fine_tunes_and_is_scored_over_its_words(tmp_path):
    from bertology_core.finetune import training

    task = tasks.Task("pos", tuple(UPOS), None, ("accuracy", "f1_macro"), kind="token")
    pos = tasks.declare("pos", {"kind": "token", "labels": UPOS, "files": {
        "dir": str(UD_SMOKE), "label": "upos", "splits": {"train": "smoke-ud-train.conllu", "dev": "smoke-ud-dev.conllu"}}}, REPO)
    train, dev = (tasks.read_files(pos, split) for split in ("train", "dev"))
    config = training.FinetuneConfig(batch_size=4, epochs=60, learning_rate=5e-3, warmup_ratio=0.0, max_length=32)
    result = training.finetune_and_evaluate(str(TINY_BERT), task, "finetuned", 0, train, {"dev": dev, "train": train},
                                            config, progress=False)
    assert type(result.model).__name__.endswith("ForTokenClassification")
    record = result.metrics
    assert record["eval"]["dev"]["words"] == dev["words"].list.len().sum() and record["train_unread_words"] == 0
    losses = record["training"]["loss_curve"]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])  # it learns the training words' tags
    assert record["eval"]["train"]["accuracy"] > 0.8
    predictions = result.predictions["dev"]
    assert predictions["prediction"].list.len().to_list() == dev["words"].list.len().to_list()
    assert record["eval"]["dev"]["accuracy"] == pytest.approx(training.prediction_metrics(task, predictions)["accuracy"])


def test_sentence_bootstrap_and_the_verdict_of_a_tagger():
    from bertology_core.fitness import verdict_stats
    from bertology_core.stats import bootstrap

    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1", "accuracy"), kind="token", scheme="BIO")
    O, BP, IP, BL, IL = range(5)
    gold = [[BP, IP, O, BL], [O, BL, IL, O, BP], [O, O]]
    predicted = [[BP, IP, O, BL], [O, BL, O, BP, IP], [O, BL]]
    sentences = bootstrap.Sentences.of(gold, task.label_names)
    flat_p, flat_g = np.concatenate(predicted), np.concatenate(gold)
    full = np.arange(3)[None, :]
    for metric in ("span_f1", "accuracy"):
        whole = metrics.compute_metrics(task, [np.array(p) for p in predicted], [np.array(g) for g in gold])[metric]
        assert bootstrap.metric_on_resamples(metric, flat_p, flat_g, full, sentences)[0, 0] == pytest.approx(whole)
        # a resample drawing sentence 1 twice and sentence 2 once scores as those sentences laid end to end
        drawn = [1, 1, 2]
        expected = metrics.compute_metrics(task, [np.array(predicted[i]) for i in drawn], [np.array(gold[i]) for i in drawn])
        assert bootstrap.metric_on_resamples(metric, flat_p, flat_g, np.array([drawn]), sentences)[0, 0] == pytest.approx(
            expected[metric])
    settings = verdict_stats.FitnessSettings(min_examples=1, resamples=200)
    trivial = [np.zeros(len(g), dtype=np.int64) for g in gold]  # all O: no span found
    verdict = verdict_stats.assess(task, [np.array(p) for p in predicted], [np.array(g) for g in gold], settings, trivial)
    # spans: 2 correct of 5 predicted and 4 gold
    assert verdict["metric"] == "span_f1" and verdict["score"] == pytest.approx(4 / 9) and verdict["trivial_score"] == 0.0
    assert verdict["examples"] == 3 and "most frequent training label" in verdict["trivial_predictor"]
    with pytest.raises(ValueError, match="needs the trivial tagger's predictions"):
        verdict_stats.assess(task, predicted, gold, settings)


# --- the workflow on a token task ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_smoke(tmp_path_factory) -> Path:
    """One run of the smoke config with its token layer (configs/smoke_tagging.yaml: a BIO task beside MRPC)."""
    from workflow_utils import SMOKE, snakemake

    workdir = tmp_path_factory.mktemp("token_smoke")
    snakemake(workdir, configs=(SMOKE, REPO / "configs" / "smoke_tagging.yaml"))
    return workdir


@pytest.mark.workflow
def test_every_stage_runs_on_a_tagger(token_smoke):
    results = token_smoke / "results"
    run = results / "finetune" / "tiny-bert" / "tags" / "finetuned" / "seed1"
    record = json.loads((run / "metrics.json").read_text())
    dev = record["eval"]["dev"]
    predictions = pl.read_parquet(run / "predictions.parquet").filter(pl.col("split") == "dev")
    assert predictions["prediction"].list.len().to_list() == predictions["label"].list.len().to_list()
    assert dev["words"] == predictions["label"].list.len().sum() and dev["unread_words"] == 0
    task = tasks.Task("tags", ("O", "B-ANI", "I-ANI", "B-PER", "I-PER"), None, ("span_f1", "accuracy", "f1_macro"),
                      kind="token", scheme="BIO")
    from bertology_core.finetune import training

    assert training.prediction_metrics(task, predictions) == pytest.approx({k: dev[k] for k in task.metrics})
    fitness = record["fitness"]
    assert fitness["metric"] == "span_f1" and "most frequent training label" in fitness["trivial_predictor"]
    # the trivial tagger learnt on the prepared training split, scored on dev as the verdict says
    train = pl.read_parquet(results / "data" / "tags" / "train.parquet")
    tagger = metrics.word_majority_predictor(train["words"].to_list(), train["label"].to_list())
    words = pl.read_parquet(results / "data" / "tags" / "dev.parquet").sort("idx")
    trivial = metrics.compute_metrics(task, [tagger(w) for w in words["words"].to_list()],
                                      [np.asarray(g) for g in words["label"].to_list()])
    assert fitness["trivial_score"] == pytest.approx(trivial["span_f1"])
    baselines = pl.read_csv(results / "baselines" / "tiny-bert" / "baselines.csv")
    assert baselines.filter((pl.col("task") == "tags") & (pl.col("metric") == "span_f1")).height == 1
    for stage in ("patterns", "attention_change", "linguistic", "disabling", "outliers", "pruning"):
        assert any((results / stage / "tiny-bert" / "tags").rglob("*.parquet")), stage
    assert any((results / "head_roles" / "tiny-bert" / "gates" / "tags").rglob("*.predictions.parquet"))
    assert (results / "probing" / "tiny-bert" / "tags" / "finetuned" / "seed1" / "probes.parquet").is_file()
    # disabling: a configuration's predictions per word, its interval over sentences
    sweep = pl.read_parquet(results / "disabling" / "tiny-bert" / "tags" / "finetuned" / "seed1" / "sweep.parquet")
    assert {"idx", "word"} <= set(sweep.columns)
    assert sweep.filter(pl.col("kind") == "intact").height == sweep["mode"].n_unique() * dev["words"]
    deltas = pl.read_parquet(results / "disabling" / "tiny-bert" / "tags" / "finetuned" / "deltas.parquet")
    assert set(deltas["metric"]) == {"span_f1"} and set(deltas["examples"]) == {dev["examples"]}
    intact = sweep.filter((pl.col("kind") == "intact") & (pl.col("mode") == sweep["mode"][0]))
    assert training.prediction_metrics(task, intact)["span_f1"] == pytest.approx(dev["span_f1"])
    assert (results / "report" / "index.html").is_file()


@pytest.mark.workflow
def test_the_token_layers_report_renders_in_headless_chromium(token_smoke, browser):
    from report_browser import check_page

    page_file = token_smoke / "results" / "report" / "index.html"
    found = check_page(browser, page_file, page_file.with_name("screenshot.png"))
    assert found["errors"] == [] and found["charts"] == found["rendered"] > 0
    for anchor in ("baselines", "patterns", "attention_change", "linguistic", "disabling", "pruning", "head_roles",
                   "outliers", "probing"):
        assert found["sections"][anchor] > 0, anchor
    assert "tags" in page_file.read_text()


def test_a_token_sweep_is_kept_per_word_and_its_intervals_resample_sentences():
    from bertology_core.disabling import stats as disabling_stats
    from bertology_core.disabling import sweeps
    from bertology_core.stats import bootstrap

    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1", "accuracy"), kind="token", scheme="BIO")
    O, BP, IP, BL, IL = range(5)
    dev = pl.DataFrame({"idx": [4, 9, 12], "label": [[BP, IP, O], [O, BL, IL, O], [BL, O]]},
                       schema={"idx": pl.Int64, "label": pl.List(pl.Int64)})
    configs = [sweeps.INTACT, *sweeps.single_heads(1, 2)]
    intact = np.array([BP, IP, O, O, BL, IL, O, BL, O])
    predictions = np.stack([intact, [BP, O, O, O, BL, IL, O, BL, O], [BP, IP, O, O, BL, O, O, O, O]])
    frame = sweeps.sweep_frame(task, dev, configs, predictions, np.stack([intact] * 3), "uniform")
    assert frame.height == 3 * 9 and frame.columns[5:8] == ["idx", "word", "label"]
    assert frame.filter(pl.col("kind") == "intact")["word"].to_list() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert training_metrics(task, frame.filter(pl.col("kind") == "intact"))["span_f1"] == 1.0
    shuffled = frame.with_columns(pl.lit(1).alias("seed")).sample(fraction=1.0, shuffle=True, seed=3)
    arrays = disabling_stats.SweepArrays.from_frame(shuffled, task.label_names)
    assert np.array_equal(arrays.predictions[0], predictions) and arrays.sentences.offsets.tolist() == [0, 3, 7, 9]
    table = disabling_stats.deltas_table(arrays, "span_f1", 200, 0.95, 0).filter(pl.col("seed") == 1)
    # head 0 breaks the PER span (3 of 4 found), head 1 the LOC spans (1 of 4 gold found, 1 predicted)
    assert table["delta"].to_list() == pytest.approx([0.0, 2 * 2 / 6 - 1, 2 * 1 / 5 - 1])
    assert set(table["examples"].to_list()) == {3}
    halves = arrays.halves(task, seed=0)
    assert arrays.sentences.subset(halves).offsets[-1] == halves.sum()  # whole sentences
    selection = disabling_stats.selection_table(arrays, halves, "span_f1", 50, 0.95, 0)
    assert set(selection["selection_examples"]) | set(selection["report_examples"]) <= {1, 2}
    with pytest.raises(ValueError, match="whole sentences"):
        arrays.sentences.subset(np.array([True, False] + [True] * 7))
    with pytest.raises(ValueError, match="repeat some"):
        disabling_stats.SweepArrays.from_frame(pl.concat([shuffled, shuffled.head(1)]), task.label_names)
    assert bootstrap.Sentences.of_runs(np.array([4, 4, 9, 9, 9])).offsets.tolist() == [0, 2, 5]
    with_empty = bootstrap.Sentences.of([[1, 2], [], [3]])
    assert with_empty.subset(np.array([False, False, True])).offsets.tolist() == [0, 1]
    with pytest.raises(ValueError, match="without the task's labels"):
        bootstrap.metric_on_resamples("span_f1", np.array([[1, 2]]), np.array([1, 2]), np.array([[0]]),
                                      bootstrap.Sentences.of([[1, 2]]))


def training_metrics(task, frame):
    from bertology_core.finetune import training

    return training.prediction_metrics(task, frame)


def test_a_token_classifier_checkpoints_head_is_redrawn_and_checked_against_the_kind(tmp_path):
    from transformers import AutoConfig, BertForTokenClassification

    from bertology_core.models import compatibility, loading

    config = AutoConfig.from_pretrained(TINY_BERT, num_labels=5, id2label=dict(enumerate(NER_LABELS)))
    tagger = BertForTokenClassification(config)
    with torch.no_grad():
        tagger.classifier.weight.fill_(7.0)
    tagger.save_pretrained(tmp_path / "tagger")
    load_tokenizer(TINY_BERT).save_pretrained(tmp_path / "tagger")
    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1",), kind="token", scheme="BIO")
    model, report = loading.load_classifier_reported(tmp_path / "tagger", task, "pretrained", 0)
    assert report.redrawn and float(model.classifier.weight.detach().mean()) != 7.0  # the pre-trained state: an untrained head
    saved, _ = loading.load_classifier_reported(tmp_path / "tagger", task, loading.SAVED, 0)
    assert float(saved.classifier.weight.detach().mean()) == 7.0
    assert compatibility.classifier_kind(compatibility.read_config(tmp_path / "tagger")) == "token"
    problems = compatibility.given_classifier_problems(tmp_path / "tagger", "MRPC", ("a", "b"), TINY_BERT, kind="sequence")
    assert "not a sequence classifier" in problems[0]
    assert compatibility.given_classifier_problems(tmp_path / "tagger", "ner", tuple(NER_LABELS), TINY_BERT, kind="token") == []


def test_training_sentences_with_no_readable_word_are_left_out_not_a_nan_loss():
    from bertology_core.finetune import training

    task = tasks.Task("pos", ("A", "B"), None, ("accuracy",), kind="token")
    frame = pl.DataFrame({"idx": list(range(9)), "sentence1": [""] * 9, "sentence2": [None] * 9,
                          "words": [["\u200b"]] + [["cat", "sat"]] * 8, "label": [[0]] + [[0, 1]] * 8})
    config = training.FinetuneConfig(batch_size=1, epochs=1, learning_rate=1e-3, max_length=16)
    result = training.finetune_and_evaluate(str(TINY_BERT), task, "finetuned", 0, frame, {"dev": frame}, config,
                                            progress=False)
    assert result.metrics["train_unreadable_sentences"] == 1 and result.metrics["train_examples"] == 8
    assert np.isfinite(result.metrics["training"]["loss_curve"]).all()
    assert result.predictions["dev"]["prediction"][0].to_list() == [-1]


def test_head_importance_of_a_tagger_differentiates_its_summed_word_losses():
    from transformers import AutoConfig, BertForTokenClassification

    from bertology_core.pruning import importance

    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1",), kind="token", scheme="BIO")
    torch.manual_seed(0)
    model = BertForTokenClassification(AutoConfig.from_pretrained(TINY_BERT, num_labels=5)).eval()
    frame = pl.DataFrame({"idx": [0, 1, 2], "sentence1": ["", "", ""], "sentence2": [None] * 3,
                          "words": [["cat", "sat"], ["\u200b"], ["the", "dog", "ran"]], "label": [[1, 0], [0], [3, 4, 0]]})
    data = batching.from_table(batching.token_table(frame, load_tokenizer(TINY_BERT), 16), 0, 16)
    labels = batching.frame_labels(task, frame)
    found = {g: importance.gate_importance(model, task, data, labels, batch_size=b, granularity=g)
             for g, b in (("token", 3), ("example", 3), ("batch", 1))}
    for heads, mlps in found.values():
        assert np.isfinite(heads).all() and (heads >= 0).all() and heads.sum() > 0 and np.isfinite(mlps).all()
    # one sentence alone: its gate's gradient is that of its summed word losses (2 words), the batch granularity's that
    # of their mean, divided by the sentence's pieces
    one = frame[[0]]
    alone = batching.from_table(batching.token_table(one, load_tokenizer(TINY_BERT), 16), 0, 16)
    per_example, _ = importance.gate_importance(model, task, alone, batching.frame_labels(task, one), batch_size=1,
                                                granularity="example")
    per_batch, _ = importance.gate_importance(model, task, alone, batching.frame_labels(task, one), batch_size=1,
                                              granularity="batch")
    assert per_example == pytest.approx(2 * int(alone.lengths().sum()) * per_batch, rel=1e-4)


def test_pruning_and_gate_tables_score_a_tagger_over_words_and_resample_sentences():
    from bertology_core.claims import stats as claims
    from bertology_core.head_roles import gate_stats
    from bertology_core.pruning import lottery

    task = tasks.Task("ner", tuple(NER_LABELS), None, ("span_f1", "accuracy"), kind="token", scheme="BIO")
    O, BP, IP, BL, IL = range(5)
    gold = [[BP, IP, O], [O, BL, IL, O], [BL, O]]
    labels = pl.Series(gold, dtype=pl.List(pl.Int64)).to_numpy()  # as a predictions table gives them
    # the best constant tag is B-LOC: every word a LOC span, one of the 9 is gold's one-word LOC (3 gold spans)
    assert lottery.best_constant_score(task, labels) == pytest.approx(2 * 1 / (9 + 3))
    accuracy = tasks.Task("pos", tuple(NER_LABELS), None, ("accuracy",), kind="token")
    assert lottery.best_constant_score(accuracy, labels) == pytest.approx(4 / 9)
    # Michel's curve: step 1 loses the LOC spans of sentence 1, step 2 everything
    steps = [gold, [[BP, IP, O], [O, O, O, O], [BL, O]], [[O] * 3, [O] * 4, [O] * 2]]
    frame = pl.DataFrame([{"step": step, "idx": idx, "label": gold[i], "prediction": tags}
                          for step, predicted in enumerate(steps) for i, (idx, tags) in enumerate(zip([3, 5, 8], predicted))],
                         schema={"step": pl.Int32, "idx": pl.Int64, "label": pl.List(pl.Int64), "prediction": pl.List(pl.Int64)})
    curve = pl.DataFrame({"step": [0, 1, 2], "share_pruned": [0.0, 0.5, 1.0]})
    [row] = claims.michel_prunable_share({("ner", 1): curve}, {("ner", 1): frame}, {"ner": "span_f1"}, 0.01, 100, 0.95, 0,
                                         label_names_of={"ner": task.label_names})
    assert row.value == 0.0  # step 1 already loses a third of the spans
    # the gates' table: the same scores from lists of words
    gates = frame.filter(pl.col("step") == 0).select("idx", "label", *[pl.col("prediction").alias(c) for c in gate_stats.PREDICTIONS])
    record = {"task": "ner", "seed": 1, "weights": "trained", "strength": 1.0, "heads_kept": 3, "gates": [1, 1, 1, 0],
              "train_examples": 10, "steps": 5}
    table = gate_stats.gates_table([record], [gates], {"ner": "span_f1"}, 100, 0.95, 0, {"ner": task.label_names})
    assert table["full_score"][0] == 1.0 and table["gates_minus_michel"][0] == 0.0 and table["dev_examples"][0] == 3
