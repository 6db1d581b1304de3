"""Voita et al.'s head roles from the measures of :mod:`bertology_core.head_roles.measure_tables` (whose docstring gives the
definitions): the roles by their thresholds (the rare-token role also by a test against chance over examples), the
syntactic role from the probing stage's Voita et al. table (token level, per relation and direction, each with its
own offset baseline), the within-layer rank correlations of the measures with Michel et al.'s importance and with
disabling, and the figures. Plain tables: no torch, so the summary runs in the light environment."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import altair as alt
import numpy as np
import polars as pl
from scipy.stats import rankdata
from scipy.stats import t as student_t

from bertology_core.data import states
from bertology_core.stats.bootstrap import DEFINED_SHARE, percentile_interval, rowwise_pearson

ROLES = ("positional", "rare", "syntactic")


@dataclass(frozen=True)
class RoleThresholds:
    """The shares that give a head a role (the config's ``head_roles.thresholds``)."""

    positional_share: float = 0.9  # Voita et al. 5.1
    rare_share: float = 0.5  # not in the paper (it names the one head that does it most): ours
    # and above chance: one-sided t-test over examples at this level (ours: the paper gives no chance rate)
    rare_significance: float = 0.05
    syntactic_margin: float = 0.10  # Voita et al. 5.2, absolute accuracy over the best offset baseline (paper: "10%")

    def __post_init__(self) -> None:
        for name in ("positional_share", "rare_share", "rare_significance", "syntactic_margin"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"head_roles.thresholds.{name} = {value}: a share in (0, 1]. Fix: set it between 0 and 1.")


def probed_name(task: str, state: str, seed: int | None) -> str | None:
    """The probing stage's name of a dumped state: ``pretrained``, ``<TASK>/finetuned/seed<N>`` for a model fine-tuned
    from the pre-trained encoder; None for any other (a model fine-tuned from scratch is never probed)."""
    if state == states.PRETRAINED:
        return state
    return states.run_name(task, state, seed) if state == states.FINETUNED and seed is not None else None


def rare_p_values(excess_sum: np.ndarray, excess_squares: np.ndarray, examples: np.ndarray) -> np.ndarray:
    """One-sided t-test over examples that a head's rare-token hits exceed chance: each counted example contributes its
    hit share minus its chance rate (``excess``; the running sums of it and of its square per head), and the p-value
    is that of a mean excess above 0 (``scipy.stats.ttest_1samp(..., alternative="greater")`` on those values). The
    example is the unit: its queries share one rarest token, so a test over queries would count one example's choice
    many times. NaN with fewer than two examples; 0 or 1 where every example's excess is the same."""
    total, squares, n = (np.asarray(a, dtype=float) for a in (excess_sum, excess_squares, examples))
    out = np.full(np.shape(total), np.nan)
    usable = np.isfinite(total) & (n >= 2)
    mean = np.divide(total, n, out=np.zeros_like(total), where=usable)
    variance = np.divide(squares - n * mean**2, n - 1, out=np.zeros_like(total), where=usable)
    sd = np.sqrt(np.clip(variance, 0, None))
    spread = usable & (sd > 1e-12)
    out[spread] = student_t.sf(mean[spread] / (sd[spread] / np.sqrt(n[spread])), n[spread] - 1)
    flat = usable & ~spread
    out[flat] = np.where(mean[flat] > 0, 0.0, 1.0)
    return out


def assign_roles(roles: pl.DataFrame, thresholds: RoleThresholds, syntactic: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add the role columns to a roles table (one row per task, state, seed, layer and head): ``positional`` (by its
    threshold), ``rare_p_value`` (:func:`rare_p_values`: the examples' hit shares against their chance rates)
    and ``rare`` (``rare_share`` >= its threshold and ``rare_p_value`` < ``rare_significance``; null when no example
    counts for it), and ``syntactic`` with its ``syntactic_relation`` ("relation direction") from ``syntactic``
    (:func:`best_relation_margins`: probed state, layer, head, best_relation, relation_margin; probed states are named
    as :func:`probed_name` names them), null where the probing stage did not score the state; ``specialised``: any
    role; ``roles``: their names joined by + (or none)."""
    p_values = rare_p_values(roles["rare_excess_sum"].cast(pl.Float64).fill_null(float("nan")).to_numpy(),
                             roles["rare_excess_squares"].cast(pl.Float64).fill_null(float("nan")).to_numpy(),
                             roles["rare_examples"].fill_null(0).to_numpy())
    frame = roles.with_columns(
        (pl.col("positional_share") >= thresholds.positional_share).alias("positional"),
        pl.Series("rare_p_value", p_values).fill_nan(None),
    ).with_columns(
        ((pl.col("rare_share") >= thresholds.rare_share) & (pl.col("rare_p_value") < thresholds.rare_significance)).alias("rare"),
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


def best_relation_margins(voita: pl.DataFrame, relations: Iterable[str] = VOITA_RELATIONS) -> pl.DataFrame:
    """Per (state, layer, head), of ``relations`` and both directions, the (relation, direction) where the head's
    token-level accuracy beats that relation and direction's own most-frequent-offset baseline by most: ``state,
    layer, head, best_relation`` ("nsubj head->dep"), ``relation_margin`` (accuracy - baseline), ``relation_accuracy``,
    ``relation_baseline``. ``voita`` is the syntactic-head stage's Voita et al. table
    (:meth:`bertology_core.probing.syntactic_heads.VoitaCounts.table` with its state: state, relation, direction, layer, head,
    accuracy, baseline_accuracy). On a tie the first relation and direction by name wins."""
    scored = voita.filter(pl.col("relation").is_in(list(relations))).with_columns(
        (pl.col("accuracy") - pl.col("baseline_accuracy")).alias("relation_margin"))
    top = scored.sort(["relation_margin", "relation", "direction"], descending=[True, False, False]).group_by(
        ["state", "layer", "head"], maintain_order=True).first()
    return top.select("state", pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32),
                      pl.format("{} {}", "relation", "direction").alias("best_relation"), "relation_margin",
                      pl.col("accuracy").alias("relation_accuracy"), pl.col("baseline_accuracy").alias("relation_baseline"))


MEASURES = ("confidence", "positional_share", "rare_share", "specialised")
# a role held by fewer heads (or by all but fewer) gives no rank correlation worth reading
MIN_ROLE_HEADS = 5
IMPORTANCE = "Michel importance"  # |dL/dxi| on train at pruning.importance_granularity (their code: per token), not normalised by layer
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


def within_layer_ranks(values: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    """``values`` ``[..., n]`` ranked within each block of columns (``blocks``: column indices of each layer), average
    ranks on ties, centred on each block's mean rank, so that pooling the blocks adds no between-layer variation."""
    out = np.empty(values.shape, dtype=float)
    for columns in blocks:
        ranks = rankdata(values[..., columns], axis=-1)
        out[..., columns] = ranks - ranks.mean(-1, keepdims=True)
    return out


def within_layer_spearman(x: np.ndarray, y: np.ndarray, layers: np.ndarray, draws: np.ndarray | None = None) -> np.ndarray:
    """The stratified Spearman correlation of ``x`` and ``y`` (one value per head) within layers: both ranked within
    each layer (average ranks, centred per layer), then the Pearson correlation of those ranks pooled over layers.
    ``draws`` ``[R, n]``: head indices of each resample (:func:`layer_resamples`: each layer's block of columns drawn
    from that layer's heads), ranked again within layers on each resample; None: the heads as they are. Returns
    ``[R]`` (or a 0-d array); NaN where either measure is constant within every layer."""
    layers = np.asarray(layers)
    single = draws is None
    if single:
        draws = np.argsort(layers, kind="stable")[None, :]
    # each layer's block of columns, as laid out by the draws (the heads sorted by layer)
    sorted_layers = np.sort(layers, kind="stable")
    blocks = [np.flatnonzero(sorted_layers == layer) for layer in np.unique(sorted_layers)]
    rho = rowwise_pearson(within_layer_ranks(np.asarray(x, float)[draws], blocks),
                           within_layer_ranks(np.asarray(y, float)[draws], blocks))
    return rho[0] if single else rho


def layer_resamples(layers: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n]`` head indices drawn with replacement within each layer (a stratified bootstrap: every resample
    keeps each layer's number of heads), laid out in blocks of layers in increasing order (what
    :func:`within_layer_spearman` expects)."""
    layers = np.asarray(layers)
    rng = np.random.default_rng(seed)
    blocks = []
    for layer in np.unique(layers):
        members = np.flatnonzero(layers == layer)
        blocks.append(members[rng.integers(0, len(members), size=(resamples, len(members)))])
    return np.concatenate(blocks, axis=1)


def rank_correlations(roles: pl.DataFrame, targets: pl.DataFrame, resamples: int, level: float, seed: int) -> pl.DataFrame:
    """Voita et al.'s claim that the important heads are the confident, specialised ones, per fine-tuned model: the
    Spearman correlation *within layers* (``within`` = "layer") between each role measure of its dump
    (:data:`MEASURES`) and each ``target`` (:func:`importance_targets`). Voita et al. compare relevance and confidence
    within layers ("in each layer, heads are sorted by their relevance"), and both confidence and raw gradient
    importance trend with depth, so a correlation pooled over all heads would mostly measure that both change with
    the layer. Here both measures are ranked within each layer (average ranks), and ``spearman`` is the Pearson
    correlation of those within-layer ranks pooled over the layers (a stratified Spearman:
    :func:`within_layer_spearman`). The percentile interval comes from ``resamples`` bootstrap draws of the heads
    within each layer (stratified: :func:`layer_resamples`; pairs resampled together, ranks recomputed on each
    draw); it holds the model and its data fixed: variation over fine-tuning seeds is the claims module's business.
    No correlation (NaN) for ``specialised`` when it is unknown for some head or fewer than :data:`MIN_ROLE_HEADS`
    heads are on either side, none when a measure is constant within every layer, and no interval when more than 1%
    of the draws leave no correlation. One row per task, seed, measure and target, with ``heads`` and ``layers``."""
    tuned = roles.filter(pl.col("state") == states.FINETUNED).with_columns(pl.col("specialised").cast(pl.Float64))
    joined = tuned.join(targets, on=["task", "seed", "layer", "head"], how="inner")
    rows = []
    for (task, run_seed, target), frame in sorted(joined.group_by("task", "seed", "target"), key=lambda kv: kv[0]):
        layers = frame["layer"].to_numpy()
        draws = layer_resamples(layers, resamples, seed)
        y = frame["value"].to_numpy().astype(float)
        for measure in MEASURES:
            x = frame[measure].to_numpy().astype(float)
            rho, low, high = np.nan, np.nan, np.nan
            held = np.nansum(x) if measure == "specialised" else None
            usable = not np.isnan(x).any() and not np.isnan(y).any() and (
                held is None or MIN_ROLE_HEADS <= held <= len(x) - MIN_ROLE_HEADS)
            if usable:
                rho = float(within_layer_spearman(x, y, layers))
                resampled = within_layer_spearman(x, y, layers, draws)
                # a resample where a measure is constant within every layer has no correlation: an interval over the
                # others would be conditioned on drawing varied heads
                if np.isfinite(rho):
                    low, high = percentile_interval(resampled, level, min_share=DEFINED_SHARE)
            rows.append({"task": task, "seed": run_seed, "measure": measure, "target": target, "within": "layer",
                         "heads": frame.height, "layers": len(np.unique(layers)), "spearman": rho, "ci_low": low,
                         "ci_high": high})
    schema = {"task": pl.String, "seed": pl.Int64, "measure": pl.String, "target": pl.String, "within": pl.String,
              "heads": pl.Int64, "layers": pl.Int64, "spearman": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64}
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
               alt.Tooltip("rare_chance:Q", format=".2f"), "syntactic_relation", alt.Tooltip("relation_margin:Q", format="+.3f")]
    rects = base.mark_rect().encode(color=alt.Color("confidence:Q", scale=alt.Scale(scheme="viridis", domain=[0, 1])), tooltip=tooltip)
    text = base.mark_text(fontSize=8, color="white").encode(text="role:N")
    chart = alt.layer(rects, text, data=data).properties(width=cell * heads, height=cell * layers).facet(
        row=alt.Row("task:N", title=None), column=alt.Column("model state:N", title=None, sort=columns))
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))


def correlation_chart(relations: pl.DataFrame, title: str, caption: str):
    """Per fine-tuned model (panel), each measure's within-layer Spearman correlation with each target: point and
    interval."""
    data = relations.with_columns(pl.format("{} seed {}", "task", "seed").alias("model")).to_pandas()
    base = alt.Chart().encode(
        y=alt.Y("measure:N", title=None, sort=list(MEASURES)), yOffset=alt.YOffset("target:N"),
        color=alt.Color("target:N", title=None, legend=alt.Legend(orient="bottom", direction="vertical")))
    bars = base.mark_rule().encode(x=alt.X("ci_low:Q", title="Spearman correlation within layers", scale=alt.Scale(domain=[-1, 1])),
                                   x2="ci_high:Q")
    points = base.mark_point(filled=True, size=50).encode(
        x="spearman:Q", tooltip=["model", "measure", "target", "heads", alt.Tooltip("spearman:Q", format="+.3f"),
                                 alt.Tooltip("ci_low:Q", format="+.3f"), alt.Tooltip("ci_high:Q", format="+.3f")])
    zero = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(x=alt.datum(0))
    chart = alt.layer(bars, points, zero, data=data).properties(width=260, height=140).facet(
        facet=alt.Facet("model:N", title=None), columns=2)
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))
