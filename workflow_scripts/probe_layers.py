"""Linear probes per layer for each label set, and their control tasks (rule probe_layers)."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
import torch

from bertology_core.data import io
from bertology_core.models import checkpoint, loading
from bertology_core.probing import probes

torch.set_num_threads(snakemake.threads)  # the same thread count every run: identical sums, identical probes
params = snakemake.params
tensors, frames = probes.load_probe_inputs(snakemake.input.features, {split: snakemake.input[split] for split in ("train", "dev")},
                                            params.sample)
tokenizer = loading.load_tokenizer(loading.read_resolved(snakemake.input.resolved)["path"])
table, words = probes.probe_label_sets(
    frames, tensors, params.labels, probes.ProbeSettings(**params.probe), params.min_label_count, params.control_seed,
    lowercase=tokenizer.tokenize("The") == tokenizer.tokenize("the"), reference_regularisation=params.reference_regularisation,
    reference_sentences=params.reference_sentences,
    # a killed job reads back the label sets' probes it saved (its inputs' hashes are in the fingerprint)
    checkpoint=checkpoint.ArrayCheckpoint(Path(params.checkpoint_dir), checkpoint.fingerprint(
        dict(params.items()), [checkpoint.file_sha256(path) for path in snakemake.input], snakemake.threads),
        snakemake.resources.checkpoint_seconds or None))
state = pl.lit(snakemake.wildcards.probed).alias("state")
io.write_parquet(table.with_columns(state), snakemake.output.probes)
io.write_parquet(words.with_columns(state), snakemake.output.words)
logging.info("%s", table.select("labels", "layer", "accuracy", "control_accuracy", "epoch", "control_epoch", "reference_accuracy"))
checkpoint.remove_checkpoints(params.checkpoint_dir)
