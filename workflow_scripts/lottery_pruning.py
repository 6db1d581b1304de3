"""Find one lottery ticket of a fine-tuned model under one protocol: m-pruning (global magnitude) or s-pruning
(heads and MLPs by importance), pruning while the choosing examples' score stays at >= keep x the full
model's; held_out chooses on half A of dev, paper on dev (rule lottery_pruning)."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
from safetensors.torch import save_file

from bertology_core.data import tasks, io
from bertology_core.engine.attention_function import use_engine
from bertology_core.inputs import batching
from bertology_core.models import checkpoint, device, loading
from bertology_core.pruning import lottery
from bertology_core.scoring import plans as scoring

params = snakemake.params
wc = snakemake.wildcards
job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
task = tasks.Task.from_meaning(snakemake.params.task)
model = use_engine(loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device))
tokenizer = loading.load_tokenizer(snakemake.input.model)
importance_data = None
if wc.method == "s":  # s-pruning ranks heads and MLPs by gate-gradient importance on these examples (null: the whole split)
    frame = tasks.subsample(pl.read_parquet(snakemake.input.importance), params.importance["importance_examples"],
                           params.importance["subsample_seed"])
    importance_data = batching.encode(frame, tokenizer, params.max_length), batching.frame_labels(task, frame)
dev = pl.read_parquet(snakemake.input.dev)
selection, report = lottery.protocol_examples(
    dev, wc.protocol, stratify=task.stratifies, examples=params.dev_sample["examples"],
    sample_seed=params.dev_sample["seed"], **params.selection,
)
chosen, reported = dev.filter(pl.Series(selection)), dev.filter(pl.Series(report))
ticket = lottery.find_ticket(
    model, task, wc.method, wc.protocol,
    batching.encode(chosen, tokenizer, params.max_length), chosen["label"].to_numpy(),
    batching.encode(reported, tokenizer, params.max_length), reported["label"].to_numpy(),
    keep=params.keep, keep_above_constant=params.keep_above_constant, method_settings=params.method,
    importance_data=importance_data,
    normalize=bool(params.importance and params.importance["normalize_by_layer"]),
    batch_size=params.batch_size,
    rows_per_pass=scoring.rows_per_pass(job_device, params.batch_size, snakemake.resources.gpu_rows_per_pass),
    # pruning.ticket_importance_granularity (stage.params("ticket")); m-pruning uses no importance
    importance_granularity=params.importance["importance_granularity"] if params.importance else "batch",
    # a killed job replays the scores and importance it saved (its inputs' hashes are in the fingerprint)
    checkpoint=checkpoint.scores_checkpoint(params.checkpoint_dir, snakemake.resources.checkpoint_seconds or None,
                                            dict(params.items()), snakemake.input.model, snakemake.input.dev,
                                            [checkpoint.file_sha256(path) for path in snakemake.input if Path(path).is_file()],
                                            job_device.type, snakemake.threads),
)
summary = ticket.summary() | params.selection
io.write_parquet(ticket.curve(), snakemake.output.curve)
io.write_json(summary, snakemake.output.ticket)
with io.atomic_path(snakemake.output.mask) as tmp:
    save_file(ticket.tensors(), tmp, metadata={key: value if isinstance(value, str) else repr(value)
                                                   for key, value in summary.items() if key != "full_report_metrics"})
logging.info("%s-pruning (%s): chose iteration %d (kept %.3f, score %.4f of full %.4f on %d examples)", wc.method, wc.protocol,
             ticket.best.iteration, ticket.best.kept_share, ticket.best.score, ticket.history[0].score, ticket.selection_examples)
checkpoint.remove_checkpoints(params.checkpoint_dir)
