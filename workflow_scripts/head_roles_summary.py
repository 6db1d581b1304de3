"""Voita et al.'s head roles of every dump, how they relate to Michel et al.'s importance and to disabling, and the
L0 head gates against Michel et al.'s pruning curve (rule head_roles_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io, states
from bertology_core.fitness import fitness
from bertology_core.head_roles import head_gates_stats, head_roles_stats
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures

inputs, params, model = snakemake.input, snakemake.params, snakemake.wildcards.model
runs, boot = params.runs, (params.bootstrap["resamples"], params.bootstrap["level"], params.bootstrap["seed"])
thresholds = head_roles_stats.RoleThresholds(**params.thresholds)


def concat(paths) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")


syntactic = head_roles_stats.best_relation_margins(concat(inputs.voita), params.syntactic_relations) if inputs.voita else None
roles = head_roles_stats.assign_roles(concat(inputs.roles), thresholds, syntactic)
# each row's model in the model states' one spelling: pretrained, TASK/finetuned/seedN, TASK/scratch/seedN
dumped = pl.struct("task", "state", "seed").map_elements(
    lambda r: r["state"] if r["seed"] is None else states.run_name(r["task"], r["state"], r["seed"]), return_dtype=pl.String)
tuned = roles.filter(pl.col("state") == states.FINETUNED).select("task", "seed").unique().sort("task", "seed")
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, fitness.seeds_by_task(tuned.rows()))
roles = verdicts.annotate(roles.with_columns(dumped.alias("_dump")), state="_dump").drop("_dump").sort("task", "state", "seed", "layer", "head")
scored = sorted(syntactic["state"].unique().to_list()) if syntactic is not None else []
figures.write_table(roles, f"{params.out}/roles", note=(
    f"Voita et al. 2019's roles: positional = maximum attention on one relative position at least {thresholds.positional_share:.0%} of "
    f"the time; rare = on the example's rarest word piece at least {thresholds.rare_share:.0%} of the time (our threshold) and above "
    f"rare_chance (the rate of a head attending uniformly to the real tokens) by a one-sided t-test over examples at "
    f"{thresholds.rare_significance:g}, counted on the "
    f"examples whose rarest piece is not among the training text's {params.rare_top_frequent} most frequent (rare_queries); "
    f"syntactic = token-level accuracy for one of {', '.join(params.syntactic_relations)} in one direction (dep->head: the dependent's "
    f"pieces attend to the head word; head->dep: the reverse) at least {thresholds.syntactic_margin:.2f} above that relation and "
    f"direction's most-frequent-offset baseline (UD EWT; only the states the probing stage scores: {', '.join(scored) or 'none'}); "
    "specialised = any role (null where the syntactic one is unknown). Confidence: mean maximum weight, special tokens left out."))
figures.save_chart(head_roles_stats.roles_chart(
    roles, "Head roles (Voita et al. 2019)",
    "Colour: confidence (mean maximum attention weight over real tokens, special tokens left out). Text: P-1/P+1 positional "
    f"(>= {thresholds.positional_share:.0%} of maxima at one offset), R rare tokens (>= {thresholds.rare_share:.0%} on the rarest piece "
    f"and above chance), S syntactic (>= {thresholds.syntactic_margin:.2f} over the offset baseline of one of "
    f"{', '.join(params.syntactic_relations)} in one direction).\n"
    f"Syntactic roles only where the probing stage scores the state ({', '.join(scored) or 'none'}); model {model}; each dump's dev "
    "sample; hover a head for its measures.",
), f"{params.out}/roles")

targets = head_roles_stats.importance_targets(
    {tuple(run): pl.read_parquet(path) for run, path in zip(runs["importance"], inputs.importance)},
    [pl.read_parquet(path) for path in inputs.deltas])
relations = head_roles_stats.rank_correlations(roles, targets, *boot)
figures.write_table(verdicts.annotate(relations, seed="seed"), f"{params.out}/importance_relations", note=(
    "Spearman correlation within layers (both measures ranked within each layer, the ranks' Pearson correlation pooled over "
    "layers) over a fine-tuned model's heads between a role measure of its dump and Michel et al.'s importance (on train; raw, "
    "and normalised by layer as their pruning ranks heads) or the score drop when the head alone is disabled (dev); interval: "
    "bootstrap over heads within each layer, the model held fixed."))
title = "Are the important heads the confident, specialised ones? (Voita et al. 2019)"
figures.save_chart(head_roles_stats.correlation_chart(
    relations, title,
    f"Spearman correlation within layers over a fine-tuned model's heads between a role measure of its dump and each target "
    f"(ranked within each layer: depth trends left out), with its {params.bootstrap['level']:.0%} bootstrap interval over heads "
    f"resampled within layers (none when a role is too rare to resample); model {model}.",
) if relations.height else figures.note_chart(title, "no dumped fine-tuned model with importance or disabling results"),
    f"{params.out}/importance_relations")

records = [io.read_json(p) for p in inputs.gates]
metric = main_metric_note(tasks.Task.from_meaning(params.tasks[t]) for t in sorted({r["task"] for r in records}))
gate_table = head_gates_stats.gates_table(records, [pl.read_parquet(p) for p in inputs.gate_predictions],
                                    {r["task"]: tasks.Task.from_meaning(params.tasks[r["task"]]).main_metric for r in records}, *boot)
if gate_table.height:
    gate_table = verdicts.annotate(gate_table, seed="seed")
    curve = pl.concat([pl.read_parquet(path).select(pl.lit(task).alias("task"), pl.lit(seed, pl.Int64).alias("seed"), "heads_pruned", "score")
                       for (task, seed), path in zip(runs["michel"], inputs.michel)])
    curve = curve.with_columns((gate_table["heads"][0] - pl.col("heads_pruned")).alias("heads_kept"))
    chart = head_gates_stats.gates_chart(gate_table, curve, "L0 head gates against Michel et al.'s pruning (Voita et al. 2019)",
                                   f"Dev score ({metric}; the curve's seeded dev sample) against heads kept: Michel et al.'s iterative curve "
                                   "(importance order, no retraining)\nand Hard Concrete gates trained with the L0 penalty at each "
                                   f"strength, the model's weights trained with them (Voita et al.) or frozen; model {model}.")
else:  # no gates in this config: the summary's files say so
    gate_table = pl.DataFrame({"note": ["no L0 gates in this config (head_roles_stats.gates.tasks)"]})
    chart = figures.note_chart("L0 head gates", gate_table["note"][0])
figures.write_table(gate_table, f"{params.out}/gates", note=(
    f"Per job: heads whose deterministic gate is not 0 and the dev score ({metric}) with the learnt gates (gates), with those heads at "
    "gate 1 (gates_binary: the heads the gates chose, without their learnt scales), with Michel et al.'s order cut at the "
    "same number of heads (the fine-tuned model, never retrained) and with the full model; gates minus Michel with paired "
    "bootstrap intervals over the dev examples. Rows with the weights trained also retrain the model (Voita et al.): the "
    "frozen rows' binary column compares the two choices of heads alone."))
figures.save_chart(chart, f"{params.out}/gates")
