"""Predict the pattern class of every map of one dump with the trained CNN (rule classify_maps)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.patterns import training
from bertology_core.attention.dump_tables import AttentionDump

classifier = training.load_classifier(snakemake.input.weights)
features = pl.read_parquet(snakemake.input.features)
frame = training.classify_dump(classifier, AttentionDump(snakemake.params.dump_prefix), features,
                                      snakemake.resources.batch_size)
io.write_parquet(frame, snakemake.output[0])
logging.info("%d maps: %s", frame.height, dict(frame["cnn_label"].value_counts().iter_rows()))
