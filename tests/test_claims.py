"""The claims table: the verdict rule, and each claim's statistic and interval on hand-made data."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from bertology_core import claims
from bertology_core.claims import INCONCLUSIVE, MODEL_UNFIT, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Region


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
    others = table.filter(pl.col("claim") != "best_head_disabling_gain")
    assert others.height == len(claims.CLAIMS) - 1
    # analysis.unfit: skip left out every model pruning would analyse: its claims rest on unfit models
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
        assert claim.source and claim.paper_setup and claim.paper_value and not math.isnan(claim.scale)
    assert "{level}" in claims.VERDICT_RULE and "95%" in claims.verdict_rule(0.95)
