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


def _gain(task, seed, value, low, high, **kw):
    return claims.Measured("best_head_disabling_gain", f"{task} seed {seed}", value, low, high, ((task, seed),), task=task,
                           seed=seed, **kw)


def test_table_marks_unfit_models_and_lists_claims_that_did_not_run():
    measured = [_gain("MRPC", 1, 0.012, 0.004, 0.02), _gain("MRPC", 2, 0.012, 0.004, 0.02), _gain("SST-2", 1, 0.01, 0.002, 0.02)]
    headline, detail = claims.claims_tables(measured, {("MRPC", 1): True, ("MRPC", 2): False, ("SST-2", 1): "weak"},
                                            {"disabling": "ran", "pruning": "skipped"})
    rows = {r["scope"]: r for r in detail.filter(pl.col("claim") == "best_head_disabling_gain").iter_rows(named=True)}
    assert rows["MRPC seed 2"]["verdict"] == MODEL_UNFIT and "unfit: MRPC seed 2" in rows["MRPC seed 2"]["note"]
    assert rows["SST-2 seed 1"]["verdict"] == REPRODUCED and "weak: SST-2 seed 1" in rows["SST-2 seed 1"]["note"]
    assert rows["SST-2 seed 1"]["this_run"] == pytest.approx(1.0) and rows["SST-2 seed 1"]["ci_low"] == pytest.approx(0.2)  # points
    # one verdict for the claim: the unfit row is left out, the weak model counts and is named
    gain = headline.filter(pl.col("claim") == "best_head_disabling_gain").row(0, named=True)
    assert gain["verdict"] == REPRODUCED and "1 row on unfit models" in gain["note"]
    assert gain["rests_on"] == "1 fit; 1 weak (SST-2 seed 1)"  # the models the effect rests on; the unfit one is in the note
    assert headline.height == len(claims.CLAIMS) and headline["claim"].to_list() == [c.key for c in claims.CLAIMS]
    others = headline.filter(pl.col("claim") != "best_head_disabling_gain")
    # fitness.if_unfit: skip left out every model pruning would analyse: its claims rest on unfit models
    pruning = others.filter(pl.col("claim").is_in(["mask_agreement_kappa", "prunable_share"]))
    assert set(pruning["verdict"]) == {MODEL_UNFIT} and pruning["note"].str.contains("skip").all()
    assert set(others.filter(~pl.col("claim").is_in(["mask_agreement_kappa", "prunable_share"]))["verdict"]) == {NOT_RUN}


def test_a_claim_whose_seeds_disagree_is_not_decided_by_one_seed():
    """Seed 1 gains 2 points, seed 2 loses 2, each with a tight interval: resampling seeds puts both in the claim's
    interval, which straddles zero; one seed alone would have reproduced the claim."""
    agree = [_gain("MRPC", 1, 0.02, 0.01, 0.03)]
    disagree = agree + [_gain("MRPC", 2, -0.02, -0.03, -0.01)]
    fit = {("MRPC", 1): True, ("MRPC", 2): True}
    one = claims.claims_tables(agree, fit, {})[0].filter(pl.col("claim") == "best_head_disabling_gain").row(0, named=True)
    assert one["verdict"] == REPRODUCED and "one fine-tuning seed" in one["note"]
    headline, detail = claims.claims_tables(disagree, fit, {})
    both = headline.filter(pl.col("claim") == "best_head_disabling_gain").row(0, named=True)
    assert both["verdict"] == INCONCLUSIVE and both["ci_low"] < 0 < both["ci_high"] and both["this_run"] == pytest.approx(0.0)
    # the task's seeds pooled are a row of their own below the headline, beside each seed's
    assert detail.filter(pl.col("claim") == "best_head_disabling_gain")["scope"].to_list() == [
        "MRPC seed 1", "MRPC seed 2", "MRPC, seeds pooled"]


def test_rows_that_leave_the_effect_unchanged_leave_the_verdict_unchanged():
    """Eight strengths (or tasks) with the same effect as one: the verdict of one row holds for eight (Holm's
    correction over rows made it inconclusive: more rows, a stricter bar, whatever the effect)."""
    fit = {("SST-2", 1): True, **{(f"T{i}", 1): True for i in range(8)}}
    one = [_gain("SST-2", 1, 0.05, 0.01, 0.09)]
    strengths = [_gain("SST-2", 1, 0.05, 0.01, 0.09) for _ in range(8)]
    tasks = [_gain(f"T{i}", 1, 0.05, 0.01, 0.09) for i in range(8)]
    verdicts = [claims.claims_tables(rows, fit, {})[0].filter(pl.col("claim") == "best_head_disabling_gain")["verdict"][0]
                for rows in (one, strengths, tasks)]
    assert verdicts == [REPRODUCED] * 3
    # and rows outside stay outside: one loss among gains of the same size moves the mean, not a vote
    mixed = tasks + [_gain("T0", 2, -0.05, -0.09, -0.01)]
    fit[("T0", 2)] = True
    assert claims.claims_tables(mixed, fit, {})[0].filter(pl.col("claim") == "best_head_disabling_gain")["verdict"][0] in (
        REPRODUCED, INCONCLUSIVE)


def test_rows_of_one_model_move_together_and_do_not_narrow_the_interval():
    """Five strengths of one model measured on the same dev examples are not five independent measurements: copies of
    one row leave its headline as the row alone (inconclusive), not reproduced by averaging noise away."""
    row = _gain("SST-2", 1, 0.01, -0.005, 0.025)
    fit = {("SST-2", 1): True}
    alone = claims.pooled([row], fit, Region(0.0, None), 0.95, 2000, 0)[0]
    copies = claims.pooled([row] * 5, fit, Region(0.0, None), 0.95, 2000, 0)[0]
    assert alone.verdict == copies.verdict == INCONCLUSIVE and (alone.ci_low, alone.ci_high) == (-0.005, 0.025)
    assert copies.ci_low == pytest.approx(-0.005, abs=0.002) and copies.ci_high == pytest.approx(0.025, abs=0.002)
    # two seeds that agree exactly: the seed part adds nothing, the examples (shared by both) are not counted twice
    two = claims.pooled([row, _gain("SST-2", 2, 0.01, -0.005, 0.025)], {**fit, ("SST-2", 2): True}, Region(0.0, None), 0.95, 2000, 0)[0]
    assert two.ci_low == pytest.approx(-0.005, abs=0.002) and two.ci_high == pytest.approx(0.025, abs=0.002)


def test_few_seeds_widen_the_seed_part_as_students_t_does():
    assert claims.seed_spread_factor(1, 0.95) == 1.0
    assert claims.seed_spread_factor(2, 0.95) == pytest.approx(9.17, abs=0.01)
    assert claims.seed_spread_factor(3, 0.95) == pytest.approx(2.69, abs=0.01)
    assert 1.0 < claims.seed_spread_factor(30, 0.95) < 1.1
    # three seeds around +2 points, one much lower: reproduced by their examples alone, not once their spread is judged
    rows = [_gain("MRPC", 1, 0.03, 0.025, 0.035), _gain("MRPC", 2, 0.025, 0.02, 0.03), _gain("MRPC", 3, 0.002, -0.003, 0.007)]
    fit = {("MRPC", s): True for s in (1, 2, 3)}
    result = claims.pooled(rows, fit, Region(0.0, None), 0.95, 2000, 0)[0]
    assert result.verdict == INCONCLUSIVE and result.ci_low < 0 < result.value
    # widened, a share stays a share: never below 0 however the seeds spread
    shares = [claims.Measured("prunable_share", f"SST-2 seed {s}", v, max(v - 0.05, 0), v + 0.05, (("SST-2", s),), task="SST-2", seed=s)
              for s, v in ((1, 0.0), (2, 0.1), (3, 0.3))]
    widened = claims.pooled(shares, {("SST-2", s): True for s in (1, 2, 3)}, claims.BY_KEY["prunable_share"].region, 0.95, 2000, 0,
                            claims.BY_KEY["prunable_share"].bounds)[0]
    assert widened.ci_low == 0.0 and widened.verdict == INCONCLUSIVE


def test_a_finding_against_the_claim_keeps_its_headline_from_reproduced():
    contrast = pl.DataFrame({"task": ["MRPC"], "placement": ["output"], "seed": [1], "outliers_delta": [-0.1], "random_mean_delta": [0.0],
                             "random_low": [-0.01], "random_high": [0.01], "random_worst": [-0.02],
                             "random_at_or_below_outliers": [0.0], "draws": [30], "difference": [-0.1], "ci_low": [-0.12],
                             "ci_high": [-0.08], "minus_worst": [-0.08], "worst_ci_low": [-0.1], "worst_ci_high": [-0.06]},
                            schema_overrides={"seed": pl.Int64})
    dimensions = pl.DataFrame({"state": ["finetuned", "finetuned"], "task": ["MRPC", "MRPC"], "seed": [1, 2], "dimension": [7, None],
                               "not_applicable": [None, None]}, schema_overrides={"dimension": pl.Int64, "not_applicable": pl.String})
    rows = claims.outliers_disrupt(contrast, dimensions, ["MRPC"])
    assert [r.scope for r in rows] == ["MRPC seed 1", "MRPC seed 2"] and rows[1].finding == NOT_REPRODUCED
    headline, detail = claims.claims_tables(rows, {("MRPC", 1): True, ("MRPC", 2): True}, {})
    outliers = headline.filter(pl.col("claim") == "outliers_disrupt").row(0, named=True)
    assert outliers["verdict"] == INCONCLUSIVE and "no outlier dimension found" in outliers["note"]
    assert detail.filter(pl.col("claim") == "outliers_disrupt")["verdict"].to_list() == [REPRODUCED, NOT_REPRODUCED]
    # a pre-LayerNorm encoder: the criterion does not apply, which is no finding about the claim
    pre = dimensions.with_columns(pl.lit("pre-LayerNorm encoder").alias("not_applicable"))
    assert claims.outliers_disrupt(contrast.clear(), pre, ["MRPC"]) == []


def test_a_small_gain_is_not_the_papers_effect():
    """The first layer's +0.3 points is a gain, but not Kovaleva et al.'s +3.2 (the region: at least half of it)."""
    region = claims.BY_KEY["first_layer_disabling_gain_rte"].region
    assert claims.verdict(0.001, 0.005, region) == NOT_REPRODUCED
    assert claims.verdict(0.02, 0.05, region) == REPRODUCED
    assert claims.verdict(0.01, 0.05, region) == INCONCLUSIVE
    tenney = claims.BY_KEY["pos_before_dependencies"].region  # a share of the depth: half the paper's 2.3 of 24 layers
    assert claims.verdict(0.01, 0.03, tenney) == NOT_REPRODUCED and claims.verdict(0.06, 0.15, tenney) == REPRODUCED


def test_no_outlier_dimension_is_a_finding_not_a_missing_run():
    contrast = pl.DataFrame(schema={"task": pl.String, "placement": pl.String, "seed": pl.Int64})
    dimensions = pl.DataFrame({"state": ["pretrained", "finetuned"], "task": [None, "SST-2"], "seed": [None, 1],
                               "dimension": [None, None]}, schema_overrides={"seed": pl.Int64, "dimension": pl.Int64})
    [row] = claims.outliers_disrupt(contrast, dimensions, ["SST-2"])
    assert row.finding == NOT_REPRODUCED and "no outlier dimension found" in row.note
    headline, detail = claims.claims_tables([row], {("SST-2", 1): True}, {"outliers": "ran"})
    outliers = headline.filter(pl.col("claim") == "outliers_disrupt").row(0, named=True)
    assert outliers["verdict"] == NOT_REPRODUCED and "no outlier dimension found" in outliers["note"]
    assert detail.filter(pl.col("claim") == "outliers_disrupt")["verdict"].to_list() == [NOT_REPRODUCED]


def test_no_gate_strength_in_the_compared_range_is_stated():
    gates = pl.DataFrame({"task": ["SST-2"] * 2, "seed": [1, 1], "weights": ["frozen"] * 2, "strength": [0.01, 10.0],
                          "heads_kept": [72, 2], "heads": [72, 72], "share_pruned": [0.0, 70 / 72], "metric": ["accuracy"] * 2,
                          "gates_minus_michel": [0.0, 0.0], "binary_minus_michel": [0.0, 0.0],
                          "binary_ci_low": [0.0, 0.0], "binary_ci_high": [0.0, 0.0]})
    [row] = claims.l0_gates_beat_michel(gates)
    assert row.finding == INCONCLUSIVE and "no strength pruned 10% to 90% of the heads (pruned: 0% at 0.01, 97% at 10)" in row.note
    headline, _ = claims.claims_tables([row], {("SST-2", 1): True}, {})
    assert headline.filter(pl.col("claim") == "l0_gates_beat_michel")["verdict"][0] == INCONCLUSIVE


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
        claims.claims_tables(measured, {("MRPC", 1): True}, {})


def test_a_claim_about_a_task_the_run_lacks_is_not_applicable_and_one_about_any_model_still_runs():
    table = claims.claims_tables([], {}, {"disabling": "ran"}, tasks=["lab_nli"])[0]
    verdicts = dict(table.select("claim", "verdict").iter_rows())
    assert verdicts["first_layer_disabling_gain_rte"] == claims.NOT_APPLICABLE
    assert "about RTE, which this run does not have among its tasks (lab_nli)" in table.filter(
        pl.col("claim") == "first_layer_disabling_gain_rte")["note"][0]
    assert verdicts["best_head_disabling_gain"] == claims.NOT_RUN  # about any fine-tuned model: its stage's verdict
    with_rte = claims.claims_tables([], {}, {"disabling": "ran"}, tasks=["lab_nli", "RTE"])[0]
    assert dict(with_rte.select("claim", "verdict").iter_rows())["first_layer_disabling_gain_rte"] == claims.NOT_RUN


@pytest.mark.parametrize("share, expected", [(21 / 72, REPRODUCED), (28 / 72, REPRODUCED), (35 / 72, REPRODUCED),
                                             (14 / 72, NOT_REPRODUCED), (42 / 72, NOT_REPRODUCED), (0.9, NOT_REPRODUCED)])
def test_about_forty_percent_prunable_is_a_region_not_a_floor(share, expected):
    """Michel et al.'s 'about 40%' is four steps of 10% of the heads, one step either side: three to five steps of
    round(7.2) = 7 of MiniLM's 72 heads; 90% prunable is another effect, not a reproduction."""
    region = claims.BY_KEY["prunable_share"].region
    assert claims.verdict(share, share, region) == expected


def test_the_pooled_interval_comes_from_the_rows_draws_or_their_intervals():
    rng = np.random.default_rng(0)
    # a row with resamples of its own keeps them; one with only an interval gets a split normal of that interval
    own = claims.Measured("prunable_share", "SST-2 seed 1", 0.4, 0.3, 0.5, draws=np.linspace(0.3, 0.5, 1000))
    assert np.array_equal(claims.unit_draws(own, 1000, 0.95, rng), own.draws)
    normal = claims.unit_draws(claims.Measured("prunable_share", "x", 0.4, 0.3, 0.6), 20000, 0.95, rng)
    assert np.quantile(normal, 0.025) == pytest.approx(0.3, abs=0.01) and np.quantile(normal, 0.975) == pytest.approx(0.6, abs=0.01)
    assert claims.unit_draws(claims.Measured("prunable_share", "x", float("nan"), 0.3, 0.6), 100, 0.95, rng) is None
    # all unfit: model unfit; nothing trusted: inconclusive
    fit = {("MRPC", 1): False}
    assert claims.pooled([_gain("MRPC", 1, 0.01, 0.005, 0.02)], fit, Region(0.0, None), 0.95, 500, 0)[0].verdict == MODEL_UNFIT
    untrusted = _gain("MRPC", 1, 0.01, 0.005, 0.02, trusted=False)
    assert claims.pooled([untrusted], {("MRPC", 1): True}, Region(0.0, None), 0.95, 500, 0)[0].verdict == INCONCLUSIVE


def test_outliers_must_cost_more_than_every_random_draw():
    """Below the random draws' mean is not the paper's effect (a large loss against none): a set of outliers that costs
    more than the mean draw but less than the worst draw does not reproduce it."""
    contrast = pl.DataFrame({"task": ["SST-2"], "placement": ["output"], "seed": [None], "outliers_delta": [-0.02], "random_mean_delta": [0.0],
                             "random_low": [-0.03], "random_high": [0.01], "random_worst": [-0.04],
                             "random_at_or_below_outliers": [0.1], "draws": [30], "difference": [-0.02], "ci_low": [-0.03],
                             "ci_high": [-0.01], "minus_worst": [0.02], "worst_ci_low": [0.005], "worst_ci_high": [0.035],
                             "pooled_seeds": ["1"], "seeds_without_outliers": [""]}, schema_overrides={"seed": pl.Int64})
    [measured] = claims.outliers_disrupt(contrast.with_columns(pl.lit(1, pl.Int64).alias("seed")))
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
    headline, _ = claims.claims_tables(claims.l0_gates_beat_michel(pl.concat([gates, gates.with_columns(pl.lit(2, pl.Int64).alias("seed"))])),
                                       {("SST-2", 1): True, ("SST-2", 2): True}, {})
    overall = headline.filter(pl.col("claim") == "l0_gates_beat_michel").row(0, named=True)
    assert overall["verdict"] == REPRODUCED and "(2, 2)" not in overall["note"] and "1 task (SST-2)" in overall["note"]
    assert claims.claims_tables(claims.l0_gates_beat_michel(gates.filter(pl.col("weights") == "trained")), {("SST-2", 1): True},
                                {})[0].filter(pl.col("claim") == "l0_gates_beat_michel")["verdict"][0] == INCONCLUSIVE


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


def _report(first, second):
    """A classifier report whose two labelling passes drew (heterogeneous, maps) from MRPC's fine-tuned dump."""
    def part(hits, total):
        return [{"task": "MRPC", "state": "finetuned/seed1", "label": "heterogeneous", "maps": hits, "share": hits / total},
                {"task": "MRPC", "state": "finetuned/seed1", "label": "vertical", "maps": total - hits, "share": 1 - hits / total},
                {"task": "MRPC", "state": "pretrained", "label": "heterogeneous", "maps": 30, "share": 1.0}]
    return {"hand_label_shares_random_sample": part(*first), "test": {"hand_label_shares_random_sample": part(*second)}}


def test_heterogeneous_share_from_the_labels_random_samples_per_pass_and_pooled():
    """A share is a proportion: the labels drawn at random from a fine-tuned dump estimate it, with a binomial interval,
    without any labeller; each labelling pass alone is shown, both pooled count; the pre-trained dumps' labels do not."""
    from scipy.stats import binomtest

    rows = {m.scope: m for m in claims.heterogeneous_share_from_hand_labels(_report((12, 30), (8, 40)), 0.95, {"MRPC": 0.9},
                                                                            "CNN, macro F1 0.75", labelled_by="one labeller")}
    pooled_row = rows["MRPC, labels pooled"]
    assert pooled_row.value == pytest.approx(20 / 70) and pooled_row.models == (("MRPC", 1),) and pooled_row.counted
    ci = binomtest(20, 70).proportion_ci(0.95, method="exact")
    assert (pooled_row.ci_low, pooled_row.ci_high) == pytest.approx((ci.low, ci.high))
    assert "20 of 70" in pooled_row.note and "90.0%" in pooled_row.note and "one labeller" in pooled_row.note
    assert not rows["MRPC, labels alone"].counted and rows["MRPC, labels alone"].value == pytest.approx(12 / 30)
    assert rows["MRPC, test labels alone"].value == pytest.approx(8 / 40)


def test_two_labelling_passes_that_disagree_about_the_region_give_no_verdict():
    """17 of 120 heterogeneous in one pass, 40 of 160 in the other (Fisher p about 0.035): the first is below 32%, the
    second straddles it. Pooled they are below (not reproduced); apart they disagree: inconclusive."""
    rows = {m.scope: m for m in claims.heterogeneous_share_from_hand_labels(_report((17, 120), (40, 160)), 0.95, {}, "")}
    region = claims.BY_KEY["heterogeneous_share"].region
    assert claims.verdict(rows["MRPC, labels alone"].ci_low, rows["MRPC, labels alone"].ci_high, region) == NOT_REPRODUCED
    assert claims.verdict(rows["MRPC, test labels alone"].ci_low, rows["MRPC, test labels alone"].ci_high, region) == INCONCLUSIVE
    pooled_row = rows["MRPC, labels pooled"]
    assert claims.verdict(pooled_row.ci_low, pooled_row.ci_high, region) == NOT_REPRODUCED  # what pooling alone said
    assert pooled_row.veto and "disagree about the region" in pooled_row.note and "Fisher" in pooled_row.note
    headline, detail = claims.claims_tables(list(rows.values()), {("MRPC", 1): True}, {})
    assert headline.filter(pl.col("claim") == "heterogeneous_share")["verdict"][0] == INCONCLUSIVE
    assert detail.filter(pl.col("scope") == "MRPC, labels pooled")["verdict"][0] == INCONCLUSIVE
    # the veto holds in the headline even beside another task whose passes agree
    other = claims.heterogeneous_share_from_hand_labels(
        {k: [r | {"task": "SST-2"} for r in v] if isinstance(v, list) else {"hand_label_shares_random_sample": [
            r | {"task": "SST-2"} for r in v["hand_label_shares_random_sample"]]} for k, v in _report((3, 30), (4, 40)).items()}, 0.95, {}, "")
    headline, _ = claims.claims_tables(list(rows.values()) + other, {("MRPC", 1): True, ("SST-2", 1): True}, {})
    assert headline.filter(pl.col("claim") == "heterogeneous_share")["verdict"][0] == INCONCLUSIVE


def test_a_share_of_none_keeps_an_interval_in_the_headline():
    [*_, pooled_row] = claims.heterogeneous_share_from_hand_labels(_report((0, 30), (0, 40)), 0.95, {}, "")
    result = claims.pooled([pooled_row], {("MRPC", 1): True}, claims.BY_KEY["heterogeneous_share"].region, 0.95, 2000, 0)[0]
    assert result.ci_low == 0.0 or result.ci_low < 0.005
    assert result.ci_high > 0.02 and result.verdict == NOT_REPRODUCED


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
