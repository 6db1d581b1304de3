"""Cosine heatmaps per task (fig. 5) and the per-layer means (rule attention_change_summary;
bertology_core.attention_change.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.attention_change import summary
from bertology_core.fitness import verdict_stats
from bertology_core.summaries import figures

params, model = snakemake.params, snakemake.wildcards.model
outputs = summary.summarise(
    {(task, seed): pl.read_parquet(p) for (task, seed), p in zip(params.task_seeds, snakemake.input.changes)},
    verdict_stats.Verdicts(pl.read_parquet(snakemake.input.fitness), model, verdict_stats.seeds_by_task(params.task_seeds)),
    model, params.examples,
)
figures.write_outputs(outputs, params.out)
