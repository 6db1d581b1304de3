"""Train the 8-layer pattern CNN on hand labels (patterns.labels_csv) or the rule labels, with
stratified cross-validation (rule pattern_classifier)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core import io, pattern_training

result = pattern_training.train_classifier(
    features={key: pl.read_parquet(path) for key, path in zip(snakemake.params.dump_keys, snakemake.input.features)},
    dump_prefixes=dict(zip(snakemake.params.dump_keys, snakemake.params.dump_prefixes)),
    labels_csv=snakemake.input.get("labels"),
    train_maps=snakemake.params.train_maps,
    image_size=snakemake.params.image_size,
    folds=snakemake.params.cv_folds,
    epochs=snakemake.params.epochs,
    seed=snakemake.params.seed,
)
pattern_training.save_classifier(result, snakemake.output.weights)
io.write_parquet(result.training_maps, snakemake.output.training_maps)
io.write_json(result.report, snakemake.output.report)
logging.info("cross-validated macro F1 %.3f (labels: %s)", result.report["macro_f1_mean"], result.report["labels_source"])
