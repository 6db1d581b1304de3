"""Altair figures shared by the analyses, each saved once as its Vega-Lite spec (which the report page embeds) and as
PNG (vl-convert; what Snakemake's report shows), and the tidy tables beside them (Parquet and CSV).

Every figure gets a title and a two-line ``caption`` (what it shows; the config it came from),
written into the chart as a subtitle so an exported PNG still says what it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import polars as pl

from bertology_core.data.io import atomic_path, write_parquet


def head_heatmap(
    frame: pl.DataFrame, value: str, title: str, caption: str, *, facet: str | None = None, columns: int = 4,
    scheme: str = "viridis", domain: tuple[float, float] | None = None, tooltip: list[str] | None = None,
) -> alt.Chart:
    """An L x H heatmap (layer down, head across, both 1-indexed as papers print them) of ``value``."""
    data = frame.with_columns((pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head")).to_pandas()
    scale = alt.Scale(scheme=scheme, domain=list(domain)) if domain else alt.Scale(scheme=scheme)
    chart = alt.Chart(data).mark_rect().encode(
        x=alt.X("Head:O"),
        y=alt.Y("Layer:O"),
        color=alt.Color(f"{value}:Q", scale=scale),
        tooltip=tooltip or ["Layer", "Head", alt.Tooltip(f"{value}:Q", format=".3f")],
    ).properties(width=180, height=150)
    if facet:
        chart = chart.facet(facet=alt.Facet(f"{facet}:N", title=None), columns=columns)
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))


# a figure's files (bertology_core.summaries.files.FIGURE_FILES): the PNG for Snakemake's report, the Vega-Lite spec
# with its data for the report page, which draws it interactively
FIGURE_FORMATS = ("png", "vl.json")


def save_chart(chart: alt.Chart, stem: str | os.PathLike[str], formats: tuple[str, ...] = FIGURE_FORMATS) -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.vl.json`` (the Vega-Lite spec with its data, which the report page embeds),
    atomically; return the paths. Every row of the chart's data is kept (altair refuses more than 5,000 by default;
    the limit is lifted for this call only)."""
    written = []
    with alt.data_transformers.disable_max_rows():
        for fmt in formats:
            path = Path(f"{stem}.{fmt}")
            altair_format = "json" if fmt == "vl.json" else fmt
            with atomic_path(path) as tmp:
                scratch = tmp.with_suffix(f".{altair_format}")
                chart.save(str(scratch), format=altair_format, **({"scale_factor": 2} if fmt == "png" else {}))
                scratch.rename(tmp)
            written.append(path)
    return written


def write_table(frame: pl.DataFrame, stem: str | os.PathLike[str], note: str = "") -> None:
    """``<stem>.parquet`` and ``<stem>.csv`` of a tidy table, atomically (files.TABLE_FILES). ``note``: what a reader
    needs to read it (a paragraph, which may name this run's settings), kept in the Parquet file's metadata as ``note``;
    the report page shows it under the table's title (bertology_core.report.report.table_note)."""
    write_parquet(frame, f"{stem}.parquet", metadata={"note": note} if note else None)
    with atomic_path(f"{stem}.csv") as tmp:
        frame.write_csv(tmp)


@dataclass(frozen=True)
class Output:
    """One summary as a stage's library code returns it: a tidy ``table`` with the ``note`` the report prints under it
    (what a reader needs to read it), and/or a ``figure`` that carries its own title and caption. Written by
    :func:`write_outputs`, the one writer of every stage's summaries."""

    table: pl.DataFrame | None = None
    note: str = ""
    figure: alt.TopLevelMixin | None = None


def write_outputs(outputs: Mapping[str, Output], folder: str | os.PathLike[str]) -> None:
    """Each summary's files at ``<folder>/<name>``: its table's (:func:`write_table`) and its figure's
    (:func:`save_chart`)."""
    for name, output in outputs.items():
        if output.table is not None:
            write_table(output.table, f"{folder}/{name}", output.note)
        if output.figure is not None:
            save_chart(output.figure, f"{folder}/{name}")


PATTERN_COLORS = alt.Scale(
    domain=["vertical", "diagonal", "vertical_diagonal", "block", "heterogeneous"],
    range=["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#bab0ac"],
)


def class_share_bars(shares: pl.DataFrame, title: str, caption: str) -> alt.Chart:
    """Stacked bars: share of each pattern class per dump (``dump, class, share, labeller``)."""
    return alt.Chart(shares.to_pandas()).mark_bar().encode(
        y=alt.Y("dump:N", title=None),
        x=alt.X("share:Q", stack="normalize", axis=alt.Axis(format="%"), title="share of maps"),
        color=alt.Color("class:N", scale=PATTERN_COLORS),
        column=alt.Column("labeller:N", title=None),
        tooltip=["dump", "labeller", "class", alt.Tooltip("share:Q", format=".1%"), "maps"],
    ).properties(width=260, title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))


def class_heatmap(frame: pl.DataFrame, title: str, caption: str, facet: str = "dump", columns: int = 4) -> alt.Chart:
    """Per-head dominant class (``layer, head, dominant_class, share``), one panel per ``facet``."""
    data = frame.with_columns((pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head")).to_pandas()
    return alt.Chart(data).mark_rect().encode(
        x="Head:O", y="Layer:O",
        color=alt.Color("dominant_class:N", scale=PATTERN_COLORS, title="dominant class"),
        opacity=alt.Opacity("share:Q", scale=alt.Scale(domain=[0.2, 1]), legend=None),
        tooltip=["Layer", "Head", "dominant_class", alt.Tooltip("share:Q", format=".0%")],
    ).properties(width=180, height=150).facet(facet=alt.Facet(f"{facet}:N", title=None), columns=columns).properties(
        title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start")
    )


def head_grid(frame: pl.DataFrame, value: str, row: str, column: str, title: str, *, scheme: str = "viridis",
              domain_mid: float | None = None, cell: int = 8) -> alt.Chart:
    """Small L x H heatmaps in a grid (``row`` x ``column`` facets), e.g. feature x task. The colour scale
    is square-root (or symmetric around ``domain_mid``) so that small scores stay visible next to [CLS]."""
    data = frame.with_columns((pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head")).to_pandas()
    layers, heads = int(frame["layer"].max()) + 1, int(frame["head"].max()) + 1
    if domain_mid is not None:
        scale = alt.Scale(scheme=scheme, domainMid=domain_mid)
    else:
        scale = alt.Scale(scheme=scheme, type="sqrt")
    return alt.Chart(data).mark_rect().encode(
        x=alt.X("Head:O", axis=None), y=alt.Y("Layer:O", axis=alt.Axis(labels=False, ticks=False, title=None)),
        color=alt.Color(f"{value}:Q", scale=scale, legend=alt.Legend(title=f"{value} ({title})", orient="bottom")),
        tooltip=[row, column, "Layer", "Head", alt.Tooltip(f"{value}:Q", format=".3f")],
    ).properties(width=cell * heads, height=cell * layers).facet(
        row=alt.Row(f"{row}:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
        column=alt.Column(f"{column}:N", title=None),
    ).resolve_scale(color="shared").properties(title=title)


def note_chart(title: str, note: str) -> alt.Chart:
    """A figure that only says why it has nothing to draw (the config runs no part of it), so a summary's files exist."""
    return alt.Chart(pl.DataFrame({"note": [note]}).to_pandas()).mark_text(fontSize=14).encode(text="note:N").properties(
        width=400, height=40, title=title)


def with_caption(chart: alt.TopLevelMixin, title: str, caption: str) -> alt.TopLevelMixin:
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))



def interval_chart(frame: pl.DataFrame, x: str, title: str, caption: str, *, facet: str = "task",
                   columns: int = 4, y_title: str = "delta") -> alt.TopLevelMixin:
    """Across-seed estimates with intervals and each seed's estimate along ``x``, one panel per ``facet``.

    ``frame``: ``x, facet, seed, delta, ci_low, ci_high``; rows with a null ``seed`` are the across-seed
    estimates (drawn black, with their interval), the others one point per seed."""
    data = frame.with_columns(
        pl.when(pl.col("seed").is_null()).then(pl.lit("all seeds")).otherwise(pl.format("seed {}", pl.col("seed"))).alias("estimate")
    ).to_pandas()
    base = alt.Chart().encode(x=alt.X(f"{x}:O"))
    pooled = base.transform_filter(alt.datum.estimate == "all seeds")
    chart = alt.layer(
        alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(0)),
        pooled.mark_rule(strokeWidth=2).encode(y=alt.Y("ci_low:Q", title=y_title), y2="ci_high:Q"),
        base.transform_filter(alt.datum.estimate != "all seeds").mark_point(size=30, opacity=0.7).encode(
            y="delta:Q", color=alt.Color("estimate:N", title="seed"),
            tooltip=[facet, x, "estimate", alt.Tooltip("delta:Q", format="+.4f")],
        ),
        pooled.mark_point(filled=True, size=70, color="black").encode(
            y="delta:Q",
            tooltip=[facet, x, alt.Tooltip("delta:Q", format="+.4f"), alt.Tooltip("ci_low:Q", format="+.4f"),
                     alt.Tooltip("ci_high:Q", format="+.4f"), *[c for c in ("verdict", "seeds") if c in frame.columns]],
        ),
        data=data,
    ).properties(width=200, height=160)
    chart = chart.facet(facet=alt.Facet(f"{facet}:N", title=None), columns=columns).resolve_scale(y="independent")
    return with_caption(chart, title, caption)
