"""Tables and figures of the disabling sweeps of one model (rule disabling_summary): the paper's fig. 8
(single heads) and fig. 9 (layers) with intervals, the best and worst configurations, the split-half
selection and the greedy search."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks
from bertology_core.disabling import disabling_stats
from bertology_core.fitness import fitness
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures

params = snakemake.params
out = params.out
verdicts = fitness.Verdicts(pl.read_parquet(snakemake.input.fitness), snakemake.wildcards.model, params.fitness_runs)
deltas = pl.concat([pl.read_parquet(p) for p in snakemake.input.deltas])
sort = ["task", "mode", "layer", "head", "seed"]
pooled = deltas.filter(pl.col("seed").is_null())
columns = ["task", "mode", "config", "layer", "head", "metric", "delta", "ci_low", "ci_high", "seeds", "seeds_positive",
           "seeds_negative", "delta_std_over_seeds", "verdict", "examples"]
heads = pooled.filter(pl.col("kind") == "head").select(columns).sort(sort[:-1])
figures.write_table(verdicts.annotate(heads), f"{out}/heads")
layers = deltas.filter(pl.col("kind") == "layer").select(["seed", *columns]).sort(sort, nulls_last=True)
figures.write_table(verdicts.annotate(layers, seed="seed"), f"{out}/layers")
# best and worst: the across-seed estimates, three of each kind per task and mode
extremes = disabling_stats.extremes(pooled, params.extremes, columns[2:])
figures.write_table(verdicts.annotate(extremes), f"{out}/extremes")
selection = pl.concat([pl.read_parquet(p) for p in snakemake.input.selection]).sort("task", "mode", "kind", "seed", nulls_last=True)
figures.write_table(verdicts.annotate(selection, seed="seed"), f"{out}/selection")
greedy = pl.concat([
    pl.read_parquet(p).with_columns(pl.lit(task).alias("task"), pl.lit(seed).alias("seed"))
    for (task, seed), p in zip(params.greedy_runs, snakemake.input.greedy)
], how="diagonal_relaxed") if snakemake.input.greedy else pl.DataFrame({"task": [], "seed": [], "step": []})
figures.write_table(verdicts.annotate(greedy.sort("task", "seed", "step"), seed="seed"), f"{out}/greedy")

first_mode = params.modes[0]
metric_note = main_metric_note(tasks.Task.from_meaning(params.tasks[task]) for task in sorted(set(heads["task"])))
heatmap_data = heads.filter(pl.col("mode") == first_mode)
bound = max(abs(heatmap_data["delta"].min()), abs(heatmap_data["delta"].max()), 1e-6)
chart = figures.head_heatmap(
    heatmap_data, "delta", f"Disabling one head ({first_mode} attention; Kovaleva et al. 2019, fig. 8)",
    f"Change of the dev score ({metric_note}) when one head is disabled, mean over seeds; blue helps, red hurts.\n"
    f"Model {snakemake.wildcards.model}; seeds per task: {params.seed_note}; dev examples: {params.example_note}.",
    facet="task", scheme="redblue", domain=(-bound, bound),
    tooltip=["task", "Layer", "Head", "delta", "ci_low", "ci_high", "seeds", "verdict"],
)
figures.save_chart(chart, f"{out}/heads")
layer_data = layers.filter(pl.col("mode") == first_mode).with_columns((pl.col("layer") + 1).alias("Layer"))
chart = figures.interval_chart(
    layer_data, "Layer", f"Disabling a whole layer ({first_mode} attention; Kovaleva et al. 2019, fig. 9)",
    f"Change of the dev score ({metric_note}) with every head of one layer disabled. Black: mean over seeds "
    f"with its {params.level:.0%} paired-bootstrap interval; colours: single seeds.\nModel {snakemake.wildcards.model}; seeds: {params.seed_note}.",
)
figures.save_chart(chart, f"{out}/layers")
