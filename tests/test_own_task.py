"""A task of one's own through the whole workflow: real GLUE data (SST-2 and MRPC from ../shared/data/glue) written out
in other layouts and declared as tasks prepares the same splits as the GLUE path (CoLA's raw layout with Matthews correlation too); the smoke run with its
MRPC declared as a task of one's own gives every result of the GLUE path (tools/compare_results.py, the task's name
aside); a three-class task scored by macro F1 runs every stage; and a declared task's bad input stops the run at
parse."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest
import yaml

from bertology_core.data import tasks
from conftest import FIXTURES, GLUE_SMOKE, REPO
from workflow_utils import SMOKE, snakemake

pytestmark = pytest.mark.workflow

# the hand labels of the smoke config name GLUE's tasks: a renamed task has none, so neither run uses them; and one
# job of each kind where the smoke config runs several (pruning's seeds and subnetworks, gate settings, probe seeds,
# CNNs): every stage still runs on every task, in fewer jobs. The disabling sweeps keep the smoke config's per-task
# seeds, respelt with the task's name in the run of one's own
ONE_OF_EACH = {"patterns": {"labels_dir": None, "labels_csv": None, "ensemble": 1},
               "pruning": {"per_task": {}, "subnetworks": ["good"]},
               "head_roles": {"gates": {"seeds": [1], "strengths": [10.0], "encoder": ["trained"], "epochs": 4,
                                        "learning_rate": 1.0}},
               "layer_mix": {"probe_seeds": [0]}}
FORMATS = ("csv", "jsonl", "parquet")


def write_layouts(glue_dir, folder) -> dict[str, dict]:
    """SST-2 and MRPC of ``glue_dir`` (the classic layout) written out as CSV with every field quoted and the columns
    renamed and reordered, as JSON Lines with string labels, and as Parquet with integer labels; the declaration of
    each, by name (<TASK>_<format>)."""
    declarations = {}
    for name in ("SST-2", "MRPC"):
        glue = tasks.glue_task(name, glue_dir)
        pair = glue.files.columns.text[1:] != ()
        text = ["first", "second"] if pair else ["review"]
        for split in glue.splits:
            frame = tasks.read_files(glue, split)
            named = frame.select(pl.col("label").alias("gold"), pl.col("sentence1").alias(text[0]),
                                 *([pl.col("sentence2").alias(text[1])] if pair else []))
            stem = folder / f"{name}_{split}"
            named.write_csv(f"{stem}.csv", quote_style="always")
            named.with_columns(pl.col("gold").replace_strict(dict(enumerate(glue.label_names)), return_dtype=pl.String)
                               ).write_ndjson(f"{stem}.jsonl")
            named.write_parquet(f"{stem}.parquet")
        meaning = {"labels": list(glue.label_names), "metrics": list(glue.metrics), "language": "en"}
        for kind in FORMATS:
            declarations[f"{name}_{kind}"] = meaning | {"files": {
                "dir": str(folder), "splits": {split: f"{name}_{split}.{kind}" for split in glue.splits},
                "text": text, "label": "gold"}}
    return declarations


def config_file(path, text: str, **overlay) -> str:
    """The smoke config as ``text`` (its task names respelt), with ``overlay`` on top, as one file."""
    config = yaml.safe_load(text)
    for key, value in overlay.items():
        config[key] = (config.get(key) or {}) | value if isinstance(value, dict) and key != "task_declarations" else value
    path.write_text(yaml.safe_dump(config))
    return path


def cola_raw(glue_dir) -> dict:
    """CoLA's raw layout (no header; source, label, original label, sentence) declared as a task of one's own, scored
    by Matthews correlation, with the official release's 16 dev sentences that are training sentences too."""
    return {"labels": ["unacceptable", "acceptable"], "metrics": ["matthews_correlation"], "language": "en",
            "files": {"dir": str(glue_dir / "CoLA"), "format": "tsv", "quoting": False, "header": False,
                      "column_names": ["source", "label", "original_label", "sentence"],
                      "splits": {"train": "train.tsv", "dev": "dev.tsv"}, "text": ["sentence"], "label": "label"},
            # the release's dev sentences that are also training sentences (else the run stops at parse, naming them)
            "known_overlap": {"dev": [55, 386, 387, 525, 771, 774, 808, 810, 914, 941, 942, 943, 949, 950, 953, 976]}}


def compare(glue_run, own_run, names: dict[str, str]) -> subprocess.CompletedProcess:
    """tools/compare_results.py on the two runs' results, every GLUE name respelt as the run's own (but where the
    claims quote the papers' numbers: "32% (MRPC) to 61%", "(MRPC 32% to QQP 61%)", "+1.2 points (MRPC).")."""
    respelt = [arg for old, new in names.items() for arg in ("--respell", rf"{old}(?!\) to | 32% to|\)\.)={new}")]
    return subprocess.run([sys.executable, str(REPO / "tools" / "compare_results.py"), str(glue_run / "results"),
                           str(own_run / "results"), *respelt], capture_output=True, text=True)


def test_every_layout_prepares_the_glue_paths_data(tmp_path, shared_glue):
    """The whole of SST-2 and MRPC, in each layout, and CoLA in its raw layout (headerless TSV, Matthews correlation,
    the release's repeated dev sentences declared): what prepare_data writes (all every later job reads of a task but
    its meaning, which the declarations repeat) equals the GLUE path's, split by split."""
    declarations = write_layouts(shared_glue, tmp_path)
    for name in ("SST-2", "MRPC"):
        glue = tasks.glue_task(name, shared_glue)
        for kind in FORMATS:
            task = tasks.declare(f"{name}_{kind}", declarations[f"{name}_{kind}"], tmp_path)
            assert task.meaning() | {"name": name} == glue.meaning()
            for split in glue.splits:
                ours = tasks.prepare_split(task, split, task.files, 200, 0)
                assert ours.equals(tasks.prepare_split(glue, split, glue.files, 200, 0)), (name, kind, split)
                assert tasks.read_files(task, split).equals(tasks.read_files(glue, split)), (name, kind, split)
    glue, raw = tasks.glue_task("CoLA", shared_glue), tasks.declare("CoLA_raw", cola_raw(shared_glue), tmp_path)
    assert raw.meaning() | {"name": "CoLA"} == glue.meaning()
    for split in glue.splits:
        assert tasks.prepare_split(raw, split, raw.files, 200, 0).equals(tasks.prepare_split(glue, split, glue.files, 200, 0))


def test_a_declared_task_gives_the_glue_paths_results_through_every_stage(smoke_run, tmp_path):
    """The smoke run again with its MRPC declared as a task of one's own (JSON Lines, string labels, renamed columns)
    beside STS-B from GLUE's layout: every result equals the GLUE path's (the session's smoke run), the name aside, and
    every caption names each task's own main metric."""
    declarations = write_layouts(GLUE_SMOKE, tmp_path)
    # names that sort as GLUE's do: where a stage orders tasks by name (the pattern classifier's maps, the atlas's
    # menu), the two runs then order them alike
    names = {"MRPC": "MRPC_jsonl"}
    # the smoke config's hand labels name GLUE's tasks: the same labels under the task's own name
    labels = tmp_path / "pattern_labels"
    labels.mkdir()
    for path in (FIXTURES / "pattern_labels").iterdir():
        (labels / path.name).write_text(path.read_text().replace("MRPC", names["MRPC"]))
    # a task of one's own has no published reference score unless the config gives one: this is GLUE's, so GLUE's
    references = yaml.safe_load((REPO / "config.yaml").read_text())["fitness"]["reference_scores"]
    config = config_file(tmp_path / "own.yaml", SMOKE.read_text().replace("MRPC", names["MRPC"]),
                         task_declarations={names["MRPC"]: declarations[names["MRPC"]]},
                         patterns={"labels_dir": str(labels)},
                         fitness={"reference_scores": {own: references[glue] for glue, own in names.items()}})
    snakemake(tmp_path / "own", configs=(config,))
    compared = compare(smoke_run, tmp_path / "own", names)
    assert compared.returncode == 0, f"{compared.stdout[-4000:]}\n{compared.stderr[-2000:]}"
    results = tmp_path / "own" / "results"
    fitness = pl.read_parquet(results / "fitness" / "fitness.parquet")
    assert dict(fitness.filter(pl.col("state") == "finetuned").select("task", "metric").unique().iter_rows()) == {
        "MRPC_jsonl": "accuracy", "STS-B": "pearson"}
    for stage in ("finetune", "attention", "linguistic", "disabling", "pruning", "outliers"):
        assert any((results / stage / "tiny-bert" / "MRPC_jsonl").rglob("*.*")), stage
    claims = pl.read_parquet(results / "claims" / "tiny-bert" / "headline.parquet")
    rte = claims.filter(pl.col("claim") == "first_layer_disabling_gain_rte")
    assert rte["verdict"].to_list() == ["not applicable"] and "RTE" in rte["note"][0]
    # every caption names each task's own main metric, as its declaration lists it (the captions once said
    # "accuracy; Pearson r for STS-B" whatever the tasks)
    captions = {path: _subtitle(json.loads(path.read_text())) for path in results.rglob("*.vl.json")}
    scored = "accuracy for MRPC_jsonl; Pearson r for STS-B"
    for summary in ("disabling/tiny-bert/summary/heads", "disabling/tiny-bert/summary/layers"):
        assert scored in captions[results / f"{summary}.vl.json"], summary
    # pruning runs on the declared task alone in this config: its one metric by name
    assert "Dev score (accuracy)" in captions[results / "pruning/tiny-bert/summary/michel.vl.json"]
    notes = pl.read_parquet_metadata(results / "pruning/tiny-bert/summary/lottery.parquet").get("note", "")
    assert "Scores: accuracy," in notes and "MRPC_jsonl 2" in notes


def _subtitle(spec: dict) -> str:
    """A saved figure's caption: its title's subtitle (a figure with nothing to draw has a plain title)."""
    title = spec.get("title")
    return " ".join(title.get("subtitle", [])) if isinstance(title, dict) else ""


def test_a_declared_tasks_bad_file_stops_the_run_at_parse_naming_file_line_and_field(tmp_path):
    (tmp_path / "train.csv").write_text("text,stars\nFine.,positive\nBad.,meh\n")
    (tmp_path / "dev.csv").write_text("text,stars\nOkay.,negative\n")
    declaration = {"labels": ["negative", "positive"], "files": {"dir": str(tmp_path), "splits": {"train": "train.csv",
                                                                                                 "dev": "dev.csv"},
                                                                "text": "text", "label": "stars"}}
    config = config_file(tmp_path / "bad.yaml", SMOKE.read_text(), tasks=["MRPC", "reviews"],
                         task_declarations={"reviews": declaration})
    result = snakemake(tmp_path / "run", "-n", configs=(config,), check=False)
    assert result.returncode != 0
    assert f"{tmp_path}/train.csv:3: field 'stars' = 'meh' is not a reviews label" in result.stderr + result.stdout


def test_an_undeclared_task_is_a_config_error_naming_the_fix(tmp_path):
    config = config_file(tmp_path / "bad.yaml", SMOKE.read_text(), tasks=["MRPC", "BoolQ"])
    result = snakemake(tmp_path / "run", "-n", configs=(config,), check=False)
    assert result.returncode != 0
    assert "config 'tasks' names 'BoolQ', which is not declared. Fix: declare it under task_declarations" in result.stdout + result.stderr


def test_an_unreachable_hub_dataset_warns_a_dry_run_and_stops_a_real_run_before_any_job(tmp_path):
    declaration = {"labels": ["negative", "positive"], "language": "en",
                   "hub": {"dataset": "nobody/no-such-dataset", "splits": {"train": "train", "dev": "validation"},
                           "text": "text", "label": "label"}}
    config = config_file(tmp_path / "hub.yaml", SMOKE.read_text(), tasks=["MRPC", "reviews"],
                         task_declarations={"reviews": declaration})
    dry = snakemake(tmp_path / "run", "-n", configs=(config,))
    assert "reviews: dataset nobody/no-such-dataset could not be loaded" in dry.stdout + dry.stderr
    real = snakemake(tmp_path / "run", configs=(config,), check=False)
    assert real.returncode != 0
    output = real.stdout + real.stderr
    assert "Bad input data (nothing was run)" in output and "bring the data over as files" in output
    assert not (tmp_path / "run" / "results").exists()


def test_a_three_class_task_scored_by_macro_f1_runs_every_stage_on_a_dev_set_of_nine(tmp_path):
    """The CSV recipe's three-class task (configs/examples/my_csv_task.yaml: its declaration and data, macro F1 first,
    multiclass Matthews beside it) on the smoke model, through every stage, on a dev set of nine reviews: bootstrap
    resamples that lack a class, a greedy search where no head may help, probes and pruning on three classes."""
    recipe = yaml.safe_load((REPO / "configs" / "examples" / "my_csv_task.yaml").read_text())
    config = config_file(tmp_path / "reviews.yaml", SMOKE.read_text().replace("MRPC", "reviews"), tasks=["reviews"],
                         task_declarations=recipe["task_declarations"], data={"max_eval_examples": 9},
                         fitness={"min_examples": 5}, disabling={"per_task": {}}, **ONE_OF_EACH)
    snakemake(tmp_path / "run", configs=(config,))
    results = tmp_path / "run" / "results"
    fitness = pl.read_parquet(results / "fitness" / "fitness.parquet").filter(pl.col("state") == "finetuned")
    assert set(fitness["metric"]) == {"f1_macro"} and fitness["seed"].to_list() == [1]
    # the seeded sample of nine holds one review of a class: about a third of the bootstrap resamples lack that class
    dev = pl.read_parquet(results / "data" / "reviews" / "dev.parquet")
    assert dev.height == 9 and dev["label"].value_counts()["count"].min() == 1
    record = json.loads((results / "finetune/tiny-bert/reviews/finetuned/seed1/evaluation.json").read_text())
    assert record["eval"]["dev"]["examples"] == 9 and {"f1_macro", "matthews_correlation"} <= set(record["eval"]["dev"])
    for stage in ("finetune", "attention", "linguistic", "disabling", "pruning", "outliers"):
        assert any((results / stage / "tiny-bert" / "reviews").rglob("*.parquet")), stage
    for stage in ("baselines", "patterns", "attention_change", "probing", "head_roles", "layer_mix", "claims", "report"):
        assert any((results / stage / "tiny-bert").rglob("*.parquet")), stage
    heads = json.loads((results / "disabling/tiny-bert/summary/heads.vl.json").read_text())
    assert "(macro F1)" in _subtitle(heads)
    claims = pl.read_parquet(results / "claims" / "tiny-bert" / "claims.parquet")
    assert "best_head_disabling_gain" in set(claims["claim"])
