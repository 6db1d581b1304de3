"""Voita et al.'s head roles of every dump, how they relate to Michel et al.'s importance and to disabling, and the
L0 head gates against Michel et al.'s pruning curve (rule head_roles_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core import figures, fitness, glue, head_gates, head_roles, io
from bertology_core.metrics import primary_metric

inputs, params, model = snakemake.input, snakemake.params, snakemake.wildcards.model
runs, boot = params.runs, (params.bootstrap["resamples"], params.bootstrap["level"], params.bootstrap["seed"])
thresholds = head_roles.RoleThresholds(**params.thresholds)


def concat(paths) -> pl.DataFrame | None:
    return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed") if paths else None


syntactic = head_roles.best_relation_margins(concat(inputs.relations), concat(inputs.best_relations)) if inputs.relations else None
roles = head_roles.assign_roles(concat(inputs.roles), thresholds, syntactic)
dumped = pl.when(pl.col("seed").is_null()).then(pl.col("state")).otherwise(pl.format("{}/finetuned_seed{}", "task", "seed"))
fine_tuned_runs = fitness.seeds_by_task(roles.filter(pl.col("seed").is_not_null()).select("task", "seed").unique().sort("task", "seed").rows())
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, fine_tuned_runs)
roles = verdicts.annotate(roles.with_columns(dumped.alias("_dump")), state="_dump").drop("_dump").sort("task", "state", "seed", "layer", "head")
scored = sorted(syntactic["state"].unique().to_list()) if syntactic is not None else []
figures.write_table(roles, f"{params.out}/roles", note=(
    f"Voita et al. 2019's roles: positional = maximum attention on one relative position at least {thresholds.positional_share:.0%} of "
    f"the time; rare = on the example's rarest word piece at least {thresholds.rare_share:.0%} of the time (our threshold); syntactic = "
    f"a dependency relation's accuracy at least {thresholds.syntactic_margin:.2f} above its best offset baseline (UD EWT; only states "
    "the probing stage scores). Confidence: mean maximum weight, special tokens left out."))
figures.save_chart(head_roles.roles_chart(
    roles, "Head roles (Voita et al. 2019)",
    "Colour: confidence (mean maximum attention weight over real tokens, special tokens left out). Text: P-1/P+1 positional "
    f"(>= {thresholds.positional_share:.0%} of maxima at one offset), R rare tokens (>= {thresholds.rare_share:.0%} on the rarest piece), "
    f"S syntactic (>= {thresholds.syntactic_margin:.2f} over the offset baseline).\n"
    f"Syntactic roles only where the probing stage scores the state ({', '.join(scored) or 'none'}); model {model}; each dump's dev "
    "sample; hover a head for its measures.",
), f"{params.out}/roles")

targets = []
for (task, seed), path in zip(runs["importance"], inputs.importance):
    heads = pl.read_parquet(path).filter(pl.col("element") == "head")
    targets.append(heads.select(pl.lit(task).alias("task"), pl.lit(seed, pl.Int64).alias("seed"), pl.lit("Michel importance").alias("target"),
                                "layer", "head", pl.col("normalized").alias("value")))
for path in inputs.deltas:
    heads = pl.read_parquet(path).filter((pl.col("kind") == "head") & pl.col("seed").is_not_null() & (pl.col("state") == "finetuned"))
    targets.append(heads.select("task", pl.col("seed").cast(pl.Int64), pl.format("score drop when disabled ({})", "mode").alias("target"),
                                "layer", "head", (-pl.col("delta")).alias("value")))
empty = pl.DataFrame(schema={"task": pl.String, "seed": pl.Int64, "target": pl.String, "layer": pl.Int32, "head": pl.Int32, "value": pl.Float64})
relations = head_roles.rank_correlations(roles, pl.concat(targets, how="vertical_relaxed") if targets else empty, *boot)
figures.write_table(verdicts.annotate(relations, seed="seed"), f"{params.out}/importance_relations", note=(
    "Spearman correlation over a fine-tuned model's heads between a role measure of its dump and Michel et al.'s importance "
    "(layer-normalised, on train) or the score drop when the head alone is disabled (dev); interval: bootstrap over heads."))
figures.save_chart(head_roles.correlation_chart(
    relations, "Are the important heads the confident, specialised ones? (Voita et al. 2019)",
    f"Spearman correlation over a fine-tuned model's heads between a role measure of its dump and each target, with its "
    f"{params.bootstrap['level']:.0%} bootstrap interval over heads (none when a role is too rare to resample); model {model}.",
), f"{params.out}/importance_relations")

records = [io.read_json(p) for p in inputs.gates]
gate_predictions = [pl.read_parquet(p) for p in inputs.gate_predictions]
metric_of = {r["task"]: primary_metric(glue.get_task(r["task"])) for r in records}
gate_table = head_gates.gates_table(records, gate_predictions, metric_of, *boot)
advantage = head_gates.mean_advantage(records, gate_predictions, metric_of, *boot)
figures.write_table(verdicts.annotate(advantage, seed="seed"), f"{params.out}/gates_advantage", note=(
    "Gates minus Michel et al.'s order at the same number of heads, mean over the strengths that prune some heads but not "
    "all; paired bootstrap over the dev examples."))
curves = [pl.read_parquet(p).select(pl.lit(t).alias("task"), pl.lit(s, pl.Int64).alias("seed"), "heads_pruned", "score")
          for (t, s), p in zip(runs["michel"], inputs.michel)]
if gate_table.height:
    gate_table = verdicts.annotate(gate_table, seed="seed")
    total = gate_table["heads"][0]
    curve = pl.concat(curves).with_columns((total - pl.col("heads_pruned")).alias("heads_kept"))
    chart = head_gates.gates_chart(gate_table, curve, "L0 head gates against Michel et al.'s pruning (Voita et al. 2019)",
                                   "Dev score (the curve's seeded dev sample) against heads kept: Michel et al.'s iterative curve "
                                   "(importance order, no retraining)\nand Hard Concrete gates trained with the L0 penalty at each "
                                   f"strength, the model's weights trained with them (Voita et al.) or frozen; model {model}.")
else:  # no gates in this config: the summary's files say so
    gate_table = pl.DataFrame({"note": ["no L0 gates in this config (head_roles.gates.tasks)"]})
    chart = head_gates.no_gates_chart(gate_table["note"][0])
figures.write_table(gate_table, f"{params.out}/gates", note=(
    "Per job: heads whose deterministic gate is not 0, the dev score with the gates, with Michel et al.'s ordering cut at "
    "the same number of heads (the fine-tuned model, never retrained) and with the full model; gates_minus_michel with a "
    "paired bootstrap interval over the dev examples. Trained-weights gates also retrain the model: compare frozen rows "
    "for the methods alone."))
figures.save_chart(chart, f"{params.out}/gates")
