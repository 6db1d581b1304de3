"""The head atlas of one model (rule head_atlas): every per-head result joined into one table, and its chart."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import verdict_stats
from bertology_core.report import head_atlas
from bertology_core.summaries import figures

inputs = snakemake.input
model = snakemake.wildcards.model


def table(name: str) -> pl.DataFrame | None:
    if name not in inputs.keys():
        return None
    paths = inputs[name]
    return pl.concat([pl.read_parquet(p) for p in ([paths] if isinstance(paths, str) else paths)], how="diagonal_relaxed")


atlas = head_atlas.head_atlas(
    model,
    patterns=table("patterns"), cosine=table("cosine"), features=table("features"), disabling=table("disabling"),
    importance=table("importance"), survival=table("survival"), relations=table("relations"),
    best_relations=table("best_relations"), roles=table("roles"),
)
# a fine-tuned row rests on every seed of its task that a stage analysed
atlas = verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model, snakemake.params.fitness_runs).annotate(atlas, state="state")
stem = snakemake.output.table[0].removesuffix(".parquet")
figures.write_table(atlas, stem)
joined = ", ".join(name for name in ("patterns", "features", "cosine", "disabling", "importance", "survival", "relations", "roles")
                   if name in inputs.keys())
figures.save_chart(head_atlas.atlas_chart(
    atlas,
    "Every per-head result, one measure at a time (pick it and the task under the chart; hover a head for its whole row).\n"
    f"Model {model}: {atlas.height} rows (task x state x layer x head) from {joined}; fine-tuned rows: the first seed's "
    "patterns and relations, all seeds' means for the rest.",
), stem)
