"""Tenney et al.'s centers of gravity and expected layers of every probed state, and the figure (rule
layer_mix_summary; bertology_core.layer_mix.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import os

import polars as pl

from bertology_core.fitness import verdict_stats
from bertology_core.layer_mix import summary
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
outputs = summary.summarise(
    [pl.read_parquet(p) for p in inputs.summaries], [pl.read_parquet(p) for p in inputs.cumulative],
    verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model), summary.LayerMixSettings(model, params.level, params.sample),
)
# the rule's outputs (expected: expected_layers, cumulative) share one folder, where each is named as its file
figures.write_outputs(outputs, os.path.dirname(snakemake.output.expected[0]))
