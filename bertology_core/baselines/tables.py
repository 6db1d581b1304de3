"""The baselines table (Kovaleva et al. 2019, Table 1 shape).

Rows are tasks (and MNLI's two dev sets), columns the three model states of fine-tuning
(:mod:`bertology_core.data.states`), titled by their labels — ``pretrained`` (the pre-trained encoder with an untrained
head: the paper's "pre-trained"), ``scratch`` (random init, fine-tuned) and ``finetuned`` — each with the task's
task metrics as mean and standard deviation over seeds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from bertology_core.data import states
from bertology_core.fitness.verdict_stats import Verdicts


def collect(model: str, records: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """Long table, one row per (task, split, state, seed, metric)."""
    rows = [
        {
            "model": model,
            "task": r["task"],
            "split": split,
            "state": r["state"],
            "seed": r["seed"],
            "metric": metric,
            "value": float(value),
        }
        for r in records
        for split, values in r["eval"].items()
        for metric, value in values.items()
        if metric not in ("examples", "eval_seconds")
    ]
    return pl.DataFrame(rows)


def summarise(long: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample standard deviation over seeds (std is null for a single seed)."""
    return (
        long.group_by("model", "task", "split", "state", "metric", maintain_order=True)
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("std"),
            pl.len().alias("n_seeds"),
        )
        .sort("task", "split", "metric")
    )


def wide(summary: pl.DataFrame) -> pl.DataFrame:
    """Paper layout: one row per task/split and metric, one ``mean ± std`` column per state, titled by its label."""
    formatted = summary.with_columns(
        pl.when(pl.col("std").is_null())
        .then(pl.format("{}", pl.col("mean").round(3)))
        .otherwise(pl.format("{} ± {}", pl.col("mean").round(3), pl.col("std").round(3)))
        .alias("cell"),
        pl.when(pl.col("split") == "dev").then(pl.col("task")).otherwise(pl.format("{} ({})", pl.col("task"), pl.col("split"))).alias("task_split"),
    )
    table = formatted.pivot(on="state", index=["task_split", "metric"], values="cell")
    present = [s for s in states.FINE_TUNING if s in table.columns]
    return table.select(
        pl.col("task_split").alias("task"), "metric", *[pl.col(s).alias(states.label(s)) for s in present]
    )


def with_fitness(table: pl.DataFrame, verdicts: pl.DataFrame, seeds: dict[tuple[str, str], list[int]]) -> pl.DataFrame:
    """``table`` (from :func:`wide`) with the trivial predictor's dev score on each task's primary-metric row
    and, per trained state, whether its models are fit for analysis (:mod:`bertology_core.fitness.verdict_stats`).
    ``verdicts``: the fitness table of this model; ``seeds``: (task, state) -> the seeds in the table."""
    model = verdicts["model"][0] if verdicts.height else ""
    labels = {state: Verdicts(verdicts, model, state=state) for state in states.TRAINED}
    rows = []
    for (task, metric), group in verdicts.group_by("task", "metric", maintain_order=True):
        row = {"task": task, "metric": metric, "trivial predictor": group["trivial_score"][0]}
        for state in states.TRAINED:
            if (task, state) in seeds:
                row[f"{states.label(state)}: fit for analysis"] = labels[state].label(task, seeds[(task, state)])
        rows.append(row)
    if not rows:
        return table
    extra = pl.DataFrame(rows).with_columns(pl.col("trivial predictor").round(3).cast(pl.String))
    return table.join(extra, on=["task", "metric"], how="left")
