"""Disable every single head and every whole layer of one fine-tuned model; keep per-example dev
predictions of every configuration (rule disabling_sweep)."""

import logging
import time
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io
from bertology_core.disabling import sweeps
from bertology_core.scoring import plans as scoring
from bertology_core.finetune import training
from bertology_core.models import checkpoint, device

job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
params = snakemake.params
task = tasks.Task.from_meaning(snakemake.params.task)
scored = sweeps.load_scored_model(snakemake.input.model, snakemake.input.data, task, params.max_examples, params.subsample_seed,
                                     params.max_length, job_device)
model, dev, encoded = scored.model, scored.dev, scored.encoded
config = model.config
configs = sweeps.sweep_configurations(config.num_hidden_layers, config.num_attention_heads, layers=params.layers)
rows = scoring.rows_per_pass(job_device, snakemake.resources.rows_per_pass, snakemake.resources.gpu_rows_per_pass)
frames, summary = [], {"task": task.name, "examples": dev.height, "configurations": len(configs), "modes": {}}
for mode in params.modes:
    started = time.perf_counter()
    # a killed job resumes after the groups it finished (the pass size is in the fingerprint: it shapes the batches)
    saved = checkpoint.scores_checkpoint(Path(params.checkpoint_dir) / mode, snakemake.resources.checkpoint_seconds or None,
                                         dict(params.items()), snakemake.input.model, snakemake.input.data, rows,
                                         job_device.type, snakemake.threads, mode)
    scored = sweeps.evaluate_configurations(model, encoded, configs, mode, rows_per_pass=rows, checkpoint=saved)
    frames.append(sweeps.sweep_frame(task, dev, configs, task.predictions(scored.logits),
                                        task.predictions(scored.reference), mode))
    intact = training.prediction_metrics(task, frames[-1].filter(pl.col("kind") == "intact"))
    summary["modes"][mode] = {"seconds": time.perf_counter() - started, "intact": intact}
    logging.info("%s: %d configurations x %d examples in %.0f s; intact %s", mode, len(configs), dev.height,
                 summary["modes"][mode]["seconds"], intact)
io.write_parquet(pl.concat(frames), snakemake.output.sweep)
io.write_json(summary, snakemake.output.summary)
checkpoint.remove_checkpoints(params.checkpoint_dir)
