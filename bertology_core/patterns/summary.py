"""The patterns stage's summaries of one model (rule pattern_summary), as :class:`~bertology_core.summaries.figures.Output`:
the class shares per task and state (Kovaleva et al. 2019, fig. 2), each head's dominant class, and the classifier's
scores and confusion matrices. Never imports torch."""

from __future__ import annotations

from typing import Any

import polars as pl

from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.patterns import tables
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output


def summarise(frames: dict[str, pl.DataFrame], report: dict[str, Any], verdicts: Verdicts, model: str,
              examples: int) -> dict[str, Output]:
    """``frames``: each dump's labelled maps by dump key (``task/state``); ``report``: the classifier's report;
    ``examples``: the dev examples per task the dumps hold at most (config ``attention.max_examples``)."""
    source = report["labels_source"]
    shares = pl.concat([
        tables.class_shares(frames, "rule_label").with_columns(pl.lit("rule-based").alias("labeller")),
        tables.class_shares(frames, "cnn_label").with_columns(pl.lit("CNN").alias("labeller")),
        tables.hand_label_shares(report).with_columns(pl.lit("labels by eye (random sample)").alias("labeller")),
        tables.hand_label_shares(report, test=True).with_columns(
            pl.lit("test labels (random sample)").alias("labeller")),
    ], how="diagonal_relaxed").with_columns(pl.lit(source).alias("cnn_labels_source"))
    shares = verdicts.annotate(shares, state="dump")
    heads = pl.concat([
        tables.dominant_class(frame, "cnn_label").with_columns(pl.lit(key).alias("dump"))
        for key, frame in frames.items()
    ]).with_columns(pl.lit(source).alias("cnn_labels_source"))
    heads = verdicts.annotate(heads, state="dump")

    config_note = f"model {model}; up to {examples} dev examples per task; CNN: {source}"
    unlearnt = tables.classes_not_learnt(report)
    if unlearnt:  # a 0% the CNN cannot avoid is not a measurement
        config_note += f"\nThe CNN learnt no {', '.join(unlearnt)} (no training labels of it): its 0% there is not measured."
    shares_chart = figures.class_share_bars(
        shares, "Self-attention pattern classes per task (Kovaleva et al. 2019, fig. 2)",
        f"Share of all (example, layer, head) maps in each class; paper: heterogeneous 32-61% on BERT-base. 'labels by eye' and "
        f"'test labels': classes given by eye, by the labeller the label card names, to maps drawn at random from each dump "
        f"(the training labels' and the test labels', two labelling sessions)."
        f"\n{config_note}",
    )
    heads_chart = figures.class_heatmap(
        heads, "Dominant pattern class per head (CNN)",
        f"Most frequent CNN class of each head over examples; faint = a weak majority.\n{config_note}",
    )
    return {
        "shares": Output(shares, figure=shares_chart),
        "classifier": Output(tables.classifier_table(report)),
        "confusion": Output(tables.confusion_table(report)),
        "heads": Output(heads, figure=heads_chart),
    }
