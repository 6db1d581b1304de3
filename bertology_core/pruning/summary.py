"""The tables and figures of the pruning stage for one model: head importance maps, Michel et al.'s pruning curves
and prunable shares, the lottery-ticket curves, Prasanna et al.'s full / good / random / bad table under each
protocol (over seeds and per seed), which heads survive s-pruning across seeds with the masks' Fleiss' kappa, and
the compacted models. The statistics are :mod:`bertology_core.pruning.stats`'; this module gathers the per-run
outputs into tables, writes the notes a reader needs beside them, and draws the figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import numpy as np
import polars as pl

from bertology_core.data.tasks import Task
from bertology_core.fitness.verdict_stats import COLUMN, Verdicts
from bertology_core.pruning import stats
from bertology_core.summaries import figures
from bertology_core.stats.metrics import compute_metrics, main_metric_note

Run = tuple[str, int]  # (task, seed)


@dataclass(frozen=True)
class PruningSettings:
    """What the captions and notes say each result was chosen and scored on (config ``pruning``)."""

    methods: Sequence[str]
    protocols: Sequence[str]
    keep: float
    keep_above_constant: bool
    tolerance: float
    step_share: float
    recompute: bool
    importance_split: str
    importance_examples: int | None
    importance_granularity: str
    dev_examples: int | None
    split_seed: int
    # s-pruning's (pruning.ticket_importance_granularity); importance_granularity is Michel et al.'s curve's
    ticket_importance_granularity: str = "batch"

    def _importance_note(self, granularity: str) -> str:
        reference = {"token": "Michel et al.'s code", "example": "eq. 2 per example", "batch": "Prasanna et al.'s code"}
        return (f"{self.importance_examples or 'all'} {self.importance_split} examples, |gradient| per "
                f"{granularity} ({reference.get(granularity, 'see the config')})")

    @property
    def importance_note(self) -> str:
        """What the importance map and Michel et al.'s curve rank by."""
        return self._importance_note(self.importance_granularity)

    @property
    def ticket_importance_note(self) -> str:
        """What s-pruning's lottery tickets rank by."""
        return self._importance_note(self.ticket_importance_granularity)

    @property
    def dev_note(self) -> str:
        return "dev" if self.dev_examples is None else f"a seeded sample of {self.dev_examples} dev examples"


def seeds_note(runs: Sequence[Run]) -> str:
    """"MRPC 3, SST-2 3": seeds per task."""
    tasks = sorted({t for t, _ in runs})
    return ", ".join(f"{t} {sum(1 for tt, _ in runs if tt == t)}" for t in tasks)


def tagged(frame: pl.DataFrame, task: str, seed: int) -> pl.DataFrame:
    return frame.with_columns(pl.lit(task).alias("task"), pl.lit(seed, dtype=pl.Int64).alias("seed"))


# ------------------------------------------------------------------------------------------------ importance


def importance_table(per_run: Mapping[Run, pl.DataFrame]) -> pl.DataFrame:
    """Head and MLP importance per task, mean (and std of the normalised value) over seeds."""
    frame = pl.concat([tagged(f, t, s) for (t, s), f in per_run.items()])
    return frame.group_by("task", "element", "layer", "head").agg(
        pl.col("importance").mean(), pl.col("normalized").mean().alias("normalized_mean"),
        pl.col("normalized").std().alias("normalized_std"), pl.len().alias("seeds"),
    ).sort("task", "element", "layer", "head", nulls_last=True)


def importance_chart(table: pl.DataFrame, model: str, settings: PruningSettings, runs: Sequence[Run]) -> alt.Chart:
    return figures.head_heatmap(
        table.filter(pl.col("element") == "head"), "normalized_mean",
        "Head importance (Michel et al. 2019: mean |dL/dgate|, l2-normalised per layer)",
        f"Expected absolute gradient of the loss with respect to each head's gate on {settings.importance_note}, "
        f"normalised per layer, mean over seeds.\nModel {model}; seeds per task: {seeds_note(runs)}.",
        facet="task", tooltip=["task", "Layer", "Head", "normalized_mean", "normalized_std", "importance", "seeds"],
    )


# ------------------------------------------------------------------------------------------------ Michel's curves


def michel_curves(per_run: Mapping[Run, pl.DataFrame]) -> pl.DataFrame:
    """Every run's curve with ``share_of_full`` (the score over the unpruned model's)."""
    frame = pl.concat([tagged(f, t, s).drop("heads_kept") for (t, s), f in per_run.items()])
    return frame.with_columns((pl.col("score") / pl.col("score").first().over("task", "seed")).alias("share_of_full"))


def prunable_shares(curves: pl.DataFrame, tolerance: float) -> pl.DataFrame:
    """Per run: the full score, the share of heads prunable within ``tolerance`` of it, the score at half pruned."""
    rows = []
    for (task, seed), frame in curves.sort("task", "seed", "step").group_by(["task", "seed"], maintain_order=True):
        rows.append({"task": task, "seed": seed, "full_score": frame["score"][0],
                     "prunable_share": stats.prunable_share(frame["share_pruned"].to_list(), frame["score"].to_list(), tolerance),
                     "score_at_half": float(frame.filter(pl.col("share_pruned") >= 0.5)["score"][0])})
    return pl.DataFrame(rows).sort("task", "seed")


def michel_note(settings: PruningSettings) -> str:
    return (
        f"Heads ranked by importance on {settings.importance_note}, the curve scored on {settings.dev_note}"
        + (" (the same split: the ranking sees the examples that score it)" if settings.importance_split == "dev" else
           " (the ranking never sees the examples that score it)")
        + f"; the prunable share is read off that dev curve (within {settings.tolerance:.0%} of full)."
    )


def michel_chart(curves: pl.DataFrame, model: str, settings: PruningSettings, runs: Sequence[Run],
                 tasks: Mapping[str, Task]) -> alt.Chart:
    """Michel et al.'s fig. 3: the dev score, each task's main metric (``tasks``: name -> task), per step of pruning."""
    line = alt.Chart(curves.to_pandas()).mark_line(point=True).encode(
        x=alt.X("share_pruned:Q", axis=alt.Axis(format="%"), title="heads pruned"),
        y=alt.Y("score:Q", title="dev score", scale=alt.Scale(zero=False)),
        color=alt.Color("seed:N"),
        tooltip=["task", "seed", "step", alt.Tooltip("share_pruned:Q", format=".0%"), alt.Tooltip("score:Q", format=".4f")],
    ).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4).resolve_scale(y="independent")
    metric = main_metric_note(tasks[t] for t in sorted({t for t, _ in runs}))
    return figures.with_caption(
        line, "Iterative head pruning (Michel et al. 2019, fig. 3)",
        f"Dev score ({metric}) as the least important heads are masked, {settings.step_share:.0%} of heads per step "
        f"(importance {'recomputed each step' if settings.recompute else 'computed once'}).\n"
        f"{michel_note(settings)}\nModel {model}; seeds per task: {seeds_note(runs)}. Prunable shares in the michel table.",
    )


# ------------------------------------------------------------------------------------------------ lottery tickets


def lottery_curves(per_ticket: Mapping[tuple[str, int, str, str], pl.DataFrame]) -> pl.DataFrame:
    """Every ticket's pruning curve (``per_ticket``: (task, seed, method, protocol) -> curve), protocols named."""
    curves = pl.concat([tagged(f, t, s) for (t, s, _, _), f in per_ticket.items()], how="diagonal_relaxed")
    protocol_order = pl.col("protocol").replace_strict({p: i for i, p in enumerate(stats.PROTOCOLS)}, return_dtype=pl.Int8)
    return curves.select("task", "seed", "method", "protocol", "iteration", "phase", "kept_share", "score", "share_of_full", "chosen",
                         "floor", *[c for c in ("heads_kept", "mlps_kept") if c in curves.columns]
                         ).sort("task", "method", "seed", protocol_order, "iteration").with_columns(
        pl.col("protocol").replace_strict(stats.PROTOCOLS, return_dtype=pl.String))


def lottery_chart(curves: pl.DataFrame, model: str, settings: PruningSettings, runs: Sequence[Run]) -> alt.Chart:
    base = alt.Chart(curves.to_pandas()).encode(
        x=alt.X("kept_share:Q", axis=alt.Axis(format="%"), title="prunable elements kept", scale=alt.Scale(reverse=True)),
        y=alt.Y("share_of_full:Q", axis=alt.Axis(format="%"), title="share of the full model's score on the choosing examples"),
        color=alt.Color("method:N"), strokeDash=alt.StrokeDash("protocol:N"), detail="seed:N",
        tooltip=["task", "method", "protocol", "seed", "iteration", "phase", alt.Tooltip("kept_share:Q", format=".1%"),
                 alt.Tooltip("score:Q", format=".4f"), "chosen"],
    )
    chart = alt.layer(
        alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(settings.keep)),
        base.mark_line(point=True, opacity=0.7),
        base.transform_filter(alt.datum.chosen).mark_point(size=120, shape="diamond", filled=True),
        data=curves.to_pandas(),
    ).properties(width=220, height=160).facet(facet=alt.Facet("task:N", title=None), columns=4)
    choosing_note = (
        f"{stats.PROTOCOLS['held_out']}: the score is on half A of dev (split seed {settings.split_seed}"
        + ("" if settings.dev_examples is None else f", a seeded sample of {settings.dev_examples}") + ")"
        + (f"; {stats.PROTOCOLS['paper']}: on all of dev" if "paper" in settings.protocols else "")
        + ("; floor: the best constant prediction's score on the choosing examples, where pruning also stops"
           if settings.keep_above_constant else "")
    )
    return figures.with_caption(
        chart, "Lottery tickets: m-pruning (weights) and s-pruning (heads and MLPs) (Prasanna et al. 2020)",
        f"Each line is one fine-tuning seed and protocol; pruning goes on while the score stays above {settings.keep:.0%} of "
        f"the full model's (dashed); diamonds: the chosen subnetworks.\n{choosing_note}.\nModel {model}; seeds per task: "
        f"{seeds_note(runs)}.",
    )


SUBNETWORK_SCHEMA = {
    "task": pl.String, "seed": pl.Int64, "method": pl.String, "kind": pl.String, "protocol": pl.String, "metric": pl.String,
    "score": pl.Float64, "half_a": pl.Float64, "half_b": pl.Float64, "dev": pl.Float64, "examples": pl.Int64,
    "kept_share": pl.Float64,
}


@dataclass(frozen=True)
class Network:
    """One network to report: a re-fine-tuned subnetwork (method, kind good/random/bad, its protocol) or the full
    model (method "all", kind "full", every protocol), with its per-example dev predictions."""

    task: str
    seed: int
    method: str
    kind: str
    protocols: Sequence[str]
    predictions: pl.DataFrame
    kept_share: float


def subnetwork_table(networks: Sequence[Network], dev: Mapping[str, pl.DataFrame], split_seed: int,
                     task_of: Mapping[str, Task]) -> pl.DataFrame:
    """One row per network and protocol it is reported under: its score on that protocol's report examples and on
    each of half A, half B and dev (``task_of``: each task by name). No training time: results must not differ between two runs of one config."""
    sets = {task: stats.report_sets(frame, stratify=task_of[task].stratifies, split_seed=split_seed)
            for task, frame in dev.items()}
    rows = []
    for network in networks:
        task = task_of[network.task]
        metric = task.main_metric
        scores = stats.scores_on_sets(network.predictions, sets[network.task],
                                              lambda p, y, task=task, metric=metric: compute_metrics(task, p, y)[metric])
        for protocol in network.protocols:
            report = stats.PROTOCOL_REPORT_SET[protocol]
            rows.append({"task": network.task, "seed": network.seed, "method": network.method, "kind": network.kind,
                         "protocol": protocol, "metric": metric, "score": scores[report], **scores,
                         "examples": len(sets[network.task][report]), "kept_share": network.kept_share})
    return pl.DataFrame(rows, schema=SUBNETWORK_SCHEMA)


def protocol_note(settings: PruningSettings) -> str:
    floor_note = (" Both protocols also stop where the score falls to the best constant prediction's (pruning.keep_above_constant, "
                  "not in the paper)." if settings.keep_above_constant else "")
    return (
        f"protocol '{stats.PROTOCOLS['held_out']}': the ticket (where the {settings.keep:.0%} rule stops) is chosen on "
        f"half A of dev (split seed {settings.split_seed}, stratified by label for classification"
        + ("" if settings.dev_examples is None else f"; a seeded sample of {settings.dev_examples} of it")
        + "), and every row, full included, is reported on half B"
        + (f"; '{stats.PROTOCOLS['paper']}' (Prasanna et al.'s protocol): chosen on all of dev and reported on all of dev. "
           "half_a, half_b, dev: each network on each set. minus_held_out: the reported score minus the held-out protocol's "
           "(the two numbers a reader compares; they differ in report set, ticket and re-fine-tuning run); "
           "half_b_minus_held_out: both on half B, which the held-out ticket never saw, so only the ticket differs"
           if "paper" in settings.protocols else "; half_a, half_b, dev: each network on each set")
        + f". s-pruning's importance: {settings.ticket_importance_note} under both protocols.{floor_note}"
    )


def no_ticket_note(no_ticket: Sequence[tuple[str, str, int, str]]) -> str:
    return (
        " Left out of good/random/bad, as their pruning removed nothing (no ticket): "
        + ", ".join(f"{t} {m}-pruning seed {s} ({stats.PROTOCOLS[p]})" for t, m, s, p in no_ticket) + "."
    ) if no_ticket else ""


# ------------------------------------------------------------------------------------------------ survival, stability


def layer_and_matrix(name: str) -> tuple[int, str]:
    """(layer, matrix) of an encoder weight matrix's module name: the first numeric part is its layer in the layer
    list (``bert.encoder.layer.3.attention.self.query`` -> 3, ``attention.self.query``; ``model.layers.3.attn.Wqkv``
    -> 3, ``attn.Wqkv``); where weights are shared across depth (ALBERT) it is the shared group, which serves several
    depths (``albert.encoder.albert_layer_groups.0.albert_layers.0.ffn`` -> 0, ``albert_layers.0.ffn``)."""
    parts = name.split(".")
    index = next((i for i, part in enumerate(parts) if part.isdigit()), None)
    if index is None or index == len(parts) - 1:
        raise ValueError(f"weight mask {name!r}: no layer number in the module name")
    return int(parts[index]), ".".join(parts[index + 1:])


def prunes_something(mask: Mapping[str, np.ndarray]) -> bool:
    """Whether one seed's mask file removed any element: a mask that keeps everything is no ticket (its pruning
    stopped at iteration 0), as :func:`bertology_core.pruning.stats.drop_seeds_without_ticket` counts it."""
    return any(not np.asarray(values, dtype=bool).all() for values in mask.values())


def survival_and_stability(masks: Mapping[tuple[str, str], Sequence[tuple[int, Mapping[str, np.ndarray]]]],
                           kappa_interval: Callable[[np.ndarray], tuple[float, float]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Which elements survive pruning across seeds, and how much the seeds' masks agree (Fleiss' kappa with an
    interval). ``masks``: (task, method) -> (seed, that seed's mask file's tensors) per seed (s: ``heads`` [layers,
    heads] and ``mlps`` [layers]; m: one mask per weight matrix).

    Only seeds with a ticket count: a seed whose pruning removed nothing contributes an all-ones mask, which is not a
    subnetwork, and would move kappa for a reason unrelated to stability (two seeds with identical half-size masks
    plus one all-ones mask give about 0.25); the stability table names those seeds (``seeds_without_ticket``). Beside
    kappa: the spread of the seeds' kept shares (masks that stop at different sizes lower kappa too), and kappa with
    each ticket seed left out in turn (``kappa_loo_min``, ``kappa_loo_max``: how much one seed moves it; the bootstrap
    interval resamples elements with the seeds fixed, which says nothing about seeds), and ``kappa_max``, the kappa
    nested masks of the seeds' sizes would reach (:func:`~bertology_core.pruning.stats.fleiss_kappa_ceiling`)."""
    survival_rows: list[dict[str, Any]] = []
    stability_rows: list[dict[str, Any]] = []

    def stability(task: str, method: str, element: str, stack: np.ndarray, without: list[int]) -> dict[str, Any]:
        low, high = kappa_interval(stack) if len(stack) >= 2 else (float("nan"), float("nan"))
        kept = stack.reshape(len(stack), -1).mean(1) if len(stack) else np.zeros(0)
        left_out = [stats.fleiss_kappa(np.delete(stack, i, axis=0)) for i in range(len(stack))] if len(stack) >= 3 else []
        return {"task": task, "method": method, "element": element, "seeds": len(stack),
                "seeds_without_ticket": ", ".join(map(str, without)),
                "kept_share": float(kept.mean()) if len(kept) else float("nan"),
                "kept_share_min": float(kept.min()) if len(kept) else float("nan"),
                "kept_share_max": float(kept.max()) if len(kept) else float("nan"),
                "fleiss_kappa": stats.fleiss_kappa(stack) if len(stack) else float("nan"),
                "kappa_max": stats.fleiss_kappa_ceiling(stack) if len(stack) else float("nan"),
                "kappa_ci_low": low, "kappa_ci_high": high,
                "kappa_loo_min": float(np.nanmin(left_out)) if left_out and not np.isnan(left_out).all() else float("nan"),
                "kappa_loo_max": float(np.nanmax(left_out)) if left_out and not np.isnan(left_out).all() else float("nan")}

    for (task, method), seeded in masks.items():
        if method == "s":
            for element in ("heads", "mlps"):
                # a seed whose pruning removed MLPs but no head has no head ticket (and the other way round)
                without = [seed for seed, mask in seeded if not prunes_something({element: mask[element]})]
                per_seed = [mask for _, mask in seeded if prunes_something({element: mask[element]})]
                stack = np.stack([m[element].astype(bool) for m in per_seed]) if per_seed else np.zeros((0, 0), bool)
                if per_seed:
                    survival = stats.survival(stack)
                    for index in np.ndindex(survival.shape):
                        survival_rows.append({"task": task, "method": method, "element": element[:-1], "layer": index[0],
                                              "head": index[1] if len(index) > 1 else None, "survival": float(survival[index])})
                stability_rows.append(stability(task, method, element, stack, without))
        else:
            without = [seed for seed, mask in seeded if not prunes_something(mask)]
            per_seed = [mask for _, mask in seeded if prunes_something(mask)]
            names = sorted(seeded[0][1])
            stack = (np.stack([np.concatenate([m[n].astype(bool).reshape(-1) for n in names]) for m in per_seed])
                     if per_seed else np.zeros((0, 0), bool))
            stability_rows.append(stability(task, method, "weights", stack, without))
            for name in names if per_seed else ():  # share of each matrix kept, mean over the ticket seeds
                layer, matrix = layer_and_matrix(name)
                survival_rows.append({"task": task, "method": method, "element": matrix, "layer": layer, "head": None,
                                      "survival": float(np.mean([m[name].mean() for m in per_seed]))})
    survival_schema = {"task": pl.String, "method": pl.String, "element": pl.String, "layer": pl.Int64, "head": pl.Int64,
                       "survival": pl.Float64}
    survival = pl.DataFrame(survival_rows, schema=survival_schema).sort("task", "method", "element", "layer", "head",
                                                                         nulls_last=True)
    return survival, pl.DataFrame(stability_rows).sort("task", "method", "element")


def survival_chart(survival: pl.DataFrame, model: str, runs: Sequence[Run]) -> alt.Chart:
    heads = survival.filter(pl.col("element") == "head")
    if not heads.height:
        return alt.Chart(pl.DataFrame({"note": ["no s-pruning configured"]}).to_pandas()).mark_text().encode(text="note")
    return figures.head_heatmap(
        heads, "survival", "Which heads survive s-pruning, across seeds (Prasanna et al. 2020)",
        "Share of the fine-tuning seeds with a ticket whose s-pruning ticket keeps the head (1 = every such seed; the held-out "
        "tickets, chosen on half A of dev; a seed whose pruning removed nothing is left out, named in the stability table); Fleiss' "
        f"kappa of the masks across seeds in the stability table.\nModel {model}; seeds per task: {seeds_note(runs)}.",
        facet="task", domain=(0.0, 1.0), tooltip=["task", "Layer", "Head", "survival"],
    )


def compact_table(records: Mapping[Run, Mapping[str, Any]]) -> pl.DataFrame:
    rows = [{"task": t, "seed": s, **record} for (t, s), record in records.items()]
    return pl.DataFrame(rows).sort("task", "seed") if rows else pl.DataFrame({"task": [], "seed": []})


# ------------------------------------------------------------------------------------------------ the whole stage


STABILITY_NOTE = (
    "Fleiss' kappa over the seeds whose pruning kept a ticket (seeds_without_ticket: those whose pruning removed nothing, "
    "left out); kappa_ci: bootstrap over the masked elements, seeds fixed; kappa_loo_min/max: kappa with each ticket seed left "
    "out in turn; kept_share_min/max: the spread of the ticket seeds' kept shares (masks of different sizes lower kappa).")


def summarise(
    model: str, runs: Sequence[Run], importance: Mapping[Run, pl.DataFrame], michel: Mapping[Run, pl.DataFrame],
    curves: Mapping[tuple[str, int, str, str], pl.DataFrame], networks: Sequence[Network], dev: Mapping[str, pl.DataFrame],
    masks: Mapping[tuple[str, str], Sequence[tuple[int, Mapping[str, np.ndarray]]]], compact: Mapping[Run, Mapping[str, Any]],
    verdicts: Verdicts, tasks: Mapping[str, Task], settings: PruningSettings, recipe_note: str,
    kappa_interval: Callable[[np.ndarray], tuple[float, float]],
) -> dict[str, figures.Output]:
    """Every summary of the stage for one model, from each run's outputs: (task, seed) -> its importance, its Michel
    curve and its compaction record; (task, seed, method, protocol) -> a ticket's curve; the networks to score
    (:class:`Network`) on each task's dev split; (task, method) -> each seed's ticket masks. ``recipe_note`` says how
    the subnetworks were re-fine-tuned; ``kappa_interval`` gives the masks' Fleiss' kappa interval."""
    importance_frame = importance_table(importance)
    michel_frame = michel_curves(michel)
    curve_frame = lottery_curves(curves)
    subnetworks, no_ticket = stats.drop_seeds_without_ticket(subnetwork_table(networks, dev, settings.split_seed, tasks))
    seed_table, lottery_table = stats.lottery_tables(subnetworks)
    lottery_table = lottery_table.with_columns(
        pl.Series(COLUMN, [verdicts.label(t, s) for t, s in lottery_table.select("task", "seed_list").iter_rows()], dtype=pl.String),
        pl.col("seed_list").list.eval(pl.element().cast(pl.String)).list.join(", "),
    )
    protocols, tickets = protocol_note(settings), no_ticket_note(no_ticket)
    metric = main_metric_note(tasks[t] for t in sorted({t for t, _ in runs}))
    survival, stability = survival_and_stability(masks, kappa_interval)
    compact_frame = compact_table(compact)
    return {
        "importance": figures.Output(verdicts.annotate(importance_frame), figure=importance_chart(importance_frame, model, settings, runs)),
        "michel": figures.Output(verdicts.annotate(prunable_shares(michel_frame, settings.tolerance), seed="seed"),
                                 michel_note(settings), michel_chart(michel_frame, model, settings, runs, tasks)),
        "lottery_curves": figures.Output(verdicts.annotate(curve_frame, seed="seed"), figure=lottery_chart(curve_frame, model, settings, runs)),
        "lottery": figures.Output(lottery_table, (
            f"Re-fine-tuned subnetworks: {recipe_note}. {protocols} Scores: {metric}, mean ± std over seeds "
            f"(seeds per task: {seeds_note(runs)}; per seed in the lottery_seeds table).{tickets}")),
        "lottery_seeds": figures.Output(verdicts.annotate(seed_table, seed="seed"),
                                        f"Re-fine-tuned subnetworks per seed: {recipe_note}. {protocols}{tickets}"),
        "survival": figures.Output(verdicts.annotate(survival), figure=survival_chart(survival, model, runs)),
        "stability": figures.Output(verdicts.annotate(stability), STABILITY_NOTE),
        "compact": figures.Output(verdicts.annotate(compact_frame, seed="seed") if compact_frame.height else compact_frame),
    }
