"""Tables and figures of head importance and pruning for one model (rule pruning_summary;
bertology_core.pruning.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
from safetensors.numpy import load_file

from bertology_core.data import io, tasks
from bertology_core.fitness import verdict_stats
from bertology_core.pruning import stats, summary
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
runs = [tuple(r) for r in params.runs]
settings = summary.PruningSettings(params.methods, params.protocols, params.keep, params.keep_above_constant, params.tolerance,
                                   params.step_share, params.recompute, **params.data)

# full / good / random / bad under each protocol; the full model is compared on the seeds whose subnetworks were
# re-fine-tuned (all seeds of a task without any), from the fine-tuned model's own predictions when not retrained
sub_runs = [tuple(r) for r in params.subnetwork_runs]
networks = []
for (task, seed, name), record, predictions in zip(sub_runs, inputs.subnetworks, inputs.subnetwork_predictions):
    method, kind, *protocol = ("all", "full") if name == "full" else name.split("-")
    networks.append(summary.Network(task, seed, method, kind, protocol or settings.protocols, pl.read_parquet(predictions),
                                    io.read_json(record)["parameters_kept_share"]))
if "full" not in params.networks or not sub_runs:
    compared = {(t, s) for t, s, _ in sub_runs}
    for (task, seed), predictions in zip(runs, inputs.finetuned_predictions):
        if (task, seed) in compared or not any(t == task for t, _ in compared):
            networks.append(summary.Network(task, seed, "all", "full", settings.protocols, pl.read_parquet(predictions), 1.0))

mask_paths = dict(zip([(t, s, m) for t, s in runs for m in settings.methods], inputs.masks))
bootstrap = params.bootstrap
outputs = summary.summarise(
    model, runs,
    {run: pl.read_parquet(p) for run, p in zip(runs, inputs.importance)},
    {run: pl.read_parquet(p) for run, p in zip(runs, inputs.michel)},
    {ticket: pl.read_parquet(p) for ticket, p in zip(
        [(t, s, m, p) for t, s in runs for m in settings.methods for p in settings.protocols], inputs.curves)},
    networks, {path.split("/")[-2]: pl.read_parquet(path) for path in inputs.dev},
    {(task, method): [(s, load_file(mask_paths[(task, s, method)])) for t, s in runs if t == task]
     for task in sorted({t for t, _ in runs}) for method in settings.methods},
    {run: io.read_json(p) for run, p in zip([r for r in runs if "s" in settings.methods], inputs.compact)},
    verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model, verdict_stats.seeds_by_task(runs)),
    {name: tasks.Task.from_meaning(meaning) for name, meaning in params.tasks.items()}, settings, params.recipe_note,
    lambda stack: stats.fleiss_kappa_interval(stack, bootstrap["resamples"], bootstrap["level"], bootstrap["seed"]),
)
figures.write_outputs(outputs, snakemake.output.importance[0].rsplit("/", 1)[0])
