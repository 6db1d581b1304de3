"""What the pruning scripts share: the fine-tuned model, the importance examples and the dev scorer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import polars as pl

from bertology_core import attention, device, finetune, glue, importance, models
from bertology_core.metrics import compute_metrics, primary_metric


def load(snakemake):
    """(task, fine-tuned model, tokenizer) of the job, on the job's device and threads, deterministic."""
    job_device = device.job_device(snakemake.threads)
    task = glue.get_task(snakemake.wildcards.task)
    model = models.load_classifier(snakemake.input.model, task, "finetuned", 0).to(job_device)
    return task, attention.use_engine(model), models.load_tokenizer(snakemake.input.model)


def importance_examples(snakemake, tokenizer) -> tuple[finetune.Encoded, np.ndarray]:
    settings = snakemake.params.importance
    frame = glue.subsample(pl.read_parquet(snakemake.input.importance), settings["importance_examples"], settings["subsample_seed"])
    return finetune.encode(frame, tokenizer, snakemake.params.max_length), frame["label"].to_numpy()


def dev_scorer(snakemake, task, model, tokenizer, batch_size: int, record: list | None = None
               ) -> Callable[[attention.InterventionPlan | None], float]:
    """The task's primary metric on dev (or its seeded subsample) for a plan (None: the model as it is);
    logs each score. ``record``: each call appends its per-example frame (``idx, label, prediction``)."""
    dev = dev_sample(snakemake)
    encoded, labels = finetune.encode(dev, tokenizer, snakemake.params.max_length), dev["label"].to_numpy()
    metric = primary_metric(task)

    def score(plan: attention.InterventionPlan | None) -> float:
        predictions = importance.masked_predictions(model, task, encoded, plan, batch_size)
        value = compute_metrics(task, predictions, labels)[metric]
        logging.info("dev %s %.4f", metric, value)
        if record is not None:
            record.append(dev.select("idx", "label").with_columns(pl.Series("prediction", predictions)))
        return value

    return score


def dev_sample(snakemake) -> pl.DataFrame:
    """The dev examples Michel et al.'s curve and the compaction check are scored on (``params.dev_sample``:
    seeded sample or all of dev); lottery tickets choose theirs with lottery.protocol_examples."""
    sample = snakemake.params.dev_sample
    return glue.subsample(pl.read_parquet(snakemake.input.dev), sample["examples"], sample["seed"])
