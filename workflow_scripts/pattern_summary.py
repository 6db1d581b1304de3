"""Class shares per task and state (fig. 2), per-head dominant class, and their figures (rule pattern_summary;
bertology_core.patterns.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.fitness import verdict_stats
from bertology_core.patterns import summary
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
outputs = summary.summarise(
    {key: pl.read_parquet(path) for key, path in zip(params.dump_keys, inputs.classes)}, io.read_json(inputs.report),
    verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model), model, params.examples,
)
figures.write_outputs(outputs, params.out)
