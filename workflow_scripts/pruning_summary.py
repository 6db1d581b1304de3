"""Tables and figures of head importance and pruning for one model (rule pruning_summary): importance maps,
Michel et al.'s pruning curves and prunable shares, the lottery-ticket curves, the full / good / random / bad
table (Prasanna et al. 2020) under each protocol, over seeds and per seed, survival maps, Fleiss' kappa and the
compacted models (bertology_core.pruning.pruning_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl
from safetensors.numpy import load_file

from bertology_core.data import io, tasks
from bertology_core.fitness import fitness
from bertology_core.pruning import pruning_stats
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures
from bertology_core.pruning import pruning_summary as summary

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
out = snakemake.output.importance[0].rsplit("/", 1)[0]
runs = [tuple(r) for r in params.runs]
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, fitness.seeds_by_task(runs))
task_of = {name: tasks.Task.from_meaning(meaning) for name, meaning in params.tasks.items()}
settings = summary.PruningSettings(params.methods, params.protocols, params.keep, params.keep_above_constant, params.tolerance,
                                   params.step_share, params.recompute, **params.data)

importance = summary.importance_table({run: pl.read_parquet(p) for run, p in zip(runs, inputs.importance)})
figures.write_table(verdicts.annotate(importance), f"{out}/importance")
figures.save_chart(summary.importance_chart(importance, model, settings, runs), f"{out}/importance")

michel = summary.michel_curves({run: pl.read_parquet(p) for run, p in zip(runs, inputs.michel)})
prunable = summary.prunable_shares(michel, settings.tolerance)
figures.write_table(verdicts.annotate(prunable, seed="seed"), f"{out}/michel", note=summary.michel_note(settings))
figures.save_chart(summary.michel_chart(michel, model, settings, runs, task_of), f"{out}/michel")

tickets = [(t, s, m, p) for t, s in runs for m in settings.methods for p in settings.protocols]
curves = summary.lottery_curves({ticket: pl.read_parquet(p) for ticket, p in zip(tickets, inputs.curves)})
figures.write_table(verdicts.annotate(curves, seed="seed"), f"{out}/lottery_curves")
figures.save_chart(summary.lottery_chart(curves, model, settings, runs), f"{out}/lottery_curves")

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
dev = {path.split("/")[-2]: pl.read_parquet(path) for path in inputs.dev}
subnetworks, no_ticket = pruning_stats.drop_seeds_without_ticket(summary.subnetwork_table(networks, dev, settings.split_seed, task_of))
seed_table, lottery_table = pruning_stats.lottery_tables(subnetworks)
lottery_table = lottery_table.with_columns(
    pl.Series(fitness.COLUMN, [verdicts.label(t, s) for t, s in lottery_table.select("task", "seed_list").iter_rows()], dtype=pl.String),
    pl.col("seed_list").list.eval(pl.element().cast(pl.String)).list.join(", "),
)
protocol_note, no_ticket_note = summary.protocol_note(settings), summary.no_ticket_note(no_ticket)
figures.write_table(lottery_table, f"{out}/lottery", note=(
    f"Re-fine-tuned subnetworks: {params.recipe_note}. {protocol_note} Scores: {main_metric_note(task_of[t] for t in sorted({t for t, _ in runs}))}, mean ± std over seeds "
    f"(seeds per task: {summary.seeds_note(runs)}; per seed in the lottery_seeds table).{no_ticket_note}"))
figures.write_table(verdicts.annotate(seed_table, seed="seed"), f"{out}/lottery_seeds",
                    note=f"Re-fine-tuned subnetworks per seed: {params.recipe_note}. {protocol_note}{no_ticket_note}")

mask_paths = dict(zip([(t, s, m) for t, s in runs for m in settings.methods], inputs.masks))
masks = {(task, method): [(s, load_file(mask_paths[(task, s, method)])) for t, s in runs if t == task]
         for task in sorted({t for t, _ in runs}) for method in settings.methods}
bootstrap = params.bootstrap
survival, stability = summary.survival_and_stability(masks, lambda stack: pruning_stats.fleiss_kappa_interval(
    stack, bootstrap["resamples"], bootstrap["level"], bootstrap["seed"]))
figures.write_table(verdicts.annotate(survival), f"{out}/survival")
figures.write_table(verdicts.annotate(stability), f"{out}/stability", note=(
    "Fleiss' kappa over the seeds whose pruning kept a ticket (seeds_without_ticket: those whose pruning removed nothing, "
    "left out); kappa_ci: bootstrap over the masked elements, seeds fixed; kappa_loo_min/max: kappa with each ticket seed left "
    "out in turn; kept_share_min/max: the spread of the ticket seeds' kept shares (masks of different sizes lower kappa)."))
figures.save_chart(summary.survival_chart(survival, model, runs), f"{out}/survival")

compact = summary.compact_table({run: io.read_json(p) for run, p in zip([r for r in runs if "s" in settings.methods], inputs.compact)})
figures.write_table(verdicts.annotate(compact, seed="seed") if compact.height else compact, f"{out}/compact")
