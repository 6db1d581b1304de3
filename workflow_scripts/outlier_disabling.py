"""One fine-tuned model's dev predictions with its outlier LayerNorm dimensions, or as many random dimensions,
disabled in the output LayerNorms, the attention-output LayerNorms and both (rule outlier_disabling)."""

import logging
import time

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io
from bertology_core.disabling import sweeps
from bertology_core.scoring import plans as scoring
from bertology_core.finetune import training
from bertology_core.models import checkpoint, device
from bertology_core.outliers import layernorms, stats

job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
params = snakemake.params
task = tasks.Task.from_meaning(snakemake.params.task)
scored = sweeps.load_scored_model(snakemake.input.model, snakemake.input.data, task, params.max_examples, params.subsample_seed,
                                     params.max_length, job_device)
model, dev = scored.model, scored.dev
_, table, reason = layernorms.find_outliers(model, stats.Criterion(**params.criterion))
found = [] if reason else stats.outlier_dimensions(table)
configs = stats.configurations(found, model.config.hidden_size, params.draws, params.random_seed)
started = time.perf_counter()
rows = scoring.rows_per_pass(job_device, snakemake.resources.rows_per_pass, snakemake.resources.gpu_rows_per_pass)
saved = checkpoint.scores_checkpoint(params.checkpoint_dir, snakemake.resources.checkpoint_seconds or None, dict(params.items()),
                                     snakemake.input.model, snakemake.input.data, rows, job_device.type, snakemake.threads)
logits = layernorms.evaluate_dimension_sets(model, scored.encoded, configs, rows_per_pass=rows, checkpoint=saved)
units = tasks.scored_units(task, dev)  # examples, or a token task's words
frame = stats.predictions_frame(configs, units["idx"], units["label"], task.predictions(logits.logits),
                                task.predictions(logits.reference), task.is_regression, units.get("word"))
io.write_parquet(frame, snakemake.output.predictions)
record = {"task": task.name, "examples": dev.height, "outliers": found, "not_applicable": reason, "configurations": len(configs),
          "seconds": time.perf_counter() - started, "intact": training.prediction_metrics(task, frame.filter(pl.col("kind") == "intact"))}
io.write_json(record, snakemake.output.record)
checkpoint.remove_checkpoints(params.checkpoint_dir)
logging.info("%s", record)
