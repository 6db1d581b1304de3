"""Cut the s-pruning ticket's removed heads and MLPs out of the fine-tuned model; check it predicts what
the gated model predicts and time both on dev (rule compact_model)."""

import copy
import logging
import time

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl
from safetensors.numpy import load_file

from bertology_core.data import tasks, io
from bertology_core.engine.attention_function import use_engine
from bertology_core.inputs import batching
from bertology_core.models import device, loading
from bertology_core.pruning import compaction
from bertology_core.engine.plan import StructureMask
from bertology_core.scoring import plans as scoring

job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
task = tasks.Task.from_meaning(snakemake.params.task)
model = use_engine(loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device))
tokenizer = loading.load_tokenizer(snakemake.input.model)
saved = load_file(snakemake.input.mask)
mask = StructureMask(saved["heads"].astype(bool), saved["mlps"].astype(bool))
# the dev examples Michel's curve is scored on: enough to time and compare
dev = tasks.subsample(pl.read_parquet(snakemake.input.dev), snakemake.params.dev_sample["examples"], snakemake.params.dev_sample["seed"])
encoded = batching.encode(dev, tokenizer, snakemake.params.max_length)
batch_size = scoring.rows_per_pass(job_device, snakemake.resources.batch_size, snakemake.resources.gpu_rows_per_pass)


def timed(fn, repeats: int = 3):
    """Best of ``repeats`` wall times (the least disturbed by other jobs) and the result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


full_seconds, _ = timed(lambda: scoring.evaluate_plan(model, encoded, None, batch_size))
gated = scoring.evaluate_plan(model, encoded, mask.plan(), batch_size)
# weights shared across depth (ALBERT): what some of their depths keep cannot be cut and stays gated
residual = compaction.residual_mask(model, mask)
compact = compaction.compact(copy.deepcopy(model), mask)
compact_seconds, compacted = timed(lambda: scoring.evaluate_plan(compact, encoded, residual.plan(), batch_size))
difference = float(np.nanmax(np.abs(compacted - gated)))  # a token task's unread words are NaN in both
summary = {
    "task": task.name,
    "heads_kept": mask.heads_kept,
    "mlps_kept": mask.mlps_kept,
    "heads_gated_not_cut": int((~residual.heads).sum()),
    "mlps_gated_not_cut": int((~residual.mlps).sum()),
    "parameters_full": compaction.parameter_count(model),
    "parameters_compact": compaction.parameter_count(compact),
    "dev_examples": dev.height,
    "full_seconds": full_seconds,
    "compact_seconds": compact_seconds,
    "speedup": full_seconds / compact_seconds,
    "max_logit_difference": difference,
    # the same function summed in another order: equal up to float rounding
    "predictions_equal_gated": difference <= 1e-4,
}
if not summary["predictions_equal_gated"]:
    raise RuntimeError(f"{snakemake.input.mask}: the compacted model's logits differ from the gated model's by {difference:.2e}")
compaction.save_compact(compact, mask, snakemake.output.model)
io.write_json(summary, snakemake.output.summary)
logging.info("%s", summary)
