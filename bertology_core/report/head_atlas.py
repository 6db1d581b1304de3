"""The head atlas: every per-head result of one model joined into one row per (task, model state, layer, head).

It answers "what is known about this head?" in one place: the dominant attention pattern (Kovaleva et al. 2019,
section 4.1), the cosine similarity of the head's attention before and after fine-tuning (4.3), its attention to
[CLS], [SEP] and the linguistic features (4.4-4.5), the score change when the head alone is disabled with its
interval (4.6), Michel et al.'s importance, its survival in Prasanna et al.'s s-pruning, and the dependency
relation it tracks best (Clark et al. 2019). The rule head_atlas writes the table and :func:`atlas_chart`'s chart;
the report page shows both like any other stage's table and figure.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from bertology_core.data import states

# the atlas's state column holds the states' display labels
PRE_TRAINED, FINE_TUNED = states.label(states.PRETRAINED), states.label(states.FINETUNED)
ATLAS_KEYS = ("model", "task", "state", "layer", "head", "name")


def _heads(frame: pl.DataFrame) -> pl.DataFrame:
    """Layer and head as Int32 in every part: the stages write them with different integer types, and a join
    needs one."""
    return frame.with_columns(pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32))


def dump_state(dump: str) -> tuple[str, str | None]:
    """``TASK/pretrained`` -> (TASK, pre-trained); ``TASK/finetuned/seedN`` -> (TASK, fine-tuned); else None."""
    task, dumped = dump.split("/", 1)
    state = states.dumped_state(dumped)
    if state == states.PRETRAINED:
        return task, PRE_TRAINED
    if state == states.FINETUNED:
        return task, FINE_TUNED
    return task, None


def head_atlas(
    model: str,
    patterns: pl.DataFrame | None = None,
    cosine: pl.DataFrame | None = None,
    features: pl.DataFrame | None = None,
    disabling: pl.DataFrame | None = None,
    importance: pl.DataFrame | None = None,
    survival: pl.DataFrame | None = None,
    relations: pl.DataFrame | None = None,
    best_relations: pl.DataFrame | None = None,
    roles: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per (task, state, layer, head) of ``model`` with every per-head result available.

    Inputs are the stages' summary tables (each optional: a stage the config leaves out adds no columns):
    ``patterns`` (patterns/summary/heads: dump, layer, head, dominant_class, share; the first fine-tuned
    seed's dump stands for "fine-tuned"), ``cosine`` (attention_change/summary/cosine: task, layer, head,
    cosine), ``features`` (linguistic/summary/features: task, model_state, layer, head, feature, score),
    ``disabling`` (disabling/summary/heads: task, mode, layer, head, delta, ci_low, ci_high, verdict),
    ``importance`` (pruning/summary/importance: task, element, layer, head, normalized_mean), ``survival``
    (pruning/summary/survival: task, method, element, layer, head, survival), ``relations`` (probing
    head_relations: state, relation, direction, layer, head, accuracy) with ``best_relations`` (probing
    syntactic_heads: state, relation, baseline_accuracy) and ``roles`` (head_roles summary: task, state, seed, layer,
    head, confidence, positional_offset, positional_share, rare_share, roles; Voita et al. 2019; the first fine-tuned
    seed's dump stands for "fine-tuned"). Layers and heads are 0-based; ``name`` is the
    1-based ``L<layer>H<head>`` the papers and the disabling tables print."""
    keys = ["task", "state", "layer", "head"]
    parts: list[pl.DataFrame] = []
    if patterns is not None and patterns.height:
        mapped = patterns.with_columns(
            pl.col("dump").map_elements(lambda d: dump_state(d)[0], return_dtype=pl.String).alias("task"),
            pl.col("dump").map_elements(lambda d: dump_state(d)[1], return_dtype=pl.String).alias("state"),
            pl.col("dump").str.extract(r"/seed(\d+)$").cast(pl.Int64).fill_null(0).alias("_seed"),
        ).drop_nulls("state")
        first = mapped.sort("_seed").group_by(["task", "state", "layer", "head"], maintain_order=True).first()
        parts.append(_heads(first.select(*keys, pl.col("dominant_class").alias("pattern"), pl.col("share").alias("pattern_share"))))
    if features is not None and features.height:
        wide = features.filter(pl.col("model_state").is_in([PRE_TRAINED, FINE_TUNED])).pivot(
            on="feature", index=["task", "model_state", "layer", "head"], values="score"
        ).rename({"model_state": "state"})
        wide = wide.rename({c: f"attn_{c.strip('[]').lower()}" for c in wide.columns if c not in keys})
        parts.append(_heads(wide))
    if roles is not None and roles.height:
        first = roles.filter(pl.col("state").is_in([states.PRETRAINED, states.FINETUNED])).sort("seed", nulls_last=True).group_by(
            ["task", "state", "layer", "head"], maintain_order=True).first()
        parts.append(_heads(first.select(
            "task", pl.col("state").replace_strict({states.PRETRAINED: PRE_TRAINED, states.FINETUNED: FINE_TUNED}), "layer", "head",
            "confidence", "positional_offset", "positional_share", "rare_share", "roles")))
    frame = _outer_join(parts, keys)
    if frame is None:
        # no per-state table: fine-tuned rows from the per-task tables alone
        frame = pl.DataFrame(schema={"task": pl.String, "state": pl.String, "layer": pl.Int32, "head": pl.Int32})

    fine_tuned: list[pl.DataFrame] = []
    if cosine is not None and cosine.height:
        fine_tuned.append(_heads(cosine.select("task", "layer", "head", pl.col("cosine").alias("cosine_to_pre_trained"))))
    if disabling is not None and disabling.height:
        for mode in sorted(disabling["mode"].unique()):
            prefix = "disabling" if disabling["mode"].n_unique() == 1 else f"disabling_{mode}"
            fine_tuned.append(_heads(disabling.filter(pl.col("mode") == mode).select(
                "task", "layer", "head", pl.col("delta").alias(f"{prefix}_delta"), pl.col("ci_low").alias(f"{prefix}_ci_low"),
                pl.col("ci_high").alias(f"{prefix}_ci_high"), pl.col("verdict").alias(f"{prefix}_verdict"),
            )))
    if importance is not None and importance.height:
        fine_tuned.append(_heads(importance.filter(pl.col("element") == "head").select(
            "task", "layer", "head", pl.col("normalized_mean").alias("importance"))))
    if survival is not None and survival.height:
        heads = survival.filter((pl.col("element") == "head") & (pl.col("method") == "s"))
        if heads.height:
            fine_tuned.append(_heads(heads.select("task", "layer", "head", pl.col("survival").alias("survival_s_pruning"))))
    per_task = _outer_join(fine_tuned, ["task", "layer", "head"])
    if per_task is not None:
        per_task = per_task.with_columns(pl.lit(FINE_TUNED).alias("state"))
        frame = frame.join(per_task, on=keys, how="full", coalesce=True)

    if relations is not None and relations.height and best_relations is not None and best_relations.height:
        frame = frame.join(_best_relation_per_head(relations, best_relations, frame), on=keys, how="left")
    return frame.with_columns(
        pl.lit(model).alias("model"),
        pl.format("L{}H{}", pl.col("layer") + 1, pl.col("head") + 1).alias("name"),
    ).select(*ATLAS_KEYS, pl.exclude(*ATLAS_KEYS)).sort("task", "state", "layer", "head", descending=[False, True, False, False])


def _outer_join(frames: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame | None:
    """Full join of the parts on ``keys``, so a head one stage left out keeps the others' columns; None for no part."""
    if not frames:
        return None
    joined = frames[0]
    for frame in frames[1:]:
        joined = joined.join(frame, on=keys, how="full", coalesce=True)
    return joined


def _best_relation_per_head(relations: pl.DataFrame, best: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Per head and probed state, the relation (of those the syntactic-head table scores) where the head beats
    that relation's best fixed-offset baseline by most, over both directions. The pre-trained state's answer
    holds for every task's pre-trained rows; ``TASK/finetuned/seedN`` answers for that task's fine-tuned rows (first seed)."""
    scored = relations.filter(pl.col("relation") != "all").join(
        best.select("state", "relation", "baseline_accuracy"), on=["state", "relation"], how="inner"
    ).with_columns((pl.col("accuracy") - pl.col("baseline_accuracy")).alias("margin"))
    top = scored.sort("margin", descending=True).group_by(["state", "layer", "head"], maintain_order=True).first()
    top = _heads(top.select(
        "state", "layer", "head", pl.col("relation").alias("best_relation"), pl.col("direction").alias("relation_direction"),
        pl.col("accuracy").alias("relation_accuracy"), pl.col("baseline_accuracy").alias("relation_baseline"),
    ))
    out = []
    tasks = rows["task"].unique().to_list() if rows.height else []
    pre = top.filter(pl.col("state") == states.PRETRAINED)
    if pre.height:
        out += [pre.with_columns(pl.lit(task).alias("task"), pl.lit(PRE_TRAINED).alias("state")) for task in tasks]
    tuned = top.filter(pl.col("state").str.contains(rf"^[^/]+/{states.FINETUNED}/seed\d+$")).with_columns(
        pl.col("state").str.extract(r"^([^/]+)/").alias("task"),
        pl.col("state").str.extract(r"/seed(\d+)$").cast(pl.Int64).alias("_seed"),
    ).sort("_seed").group_by(["task", "layer", "head"], maintain_order=True).first().drop("_seed").with_columns(
        pl.lit(FINE_TUNED).alias("state"))
    if tuned.height:
        out.append(tuned)
    if not out:
        return pl.DataFrame(schema={"task": pl.String, "state": pl.String, "layer": pl.Int32, "head": pl.Int32})
    return pl.concat([o.select("task", "state", "layer", "head", pl.exclude("task", "state", "layer", "head")) for o in out])


def atlas_chart(atlas: pl.DataFrame, caption: str) -> alt.FacetChart | alt.Chart:
    """Layer x head maps of one atlas measure at a time (a drop-down picks it, another the task), one panel
    per model state; the tooltip shows the head's whole atlas row. An atlas with no measure (the config's stages
    measure no head) is a chart that says so."""
    measures = [c for c, t in zip(atlas.columns, atlas.dtypes) if t.is_float() and not c.endswith(("_ci_low", "_ci_high"))]
    if not measures or not atlas.height:
        note = alt.Chart(pl.DataFrame({"text": ["No per-head result: this run's stages measure no head."]}).to_pandas())
        return note.mark_text(align="left").encode(text="text:N").properties(
            width=420, height=40, title=alt.TitleParams("Head atlas", subtitle=caption.split("\n"), anchor="start"))
    tasks = sorted(atlas["task"].unique().to_list())
    data = atlas.with_columns((pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head")).to_pandas()
    first = next((m for m in ("importance", "disabling_delta", "cosine_to_pre_trained") if m in measures), measures[0])
    measure = alt.param(name="measure", value=first, bind=alt.binding_select(options=measures, name="measure "))
    task = alt.param(name="task", value=tasks[0], bind=alt.binding_select(options=tasks, name="task "))
    text_columns = [c for c in atlas.columns if c not in ("layer", "head") and c not in measures and not c.endswith(("_ci_low", "_ci_high"))]
    tooltip = [alt.Tooltip(f"{c}:N") for c in text_columns] + [alt.Tooltip(f"{m}:Q", format=".3f") for m in measures]
    chart = alt.Chart(data).transform_filter(alt.datum.task == task).transform_fold(measures, as_=["measure_name", "value"]).transform_filter(
        alt.datum.measure_name == measure
    ).transform_filter("isValid(datum.value)").mark_rect().encode(
        x=alt.X("Head:O"), y=alt.Y("Layer:O"), color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis"), title="value"),
        tooltip=tooltip,
    ).properties(width=220, height=170).facet(column=alt.Column("state:N", title=None)).add_params(measure, task)
    return chart.properties(title=alt.TitleParams("Head atlas: one measure per map", subtitle=caption.split("\n"), anchor="start"))
