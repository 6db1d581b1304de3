"""Tenney et al.'s scalar mix and cumulative scoring for each label set of one probed state, once per probe seed
(rule layer_mix)."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
import torch

from bertology_core.data import io
from bertology_core.layer_mix import cumulative_probes
from bertology_core.models import checkpoint, loading
from bertology_core.probing import probes

torch.set_num_threads(snakemake.threads)  # the same thread count every run: identical sums, identical probes
params = snakemake.params
tensors, frames = probes.load_probe_inputs(snakemake.input.features, {split: snakemake.input[split] for split in ("train", "dev")},
                                            params.sample)
tokenizer = loading.load_tokenizer(loading.read_resolved(snakemake.input.resolved)["path"])
cumulative, summary, words = cumulative_probes.layer_mix_label_sets(
    frames, tensors, params.labels, cumulative_probes.probe_settings(params.probe, params.probe_seeds), params.min_label_count,
    tokenizer.tokenize("The") == tokenizer.tokenize("the"), **params.bootstrap,
    # a killed job reads back the probes it saved (its inputs' hashes are in the fingerprint)
    checkpoint=checkpoint.ArrayCheckpoint(Path(params.checkpoint_dir), checkpoint.fingerprint(
        dict(params.items()), [checkpoint.file_sha256(path) for path in snakemake.input], snakemake.threads),
        snakemake.resources.checkpoint_seconds or None))
state = pl.lit(snakemake.wildcards.probed).alias("state")
for table, path in ((cumulative, snakemake.output.cumulative), (summary, snakemake.output.summary), (words, snakemake.output.words)):
    io.write_parquet(table.with_columns(state), path)
logging.info("%s", summary)
checkpoint.remove_checkpoints(params.checkpoint_dir)
