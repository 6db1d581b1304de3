from pathlib import Path

import polars as pl
import pytest

from bertology_core.data import glue
from conftest import GLUE_SMOKE


def write(path: Path, text: str, bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def test_every_glue_task_is_registered_with_its_label_set():
    assert set(glue.TASKS) == {"CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"}
    assert glue.get_task("STS-B").is_regression and glue.get_task("STS-B").num_labels == 1
    assert glue.get_task("MNLI").label_names == ("entailment", "neutral", "contradiction")
    assert glue.get_task("MNLI").eval_splits == ("dev", "dev_mismatched")
    assert glue.get_task("CoLA").metrics == ("matthews_correlation",)
    assert glue.get_task("MRPC").metrics == ("accuracy", "f1")
    with pytest.raises(glue.DataError, match="Unknown GLUE task 'mrpc'"):
        glue.get_task("mrpc")


def test_mrpc_header_with_bom_is_skipped_and_labels_are_ints():
    frame = glue.read_local(glue.get_task("MRPC"), "train", GLUE_SMOKE)
    raw = (GLUE_SMOKE / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert raw[0].startswith("\ufeffQuality")
    assert frame.height == len(raw) - 1
    assert frame.schema == pl.Schema({"idx": pl.Int64, "sentence1": pl.String, "sentence2": pl.String, "label": pl.Int64})
    first = raw[1].split("\t")
    assert frame.row(0) == (0, first[3], first[4], int(first[0]))


def test_cola_has_no_header_and_is_single_sentence():
    frame = glue.read_local(glue.get_task("CoLA"), "dev", GLUE_SMOKE)
    raw = (GLUE_SMOKE / "CoLA" / "dev.tsv").read_text().splitlines()
    assert frame.height == len(raw)  # no header line dropped
    assert frame["sentence2"].null_count() == frame.height
    assert frame["sentence1"][0] == raw[0].split("\t")[3]


def test_quotes_are_literal_and_string_labels_map_to_hub_ids(tmp_path):
    write(tmp_path / "RTE" / "dev.tsv",
          'index\tsentence1\tsentence2\tlabel\n0\tHe said "no\tA quote.\tnot_entailment\n1\tB.\tC.\tentailment\n')
    frame = glue.read_local(glue.get_task("RTE"), "dev", tmp_path)
    assert frame["sentence1"][0] == 'He said "no'  # unbalanced quote kept, as GLUE's QUOTE_NONE reader did
    assert frame["label"].to_list() == [1, 0]  # Hub order: entailment=0, not_entailment=1


def test_stsb_reads_float_scores_from_last_column():
    frame = glue.read_local(glue.get_task("STS-B"), "dev", GLUE_SMOKE)
    raw = [line.split("\t") for line in (GLUE_SMOKE / "STS-B" / "dev.tsv").read_text().splitlines()[1:]]
    assert frame.schema["label"] == pl.Float64
    assert frame["label"].to_list() == [float(r[-1]) for r in raw]
    assert frame["sentence2"].to_list() == [r[8] for r in raw] and frame["idx"].to_list() == [int(r[0]) for r in raw]


def test_mnli_columns_and_both_dev_sets(tmp_path):
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1_bin", "s2_bin", "s1_parse", "s2_parse",
                        "sentence1", "sentence2", "label1", "gold_label"])
    row = lambda i, gold: "\t".join([str(i), "1", "1", "fiction", "(", "(", "(", "(", f"premise {i}", f"hypothesis {i}", gold, gold])  # noqa: E731
    write(tmp_path / "MNLI" / "dev_matched.tsv", "\n".join([header, row(0, "neutral"), row(1, "contradiction")]) + "\n")
    write(tmp_path / "MNLI" / "dev_mismatched.tsv", "\n".join([header, row(7, "entailment")]) + "\n")
    matched = glue.read_local(glue.get_task("MNLI"), "dev", tmp_path)
    assert matched.rows() == [(0, "premise 0", "hypothesis 0", 1), (1, "premise 1", "hypothesis 1", 2)]
    assert glue.read_local(glue.get_task("MNLI"), "dev_mismatched", tmp_path).rows() == [(7, "premise 7", "hypothesis 7", 0)]


def test_qqp_idx_is_row_order_not_quora_id(tmp_path):
    write(tmp_path / "QQP" / "dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
          "201359\t1\t2\tWhy?\tHow?\t0\n5\t3\t4\tWho?\tWhom?\t1\n")
    frame = glue.read_local(glue.get_task("QQP"), "dev", tmp_path)
    assert frame.rows() == [(0, "Why?", "How?", 0), (1, "Who?", "Whom?", 1)]


def test_missing_file_error_names_path_and_both_fixes(tmp_path):
    missing = glue.missing_local_files(["MRPC", "MNLI"], tmp_path)
    assert tmp_path / "MNLI" / "dev_mismatched.tsv" in missing and len(missing) == 5
    message = glue.missing_files_message(missing, tmp_path)
    assert str(tmp_path / "MRPC" / "train.tsv") in message
    assert "data.glue_dir" in message and "data.source: hub" in message
    with pytest.raises(glue.DataError, match="data.source: hub"):
        glue.read_local(glue.get_task("RTE"), "train", tmp_path)


def test_malformed_row_names_file_line_and_columns(tmp_path):
    path = write(tmp_path / "RTE" / "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tonly two\tcolumns\n")
    with pytest.raises(glue.DataError, match=rf"{path}:2: expected 4 tab-separated columns.*found 3"):
        glue.read_local(glue.get_task("RTE"), "train", tmp_path)


def test_label_outside_label_set_is_rejected_with_allowed_values(tmp_path):
    path = write(tmp_path / "MRPC" / "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\ta\tb\n", bom=True)
    with pytest.raises(glue.DataError, match=rf"{path}:2: field 'Quality' = '2' is not a MRPC label.*\['0', '1'\]"):
        glue.read_local(glue.get_task("MRPC"), "dev", tmp_path)


def test_empty_split_is_an_error(tmp_path):
    write(tmp_path / "SST-2" / "train.tsv", "sentence\tlabel\n")
    with pytest.raises(glue.DataError, match="has no examples"):
        glue.read_local(glue.get_task("SST-2"), "train", tmp_path)


def test_hub_style_hidden_labels_are_rejected():
    frame = pl.DataFrame({"idx": [0, 1], "sentence1": ["a", "b"], "sentence2": [None, None], "label": [1, -1]})
    with pytest.raises(glue.DataError, match="outside ids 0..1"):
        glue.validate_labels(glue.get_task("SST-2"), frame, "hub sst2/test")


def test_subsample_is_seeded_ordered_and_bounded():
    frame = glue.read_local(glue.get_task("MRPC"), "train", GLUE_SMOKE)
    a = glue.subsample(frame, 10, seed=3)
    assert a.height == 10 and a["idx"].is_sorted()
    assert a.equals(glue.subsample(frame, 10, seed=3))
    assert not a.equals(glue.subsample(frame, 10, seed=4))
    assert glue.subsample(frame, None, seed=0).equals(frame)
    assert glue.subsample(frame, 10_000, seed=0).equals(frame)


def test_prepare_split_rejects_duplicate_idx(tmp_path):
    write(tmp_path / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n0\tc\td\tentailment\n")
    with pytest.raises(glue.DataError, match="'idx' is not unique"):
        glue.prepare_split("RTE", "dev", "local", tmp_path, None, 0)


@pytest.mark.parametrize(("task", "text", "field"), [
    ("MRPC", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tfine\tok\n0\t3\t4\t \tok\n", "#1 String"),
    ("STS-B", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
              "0\tg\tf\t2012\t0\ts\ts\ta cat\t\t3.0\n", "sentence2"),
    ("SST-2", "sentence\tlabel\nfine film\t1\n  \t0\n", "sentence"),
])
def test_an_empty_or_blank_text_is_refused_with_file_line_and_field(tmp_path, task, text, field):
    split = "dev"
    path = write(tmp_path / task / f"{split}.tsv", text)
    line = len(text.rstrip("\n").split("\n"))
    with pytest.raises(glue.DataError, match=rf"{path}:{line}: field '{field}' is empty.*Fix: restore the sentence"):
        glue.read_local(glue.get_task(task), split, tmp_path)


def test_an_empty_text_from_the_hub_is_refused_naming_the_example():
    frame = pl.DataFrame({"idx": [0, 7], "sentence1": ["a", "b"], "sentence2": ["c", ""], "label": [1, 0]})
    with pytest.raises(glue.DataError, match=r"hub mrpc/train: field 'sentence2' is empty in 1 example\(s\), first idx 7"):
        glue.check_split(glue.get_task("MRPC"), frame, "hub mrpc/train")


def test_the_official_releases_known_empty_texts_are_left_out_and_any_other_refused(tmp_path, caplog):
    qqp = glue.get_task("QQP")
    frame = pl.DataFrame({"idx": [0, 310137, 362246], "sentence1": ["a", "b", "c"], "sentence2": ["d", "", "f"],
                          "label": [0, 0, 1]})
    kept = glue.check_split(qqp, frame, "hub qqp/train", "train")
    assert kept["idx"].to_list() == [0, 362246]  # 362246 is known, but not empty here: kept
    assert "idx [310137] have an empty text in the official release" in caplog.text
    with pytest.raises(glue.DataError, match="first idx 310137"):
        glue.check_split(qqp, frame, "hub qqp/dev", "dev")  # only train's two are known
