"""The disabling stage's summaries of one model (rule disabling_summary), as :class:`~bertology_core.summaries.figures.Output`:
Kovaleva et al. 2019's fig. 8 (single heads) and fig. 9 (layers) with paired-bootstrap intervals, the best and worst
configurations, the split-half selection and the greedy search. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from bertology_core.data.tasks import Task
from bertology_core.disabling import stats
from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output

COLUMNS = ["task", "mode", "config", "layer", "head", "metric", "delta", "ci_low", "ci_high", "seeds", "seeds_positive",
           "seeds_negative", "delta_std_over_seeds", "verdict", "examples"]


@dataclass(frozen=True)
class DisablingSettings:
    """What the captions say the sweeps ran (config ``disabling``): the modes (the first is drawn), the interval's
    level, how many best and worst configurations are listed, and the seeds and dev examples per task."""

    model: str
    modes: Sequence[str]
    level: float
    extremes: int
    seed_note: str
    example_note: str


def summarise(deltas: pl.DataFrame, selection: pl.DataFrame, greedy: Sequence[tuple[tuple[str, int], pl.DataFrame]],
              verdicts: Verdicts, tasks: Mapping[str, Task], settings: DisablingSettings) -> dict[str, Output]:
    """``deltas`` and ``selection``: every task's and state's (rule disabling_stats); ``greedy``: (task, seed) -> its
    greedy search, in the runs' order (a pair per swept state: the same (task, seed) may come twice); ``tasks``: the tasks by name, whose main metrics the captions name."""
    sort = ["task", "mode", "layer", "head", "seed"]
    pooled = deltas.filter(pl.col("seed").is_null())
    heads = pooled.filter(pl.col("kind") == "head").select(COLUMNS).sort(sort[:-1])
    layers = deltas.filter(pl.col("kind") == "layer").select(["seed", *COLUMNS]).sort(sort, nulls_last=True)
    # best and worst: the across-seed estimates, three of each kind per task and mode
    extremes = stats.extremes(pooled, settings.extremes, COLUMNS[2:])
    searched = pl.concat([frame.with_columns(pl.lit(task).alias("task"), pl.lit(seed).alias("seed"))
                          for (task, seed), frame in greedy], how="diagonal_relaxed") if greedy else pl.DataFrame(
        {"task": [], "seed": [], "step": []})

    first_mode = settings.modes[0]
    metric = main_metric_note(tasks[task] for task in sorted(set(heads["task"])))
    heatmap_data = heads.filter(pl.col("mode") == first_mode)
    bound = max(abs(heatmap_data["delta"].min()), abs(heatmap_data["delta"].max()), 1e-6)
    heads_chart = figures.head_heatmap(
        heatmap_data, "delta", f"Disabling one head ({first_mode} attention; Kovaleva et al. 2019, fig. 8)",
        f"Change of the dev score ({metric}) when one head is disabled, mean over seeds; blue helps, red hurts.\n"
        f"Model {settings.model}; seeds per task: {settings.seed_note}; dev examples: {settings.example_note}.",
        facet="task", scheme="redblue", domain=(-bound, bound),
        tooltip=["task", "Layer", "Head", "delta", "ci_low", "ci_high", "seeds", "verdict"],
    )
    layer_data = layers.filter(pl.col("mode") == first_mode).with_columns((pl.col("layer") + 1).alias("Layer"))
    layers_chart = figures.interval_chart(
        layer_data, "Layer", f"Disabling a whole layer ({first_mode} attention; Kovaleva et al. 2019, fig. 9)",
        f"Change of the dev score ({metric}) with every head of one layer disabled. Black: mean over seeds "
        f"with its {settings.level:.0%} paired-bootstrap interval; colours: single seeds.\nModel {settings.model}; "
        f"seeds: {settings.seed_note}.",
    )
    return {
        "heads": Output(verdicts.annotate(heads), figure=heads_chart),
        "layers": Output(verdicts.annotate(layers, seed="seed"), figure=layers_chart),
        "extremes": Output(verdicts.annotate(extremes)),
        "selection": Output(verdicts.annotate(selection.sort("task", "mode", "kind", "seed", nulls_last=True), seed="seed")),
        "greedy": Output(verdicts.annotate(searched.sort("task", "seed", "step"), seed="seed")),
    }
