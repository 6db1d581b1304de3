"""Outlier LayerNorm dimensions of every model state, and their disabling against random dimensions (rule
outliers_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import fitness
from bertology_core.data import tasks
from bertology_core.outliers import outliers_stats
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures

params, inputs = snakemake.params, snakemake.input
model = snakemake.wildcards.model
metric = main_metric_note(tasks.Task.from_meaning(params.task_meanings[t]) for t in params.tasks)
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, params.fitness_runs)
stems = {name: snakemake.output[name][0].removesuffix(".parquet") for name in ("dimensions", "contrast", "deltas")}
criterion = (f"a weight or bias more than {params.criterion['sigmas']:g} standard deviations from its output LayerNorm's mean "
             f"in more than {params.criterion['min_layer_share']:.0%} of the layers")
summary = outliers_stats.dimensions_summary(pl.read_parquet(inputs.dimensions))
# the model states' one spelling (pretrained, TASK/finetuned/seedN) says which fine-tuned model a row rests on
named = summary.with_columns(pl.when(pl.col("task").is_null()).then(pl.col("state"))
                             .otherwise(pl.format("{}/{}/seed{}", "task", "state", "seed")).alias("_model_state"))
figures.write_table(verdicts.annotate(named, state="_model_state").drop("_model_state"), stems["dimensions"],
                    note=f"Outlier dimensions (Kovaleva et al. 2021): {criterion}. Layers 0-based.")
parameters = pl.read_parquet(inputs.parameters)
title = "LayerNorm weights and biases per hidden dimension (Kovaleva et al. 2021, fig. 1)"
if parameters.height:
    chart = figures.with_caption(outliers_stats.parameters_chart(parameters, summary), title,
                                 f"Model {model}, pre-trained: one line per layer; dashed red, the outlier dimensions ({criterion}).")
else:
    chart = figures.note_chart(title, summary["not_applicable"].drop_nulls().first() or "no LayerNorm parameters")
figures.save_chart(chart, stems["dimensions"])

deltas = pl.concat([pl.read_parquet(p) for p in inputs.deltas], how="diagonal_relaxed") if inputs.deltas else pl.DataFrame()
contrast = pl.concat([pl.read_parquet(p) for p in inputs.contrast], how="diagonal_relaxed") if inputs.contrast else pl.DataFrame()
if contrast.height:  # an across-seed row rests on the seeds it pools (a model without outliers is not among them)
    contrast = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, {
        t: [int(s) for s in p.split(",")] for t, p in contrast.filter(pl.col("seed").is_null()).select("task", "pooled_seeds").iter_rows()
    }).annotate(contrast.select("task", pl.exclude("task")), seed="seed")
figures.write_table(deltas.select("task", pl.exclude("task")) if deltas.height else deltas, stems["deltas"])
figures.write_table(contrast, stems["contrast"], note=(
    f"Per fine-tuned model (seed) and across seeds (seed empty): the change of the dev score ({metric}) when the outlier dimensions are disabled "
    "(LayerNorm weight and bias at 0 in every layer) in the output LayerNorms, the attention-output LayerNorms or both; the "
    "same for as many random dimensions, drawn outliers.random_draws times (mean, 2.5 and 97.5 percentiles, worst, share of "
    f"draws at or below the outliers); difference = outliers minus the random mean with a paired {params.level:.0%} interval "
    f"over dev examples. Dev sample: {params.examples or 'all'} examples per task."))
title = "Disabling the outlier dimensions against as many random ones"
if deltas.height:
    chart = figures.with_caption(outliers_stats.contrast_chart(deltas), title,
                                 f"Model {model}: change of the dev score ({metric}), mean over seeds; grey, each random draw; red, the outlier dimensions with "
                                 f"a {params.level:.0%} interval over dev examples.")
else:
    chart = figures.note_chart(title, "No fine-tuned model with outlier dimensions to disable (see the dimensions table).")
figures.save_chart(chart, stems["contrast"])
