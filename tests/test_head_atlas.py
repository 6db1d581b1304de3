"""The head atlas: the join by hand on small tables (the smoke run's atlas is checked in test_report.py)."""

from __future__ import annotations

import polars as pl
import pytest

from bertology_core.report import head_atlas


def _grid(task: str, layers: int = 2, heads: int = 3, **columns) -> pl.DataFrame:
    rows = [{"task": task, "layer": l, "head": h} for l in range(layers) for h in range(heads)]
    frame = pl.DataFrame(rows)
    return frame.with_columns(**{k: pl.Series(v) for k, v in columns.items()})


def test_head_atlas_joins_every_per_head_table_on_task_state_layer_and_head():
    patterns = pl.concat([
        _grid("MRPC", dominant_class=["vertical"] * 6, share=[0.5] * 6).with_columns(dump=pl.lit("MRPC/pretrained")),
        _grid("MRPC", dominant_class=["block"] * 6, share=[0.9] * 6).with_columns(dump=pl.lit("MRPC/finetuned/seed2")),
        _grid("MRPC", dominant_class=["diagonal"] * 6, share=[0.7] * 6).with_columns(dump=pl.lit("MRPC/finetuned/seed1")),
    ]).drop("task")
    features = pl.concat([
        _grid("MRPC", score=[0.1 * i for i in range(6)]).with_columns(model_state=pl.lit(state), feature=pl.lit(feature))
        for state in ("pre-trained", "fine-tuned", "difference") for feature in ("[CLS]", "noun")
    ])
    cosine = _grid("MRPC", cosine=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    disabling = _grid("MRPC", delta=[-0.1] * 6, ci_low=[-0.2] * 6, ci_high=[0.0] * 6, verdict=["loss"] * 6).with_columns(mode=pl.lit("zero"))
    importance = pl.concat([
        _grid("MRPC", normalized_mean=[1.0, 2, 3, 4, 5, 6]).with_columns(element=pl.lit("head")),
        _grid("MRPC", layers=2, heads=1, normalized_mean=[9.0, 9]).with_columns(element=pl.lit("mlp")),
    ])
    survival = pl.concat([
        _grid("MRPC", survival=[1.0, 0.5, 0, 0, 0, 1]).with_columns(method=pl.lit("s"), element=pl.lit("head")),
        _grid("MRPC", survival=[0.0] * 6).with_columns(method=pl.lit("m"), element=pl.lit("attention.self.query")),
    ])
    # L0H0 of the pre-trained model: obj beats its baseline by 0.5, det by 0.1 -> obj
    relations = pl.DataFrame({
        "state": ["pretrained", "pretrained", "pretrained", "MRPC/finetuned/seed1"], "relation": ["obj", "det", "all", "det"],
        "direction": ["dep->head", "head<-dep", "dep->head", "dep->head"], "layer": [0, 0, 0, 1], "head": [0, 0, 0, 2],
        "accuracy": [0.9, 0.95, 0.99, 0.8], "words": [100] * 4,
    })
    best = pl.DataFrame({"state": ["pretrained", "pretrained", "MRPC/finetuned/seed1"], "relation": ["obj", "det", "det"],
                         "baseline_accuracy": [0.4, 0.85, 0.5]})

    atlas = head_atlas.head_atlas("m", patterns=patterns, cosine=cosine, features=features, disabling=disabling,
                              importance=importance, survival=survival, relations=relations, best_relations=best)

    assert atlas.height == 12  # 1 task x 2 states x 2 layers x 3 heads
    assert atlas.select("task", "state", "layer", "head").n_unique() == 12
    row = lambda state, layer, head: atlas.filter((pl.col("state") == state) & (pl.col("layer") == layer) & (pl.col("head") == head)).row(0, named=True)  # noqa: E731
    pre, tuned = row("pre-trained", 0, 0), row("fine-tuned", 1, 2)
    assert pre["name"] == "L1H1" and tuned["name"] == "L2H3" and pre["model"] == "m"
    assert (pre["pattern"], pre["pattern_share"]) == ("vertical", 0.5)
    assert tuned["pattern"] == "diagonal"  # the first seed's dump, not seed 2's
    assert pre["attn_cls"] == pytest.approx(0.0) and tuned["attn_noun"] == pytest.approx(0.5)
    assert pre["cosine_to_pre_trained"] is None and tuned["cosine_to_pre_trained"] == pytest.approx(0.4)
    assert (tuned["disabling_delta"], tuned["disabling_ci_low"], tuned["disabling_verdict"]) == (-0.1, -0.2, "loss")
    assert tuned["importance"] == 6.0 and pre["importance"] is None  # heads only, fine-tuned rows only
    assert tuned["survival_s_pruning"] == 1.0 and row("fine-tuned", 0, 1)["survival_s_pruning"] == 0.5
    assert (pre["best_relation"], pre["relation_direction"], pre["relation_accuracy"]) == ("obj", "dep->head", 0.9)
    assert tuned["best_relation"] == "det" and tuned["relation_baseline"] == 0.5
    assert row("fine-tuned", 0, 0)["best_relation"] is None
    assert atlas.columns[:6] == list(head_atlas.ATLAS_KEYS)


def test_head_atlas_keeps_only_the_stages_given():
    atlas = head_atlas.head_atlas("m", cosine=_grid("RTE", cosine=[0.5] * 6))
    assert atlas.height == 6 and set(atlas["state"]) == {"fine-tuned"}
    assert "pattern" not in atlas.columns and "importance" not in atlas.columns
    note = head_atlas.atlas_chart(atlas.drop("cosine_to_pre_trained"), "caption").to_dict()
    assert note["mark"]["type"] == "text" and "measure no head" in str(note)  # says so instead of an empty map
    assert head_atlas.atlas_chart(atlas, "caption").to_dict()["spec"]["mark"]["type"] == "rect"
