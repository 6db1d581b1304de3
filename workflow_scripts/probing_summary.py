"""Probe accuracy and selectivity against depth, and Clark et al.'s syntactic-head tables (rule probing_summary;
bertology_core.probing.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import verdict_stats
from bertology_core.probing import summary
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
outputs = summary.summarise(
    [pl.read_parquet(p) for p in inputs.probes], [pl.read_parquet(p) for p in inputs.heads],
    [pl.read_parquet(p) for p in inputs.held_out], verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model),
    summary.ProbingSettings(model, params.states, **params.sample),
)
# the rule names its outputs by stem; they share one folder
figures.write_outputs(outputs, snakemake.output.probes[0].rsplit("/", 1)[0])
