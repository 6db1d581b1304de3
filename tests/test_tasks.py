"""Declared tasks (bertology_core/data/tasks.py): GLUE's nine as shipped declarations, and any task in CSV, TSV, JSON
Lines, Parquet or a Hugging Face dataset; every bad input refused with its file, line, field and fix."""

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

from bertology_core.data import tasks
from conftest import GLUE_SMOKE


def write(path: Path, text: str, bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def declared(tmp_path: Path, files: dict, **meaning) -> tasks.Task:
    """A task of one's own: NLI-like, its files under ``tmp_path``."""
    raw = {"labels": ["entailment", "neutral", "contradiction"], "metrics": ["accuracy", "f1_macro"], "language": "en",
           "files": {"splits": {"train": "train.csv", "dev": "dev.csv"}, "text": ["premise", "hypothesis"], "label": "gold"}
           | files} | meaning
    return tasks.declare("mine", raw, tmp_path)


def read_all(task: tasks.Task) -> dict[str, pl.DataFrame]:
    return {split: tasks.read_files(task, split) for split in task.splits}


# --- GLUE's nine, as shipped --------------------------------------------------------------------------------------


def test_glue_tasks_ship_as_declarations_with_their_label_sets():
    shipped = tasks.declared_tasks({}, "glue_data")
    assert {name for name, task in shipped.items() if not task.is_token} == {
        "CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"}
    assert shipped["STS-B"].is_regression and shipped["STS-B"].num_labels == 1 and shipped["STS-B"].label_range == (0, 5)
    assert shipped["MNLI"].label_names == ("entailment", "neutral", "contradiction")
    assert shipped["MNLI"].eval_splits == ("dev", "dev_mismatched")
    assert shipped["CoLA"].metrics == ("matthews_correlation",)
    assert shipped["MRPC"].metrics == ("accuracy", "f1") and shipped["MRPC"].main_metric == "accuracy"
    assert shipped["MRPC"].files.path("dev") == Path("glue_data/MRPC/dev.tsv")
    assert shipped["MRPC"].hub.config == "mrpc" and shipped["MNLI"].hub.splits["dev"] == "validation_matched"
    with pytest.raises(tasks.DataError, match="Unknown task 'mrpc'.*task_declarations"):
        tasks.glue_task("mrpc")


def test_mrpc_header_with_bom_is_skipped_and_labels_are_ints():
    frame = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "train")
    raw = (GLUE_SMOKE / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert raw[0].startswith("\ufeffQuality")
    assert frame.height == len(raw) - 1
    assert frame.schema == pl.Schema({"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String, "label": pl.Int64})
    first = raw[1].split("\t")
    assert frame.row(0) == (0, first[3], first[4], int(first[0]))


def test_cola_has_no_header_and_is_single_sentence():
    frame = tasks.read_files(tasks.glue_task("CoLA", GLUE_SMOKE), "dev")
    raw = (GLUE_SMOKE / "CoLA" / "dev.tsv").read_text().splitlines()
    assert frame.height == len(raw)  # no header line dropped
    assert frame["sentence2"].null_count() == frame.height
    assert frame["sentence1"][0] == raw[0].split("\t")[3]


def test_quotes_are_literal_and_string_labels_map_to_hub_ids(tmp_path):
    write(tmp_path / "RTE" / "dev.tsv",
          'index\tsentence1\tsentence2\tlabel\n0\tHe said "no\tA quote.\tnot_entailment\n1\tB.\tC.\tentailment\n')
    frame = tasks.read_files(tasks.glue_task("RTE", tmp_path), "dev")
    assert frame["sentence1"][0] == 'He said "no'  # unbalanced quote kept, as GLUE's QUOTE_NONE reader did
    assert frame["label"].to_list() == [1, 0]  # Hub order: entailment=0, not_entailment=1


def test_stsb_reads_float_scores():
    frame = tasks.read_files(tasks.glue_task("STS-B", GLUE_SMOKE), "dev")
    raw = [line.split("\t") for line in (GLUE_SMOKE / "STS-B" / "dev.tsv").read_text().splitlines()[1:]]
    assert frame.schema["label"] == pl.Float64
    assert frame["label"].to_list() == [float(r[-1]) for r in raw]
    assert frame["sentence2"].to_list() == [r[8] for r in raw] and frame["idx"].to_list() == [int(r[0]) for r in raw]


def test_mnli_columns_and_both_dev_sets(tmp_path):
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1_bin", "s2_bin", "s1_parse", "s2_parse",
                        "sentence1", "sentence2", "label1", "gold_label"])
    row = lambda i, gold: "\t".join([str(i), "1", "1", "fiction", "(", "(", "(", "(", f"premise {i}", f"hypothesis {i}", gold, gold])  # noqa: E731
    write(tmp_path / "MNLI" / "dev_matched.tsv", "\n".join([header, row(0, "neutral"), row(1, "contradiction")]) + "\n")
    write(tmp_path / "MNLI" / "dev_mismatched.tsv", "\n".join([header, row(0, "entailment")]) + "\n")
    mnli = tasks.glue_task("MNLI", tmp_path)
    assert tasks.read_files(mnli, "dev").rows() == [(0, "premise 0", "hypothesis 0", 1), (1, "premise 1", "hypothesis 1", 2)]
    assert tasks.read_files(mnli, "dev_mismatched").rows() == [(0, "premise 0", "hypothesis 0", 0)]


def test_qqp_idx_is_row_order_not_quora_id(tmp_path):
    write(tmp_path / "QQP" / "dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
          "201359\t1\t2\tWhy?\tHow?\t0\n5\t3\t4\tWho?\tWhom?\t1\n")
    assert tasks.read_files(tasks.glue_task("QQP", tmp_path), "dev").rows() == [(0, "Why?", "How?", 0), (1, "Who?", "Whom?", 1)]


def test_glue_declarations_read_the_real_files_as_glues_own_reader(shared_glue):
    """The classic layout's rows as GLUE's _read_tsv reads them (csv, QUOTE_NONE, the processors' columns)."""
    import csv

    positions = {"CoLA": (False, 3, None, 1), "SST-2": (True, 0, None, 1), "MRPC": (True, 3, 4, 0), "STS-B": (True, 7, 8, 9),
                 "RTE": (True, 1, 2, 3), "WNLI": (True, 1, 2, 3)}
    for name, (header, a, b, label) in positions.items():
        task = tasks.glue_task(name, shared_glue)
        with task.files.path("dev").open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1 if header else 0:]
        frame = tasks.read_files(task, "dev")
        assert frame["sentence1"].to_list() == [r[a] for r in rows], name
        assert frame["sentence2"].to_list() == [r[b] if b is not None else None for r in rows], name
        expected = [float(r[label]) if task.is_regression else task.label_names.index(r[label]) if r[label] in task.label_names
                    else int(r[label]) for r in rows]
        assert frame["label"].to_list() == expected, name


def test_the_official_releases_overlaps_are_known_and_nothing_else_overlaps(shared_glue):
    for name in ("CoLA", "SST-2", "MRPC", "STS-B", "RTE", "WNLI"):
        task = tasks.glue_task(name, shared_glue)
        assert tasks.check_splits(task, read_all(task), task.files) == [], name
    cola = tasks.glue_task("CoLA", shared_glue)
    unknown = dataclasses.replace(cola, **{"known_overlap": {}})
    problems = tasks.check_splits(unknown, read_all(cola), cola.files)
    assert len(problems) == 1 and "16 example(s) have the same text as one of split 'train'" in problems[0]


def test_the_official_releases_known_empty_texts_are_left_out_and_any_other_refused(tmp_path, caplog):
    header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
    write(tmp_path / "QQP" / "train.tsv", header + "".join(f"{i}\t1\t2\tq{i}\tp{i}\t0\n" for i in range(3)))
    qqp = tasks.glue_task("QQP", tmp_path)
    known = dataclasses.replace(qqp, **{"known_empty": {"train": (1,)}})
    write(tmp_path / "QQP" / "train.tsv", header + "0\t1\t2\tq0\tp0\t0\n1\t1\t2\tq1\t\t0\n2\t1\t2\tq2\t\t1\n")
    with pytest.raises(tasks.DataError, match=r"train.tsv:4: field 'question2' is empty \(idx 2\)"):
        tasks.read_files(known, "train")
    write(tmp_path / "QQP" / "train.tsv", header + "0\t1\t2\tq0\tp0\t0\n1\t1\t2\tq1\t\t0\n2\t1\t2\tq2\tp2\t1\n")
    assert tasks.read_files(known, "train")["idx"].to_list() == [0, 2]
    assert "idx 1 has an empty text in the official release; left out" in caplog.text


def test_subsample_is_seeded_ordered_and_bounded():
    frame = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "train")
    a = tasks.subsample(frame, 10, seed=3)
    assert a.height == 10 and a["idx"].is_sorted()
    assert a.equals(tasks.subsample(frame, 10, seed=3))
    assert not a.equals(tasks.subsample(frame, 10, seed=4))
    assert tasks.subsample(frame, None, seed=0).equals(frame)
    assert tasks.subsample(frame, 10_000, seed=0).equals(frame)


# --- a task of one's own, in every format -------------------------------------------------------------------------


NLI = [("A man sleeps.", "Nobody sleeps.", "contradiction"), ('He said "hi, there".', "He spoke.", "entailment"),
       ("Rain.", "It rains, a lot.", "neutral")]


def test_the_same_examples_in_csv_jsonl_and_parquet_read_alike(tmp_path):
    csv_text = "hypothesis,premise,gold\n" + "".join(f'"{h}","{p.replace(chr(34), chr(34) * 2)}",{g}\n' for p, h, g in NLI)
    write(tmp_path / "train.csv", csv_text)
    write(tmp_path / "dev.csv", csv_text.replace("sleeps", "naps"))
    write(tmp_path / "train.jsonl", "".join(json.dumps({"premise": p, "hypothesis": h, "gold": g}) + "\n" for p, h, g in NLI))
    write(tmp_path / "dev.jsonl", (tmp_path / "train.jsonl").read_text().replace("sleeps", "naps"))
    for split in ("train", "dev"):
        pl.read_ndjson(tmp_path / f"{split}.jsonl").with_columns(
            pl.col("gold").replace_strict({"entailment": 0, "neutral": 1, "contradiction": 2})).write_parquet(tmp_path / f"{split}.parquet")
    frames = [read_all(declared(tmp_path, {"splits": {"train": f"train.{ext}", "dev": f"dev.{ext}"}}))
              for ext in ("csv", "jsonl", "parquet")]
    assert frames[0]["train"].rows() == [(i, p, h, ["entailment", "neutral", "contradiction"].index(g))
                                         for i, (p, h, g) in enumerate(NLI)]
    for other in frames[1:]:
        assert all(other[split].equals(frames[0][split]) for split in ("train", "dev"))


def test_boolean_labels_ids_and_an_extra_eval_split(tmp_path):
    rows = [{"q": "is it?", "passage": "It is.", "answer": True, "id": 10}, {"q": "is it not?", "passage": "No.", "answer": False, "id": 11}]
    for split, offset in (("train", 0), ("dev", 2), ("test_gold", 4)):
        write(tmp_path / f"{split}.jsonl", "".join(json.dumps(r | {"id": r["id"] + offset, "q": r["q"] + split}) + "\n" for r in rows))
    task = tasks.declare("boolq", {"labels": [False, True], "files": {
        "splits": {"train": "train.jsonl", "dev": "dev.jsonl", "test_gold": "test_gold.jsonl"},
        "text": ["q", "passage"], "label": "answer", "id": "id"}}, tmp_path)
    assert task.label_names == ("false", "true") and task.eval_splits == ("dev", "test_gold") and task.metrics == ("accuracy",)
    frames = read_all(task)
    assert frames["dev"].select("idx", "label").rows() == [(12, 1), (13, 0)]
    assert tasks.check_splits(task, frames, task.files) == []


def test_main_metric_and_regression_range(tmp_path):
    task = declared(tmp_path, {}, metrics=["accuracy", "matthews_correlation"], main_metric="matthews_correlation")
    assert task.metrics == ("matthews_correlation", "accuracy") and task.main_metric == "matthews_correlation"
    assert tasks.Task.from_meaning(task.meaning()) == tasks.Task(task.name, task.label_names, None, task.metrics)
    regression = tasks.declare("sim", {"range": [1, 7], "files": {"splits": {"train": "a.csv", "dev": "b.csv"},
                                                                   "text": "s", "label": "y"}}, tmp_path)
    assert regression.is_regression and regression.metrics == ("pearson", "spearman") and regression.files.columns.text == ("s",)


# --- bad input: each case, where it is caught, its message ---------------------------------------------------------

BAD_DECLARATIONS = [
    ({"range": [0, 5]}, r"declare either labels .* or range"),
    ({"labels": ["a"]}, r"labels: \['a'\] must be two or more distinct names"),
    ({"metrics": ["pearson"]}, r"metrics: \['pearson'\] do not score a classification task"),
    ({"metrics": ["f1"]}, r"f1 is binary F1 .* mine has 3 labels. Fix: use f1_macro"),
    ({"main_metric": "f1_macro", "metrics": ["accuracy"]}, r"main_metric: 'f1_macro' is not among its metrics"),
    ({"files": None}, r": no source. Fix: declare files"),
]


@pytest.mark.parametrize(("change", "message"), BAD_DECLARATIONS)
def test_a_bad_declaration_names_its_key_and_fix(tmp_path, change, message):
    raw = {"labels": ["entailment", "neutral", "contradiction"],
           "files": {"splits": {"train": "train.csv", "dev": "dev.csv"}, "text": ["p", "h"], "label": "gold"}} | change
    with pytest.raises(tasks.DataError, match=rf"task_declarations\.mine.*{message}"):
        tasks.declare("mine", {k: v for k, v in raw.items() if v is not None}, tmp_path)


@pytest.mark.parametrize(("files", "message"), [
    ({"splits": {"train": "train.csv"}}, r"files.splits: no dev split"),
    ({"header": False}, r"header: false needs column_names"),
    ({"text": ["a", "b", "c"]}, r"files.text: \['a', 'b', 'c'\] is not one or two column names"),
])
def test_a_bad_source_names_its_key(tmp_path, files, message):
    with pytest.raises(tasks.DataError, match=message):
        declared(tmp_path, files)


def nli_csv(tmp_path, train: str, dev: str | None = None) -> tasks.Task:
    write(tmp_path / "train.csv", train)
    write(tmp_path / "dev.csv", dev or "premise,hypothesis,gold\nX.,Y.,neutral\n")
    return declared(tmp_path, {})


BAD_FILES = [
    ("premise,gold\nA.,neutral\n", r"train.csv:1: no column 'hypothesis' \(the file has 'premise', 'gold'\)"),
    ("premise,hypothesis,gold\nA.,B.,maybe\n", r"train.csv:2: field 'gold' = 'maybe' is not a mine label. Allowed: "
                                               r"\['entailment', 'neutral', 'contradiction'\] or their ids 0..2"),
    ("premise,hypothesis,gold\nA.,B.,3\n", r"train.csv:2: field 'gold' = '3' is not a mine label"),
    ("premise,hypothesis,gold\nA.,B.,-1\n", r"field 'gold' = '-1' is not a mine label.*hidden test label"),
    ("premise,hypothesis,gold\nA.,  ,neutral\n", r"train.csv:2: field 'hypothesis' is empty \(idx 0\)"),
    ("premise,hypothesis,gold\nA.,B.,neutral,extra\n", r"train.csv:2: expected 3 comma-separated fields"),
    ("premise,hypothesis,gold\n", r"train.csv: split 'train' of mine has no examples"),
    ("", r"train.csv: the file is empty"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_a_bad_file_names_its_file_line_and_field(tmp_path, text, message):
    with pytest.raises(tasks.DataError, match=message):
        tasks.read_files(nli_csv(tmp_path, text), "train")


def test_non_utf8_bytes_name_the_line_and_the_fix(tmp_path):
    task = nli_csv(tmp_path, "")
    (tmp_path / "train.csv").write_bytes("premise,hypothesis,gold\nCaf\xe9.,B.,neutral\n".encode("latin-1"))
    with pytest.raises(tasks.DataError, match=r"train.csv:2: byte 0xe9 at column 4 is not UTF-8.*iconv"):
        tasks.read_files(task, "train")


def test_an_unrecognised_format_names_the_file(tmp_path):
    task = declared(tmp_path, {"splits": {"train": "train.xlsx", "dev": "dev.csv"}})
    write(tmp_path / "train.xlsx", "x")
    with pytest.raises(tasks.DataError, match=r"train.xlsx: file format '.xlsx' not recognised. Fix: name the file"):
        tasks.read_files(task, "train")


def test_a_file_that_is_not_parquet_names_the_fix(tmp_path):
    task = declared(tmp_path, {"splits": {"train": "train.parquet", "dev": "dev.csv"}})
    write(tmp_path / "train.parquet", "premise,hypothesis,gold\n")
    with pytest.raises(tasks.DataError, match=r"train.parquet: not a Parquet file.*files.format"):
        tasks.read_files(task, "train")


def test_json_lines_errors_name_the_line(tmp_path):
    task = declared(tmp_path, {"splits": {"train": "train.jsonl", "dev": "dev.jsonl"}})
    write(tmp_path / "train.jsonl", '{"premise": "A.", "hypothesis": "B.", "gold": "neutral"}\n[1, 2]\n')
    with pytest.raises(tasks.DataError, match=r"train.jsonl:2: a JSON list, not an object"):
        tasks.read_files(task, "train")
    write(tmp_path / "train.jsonl", '{"premise": "A.", "hypothesis": "B.", "gold": "neutral"}\n{"premise": "C.", "gold": 1}\n')
    with pytest.raises(tasks.DataError, match=r"train.jsonl:2: no column 'hypothesis'"):
        tasks.read_files(task, "train")
    write(tmp_path / "train.jsonl", '{"premise": "A.", "hypothesis": "B.", "gold": "neutral"\n')
    with pytest.raises(tasks.DataError, match=r"train.jsonl:1: not a JSON object"):
        tasks.read_files(task, "train")


def test_a_regression_score_outside_the_range_or_not_a_number(tmp_path):
    write(tmp_path / "train.csv", "s,y\nA.,2.5\nB.,9\n")
    task = tasks.declare("sim", {"range": [0, 5], "files": {"splits": {"train": "train.csv", "dev": "dev.csv"}, "text": "s",
                                                             "label": "y"}}, tmp_path)
    with pytest.raises(tasks.DataError, match=r"train.csv:3: field 'y' = '9' is outside sim's range \[0, 5\]"):
        tasks.read_files(task, "train")
    write(tmp_path / "train.csv", "s,y\nA.,high\n")
    with pytest.raises(tasks.DataError, match=r"train.csv:2: field 'y' = 'high' is not a number"):
        tasks.read_files(task, "train")


def test_ids_must_be_integers_and_unique(tmp_path):
    task = declared(tmp_path, {"id": "pair"})
    write(tmp_path / "train.csv", "pair,premise,hypothesis,gold\nx1,A.,B.,neutral\n")
    with pytest.raises(tasks.DataError, match=r"train.csv:2: field 'pair' = 'x1' is not an integer.*leave id out"):
        tasks.read_files(task, "train")
    write(tmp_path / "train.csv", "pair,premise,hypothesis,gold\n4,A.,B.,neutral\n4,C.,D.,neutral\n")
    with pytest.raises(tasks.DataError, match=r"train.csv:3: field 'pair' = 4 is not unique: .*train.csv:2 has it too"):
        tasks.read_files(task, "train")


def test_a_split_that_overlaps_another_by_id_or_by_text(tmp_path):
    task = declared(tmp_path, {"id": "pair"})
    write(tmp_path / "train.csv", "pair,premise,hypothesis,gold\n1,A.,B.,neutral\n2,C.,D.,neutral\n")
    write(tmp_path / "dev.csv", "pair,premise,hypothesis,gold\n2,E.,F.,neutral\n3,C.,D.,entailment\n")
    problems = tasks.check_splits(task, read_all(task), task.files)
    assert len(problems) == 2
    assert "dev.csv: 1 example(s) have an id also in split 'train'" in problems[0] and "first id 2" in problems[0]
    assert "dev.csv: 1 example(s) have the same text as one of split 'train'" in problems[1] and "first idx 3 (idx 2 there)" in problems[1]
    with pytest.raises(tasks.DataError, match="have an id also in split 'train'"):
        tasks.prepare_split(task, "dev", task.files, None, 0)
    allowed = dataclasses.replace(task, **{"known_overlap": {"dev": (2, 3)}})
    assert tasks.check_splits(allowed, read_all(task), task.files) == []


def test_missing_files_name_every_path_and_the_fix(tmp_path):
    missing = tasks.missing_files([tasks.glue_task("MRPC", tmp_path), tasks.glue_task("MNLI", tmp_path)])
    assert tmp_path / "MNLI" / "dev_mismatched.tsv" in missing and len(missing) == 5
    message = tasks.missing_files_message(missing)
    assert str(tmp_path / "MRPC" / "train.tsv") in message
    assert "data.glue_dir" in message and "data.source: hub" in message and "task_declarations" in message
    with pytest.raises(tasks.DataError, match="data.source: hub"):
        tasks.read_files(tasks.glue_task("RTE", tmp_path), "train")


def test_a_missing_column_of_a_glue_file_names_the_header(tmp_path):
    path = write(tmp_path / "RTE" / "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tonly two\tcolumns\n")
    with pytest.raises(tasks.DataError, match=rf"{path}:2: expected 4 tab-separated fields.*found 3"):
        tasks.read_files(tasks.glue_task("RTE", tmp_path), "train")
    path = write(tmp_path / "MRPC" / "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\ta\tb\n", bom=True)
    with pytest.raises(tasks.DataError, match=rf"{path}:2: field 'Quality' = '2' is not a MRPC label.*ids 0..1"):
        tasks.read_files(tasks.glue_task("MRPC", tmp_path), "dev")


# --- the Hub path, offline ----------------------------------------------------------------------------------------


def hub_folder(tmp_path: Path) -> Path:
    """A folder laid out as a Hub dataset repository (README.md with its configs, Parquet files per split), which
    datasets.load_dataset reads as it reads a downloaded one: MRPC's smoke examples under a configuration "mrpc"."""
    folder = tmp_path / "glue-like"
    mrpc = tasks.glue_task("MRPC", GLUE_SMOKE)
    for split, name in (("train", "train"), ("dev", "validation")):
        frame = tasks.read_files(mrpc, split)
        (folder / "mrpc").mkdir(parents=True, exist_ok=True)
        frame.select("sentence1", "sentence2", "label", "idx").write_parquet(folder / "mrpc" / f"{name}-00000-of-00001.parquet")
    write(folder / "README.md", "---\nconfigs:\n- config_name: mrpc\n  data_files:\n  - split: train\n    path: mrpc/train-*\n"
          "  - split: validation\n    path: mrpc/validation-*\n---\n")
    return folder


def test_a_hub_dataset_is_read_offline_from_a_folder_laid_out_as_the_hub(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = hub_folder(tmp_path)
    task = tasks.declare("MRPC", {**tasks.shipped_declarations()["MRPC"], "files": None} | {
        "hub": {"dataset": str(folder), "config": "mrpc", "splits": {"train": "train", "dev": "validation"},
                "text": ["sentence1", "sentence2"], "label": "label", "id": None}}, tmp_path)
    glue = tasks.glue_task("MRPC", GLUE_SMOKE)
    for split in ("train", "dev"):
        assert tasks.read_split(task, split, task.hub).equals(tasks.read_files(glue, split))
    wrong = dataclasses.replace(task, **{"hub": tasks.Hub(str(folder), {"train": "train", "dev": "validation"},
                                                            tasks.Columns(("sentence1", "sentence2"), "gold"), "mrpc")})
    with pytest.raises(tasks.DataError, match=r"no column 'gold' \(the file has 'sentence1', 'sentence2', 'label', 'idx'\)"):
        tasks.read_split(wrong, "dev", wrong.hub)


def test_an_unreachable_hub_dataset_says_how_to_bring_it_as_files(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    task = tasks.glue_task("RTE")
    with pytest.raises(tasks.DataError, match=r"RTE: dataset nyu-mll/glue config rte could not be loaded .*bring the data "
                                              r"over as files.*to_parquet.*task_declarations.<TASK>.files"):
        tasks.read_split(task, "dev", task.hub)


@pytest.mark.parametrize(("text", "message"), [
    ('premise,hypothesis,gold\n"He said" hi,B.,neutral\n', r"train.csv:2: .*a quote inside a field, or one never closed"),
    ('premise,hypothesis,gold\n"A.,B.,neutral\nC.,D.,entailment\n', r"train.csv:2: .*(never closed|spans lines)"),
    ('premise,hypothesis,gold\n"A\nsecond line",B.,neutral\n', r"train.csv:2-3: one record spans lines 2-3"),
    ("premise,premise,gold\nA.,B.,neutral\n", r"train.csv:1: the header names \['premise'\] more than once"),
    ("premise,hypothesis,gold\nA.,B.,1.5\n", r"field 'gold' = '1.5' is not a mine label"),
])
def test_quotes_and_headers_that_would_merge_or_shift_rows_are_refused(tmp_path, text, message):
    with pytest.raises(tasks.DataError, match=message):
        tasks.read_files(nli_csv(tmp_path, text), "train")


def test_a_parquet_file_named_csv_is_called_binary_not_latin1(tmp_path):
    task = nli_csv(tmp_path, "x")
    pl.DataFrame({"premise": ["A."], "hypothesis": ["B."], "gold": [1]}).write_parquet(tmp_path / "train.csv")
    with pytest.raises(tasks.DataError, match=r"train.csv: a binary file \(Parquet\), not csv text"):
        tasks.read_files(task, "train")


def test_labels_as_floats_and_booleans_and_texts_that_are_not_text(tmp_path):
    task = declared(tmp_path, {"splits": {"train": "train.parquet", "dev": "dev.csv"}})
    pl.DataFrame({"premise": ["A.", "C."], "hypothesis": ["B.", "D."], "gold": [2.0, 0.0]}).write_parquet(tmp_path / "train.parquet")
    assert tasks.read_files(task, "train")["label"].to_list() == [2, 0]  # integer ids written as floats
    pl.DataFrame({"premise": ["A."], "hypothesis": [3], "gold": [0]}).write_parquet(tmp_path / "train.parquet")
    with pytest.raises(tasks.DataError, match=r"row 1: field 'hypothesis' = 3 is a int, not text"):
        tasks.read_files(task, "train")
    boolq = tasks.declare("b", {"labels": ["False", "True"], "files": {"splits": {"train": "t.jsonl", "dev": "d.jsonl"},
                                                                       "text": "q", "label": "a"}}, tmp_path)
    write(tmp_path / "t.jsonl", '{"q": "x?", "a": true}\n{"q": "y?", "a": false}\n')
    assert tasks.read_files(boolq, "train")["label"].to_list() == [1, 0]
    yes_no = tasks.declare("y", {"labels": [False, True], "files": {"splits": {"train": "t.jsonl", "dev": "d.jsonl"},
                                                                    "text": "q", "label": "a"}}, tmp_path)
    write(tmp_path / "t.jsonl", '{"q": "x?", "a": "yes"}\n')
    with pytest.raises(tasks.DataError, match=r"YAML reads unquoted yes/no"):
        tasks.read_files(yes_no, "train")


@pytest.mark.parametrize(("change", "message"), [
    ({"files": {"text": ["premise", "premise"]}}, r"name a column twice"),
    ({"files": {"label": "premise"}}, r"name a column twice"),
    ({"files": {"splits": {"train": "a.csv", "dev": "b.csv", "../x": "c.csv"}}}, r"\['../x'\] are not split names"),
    ({"known_overlap": {"validation": [1]}}, r"known_overlap.validation name\(s\) a split the task does not declare"),
    ({"overlap": "ignore"}, r"overlap: 'ignore' is not error or warn"),
])
def test_declarations_that_would_misread_columns_or_splits_are_refused(tmp_path, change, message):
    files = change.pop("files", {})
    with pytest.raises(tasks.DataError, match=message):
        declared(tmp_path, files, **change)


def test_a_task_name_that_is_no_folder_is_refused(tmp_path):
    for name in ("..", "a/b", "-x"):
        with pytest.raises(tasks.DataError, match="is not a task name"):
            tasks.declare(name, {"labels": ["a", "b"], "files": {"splits": {"train": "t.csv", "dev": "d.csv"}, "text": "s",
                                                                  "label": "y"}}, tmp_path)


def test_overlap_is_checked_train_first_on_the_text_the_model_reads_and_may_be_a_warning(tmp_path, caplog):
    task = declared(tmp_path, {"splits": {"dev": "dev.csv", "train": "train.csv"}})  # dev declared first
    write(tmp_path / "train.csv", "premise,hypothesis,gold\nA  man.,Sleeps. ,neutral\nC.,D.,neutral\n")
    write(tmp_path / "dev.csv", "premise,hypothesis,gold\nE.,F.,neutral\nA man.,Sleeps.,entailment\n")
    problems = tasks.check_splits(task, read_all(task), task.files)
    assert len(problems) == 1 and problems[0].startswith(f"{tmp_path / 'dev.csv'}: 1 example(s) have the same text as one "
                                                         "of split 'train'") and "first idx 1 (idx 0 there)" in problems[0]
    assert tasks.check_splits(dataclasses.replace(task, known_overlap={"dev": (1,)}), read_all(task), task.files) == []
    assert tasks.check_splits(dataclasses.replace(task, overlap="warn"), read_all(task), task.files) == []
    assert "have the same text as one of split 'train'" in caplog.text and "overlap: warn" in caplog.text


def test_hub_class_ids_are_read_through_the_datasets_own_names(tmp_path, monkeypatch):
    """A ClassLabel whose names are integers ("1" and "2", as yelp_polarity's): its ids are positions, not names."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "stars"
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["1", "2"])})
    for split, labels in (("train", [0, 1, 1]), ("validation", [1, 0])):
        datasets.Dataset.from_dict({"text": [f"{split} {i}" for i in range(len(labels))], "label": labels},
                                   features=features).to_parquet(str(folder / f"{split}.parquet"))
    hub = {"dataset": str(folder), "splits": {"train": "train", "dev": "validation"}, "text": "text", "label": "label"}
    task = tasks.declare("stars", {"labels": ["1", "2"], "hub": hub}, tmp_path)
    assert tasks.read_split(task, "train", task.hub)["label"].to_list() == [0, 1, 1]
    with pytest.raises(tasks.DataError, match=r"holds class ids of \['1', '2'\], the task declares labels \['2', '1'\]"):
        swapped = tasks.declare("stars", {"labels": ["2", "1"], "hub": hub}, tmp_path)
        tasks.read_split(swapped, "train", swapped.hub)
