"""Greedy multi-head disabling chosen on one half of dev, reported on the other (rule disabling_greedy)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core import bootstrap, device, disabling, disabling_stats, finetune, glue, models
from bertology_core.metrics import primary_metric
from bertology_core.figures import write_table

job_device = device.job_device(snakemake.threads)
params = snakemake.params
task = glue.get_task(snakemake.wildcards.task)
metric = primary_metric(task)
sweep = pl.read_parquet(snakemake.input.sweep).filter(pl.col("mode") == params.mode)
dev = pl.read_parquet(snakemake.input.data).filter(pl.col("idx").is_in(sweep["idx"].unique().implode())).sort("idx")
labels = dev["label"].to_numpy()
selection = disabling_stats.split_halves(labels, stratify=not task.is_regression, seed=params.split_seed)
model = models.load_classifier(snakemake.input.model, task, "finetuned", 0).to(job_device)
tokenizer = models.load_tokenizer(snakemake.input.model)
halves = {name: finetune.encode(dev.filter(pl.Series(mask)), tokenizer, params.max_length)
          for name, mask in (("selection", selection), ("report", ~selection))}
# the sweep already holds every single head's predictions: the first greedy step costs nothing
known = {
    name: group.sort("idx")["prediction"].to_numpy()[selection]
    for (name,), group in sweep.partition_by("config", as_dict=True).items()
}
computed = 0


def evaluate_selection(configs):
    global computed
    missing = [c for c in configs if c.name not in known]
    if missing:
        computed += len(missing)
        logits = disabling.evaluate_configurations(model, halves["selection"], missing, params.mode, rows_per_pass=snakemake.resources.rows_per_pass)
        known.update(zip([c.name for c in missing], disabling.predictions_from_logits(task, logits)))
    return np.stack([known[c.name] for c in configs])


heads = [(layer, head) for layer in range(model.config.num_hidden_layers) for head in range(model.config.num_attention_heads)]
intact_score, steps = disabling.greedy_disable(evaluate_selection, labels[selection], metric, heads, params.max_steps)
logging.info("greedy: %d steps, %d configurations computed beyond the sweep", len(steps), computed)
# report every step's set on the held-out half, against the intact model, with paired intervals
configs = [disabling.INTACT, *[disabling.head_set(step.disabled) for step in steps]]
report = disabling.predictions_from_logits(
    task, disabling.evaluate_configurations(model, halves["report"], configs, params.mode, rows_per_pass=snakemake.resources.rows_per_pass)
)
deltas = bootstrap.paired_deltas(
    metric, report[1:], report[0], labels[~selection],
    bootstrap.resample_indices(int((~selection).sum()), params.resamples, params.bootstrap_seed),
)
low, high = deltas.interval(params.level)
report_scores = disabling.score(metric, report, labels[~selection])
rows = [{
    "step": 0, "added": None, "layer": None, "head": None, "disabled": "intact",
    "selection_score": intact_score, "selection_delta": 0.0,
    "report_score": float(report_scores[0]), "report_delta": 0.0, "report_ci_low": 0.0, "report_ci_high": 0.0,
}]
for position, step in enumerate(steps):
    rows.append({
        "step": step.step, "added": disabling.head_name(*step.added), "layer": step.added[0], "head": step.added[1],
        "disabled": configs[position + 1].name,
        "selection_score": step.selection_score, "selection_delta": step.selection_score - intact_score,
        "report_score": float(report_scores[position + 1]), "report_delta": float(deltas.delta[position]),
        "report_ci_low": float(low[position]), "report_ci_high": float(high[position]),
    })
table = pl.DataFrame(rows, schema_overrides={"added": pl.String, "layer": pl.Int16, "head": pl.Int16}).with_columns(
    pl.lit(params.mode).alias("mode"), pl.lit(metric).alias("metric"),
    pl.lit(int(selection.sum())).alias("selection_examples"), pl.lit(int((~selection).sum())).alias("report_examples"),
)
write_table(table, snakemake.output.table[0].removesuffix(".parquet"))
