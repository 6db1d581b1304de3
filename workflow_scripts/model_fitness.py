"""The fitness verdict of one fine-tuned model (rule model_fitness): its run record plus the verdict, as metrics.json."""

from _common import log_to

log_to(snakemake.log[0])

import logging

import numpy as np
import polars as pl

from bertology_core.data import tasks, io
from bertology_core.fitness import verdict_stats
from bertology_core.stats import metrics

record = io.read_json(snakemake.input.evaluation)
task = tasks.Task.from_meaning(snakemake.params.task)
dev = pl.read_parquet(snakemake.input.predictions).filter(pl.col("split") == "dev")
settings = verdict_stats.FitnessSettings.from_dict(snakemake.params.settings)
if task.is_token:  # the trivial tagger learns each word's most frequent label on the training split
    train = pl.read_parquet(snakemake.input.train, columns=["words", "label"])
    tagger = metrics.word_majority_predictor(train["words"].to_list(), train["label"].to_list())
    words = pl.read_parquet(snakemake.input.dev, columns=["idx", "words"])
    trivial = [tagger(sentence) for sentence in dev.select("idx").join(words, on="idx", how="left", maintain_order="left")["words"].to_list()]
    record["fitness"] = verdict_stats.assess(task, [np.asarray(p) for p in dev["prediction"].to_list()],
                                             [np.asarray(g) for g in dev["label"].to_list()], settings, trivial)
else:
    record["fitness"] = verdict_stats.assess(task, dev["prediction"].to_numpy(), dev["label"].to_numpy(), settings)
logging.info("%s", record["fitness"]["reason"])
io.write_json(record, snakemake.output.metrics)
