"""The attention_change stage's summaries of one model (rule attention_change_summary), as
:class:`~bertology_core.summaries.figures.Output`: Kovaleva et al. 2019's fig. 5 and the per-layer means. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output


def summarise(changes: Mapping[tuple[str, int], pl.DataFrame], verdicts: Verdicts, model: str, examples: int) -> dict[str, Output]:
    """``changes``: (task, seed) -> that fine-tuned model's per-head cosines (rule attention_change); ``examples``: the
    dev examples per task (config ``attention.max_examples``). Returns ``cosine`` (the per-head means over seeds, and
    Kovaleva et al. 2019's fig. 5) and ``cosine_by_layer``."""
    per_seed = pl.concat([frame.with_columns(pl.lit(task).alias("task"), pl.lit(seed).alias("seed"))
                          for (task, seed), frame in changes.items()])
    heads = per_seed.group_by("task", "layer", "head").agg(
        pl.col("cosine_mean").mean().alias("cosine"), pl.col("cosine_mean").std().alias("cosine_std_over_seeds"),
        pl.len().alias("seeds"), pl.col("examples").first(),
    ).sort("task", "layer", "head")
    by_layer = heads.group_by("task", "layer").agg(pl.col("cosine").mean().alias("mean_cosine"),
                                                   pl.col("cosine").min().alias("min_cosine")).sort("task", "layer")
    chart = figures.head_heatmap(
        heads, "cosine", "Attention change after fine-tuning (Kovaleva et al. 2019, fig. 5)",
        "Cosine similarity of each head's map before and after fine-tuning, mean over dev examples (darker = more change); "
        "the paper found the last two layers change most.\nOnly real tokens are compared (the authors' code also compared padded "
        "query rows and positions), so the comparison with the paper's figure is qualitative.\n"
        f"Model {model}, up to {examples} dev examples per task.",
        facet="task", scheme="viridis",
        tooltip=["task", "Layer", "Head", "cosine", "examples"],
    )
    return {
        "cosine": Output(verdicts.annotate(heads), figure=chart),
        "cosine_by_layer": Output(verdicts.annotate(by_layer)),
    }
