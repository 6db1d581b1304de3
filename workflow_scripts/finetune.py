"""Fine-tune (rule finetune) or only evaluate (rule evaluate_untuned) one (model, task, init, seed)."""

import logging
import os

from _common import log_to

log_to(snakemake.log[0])

# deterministic cuBLAS needs a fixed workspace; set before torch touches CUDA
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import polars as pl
import torch

from bertology_core import finetune, glue, io

torch.set_num_threads(snakemake.threads)
torch.use_deterministic_algorithms(True)
wc = snakemake.wildcards
init = "untuned" if snakemake.rule == "evaluate_untuned" else wc.init
resolved = io.read_json(snakemake.input.resolved)
task = glue.get_task(wc.task)
result = finetune.finetune_and_evaluate(
    model_path=resolved["path"],
    task=task,
    init=init,
    seed=int(wc.seed),
    train_frame=pl.read_parquet(snakemake.input.train) if init != "untuned" else None,
    eval_frames={s: pl.read_parquet(p) for s, p in zip(snakemake.params.eval_splits, snakemake.input.eval)},
    config=finetune.FinetuneConfig.from_dict(snakemake.params.hyperparameters),
)
result.metrics["model"] = {"name": wc.model, **resolved}
predictions = pl.concat(
    [frame.with_columns(pl.lit(split).alias("split")) for split, frame in result.predictions.items()]
)
if init != "untuned":
    with io.atomic_path(snakemake.output.model) as tmp:
        result.model.save_pretrained(tmp)
        result.tokenizer.save_pretrained(tmp)
io.write_parquet(predictions, snakemake.output.predictions)
# metrics last: its presence marks a finished run for anyone reading results by hand.
io.write_json(result.metrics, snakemake.output.metrics)
logging.info("eval: %s", result.metrics["eval"])
