"""Voita et al.'s head roles from the measures of :mod:`bertology_core.head_roles` (whose docstring gives the
definitions): the roles by their thresholds, the syntactic role from the probing stage's Clark et al. tables, the
rank correlations of the measures with Michel et al.'s importance and with disabling, and the figures. Plain tables:
no torch, so the summary runs in the light environment."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from bertology_core import states

ROLES = ("positional", "rare", "syntactic")


@dataclass(frozen=True)
class RoleThresholds:
    """The shares that give a head a role (the config's ``head_roles.thresholds``)."""

    positional_share: float = 0.9  # Voita et al. 5.1
    rare_share: float = 0.5  # not in the paper (it names the one head that does it most): ours
    syntactic_margin: float = 0.10  # Voita et al. 5.2, absolute accuracy over the best offset baseline

    def __post_init__(self) -> None:
        for name in ("positional_share", "rare_share", "syntactic_margin"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"head_roles.thresholds.{name} = {value}: a share in (0, 1]. Fix: set it between 0 and 1.")


def probed_name(task: str, state: str, seed: int | None) -> str | None:
    """The probing stage's name of a dumped state: ``pretrained``, ``<TASK>_seed<N>`` for a model fine-tuned from the
    pre-trained encoder; None for any other (a model fine-tuned from scratch is never probed)."""
    if state == states.PRETRAINED:
        return state
    return states.seeded(task, seed) if state == states.FINETUNED and seed is not None else None


def assign_roles(roles: pl.DataFrame, thresholds: RoleThresholds, syntactic: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add the role columns to a roles table (one row per task, state, seed, layer and head): ``positional``, ``rare``
    (bools by the thresholds) and ``syntactic`` with its ``syntactic_relation`` from ``syntactic``
    (:func:`best_relation_margins`: probed state, layer, head, best_relation, relation_margin; probed states are named
    as :func:`probed_name` names them), null where the probing stage did not score the state; ``specialised``: any
    role; ``roles``: their names joined by + (or none)."""
    frame = roles.with_columns(
        (pl.col("positional_share") >= thresholds.positional_share).alias("positional"),
        (pl.col("rare_share") >= thresholds.rare_share).alias("rare"),
        pl.struct("task", "state", "seed").map_elements(lambda r: probed_name(r["task"], r["state"], r["seed"]),
                                                        return_dtype=pl.String).alias("_probed"),
    )
    if syntactic is None or not syntactic.height:
        syntactic = pl.DataFrame(schema={"state": pl.String, "layer": pl.Int32, "head": pl.Int32, "best_relation": pl.String,
                                         "relation_margin": pl.Float64})
    frame = frame.join(syntactic.select(
        pl.col("state").alias("_probed"), pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), "best_relation",
        "relation_margin"), on=["_probed", "layer", "head"], how="left").drop("_probed")
    syntactic_role = pl.col("relation_margin") >= thresholds.syntactic_margin
    frame = frame.with_columns(
        syntactic_role.alias("syntactic"),
        pl.when(syntactic_role).then(pl.col("best_relation")).alias("syntactic_relation"),
    ).drop("best_relation")
    # any role: true as soon as one is, null when none is and the syntactic one is unknown
    return frame.with_columns(
        pl.when(pl.col("positional") | pl.col("rare")).then(True).otherwise(pl.col("syntactic")).alias("specialised"),
        pl.concat_str(
            [pl.when(pl.col(role)).then(pl.lit(role)) for role in ROLES], separator="+", ignore_nulls=True
        ).replace("", "none").fill_null("none").alias("roles"),
    )


VOITA_RELATIONS = ("nsubj", "obj", "amod", "advmod")  # section 5.2's four, in UD (obj for dobj)


def best_relation_margins(per_head: pl.DataFrame, best: pl.DataFrame, relations: Iterable[str] = VOITA_RELATIONS) -> pl.DataFrame:
    """Per (state, layer, head), of ``relations``, the dependency relation where the head's accuracy beats that
    relation's best offset baseline by most (over both directions): ``state, layer, head, best_relation,
    relation_margin``. ``per_head`` and ``best`` are the syntactic-head stage's tables (every head's accuracy per
    relation; the relations it scores, with their baseline accuracy)."""
    scored = per_head.filter(pl.col("relation").is_in(list(relations))).join(
        best.select("state", "relation", "baseline_accuracy"), on=["state", "relation"], how="inner"
    ).with_columns((pl.col("accuracy") - pl.col("baseline_accuracy")).alias("relation_margin"))
    top = scored.sort("relation_margin", descending=True).group_by(["state", "layer", "head"], maintain_order=True).first()
    return top.select("state", pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32),
                      pl.col("relation").alias("best_relation"), "relation_margin")


MEASURES = ("confidence", "positional_share", "rare_share", "specialised")
# a role held by fewer heads (or by all but fewer) gives no rank correlation worth reading
MIN_ROLE_HEADS = 5
IMPORTANCE = "Michel importance"  # E|dL/dxi| on train, as Michel et al.'s eq. 2, not normalised by layer
NORMALIZED_IMPORTANCE = "Michel importance, layer-normalised"  # the order their pruning curve uses


def importance_targets(importance: dict[tuple[str, int], pl.DataFrame], deltas: list[pl.DataFrame]) -> pl.DataFrame:
    """The per-head quantities roles are compared with, one row per (task, seed, target, layer, head): Michel et
    al.'s importance (``importance``: (task, seed) -> the pruning stage's importance table), raw and layer-normalised,
    and the score drop when the head alone is disabled (``deltas``: the disabling stage's per-task tables; the drop is
    minus their delta, per seed and mode)."""
    frames = []
    for (task, seed), table in importance.items():
        heads = table.filter(pl.col("element") == "head")
        for target, column in ((IMPORTANCE, "importance"), (NORMALIZED_IMPORTANCE, "normalized")):
            frames.append(heads.select(pl.lit(task).alias("task"), pl.lit(seed, pl.Int64).alias("seed"), pl.lit(target).alias("target"),
                                       pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), pl.col(column).alias("value")))
    for table in deltas:
        heads = table.filter((pl.col("kind") == "head") & pl.col("seed").is_not_null() & (pl.col("state") == states.FINETUNED))
        frames.append(heads.select("task", pl.col("seed").cast(pl.Int64), pl.format("score drop when disabled ({})", "mode").alias("target"),
                                   pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), (-pl.col("delta")).alias("value")))
    schema = {"task": pl.String, "seed": pl.Int64, "target": pl.String, "layer": pl.Int32, "head": pl.Int32, "value": pl.Float64}
    return pl.concat([f.cast(schema) for f in frames]) if frames else pl.DataFrame(schema=schema)


def rank_correlations(roles: pl.DataFrame, targets: pl.DataFrame, resamples: int, level: float, seed: int) -> pl.DataFrame:
    """Voita et al.'s claim that the important heads are the confident, specialised ones, per fine-tuned model: the
    Spearman correlation over heads between each role measure of its dump (:data:`MEASURES`) and each ``target``
    (:func:`importance_targets`), with a percentile interval from ``resamples`` bootstrap draws of the heads (pairs
    resampled together; the model and its data held fixed). No correlation (NaN) for ``specialised`` when it is
    unknown for some head or fewer than :data:`MIN_ROLE_HEADS` heads are on either side, and no interval when more
    than 1% of the draws leave a measure constant. One row per task, seed, measure and target."""
    from bertology_core.bootstrap import metric_on_resamples, percentile_interval, resample_indices

    tuned = roles.filter(pl.col("state") == states.FINETUNED).with_columns(pl.col("specialised").cast(pl.Float64))
    joined = tuned.join(targets, on=["task", "seed", "layer", "head"], how="inner")
    rows = []
    for (task, run_seed, target), frame in sorted(joined.group_by("task", "seed", "target"), key=lambda kv: kv[0]):
        draws = resample_indices(frame.height, resamples, seed)
        y = frame["value"].to_numpy()
        for measure in MEASURES:
            x = frame[measure].to_numpy().astype(float)
            rho, low, high = np.nan, np.nan, np.nan
            held = np.nansum(x) if measure == "specialised" else None
            usable = not np.isnan(x).any() and (held is None or MIN_ROLE_HEADS <= held <= len(x) - MIN_ROLE_HEADS)
            if usable:
                rho = float(metric_on_resamples("spearman", x[None, :], y, np.arange(len(y))[None, :])[0, 0])
                resampled = metric_on_resamples("spearman", x[None, :], y, draws)[0]
                # a resample where a measure is constant has no correlation: an interval over the others would be
                # conditioned on drawing both kinds of heads
                if np.isfinite(resampled).mean() >= 0.99:
                    low, high = (float(v) for v in percentile_interval(resampled, level))
            rows.append({"task": task, "seed": run_seed, "measure": measure, "target": target, "heads": frame.height,
                         "spearman": rho, "ci_low": low, "ci_high": high})
    schema = {"task": pl.String, "seed": pl.Int64, "measure": pl.String, "target": pl.String, "heads": pl.Int64,
              "spearman": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def role_label(row: dict) -> str:
    """A head's roles in a map cell: P-1 (positional, offset -1), R (rare tokens), S (syntactic)."""
    marks = []
    if row["positional"]:
        marks.append(f"P{row['positional_offset']:+d}")
    if row["rare"]:
        marks.append("R")
    if row["syntactic"]:
        marks.append("S")
    return " ".join(marks)


def roles_chart(roles: pl.DataFrame, title: str, caption: str):
    """Per task (rows) and model state (columns), the layer x head map of confidence with each head's roles written
    in its cell (P-1/P+1 positional, R rare tokens, S syntactic); the tooltip gives every measure."""
    import altair as alt  # (imported here: altair is slow to import, and only the chart needs it)

    data = roles.with_columns(
        (pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head"),
        pl.struct("positional", "positional_offset", "rare", "syntactic").map_elements(role_label, return_dtype=pl.String).alias("role"),
        pl.format("{}{}", pl.col("state").replace_strict({s: states.label(s) for s in states.STATES}),
                  pl.when(pl.col("seed").is_null()).then(pl.lit("")).otherwise(pl.format(" seed {}", pl.col("seed")))).alias("model state"),
    )
    columns = data.sort(pl.col("seed").fill_null(-1))["model state"].unique(maintain_order=True).to_list()  # pre-trained first
    data = data.to_pandas()
    layers, heads = int(roles["layer"].max()) + 1, int(roles["head"].max()) + 1
    cell = 22
    base = alt.Chart().encode(x=alt.X("Head:O"), y=alt.Y("Layer:O"))
    tooltip = ["task", "model state", "Layer", "Head", "roles", alt.Tooltip("confidence:Q", format=".3f"),
               "positional_offset", alt.Tooltip("positional_share:Q", format=".2f"), alt.Tooltip("rare_share:Q", format=".2f"),
               "syntactic_relation", alt.Tooltip("relation_margin:Q", format="+.3f")]
    rects = base.mark_rect().encode(color=alt.Color("confidence:Q", scale=alt.Scale(scheme="viridis", domain=[0, 1])), tooltip=tooltip)
    text = base.mark_text(fontSize=8, color="white").encode(text="role:N")
    chart = alt.layer(rects, text, data=data).properties(width=cell * heads, height=cell * layers).facet(
        row=alt.Row("task:N", title=None), column=alt.Column("model state:N", title=None, sort=columns))
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))


def correlation_chart(relations: pl.DataFrame, title: str, caption: str):
    """Per fine-tuned model (panel), each measure's Spearman correlation with each target: point and interval."""
    import altair as alt

    data = relations.with_columns(pl.format("{} seed {}", "task", "seed").alias("model")).to_pandas()
    base = alt.Chart().encode(
        y=alt.Y("measure:N", title=None, sort=list(MEASURES)), yOffset=alt.YOffset("target:N"),
        color=alt.Color("target:N", title=None, legend=alt.Legend(orient="bottom", direction="vertical")))
    bars = base.mark_rule().encode(x=alt.X("ci_low:Q", title="Spearman correlation over heads", scale=alt.Scale(domain=[-1, 1])),
                                   x2="ci_high:Q")
    points = base.mark_point(filled=True, size=50).encode(
        x="spearman:Q", tooltip=["model", "measure", "target", "heads", alt.Tooltip("spearman:Q", format="+.3f"),
                                 alt.Tooltip("ci_low:Q", format="+.3f"), alt.Tooltip("ci_high:Q", format="+.3f")])
    zero = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(x=alt.datum(0))
    chart = alt.layer(bars, points, zero, data=data).properties(width=260, height=140).facet(
        facet=alt.Facet("model:N", title=None), columns=2)
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))
