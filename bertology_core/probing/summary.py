"""The probing stage's summaries of one model (rule probing_summary), as :class:`~bertology_core.summaries.figures.Output`:
layer-wise probe accuracy and selectivity against depth, and Clark et al. 2019's syntactic-head tables. Never imports torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import altair as alt
import polars as pl

from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output

PROBE_COLUMNS = [
    "state", "labels", "layer", "accuracy", "control_accuracy", "selectivity", "epoch", "control_epoch", "epochs_run",
    "control_epochs_run", "reference_accuracy", "reference_control_accuracy", "reference_selectivity",
    "reference_probe_accuracy", "reference_probe_control_accuracy", "reference_train_words", "majority_accuracy",
    "classes", "train_words", "dev_words",
]
HEAD_COLUMNS = ["state", "relation", "words", "clark_name", "layer", "head", "direction", "accuracy", "baseline_accuracy",
                "baseline_offset"]
HEADS_NOTE = (
    "Best head per dependency relation (Clark et al. 2019, table 1): accuracy of the head's most-attended word "
    "being the word's syntactic head, best over both directions; baseline: the best fixed offset. Layers and heads "
    "0-based; clark_name counts from 1 as the paper does.")


@dataclass(frozen=True)
class ProbingSettings:
    """What the caption says the probes ran on (config ``probing``): the model, its probed states, the word-piece
    pooling, and the treebank's train and dev sentences (None: all)."""

    model: str
    states: Sequence[str]
    pooling: str
    train_sentences: int | None
    dev_sentences: int | None


def summarise(probes: Sequence[pl.DataFrame], heads: Sequence[pl.DataFrame], held_out: Sequence[pl.DataFrame],
              verdicts: Verdicts, settings: ProbingSettings) -> dict[str, Output]:
    """``probes``, ``heads``, ``held_out``: each probed state's probes and syntactic heads, the latter chosen on half
    the sentences and scored on the other (rules probe_layers, syntactic_heads); the head tables may be none."""
    probe_table = pl.concat(probes).select(PROBE_COLUMNS).sort("labels", "state", "layer")
    long = probe_table.unpivot(index=["state", "labels", "layer"], on=["accuracy", "selectivity", "control_accuracy"],
                               variable_name="measure", value_name="value")
    chart = alt.Chart(long.to_pandas()).mark_line(point=True).encode(
        x=alt.X("layer:O", title="layer (0 = embeddings)"),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
        color=alt.Color("state:N"),
        tooltip=["state", "labels", "measure", "layer", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=220, height=160).facet(
        row=alt.Row("measure:N", title=None), column=alt.Column("labels:N", title=None)).resolve_scale(y="independent")
    sample = f"{settings.train_sentences or 'all'} train / {settings.dev_sentences or 'all'} dev sentences"
    probes_chart = figures.with_caption(
        chart, "Layer-wise linear probes and control tasks (Tenney et al. 2019; Hewitt & Liang 2019)",
        f"Dev accuracy of one linear probe per layer ({settings.pooling} word piece), the control task's accuracy (random "
        f"labels fixed per word type) and selectivity (their difference).\nModel {settings.model}; treebank {sample}; "
        f"states: {', '.join(settings.states)}.",
    )

    # no syntactic-head runs: empty tables, unannotated (there are no columns to select or states to label)
    head_table = pl.concat(heads) if heads else pl.DataFrame()
    if head_table.height:
        head_table = verdicts.annotate(head_table.select(HEAD_COLUMNS).sort(
            "state", pl.col("relation") != "all", -pl.col("words")), state="state")
    held_out_table = pl.concat(held_out) if held_out else pl.DataFrame()
    if held_out_table.height:
        held_out_table = verdicts.annotate(held_out_table.select("state", pl.exclude("state")), state="state")
    return {
        "probes": Output(verdicts.annotate(probe_table, state="state"), figure=probes_chart),
        "syntactic_heads": Output(head_table, note=HEADS_NOTE),
        "syntactic_heads_held_out": Output(held_out_table),
    }
