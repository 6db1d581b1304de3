"""Fine-tune (rule finetune: states finetuned and scratch) or only evaluate (rule evaluate_pretrained: the pre-trained
encoder with an untrained head; rule evaluate_finetuned: a fine-tuned classifier given in the config, saved as the run's
model) one (model, task, state, seed)."""

import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io, states
from bertology_core.finetune import training
from bertology_core.inputs import batching
from bertology_core.models import checkpoint, device, loading
from bertology_core.scoring import plans as scoring

job_device, job_precision = device.model_job(snakemake.threads, snakemake.params.precision)
wc = snakemake.wildcards
given = snakemake.rule == "evaluate_finetuned"
state = wc.state if snakemake.rule == "finetune" else states.FINETUNED if given else states.PRETRAINED
trains = snakemake.rule == "finetune"
resolved = loading.read_resolved(snakemake.input.given if given else snakemake.input.resolved)
task = tasks.Task.from_meaning(snakemake.params.task)
runtime = snakemake.resources  # how the job runs (eval batch, checkpoint cadence), not what it computes
checkpointer = None
if trains:
    checkpointer = checkpoint.Checkpointer(
        directory=Path(snakemake.params.checkpoint_dir),
        # what the run's result depends on: a checkpoint of anything else is stale
        fingerprint=checkpoint.fingerprint(
            snakemake.params.hyperparameters, state, wc.seed, resolved["weights_sha256"],
            checkpoint.file_sha256(snakemake.input.train), snakemake.params.code,
        ),
        every_steps=runtime.checkpoint_steps or None,
        every_seconds=runtime.checkpoint_seconds or None,
    )
result = training.finetune_and_evaluate(
    model_path=resolved["path"],
    task=task,
    state=state,
    given=given,
    seed=int(wc.seed),
    train_frame=pl.read_parquet(snakemake.input.train) if trains else None,
    eval_frames={s: pl.read_parquet(p) for s, p in zip(snakemake.params.eval_splits, snakemake.input.eval)},
    # how training steps run: only the rule that trains has the setting (the evaluations do not rerun when it changes)
    config=training.FinetuneConfig.from_dict(snakemake.params.hyperparameters | ({"compile": snakemake.params.compile} if trains else {})),
    eval_batch_size=scoring.rows_per_pass(job_device, runtime.eval_batch_size, runtime.gpu_rows_per_pass),
    checkpointer=checkpointer,
    device=job_device,
    precision=job_precision,
    tokens=batching.TokenFile.read(snakemake.input.tokens, snakemake.params.hyperparameters["max_length"],
                                   ["train", *snakemake.params.eval_splits] if trains else snakemake.params.eval_splits),
)
result.metrics["model"] = {"name": wc.model, **resolved}
if given:  # what was given in its place: the record says so
    result.metrics["given"] = resolved["spec"]
predictions = pl.concat(
    [frame.with_columns(pl.lit(split).alias("split")) for split, frame in result.predictions.items()]
)
if trains or given:
    with io.atomic_path(snakemake.output.model) as tmp:
        result.model.save_pretrained(tmp)
        result.tokenizer.save_pretrained(tmp)
io.write_parquet(predictions, snakemake.output.predictions)
# the record last: its presence marks a finished run for anyone reading results by hand.
io.write_json(result.metrics, snakemake.output.evaluation if trains or given else snakemake.output.metrics)
if checkpointer is not None:
    checkpointer.remove()
logging.info("eval: %s", result.metrics["eval"])
