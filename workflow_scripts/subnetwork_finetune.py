"""Re-fine-tune one subnetwork (good / random / bad of an m- or s-pruning ticket chosen under one protocol,
or the full model) from the pre-trained weights with its mask fixed; predict every dev example (the summary
scores each protocol's report examples from them) (rule subnetwork_finetune)."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file

from bertology_core.data import tasks, io
from bertology_core.finetune import training
from bertology_core.inputs import batching
from bertology_core.models import checkpoint, device, loading
from bertology_core.pruning import lottery
from bertology_core.engine.plan import StructureMask
from bertology_core.scoring import plans as scoring

job_device, job_precision = device.model_job(snakemake.threads, snakemake.params.precision)
params = snakemake.params
wc = snakemake.wildcards
task = tasks.Task.from_meaning(snakemake.params.task)
seed = int(wc.seed)
draw_seed = [params.sample_seed, seed]  # the random and bad draws: one stream per fine-tuning seed
mask = None
if wc.network != "full":
    method, kind, _ = wc.network.split("-")
    if method == "s":
        saved = load_numpy(snakemake.input.mask)
        good = StructureMask(saved["heads"].astype(bool), saved["mlps"].astype(bool))
        mask = lottery.structure_subnetwork(good, kind, draw_seed)
    else:
        good = {name: value.bool() for name, value in load_file(snakemake.input.mask).items()}
        magnitudes = None
        if kind == "bad":
            finetuned = loading.load_classifier(snakemake.input.finetuned_model, task, loading.SAVED, 0)
            magnitudes = {name: module.weight.detach() for name, module in lottery.encoder_weights(finetuned)}
        mask = lottery.weight_subnetwork(good, kind, draw_seed, magnitudes)
train = tasks.subsample(pl.read_parquet(snakemake.input.train), params.max_train_examples, params.subsample_seed)
dev = pl.read_parquet(snakemake.input.dev)
resolved = loading.read_resolved(snakemake.input.resolved)
runtime = snakemake.resources  # how the job runs (checkpoint cadence), not what it computes
masks_from = []  # the ticket's mask and, for the bad magnitude subnetwork, the fine-tuned weights
if "mask" in snakemake.input.keys():
    masks_from.append(checkpoint.file_sha256(snakemake.input.mask))
if "finetuned_model" in snakemake.input.keys():
    masks_from.append(checkpoint.file_sha256(Path(snakemake.input.finetuned_model) / "model.safetensors"))
checkpointer = checkpoint.Checkpointer(
    directory=Path(params.checkpoint_dir),
    # what the run's result depends on: a checkpoint of anything else is stale
    fingerprint=checkpoint.fingerprint(
        params.hyperparameters, wc.network, seed, params.max_train_examples, params.subsample_seed, params.sample_seed,
        params.code, resolved["weights_sha256"], checkpoint.file_sha256(snakemake.input.train), *masks_from,
    ),
    every_steps=runtime.checkpoint_steps or None,
    every_seconds=runtime.checkpoint_seconds or None,
)
result, predictions = lottery.finetune_subnetwork(
    resolved["path"], task, seed, train, dev,
    training.FinetuneConfig.from_dict(params.hyperparameters | {"compile": params.compile}), mask,
    eval_batch_size=scoring.rows_per_pass(job_device, params.eval_batch_size, snakemake.resources.gpu_rows_per_pass), device=job_device,
    precision=job_precision,
    tokens=batching.TokenFile.read(snakemake.input.tokens, params.hyperparameters["max_length"], ["train", "dev"]),
    checkpointer=checkpointer,
)
result |= {"task": task.name, "seed": seed, "network": wc.network, "hyperparameters": params.hyperparameters}
if isinstance(mask, StructureMask):
    result |= {"heads_kept": mask.heads_kept, "mlps_kept": mask.mlps_kept}
io.write_parquet(predictions, snakemake.output.predictions)
# the record last: its presence marks a finished run for anyone reading results by hand
io.write_json(result, snakemake.output.metrics)
checkpointer.remove()
logging.info("%s: %s", wc.network, result["metrics"])
