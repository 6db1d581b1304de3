"""The outliers stage's summaries of one model (rule outliers_summary), as :class:`~bertology_core.summaries.figures.Output`:
the outlier LayerNorm dimensions of every model state (Kovaleva et al. 2021) and their disabling against as many random
dimensions. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from bertology_core.data.tasks import Task
from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.outliers import stats
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output


@dataclass(frozen=True)
class OutliersSettings:
    """What the notes and captions say was run (config ``outliers``): the criterion (a parameter more than ``sigmas``
    standard deviations from its LayerNorm's mean in more than ``min_layer_share`` of the layers), the interval's level
    and the dev examples per task (``max_examples``; None or 0: all)."""

    model: str
    sigmas: float
    min_layer_share: float
    level: float
    examples: int | None


def summarise(dimensions: pl.DataFrame, parameters: pl.DataFrame, deltas: Sequence[pl.DataFrame],
              contrast: Sequence[pl.DataFrame], fitness: pl.DataFrame, fitness_runs: Mapping[str, Sequence[int]],
              tasks: Sequence[Task], settings: OutliersSettings) -> dict[str, Output]:
    """``dimensions`` and ``parameters``: the outlier dimensions of every model state and the pre-trained LayerNorm
    parameters (rule outlier_dimensions); ``deltas`` and ``contrast``: each task's (rule outlier_stats); ``fitness``:
    the fitness table, whose verdicts label the rows (``fitness_runs``: the seeds each task's pooled rows rest on);
    ``tasks``: the disabled tasks, whose main metrics the captions name. Returns ``dimensions`` (table, and Kovaleva et
    al. 2021's fig. 1), ``contrast`` (table and chart) and ``deltas`` (table)."""
    metric = main_metric_note(tasks)
    verdicts = Verdicts(fitness, settings.model, fitness_runs)
    criterion = (f"a weight or bias more than {settings.sigmas:g} standard deviations from its output LayerNorm's mean "
                 f"in more than {settings.min_layer_share:.0%} of the layers")
    summary = stats.dimensions_summary(dimensions)
    # the model states' one spelling (pretrained, TASK/finetuned/seedN) says which fine-tuned model a row rests on
    named = summary.with_columns(pl.when(pl.col("task").is_null()).then(pl.col("state"))
                                 .otherwise(pl.format("{}/{}/seed{}", "task", "state", "seed")).alias("_model_state"))
    title = "LayerNorm weights and biases per hidden dimension (Kovaleva et al. 2021, fig. 1)"
    if parameters.height:
        dimensions_chart = figures.with_caption(
            stats.parameters_chart(parameters, summary), title,
            f"Model {settings.model}, pre-trained: one line per layer; dashed red, the outlier dimensions ({criterion}).")
    else:
        dimensions_chart = figures.note_chart(title, summary["not_applicable"].drop_nulls().first() or "no LayerNorm parameters")

    deltas = pl.concat(deltas, how="diagonal_relaxed") if deltas else pl.DataFrame()
    contrast = pl.concat(contrast, how="diagonal_relaxed") if contrast else pl.DataFrame()
    if contrast.height:  # an across-seed row rests on the seeds it pools (a model without outliers is not among them)
        contrast = Verdicts(fitness, settings.model, {
            t: [int(s) for s in p.split(",")] for t, p in contrast.filter(pl.col("seed").is_null()).select("task", "pooled_seeds").iter_rows()
        }).annotate(contrast.select("task", pl.exclude("task")), seed="seed")
    title = "Disabling the outlier dimensions against as many random ones"
    if deltas.height:
        contrast_chart = figures.with_caption(
            stats.contrast_chart(deltas), title,
            f"Model {settings.model}: change of the dev score ({metric}), mean over seeds; grey, each random draw; red, the "
            f"outlier dimensions with a {settings.level:.0%} interval over dev examples.")
    else:
        contrast_chart = figures.note_chart(title, "No fine-tuned model with outlier dimensions to disable (see the dimensions table).")
    return {
        "dimensions": Output(verdicts.annotate(named, state="_model_state").drop("_model_state"),
                             note=f"Outlier dimensions (Kovaleva et al. 2021): {criterion}. Layers 0-based.",
                             figure=dimensions_chart),
        "contrast": Output(contrast, note=(
            f"Per fine-tuned model (seed) and across seeds (seed empty): the change of the dev score ({metric}) when the "
            "outlier dimensions are disabled (LayerNorm weight and bias at 0 in every layer) in the output LayerNorms, the "
            "attention-output LayerNorms or both; the same for as many random dimensions, drawn outliers.random_draws times "
            "(mean, 2.5 and 97.5 percentiles, worst, share of draws at or below the outliers); difference = outliers minus "
            f"the random mean with a paired {settings.level:.0%} interval over dev examples. Dev sample: "
            f"{settings.examples or 'all'} examples per task."), figure=contrast_chart),
        "deltas": Output(deltas.select("task", pl.exclude("task")) if deltas.height else deltas),
    }
