"""Head and MLP importance of one fine-tuned model, and Michel et al.'s iterative head-pruning curve on dev
(rule head_importance)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core.data import tasks, io
from bertology_core.engine.attention_function import use_engine
from bertology_core.inputs import batching
from bertology_core.models import device, loading
from bertology_core.engine.plan import StructureMask
from bertology_core.pruning import importance
from bertology_core.scoring import plans as scoring

params = snakemake.params
batch_size = snakemake.resources.batch_size
job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
task = tasks.Task.from_meaning(snakemake.params.task)
model = use_engine(loading.load_classifier(snakemake.input.model, task, loading.SAVED, 0).to(job_device))
tokenizer = loading.load_tokenizer(snakemake.input.model)
# importance_examples null: the whole split (tasks.subsample returns it as it is)
frame = tasks.subsample(pl.read_parquet(snakemake.input.importance), params.importance["importance_examples"],
                       params.importance["subsample_seed"])
examples, labels = batching.encode(frame, tokenizer, params.max_length), batching.frame_labels(task, frame)
dev = tasks.subsample(pl.read_parquet(snakemake.input.dev), params.dev_sample["examples"], params.dev_sample["seed"])
scored: list[pl.DataFrame] = []  # every step's per-example predictions: what the claims table resamples
rows = scoring.rows_per_pass(job_device, batch_size, snakemake.resources.gpu_rows_per_pass)
score = importance.dev_scorer(model, task, dev, batching.encode(dev, tokenizer, params.max_length), rows, record=scored)
normalize = params.importance["normalize_by_layer"]
granularity = params.importance["importance_granularity"]
# under batch granularity the batches are part of the result: the configured size, which the job's params carry
# elsewhere they are a speed setting: on a GPU, compute.gpu_gradient_rows_per_pass
importance_batch_size = params.importance["importance_batch_size"] or scoring.rows_per_pass(
    job_device, batch_size, snakemake.resources.gpu_gradient_rows_per_pass)


def head_scores(mask: StructureMask) -> np.ndarray:
    heads, _ = importance.gate_importance(model, task, examples, labels, mask, importance_batch_size, granularity)
    return importance.normalize_by_layer(heads) if normalize else heads


heads, mlps = importance.gate_importance(model, task, examples, labels, None, importance_batch_size, granularity)
normalized = importance.normalize_by_layer(heads)
mlp_normalized = importance.normalize_by_layer(mlps[None, :])[0]  # MLPs: one l2 norm over all layers
num_layers, num_heads = heads.shape
rows = [
    {"element": "head", "layer": layer, "head": head, "importance": float(heads[layer, head]), "normalized": float(normalized[layer, head])}
    for layer in range(num_layers) for head in range(num_heads)
] + [
    {"element": "mlp", "layer": layer, "head": None, "importance": float(mlps[layer]), "normalized": float(mlp_normalized[layer])}
    for layer in range(num_layers)
]
io.write_parquet(pl.DataFrame(rows, schema_overrides={"layer": pl.Int16, "head": pl.Int16}), snakemake.output.importance)

first = {"scores": normalized if normalize else heads}  # the ranking of step 0 is the one just computed
steps = importance.iterative_head_pruning(
    lambda mask: score(mask.plan()),
    lambda mask: first.pop("scores") if first else head_scores(mask),
    num_layers, num_heads, params.step_share, params.recompute,
)
curve = pl.DataFrame(
    {
        "step": [s.step for s in steps],
        "heads_pruned": [s.heads_pruned for s in steps],
        "share_pruned": [s.share_pruned for s in steps],
        "score": [s.score for s in steps],
        "heads_kept": [s.mask.heads.astype(np.int8).reshape(-1).tolist() for s in steps],
    }
)
io.write_parquet(curve, snakemake.output.curve)
io.write_parquet(pl.concat([frame.with_columns(pl.lit(step, dtype=pl.Int32).alias("step")) for step, frame in enumerate(scored)]),
                 snakemake.output.predictions)
logging.info("importance (%s granularity) on %d %s examples; curve %s", granularity, len(examples),
             params.importance["importance_split"], [round(s.score, 4) for s in steps])
