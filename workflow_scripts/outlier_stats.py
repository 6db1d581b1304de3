"""Paired bootstrap deltas of one task's outlier and random-dimension disablings, per seed and across seeds, and the
outliers against the random distribution (rule outlier_stats)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io
from bertology_core.outliers import stats

params = snakemake.params
task = tasks.Task.from_meaning(snakemake.params.task)
runs = {seed: pl.read_parquet(path) for seed, path in zip(params.seeds, snakemake.input)}
deltas, contrast = stats.disabling_statistics(runs, task.main_metric, params.resamples, params.level, params.bootstrap_seed,
                                              task.label_names)
io.write_parquet(deltas.with_columns(pl.lit(task.name).alias("task")), snakemake.output.deltas)
io.write_parquet(contrast.with_columns(pl.lit(task.name).alias("task")), snakemake.output.contrast)
