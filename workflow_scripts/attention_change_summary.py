"""Cosine heatmaps per task (fig. 5) and the per-layer means (rule attention_change_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import fitness
from bertology_core.summaries import figures

frames = [
    pl.read_parquet(path).with_columns(pl.lit(task).alias("task"), pl.lit(seed).alias("seed"))
    for (task, seed), path in zip(snakemake.params.task_seeds, snakemake.input.changes)
]
runs = fitness.seeds_by_task(snakemake.params.task_seeds)
verdicts = fitness.Verdicts(pl.read_parquet(snakemake.input.fitness), snakemake.wildcards.model, runs)
per_seed = pl.concat(frames)
heads = per_seed.group_by("task", "layer", "head").agg(
    pl.col("cosine_mean").mean().alias("cosine"), pl.col("cosine_mean").std().alias("cosine_std_over_seeds"),
    pl.len().alias("seeds"), pl.col("examples").first(),
).sort("task", "layer", "head")
figures.write_table(verdicts.annotate(heads), snakemake.params.out + "/cosine")
by_layer = heads.group_by("task", "layer").agg(pl.col("cosine").mean().alias("mean_cosine"), pl.col("cosine").min().alias("min_cosine")).sort("task", "layer")
figures.write_table(verdicts.annotate(by_layer), snakemake.params.out + "/cosine_by_layer")
chart = figures.head_heatmap(
    heads, "cosine", "Attention change after fine-tuning (Kovaleva et al. 2019, fig. 5)",
    "Cosine similarity of each head's map before and after fine-tuning, mean over dev examples (darker = more change); "
    "the paper found the last two layers change most.\nOnly real tokens are compared (the authors' code also compared padded "
    "query rows and positions), so the comparison with the paper's figure is qualitative.\n"
    f"Model {snakemake.wildcards.model}, up to {snakemake.params.examples} dev examples per task.",
    facet="task", scheme="viridis",
    tooltip=["task", "Layer", "Head", "cosine", "examples"],
)
figures.save_chart(chart, snakemake.params.out + "/cosine")
