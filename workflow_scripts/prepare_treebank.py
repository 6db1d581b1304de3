"""Validate one CoNLL-U split and write it as Parquet (rule prepare_treebank)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io, treebank

frame = treebank.read_conllu(snakemake.input[0], snakemake.params.max_sentences)
io.write_parquet(frame, snakemake.output[0])
logging.info("%s: %d sentences, %d words", snakemake.input[0], frame.height, frame["forms"].list.len().sum())
