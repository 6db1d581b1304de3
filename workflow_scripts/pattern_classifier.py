"""Train the 8-layer pattern CNN on the model's hand labels (fitting and validating the rule labeller on them)
or, without any, on the rule labels, with stratified cross-validation (rule pattern_classifier)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.patterns import feature_tables, label_tables, training

label_set = None
if snakemake.input.get("labels"):
    label_set = label_tables.load_label_set(
        snakemake.input.labels, snakemake.input.get("card"), snakemake.input.get("second_pass"),
        io.read_json(snakemake.input.resolved), snakemake.params.dump_keys,
        recipes={key: io.read_json(path) for key, path in zip(snakemake.params.recipe_keys, snakemake.input.recipes)},
        test_path=snakemake.input.get("test"), second_labeller_path=snakemake.input.get("second_labeller"))
result = training.train_classifier(
    features={key: pl.read_parquet(path) for key, path in zip(snakemake.params.dump_keys, snakemake.input.features)},
    dump_prefixes=dict(zip(snakemake.params.dump_keys, snakemake.params.dump_prefixes)),
    label_set=label_set,
    labelled_prefixes=dict(zip(snakemake.params.labelled_keys, snakemake.params.labelled_prefixes)),
    train_maps=snakemake.params.train_maps,
    image_size=snakemake.params.image_size,
    folds=snakemake.params.cv_folds,
    epochs=snakemake.params.epochs,
    ensemble=snakemake.params.ensemble,
    seed=snakemake.params.seed,
    thresholds=feature_tables.RuleThresholds.from_dict(snakemake.params.rules),
    validation_share=snakemake.params.validation_share,
    min_class_labels=snakemake.params.min_class_labels,
)
training.save_classifier(result, snakemake.output.weights)
io.write_parquet(result.training_maps, snakemake.output.training_maps)
io.write_json(result.report, snakemake.output.report)
logging.info("cross-validated macro F1 %.3f (labels: %s)", result.report["macro_f1_mean"], result.report["labels_source"])
