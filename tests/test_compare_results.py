"""tools/compare_results.py: old results mapped to the new state names, and a difference beyond the renames reported."""

from __future__ import annotations

import json
import sys

import polars as pl

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))

import compare_results  # noqa: E402


def test_old_paths_map_to_new_paths():
    assert compare_results.new_path("finetune/m/MRPC/untuned/seed1/metrics.json") == "finetune/m/MRPC/pretrained/seed1/metrics.json"
    assert compare_results.new_path("finetune/m/MRPC/pretrained/seed1/metrics.json") == "finetune/m/MRPC/finetuned/seed1/metrics.json"
    assert compare_results.new_path("disabling/m/MRPC/random/deltas.parquet") == "disabling/m/MRPC/scratch/deltas.parquet"
    assert compare_results.new_path("pruning/m/MRPC/pretrained/seed2/importance.parquet") == "pruning/m/MRPC/finetuned/seed2/importance.parquet"
    assert compare_results.new_path("pruning/m/summary/lottery.md") == "pruning/m/summary/lottery.md"
    assert compare_results.new_path("probing/m/random/probes.parquet") == "probing/m/random_weights/probes.parquet"
    assert compare_results.new_path("attention/m/MRPC/untuned.attention.parquet") == "attention/m/MRPC/pretrained.attention.parquet"
    assert compare_results.new_path("patterns/m/labelled/MRPC/random_seed3.json") == "patterns/m/labelled/MRPC/scratch_seed3.json"
    assert compare_results.new_path("linguistic/spacy/MRPC.parquet") == "linguistic/spacy/MRPC.parquet"


def test_old_values_map_to_new_values_by_their_column():
    assert compare_results.new_cell("init", "pretrained") == "finetuned" and compare_results.new_cell("init", "untuned") == "pretrained"
    assert compare_results.new_cell("state", "random") == "random_weights"  # probing's random: random weights
    assert compare_results.new_cell("kind", "random") == "random"  # a lottery subnetwork stays one
    assert compare_results.new_cell("dump", "MRPC/pretrained_seed1") == "MRPC/finetuned_seed1"
    assert compare_results.new_text("<workdir>/results/finetune/m/MRPC/pretrained/seed1/model, untuned obj") == \
        "<workdir>/results/finetune/m/MRPC/finetuned/seed1/model, pretrained obj"
    assert compare_results.new_text("| pre-trained (untuned) | random init + fine-tuned |") == "| pre-trained | from scratch |"
    assert compare_results.new_text("states: untuned, random, MRPC_seed1.") == "states: pretrained, random_weights, MRPC_seed1."
    assert compare_results.new_text("probing.random_seed and pretrained") == "probing.random_seed and pretrained"


def _run(root, state, dump, score):
    results = root / "results"
    (results / "tables").mkdir(parents=True)
    table = pl.DataFrame({"model": ["m", "m"], state[0]: [state[1], state[2]], "seed": [1, 1], "score": [0.5, score]})
    table.write_parquet(results / "tables" / "fitness.parquet")
    table.write_csv(results / "tables" / "fitness.csv")
    folder = results / "attention" / "m" / "MRPC"
    folder.mkdir(parents=True)
    (folder / f"{dump}.json").write_text(json.dumps({"state": dump, "examples": 8}))
    return results


def test_a_run_identical_apart_from_the_renames_passes_and_a_changed_number_is_reported(tmp_path, capsys):
    old = _run(tmp_path / "old", ("init", "pretrained", "random"), "pretrained_seed1", 0.6)
    new = _run(tmp_path / "new", ("state", "finetuned", "scratch"), "finetuned_seed1", 0.6)
    assert compare_results.main([str(old), str(new)]) == 0
    assert "3 result files compared" in capsys.readouterr().out
    changed = _run(tmp_path / "changed", ("state", "finetuned", "scratch"), "finetuned_seed1", 0.61)
    assert compare_results.main([str(old), str(changed)]) == 1
    out = capsys.readouterr().out
    assert "tables/fitness.parquet: table: row 2: column 'score': 0.6 -> 0.61" in out and "tables/fitness.csv" in out
