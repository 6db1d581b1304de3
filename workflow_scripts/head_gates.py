"""Hard Concrete head gates trained with the L0 penalty on one fine-tuned model, at one strength, with or without its
weights (rule head_gates); then the dev sample of Michel et al.'s curve scored with the gates, with Michel et al.'s
ordering at the same number of heads, and with the full model."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core.data import tasks, io
from bertology_core.finetune import training
from bertology_core.head_roles import gate_stats, head_gates
from bertology_core.inputs import batching
from bertology_core.models import checkpoint, device, loading
from bertology_core.engine.plan import StructureMask
from bertology_core.scoring import plans as scoring
from bertology_core.stats import metrics

params, wc, runtime = snakemake.params, snakemake.wildcards, snakemake.resources
settings = params.settings
job_device, job_precision = device.model_job(snakemake.threads, snakemake.params.precision)
task = tasks.Task.from_meaning(snakemake.params.task)
config = training.FinetuneConfig.from_dict(params.hyperparameters | {"epochs": settings["epochs"]})
tokens = batching.TokenFile.read(snakemake.input.tokens, config.max_length, ["train", "dev"])
train = tasks.subsample(pl.read_parquet(snakemake.input.train), settings["train_examples"], params.subsample_seed)
gate_settings = head_gates.GateSettings(temperature=settings["temperature"], stretch=tuple(settings["stretch"]),
                                        initial_log_alpha=settings["initial_log_alpha"], learning_rate=settings["learning_rate"])
checkpointer = checkpoint.Checkpointer(
    directory=Path(params.checkpoint_dir),
    fingerprint=checkpoint.fingerprint(params.hyperparameters, settings, params.subsample_seed, wc.strength, wc.weights, wc.seed, params.code,
                                       checkpoint.file_sha256(Path(snakemake.input.model) / "model.safetensors"),
                                       checkpoint.file_sha256(snakemake.input.train)),
    every_steps=runtime.checkpoint_steps or None, every_seconds=runtime.checkpoint_seconds or None,
)
# a token task's training sentences with no readable word are left out, as in fine-tuning (else a NaN loss)
train, train_encoded, _ = training.readable_training_data(task, train, None, config.max_length, tokens)
gated, record = head_gates.train_gates(
    loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device), task,
    train_encoded, batching.frame_labels(task, train), config, float(wc.strength),
    gate_settings, wc.weights == "trained", int(wc.seed), checkpointer, precision=job_precision,
)
dev = tasks.subsample(pl.read_parquet(snakemake.input.dev), params.dev_sample["examples"], params.dev_sample["seed"])
encoded = tokens.encoded("dev", dev)
# Michel et al.'s ordering prunes the fine-tuned model as it is (never retrained)
finetuned = loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device)
michel = head_gates.michel_mask(pl.read_parquet(snakemake.input.importance), record["heads_kept"], params.normalize_by_layer)
batch = scoring.rows_per_pass(job_device, runtime.eval_batch_size, runtime.gpu_rows_per_pass)
chosen = StructureMask(gated.kept(), np.ones(finetuned.config.num_hidden_layers, dtype=bool))


def predicted(model, plan) -> pl.Series:
    """Each dev example's prediction (a token task's: its words')."""
    values = task.predictions(scoring.evaluate_plan(model, encoded, plan, batch))
    if task.is_token:
        values = [row.tolist() for row in metrics.sentence_rows(values, dev["label"].to_numpy())]
    return pl.Series(values, dtype=task.label_dtype)


predictions = dev.select("idx", "label").with_columns(
    predicted(gated.classifier, gated.evaluation_plan()).alias("gates"),
    # the heads the gates chose, at gate 1, on the weights the gates were trained with
    predicted(gated.classifier, chosen.plan()).alias("gates_binary"),
    predicted(finetuned, michel.plan()).alias("michel"),
    predicted(finetuned, None).alias("full"),
)
record |= {"task": task.name, "seed": int(wc.seed), "weights": wc.weights, "precision": job_precision.to_dict(),
           "train_examples": train.height,
           "dev_examples": dev.height, "michel_heads": michel.heads.astype(int).tolist(),
           "scores": {name: training.prediction_metrics(task, predictions.select("idx", "label", pl.col(name).alias("prediction")))
                      for name in gate_stats.PREDICTIONS}}
io.write_parquet(predictions, snakemake.output.predictions)
io.write_json(record, snakemake.output.record)  # last: its presence marks a finished job
checkpointer.remove()
logging.info("strength %s, weights %s: %d heads kept; %s", wc.strength, wc.weights, record["heads_kept"], record["scores"])
