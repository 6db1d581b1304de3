"""The LayerNorm parameters and outlier dimensions of the pre-trained encoder and every fine-tuned model of the
outliers stage (rule outlier_dimensions)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io, states
from bertology_core.models import loading
from bertology_core.outliers import layernorms, stats

params = snakemake.params
criterion = stats.Criterion(**params.criterion)
folders = [(states.PRETRAINED, None, None, loading.read_resolved(snakemake.input.resolved)["path"])]
folders += [(states.FINETUNED, task, seed, folder) for (task, seed), folder in zip(params.runs, snakemake.input.models)]
parameter_frames, dimension_frames = [], []
for state, task, seed, folder in folders:
    found, table, reason = layernorms.find_outliers(loading.load_encoder(folder), criterion)
    keys = [pl.lit(state).alias("state"), pl.lit(task, dtype=pl.String).alias("task"), pl.lit(seed, dtype=pl.Int64).alias("seed")]
    if reason:
        logging.warning("%s: %s", folder, reason)
        dimension_frames.append(pl.DataFrame({"not_applicable": [reason]}).with_columns(keys))
        continue
    parameter_frames.append(found.with_columns(keys))
    dimension_frames.append(table.with_columns(keys))
    logging.info("%s %s %s: outlier dimensions %s", state, task or "", seed or "", stats.outlier_dimensions(table))
io.write_parquet(pl.concat(parameter_frames, how="diagonal_relaxed") if parameter_frames else pl.DataFrame(), snakemake.output.parameters)
io.write_parquet(pl.concat(dimension_frames, how="diagonal_relaxed"), snakemake.output.dimensions)
