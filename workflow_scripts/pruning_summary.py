"""Tables and figures of head importance and pruning for one model (rule pruning_summary): importance maps,
Michel et al.'s pruning curves and prunable shares, the lottery-ticket curves, the full / good / random / bad
table (Prasanna et al. 2020) under each protocol (held_out: ticket chosen on half A of dev, reported on half B;
paper: chosen and reported on dev), over seeds and per seed, survival maps, Fleiss' kappa and the compacted
models."""

from _common import log_to

log_to(snakemake.log[0])

import altair as alt
import numpy as np
import polars as pl
from safetensors.numpy import load_file

from bertology_core import figures, fitness, glue, io, pruning_stats
from bertology_core.metrics import compute_metrics, primary_metric

params = snakemake.params
inputs = snakemake.input
model = snakemake.wildcards.model
out = snakemake.output.importance[0].rsplit("/", 1)[0]
runs = [tuple(r) for r in params.runs]
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, fitness.seeds_by_task(runs))
methods = list(params.methods)
tasks = sorted({t for t, _ in runs})
seed_note = ", ".join(f"{t} {sum(1 for tt, _ in runs if tt == t)}" for t in tasks)
metric_note = "accuracy; Pearson r for STS-B"
protocols = list(params.protocols)
data = params.data
importance_note = (f"{data['importance_examples'] or 'all'} {data['importance_split']} examples")
dev_note = "dev" if data["dev_examples"] is None else f"a seeded sample of {data['dev_examples']} dev examples"


def tagged(path, task, seed):
    return pl.read_parquet(path).with_columns(pl.lit(task).alias("task"), pl.lit(seed, dtype=pl.Int64).alias("seed"))


# --- importance ---
imp = pl.concat([tagged(p, t, s) for (t, s), p in zip(runs, inputs.importance)])
imp_mean = imp.group_by("task", "element", "layer", "head").agg(
    pl.col("importance").mean(), pl.col("normalized").mean().alias("normalized_mean"),
    pl.col("normalized").std().alias("normalized_std"), pl.len().alias("seeds"),
).sort("task", "element", "layer", "head", nulls_last=True)
figures.write_table(verdicts.annotate(imp_mean), f"{out}/importance", float_format="{:.4f}")
chart = figures.head_heatmap(
    imp_mean.filter(pl.col("element") == "head"), "normalized_mean",
    "Head importance (Michel et al. 2019: mean |dL/dgate|, l2-normalised per layer)",
    f"Expected absolute gradient of the loss with respect to each head's gate on {importance_note}, "
    f"normalised per layer, mean over seeds.\nModel {model}; seeds per task: {seed_note}.",
    facet="task", tooltip=["task", "Layer", "Head", "normalized_mean", "normalized_std", "importance", "seeds"],
)
figures.save_chart(chart, f"{out}/importance")

# --- Michel et al.'s pruning curves ---
michel = pl.concat([tagged(p, t, s).drop("heads_kept") for (t, s), p in zip(runs, inputs.michel)])
michel = michel.with_columns((pl.col("score") / pl.col("score").first().over("task", "seed")).alias("share_of_full"))
shares = []
for (task, seed), frame in michel.sort("task", "seed", "step").group_by(["task", "seed"], maintain_order=True):
    shares.append({"task": task, "seed": seed, "full_score": frame["score"][0],
                   "prunable_share": pruning_stats.prunable_share(frame["share_pruned"].to_list(), frame["score"].to_list(), params.tolerance),
                   "score_at_half": float(frame.filter(pl.col("share_pruned") >= 0.5)["score"][0])})
prunable = pl.DataFrame(shares).sort("task", "seed")
figures.write_table(verdicts.annotate(prunable, seed="seed"), f"{out}/michel")
michel_data_note = (
    f"Heads ranked by importance on {importance_note}, the curve scored on {dev_note}"
    + (" (the same split: the ranking sees the examples that score it)" if data["importance_split"] == "dev" else
       " (the ranking never sees the examples that score it)")
    + f"; the prunable share is read off that dev curve (within {params.tolerance:.0%} of full)."
)
io.write_text(f"{michel_data_note}\n\n" + open(f"{out}/michel.md").read(), f"{out}/michel.md")
line = alt.Chart(michel.to_pandas()).mark_line(point=True).encode(
    x=alt.X("share_pruned:Q", axis=alt.Axis(format="%"), title="heads pruned"),
    y=alt.Y("score:Q", title="dev score", scale=alt.Scale(zero=False)),
    color=alt.Color("seed:N"),
    tooltip=["task", "seed", "step", alt.Tooltip("share_pruned:Q", format=".0%"), alt.Tooltip("score:Q", format=".4f")],
).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4).resolve_scale(y="independent")
figures.save_chart(figures.with_caption(
    line, "Iterative head pruning (Michel et al. 2019, fig. 3)",
    f"Dev score ({metric_note}) as the least important heads are masked, {params.step_share:.0%} of heads per step "
    f"(importance {'recomputed each step' if params.recompute else 'computed once'}).\n"
    f"{michel_data_note}\nModel {model}; seeds per task: {seed_note}. Prunable shares in michel.md.",
), f"{out}/michel")

# --- lottery-ticket curves ---
ticket_runs = [(t, s, m, p) for t, s in runs for m in methods for p in protocols]
curves = pl.concat([tagged(path, t, s) for (t, s, m, p), path in zip(ticket_runs, inputs.curves)], how="diagonal_relaxed")
protocol_order = pl.col("protocol").replace_strict({p: i for i, p in enumerate(pruning_stats.PROTOCOLS)}, return_dtype=pl.Int8)
curves = curves.select("task", "seed", "method", "protocol", "iteration", "phase", "kept_share", "score", "share_of_full", "chosen", "floor",
                       *[c for c in ("heads_kept", "mlps_kept") if c in curves.columns]
                       ).sort("task", "method", "seed", protocol_order, "iteration").with_columns(
    pl.col("protocol").replace_strict(pruning_stats.PROTOCOLS, return_dtype=pl.String))
figures.write_table(verdicts.annotate(curves, seed="seed"), f"{out}/lottery_curves", float_format="{:.4f}")
base = alt.Chart(curves.to_pandas()).encode(
    x=alt.X("kept_share:Q", axis=alt.Axis(format="%"), title="prunable elements kept", scale=alt.Scale(reverse=True)),
    y=alt.Y("share_of_full:Q", axis=alt.Axis(format="%"), title="share of the full model's score on the choosing examples"),
    color=alt.Color("method:N"), strokeDash=alt.StrokeDash("protocol:N"), detail="seed:N",
    tooltip=["task", "method", "protocol", "seed", "iteration", "phase", alt.Tooltip("kept_share:Q", format=".1%"),
             alt.Tooltip("score:Q", format=".4f"), "chosen"],
)
chart = alt.layer(
    alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(params.keep)),
    base.mark_line(point=True, opacity=0.7),
    base.transform_filter(alt.datum.chosen).mark_point(size=120, shape="diamond", filled=True),
    data=curves.to_pandas(),
).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4)
choosing_note = (
    f"{pruning_stats.PROTOCOLS['held_out']}: the score is on half A of dev (split seed {data['split_seed']}"
    + ("" if data["dev_examples"] is None else f", a seeded sample of {data['dev_examples']}") + ")"
    + (f"; {pruning_stats.PROTOCOLS['paper']}: on all of dev" if "paper" in protocols else "")
    + ("; floor: the best constant prediction's score on the choosing examples, where pruning also stops" if params.keep_above_constant else "")
)
figures.save_chart(figures.with_caption(
    chart, "Lottery tickets: m-pruning (weights) and s-pruning (heads and MLPs) (Prasanna et al. 2020)",
    f"Each line is one fine-tuning seed and protocol; pruning goes on while the score stays above {params.keep:.0%} of the full model's "
    f"(dashed); diamonds: the chosen subnetworks.\n{choosing_note}.\nModel {model}; seeds per task: {seed_note}.",
), f"{out}/lottery_curves")

# --- full / good / random / bad, under each protocol ---
rows = []
networks = list(params.networks)
sub_runs = [tuple(r) for r in params.subnetwork_runs]
# the full model is compared on the seeds whose subnetworks were re-fine-tuned (all seeds of a task without any)
compared = {(t, s) for t, s, _ in sub_runs}
dev_frames = {path.split("/")[-2]: pl.read_parquet(path) for path in inputs.dev}
sets = {task: pruning_stats.report_sets(frame, stratify=not glue.get_task(task).is_regression, split_seed=data["split_seed"])
        for task, frame in dev_frames.items()}


def rows_for(task, seed, method, kind, protocols_of, predictions, kept_share):
    """One row per protocol the network is reported under: its score on that protocol's report examples and on
    each of half A, half B and dev. No training time: results must not differ between two runs of one config."""
    glue_task = glue.get_task(task)
    metric = primary_metric(glue_task)
    scores = pruning_stats.scores_on_sets(predictions, sets[task], lambda p, y: compute_metrics(glue_task, p, y)[metric])
    for protocol in protocols_of:
        report = pruning_stats.PROTOCOL_REPORT_SET[protocol]
        rows.append({"task": task, "seed": seed, "method": method, "kind": kind, "protocol": protocol, "metric": metric,
                     "score": scores[report], **scores, "examples": len(sets[task][report]), "kept_share": kept_share})


for (task, seed, network), path, predictions in zip(sub_runs, inputs.subnetworks, inputs.subnetwork_predictions):
    record = io.read_json(path)
    method, kind, *protocol = ("all", "full") if network == "full" else network.split("-")
    # a ticket's subnetworks under its protocol; the full model under each
    rows_for(task, seed, method, kind, protocol or protocols, pl.read_parquet(predictions), record["parameters_kept_share"])
if "full" not in networks or not sub_runs:  # the reference is the fine-tuned model itself, from its dev predictions
    finetuned = dict(zip(runs, inputs.finetuned_predictions))
    for task, seed in runs:
        if (task, seed) not in compared and any(t == task for t, _ in compared):
            continue
        rows_for(task, seed, "all", "full", protocols, pl.read_parquet(finetuned[(task, seed)]), 1.0)
schema = {"task": pl.String, "seed": pl.Int64, "method": pl.String, "kind": pl.String, "protocol": pl.String, "metric": pl.String,
          "score": pl.Float64, "half_a": pl.Float64, "half_b": pl.Float64, "dev": pl.Float64, "examples": pl.Int64,
          "kept_share": pl.Float64}
subnetworks, no_ticket = pruning_stats.drop_seeds_without_ticket(pl.DataFrame(rows, schema=schema))
no_ticket_note = (
    " Left out of good/random/bad, as their pruning removed nothing (no ticket): "
    + ", ".join(f"{t} {m}-pruning seed {s} ({pruning_stats.PROTOCOLS[p]})" for t, m, s, p in no_ticket) + "."
) if no_ticket else ""
seed_table, lottery_table = pruning_stats.lottery_tables(subnetworks)
lottery_table = lottery_table.with_columns(
    pl.Series(fitness.COLUMN, [verdicts.label(t, s) for t, s in lottery_table.select("task", "seed_list").iter_rows()], dtype=pl.String),
    pl.col("seed_list").list.eval(pl.element().cast(pl.String)).list.join(", "),
)
floor_note = (" Both protocols also stop where the score falls to the best constant prediction's (pruning.keep_above_constant, "
              "not in the paper)." if params.keep_above_constant else "")
protocol_note = (
    f"protocol '{pruning_stats.PROTOCOLS['held_out']}': the ticket (where the {params.keep:.0%} rule stops) is chosen on half A of dev "
    f"(split seed {data['split_seed']}, stratified by label for classification"
    + ("" if data["dev_examples"] is None else f"; a seeded sample of {data['dev_examples']} of it")
    + "), and every row, full included, is reported on half B"
    + (f"; '{pruning_stats.PROTOCOLS['paper']}' (Prasanna et al.'s protocol): chosen on all of dev and reported on all of dev. "
       "half_a, half_b, dev: each network on each set. minus_held_out: the reported score minus the held-out protocol's "
       "(the two numbers a reader compares; they differ in report set, ticket and re-fine-tuning run); "
       "half_b_minus_held_out: both on half B, which the held-out ticket never saw, so only the ticket differs"
       if "paper" in protocols else "; half_a, half_b, dev: each network on each set")
    + f". s-pruning's importance: {importance_note} under both protocols.{floor_note}"
)
figures.write_table(lottery_table, f"{out}/lottery", float_format="{:.4f}")
io.write_text(
    f"Re-fine-tuned subnetworks: {params.recipe_note}. {protocol_note} Scores: {metric_note}, mean ± std over seeds "
    f"(seeds per task: {seed_note}; per seed in lottery_seeds.md).{no_ticket_note}\n\n"
    + open(f"{out}/lottery.md").read(), f"{out}/lottery.md",
)
figures.write_table(verdicts.annotate(seed_table, seed="seed"), f"{out}/lottery_seeds", float_format="{:.4f}")
io.write_text(
    f"Re-fine-tuned subnetworks per seed: {params.recipe_note}. {protocol_note}{no_ticket_note}\n\n"
    + open(f"{out}/lottery_seeds.md").read(), f"{out}/lottery_seeds.md",
)

# --- survival and stability ---
def kappa_interval(stack):
    low, high = pruning_stats.fleiss_kappa_interval(stack, params.bootstrap["resamples"], params.bootstrap["level"], params.bootstrap["seed"])
    return {"kappa_ci_low": low, "kappa_ci_high": high}


mask_paths = dict(zip([(t, s, m) for t, s in runs for m in methods], inputs.masks))
survival_rows, stability_rows = [], []
for task in tasks:
    seeds = [s for t, s in runs if t == task]
    for method in methods:
        per_seed = [load_file(mask_paths[(task, s, method)]) for s in seeds]  # one task and method at a time
        if method == "s":
            for element in ("heads", "mlps"):
                stack = np.stack([m[element].astype(bool) for m in per_seed])
                survival = pruning_stats.survival(stack)
                for index in np.ndindex(survival.shape):
                    survival_rows.append({"task": task, "method": method, "element": element[:-1], "layer": index[0],
                                          "head": index[1] if len(index) > 1 else None, "survival": float(survival[index])})
                stability_rows.append({"task": task, "method": method, "element": element, "seeds": len(seeds),
                                       "kept_share": float(stack.mean()), "fleiss_kappa": pruning_stats.fleiss_kappa(stack),
                                       **kappa_interval(stack)})
        else:
            names = sorted(per_seed[0])
            stack = np.stack([np.concatenate([m[n].astype(bool).reshape(-1) for n in names]) for m in per_seed])
            stability_rows.append({"task": task, "method": method, "element": "weights", "seeds": len(seeds),
                                   "kept_share": float(stack.mean()), "fleiss_kappa": pruning_stats.fleiss_kappa(stack),
                                   **kappa_interval(stack)})
            for name in names:  # share of each matrix kept, mean over seeds
                layer = int(name.split(".layer.")[1].split(".")[0])
                matrix = name.split(".layer.")[1].split(".", 1)[1]
                survival_rows.append({"task": task, "method": method, "element": matrix, "layer": layer, "head": None,
                                      "survival": float(np.mean([m[name].mean() for m in per_seed]))})
survival = pl.DataFrame(survival_rows, schema_overrides={"head": pl.Int64}).sort("task", "method", "element", "layer", "head", nulls_last=True)
figures.write_table(verdicts.annotate(survival), f"{out}/survival")
stability = pl.DataFrame(stability_rows).sort("task", "method", "element")
figures.write_table(verdicts.annotate(stability), f"{out}/stability")
head_survival = survival.filter(pl.col("element") == "head")
if head_survival.height:
    chart = figures.head_heatmap(
        head_survival, "survival", "Which heads survive s-pruning, across seeds (Prasanna et al. 2020)",
        "Share of fine-tuning seeds whose s-pruning ticket keeps the head (1 = every seed; the held-out tickets, chosen on half A "
        f"of dev); Fleiss' kappa of the masks across seeds in stability.md.\nModel {model}; seeds per task: {seed_note}.",
        facet="task", domain=(0.0, 1.0), tooltip=["task", "Layer", "Head", "survival"],
    )
else:
    chart = alt.Chart(pl.DataFrame({"note": ["no s-pruning configured"]}).to_pandas()).mark_text().encode(text="note")
figures.save_chart(chart, f"{out}/survival")

# --- compacted models ---
compact_rows = [{"task": t, "seed": s, **io.read_json(p)} for (t, s), p in zip([r for r in runs if "s" in methods], inputs.compact)]
compact = pl.DataFrame(compact_rows).sort("task", "seed") if compact_rows else pl.DataFrame({"task": [], "seed": []})
figures.write_table(verdicts.annotate(compact, seed="seed") if compact.height else compact, f"{out}/compact")
