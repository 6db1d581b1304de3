"""Tag the dev sentences of one task with spaCy, once (rule spacy_tokens)."""

import importlib
import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.linguistic import score_tables

nlp = importlib.import_module(snakemake.params.model).load()
frame = score_tables.spacy_tokens(nlp, pl.read_parquet(snakemake.input[0]))
io.write_parquet(frame, snakemake.output[0])
logging.info("%s %s: %d tokens", nlp.meta["name"], nlp.meta["version"], frame.height)
