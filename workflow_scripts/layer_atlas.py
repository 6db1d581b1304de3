"""The layer atlas of one model (rule layer_atlas): every per-layer result joined into one table, and its chart."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.report import layer_atlas
from bertology_core.summaries import figures

inputs = snakemake.input
model = snakemake.wildcards.model


def table(name: str) -> pl.DataFrame | None:
    return pl.read_parquet(inputs[name]) if name in inputs.keys() else None


atlas = layer_atlas.layer_atlas(model, probes=table("probes"), mix=table("mix"), parameters=table("parameters"),
                                sigmas=snakemake.params.sigmas)
stem = snakemake.output.table[0].removesuffix(".parquet")
figures.write_table(atlas, stem, note=(
    "One row per model state and layer (0 = embeddings; l = transformer layer l's output, whose output LayerNorm the "
    "output_norm columns describe): linear probe accuracy and selectivity per label set, the scalar mix's weight and the "
    "cumulative probes' gain (Tenney et al. 2019), and how many output LayerNorm weights and biases lie beyond the outlier "
    "criterion's sigmas (Kovaleva et al. 2021)."))
joined = ", ".join(name for name in ("probes", "mix", "parameters") if name in inputs.keys())
if atlas.height:
    chart = layer_atlas.layer_atlas_chart(atlas, f"Model {model}: {atlas.height} rows (state x layer) from {joined}.")
else:  # no probing, no layer mix and a pre-LayerNorm encoder: nothing per layer
    chart = figures.note_chart("Layer atlas", f"Model {model}: no per-layer result in this config (probing, layer mix, outliers).")
figures.save_chart(chart, stem)
