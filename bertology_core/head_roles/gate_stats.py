"""The L0 head gates' results against Michel et al.'s order (:mod:`bertology_core.head_roles.head_gates`): the table every
gate-training job adds a row to, with paired bootstrap intervals over the dev examples, and its figure. Plain tables:
no torch, so the summary runs in the light environment."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import polars as pl

from bertology_core.stats.bootstrap import Sentences, metric_on_resamples, paired_deltas, resample_indices

PREDICTIONS = ("gates", "gates_binary", "michel", "full")  # the columns of a gate job's predictions, after idx and label


def gates_table(records: list[dict[str, Any]], predictions: list[pl.DataFrame], metric: dict[str, str], resamples: int,
                level: float, seed: int, label_names: dict[str, tuple[str, ...] | None] | None = None) -> pl.DataFrame:
    """One row per gate-training job: heads kept (and their share pruned), the dev score with the learnt gates, with
    the kept heads at gate 1 (``binary``: the heads the gates chose, without their learnt scales), with Michel et al.'s
    order cut at the same number of heads and with the full model; each gated score minus Michel's, with a paired
    bootstrap interval over the dev examples (every column scored on the same resamples). ``metric``: task -> the
    task's primary metric. A token task's predictions hold each sentence's words: scored over words, its resamples
    draw sentences (``label_names``: task -> its labels, from which a BIO task's spans are read)."""
    rows = []
    for record, frame in zip(records, predictions):
        examples, sentences = frame.height, None
        if isinstance(frame.schema["label"], pl.List):  # a token task: a row per word
            sentences = Sentences.of(frame["label"].to_list(), (label_names or {}).get(record["task"]))
            frame = frame.explode("label", *PREDICTIONS)
        name, labels = metric[record["task"]], frame["label"].to_numpy()
        gated = np.stack([frame[column].to_numpy() for column in ("gates", "gates_binary")])
        deltas = paired_deltas(name, gated, frame["michel"].to_numpy(), labels, resample_indices(examples, resamples, seed),
                               sentences)
        low, high = deltas.interval(level)
        scores = metric_on_resamples(name, np.stack([frame[c].to_numpy() for c in PREDICTIONS]), labels,
                                     np.arange(examples)[None, :], sentences)[:, 0]
        heads = int(np.size(record["gates"]))
        rows.append({
            "task": record["task"], "seed": record["seed"], "weights": record["weights"], "strength": record["strength"],
            "heads_kept": record["heads_kept"], "heads": heads, "share_pruned": 1 - record["heads_kept"] / heads, "metric": name,
            **{f"{column}_score": float(value) for column, value in zip(PREDICTIONS, scores)},
            "gates_minus_michel": float(deltas.delta[0]), "ci_low": float(low[0]), "ci_high": float(high[0]),
            "binary_minus_michel": float(deltas.delta[1]), "binary_ci_low": float(low[1]), "binary_ci_high": float(high[1]),
            # (no timings: a table is identical across equal runs; each job's record and benchmark file hold them)
            "dev_examples": examples, "train_examples": record["train_examples"], "steps": record["steps"],
        })
    return pl.DataFrame(rows).sort("task", "seed", "weights", "strength") if rows else pl.DataFrame()


def gates_chart(table: pl.DataFrame, curves: pl.DataFrame, title: str, caption: str):
    """Dev score against heads kept, per fine-tuned model: Michel et al.'s iterative pruning curve (line) and the L0
    gates at each strength (points, by weights setting). ``curves``: task, seed, heads_kept, score."""
    curve = curves.select("task", "seed", "heads_kept", "score", pl.lit("Michel et al. (importance order)").alias("method"))
    points = table.select("task", "seed", "heads_kept", pl.col("gates_score").alias("score"),
                          pl.format("L0 gates, weights {}", "weights").alias("method"), "weights", "strength", "michel_score",
                          "gates_minus_michel", "ci_low", "ci_high")
    data = pl.concat([curve, points], how="diagonal_relaxed").with_columns(pl.format("{} seed {}", "task", "seed").alias("model"))
    base = alt.Chart().encode(x=alt.X("heads_kept:Q", title="heads kept"),
                              y=alt.Y("score:Q", title="dev score", scale=alt.Scale(zero=False)))
    line = base.transform_filter(alt.datum.weights == None).mark_line(point=True, color="gray").encode(  # noqa: E711
        tooltip=["model", "heads_kept", alt.Tooltip("score:Q", format=".3f")])
    dots = base.transform_filter(alt.datum.weights != None).mark_point(size=80, filled=True).encode(  # noqa: E711
        color=alt.Color("method:N", title=None), shape=alt.Shape("method:N", title=None),
        tooltip=["model", "weights", "strength", "heads_kept", alt.Tooltip("score:Q", format=".3f"),
                 alt.Tooltip("michel_score:Q", format=".3f"), alt.Tooltip("gates_minus_michel:Q", format="+.3f"),
                 alt.Tooltip("ci_low:Q", format="+.3f"), alt.Tooltip("ci_high:Q", format="+.3f")])
    chart = alt.layer(line, dots, data=data.to_pandas()).properties(width=320, height=220).facet(facet=alt.Facet("model:N", title=None), columns=2)
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))
