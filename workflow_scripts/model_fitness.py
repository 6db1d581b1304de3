"""The fitness verdict of one fine-tuned model (rule model_fitness): its run record plus the verdict, as metrics.json."""

from _common import log_to

log_to(snakemake.log[0])

import logging

import polars as pl

from bertology_core.data import tasks, io
from bertology_core.fitness import verdict_stats

record = io.read_json(snakemake.input.evaluation)
task = tasks.Task.from_meaning(snakemake.params.task)
dev = pl.read_parquet(snakemake.input.predictions).filter(pl.col("split") == "dev")
settings = verdict_stats.FitnessSettings.from_dict(snakemake.params.settings)
record["fitness"] = verdict_stats.assess(task, dev["prediction"].to_numpy(), dev["label"].to_numpy(), settings)
logging.info("%s", record["fitness"]["reason"])
io.write_json(record, snakemake.output.metrics)
