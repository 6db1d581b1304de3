"""Tokenise a task's prepared splits with a model's tokenizer, cut at max_length, once (rule tokenize_data)."""

import logging
import os
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])
# the fast tokenizer's threads (Rayon's pool, read when it first encodes a batch): the job's own
os.environ["RAYON_NUM_THREADS"] = str(snakemake.threads)

import polars as pl

from bertology_core.inputs import batching

from bertology_core.models import loading
splits = {Path(path).stem: pl.read_parquet(path) for path in snakemake.input.data}  # results/data/{task}/{split}.parquet
tokenizer = loading.load_tokenizer(loading.read_resolved(snakemake.input.resolved)["path"])
batching.TokenFile.write(splits, tokenizer, int(snakemake.wildcards.max_length), snakemake.output[0])
logging.info("tokenised %s", {split: frame.height for split, frame in splits.items()})
