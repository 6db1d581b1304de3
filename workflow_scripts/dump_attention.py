"""Dump every layer's and head's attention for a seeded sample of dev examples (rule dump_attention)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.attention import dumps
from bertology_core.data import tasks, io
from bertology_core.models import device, loading

job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
resolved = loading.read_resolved(snakemake.input.resolved)
summary = dumps.dump_model_folder(
    snakemake.input.get("model", resolved["path"]),
    tasks.subsample(pl.read_parquet(snakemake.input.data), snakemake.params.max_examples, snakemake.params.seed),
    snakemake.output.attention.removesuffix(".attention.parquet"),
    max_length=snakemake.params.max_length,
    batch_size=snakemake.params.batch_size,
    bits=snakemake.params.bits,
    device=job_device,
)
summary.update(state=snakemake.wildcards.dumped, task=snakemake.wildcards.task)
io.write_json(summary, snakemake.output.summary)
logging.info("dumped %s", summary)
