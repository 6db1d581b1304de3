import math

import polars as pl

from bertology_core.baselines import tables


def record(task, state, seed, **values):
    return {"task": task, "state": state, "seed": seed, "eval": {"dev": {**values, "examples": 10, "eval_seconds": 0.1}}}


def test_mean_and_std_over_seeds_match_hand_computation():
    records = [
        record("MRPC", "finetuned", 1, accuracy=0.70, f1=0.80),
        record("MRPC", "finetuned", 2, accuracy=0.80, f1=0.90),
        record("MRPC", "pretrained", 1, accuracy=0.50, f1=0.60),
    ]
    long = tables.collect("m", records)
    assert long.height == 6  # eval bookkeeping fields are not metrics
    summary = tables.summarise(long)
    acc = summary.filter((pl.col("state") == "finetuned") & (pl.col("metric") == "accuracy")).row(0, named=True)
    assert math.isclose(acc["mean"], 0.75) and math.isclose(acc["std"], math.sqrt(0.005)) and acc["n_seeds"] == 2
    table = tables.wide(summary)
    assert table.columns == ["task", "metric", "pre-trained", "fine-tuned"]  # the states' labels, in Table 1's order
    row = table.filter(pl.col("metric") == "accuracy").row(0, named=True)
    assert row["fine-tuned"] == "0.75 ± 0.071" and row["pre-trained"] == "0.5"
    assert table.filter(pl.col("metric") == "accuracy").rows() == [("MRPC", "accuracy", "0.5", "0.75 ± 0.071")]


def test_extra_dev_sets_are_labelled():
    summary = tables.summarise(tables.collect("m", [
        {"task": "MNLI", "state": "finetuned", "seed": 1, "eval": {"dev": {"accuracy": 0.8}, "dev_mismatched": {"accuracy": 0.7}}}
    ]))
    assert tables.wide(summary)["task"].to_list() == ["MNLI", "MNLI (dev_mismatched)"]
