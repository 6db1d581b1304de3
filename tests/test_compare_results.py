"""tools/compare_results.py: two results folders compared file by file, by value, with renamed paths declared, the
volatile files left out, and every difference and one-sided file reported."""

from __future__ import annotations

import json
import sys

import polars as pl
import pytest
from safetensors.numpy import save_file

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))

import compare_results  # noqa: E402


def _run(root, score=0.6, dump="pretrained", rows=("a", "b"), seconds=1.0, model_folder="finetune/m/MRPC/finetuned"):
    """A small results folder: a table (Parquet, CSV, Markdown), a JSON record naming a result path, weights and a
    benchmark file."""
    results = root / "results"
    (results / "tables").mkdir(parents=True)
    table = pl.DataFrame({"model": ["m", "m"], "state": list(rows), "score": [0.5, score] if rows[0] == "a" else [score, 0.5]})
    table.write_parquet(results / "tables" / "fitness.parquet")
    table.write_csv(results / "tables" / "fitness.csv")
    (results / "tables" / "fitness.md").write_text(
        "| model | state | score |\n|---|---|---|\n" + "".join(f"| {r['model']} | {r['state']} | {r['score']} |\n"
                                                            for r in table.iter_rows(named=True)))
    folder = results / "attention" / "m" / "MRPC"
    folder.mkdir(parents=True)
    (folder / dump).parent.mkdir(parents=True, exist_ok=True)
    (folder / f"{dump}.json").write_text(json.dumps({
        "state": "pretrained", "examples": 8, "seconds": seconds, "model": f"{root.resolve()}/results/{model_folder}/model"}))
    save_file({"w": pl.Series([1.0, 2.0]).to_numpy()}, str(folder / f"{dump}.safetensors"), metadata={"seed": "1"})
    (results / "benchmarks").mkdir()
    (results / "benchmarks" / "job.tsv").write_text(f"s\n{seconds}\n")
    return results


def test_two_runs_with_the_same_results_pass_and_timings_and_benchmarks_are_left_out(tmp_path, capsys):
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after", seconds=9.0)
    assert compare_results.main([str(before), str(after)]) == 0
    out = capsys.readouterr().out
    assert "5 result files compared" in out and "every result file has the same values in both runs" in out
    result = compare_results.compare(before, after)
    # the record names its run's own folder and a timing: the same values, not byte-identical
    assert result.outcomes["attention/m/MRPC/pretrained.json"] == compare_results.SAME_VALUES
    assert result.outcomes["tables/fitness.parquet"] == compare_results.IDENTICAL and result.ok


def test_a_changed_number_is_reported_where_it_is(tmp_path, capsys):
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after", score=0.61)
    assert compare_results.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "tables/fitness.parquet: table: row 2: column 'score': 0.6 -> 0.61" in out
    assert "tables/fitness.csv: csv: row 2" in out and "tables/fitness.md: line 4" in out


def test_rows_in_another_order_are_accepted_and_reported_as_such(tmp_path):
    before, after = _run(tmp_path / "before", score=0.5), _run(tmp_path / "after", score=0.5, rows=("b", "a"))
    result = compare_results.compare(before, after)
    assert result.ok
    assert {result.outcomes[f"tables/fitness.{s}"] for s in ("parquet", "csv", "md")} == {compare_results.REORDERED}


def test_renamed_paths_are_compared_with_their_new_path_and_named_by_it_inside_files(tmp_path, capsys):
    before = _run(tmp_path / "before", dump="untuned", model_folder="finetune/m/MRPC/pretrained")
    after = _run(tmp_path / "after")
    result = compare_results.compare(before, after)
    assert not result.ok and result.before_only == ["attention/m/MRPC/untuned.json", "attention/m/MRPC/untuned.safetensors"]
    assert result.after_only == ["attention/m/MRPC/pretrained.json", "attention/m/MRPC/pretrained.safetensors"]
    renames = ["--rename", "attention/m/MRPC/untuned.=attention/m/MRPC/pretrained.",
               "--rename", "finetune/m/MRPC/pretrained/=finetune/m/MRPC/finetuned/"]
    assert compare_results.main([str(before), str(after), *renames]) == 0
    assert "2 of them under a renamed path" in capsys.readouterr().out
    # without the second rename the record's model path differs
    assert compare_results.main([str(before), str(after), *renames[:2]]) == 1
    assert "attention/m/MRPC/pretrained.json: $.model" in capsys.readouterr().out


def test_a_name_spelt_anew_is_respelt_in_paths_and_in_table_cells(tmp_path, capsys):
    before = _run(tmp_path / "before", dump="finetuned_seed1", rows=("a", "MRPC_seed1"))
    after = _run(tmp_path / "after", dump="finetuned/seed1", rows=("a", "MRPC/finetuned/seed1"))
    assert compare_results.main([str(before), str(after)]) == 1
    # the second regular expression holds an "=" (a lookahead): the last "=" separates the replacement
    respell = ["--respell", r"(finetuned|scratch)_seed(\d+)=\1/seed\2", "--respell", r"\b(MRPC)_seed(?=\d)(\d+)=\1/finetuned/seed\2"]
    assert compare_results.main([str(before), str(after), *respell]) == 0
    assert "2 of them under a renamed path" in capsys.readouterr().out
    # a respelling that misses one of the names leaves the table cells different
    assert compare_results.main([str(before), str(after), *respell[:2]]) == 1
    assert "tables/fitness.parquet" in capsys.readouterr().out


def test_a_file_in_one_run_only_fails_unless_ignored(tmp_path, capsys):
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after")
    (after / "tables" / "extra.parquet").write_bytes(b"")
    assert compare_results.main([str(before), str(after)]) == 1
    assert "in the run after only:\n       tables/extra.parquet" in capsys.readouterr().out
    assert compare_results.main([str(before), str(after), "--ignore", "tables/extra.*"]) == 0


def test_weights_are_compared_tensor_by_tensor(tmp_path):
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after")
    save_file({"w": pl.Series([1.0, 2.5]).to_numpy()}, str(after / "attention/m/MRPC/pretrained.safetensors"),
              metadata={"seed": "1"})
    assert compare_results.compare(before, after).differing == {
        "attention/m/MRPC/pretrained.safetensors": "tensor w differs (1 in all)"}


def test_a_drawing_of_a_spec_with_the_same_values_is_accepted(tmp_path):
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after")
    for results, digest, pixels in ((before, "0" * 32, b"png 1"), (after, "f" * 32, b"png 2")):
        spec = {"data": {"name": f"data-{digest}"}, "datasets": {f"data-{digest}": [{"x": 1}]}, "mark": "point"}
        (results / "tables" / "fitness.vl.json").write_text(json.dumps(spec))
        (results / "tables" / "fitness.png").write_bytes(pixels)
    result = compare_results.compare(before, after)
    assert result.ok and result.outcomes["tables/fitness.vl.json"] == compare_results.SAME_VALUES
    assert result.outcomes["tables/fitness.png"] == compare_results.REDRAWN
    (after / "tables" / "fitness.vl.json").write_text(json.dumps({"mark": "line"}))
    assert set(compare_results.compare(before, after).differing) == {"tables/fitness.vl.json", "tables/fitness.png"}


def test_a_rename_must_be_old_equals_new():
    with pytest.raises(SystemExit):
        compare_results.main(["a", "b", "--rename", "no-equals-sign"])


def test_a_changed_table_note_is_a_difference(tmp_path, capsys):
    # the note a stage keeps in a table's footer is what the report prints under it: same rows, another note differ
    before, after = _run(tmp_path / "before"), _run(tmp_path / "after")
    for results, note in ((before, "Scores: accuracy; Pearson r for STS-B"), (after, "Scores: accuracy")):
        table = pl.read_parquet(results / "tables" / "fitness.parquet")
        table.write_parquet(results / "tables" / "fitness.parquet", metadata={"note": note})
    assert compare_results.main([str(before), str(after)]) == 1
    assert ("tables/fitness.parquet: note from character 0: 'Scores: accuracy; Pearson r for STS-B' (before) != 'Scores: accuracy'"
            in capsys.readouterr().out)
