"""Tables and figures of head importance and pruning for one model (rule pruning_summary): importance maps,
Michel et al.'s pruning curves and prunable shares, the lottery-ticket curves, the full / good / random / bad
table (Prasanna et al. 2020, mean and std over seeds), survival maps, Fleiss' kappa and the compacted models."""

from _common import log_to

log_to(snakemake.log[0])

import altair as alt
import numpy as np
import polars as pl
from safetensors.numpy import load_file

from bertology_core import figures, fitness, glue, io, pruning_stats
from bertology_core.metrics import primary_metric

params = snakemake.params
inputs = snakemake.input
model = snakemake.wildcards.model
out = f"results/pruning/{model}/summary"
runs = [tuple(r) for r in params.runs]
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model, fitness.seeds_by_task(runs))
methods = list(params.methods)
tasks = sorted({t for t, _ in runs})
seed_note = ", ".join(f"{t} {sum(1 for tt, _ in runs if tt == t)}" for t in tasks)
metric_note = "accuracy; Pearson r for STS-B"


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
    f"Expected absolute gradient of the loss with respect to each head's gate on {snakemake.config['pruning']['importance_split']} examples, "
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
line = alt.Chart(michel.to_pandas()).mark_line(point=True).encode(
    x=alt.X("share_pruned:Q", axis=alt.Axis(format="%"), title="heads pruned"),
    y=alt.Y("score:Q", title="dev score", scale=alt.Scale(zero=False)),
    color=alt.Color("seed:N"),
    tooltip=["task", "seed", "step", alt.Tooltip("share_pruned:Q", format=".0%"), alt.Tooltip("score:Q", format=".4f")],
).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4).resolve_scale(y="independent")
figures.save_chart(figures.with_caption(
    line, "Iterative head pruning (Michel et al. 2019, fig. 3)",
    f"Dev score ({metric_note}) as the least important heads are masked, {snakemake.config['pruning']['michel_step_share']:.0%} of heads per step "
    f"(importance {'recomputed each step' if snakemake.config['pruning']['michel_recompute'] else 'computed once'}).\n"
    f"Model {model}; seeds per task: {seed_note}. Prunable share (within {params.tolerance:.0%} of full) in michel.md.",
), f"{out}/michel")

# --- lottery-ticket curves ---
curve_runs = [(t, s, m) for t, s in runs for m in methods]
curves = pl.concat([tagged(p, t, s) for (t, s, m), p in zip(curve_runs, inputs.curves)], how="diagonal_relaxed")
curves = curves.select("task", "seed", "method", "iteration", "phase", "kept_share", "score", "share_of_full", "chosen",
                       *[c for c in ("heads_kept", "mlps_kept") if c in curves.columns]).sort("task", "method", "seed", "iteration")
figures.write_table(verdicts.annotate(curves, seed="seed"), f"{out}/lottery_curves", float_format="{:.4f}")
base = alt.Chart(curves.to_pandas()).encode(
    x=alt.X("kept_share:Q", axis=alt.Axis(format="%"), title="prunable elements kept", scale=alt.Scale(reverse=True)),
    y=alt.Y("share_of_full:Q", axis=alt.Axis(format="%"), title="share of the full model's dev score"),
    color=alt.Color("method:N"), detail="seed:N",
    tooltip=["task", "method", "seed", "iteration", "phase", alt.Tooltip("kept_share:Q", format=".1%"),
             alt.Tooltip("score:Q", format=".4f"), "chosen"],
)
chart = alt.layer(
    alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(params.keep)),
    base.mark_line(point=True, opacity=0.7),
    base.transform_filter(alt.datum.chosen).mark_point(size=120, shape="diamond", filled=True),
    data=curves.to_pandas(),
).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4)
figures.save_chart(figures.with_caption(
    chart, "Lottery tickets: m-pruning (weights) and s-pruning (heads and MLPs) (Prasanna et al. 2020)",
    f"Each line is one fine-tuning seed; pruning goes on while the dev score stays above {params.keep:.0%} of the full model (dashed); "
    f"diamonds: the chosen subnetworks.\nModel {model}; seeds per task: {seed_note}.",
), f"{out}/lottery_curves")

# --- full / good / random / bad ---
rows = []
networks = list(params.networks)
sub_runs = [tuple(r) for r in params.subnetwork_runs]
# the full model is compared on the seeds whose subnetworks were re-fine-tuned (all seeds of a task without any)
compared = {(t, s) for t, s, _ in sub_runs}
for (task, seed, network), path in zip(sub_runs, inputs.subnetworks):
    record = io.read_json(path)
    metric = primary_metric(glue.get_task(task))
    value = record["metrics"][metric]
    method, kind = ("all", "full") if network == "full" else network.split("-")
    rows.append({"task": task, "seed": seed, "method": method, "kind": kind, "metric": metric, "score": value,
                 "kept_share": record["parameters_kept_share"], "train_seconds": record["train_seconds"]})
if "full" not in networks or not sub_runs:  # the reference is the fine-tuning run itself
    for (task, seed), path in zip(runs, inputs.finetuned):
        if (task, seed) not in compared and any(t == task for t, _ in compared):
            continue
        metric = primary_metric(glue.get_task(task))
        value = io.read_json(path)["eval"]["dev"][metric]
        rows.append({"task": task, "seed": seed, "method": "all", "kind": "full", "metric": metric, "score": value,
                     "kept_share": 1.0, "train_seconds": None})
schema = {"task": pl.String, "seed": pl.Int64, "method": pl.String, "kind": pl.String, "metric": pl.String, "score": pl.Float64,
          "kept_share": pl.Float64, "train_seconds": pl.Float64}
subnetworks, no_ticket = pruning_stats.drop_seeds_without_ticket(pl.DataFrame(rows, schema=schema))
no_ticket_note = (
    " Left out of good/random/bad, as their pruning removed nothing (no ticket): "
    + ", ".join(f"{t} {m}-pruning seed {s}" for t, m, s in no_ticket) + "."
) if no_ticket else ""
kind_order = {"full": 0, "good": 1, "random": 2, "bad": 3}
lottery_table = subnetworks.group_by("task", "method", "kind", "metric").agg(
    pl.col("score").mean().alias("mean"), pl.col("score").std().alias("std"), pl.len().alias("seeds"),
    pl.col("seed").sort().alias("seed_list"),
    pl.col("kept_share").mean().alias("kept_share"),
).with_columns(pl.col("kind").replace_strict(kind_order, return_dtype=pl.Int8).alias("order")).sort("task", "method", "order").drop("order")
lottery_table = lottery_table.with_columns(
    pl.Series(fitness.COLUMN, [verdicts.label(t, s) for t, s in lottery_table.select("task", "seed_list").iter_rows()], dtype=pl.String),
    pl.col("seed_list").list.eval(pl.element().cast(pl.String)).list.join(", "),
)
figures.write_table(lottery_table, f"{out}/lottery", float_format="{:.4f}")
io.write_text(
    f"Re-fine-tuned subnetworks: {params.recipe_note}. Dev {metric_note}, mean ± std over seeds (seeds per task: {seed_note}).{no_ticket_note}\n\n"
    + open(f"{out}/lottery.md").read(), f"{out}/lottery.md",
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
        "Share of fine-tuning seeds whose s-pruning ticket keeps the head (1 = every seed); Fleiss' kappa of the masks "
        f"across seeds in stability.md.\nModel {model}; seeds per task: {seed_note}.",
        facet="task", domain=(0.0, 1.0), tooltip=["task", "Layer", "Head", "survival"],
    )
else:
    chart = alt.Chart(pl.DataFrame({"note": ["no s-pruning configured"]}).to_pandas()).mark_text().encode(text="note")
figures.save_chart(chart, f"{out}/survival")

# --- compacted models ---
compact_rows = [{"task": t, "seed": s, **io.read_json(p)} for (t, s), p in zip([r for r in runs if "s" in methods], inputs.compact)]
compact = pl.DataFrame(compact_rows).sort("task", "seed") if compact_rows else pl.DataFrame({"task": [], "seed": []})
figures.write_table(verdicts.annotate(compact, seed="seed") if compact.height else compact, f"{out}/compact")
