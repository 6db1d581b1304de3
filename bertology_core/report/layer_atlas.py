"""The layer atlas: every per-layer result of one model joined into one row per (model state, layer).

It answers "what is known about this layer?" beside the head atlas: how well a linear probe reads each label set from
it and how selective that probe is (Tenney et al. 2019, Liu et al. 2019, Hewitt & Liang 2019), the weight a scalar mix
gives it and what it adds to the cumulative probes (Tenney et al. 2019), and how many of its output LayerNorm's
weights and biases are out of the outlier range (Kovaleva et al. 2021). States are named as the probing stage names
them: ``pretrained``, ``random_weights``, ``<TASK>/finetuned/seed<N>``. ``layer`` is the hidden state's index: 0
the embeddings, ``l`` the output of transformer layer ``l`` (1-based, as the probes count; the LayerNorm columns of
layer ``l`` are that layer's output LayerNorm).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from bertology_core.data import states

KEYS = ("model", "state", "layer")


def _states_named(frame: pl.DataFrame) -> pl.DataFrame:
    """The outliers stage's (state, task, seed) as the probing stage's state names."""
    return frame.with_columns(pl.when(pl.col("task").is_null()).then(pl.col("state"))
                              .otherwise(pl.format("{}/{}/seed{}", "task", "state", "seed")).alias("state")).drop("task", "seed")


def layer_atlas(model: str, probes: pl.DataFrame | None = None, mix: pl.DataFrame | None = None,
                parameters: pl.DataFrame | None = None, sigmas: float = 3.0) -> pl.DataFrame:
    """One row per (state, layer) of ``model`` with every per-layer result available (each input optional).

    ``probes``: the probing summary (state, labels, layer, accuracy, selectivity) -> ``probe_<labels>`` and
    ``selectivity_<labels>``; ``mix``: the layer mix stage's cumulative table (state, labels, layer, mix_weight, delta) ->
    ``mix_weight_<labels>`` and ``cumulative_gain_<labels>``; ``parameters``: the outliers stage's LayerNorm parameters with
    their z (state, task, seed, norm, layer, dimension, z_weight, z_bias) -> per output LayerNorm the number of weights
    and of biases more than ``sigmas`` from its mean and the largest ``|z|``."""
    parts: list[pl.DataFrame] = []
    for frame, columns in ((probes, {"accuracy": "probe", "selectivity": "selectivity"}),
                           (mix, {"mix_weight": "mix_weight", "delta": "cumulative_gain"})):
        if frame is None or not frame.height:
            continue
        wide = frame.with_columns(pl.col("layer").cast(pl.Int32)).pivot(
            on="labels", index=["state", "layer"], values=list(columns))
        parts.append(wide.rename({c: _renamed(c, columns) for c in wide.columns if c not in ("state", "layer")}))
    if parameters is not None and parameters.height:
        out = _states_named(parameters.filter(pl.col("norm") == "output_norm")).group_by("state", "layer").agg(
            (pl.col("z_weight").abs() > sigmas).sum().cast(pl.Int32).alias("output_norm_weights_out_of_range"),
            (pl.col("z_bias").abs() > sigmas).sum().cast(pl.Int32).alias("output_norm_biases_out_of_range"),
            pl.max_horizontal(pl.col("z_weight").abs().max(), pl.col("z_bias").abs().max()).alias("output_norm_max_abs_z"),
        ).with_columns((pl.col("layer").cast(pl.Int32) + 1).alias("layer"))
        parts.append(out)
    if not parts:
        return pl.DataFrame(schema={"model": pl.String, "state": pl.String, "layer": pl.Int32})
    joined = parts[0]
    for part in parts[1:]:
        joined = joined.join(part, on=["state", "layer"], how="full", coalesce=True)
    order = {states.PRETRAINED: 0, states.RANDOM_WEIGHTS: 1}
    return joined.with_columns(pl.lit(model).alias("model")).select(*KEYS, pl.exclude(*KEYS)).with_columns(
        pl.col("state").replace_strict(order, default=2, return_dtype=pl.Int32).alias("_order")
    ).sort("_order", "state", "layer").drop("_order")


def _renamed(column: str, prefixes: dict[str, str]) -> str:
    """polars names a multi-value pivot's columns ``<value>_<labels>``; one value's just ``<labels>``."""
    for value, prefix in prefixes.items():
        if column.startswith(f"{value}_"):
            return f"{prefix}_{column.removeprefix(value + '_')}"
    return f"{next(iter(prefixes.values()))}_{column}"


def layer_atlas_chart(atlas: pl.DataFrame, caption: str):
    """One small chart per atlas measure against depth, one line per model state."""
    measures = [c for c, t in zip(atlas.columns, atlas.dtypes) if (t.is_float() or t.is_integer()) and c != "layer"]
    if not measures:
        raise ValueError("the layer atlas has no numeric column to draw")
    long = atlas.unpivot(index=["state", "layer"], on=measures, variable_name="measure", value_name="value").drop_nulls("value")
    chart = alt.Chart(long.to_pandas()).mark_line(point=True).encode(
        x=alt.X("layer:O", title="layer (0 = embeddings)"), y=alt.Y("value:Q", title=None), color=alt.Color("state:N"),
        tooltip=["state", "measure", "layer", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=180, height=120).facet(facet=alt.Facet("measure:N", title=None), columns=4).resolve_scale(y="independent")
    return chart.properties(title=alt.TitleParams("Layer atlas: every per-layer measure", subtitle=caption.split("\n"), anchor="start"))
