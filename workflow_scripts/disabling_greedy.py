"""Greedy multi-head disabling chosen on one half of dev, reported on the other (rule disabling_greedy)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks
from bertology_core.disabling import stats, sweeps
from bertology_core.scoring import plans as scoring
from bertology_core.inputs import batching
from bertology_core.models import checkpoint, device, loading
from bertology_core.summaries.figures import write_table

job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
params = snakemake.params
task = tasks.Task.from_meaning(snakemake.params.task)
settings = sweeps.GreedySettings(params.mode, params.max_steps, params.split_seed, params.resamples, params.level,
                                    params.bootstrap_seed)
sweep = pl.read_parquet(snakemake.input.sweep).filter(pl.col("mode") == settings.mode)
dev = pl.read_parquet(snakemake.input.data).filter(pl.col("idx").is_in(sweep["idx"].unique().implode())).sort("idx")
selection = stats.example_halves(task, dev, settings.split_seed)
model = loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device)
tokenizer = loading.load_tokenizer(snakemake.input.model)
rows = scoring.rows_per_pass(job_device, snakemake.resources.rows_per_pass, snakemake.resources.gpu_rows_per_pass)
# a killed job replays the steps its saved predictions cover (the sweep it reuses is in the fingerprint)
saved = checkpoint.scores_checkpoint(params.checkpoint_dir, snakemake.resources.checkpoint_seconds or None, dict(params.items()),
                                     snakemake.input.model, snakemake.input.data, checkpoint.file_sha256(snakemake.input.sweep),
                                     rows, job_device.type, snakemake.threads)
table, computed = sweeps.greedy_search(model, task, dev, selection, lambda frame: batching.encode(frame, tokenizer, params.max_length),
                                       sweep, settings, rows, checkpoint=saved)
logging.info("greedy: %d steps, %d configurations computed beyond the sweep", table.height - 1, computed)
write_table(table, snakemake.output.table[0].removesuffix(".parquet"))
checkpoint.remove_checkpoints(params.checkpoint_dir)
