"""The baselines table (Kovaleva et al. 2019, Table 1 shape).

Rows are tasks (and MNLI's two dev sets), columns the three model states —
``untuned`` (pre-trained encoder, untrained head: the paper's "pre-trained"),
``random`` (random init, fine-tuned) and ``pretrained`` (fine-tuned) — each with
the task's GLUE metrics as mean and standard deviation over seeds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

INIT_ORDER = ("untuned", "random", "pretrained")
INIT_LABELS = {"untuned": "pre-trained (untuned)", "random": "random init + fine-tuned", "pretrained": "fine-tuned"}


def collect(model: str, records: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """Long table, one row per (task, split, init, seed, metric)."""
    rows = [
        {
            "model": model,
            "task": r["task"],
            "split": split,
            "init": r["init"],
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
        long.group_by("model", "task", "split", "init", "metric", maintain_order=True)
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("std"),
            pl.len().alias("n_seeds"),
        )
        .sort("task", "split", "metric")
    )


def wide(summary: pl.DataFrame) -> pl.DataFrame:
    """Paper layout: one row per task/split and metric, one ``mean ± std`` column per init."""
    formatted = summary.with_columns(
        pl.when(pl.col("std").is_null())
        .then(pl.format("{}", pl.col("mean").round(3)))
        .otherwise(pl.format("{} ± {}", pl.col("mean").round(3), pl.col("std").round(3)))
        .alias("cell"),
        pl.when(pl.col("split") == "dev").then(pl.col("task")).otherwise(pl.format("{} ({})", pl.col("task"), pl.col("split"))).alias("task_split"),
    )
    table = formatted.pivot(on="init", index=["task_split", "metric"], values="cell")
    present = [i for i in INIT_ORDER if i in table.columns]
    return table.select(
        pl.col("task_split").alias("task"), "metric", *[pl.col(i).alias(INIT_LABELS[i]) for i in present]
    )


def with_fitness(table: pl.DataFrame, verdicts: pl.DataFrame, seeds: dict[tuple[str, str], list[int]]) -> pl.DataFrame:
    """``table`` (from :func:`wide`) with the trivial predictor's dev score on each task's primary-metric row
    and, per fine-tuned init, whether its models are fit for analysis (:mod:`bertology_core.fitness`).
    ``verdicts``: the fitness table of this model; ``seeds``: (task, init) -> the seeds in the table."""
    from bertology_core.fitness import Verdicts

    model = verdicts["model"][0] if verdicts.height else ""
    labels = {init: Verdicts(verdicts, model, init=init) for init in ("pretrained", "random")}
    rows = []
    for (task, metric), group in verdicts.group_by("task", "metric", maintain_order=True):
        row = {"task": task, "metric": metric, "trivial predictor": group["trivial_score"][0]}
        for init, column in (("pretrained", "fine-tuned: fit for analysis"), ("random", "random init: fit for analysis")):
            if (task, init) in seeds:
                row[column] = labels[init].label(task, seeds[(task, init)])
        rows.append(row)
    if not rows:
        return table
    extra = pl.DataFrame(rows).with_columns(pl.col("trivial predictor").round(3).cast(pl.String))
    return table.join(extra, on=["task", "metric"], how="left")


def to_markdown(table: pl.DataFrame, title: str) -> str:
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in table.iter_rows()]
    return "\n".join([f"# {title}", "", header, rule, *body, ""])
