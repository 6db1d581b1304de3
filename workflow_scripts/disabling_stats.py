"""Paired bootstrap deltas per seed and across seeds, and split-half selection, for one task (rule disabling_stats)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io
from bertology_core.disabling import stats

params = snakemake.params
task = tasks.Task.from_meaning(snakemake.params.task)
metric = task.main_metric
sweeps = pl.concat([pl.read_parquet(path).with_columns(pl.lit(seed).alias("seed")) for seed, path in zip(params.seeds, snakemake.input)])
deltas, selections = [], []
for (mode,), frame in sorted(sweeps.partition_by("mode", as_dict=True).items()):
    arrays = stats.SweepArrays.from_frame(frame, task.label_names)
    deltas.append(stats.deltas_table(arrays, metric, params.resamples, params.level, params.bootstrap_seed))
    selection = arrays.halves(task, params.split_seed)
    selections.append(stats.selection_table(arrays, selection, metric, params.resamples, params.level, params.bootstrap_seed))
task_column = [pl.lit(task.name).alias("task"), pl.lit(snakemake.wildcards.state).alias("state")]
io.write_parquet(pl.concat(deltas).with_columns(*task_column), snakemake.output.deltas)
io.write_parquet(pl.concat(selections).with_columns(*task_column), snakemake.output.selection)
