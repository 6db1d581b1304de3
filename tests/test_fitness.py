"""The fitness verdict of a fine-tuned model against the trivial predictor, and the labels it puts on summary rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bertology_core.data import tasks
from bertology_core.fitness import verdict_stats
from bertology_core.fitness.verdict_stats import FitnessSettings, Verdicts

MRPC, STSB, COLA = tasks.glue_task("MRPC"), tasks.glue_task("STS-B"), tasks.glue_task("CoLA")


def _classifier_predictions(correct: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Dev labels 70% class 1 and predictions right on exactly ``correct`` examples."""
    labels = (rng.random(n) < 0.7).astype(int)
    predictions = labels.copy()
    wrong = rng.choice(n, n - correct, replace=False)
    predictions[wrong] = 1 - predictions[wrong]
    return predictions, labels


def test_a_model_well_above_the_majority_class_is_fit():
    rng = np.random.default_rng(0)
    predictions, labels = _classifier_predictions(360, 400, rng)  # 90% against a majority of ~70%
    verdict = verdict_stats.assess(MRPC, predictions, labels, FitnessSettings())
    majority = float(np.mean(labels == 1))
    assert verdict["metric"] == "accuracy" and verdict["score"] == pytest.approx(0.9)
    assert verdict["trivial_score"] == pytest.approx(majority) and verdict["delta"] == pytest.approx(0.9 - majority)
    assert verdict["ci_low"] > 0 and verdict["ci_low"] < verdict["delta"] < verdict["ci_high"]
    assert verdict["fit"] and "best constant prediction on dev (class 1: equivalent)" in verdict["trivial_predictor"]


def test_the_same_model_is_unfit_when_the_margin_is_above_the_intervals_lower_bound():
    rng = np.random.default_rng(0)
    predictions, labels = _classifier_predictions(360, 400, rng)
    low = verdict_stats.assess(MRPC, predictions, labels, FitnessSettings())["ci_low"]
    assert verdict_stats.assess(MRPC, predictions, labels, FitnessSettings(margin=low - 1e-6))["fit"]
    unfit = verdict_stats.assess(MRPC, predictions, labels, FitnessSettings(margin=low + 1e-6))
    assert not unfit["fit"] and "not above the margin" in unfit["reason"]


def test_a_model_a_few_points_over_trivial_is_weak_not_fit():
    """RTE-like: 2,000 dev examples, half of each class, a model right on 55% (5 points over the trivial predictor,
    clearly above it) against BERT-base's 65.70: its lower bound does not clear half the way (about 7.6 points)."""
    rng = np.random.default_rng(1)
    labels = np.repeat([0, 1], 1000)
    predictions = labels.copy()
    wrong = rng.choice(2000, 900, replace=False)
    predictions[wrong] = 1 - predictions[wrong]
    rte = tasks.glue_task("RTE")
    settings = FitnessSettings(reference=0.657)
    weak = verdict_stats.assess(rte, predictions, labels, settings)
    assert weak["fit"] and weak["ci_low"] > 0 and weak["strength"] == verdict_stats.WEAK
    assert weak["fit_margin"] == pytest.approx(0.25 * (0.657 - 0.5)) and "not above the fit margin" in weak["reason"]
    # the same model where BERT-base is not far above chance is fit; without a reference the margin alone decides
    assert verdict_stats.assess(rte, predictions, labels, FitnessSettings(reference=0.52))["strength"] == verdict_stats.STRONG
    plain = verdict_stats.assess(rte, predictions, labels, FitnessSettings())
    assert plain["strength"] == verdict_stats.STRONG and plain["fit_margin"] is None and "no fit margin" in plain["reason"]
    row = verdict_stats.verdict_row("m", {"task": "RTE", "state": "finetuned", "seed": 1, "fitness": weak | {"settings_reference": 0.657}})
    assert row["strength"] == "weak" and row["reference_score"] == 0.657
    assert verdict_stats.verdict_table([row])["strength"].to_list() == ["weak"]
    # a model at BERT-base's own RTE score on RTE's 277 dev examples (145 of one class) is fit, not weak
    labels = np.array([1] * 146 + [0] * 131)
    at_reference = labels.copy()
    at_reference[rng.choice(277, 95, replace=False)] ^= 1  # 182 of 277 right: 65.7%
    assert verdict_stats.assess(rte, at_reference, labels, settings)["strength"] == verdict_stats.STRONG
    # summaries say weak beside fit and unfit
    table = verdict_stats.verdict_table([row, row | {"seed": 2, "strength": "fit"}])
    assert Verdicts(table, "m").label("RTE", [1, 2]) == "weak: seed 1 (1 of 2)" and Verdicts(table, "m").label("RTE", [2]) == "fit"


def test_a_model_that_predicts_one_class_everywhere_is_never_fit():
    labels = np.array([1] * 60 + [0] * 40)
    for constant in (0, 1):
        verdict = verdict_stats.assess(MRPC, np.full(100, constant), labels, FitnessSettings())
        # the trivial predictor is the best constant on each resample: a constant model never beats it
        assert verdict["trivial_score"] == pytest.approx(0.6) and verdict["ci_high"] <= 0 and not verdict["fit"]
    # against a fixed majority class a minority-class model would lose; against the best constant it loses as much
    assert verdict_stats.assess(MRPC, np.zeros(100, int), labels, FitnessSettings())["delta"] == pytest.approx(-0.2)


def test_too_few_dev_examples_cannot_make_a_model_fit():
    labels = np.array([0.0, 2.5, 5.0])
    verdict = verdict_stats.assess(STSB, labels.copy(), labels, FitnessSettings())  # a perfect Pearson on 3 pairs
    assert verdict["score"] == pytest.approx(1.0) and not verdict["fit"] and "only 3 dev examples" in verdict["reason"]
    assert verdict_stats.assess(STSB, labels.copy(), labels, FitnessSettings(min_examples=3))["fit"]


def test_regression_is_judged_by_pearson_against_zero():
    rng = np.random.default_rng(1)
    labels = rng.uniform(0, 5, 300)
    good = labels + rng.normal(0, 1.0, 300)  # r about 0.8
    verdict = verdict_stats.assess(STSB, good, labels, FitnessSettings())
    assert verdict["metric"] == "pearson" and verdict["trivial_score"] == 0.0
    assert verdict["delta"] == pytest.approx(np.corrcoef(good, labels)[0, 1])
    assert verdict["fit"] and "constant prediction" in verdict["trivial_predictor"]
    noise = verdict_stats.assess(STSB, rng.normal(size=300), labels, FitnessSettings())
    assert noise["ci_low"] < 0 < noise["ci_high"] and not noise["fit"]
    # a margin in Pearson units: r ~ 0.8 with a lower bound below 0.9 is not fit at margin 0.9
    assert not verdict_stats.assess(STSB, good, labels, FitnessSettings(margin=0.9))["fit"]


def test_matthews_correlation_of_the_majority_class_is_zero():
    labels = np.array([1] * 70 + [0] * 30)
    verdict = verdict_stats.assess(COLA, labels.copy(), labels, FitnessSettings())
    assert verdict["metric"] == "matthews_correlation" and verdict["trivial_score"] == 0.0 and verdict["score"] == 1.0


def _table(*rows):
    return verdict_stats.verdict_table([
        {"model": "m", "task": t, "state": i, "seed": s, "metric": "accuracy", "score": 0.8, "trivial_score": 0.7,
         "delta": 0.1, "ci_low": 0.05 if f else -0.01, "ci_high": 0.15, "margin": 0.0, "fit": f, "trivial_predictor": "x"}
        for t, i, s, f in rows
    ])


def test_summary_rows_are_labelled_by_seed_by_state_and_by_pooled_seeds():
    table = _table(("MRPC", "finetuned", 1, True), ("MRPC", "finetuned", 2, False), ("MRPC", "finetuned", 3, True),
                   ("STS-B", "finetuned", 1, True), ("STS-B", "scratch", 1, False))
    verdicts = Verdicts(table, "m", {"MRPC": [1, 2, 3], "STS-B": [1]})
    by_seed = verdicts.annotate(pl.DataFrame({"task": ["MRPC", "MRPC", "MRPC"], "seed": [1, 2, None]}), seed="seed")
    assert by_seed[verdict_stats.COLUMN].to_list() == ["fit", "UNFIT", "UNFIT: seed 2 (1 of 3)"]
    dumps = verdicts.annotate(pl.DataFrame({"dump": ["MRPC/pretrained", "MRPC/finetuned/seed2", "STS-B/finetuned/seed1",
                                                     "STS-B/scratch/seed1"]}), state="dump")
    assert dumps[verdict_stats.COLUMN].to_list() == [None, "UNFIT", "fit", None]  # from scratch: a baseline, not judged here
    probed = verdicts.annotate(pl.DataFrame({"state": ["pretrained", "random_weights", "MRPC/finetuned/seed3", "STS-B/finetuned/seed1"]}), state="state")
    assert probed[verdict_stats.COLUMN].to_list() == [None, None, "fit", "fit"]
    atlas = verdicts.annotate(pl.DataFrame({"task": ["MRPC", "MRPC", "STS-B"], "state": ["pre-trained", "fine-tuned", "difference"]}),
                              state="state")
    assert atlas[verdict_stats.COLUMN].to_list() == [None, "UNFIT: seed 2 (1 of 3)", "fit"]
    assert Verdicts(table, "m").label("MRPC", [2]) == "UNFIT"
    assert Verdicts(_table(("MRPC", "finetuned", 1, False), ("MRPC", "finetuned", 2, False)), "m").label("MRPC", [1, 2]) == "UNFIT: all 2 seeds"
    assert Verdicts(table, "m", state="scratch").label("STS-B", [1]) == "UNFIT"


def test_the_fail_message_names_every_unfit_model_and_the_fixes():
    table = _table(("MRPC", "finetuned", 2, False), ("RTE", "finetuned", 1, False))
    message = verdict_stats.unfit_message(table)
    assert "m MRPC seed 2" in message and "m RTE seed 1" in message and "fitness.if_unfit: skip" in message
