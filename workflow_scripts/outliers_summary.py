"""Outlier LayerNorm dimensions of every model state, and their disabling against random dimensions (rule
outliers_summary; bertology_core.outliers.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import os

import polars as pl

from bertology_core.data import tasks
from bertology_core.outliers import summary
from bertology_core.summaries import figures

params, inputs = snakemake.params, snakemake.input
outputs = summary.summarise(
    pl.read_parquet(inputs.dimensions), pl.read_parquet(inputs.parameters),
    [pl.read_parquet(p) for p in inputs.deltas], [pl.read_parquet(p) for p in inputs.contrast],
    pl.read_parquet(inputs.fitness), params.fitness_runs,
    [tasks.Task.from_meaning(params.task_meanings[t]) for t in params.tasks],
    summary.OutliersSettings(snakemake.wildcards.model, params.criterion["sigmas"], params.criterion["min_layer_share"],
                             params.level, params.examples),
)
# the rule's outputs (dimensions, contrast, deltas) share one folder, where each is named as its output
figures.write_outputs(outputs, os.path.dirname(snakemake.output.dimensions[0]))
