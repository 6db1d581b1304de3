"""Tenney et al.'s scalar mix and cumulative scoring for each label set of one probed state (rule layer_mix)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
import torch
from safetensors.numpy import load_file

from bertology_core import io, layer_mix, models, probing, treebank

torch.set_num_threads(snakemake.threads)  # the same thread count every run: identical sums, identical probes
params = snakemake.params
tensors = load_file(snakemake.input.features)
frames = {split: treebank.sample(pl.read_parquet(snakemake.input[split]), params.sample[split], params.sample["seed"])
          for split in ("train", "dev")}
for split, frame in frames.items():
    words = int(frame["forms"].list.len().sum())
    if tensors[split].shape[1] != words:
        raise RuntimeError(f"{snakemake.input.features}: {tensors[split].shape[1]} {split} words, the treebank sample has {words}: rerun probe_features")
tokenizer = models.load_tokenizer(io.read_json(snakemake.input.resolved)["path"])
cumulative, summary, words = layer_mix.layer_mix_label_sets(
    frames, tensors, params.labels, probing.ProbeSettings(**params.probe), params.min_label_count,
    tokenizer.tokenize("The") == tokenizer.tokenize("the"), **params.bootstrap)
state = pl.lit(snakemake.wildcards.probed).alias("state")
for table, path in ((cumulative, snakemake.output.cumulative), (summary, snakemake.output.summary), (words, snakemake.output.words)):
    io.write_parquet(table.with_columns(state), path)
logging.info("%s", summary)
