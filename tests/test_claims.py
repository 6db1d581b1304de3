"""The claims table: the verdict rule, and each claim's statistic and interval on hand-made data."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from bertology_core.claims import stats as claims
from bertology_core.claims.stats import INCONCLUSIVE, MODEL_UNFIT, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Region


@pytest.mark.parametrize(("low", "high", "region", "expected"), [
    (0.01, 0.03, Region(0.0, None), REPRODUCED),        # a gain whose whole interval is above zero
    (-0.01, 0.03, Region(0.0, None), INCONCLUSIVE),     # straddles zero
    (-0.03, -0.01, Region(0.0, None), NOT_REPRODUCED),  # a loss
    (-0.02, 0.0, Region(0.0, None), NOT_REPRODUCED),    # touching the boundary from outside is outside
    (0.40, 0.50, Region(0.32, 0.61), REPRODUCED),       # a share inside the paper's range
    (0.20, 0.40, Region(0.32, 0.61), INCONCLUSIVE),
    (0.62, 0.70, Region(0.32, 0.61), NOT_REPRODUCED),
    (0.10, 0.20, Region(None, 0.25), REPRODUCED),
    # a statistic that moves in steps may sit on a closed bound: four pruning steps of 10% of 72 heads, 38.9%
    (0.389, 0.389, Region(0.38, None, closed=True), REPRODUCED),
    (0.25, 0.5, Region(0.25, 0.75, closed=True), REPRODUCED),
    (0.0, 0.25, Region(0.25, 0.75, closed=True), INCONCLUSIVE),
    (0.0, 0.2, Region(0.25, 0.75, closed=True), NOT_REPRODUCED),
    (0.45, 0.6, Region(None, 0.40, closed=True), NOT_REPRODUCED),
])
def test_the_verdict_is_where_the_whole_interval_lies(low, high, region, expected):
    assert claims.verdict(low, high, region) == expected


def test_an_unfit_model_or_an_untrusted_number_overrides_the_interval():
    assert claims.verdict(0.01, 0.03, Region(0.0, None), unfit=True) == MODEL_UNFIT
    assert claims.verdict(0.01, 0.03, Region(0.0, None), trusted=False) == INCONCLUSIVE
    assert claims.verdict(float("nan"), 0.03, Region(0.0, None)) == INCONCLUSIVE


def test_table_marks_unfit_models_and_lists_claims_that_did_not_run():
    measured = [
        claims.Measured("best_head_disabling_gain", "MRPC", 0.012, 0.004, 0.02, (("MRPC", 1), ("MRPC", 2))),
        claims.Measured("best_head_disabling_gain", "SST-2", 0.01, 0.002, 0.02, (("SST-2", 1),)),
    ]
    table = claims.claims_table(measured, {("MRPC", 1): True, ("MRPC", 2): False, ("SST-2", 1): True},
                                {"disabling": "ran", "pruning": "skipped"})
    rows = {r["scope"]: r for r in table.filter(pl.col("claim") == "best_head_disabling_gain").iter_rows(named=True)}
    assert rows["MRPC"]["verdict"] == MODEL_UNFIT and "MRPC seed 2" in rows["MRPC"]["note"]
    assert rows["SST-2"]["verdict"] == REPRODUCED
    assert rows["SST-2"]["this_run"] == pytest.approx(1.0) and rows["SST-2"]["ci_low"] == pytest.approx(0.2)  # points
    # one verdict for the claim over its rows: the unfit row is left out, the fit one holds after Holm's correction
    assert rows["overall"]["verdict"] == REPRODUCED and "1 rows on unfit models left out" in rows["overall"]["note"]
    others = table.filter(pl.col("claim") != "best_head_disabling_gain")
    assert others.height == len(claims.CLAIMS) - 1
    # fitness.if_unfit: skip left out every model pruning would analyse: its claims rest on unfit models
    pruning = others.filter(pl.col("claim").is_in(["mask_agreement_kappa", "prunable_share"]))
    assert set(pruning["verdict"]) == {MODEL_UNFIT} and pruning["note"].str.contains("skip").all()
    assert set(others.filter(~pl.col("claim").is_in(["mask_agreement_kappa", "prunable_share"]))["verdict"]) == {NOT_RUN}
    assert table["claim"].to_list()[:2] == ["heterogeneous_share", "last_layers_change_most"]  # the papers' order


def test_heterogeneous_share_resamples_examples_and_needs_a_validated_labeller():
    # 10 examples x 4 maps; examples 0-4 have 2 heterogeneous maps, 5-9 none: share 0.25
    rows = [{"idx": e, "cnn_label": "heterogeneous" if (e < 5 and m < 2) else "vertical"} for e in range(10) for m in range(4)]
    frame = pl.DataFrame(rows)
    [measured] = claims.heterogeneous_share({("MRPC", 1): frame}, 2000, 0.95, 0, "rule-based labels", validated=False)
    assert measured.value == pytest.approx(0.25) and measured.ci_low < 0.25 < measured.ci_high
    assert not measured.trusted and "not validated" in measured.note and measured.models == (("MRPC", 1),)
    # an example's maps move together: with the cluster bootstrap the interval is that of a mean of 10
    # examples with per-example shares 0.5 and 0: roughly 0.25 +- 2 x 0.25/sqrt(10)
    assert 0.05 < measured.ci_low < 0.15 and 0.35 < measured.ci_high < 0.45


def test_last_two_layers_changing_most_is_a_positive_gap():
    rng = np.random.default_rng(0)
    rows = []
    for idx in range(40):
        for layer in range(6):
            base = 0.95 if layer < 4 else 0.7  # the last two layers change more (lower cosine)
            rows += [{"idx": idx, "layer": layer, "head": h, "cosine": base + rng.normal(0, 0.02)} for h in range(3)]
    [measured] = claims.last_layers_change({("MRPC", 1): pl.DataFrame(rows)}, 500, 0.95, 0)
    assert measured.value == pytest.approx(0.25, abs=0.02) and measured.ci_low > 0.2
    assert measured.note.endswith("5, 6, 1, 2, 3, 4") or measured.note.split(": ")[1].split(", ")[:2] in (["5", "6"], ["6", "5"])


def test_prunable_share_is_rescored_on_resampled_examples():
    # 3 steps: 0%, 50%, 100% pruned; right on the first 90, 90 and 50 of 100 examples
    curve = pl.DataFrame({"step": [0, 1, 2], "share_pruned": [0.0, 0.5, 1.0]})

    def predictions(right):
        return pl.DataFrame([{"step": s, "idx": i, "label": 1, "prediction": int(i < right[s])} for s in range(3) for i in range(100)])

    [same] = claims.michel_prunable_share({("SST-2", 1): curve}, {("SST-2", 1): predictions({0: 90, 1: 90, 2: 50})},
                                          {"SST-2": "accuracy"}, 0.02, 500, 0.95, 0)
    assert same.value == 0.5 and same.ci_low == 0.5 == same.ci_high  # step 1 predicts what step 0 does: on every resample
    # step 1 misses one example step 0 gets right: 0.89 is within 2% of 0.90, but resamples that draw that example
    # often fall further: the interval reaches down to nothing prunable
    [close] = claims.michel_prunable_share({("SST-2", 1): curve}, {("SST-2", 1): predictions({0: 90, 1: 89, 2: 50})},
                                           {"SST-2": "accuracy"}, 0.02, 500, 0.95, 0)
    assert close.value == 0.5 and close.ci_low == 0.0 and close.ci_high == 0.5


def test_probing_peak_reports_the_relative_depth_of_the_best_layer():
    rng = np.random.default_rng(0)
    accuracy = [0.6, 0.8, 0.9, 0.85, 0.7]  # layer 2 of 4 is best: relative depth 0.5
    rows = [{"labels": "upos", "kind": "task", "layer": layer, "sentence": s, "correct": bool(rng.random() < a), "state": "pretrained"}
            for layer, a in enumerate(accuracy) for s in range(200) for _ in range(5)]
    [measured] = claims.probing_peak(pl.DataFrame(rows), 500, 0.95, 0)
    assert measured.scope == "pretrained upos" and measured.value == 0.5
    assert 0.25 < measured.ci_low <= 0.5 <= measured.ci_high < 0.75
    assert claims.verdict(measured.ci_low, measured.ci_high, claims.BY_KEY["probing_peak_middle"].region) == REPRODUCED


def test_every_claim_names_its_source_and_setup():
    for claim in claims.CLAIMS:
        assert claim.source and claim.paper_setup and claim.paper_value and claim.region_source and not math.isnan(claim.scale)
    assert "{level}" in claims.VERDICT_RULE and "95%" in claims.verdict_rule(0.95)


def test_a_model_missing_from_the_fitness_table_is_an_error_not_fit():
    measured = [claims.Measured("best_head_disabling_gain", "MRPC", 0.012, 0.004, 0.02, (("MRPC", 1), ("MRPC", 3)))]
    with pytest.raises(ValueError, match="MRPC seed 3.*no verdict"):
        claims.claims_table(measured, {("MRPC", 1): True}, {})


def test_a_claim_about_a_task_the_run_lacks_is_not_applicable_and_one_about_any_model_still_runs():
    table = claims.claims_table([], {}, {"disabling": "ran"}, tasks=["lab_nli"])
    verdicts = dict(table.select("claim", "verdict").iter_rows())
    assert verdicts["first_layer_disabling_gain_rte"] == claims.NOT_APPLICABLE
    assert "about RTE, which this run does not have among its tasks (lab_nli)" in table.filter(
        pl.col("claim") == "first_layer_disabling_gain_rte")["note"][0]
    assert verdicts["best_head_disabling_gain"] == claims.NOT_RUN  # about any fine-tuned model: its stage's verdict
    with_rte = claims.claims_table([], {}, {"disabling": "ran"}, tasks=["lab_nli", "RTE"])
    assert dict(with_rte.select("claim", "verdict").iter_rows())["first_layer_disabling_gain_rte"] == claims.NOT_RUN


@pytest.mark.parametrize("share, expected", [(21 / 72, REPRODUCED), (28 / 72, REPRODUCED), (35 / 72, REPRODUCED),
                                             (14 / 72, NOT_REPRODUCED), (42 / 72, NOT_REPRODUCED), (0.9, NOT_REPRODUCED)])
def test_about_forty_percent_prunable_is_a_region_not_a_floor(share, expected):
    """Michel et al.'s 'about 40%' is four steps of 10% of the heads, one step either side: three to five steps of
    round(7.2) = 7 of MiniLM's 72 heads; 90% prunable is another effect, not a reproduction."""
    region = claims.BY_KEY["prunable_share"].region
    assert claims.verdict(share, share, region) == expected


def test_one_verdict_per_claim_by_holm_over_its_fit_rows():
    region = Region(0.0, None)
    # two rows clearly above 0: reproduced
    assert claims.overall_verdict([(1.0, 0.5, 1.5, False, True), (2.0, 1.0, 3.0, False, True)], region, 0.95)[0] == REPRODUCED
    # each row's own 95% interval excludes 0, but only just (one-sided p about 0.023 each, above 0.025 / 2): not every
    # row holds after Holm's correction for two rows; alone, a row keeps its own verdict
    just = (0.2, 0.004, 0.4, False, True)
    assert claims.verdict(just[1], just[2], region) == REPRODUCED
    assert claims.overall_verdict([just], region, 0.95)[0] == REPRODUCED
    assert claims.overall_verdict([just, just], region, 0.95)[0] == INCONCLUSIVE
    # one row clearly below 0: the claim does not hold in general
    assert claims.overall_verdict([(1.0, 0.5, 1.5, False, True), (-1.0, -1.5, -0.5, False, True)], region, 0.95)[0] == NOT_REPRODUCED
    # an untrusted row never counts as inside; unfit rows are left out, all unfit is model unfit
    assert claims.overall_verdict([(1.0, 0.5, 1.5, False, False), (1.0, 0.5, 1.5, False, True)], region, 0.95)[0] == INCONCLUSIVE
    assert claims.overall_verdict([(1.0, 0.5, 1.5, True, True)], region, 0.95)[0] == MODEL_UNFIT
    # an interval that reaches an open bound is not inside, alone or with other rows
    on_bound = (0.01, 0.0, 0.02, False, True)
    assert claims.verdict(on_bound[1], on_bound[2], region) == INCONCLUSIVE
    assert claims.overall_verdict([on_bound, (0.05, 0.03, 0.07, False, True)], region, 0.95)[0] == INCONCLUSIVE
    # a row on a closed bound is inside, and a row the other rows' correction would leave outside is still its own
    closed = Region(0.25, 0.55, closed=True)
    assert claims.overall_verdict([(0.55, 0.55, 0.55, False, True)], closed, 0.95)[0] == REPRODUCED
    assert claims.overall_verdict([(0.2, 0.1, 0.2499, False, True)], closed, 0.95)[0] == NOT_REPRODUCED
    # a two-sided region: inside needs both bounds
    assert claims.overall_verdict([(0.4, 0.35, 0.45, False, True), (0.45, 0.32, 0.58, False, True)],
                                  Region(0.3, 0.5, closed=True), 0.95)[0] == INCONCLUSIVE


def test_outliers_must_cost_more_than_every_random_draw():
    """Below the random draws' mean is not the paper's effect (a large loss against none): a set of outliers that costs
    more than the mean draw but less than the worst draw does not reproduce it."""
    contrast = pl.DataFrame({"task": ["SST-2"], "placement": ["output"], "seed": [None], "outliers_delta": [-0.02], "random_mean_delta": [0.0],
                             "random_low": [-0.03], "random_high": [0.01], "random_worst": [-0.04],
                             "random_at_or_below_outliers": [0.1], "draws": [30], "difference": [-0.02], "ci_low": [-0.03],
                             "ci_high": [-0.01], "minus_worst": [0.02], "worst_ci_low": [0.005], "worst_ci_high": [0.035],
                             "pooled_seeds": ["1"], "seeds_without_outliers": [""]}, schema_overrides={"seed": pl.Int64})
    [measured] = claims.outliers_disrupt(contrast)
    assert claims.verdict(measured.ci_low, measured.ci_high, claims.BY_KEY["outliers_disrupt"].region) == NOT_REPRODUCED
    assert "random mean" in measured.note


def test_gates_trained_with_their_weights_are_shown_but_not_trusted():
    """Voita et al.'s gates train with the weights: their rows run the claim by default, but they are scored on weights
    trained one more epoch, so only the frozen-weights rows compare the choice of heads alone."""
    gates = pl.DataFrame({"task": ["SST-2"] * 2, "seed": [1, 1], "weights": ["trained", "frozen"], "strength": [0.1, 0.1],
                          "heads_kept": [40, 40], "heads": [72, 72], "share_pruned": [32 / 72] * 2, "metric": ["accuracy"] * 2,
                          "gates_minus_michel": [0.01, 0.01], "binary_minus_michel": [0.02, 0.02],
                          "binary_ci_low": [0.01, 0.01], "binary_ci_high": [0.03, 0.03]})
    rows = {m.scope.split("weights ")[1]: m for m in claims.l0_gates_beat_michel(gates)}
    assert rows["frozen"].trusted and not rows["trained"].trusted and "one more epoch" in rows["trained"].note
    assert claims.l0_gates_beat_michel(gates.filter(pl.col("weights") == "trained"))  # runs under the default config
    # the trained rows are shown, not counted: the claim's one verdict rests on the frozen rows
    table = claims.claims_table(claims.l0_gates_beat_michel(pl.concat([gates, gates.with_columns(pl.lit(2, pl.Int64).alias("seed"))])),
                                {("SST-2", 1): True, ("SST-2", 2): True}, {})
    overall = table.filter((pl.col("claim") == "l0_gates_beat_michel") & (pl.col("scope") == "overall")).row(0, named=True)
    assert overall["verdict"] == REPRODUCED and "2 rows shown for comparison only" in overall["note"]


def test_kappa_needs_enough_ticket_seeds_and_covers_leaving_one_out():
    stability = pl.DataFrame({"task": ["MRPC", "SST-2"], "method": ["s", "s"], "element": ["heads", "heads"], "seeds": [2, 3],
                              "seeds_without_ticket": ["3", ""], "kept_share": [0.5, 0.5], "kept_share_min": [0.5, 0.4],
                              "kept_share_max": [0.5, 0.6], "fleiss_kappa": [0.3, 0.2], "kappa_ci_low": [0.2, 0.15],
                              "kappa_ci_high": [0.4, 0.25], "kappa_loo_min": [None, 0.05], "kappa_loo_max": [None, 0.45],
                              "kappa_max": [1.0, 0.9]},
                             schema_overrides={"kappa_loo_min": pl.Float64, "kappa_loo_max": pl.Float64})
    rows = {m.scope: m for m in claims.mask_agreement(stability, {"MRPC": [1, 2, 3], "SST-2": [1, 2, 3]}, min_seeds=3)}
    assert not rows["MRPC"].trusted and rows["MRPC"].models == (("MRPC", 1), ("MRPC", 2)) and "left out: 3" in rows["MRPC"].note
    assert rows["SST-2"].trusted and (rows["SST-2"].ci_low, rows["SST-2"].ci_high) == (0.05, 0.45)
    # one seed moves kappa past 0.40: not reproduced any more, though the heads' bootstrap alone says so
    assert claims.verdict(0.15, 0.25, claims.BY_KEY["mask_agreement_kappa"].region) == REPRODUCED
    assert claims.verdict(rows["SST-2"].ci_low, rows["SST-2"].ci_high, claims.BY_KEY["mask_agreement_kappa"].region) == INCONCLUSIVE


def test_heterogeneous_share_from_the_hand_labels_random_sample():
    """A share is a proportion: the hand labels drawn at random from a fine-tuned dump estimate it, with a binomial
    interval, without any labeller; the pre-trained dumps' labels and other samples do not count."""
    report = {
        "hand_label_shares_random_sample": [
            {"task": "MRPC", "state": "finetuned/seed1", "label": "heterogeneous", "maps": 12, "share": 0.4},
            {"task": "MRPC", "state": "finetuned/seed1", "label": "vertical", "maps": 18, "share": 0.6},
            {"task": "MRPC", "state": "pretrained", "label": "heterogeneous", "maps": 30, "share": 1.0}],
        "test": {"hand_label_shares_random_sample": [
            {"task": "MRPC", "state": "finetuned/seed1", "label": "heterogeneous", "maps": 8, "share": 0.2},
            {"task": "MRPC", "state": "finetuned/seed1", "label": "diagonal", "maps": 32, "share": 0.8}]},
    }
    [measured] = claims.heterogeneous_share_from_hand_labels(report, 0.95, {"MRPC": 0.9}, "CNN, macro F1 0.75")
    assert measured.value == pytest.approx(20 / 70) and measured.models == (("MRPC", 1),) and measured.trusted
    from scipy.stats import binomtest
    ci = binomtest(20, 70).proportion_ci(0.95, method="exact")
    assert (measured.ci_low, measured.ci_high) == pytest.approx((ci.low, ci.high))
    assert "20 of 70" in measured.note and "90.0%" in measured.note


def test_every_hand_labelled_class_share_has_a_binomial_interval():
    from scipy.stats import binomtest

    from bertology_core.patterns import tables

    report = {"hand_label_shares_random_sample": [
        {"task": "RTE", "state": "pretrained", "label": "vertical", "maps": 21, "share": 0.7},
        {"task": "RTE", "state": "pretrained", "label": "diagonal", "maps": 9, "share": 0.3}]}
    shares = tables.hand_label_shares(report).sort("class")
    ci = binomtest(9, 30).proportion_ci(0.95, method="exact")
    assert shares.row(0, named=True)["class"] == "diagonal"
    assert (shares["ci_low"][0], shares["ci_high"][0]) == pytest.approx((ci.low, ci.high))


def test_masks_whose_sizes_alone_keep_kappa_low_give_no_verdict():
    """Nested masks agree as much as masks of their sizes can, yet seeds keeping 90%, 50% and 30% of the heads give a
    kappa of about 0.18, inside Prasanna et al.'s range: the sizes, not the choice of heads, would decide the claim."""
    from bertology_core.pruning import stats
    from bertology_core.pruning import summary as pruning_summary

    order = np.arange(144)
    nested = [{"heads": (order < kept).reshape(12, 12), "mlps": np.array([1] * 11 + [0])} for kept in (130, 72, 43)]
    assert stats.fleiss_kappa(np.stack([m["heads"] for m in nested])) < 0.40  # the artefact
    _, stability = pruning_summary.survival_and_stability({("SST-2", "s"): list(enumerate(nested, 1))}, lambda stack: (0.1, 0.3))
    [measured] = claims.mask_agreement(stability, {"SST-2": [1, 2, 3]}, min_seeds=3)
    row = stability.filter(pl.col("element") == "heads").row(0, named=True)
    assert row["kappa_max"] == pytest.approx(row["fleiss_kappa"])  # nested masks reach the ceiling
    assert not measured.trusted and "sizes alone" in measured.note
