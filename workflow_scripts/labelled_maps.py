"""Dump every layer's and head's attention for the hand-labelled dev examples of one task and state, whatever
the analysis sample holds (rule labelled_maps)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
import torch
from transformers import AutoModel

from bertology_core import attention, dumps, io, models, pattern_labels

torch.set_num_threads(snakemake.threads)
resolved = io.read_json(snakemake.input.resolved)
folder = snakemake.input.get("model", resolved["path"])
encoder = attention.use_engine(AutoModel.from_pretrained(folder, use_safetensors=True, trust_remote_code=False).eval())
frame = pattern_labels.labelled_examples(pl.read_parquet(snakemake.input.data), snakemake.params.only_idx, snakemake.input.data)
summary = dumps.write_dump(
    encoder,
    models.load_tokenizer(folder),
    frame,
    snakemake.output.attention.removesuffix(".attention.parquet"),
    max_length=snakemake.params.max_length,
    batch_size=snakemake.params.batch_size,
    bits=snakemake.params.bits,
)
summary.update(model_folder=str(folder), state=snakemake.wildcards.state, task=snakemake.wildcards.task)
io.write_json(summary, snakemake.output.summary)
logging.info("dumped %s", summary)
