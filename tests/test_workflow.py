"""The smoke config end to end through snakemake, and the rerun semantics users rely on.

Each test runs snakemake in its own working directory (``--directory``), so results
never mix with a real run in the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from bertology_core.jobs import needs, submissions
from conftest import GLUE_SMOKE, REPO, TINY_BERT, UD_SMOKE
from slurm_cluster import missing_programs
from workflow_utils import SMOKE, assert_same_results, jobs_to_run, snakemake

pytestmark = pytest.mark.workflow


def test_smoke_run_writes_every_output(smoke_run):
    table = smoke_run / "results" / "baselines" / "tiny-bert"
    for name in ("baselines.csv", "baselines.parquet", "baselines_long.parquet", "baselines_summary.parquet"):
        assert (table / name).stat().st_size > 0
    assert not (table / "baselines.md").exists()  # a table is written once: Parquet, and CSV for Snakemake's report
    rows = pl.read_parquet(table / "baselines.parquet").select("task", "metric").rows()
    assert ("MRPC", "f1") in rows and ("STS-B", "pearson") in rows
    assert pl.read_csv(table / "baselines.csv").select("task", "metric").rows() == rows
    run = smoke_run / "results" / "finetune" / "tiny-bert" / "MRPC" / "finetuned" / "seed1"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["model"]["kind"] == "local" and len(metrics["model"]["config_sha256"]) == 64
    assert metrics["hyperparameters"]["learning_rate"] == 1e-3
    # the run's record (evaluation.json) plus its fitness verdict: the tiny random model learns nothing
    assert {k: v for k, v in metrics.items() if k != "fitness"} == json.loads((run / "evaluation.json").read_text())
    assert metrics["fitness"]["fit"] is False and metrics["fitness"]["metric"] == "accuracy"
    assert (run / "model" / "model.safetensors").is_file() and (run / "model" / "tokenizer_config.json").is_file()
    assert not list((run / "model").glob("*.bin"))
    assert metrics["state"] == "finetuned"
    # the load report: only the task head was drawn anew, in the run's record and the resolved model's
    loaded = metrics["weights_loaded"]
    assert (loaded["new"], loaded["unused"], loaded["redrawn"]) == (["classifier.bias", "classifier.weight"], [], [])
    assert loaded["head_loaded"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]  # the pre-trained pooler
    resolved = json.loads((smoke_run / "results" / "models" / "tiny-bert" / "resolved.json").read_text())
    assert resolved["weights_loaded"]["new"] == ["classifier.bias", "classifier.weight"]
    scratch = json.loads((run.parents[1] / "scratch" / "seed1" / "evaluation.json").read_text())
    assert scratch["weights_loaded"]["new"] == []  # from scratch: nothing loaded
    assert (smoke_run / "logs" / "finetune" / "tiny-bert" / "MRPC" / "finetuned" / "seed1.log").is_file()
    # the pre-trained encoder is evaluated (state pretrained), never trained or saved
    pretrained = smoke_run / "results" / "finetune" / "tiny-bert" / "MRPC" / "pretrained" / "seed1"
    assert json.loads((pretrained / "metrics.json").read_text())["state"] == "pretrained"
    assert not (pretrained / "model").exists()
    for task in ("MRPC", "STS-B"):
        for state in ("pretrained", "finetuned/seed1"):
            summary = json.loads((smoke_run / "results" / "attention" / "tiny-bert" / task / f"{state}.json").read_text())
            assert summary["examples"] == 8 and summary["layers"] == [0, 1] and summary["heads"] == 4
    fine_tuned = json.loads((smoke_run / "results/attention/tiny-bert/MRPC/finetuned/seed1.json").read_text())
    assert fine_tuned["model_folder"].endswith("finetune/tiny-bert/MRPC/finetuned/seed1/model")
    assert fine_tuned["state"] == "finetuned/seed1"


def test_every_fine_tuned_model_has_a_verdict_that_every_summary_and_the_atlas_repeat(smoke_run):
    results = smoke_run / "results"
    verdicts = pl.read_parquet(results / "fitness" / "fitness.parquet")
    # every fine-tuned run: MRPC seeds 1-2 (finetuned), STS-B seed 1, and each task's from-scratch baseline
    assert sorted(verdicts.select("task", "state", "seed").iter_rows()) == [
        ("MRPC", "finetuned", 1), ("MRPC", "finetuned", 2), ("MRPC", "scratch", 1), ("STS-B", "finetuned", 1), ("STS-B", "scratch", 1)]
    assert not verdicts["fit"].any()  # a tiny random BERT on 40 examples learns nothing: all unfit
    baselines = pl.read_parquet(results / "baselines" / "tiny-bert" / "baselines.parquet")
    assert baselines.columns == ["task", "metric", "pre-trained", "from scratch", "fine-tuned", "trivial predictor",
                                 "fine-tuned: fit for analysis", "from scratch: fit for analysis"]
    assert ("MRPC", "accuracy", "0.5", "0.5", "0.5 ± 0.0", "0.5", "UNFIT: all 2 seeds", "UNFIT") in baselines.rows()
    for stem in ("patterns/tiny-bert/summary/shares", "patterns/tiny-bert/summary/heads", "attention_change/tiny-bert/summary/cosine",
                 "linguistic/tiny-bert/summary/features", "disabling/tiny-bert/summary/heads", "disabling/tiny-bert/summary/layers",
                 "pruning/tiny-bert/summary/lottery", "pruning/tiny-bert/summary/michel", "probing/tiny-bert/summary/probes",
                 "report/tiny-bert/head_atlas"):
        table = pl.read_parquet(results / f"{stem}.parquet")
        labels = set(table["fit_for_analysis"].drop_nulls())
        assert labels and all(label.startswith("UNFIT") for label in labels), (stem, labels)
    # rows that rest on no fine-tuned model (the pre-trained encoder) carry no verdict
    probes = pl.read_parquet(results / "probing/tiny-bert/summary/probes.parquet")
    assert probes.filter(pl.col("state").is_in(["pretrained", "random_weights"]))["fit_for_analysis"].null_count() == 12
    claims = pl.read_parquet(results / "claims/tiny-bert/claims.parquet")
    assert set(claims.filter(pl.col("claim") == "best_head_disabling_gain")["verdict"]) == {"model unfit"}
    page = (results / "report" / "index.html").read_text()
    assert page.count('class="warning"') >= 7  # baselines and every section showing a fine-tuned model's results


def test_skip_leaves_unfit_models_out_of_the_dag_and_fail_stops_before_any_analysis(smoke_run, tmp_path):
    # on a copy of the smoke run (warn): only what the policy changes reruns. STS-B's margin of -2 makes its model
    # fit (any Pearson above -2); MRPC's models stay unfit
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    skip = tmp_path / "skip.yaml"
    skip.write_text(yaml.safe_dump({"fitness": {"if_unfit": "skip", "per_task": {"STS-B": {"margin": -2.0}}}}))
    configs = (SMOKE, skip)
    snakemake(workdir, configs=configs)
    # the whole DAG (every output file, done or to do) holds no analysis of MRPC's fine-tuned models: no dump, sweep,
    # pruning or probe is planned, so none can be made, not even empty
    summary = snakemake(workdir, "--summary", configs=configs).stdout.splitlines()
    in_dag = [line.split("\t")[0] for line in summary[1:] if "\t" in line]
    assert "results/attention/tiny-bert/STS-B/finetuned/seed1.attention.parquet" in in_dag
    assert "results/attention/tiny-bert/MRPC/pretrained.attention.parquet" in in_dag  # the pre-trained encoder still is
    assert "results/finetune/tiny-bert/MRPC/finetuned/seed2/metrics.json" in in_dag  # fine-tuned and judged
    mrpc_analyses = [f for f in in_dag if "MRPC" in f and not f.startswith("results/finetune/") and "finetuned" in f]
    assert mrpc_analyses == []
    assert not [f for f in in_dag if f.startswith("results/pruning/")]  # pruning runs on MRPC alone in the smoke config
    results = workdir / "results"
    probes = pl.read_parquet(results / "probing/tiny-bert/summary/probes.parquet")
    assert set(probes["state"]) == {"pretrained", "random_weights"}
    assert set(pl.read_parquet(results / "disabling/tiny-bert/summary/heads.parquet")["task"]) == {"STS-B"}
    page = (results / "report" / "index.html").read_text()
    assert "left these fine-tuned models out of every analysis" in page and "tiny-bert MRPC seed 2" in page
    assert "unfit models are left out" in page  # the pruning section says why it is empty

    fail = tmp_path / "fail.yaml"
    fail.write_text(yaml.safe_dump({"fitness": {"if_unfit": "fail"}}))
    failed = snakemake(workdir, configs=(SMOKE, fail), check=False)
    assert failed.returncode != 0
    message = failed.stdout + failed.stderr
    assert "tiny-bert MRPC seed 1: accuracy 0.500 vs trivial 0.500" in message and "fitness.if_unfit: skip" in message
    assert "rule disabling_sweep" not in message and "rule dump_attention" not in message


def test_smoke_run_writes_every_attention_analysis(smoke_run):
    results = smoke_run / "results"
    for stem in ("patterns/tiny-bert/summary/shares", "patterns/tiny-bert/summary/heads",
                 "attention_change/tiny-bert/summary/cosine", "linguistic/tiny-bert/summary/features",
                 "linguistic/tiny-bert/summary/relations", "linguistic/tiny-bert/summary/cls"):
        for suffix in (".parquet", ".csv"):
            assert (results / f"{stem}{suffix}").stat().st_size > 0, stem
    for stem in ("patterns/tiny-bert/summary/shares", "attention_change/tiny-bert/summary/cosine",
                 "linguistic/tiny-bert/summary/features"):
        for suffix in (".png", ".vl.json"):
            assert (results / f"{stem}{suffix}").stat().st_size > 1000, stem
        # each summary writes its table and figure once, for both reports: no Markdown, HTML or SVG copies
        assert not any((results / f"{stem}{suffix}").exists() for suffix in (".md", ".html", ".svg")), stem
    classes = pl.read_parquet(results / "patterns/tiny-bert/MRPC/pretrained.classes.parquet")
    assert classes.height == 8 * 2 * 4  # examples x layers x heads
    assert {"rule_label", "cnn_label", "special_mass", "diagonal_mass"} <= set(classes.columns)
    # the smoke model has a label set (tests/fixtures/pattern_labels, found by its card's model spec and checked
    # against its weights): the CNN learns those labels, the rule labeller is fitted on them, every output says so
    assert classes["labels_source"].str.contains("labels made by eye from").all()
    report = json.loads((results / "patterns/tiny-bert/classifier/report.json").read_text())
    assert report["labels_source"].startswith("labels made by eye from") and 0 <= report["macro_f1_mean"] <= 1
    assert report["training_maps"] == 96 and report["second_pass"]["maps"] == 12
    assert report["rule_labeller"]["fitted_on_maps"] + report["rule_labeller"]["held_out"]["maps"] == 96
    training = pl.read_parquet(results / "patterns/tiny-bert/classifier/training_maps.parquet")
    assert set(training["idx"]) == {0, 1, 2, 3, 4, 5}  # by GLUE idx, not by the dump's example numbers; no test map
    # the card's test labels (idx 6 and 7) score the final CNN and rules once and train nothing
    assert report["test"]["maps"] == 32 and report["test"]["frequent_classes_without_test_labels"] == []
    assert {row["idx"] for row in report["test"]["predictions"]} == {6, 7}
    classifier = pl.read_parquet(results / "patterns/tiny-bert/summary/classifier.parquet")
    assert classifier["labeller"].to_list()[:3] == ["CNN", "rules, thresholds fitted on every training label", "CNN"]
    assert classifier["evaluation"][0].startswith("test labels (32 maps") and classifier["interval_low"][0] is not None
    assert classifier.filter(pl.col("labeller") == "second labelling pass")["cohen_kappa"][0] < 1  # one label differs
    assert "labels made by eye from" in (results / "patterns/tiny-bert/summary/shares.csv").read_text()
    cosine = pl.read_parquet(results / "attention_change/tiny-bert/summary/cosine.parquet")
    assert cosine.height == 2 * 2 * 4 and cosine["cosine"].is_between(-1, 1.0000001).all()
    assert "ITEMS" in (results / "patterns/tiny-bert/annotate.html").read_text()


def test_hand_labels_keyed_by_idx_survive_another_attention_sample(smoke_run, tmp_path):
    """Another attention.seed draws other dev examples for every analysis dump; the labelled maps are computed
    for the labelled examples themselves: they are not recomputed, and the classifier learns the same maps."""
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    other = tmp_path / "seed.yaml"
    other.write_text(yaml.safe_dump({"attention": {"seed": 7}}))
    configs = (SMOKE, other)
    planned = jobs_to_run(workdir, configs)
    assert planned["dump_attention"] == 4 and planned["pattern_classifier"] == 1 and "labelled_maps" not in planned
    before = pl.read_parquet(workdir / "results/patterns/tiny-bert/classifier/training_maps.parquet")
    old_sample = pl.read_parquet(workdir / "results/attention/tiny-bert/MRPC/pretrained.tokens.parquet")["idx"].to_list()
    snakemake(workdir, "results/patterns/tiny-bert/classifier/report.json", configs=configs)
    new_sample = pl.read_parquet(workdir / "results/attention/tiny-bert/MRPC/pretrained.tokens.parquet")["idx"].to_list()
    assert sorted(old_sample) != sorted(new_sample)  # the analysis sample did change
    after = pl.read_parquet(workdir / "results/patterns/tiny-bert/classifier/training_maps.parquet")
    assert before.equals(after)
    old_report = json.loads((smoke_run / "results/patterns/tiny-bert/classifier/report.json").read_text())
    new_report = json.loads((workdir / "results/patterns/tiny-bert/classifier/report.json").read_text())
    assert new_report["cnn_cross_validated"] == old_report["cnn_cross_validated"]  # same maps, same seed: same CNN
    assert new_report["rule_labeller"] == old_report["rule_labeller"]


def test_smoke_run_writes_the_disabling_sweeps_and_their_statistics(smoke_run):
    results = smoke_run / "results"
    summary = results / "disabling/tiny-bert/summary"
    for stem in ("heads", "layers", "extremes", "selection", "greedy"):
        for suffix in (".parquet", ".csv"):
            assert (summary / f"{stem}{suffix}").stat().st_size > 0, stem
    for stem in ("heads", "layers"):
        for suffix in (".png", ".vl.json"):
            assert (summary / f"{stem}{suffix}").stat().st_size > 1000, stem
    # MRPC is swept for two seeds (smoke config), STS-B for the top-level seed only
    heads = pl.read_parquet(summary / "heads.parquet")
    assert heads.height == 2 * 2 * 4  # tasks x layers x heads of the tiny model
    assert dict(heads.group_by("task").agg(pl.col("seeds").first()).iter_rows()) == {"MRPC": 2, "STS-B": 1}
    assert (heads["ci_low"] <= heads["delta"] + 1e-12).all() and (heads["delta"] <= heads["ci_high"] + 1e-12).all()
    for task, seeds in (("MRPC", (1, 2)), ("STS-B", (1,))):
        for seed in seeds:
            sweep = pl.read_parquet(results / f"disabling/tiny-bert/{task}/finetuned/seed{seed}/sweep.parquet")
            assert sweep["config"].n_unique() == 1 + 2 * 4 + 2  # intact, every head, every layer
            # the sweep's intact model is the fine-tuning job's model: same dev predictions
            finetuned = pl.read_parquet(results / f"finetune/tiny-bert/{task}/finetuned/seed{seed}/predictions.parquet")
            intact = sweep.filter(pl.col("kind") == "intact").sort("idx")
            assert intact["idx"].to_list() == finetuned.sort("idx")["idx"].to_list()
            if task == "MRPC":
                assert intact["prediction"].to_list() == finetuned.sort("idx")["prediction"].to_list()
            else:
                assert (intact["prediction"] - finetuned.sort("idx")["prediction"]).abs().max() < 1e-5
    greedy = pl.read_parquet(summary / "greedy.parquet")
    assert set(greedy["task"]) == {"MRPC", "STS-B"} and (greedy["step"] <= 2).all()
    selection = pl.read_parquet(summary / "selection.parquet")
    assert (selection["selection_examples"] + selection["report_examples"] == 20).all()


def test_smoke_run_writes_importance_pruning_and_lottery_tickets(smoke_run):
    from safetensors.numpy import load_file

    results = smoke_run / "results"
    summary = results / "pruning/tiny-bert/summary"
    for stem in ("importance", "michel", "lottery_curves", "lottery", "lottery_seeds", "stability", "survival", "compact"):
        assert (summary / f"{stem}.parquet").stat().st_size > 0, stem
    for stem in ("importance", "michel", "lottery_curves", "survival"):
        assert (summary / f"{stem}.png").stat().st_size > 1000, stem
    importance = pl.read_parquet(summary / "importance.parquet")
    assert importance.filter(pl.col("element") == "head").height == 2 * 4  # layers x heads (MRPC, mean over seeds)
    michel = pl.read_parquet(summary / "michel.parquet")
    assert michel.height == 2 and michel["prunable_share"].is_between(0, 1).all()  # MRPC seeds 1 and 2
    lottery = pl.read_parquet(summary / "lottery.parquet")
    # the reference is the fine-tuning run itself (smoke re-fine-tunes with the fine-tuning recipe)
    full = lottery.filter(pl.col("kind") == "full")
    assert full["seeds"].to_list() == [2, 2] and full["metric"].to_list() == ["accuracy"] * 2
    assert set(zip(lottery["method"], lottery["kind"])) == {("all", "full"), ("m", "good"), ("m", "bad"), ("s", "good"), ("s", "bad")}
    # each ticket chosen on half A of dev and reported on half B, beside the paper's protocol (chosen and reported on dev)
    assert set(lottery["protocol"]) == {"selected on half A, reported on half B", "paper: selected and reported on all of dev"}
    held_out, paper = (full.filter(pl.col("protocol").str.starts_with(p)) for p in ("selected", "paper"))
    assert 0 < held_out["report_examples"][0] < paper["report_examples"][0]
    # each protocol's score is the network's on its report set; the same model on half B under both
    assert held_out["mean"][0] == pytest.approx(held_out["half_b_mean"][0]) and paper["mean"][0] == pytest.approx(paper["dev_mean"][0])
    assert full["half_b_minus_held_out_mean"].to_list() == pytest.approx([0.0, 0.0])
    stability = pl.read_parquet(summary / "stability.parquet")
    assert set(stability.filter(pl.col("task") == "MRPC")["element"]) == {"heads", "mlps", "weights"}
    for seed in (1, 2):
        run = results / f"pruning/tiny-bert/MRPC/finetuned/seed{seed}"
        curve = pl.read_parquet(run / "s_held_out_curve.parquet")
        chosen = curve.filter(pl.col("chosen"))
        assert chosen.height == 1 and chosen["share_of_full"][0] >= 0.9 - 1e-9
        ticket = json.loads((run / "s_held_out_ticket.json").read_text())
        paper = json.loads((run / "s_paper_ticket.json").read_text())
        assert ticket["split_seed"] == 0 and ticket["selection_examples"] + ticket["report_examples"] == paper["report_examples"]
        assert paper["selection_examples"] == paper["report_examples"]  # the paper's protocol: the same examples
        mask = load_file(str(run / "s_held_out_mask.safetensors"))
        assert mask["heads"].shape == (2, 4) and mask["mlps"].shape == (2,)
        compact = json.loads((run / "s_compact.json").read_text())
        assert compact["predictions_equal_gated"] and compact["heads_kept"] == int(mask["heads"].sum())
        good = json.loads((run / "subnetworks/s-good-held_out.json").read_text())
        predictions = pl.read_parquet(run / "subnetworks/s-good-held_out.predictions.parquet")
        assert good["heads_kept"] == compact["heads_kept"] and predictions.columns == ["idx", "label", "prediction"]


def test_smoke_run_writes_head_roles_and_l0_gates(smoke_run):
    results = smoke_run / "results/head_roles/tiny-bert"
    roles = pl.read_parquet(results / "summary/roles.parquet")
    # every dump: MRPC and STS-B, pre-trained and fine-tuned seed 1; 2 layers x 4 heads each
    assert sorted(set(roles.select("task", "state", "seed").iter_rows())) == [
        ("MRPC", "finetuned", 1), ("MRPC", "pretrained", None), ("STS-B", "finetuned", 1), ("STS-B", "pretrained", None)]
    assert roles.height == 4 * 2 * 4
    assert roles["confidence"].is_between(0, 1).all() and roles["positional_share"].is_between(0, 1).all()
    # the probing stage scores the pre-trained encoder and MRPC seed 1: only their rows have a syntactic verdict
    scored = roles.filter(pl.col("syntactic").is_not_null()).select("task", "state").unique().sort("task", "state").rows()
    assert scored == [("MRPC", "finetuned"), ("MRPC", "pretrained"), ("STS-B", "pretrained")]
    relations = pl.read_parquet(results / "summary/importance_relations.parquet")
    assert set(relations["target"]) >= {"Michel importance", "score drop when disabled (uniform)"}
    assert set(relations.filter(pl.col("target") == "Michel importance")["seed"]) == {1}  # the dumped seed only
    gates = pl.read_parquet(results / "summary/gates.parquet")
    assert gates.select("weights", "strength").sort("weights", "strength").rows() == [
        ("frozen", 0.1), ("frozen", 10.0), ("trained", 0.1), ("trained", 10.0)]
    assert gates["heads_kept"].is_between(0, 8).all() and (gates["ci_low"] <= gates["gates_minus_michel"]).all()
    record = json.loads((results / "gates/MRPC/seed1/frozen_strength10.0.json").read_text())
    assert sum(map(sum, record["michel_heads"])) == record["heads_kept"]  # Michel et al.'s cut at the gates' count
    assert (results / "summary/gates.png").stat().st_size > 1000 and (results / "summary/roles.png").stat().st_size > 1000
    atlas = pl.read_parquet(smoke_run / "results/report/tiny-bert/head_atlas.parquet")
    assert {"confidence", "positional_share", "rare_share", "roles"} <= set(atlas.columns)


def test_smoke_run_writes_outliers_and_layer_mix(smoke_run):
    results = smoke_run / "results/outliers/tiny-bert"
    dimensions = pl.read_parquet(results / "summary/dimensions.parquet")
    # the pre-trained encoder and every disabled fine-tuned model (MRPC seeds 1 and 2, STS-B seed 1)
    assert sorted(set(dimensions.select("state", "task", "seed").iter_rows()), key=str) == sorted(
        [("pretrained", None, None), ("finetuned", "MRPC", 1), ("finetuned", "MRPC", 2), ("finetuned", "STS-B", 1)], key=str)
    parameters = pl.read_parquet(results / "parameters.parquet")
    assert parameters.group_by("state", "task", "seed").len()["len"].to_list() == [2 * 2 * 32] * 4  # 2 norms x 2 layers x 32
    records = {(task, seed): json.loads((results / task / f"seed{seed}/disabling.json").read_text())
               for task, seed in (("MRPC", 1), ("MRPC", 2), ("STS-B", 1))}
    for record in records.values():
        # each model's own outliers, then 3 placements x (outliers + 5 random draws), or the intact model alone
        assert record["configurations"] == (1 + 3 * 6 if record["outliers"] else 1)
    with_outliers = {key for key, record in records.items() if record["outliers"]}
    assert with_outliers, "the smoke config's looser criterion (outliers.sigmas 1.5) must find outliers to disable"
    contrast = pl.read_parquet(results / "summary/contrast.parquet")
    assert set(contrast.select("task", "seed").drop_nulls().iter_rows()) == with_outliers
    pooled = contrast.filter(pl.col("seed").is_null())
    assert sorted(pooled["placement"]) == sorted(["output", "attention", "both"] * len({t for t, _ in with_outliers}))
    assert (pooled["draws"] == 5).all() and pooled["outliers_delta"].is_finite().all()
    np.testing.assert_allclose(pooled["difference"], pooled["outliers_delta"] - pooled["random_mean_delta"], atol=1e-12)
    assert (results / "summary/dimensions.png").stat().st_size > 1000 and (results / "summary/contrast.png").stat().st_size > 1000
    mix = pl.read_parquet(smoke_run / "results/layer_mix/tiny-bert/summary/expected_layers.parquet")
    # every probed state (pre-trained, random weights, MRPC seed 1) x label set (upos, deprel)
    assert mix.height == 3 * 2 and set(mix["labels"]) == {"upos", "deprel"} and (mix["layers"] == 2).all()
    cumulative = pl.read_parquet(smoke_run / "results/layer_mix/tiny-bert/summary/cumulative.parquet")
    assert cumulative.group_by("state", "labels").agg(pl.col("mix_weight").sum())["mix_weight"].to_list() == pytest.approx([1.0] * 6)
    claims = pl.read_parquet(smoke_run / "results/claims/tiny-bert/claims.parquet")
    measured = claims.filter((pl.col("claim") == "outliers_disrupt") & ~pl.col("scope").str.contains("pooled"))
    # one row per fine-tuned model: a number where it has outliers, the finding where it has none
    assert set(measured["scope"]) == {f"{t} seed {s}" for t, s in records}
    numbers = measured.filter(pl.col("this_run").is_finite())
    assert set(numbers["scope"]) == {f"{t} seed {s}" for t, s in with_outliers}
    assert measured.filter(~pl.col("this_run").is_finite())["note"].str.contains("no outlier dimension found").all()
    # against the worst random draw (the paper's contrast of a large loss with none), the random mean beside it
    np.testing.assert_allclose(pooled["minus_worst"], pooled["outliers_delta"] - pooled["random_worst"], atol=1e-12)
    assert claims.filter(pl.col("claim") == "pos_before_dependencies")["scope"].to_list() == ["deprel - upos"]


def test_smoke_run_writes_probes_and_syntactic_heads(smoke_run):
    from safetensors.numpy import load_file

    summary = smoke_run / "results/probing/tiny-bert/summary"
    for suffix in (".parquet", ".csv", ".png", ".vl.json"):
        assert (summary / f"probes{suffix}").stat().st_size > 0
    probes = pl.read_parquet(summary / "probes.parquet")
    # the pre-trained, random and MRPC-fine-tuned states; two label sets; embeddings + 2 layers
    assert set(probes["state"]) == {"pretrained", "random_weights", "MRPC/finetuned/seed1"} and set(probes["labels"]) == {"upos", "deprel"}
    assert probes.height == 3 * 2 * 3 and probes["selectivity"].is_between(-1, 1).all()
    features = load_file(str(smoke_run / "results/probing/tiny-bert/pretrained/features.safetensors"))
    assert features["train"].shape == (3, 21, 32) and features["dev"].shape == (3, 12, 32)  # smoke treebank words
    heads = pl.read_parquet(summary / "syntactic_heads.parquet")
    assert set(heads["state"]) == {"pretrained", "MRPC/finetuned/seed1"} and "all" in set(heads["relation"])
    assert not {"root", "punct"} & set(heads["relation"])


def test_run_reports_disk_use_per_stage(smoke_run):
    report = (smoke_run / "results" / "disk_usage.md").read_text()
    for stage in ("attention", "data", "finetune", "fitness", "baselines", "models", "treebank", "patterns", "linguistic", "disabling",
                  "pruning", "probing", "head_roles", "report"):
        assert f"| {stage} | " in report
    assert "| **total** |" in report and "checkpoints" not in report  # finished runs leave no checkpoint
    # the jobs table: every run of every stage, by the stage that declares it
    jobs = pl.read_parquet(smoke_run / "results" / "jobs.parquet")
    assert jobs.filter(pl.col("runs") == "sweeps").select("task", "seed").rows() == [("MRPC", 1), ("MRPC", 2), ("STS-B", 1)]
    assert {"attention", "disabling", "pruning", "probing", "head_roles", "outliers", "layer_mix"} <= set(jobs["stage"])


def test_snakemakes_own_report_holds_the_report_page(smoke_run, tmp_path):
    import zipfile

    snakemake(smoke_run, "--report", str(tmp_path / "report.zip"))
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    assert "report/report.html" in names and any(n.endswith("/index.html") for n in names), names


def test_dumps_marked_temp_are_deleted_and_summaries_kept(tmp_path):
    small = tmp_path / "temp_dumps.yaml"
    small.write_text(yaml.safe_dump({
        "tasks": ["MRPC"], "finetune": {"states": ["pretrained"]}, "attention": {"dumped": ["pretrained"], "keep_dumps": False},
        "pruning": {"tasks": []}, "probing": {"states": []},  # both need fine-tuned models
    }))
    workdir = tmp_path / "run"
    result = snakemake(workdir, configs=(SMOKE, small))
    dumps = workdir / "results" / "attention" / "tiny-bert" / "MRPC"
    assert (dumps / "pretrained.json").is_file()
    assert not (dumps / "pretrained.attention.parquet").exists() and not (dumps / "pretrained.tokens.parquet").exists()
    assert "Removing temporary output" in result.stdout + result.stderr


def test_second_run_has_nothing_to_do(smoke_run):
    assert jobs_to_run(smoke_run) == {}


def test_changing_one_tasks_learning_rate_reruns_exactly_its_jobs(smoke_run, tmp_path):
    override = tmp_path / "lr.yaml"
    override.write_text(yaml.safe_dump({"finetune": {"per_task": {"STS-B": {"learning_rate": 5e-4}}}}))
    configs = (SMOKE, override)
    # the pre-trained encoder never trains, so its learning rate is not a parameter that matters: only trained runs rerun.
    # ... and the analyses of the STS-B fine-tuned dump; the pattern CNN trains on every dump, so it and
    # the classification of every dump rerun too. The two STS-B verdicts change the fitness table, which every
    # summary labels its rows with: the summaries rerun (seconds each), the MRPC-only analyses do not.
    assert jobs_to_run(smoke_run, configs) == {
        "finetune": 2, "model_fitness": 2, "fitness_table": 1, "dump_attention": 1, "baselines": 1, "pattern_features": 1,
        "pattern_classifier": 1, "classify_maps": 4, "pattern_summary": 1, "annotation_page": 1, "attention_change": 1,
        "attention_change_summary": 1, "linguistic_scores": 1, "linguistic_summary": 1,
        "disabling_sweep": 1, "disabling_greedy": 1, "disabling_stats": 1, "disabling_summary": 1,
        "pruning_summary": 1, "probing_summary": 1, "head_roles": 1, "head_roles_summary": 1, "claims": 1, "head_atlas": 1,
        "outlier_dimensions": 1, "outlier_disabling": 1, "outlier_stats": 1, "outliers_summary": 1, "layer_mix_summary": 1,
        "layer_atlas": 1, "report": 1, "all": 1,
    }
    dry_run = snakemake(smoke_run, "-n", configs=configs).stdout
    # each planned job's rule and outputs: "rule finetune:" (or localrule) is followed by its "output:" line
    planned, rule = [], None
    for line in dry_run.splitlines():
        if line.rstrip().endswith(":") and line.split()[0] in ("rule", "localrule", "checkpoint", "localcheckpoint"):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("output:"):
            planned.append((rule, line.split("output:")[1]))
    finetune_outputs = [o for r, o in planned if r == "finetune"]
    assert len(finetune_outputs) == 2 and all("/STS-B/" in o for o in finetune_outputs)


def test_changing_the_split_seed_reruns_exactly_the_held_out_lottery_tickets(smoke_run, tmp_path):
    override = tmp_path / "split.yaml"
    override.write_text(yaml.safe_dump({"pruning": {"split_seed": 1}}))
    jobs = jobs_to_run(smoke_run, (SMOKE, override))
    # MRPC seeds 1 and 2: the held-out m and s tickets, their good and bad subnetworks and the compacted s ticket;
    # the paper protocol's tickets and subnetworks, chosen and reported on all of dev, do not depend on the split
    pruning = ("head_importance", "lottery_pruning", "compact_model", "subnetwork_finetune", "pruning_summary")
    assert {rule: jobs.get(rule, 0) for rule in pruning} == {
        "head_importance": 0, "lottery_pruning": 4, "compact_model": 2, "subnetwork_finetune": 8, "pruning_summary": 1}


def test_editing_a_library_module_reruns_exactly_the_jobs_whose_scripts_import_it(smoke_run, tmp_path):
    """Each job's `code` param hashes the library modules its script imports, followed through their own
    imports (read from the source: rules/common.smk `script_code`). Checked on a copy of the repository
    with one module edited."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".*", "results", "logs", "__pycache__", "*.egg-info"))
    # the copy's input files have other absolute paths: leave out the input-set trigger, keep code, params, mtime
    def planned():
        return jobs_to_run(smoke_run, (repo / SMOKE.relative_to(REPO),), "--rerun-triggers", "code", "params", "mtime",
                           snakefile=repo / "Snakefile")

    assert planned() == {}  # the copy itself changes nothing
    # figures: imported by every stage's summary module (so every summary script reaches it), by disabling_greedy's script
    # (write_table), head_atlas's, the claims', the fitness table's and the baselines'; by no model job's
    with (repo / "bertology_core" / "summaries" / "figures.py").open("a") as module:
        module.write("\n# an edit\n")
    assert planned() == {
        "pattern_summary": 1, "attention_change_summary": 1, "linguistic_summary": 1, "disabling_greedy": 2,
        "disabling_summary": 1, "pruning_summary": 1, "probing_summary": 1, "head_roles_summary": 1, "head_atlas": 1, "report": 1, "all": 1,
        "outliers_summary": 1, "layer_mix_summary": 1, "layer_atlas": 1,
        "fitness_table": 1, "baselines": 1, "claims": 1,
    }
    # the engine's structure: imported by every engine module but the attention function, and by finetune (through
    # first_token), so every job that runs a model reruns, but not the probe features of the pre-trained and random
    # encoders, whose scripts import no engine module
    with (repo / "bertology_core" / "engine" / "structure.py").open("a") as module:
        module.write("\n# an edit\n")
    jobs = planned()
    assert jobs["finetune"] == 5 and jobs["dump_attention"] == 4 and jobs["probe_features"] == 1


# A second full local run costs about six minutes of CI. Where Slurm is installed, test_slurm.py makes that
# second run of the same config (on the cluster) and asserts the same thing: every result file identical.
@pytest.mark.skipif(
    not missing_programs(),
    reason="Slurm is installed: tests/test_slurm.py reruns the smoke config and asserts identical results",
)
def test_same_config_and_seed_give_identical_metrics_predictions_models_and_dumps(smoke_run, tmp_path):
    snakemake(tmp_path)
    assert assert_same_results(smoke_run, tmp_path) > 30


def _log_span(log: Path) -> tuple[datetime, datetime]:
    """When a job's log says it started and last logged (its timestamped lines)."""
    stamps = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in log.read_text().splitlines()
              if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", line)]
    return stamps[0], stamps[-1]


def test_model_jobs_share_one_device_while_their_memory_fits_with_the_results_of_one_at_a_time(smoke_run, tmp_path):
    """profiles/gpu's sharing: each model job asks for one `gpu` slot and its `gpu_mem_mb`; with the card's memory
    for two, two fine-tunings run side by side on the device (the CPU here, compute.gpus 1), with room for one they run
    one after the other; both give the local run's results."""
    device = tmp_path / "device.yaml"
    device.write_text(yaml.safe_dump({"compute": {"gpus": 1}}))
    configs = (SMOKE, device)
    targets = [f"results/finetune/tiny-bert/MRPC/finetuned/seed{seed}/evaluation.json" for seed in (1, 2)]
    logs = [tmp_path / "logs" / "finetune" / "tiny-bert" / "MRPC" / "finetuned" / f"seed{seed}.log" for seed in (1, 2)]
    snakemake(tmp_path, *targets, "--omit-from", "finetune", configs=configs)  # the data and model they read
    planned = snakemake(tmp_path, *targets, "-n", "--resources", "gpu=2", configs=configs).stdout
    requests = [int(value) for value in re.findall(r"gpu_mem_mb=(\d+)", planned)]
    assert len(requests) == 2 and min(requests) >= needs.LEAST["memory_mb"], planned

    spans = {}
    for room in (sum(requests), max(requests)):
        snakemake(tmp_path, *targets, "--forcerun", "finetune", "--resources", "gpu=2", f"gpu_mem_mb={room}",
                  configs=configs)
        spans[room] = sorted(_log_span(log) for log in logs)
        assert assert_same_results(smoke_run, tmp_path, partial=True) >= 6
    (first, second) = spans[sum(requests)]
    assert second[0] < first[1], "with room for both on the device, the two fine-tunings ran side by side"
    (first, second) = spans[max(requests)]
    assert second[0] >= first[1], "with room for one, one after the other"


def _outputs_are_whole(workdir) -> None:
    """Every result file present is complete: Parquet and JSON parse, model folders load."""
    from safetensors.torch import load_file

    for path in (workdir / "results").rglob("*"):
        if ".tmp-" in str(path) or not path.is_file():
            continue
        if path.suffix == ".parquet":
            pl.read_parquet(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            load_file(str(path))


def test_sigkill_mid_training_and_mid_dump_then_rerun_gives_the_uninterrupted_results(smoke_run, tmp_path):
    """Kill the whole run (snakemake and its jobs, as a crashed node would) with SIGKILL three times: right
    after a fine-tuning checkpoint, half-way through writing an attention dump, and right after a subnetwork's
    fine-tuning checkpoint. Nothing that looks complete is left behind, the killed trainings resume from their
    checkpoints, and the final results equal the uninterrupted smoke run's."""
    frequent = tmp_path / "checkpoints.yaml"
    # checkpoint settings are not job parameters: the results must equal smoke_run's
    frequent.write_text(yaml.safe_dump({"finetune": {"checkpoint_steps": 2, "checkpoint_minutes": None}}))
    configs = (SMOKE, frequent)
    workdir = tmp_path / "run"

    killed = snakemake(workdir, configs=configs, check=False, env={"BERTOLOGY_FAILPOINT": "finetune.after_checkpoint@2"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    states = {p.parent: json.loads(p.read_text())["state"]["step"]
              for p in (workdir / "results" / "checkpoints").rglob("training_state.json")}
    # the job that hit the failpoint was at step 4; one running beside it may hold a step-2 checkpoint
    [checkpoint_dir] = [d for d, step in states.items() if step == 4]
    killed_run = checkpoint_dir.relative_to(workdir / "results" / "checkpoints")  # finetune/<model>/<task>/<state>/seedN
    run_dir = workdir / "results" / killed_run
    assert not (run_dir / "evaluation.json").exists() and not (run_dir / "model").exists()
    _outputs_are_whole(workdir)

    snakemake(workdir, "--unlock", configs=configs)  # a SIGKILLed snakemake leaves its lock
    snakemake(workdir, "--rerun-incomplete", "--until", "finetune", configs=configs)
    log = workdir / "logs" / f"{killed_run}.log"
    assert "resuming from checkpoint at step 4" in log.read_text()
    assert json.loads((run_dir / "evaluation.json").read_text())["training"]["resumed_at_step"] == 4
    assert not (workdir / "results" / "checkpoints" / killed_run).exists()  # removed once the run finished

    # --rerun-incomplete: the first kill may also have hit a dump running beside the fine-tuning
    killed = snakemake(workdir, "--rerun-incomplete", "--until", "dump_attention", configs=configs, check=False,
                       env={"BERTOLOGY_FAILPOINT": "dump.after_batch@1"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    half_written = list((workdir / "results" / "attention").rglob(".tmp-*.attention.parquet-*"))
    assert half_written  # (two dumps may run side by side: both are cut)
    for partial in half_written:
        assert not (partial.parent / partial.name.removeprefix(".tmp-").rsplit("-", 1)[0]).exists()
    _outputs_are_whole(workdir)

    # the rest of the DAG only reads these outputs (and runs twice in the other tests): stop at the dumps
    snakemake(workdir, "--unlock", configs=configs)
    snakemake(workdir, "--rerun-incomplete", "--until", "dump_attention", configs=configs)
    assert not list((workdir / "results").rglob(".tmp-*")), "a rerun cleans up what the killed writer left"
    assert assert_same_results(smoke_run, workdir, partial=True) > 15
    assert jobs_to_run(workdir, configs, "--until", "dump_attention") == {}

    # a lottery subnetwork's fine-tuning (hours for MNLI or QQP on a GPU) resumes from its checkpoint the same way
    killed = snakemake(workdir, "--until", "subnetwork_finetune", configs=configs, check=False,
                       env={"BERTOLOGY_FAILPOINT": "finetune.after_checkpoint@2"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    subnetworks = workdir / "results" / "checkpoints" / "subnetwork_finetune"
    states = {p.parent: json.loads(p.read_text())["state"]["step"] for p in subnetworks.rglob("training_state.json")}
    [checkpoint_dir] = [d for d, step in states.items() if step == 4]
    model, task, seed, network = checkpoint_dir.relative_to(subnetworks).parts
    metrics = workdir / "results" / "pruning" / model / task / "finetuned" / seed / "subnetworks" / f"{network}.json"
    assert not metrics.exists()
    _outputs_are_whole(workdir)
    snakemake(workdir, "--unlock", configs=configs)
    snakemake(workdir, "--rerun-incomplete", "--until", "subnetwork_finetune", configs=configs)
    log = workdir / "logs" / "subnetwork_finetune" / model / task / seed / f"{network}.log"
    assert "resuming from checkpoint at step 4" in log.read_text()
    assert metrics.exists() and not checkpoint_dir.exists()
    assert assert_same_results(smoke_run, workdir, partial=True) > 25


def _copy_inputs(tmp_path):
    """Writable copies of the smoke GLUE and treebank fixtures, to break."""
    glue_dir, ud_dir = tmp_path / "glue", tmp_path / "ud"
    shutil.copytree(GLUE_SMOKE, glue_dir)
    shutil.copytree(UD_SMOKE, ud_dir)
    return glue_dir, ud_dir


def _edit_line(path, number, edit):
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[number - 1] = edit(lines[number - 1])
    path.write_text("\n".join(lines), encoding="utf-8")


def _drop_column(path, column):
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").split("\n") if line]
    path.write_text("\n".join("\t".join(r[:column] + r[column + 1 :]) for r in rows) + "\n", encoding="utf-8")


def _replace_field(index, value):
    return lambda line: "\t".join(value if i == index else f for i, f in enumerate(line.split("\t")))


def _latin1_line(path, number):
    """Line ``number`` re-saved in Latin-1 with an accented letter in its second field: bytes that are not UTF-8."""
    lines = path.read_bytes().split(b"\n")
    fields = lines[number - 1].split(b"\t")
    fields[1] = "caf\u00e9".encode("latin-1")
    lines[number - 1] = b"\t".join(fields)
    path.write_bytes(b"\n".join(lines))


# (case, config override, how to break the copied inputs, what the user must read)
BAD_INPUTS = [
    ("unknown task", {"tasks": ["MRPC", "FOO"]}, None, "config 'tasks' names 'FOO', which is not declared. Fix: declare it"),
    ("task misspelt", {"tasks": ["MRPC", "mrpc"]}, None, "config 'tasks' names 'mrpc', which is not declared (did you mean 'MRPC'?)"),
    ("unknown option", {"finetune": {"hyperparameters": {"learnin_rate": 1e-4}}}, None, "learnin_rate"),
    ("bad model name", {"models": [{"name": "a b", "spec": "x"}]}, None, "a b"),
    ("model package not installed", {"models": [{"name": "m", "spec": "package:no-such-model"}]}, None,
     "package 'no-such-model' is not installed. Fix: pip install no-such-model"),
    ("model folder missing", {"models": [{"name": "m", "spec": "./models/missing"}]}, None,
     "models/missing does not exist. Fix: point spec at a save_pretrained() folder"),
    ("unknown Hub model (offline)", {"models": [{"name": "m", "spec": "no-such-org/no-such-model"}]}, None,
     "Model spec 'no-such-org/no-such-model' is not an installed package"),
    ("GLUE folder missing", {"data": {"glue_dir": "does/not/exist"}}, None, "does/not/exist/MRPC/train.tsv"),
    ("TSV column missing", {}, lambda g, u: _drop_column(g / "MRPC" / "train.tsv", 4),
     "MRPC/train.tsv:1: no column '#2 String' (the file has 'Quality', '#1 ID', '#2 ID', '#1 String')"),
    ("malformed TSV row", {}, lambda g, u: _edit_line(g / "MRPC" / "dev.tsv", 3, lambda l: l.rsplit("\t", 1)[0]),
     "MRPC/dev.tsv:3: expected 5 tab-separated fields"),
    ("label outside the label set", {}, lambda g, u: _edit_line(g / "MRPC" / "train.tsv", 2, lambda l: "7" + l[1:]),
     "MRPC/train.tsv:2: field 'Quality' = '7' is not a MRPC label. Allowed: ['not_equivalent', 'equivalent'] or their ids 0..1"),
    ("STS-B score outside [0, 5]", {}, lambda g, u: _edit_line(g / "STS-B" / "dev.tsv", 2, _replace_field(9, "7.5")),
     "STS-B/dev.tsv:2: field 'score' = '7.5' is outside STS-B's range [0, 5]"),
    ("STS-B score not a number", {}, lambda g, u: _edit_line(g / "STS-B" / "train.tsv", 2, _replace_field(9, "high")),
     "STS-B/train.tsv:2: field 'score' = 'high' is not a number"),
    ("TSV not UTF-8", {}, lambda g, u: _latin1_line(g / "MRPC" / "dev.tsv", 3),
     "MRPC/dev.tsv:3: byte 0xe9 at column"),
    ("a dev example that is a training example", {},
     lambda g, u: _edit_line(g / "STS-B" / "dev.tsv", 2, lambda l: (g / "STS-B" / "train.tsv").read_text().split("\n")[1]),
     "STS-B/dev.tsv: 1 example(s) have the same text as one of split 'train'"),
    ("empty split", {}, lambda g, u: (g / "STS-B" / "dev.tsv").write_text((g / "STS-B" / "dev.tsv").read_text().split("\n")[0] + "\n"),
     "split 'dev' of STS-B has no examples"),
    ("CoNLL-U line with 9 fields", {}, lambda g, u: _edit_line(u / "smoke-ud-dev.conllu", 4, lambda l: l.rsplit("\t", 1)[0]),
     "smoke-ud-dev.conllu:4: field 'line': 9 tab-separated fields instead of 10"),
    ("CoNLL-U head out of range", {}, lambda g, u: _edit_line(u / "smoke-ud-train.conllu", 3, _replace_field(6, "12")),
     "smoke-ud-train.conllu:3: field 'HEAD': head 12 is beyond the sentence's 7 words"),
    ("CoNLL-U not UTF-8", {}, lambda g, u: _latin1_line(u / "smoke-ud-dev.conllu", 5),
     "smoke-ud-dev.conllu:5: byte 0xe9 at column 6 is not UTF-8"),
    ("CoNLL-U file missing", {}, lambda g, u: (u / "smoke-ud-dev.conllu").unlink(),
     "CoNLL-U file(s) not found"),
    ("syntactic heads of a task not run", {"probing": {"syntactic_heads": {"states": ["pretrained", "RTE/finetuned/seed1"]}}}, None,
     "probing.syntactic_heads.states names RTE/finetuned/seed1, whose task RTE is not in tasks ['MRPC', 'STS-B']. Fix: add RTE to tasks"),
    ("pruning a task not run", {"pruning": {"tasks": ["MRPC", "RTE"]}}, None,
     "pruning.tasks names RTE, which is not in tasks ['MRPC', 'STS-B']. Fix: add RTE to tasks, or drop RTE from pruning.tasks"),
    ("probing a task not run", {"probing": {"tasks": ["RTE"]}}, None,
     "probing.tasks names RTE, which is not in tasks ['MRPC', 'STS-B']"),
    ("subnetworks of a seed not pruned", {"pruning": {"per_task": {"MRPC": {"seeds": [1, 2], "subnetwork_seeds": [5]}}}}, None,
     "pruning.per_task.MRPC.subnetwork_seeds [5] names seeds that are not pruned ([1, 2])"),
    ("subnetworks of a method not run", {"pruning": {"methods": ["s"], "subnetwork_methods": ["m"]}}, None,
     "pruning.subnetwork_methods names ['m'], not in pruning.methods ['s']"),
    ("unfit policy misspelt", {"fitness": {"if_unfit": "Skip"}}, None, "'Skip' is not one of ['warn', 'skip', 'fail']"),
    ("s-pruning importance on dev", {"pruning": {"importance_split": "dev"}}, None,
     "pruning.importance_split: dev lets the dev half that reports s-pruning's ticket choose"),
    ("claims at another level than the stages' intervals", {"claims": {"level": 0.9}}, None,
     "differ from claims.level (0.9): the claims' verdicts read those stages' intervals as intervals at claims.level"),
    ("L0 gates on no pruned seed", {"head_roles": {"gates": {"seeds": [7]}}}, None,
     "head_roles.gates.seeds [7] names no seed that is pruned"),
    ("L0 gates beside a recomputed Michel curve", {"pruning": {"michel_recompute": True}}, None,
     "pruning.michel_recompute is true. Fix: set pruning.michel_recompute: false"),
    ("L0 gates on a task not pruned", {"head_roles": {"gates": {"tasks": ["STS-B"]}}}, None,
     "head_roles.gates.tasks names STS-B, which is not pruned"),
    ("rare-token frequency corpus missing", {"head_roles": {"frequency_corpus": "no/such/corpus.txt"}}, None,
     "head_roles.frequency_corpus 'no/such/corpus.txt' ("),
    ("outlier disabling on a seed never fine-tuned", {"outliers": {"seeds": [9]}}, None,
     "outliers.seeds [9] are not fine-tuned for MRPC"),
    ("layer mix on a state not probed", {"layer_mix": {"states": ["STS-B/finetuned/seed1"]}}, None,
     "layer_mix.states names ['STS-B/finetuned/seed1'], which the probing stage does not probe"),
    ("outlier criterion on no layer", {"outliers": {"min_layer_share": 1}}, None,
     "config 'outliers.min_layer_share' = 1: 1 is greater than or equal to the maximum of 1. Allowed: A dimension is"),
    ("option misspelt", {"finetune": {"hyperparameters": {"learnin_rate": 1e-4}}}, None,
     "config 'finetune.hyperparameters' has no key 'learnin_rate' (did you mean 'learning_rate'?)"),
    ("empty first sentence", {}, lambda g, u: _edit_line(g / "MRPC" / "train.tsv", 3, _replace_field(3, " ")),
     "MRPC/train.tsv:3: field '#1 String' is empty (idx 1); every example needs its text"),
    ("empty second sentence", {}, lambda g, u: _edit_line(g / "STS-B" / "dev.tsv", 2, _replace_field(8, "")),
     "STS-B/dev.tsv:2: field 'sentence2' is empty"),
    # (a declared task not run, RTE, is ignored with a warning: test_jobs)
    ("per-task settings of an undeclared task", {"disabling": {"per_task": {"RTX": {"seeds": [1]}}}}, None,
     "config 'disabling.per_task' names 'RTX', which is not in tasks ['MRPC', 'STS-B']: its settings would be ignored. "
     "Fix: add RTX to tasks, or drop disabling.per_task.RTX."),
    ("one model name twice", {"models": [{"name": "m", "spec": "x"}, {"name": "m", "spec": "y"}]}, None,
     "config 'models': the name(s) ['m'] are given to more than one entry"),
]


def _run_with_bad_input(tmp_path, override, breakage=None, env=None):
    """Snakemake on the smoke config over copies of its inputs, broken by ``breakage(glue_dir, ud_dir)`` and
    ``override``; returns (workdir, result, output)."""
    glue_dir, ud_dir = _copy_inputs(tmp_path)
    if breakage is not None:
        breakage(glue_dir, ud_dir)
    inputs = {"data": {"glue_dir": str(glue_dir)}, "treebank": {"dir": str(ud_dir)}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**inputs, **override}))
    workdir = tmp_path / "run"
    result = snakemake(workdir, "--show-failed-logs", configs=(SMOKE, bad), check=False, cores=1, env=env)
    return workdir, result, result.stdout + result.stderr


MODEL_RULES = ("resolve_model", "finetune", "evaluate_pretrained", "dump_attention", "labelled_maps", "probe_features",
               "syntactic_heads", "head_gates", "outlier_dimensions", "outlier_disabling", "layer_mix")


@pytest.mark.parametrize(("case", "override", "breakage", "message"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_stops_the_run_before_any_model_job_with_a_clear_message(tmp_path, case, override, breakage, message):
    workdir, result, output = _run_with_bad_input(tmp_path, override, breakage)
    assert result.returncode != 0
    assert message in output, output[-3000:]
    for model_rule in ("finetune", "evaluate_pretrained", "dump_attention"):
        assert not (workdir / "logs" / model_rule).exists(), f"{model_rule} started despite bad input"
    if "Hub" not in case:  # everything but a Hub id is caught before any job at all (parse or run start)
        assert not (workdir / "logs").exists(), sorted(p.name for p in (workdir / "logs").rglob("*"))


def _model_folder(tmp_path, edit_config=None, remove=(), vocabulary=None, edit_folder=None):
    """A copy of the tiny BERT fixture with its config.json edited, files removed, another vocab.txt or
    ``edit_folder(folder)`` applied."""
    folder = tmp_path / "models" / "model"
    shutil.copytree(TINY_BERT, folder)
    config = json.loads((folder / "config.json").read_text())
    if edit_config is not None:
        edit_config(config)
    (folder / "config.json").write_text(json.dumps(config))
    for name in remove:
        (folder / name).unlink()
    if vocabulary is not None:
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.txt").write_text("".join(f"{entry}\n" for entry in vocabulary))
    if edit_folder is not None:
        edit_folder(folder)
    return folder


def _hub_cache(tmp_path, repo_id, **changes):
    """A Hugging Face cache holding ``repo_id`` (the tiny BERT, changed as by _model_folder): what an earlier download
    left, so the Hub path runs offline. Returns the environment that points huggingface_hub at it."""
    folder = _model_folder(tmp_path, **changes)
    repo = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(folder, repo / "snapshots" / commit)
    return {"HF_HUB_CACHE": str(tmp_path / "hub")}


def _rename_weights(prefix):
    def edit(folder):
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / "model.safetensors")
        save_file({prefix + name: value for name, value in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    return edit


def _truncate_weights(folder):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _as(model_type, architectures):
    def edit(config):
        config.update(model_type=model_type, architectures=architectures)
    return edit


def _classifier(labels):
    def edit(config):
        config.update(architectures=["BertForSequenceClassification"], id2label={str(i): f"L{i}" for i in range(labels)})
    return edit


def _labels_csv(tmp_path, rows):
    path = tmp_path / "labels.csv"
    path.write_text("task,state,idx,layer,head,label\n" + "".join(f"{row}\n" for row in rows))
    return {"patterns": {"labels_csv": str(path)}}


def _label_card_with_test(tmp_path, extra_test_row):
    """The smoke model's label set (card, labels, second pass, test labels) with one more test label."""
    folder = tmp_path / "pattern_labels"
    shutil.copytree(REPO / "tests/fixtures/pattern_labels", folder)
    with (folder / "tiny-bert.test.csv").open("a") as handle:
        handle.write(extra_test_row + "\n")
    return {"patterns": {"labels_dir": str(folder)}}


def _model(tmp_path, **changes):
    return {"models": [{"name": "m", "spec": str(_model_folder(tmp_path, **changes))}]}


# (case, where it is caught, what to set up in tmp_path -> (config override, environment), what the user must read)
BAD_MODELS = [
    ("folder without a tokenizer", "parse",
     lambda t: (_model(t, remove=("tokenizer.json", "tokenizer_config.json", "vocab.txt")), None),
     "model: no tokenizer (none of tokenizer.json, vocab.txt, vocab.json or a SentencePiece *.model)"),
    ("tokenizer with a trivial vocabulary", "parse", lambda t: (_model(t, vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]), None),
     "vocab.txt: the tokenizer's vocabulary holds 4 entries, but the model's embeddings have 120 rows"),
    ("GPT-2 folder", "parse", lambda t: (_model(t, edit_config=_as("gpt2", ["GPT2LMHeadModel"])), None),
     "config.json: field 'model_type' = 'gpt2' is not an encoder the analyses support"),
    ("T5 folder", "parse", lambda t: (_model(t, edit_config=_as("t5", ["T5ForConditionalGeneration"])), None),
     "Supported: bert (BERT (also MiniLM and other BERT-architecture models)); roberta (RoBERTa); xlm-roberta (XLM-RoBERTa); electra (ELECTRA); distilbert (DistilBERT); albert"),
    ("classifier checkpoint with another label count", "parse", lambda t: (_model(t, edit_config=_classifier(3)), None),
     "the checkpoint is a sequence classifier with 3 labels, but MRPC needs 2, STS-B needs 1"),
    ("max_length above the model's positions", "parse",
     lambda t: ({**_model(t), "finetune": {"per_task": {"MRPC": {"max_length": 512}}}}, None),
     "config 'finetune.per_task.MRPC.max_length' = 512 is above the 128 positions the model was trained with"),
    ("relative folder spec with one slash", "parse", lambda t: ({"models": [{"name": "m", "spec": "tests/missing-model"}]}, None),
     "tests/missing-model does not exist. Fix: point spec at a save_pretrained() folder"),
    ("hand label on a layer the model lacks", "parse",
     lambda t: (_labels_csv(t, ["MRPC,pretrained,0,0,0,vertical", "MRPC,pretrained,0,5,1,diagonal"]), None),
     "labels.csv:3: field 'layer' = 5 is outside 0..1 for this model"),
    ("hand label on an example dev lacks", "parse", lambda t: (_labels_csv(t, ["MRPC,pretrained,9999,0,0,vertical"]), None),
     "labels.csv:2: field 'idx' = 9999: MRPC's dev split holds no such example"),
    ("one map labelled twice with two classes", "parse",
     lambda t: (_labels_csv(t, ["MRPC,pretrained,0,0,0,vertical", "MRPC,pretrained,0,0,0,diagonal"]), None),
     "labels.csv:3: field 'label' = 'diagonal' conflicts with"),
    ("test label on a map the training labels name", "parse",
     lambda t: (_label_card_with_test(t, "MRPC,pretrained,0,0,1,vertical,test-random"), None),
     "tiny-bert.test.csv:34: the map {'task': 'MRPC', 'state': 'pretrained', 'idx': 0, 'layer': 0, 'head': 1} is also a training label"),
    ("weights under another tensor name prefix", "resolve_model",
     lambda t: (_model(t, edit_folder=_rename_weights("wrapper.encoder.")), None),
     "weight(s) of the encoder are not in the weights files, so they would be drawn at random: bert.embeddings"),
    ("truncated weights file", "parse", lambda t: (_model(t, edit_folder=_truncate_weights), None),
     "model.safetensors: the file holds"),
    ("heads that do not divide the hidden size", "parse",
     lambda t: (_model(t, edit_config=lambda c: c.update(num_attention_heads=3)), None),
     "config.json: field 'hidden_size' = 32 is not a multiple of field 'num_attention_heads' = 3"),
    ("Hub model whose weights carry another prefix", "check_model",
     lambda t: ({"models": [{"name": "m", "spec": "fake-org/wrapped-bert"}]},
                _hub_cache(t, "fake-org/wrapped-bert", edit_folder=_rename_weights("wrapper.encoder."))),
     "prefix 'wrapper.encoder.'"),
    ("Hub model that is GPT-2", "check_model",
     lambda t: ({"models": [{"name": "m", "spec": "fake-org/tiny-gpt2"}]},
                _hub_cache(t, "fake-org/tiny-gpt2", edit_config=_as("gpt2", ["GPT2LMHeadModel"]))),
     "field 'model_type' = 'gpt2' is not an encoder the analyses support"),
    ("Hub classifier with another label count", "check_model",
     lambda t: ({"models": [{"name": "m", "spec": "fake-org/mnli-classifier"}]},
                _hub_cache(t, "fake-org/mnli-classifier", edit_config=_classifier(3))),
     "the checkpoint is a sequence classifier with 3 labels, but MRPC needs 2, STS-B needs 1"),
]


@pytest.mark.parametrize(("case", "caught", "setup", "message"), BAD_MODELS, ids=[c[0] for c in BAD_MODELS])
def test_a_model_the_config_cannot_use_stops_the_run_before_any_model_job(tmp_path, case, caught, setup, message):
    override, env = setup(tmp_path)
    workdir, result, output = _run_with_bad_input(tmp_path, override, env=env)
    assert result.returncode != 0
    assert message in output, output[-3000:]
    if caught == "parse":
        assert not (workdir / "logs").exists(), sorted(p.name for p in (workdir / "logs").rglob("*"))
    else:  # a Hub model's check job, or the resolve job that loads a folder's weights: the first job that touches it
        assert (workdir / "logs" / caught).is_dir()
        started = [rule for rule in MODEL_RULES if rule != caught and (workdir / "logs" / rule).exists()]
        assert started == [], f"{started} started before {caught} refused the model"


def _planned_inputs(dry_run: str) -> dict[str, tuple[str, str]]:
    """Output line -> (rule, input line) of every job a dry run plans."""
    planned, rule, inputs = {}, None, ""
    for line in dry_run.splitlines():
        if line.rstrip().endswith(":") and line.split()[0] in ("rule", "localrule", "checkpoint", "localcheckpoint"):
            rule, inputs = line.split()[1].rstrip(":"), ""
        elif line.strip().startswith("input:"):
            inputs = line.split("input:")[1]
        elif line.strip().startswith("output:"):
            planned[line.split("output:")[1]] = (rule, inputs)
    return planned


def test_jobs_grouped_by_the_slurm_profile_wait_for_the_fitness_checkpoint(tmp_path):
    """Snakemake forms the job groups again when a checkpoint finishes and breaks a group job that is running then
    (KeyError when it finishes): where the run packs the short model jobs (the profile's group-components), their jobs
    take the fitness table as an input; a run that packs nothing plans the same jobs with their own inputs only."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    options = ["--group-components", *profile["group-components"]]
    table = "results/fitness/fitness.parquet"
    with_groups = _planned_inputs(snakemake(tmp_path / "run", "-n", *options).stdout)
    without = _planned_inputs(snakemake(tmp_path / "run", "-n").stdout)
    assert with_groups.keys() == without.keys() and {rule for rule, _ in without.values()} >= set(submissions.RULES)
    for output, (rule, inputs) in with_groups.items():
        plain = without[output][1]
        if rule in submissions.RULES:
            assert table in inputs and table not in plain, (rule, inputs)
        else:
            assert inputs == plain, rule


def test_the_short_model_jobs_of_a_model_and_task_are_packed_into_submissions_of_about_the_target_length(tmp_path):
    """Under the slurm profile's group-components (a dry run here), the short model jobs go in job groups: each of one
    model and task, asking for about compute.submission_minutes together, and a job asking for that much alone is
    submitted alone; with the packing off (0) nothing is grouped. The tool's count (tools/plan.py --submissions) is
    the workflow's."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    options = ("--group-components", *profile["group-components"])
    target = tmp_path / "target.yaml"
    target.write_text(yaml.safe_dump({"compute": {"submission_minutes": 30}}))
    dry = snakemake(tmp_path / "run", "-n", *options, configs=(SMOKE, target)).stdout
    groups = re.split(r"\n(?=\[[^\]]+\] Group job )", dry)[1:]
    assert len(groups) > 2, dry[-3000:]
    grouped_jobs = 0
    for group in groups:
        group = group.split("\n[")[0]  # up to the next job at the top level
        rules = re.findall(r"^\s+(?:rule|checkpoint) (\w+):", group, flags=re.M)
        tasks = {dict(item.split("=", 1) for item in line.split(", "))["task"]
                 for line in re.findall(r"^\s+wildcards: (.*)$", group, flags=re.M)}
        minutes = [int(value) for value in re.findall(r"runtime=(\d+)", group)]
        assert len(rules) > 1 and set(rules) <= set(submissions.RULES) and len(tasks) == 1, group[:2000]
        assert sum(minutes) <= 1.5 * 30, (rules, minutes)
        grouped_jobs += len(rules)
    planned = subprocess.run([sys.executable, str(REPO / "tools" / "plan.py"), "--configfile", str(SMOKE), str(target),
                              "--directory", str(tmp_path / "plan"), "--submissions", "--go-on", "--cards", "h100", "l40s"],
                             capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True).stdout
    assert f"{len(groups)} of them groups of {grouped_jobs} short model jobs" in planned, planned[-1500:]
    # the same plan per stage (every job in one stage's row) and on assumed cards, the model jobs at the assumed share of
    # the peak inside the range's ends
    stages = {row[0]: row[1:] for row in re.findall(r"^\| (\*\*[^|]+\*\*|\w+) \| (\d+) \| ([\d.,]+) \| ([\d.,]+) \| ([\d.,]+) \|$",
                                                    planned, flags=re.M)}
    total = int(planned.split(" jobs;")[0].split("\n")[-1])
    assert int(stages["**all**"][0]) == total == sum(int(v[0]) for k, v in stages.items() if not k.startswith("**"))
    assert int(stages["**without probing and layer_mix**"][0]) == total - int(stages["probing"][0]) - int(stages["layer_mix"][0])
    cards = re.findall(r"^\| NVIDIA (H100|L40S)[^|]*\| ([\d.]+) \| ([\d.]+)-([\d.]+) \| ([\d.]+) \|$", planned, flags=re.M)
    assert [card for card, *_ in cards] == ["H100", "L40S"], planned[-1500:]
    assert all(float(low) <= float(assumed) <= float(high) for _, assumed, low, high, _ in cards)
    target.write_text(yaml.safe_dump({"compute": {"submission_minutes": 0}}))
    assert "Group job" not in snakemake(tmp_path / "run", "-n", *options, configs=(SMOKE, target)).stdout
    assert grouped_jobs > len(groups)


def _planned_resources(dry_run: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources) of every job a dry run prints."""
    found, rule = [], None
    for line in dry_run.splitlines():
        if match := re.match(r"(?:local)?(?:rule|checkpoint) (\w+):", line.strip()):
            rule = match.group(1)
        elif line.strip().startswith("resources:") and rule:
            found.append((rule, dict(item.split("=", 1) for item in line.split(":", 1)[1].strip().split(", "))))
    return found


def test_a_site_that_takes_gpus_as_gres_gets_gres_for_the_model_jobs_only(tmp_path):
    """compute.gpu_request: gres asks for the model jobs' GPUs as --gres=gpu:N (the plugin's ``gres``), never also
    as ``gpu`` (--gpus); every model job names its device memory either way; other jobs ask for neither."""
    gres = tmp_path / "gres.yaml"
    gres.write_text(yaml.safe_dump({"compute": {"gpus": 1, "gpu_request": "gres"}}))
    plain = tmp_path / "gpus.yaml"
    plain.write_text(yaml.safe_dump({"compute": {"gpus": 1}}))
    runs = {name: _planned_resources(snakemake(tmp_path / name, "-n", configs=(SMOKE, config)).stdout)
            for name, config in (("gres", gres), ("gpus", plain))}
    model_rules = {rule for rule, resources in runs["gpus"] if resources.get("gpu") == "1"}
    assert {"finetune", "dump_attention", "evaluate_pretrained"} <= model_rules
    for rule, resources in runs["gres"]:
        assert "gpu" not in resources, (rule, resources)
        assert (resources.get("gres") == "gpu:1") == (rule in model_rules), (rule, resources)
        assert ("gpu_mem_mb" in resources) == (rule in model_rules), (rule, resources)


def test_a_dry_run_checks_the_data_too(tmp_path):
    glue_dir, ud_dir = _copy_inputs(tmp_path)
    _edit_line(glue_dir / "MRPC" / "dev.tsv", 3, lambda l: l.rsplit("\t", 1)[0])
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"data": {"glue_dir": str(glue_dir)}, "treebank": {"dir": str(ud_dir)}}))
    result = snakemake(tmp_path / "run", "-n", configs=(SMOKE, broken), check=False)
    assert result.returncode != 0
    assert "MRPC/dev.tsv:3: expected 5 tab-separated fields" in result.stdout + result.stderr


def test_make_cpu_without_local_data_takes_it_from_the_hub_and_says_how_when_unreachable(tmp_path):
    """On a machine without ../shared/data, `make cpu` layers configs/cpu_online_data.yaml over the CPU profile (GLUE from
    the Hub, UD EWT downloaded and checked) and drops HF_HUB_OFFLINE. Here the Hub and the internet are unreachable: the
    run stops before its first job (the Hub's tasks) or at the treebank's download, with the steps to bring the data by
    hand, before any model job."""
    import subprocess

    dry = subprocess.run(["make", "-n", "cpu", "LOCAL_DATA=/nonexistent"], cwd=REPO, capture_output=True, text=True, check=True)
    [command] = [line for line in dry.stdout.splitlines() if "snakemake" in line]
    assert "HF_HUB_OFFLINE" not in command
    configs = command.split("--configfile")[1].split()
    assert configs == ["configs/cpu.yaml", "configs/cpu_online_data.yaml"]
    online = yaml.safe_load((REPO / configs[1]).read_text())
    assert online["data"]["source"] == "hub" and online["treebank"]["dir"] is None
    assert online["treebank"]["url"].endswith("/r2.16/{file}") and len(online["treebank"]["sha256"]) == 2
    local = subprocess.run(["make", "-n", "cpu"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    if (REPO / "../shared/data/glue").is_dir():  # this machine has the local copy: the offline command
        assert "HF_HUB_OFFLINE=1" in local and "cpu_online_data" not in local

    unreachable = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf-home"),  # no cached GLUE either
                   "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}  # a port nothing listens on
    workdir = tmp_path / "run"
    result = snakemake(workdir, "--keep-going", "--show-failed-logs", configs=tuple(REPO / c for c in configs),
                       check=False, env=unreachable)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    # the Hub's tasks: before the first job (onstart), every task named with the steps to bring it as files or a cache
    assert "Bad input data (nothing was run)" in output and "MRPC: dataset nyu-mll/glue config mrpc could not be loaded" in output, output[-3000:]
    assert "datasets.load_dataset('nyu-mll/glue', 'mrpc')" in output and "HF_HUB_OFFLINE=1" in output
    assert not (workdir / "logs").exists()
    # the treebank's download: its job, before any model job (the tasks' data taken from the smoke fixture here)
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump({"data": {"source": "local", "glue_dir": str(GLUE_SMOKE)},
                                     "patterns": {"labels_dir": None}}))  # the demo's hand labels name real dev examples
    result = snakemake(workdir, "--keep-going", "--show-failed-logs", "--until", "download_treebank",
                       configs=(*(REPO / c for c in configs), local), check=False, env=unreachable)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "UD_English-EWT/r2.16/en_ewt-ud-dev.conllu: could not be downloaded" in output, output[-3000:]
    assert "curl -L -O https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.16/en_ewt-ud-dev.conllu" in output
    started = [rule for rule in MODEL_RULES[1:] if (workdir / "logs" / rule).exists()]
    assert started == [], f"{started} started without data"


def test_every_number_written_as_text_is_read_as_a_number_with_a_warning_naming_the_key(tmp_path):
    # YAML 1.1 reads 2e-5 (no dot) as a string; "32" is one; the schema asks for numbers: one rule reads both
    written = tmp_path / "lr.yaml"
    written.write_text('finetune:\n  hyperparameters: {learning_rate: 2e-5, batch_size: "32"}\n'
                       '  per_task: {STS-B: {learning_rate: 1e-4}}\n')
    assert yaml.safe_load(written.read_text())["finetune"]["hyperparameters"]["learning_rate"] == "2e-5"
    result = snakemake(tmp_path / "run", "-n", configs=(SMOKE, written), check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "config 'finetune.hyperparameters.learning_rate' = '2e-5' is text" in output
    assert "config 'finetune.hyperparameters.batch_size' = '32' is text" in output
    assert "config 'finetune.per_task.STS-B.learning_rate' = '1e-4' is text" in output


def test_invalid_yaml_in_config_yaml_is_named_by_file_and_line_and_make_checks_its_configfiles(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".*", "results", "logs", "__pycache__", "*.egg-info"))
    config = repo / "config.yaml"
    lines = config.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if text.startswith("  batch_size"))
    lines[line] = "\t" + lines[line].strip()
    config.write_text("\n".join(lines) + "\n")
    result = snakemake(tmp_path / "run", "-n", configs=(repo / SMOKE.relative_to(REPO),), check=False,
                       snakefile=repo / "Snakefile")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"config.yaml:{line + 1}:1: not valid YAML" in output and "indent with spaces, not tabs" in output, output[-3000:]
    # a --configfile is read by Snakemake before the workflow: make's targets check theirs with the same function
    dry = subprocess.run(["make", "-n", "cpu"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "python -m bertology_core.workflow.configuration config.yaml configs/cpu.yaml" in dry


def test_a_deleted_result_is_written_again_with_exactly_its_dependants(smoke_run, tmp_path):
    """Every file a user reads (a kept dump, the fitness table, each table the page links) is a target of `all`:
    deleted, the next run writes it again, and reruns only the jobs that read it."""
    deleted = ["results/fitness/fitness.csv", "results/attention/tiny-bert/MRPC/pretrained.attention.parquet",
               "results/pruning/tiny-bert/summary/stability.csv", "results/disabling/tiny-bert/summary/selection.parquet"]
    aside = tmp_path / "aside"
    for index, name in enumerate(deleted):
        assert (smoke_run / name).is_file(), name
        aside.mkdir(exist_ok=True)
        (smoke_run / name).rename(aside / str(index))  # keeps the file's mtime for putting it back
    try:
        dry = snakemake(smoke_run, "-n").stdout
    finally:
        for index, name in enumerate(deleted):
            (aside / str(index)).rename(smoke_run / name)
    jobs, current = [], None
    for line in dry.splitlines():
        words = line.split()
        if words and words[0] in ("rule", "localrule", "checkpoint", "localcheckpoint") and line.rstrip().endswith(":"):
            current = {"rule": words[1].rstrip(":"), "reason": ""}
            jobs.append(current)
        elif current is not None and line.strip().startswith("reason:"):
            current["reason"] = line.split("reason:", 1)[1].strip()
    missing = {}
    for job in jobs:
        if job["reason"].startswith("Missing output files"):
            missing[job["rule"]] = job["reason"]
        else:  # everything else reruns only because a rewritten file is its input
            assert job["reason"].startswith("Input files updated by another job"), job
    assert set(missing) == {"fitness_table", "dump_attention", "pruning_summary", "disabling_summary"}, missing
    for name in deleted:
        assert any(name in reason for reason in missing.values()), name


def test_the_families_config_plans_every_stage_for_every_family(tmp_path):
    """configs/smoke_families.yaml (the smoke workflow on every family's fixture) passes the parse-time checks and
    plans every per-model stage for every family. Running it (docs/engine.md, Encoder families) takes longer than the suite
    can afford; tests/test_families_stages.py runs each stage's library calls on every fixture."""
    families = REPO / "configs" / "smoke_families.yaml"
    models = yaml.safe_load(families.read_text())["models"]
    planned = jobs_to_run(tmp_path, (SMOKE, families))
    per_model = ("resolve_model", "head_importance", "compact_model", "pattern_classifier", "probing_summary",
                 "pruning_summary", "disabling_summary", "linguistic_summary", "head_atlas", "claims")
    assert {rule: planned.get(rule) for rule in per_model} == dict.fromkeys(per_model, len(models))
    for rule in ("dump_attention", "finetune", "disabling_sweep", "lottery_pruning", "probe_features", "syntactic_heads"):
        assert planned[rule] % len(models) == 0 and planned[rule] > 0, rule


def test_given_fine_tuned_classifiers_plan_no_fine_tuning_and_sweep_as_the_models_the_pipeline_fine_tuned(smoke_run, tmp_path):
    # the smoke run's fine-tuned models, given back as already fine-tuned classifiers, disabling only
    runs = smoke_run / "results" / "finetune" / "tiny-bert"
    given = tmp_path / "given.yaml"
    given.write_text(yaml.safe_dump({
        "models": [{"name": "tiny-bert", "spec": "tests/fixtures/tiny-bert", "finetuned": {
            "MRPC": [str(runs / "MRPC/finetuned/seed1/model"), str(runs / "MRPC/finetuned/seed2/model")],
            "STS-B": str(runs / "STS-B/finetuned/seed1/model")}}],
        "stages": ["disabling"]}))
    workdir = tmp_path / "run"
    planned = jobs_to_run(workdir, (SMOKE, given))
    # no training at all (the scratch baseline only the baselines table reads); every given classifier resolved,
    # checked and evaluated; disabling's jobs and what they need, the claims and the page: nothing else
    assert "finetune" not in planned and "evaluate_pretrained" not in planned
    assert planned["resolve_finetuned"] == planned["evaluate_finetuned"] == planned["model_fitness"] == 3
    assert set(planned) == {"prepare_data", "resolve_model", "tokenize_data", "resolve_finetuned", "evaluate_finetuned",
                            "model_fitness", "fitness_table", "disabling_sweep", "disabling_greedy", "disabling_stats",
                            "disabling_summary", "claims", "head_atlas", "layer_atlas", "report", "all"}
    snakemake(workdir, configs=(SMOKE, given))
    # the sweeps, the greedy searches and the statistics equal those of the run that fine-tuned the same models
    swept = sorted((smoke_run / "results" / "disabling").rglob("*.parquet"))
    assert len(swept) >= 14
    for path in swept:
        mine = workdir / path.relative_to(smoke_run)
        assert pl.read_parquet(mine).equals(pl.read_parquet(path)), path
    record = json.loads((workdir / "results/finetune/tiny-bert/MRPC/finetuned/seed2/evaluation.json").read_text())
    assert record["given"] == str(runs / "MRPC/finetuned/seed2/model") and "training" not in record
    smoke_record = json.loads((runs / "MRPC/finetuned/seed2/evaluation.json").read_text())
    assert record["eval"]["dev"]["accuracy"] == smoke_record["eval"]["dev"]["accuracy"]
    claims = pl.read_parquet(workdir / "results/claims/tiny-bert/headline.parquet")
    assert set(claims.filter(pl.col("claim") == "probing_peak_middle")["verdict"]) == {"not run"}
    page = (workdir / "results/report/index.html").read_text()
    assert "pruning: not run;" in page and "stages leave it out (add pruning to stages)" in page
    # a summary of a stage the list leaves out, asked for by name, stops before any job
    left_out = snakemake(workdir, "results/pruning/tiny-bert/summary/lottery.parquet", configs=(SMOKE, given), check=False)
    assert left_out.returncode != 0 and "The targets ask for pruning, which the config's stages ['disabling'] leave out" in (
        left_out.stdout + left_out.stderr)

    # a classifier with another label count (STS-B's regression head given for MRPC) stops the run before any job,
    # naming both counts
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({
        "models": [{"name": "tiny-bert", "spec": "tests/fixtures/tiny-bert", "finetuned": {
            "MRPC": [str(runs / "STS-B/finetuned/seed1/model"), str(runs / "MRPC/finetuned/seed2/model")]}}],
        "stages": ["disabling"]}))
    failed = snakemake(tmp_path / "wrong", "-n", configs=(SMOKE, wrong), check=False)
    assert failed.returncode != 0
    assert "the classifier has 1 label(s), but MRPC has 2 labels ['not_equivalent', 'equivalent']" in failed.stdout + failed.stderr
    # one classifier for two seeds: the config says how many it needs
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump({"models": [{"name": "tiny-bert", "spec": "tests/fixtures/tiny-bert", "finetuned": {
        "MRPC": str(runs / "MRPC/finetuned/seed1/model")}}]}))
    failed = snakemake(tmp_path / "short", "-n", configs=(SMOKE, short), check=False)
    assert "models[tiny-bert].finetuned.MRPC gives 1 classifier(s), but MRPC is fine-tuned with 2 seed(s) [1, 2]" in (
        failed.stdout + failed.stderr)


@pytest.mark.parametrize("asked, planned", [
    # disabling: fine-tuning (no scratch: only the baselines read it), fitness, the sweeps, claims and the page
    (["disabling"], {"prepare_data": 4, "resolve_model": 1, "tokenize_data": 2, "finetune": 3, "model_fitness": 3,
                     "fitness_table": 1, "disabling_sweep": 3, "disabling_greedy": 2, "disabling_stats": 2,
                     "disabling_summary": 1, "claims": 1, "head_atlas": 1, "layer_atlas": 1, "report": 1, "all": 1}),
    # layer mix brings probing, and the treebank only they read
    (["layer_mix"], None),
])
def test_the_stages_list_plans_only_the_stages_asked_and_those_they_read(tmp_path, asked, planned):
    chosen = tmp_path / "stages.yaml"
    chosen.write_text(yaml.safe_dump({"stages": asked}))
    found = jobs_to_run(tmp_path / "run", (SMOKE, chosen))
    if planned is not None:
        assert found == planned
        return
    assert {"probe_features", "probe_layers", "layer_mix", "prepare_treebank"} <= set(found)
    assert not {"dump_attention", "disabling_sweep", "head_importance", "outlier_dimensions", "evaluate_pretrained"} & set(found)
