"""Find one lottery ticket of a fine-tuned model: m-pruning (global magnitude) or s-pruning (heads and MLPs
by importance), pruning while dev stays at >= keep x the full model (rule lottery_pruning)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl
import torch
from safetensors.torch import save_file

from _pruning import dev_constant_score, dev_scorer, importance_examples, load
from bertology_core import importance, io, lottery

params = snakemake.params
settings = snakemake.config["pruning"]
method = snakemake.wildcards.method
task, model, tokenizer = load(snakemake)
score = dev_scorer(snakemake, task, model, tokenizer, settings["batch_size"])
floor = dev_constant_score(snakemake, task) if params.keep_above_constant else None

if method == "m":
    # the model itself carries the masks (torch.nn.utils.prune), so a state is just the masks it has now
    chosen, history = lottery.prune_while_above(
        lottery.current_weight_masks(model),
        lambda masks: lottery.magnitude_prune_step(model, params.method["rate"]),
        lambda masks: score(None),
        lottery.kept_weight_share,
        params.keep,
        params.method["max_iterations"],
        floor=floor,
    )
    best = history[chosen].state
    tensors = {name: mask.to(torch.uint8).contiguous() for name, mask in best.items()}
    extra = [{} for _ in history]
else:
    examples, labels = importance_examples(snakemake, tokenizer)

    def scores(mask: importance.StructureMask):
        return importance.gate_importance(model, task, examples, labels, mask, settings["batch_size"])

    chosen, history = lottery.structured_pruning(
        importance.StructureMask.for_model(model),
        lambda mask: score(mask.plan()),
        scores,
        head_share=params.method["head_share"],
        mlps_per_step=params.method["mlps_per_step"],
        keep=params.keep,
        refine=params.method["refine"],
        normalize=params.importance["normalize_by_layer"],
        floor=floor,
    )
    best = history[chosen].state
    tensors = {"heads": torch.from_numpy(best.heads.astype(np.uint8)), "mlps": torch.from_numpy(best.mlps.astype(np.uint8))}
    extra = [{"heads_kept": it.state.heads_kept, "mlps_kept": it.state.mlps_kept} for it in history]

curve = pl.DataFrame(
    [
        {"iteration": it.iteration, "phase": it.phase or method, "kept_share": it.kept_share, "score": it.score,
         "chosen": it.iteration == history[chosen].iteration, **more}
        for it, more in zip(history, extra)
    ]
).with_columns(pl.lit(method).alias("method"), (pl.col("score") / history[0].score).alias("share_of_full"),
               pl.lit(floor, dtype=pl.Float64).alias("floor"))
io.write_parquet(curve, snakemake.output.curve)
with io.atomic_path(snakemake.output.mask) as tmp:
    save_file(tensors, tmp, metadata={"method": method, "iteration": str(history[chosen].iteration),
                                      "score": repr(history[chosen].score), "full_score": repr(history[0].score),
                                      "floor": repr(floor)})
logging.info("%s-pruning: chose iteration %d (kept %.3f, score %.4f of full %.4f)", method, history[chosen].iteration,
             history[chosen].kept_share, history[chosen].score, history[0].score)
