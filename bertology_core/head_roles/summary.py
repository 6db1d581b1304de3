"""The head_roles stage's summaries of one model (rule head_roles_summary), as :class:`~bertology_core.summaries.figures.Output`:
Voita et al. 2019's head roles of every dump, how they relate to Michel et al.'s importance and to disabling, and the L0
head gates against Michel et al.'s pruning curve. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from bertology_core.data import states
from bertology_core.data.tasks import Task
from bertology_core.fitness import verdict_stats
from bertology_core.head_roles import corpus_tables, gate_stats, stats
from bertology_core.stats.metrics import main_metric_note
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output

Run = tuple[str, int]  # (task, seed)


@dataclass(frozen=True)
class HeadRolesSettings:
    """What the roles are and what the notes say (config ``head_roles``): the thresholds, the relations a syntactic
    head is scored on, how many of the frequency source's most frequent pieces a rare query leaves out, and the bootstrap
    over heads and over dev examples."""

    model: str
    thresholds: stats.RoleThresholds
    syntactic_relations: Sequence[str]
    rare_top_frequent: int
    resamples: int
    level: float
    seed: int

    @property
    def bootstrap(self) -> tuple[int, float, int]:
        return self.resamples, self.level, self.seed


def frequency_source_note(roles: pl.DataFrame) -> str:
    """Where the rare-token role's piece frequencies were counted, in words, from the roles table's
    ``frequency_source`` (as each roles job recorded it)."""
    sources = set(roles["frequency_source"].drop_nulls()) if "frequency_source" in roles.columns else set()
    if not sources:
        return "the frequency source (not recorded)"
    said = []
    if corpus_tables.TASK_SPLIT in sources:
        # the default is not the paper's: say so where the numbers are read
        said.append("each task's training split (the fine-tuning data, not the encoder's pre-training text; Voita et al. "
                    "count on their NMT model's own training data; head_roles.frequency_corpus counts on a text file instead)")
    corpora = sorted(source.removeprefix("corpus ") for source in sources - {corpus_tables.TASK_SPLIT})
    if corpora:
        said.append(f"the corpus file {', '.join(corpora)} (head_roles.frequency_corpus)")
    return " and ".join(said)


def roles_outputs(roles: pl.DataFrame, scored: Sequence[str], settings: HeadRolesSettings) -> Output:
    """The roles table (``roles``: annotated, sorted) with its note, and Voita et al. 2019's roles per head.
    ``scored``: the states the probing stage scores, the only ones with a syntactic role."""
    thresholds, relations, scored_note = settings.thresholds, ", ".join(settings.syntactic_relations), ", ".join(scored) or "none"
    note = (
        f"Voita et al. 2019's roles: positional = maximum attention on one relative position at least {thresholds.positional_share:.0%} of "
        f"the time; rare = on the example's rarest word piece at least {thresholds.rare_share:.0%} of the time (our threshold) and above "
        f"rare_chance (the rate of a head attending uniformly to the real tokens) by a one-sided t-test over examples at "
        f"{thresholds.rare_significance:g}, counted on the "
        f"examples whose rarest piece is not among the {settings.rare_top_frequent} most frequent pieces of "
        f"{frequency_source_note(roles)} (rare_queries); "
        f"syntactic = token-level accuracy for one of {relations} in one direction (dep->head: the dependent's "
        f"pieces attend to the head word; head->dep: the reverse) at least {thresholds.syntactic_margin:.2f} above that relation and "
        f"direction's most-frequent-offset baseline (UD EWT; only the states the probing stage scores: {scored_note}); "
        "specialised = any role (null where the syntactic one is unknown). Confidence: mean maximum weight, special tokens left out.")
    chart = stats.roles_chart(
        roles, "Head roles (Voita et al. 2019)",
        "Colour: confidence (mean maximum attention weight over real tokens, special tokens left out). Text: P-1/P+1 positional "
        f"(>= {thresholds.positional_share:.0%} of maxima at one offset), R rare tokens (>= {thresholds.rare_share:.0%} on the rarest piece "
        f"and above chance), S syntactic (>= {thresholds.syntactic_margin:.2f} over the offset baseline of one of "
        f"{relations} in one direction).\n"
        f"Syntactic roles only where the probing stage scores the state ({scored_note}); model {settings.model}; each dump's dev "
        "sample; hover a head for its measures.",
    )
    return Output(roles, note, chart)


def importance_outputs(relations: pl.DataFrame, verdicts: verdict_stats.Verdicts, settings: HeadRolesSettings) -> Output:
    """The within-layer rank correlations of roles with importance and disabling (``relations``), or a note chart where
    no dumped fine-tuned model has either."""
    title = "Are the important heads the confident, specialised ones? (Voita et al. 2019)"
    chart = stats.correlation_chart(
        relations, title,
        f"Spearman correlation within layers over a fine-tuned model's heads between a role measure of its dump and each target "
        f"(ranked within each layer: depth trends left out), with its {settings.level:.0%} bootstrap interval over heads "
        f"resampled within layers (none when a role is too rare to resample); model {settings.model}.",
    ) if relations.height else figures.note_chart(title, "no dumped fine-tuned model with importance or disabling results")
    return Output(verdicts.annotate(relations, seed="seed"), (
        "Spearman correlation within layers (both measures ranked within each layer, the ranks' Pearson correlation pooled over "
        "layers) over a fine-tuned model's heads between a role measure of its dump and Michel et al.'s importance (on train; raw, "
        "and normalised by layer as their pruning ranks heads) or the score drop when the head alone is disabled (dev); interval: "
        "bootstrap over heads within each layer, the model held fixed."), chart)


def gates_outputs(records: Sequence[Mapping[str, Any]], predictions: Sequence[pl.DataFrame], michel: Mapping[Run, pl.DataFrame],
                  verdicts: verdict_stats.Verdicts, tasks: Mapping[str, Task], settings: HeadRolesSettings) -> Output:
    """Voita et al. 2019's L0 head gates against Michel et al.'s pruning curve (``michel``: (task, seed) -> its curve),
    one row per gate job (``records``, ``predictions``); a note table and chart where the config trains no gates. The
    caption and note name each task's main metric (``tasks``: by name)."""
    metric = main_metric_note(tasks[t] for t in sorted({r["task"] for r in records}))
    table = gate_stats.gates_table(list(records), list(predictions), {r["task"]: tasks[r["task"]].main_metric for r in records},
                                   *settings.bootstrap, label_names={r["task"]: tasks[r["task"]].label_names for r in records})
    if table.height:
        table = verdicts.annotate(table, seed="seed")
        curve = pl.concat([frame.select(pl.lit(task).alias("task"), pl.lit(seed, pl.Int64).alias("seed"), "heads_pruned", "score")
                           for (task, seed), frame in michel.items()])
        curve = curve.with_columns((table["heads"][0] - pl.col("heads_pruned")).alias("heads_kept"))
        chart = gate_stats.gates_chart(
            table, curve, "L0 head gates against Michel et al.'s pruning (Voita et al. 2019)",
            f"Dev score ({metric}; the curve's seeded dev sample) against heads kept: Michel et al.'s iterative curve "
            "(importance order, no retraining)\nand Hard Concrete gates trained with the L0 penalty at each "
            f"strength, the model's weights trained with them (Voita et al.) or frozen; model {settings.model}.")
    else:  # no gates in this config: the summary's files say so
        table = pl.DataFrame({"note": ["no L0 gates in this config (head_roles.gates.tasks)"]})
        chart = figures.note_chart("L0 head gates", table["note"][0])
    return Output(table, (
        f"Per job: heads whose deterministic gate is not 0 and the dev score ({metric}) with the learnt gates (gates), with those heads at "
        "gate 1 (gates_binary: the heads the gates chose, without their learnt scales), with Michel et al.'s order cut at the "
        "same number of heads (the fine-tuned model, never retrained) and with the full model; gates minus Michel with paired "
        "bootstrap intervals over the dev examples. Rows with the weights trained also retrain the model (Voita et al.): the "
        "frozen rows' binary column compares the two choices of heads alone."), chart)


def summarise(roles: pl.DataFrame, voita: pl.DataFrame | None, fitness_table: pl.DataFrame,
              importance: Mapping[Run, pl.DataFrame], deltas: Sequence[pl.DataFrame], gates: Sequence[Mapping[str, Any]],
              gate_predictions: Sequence[pl.DataFrame], michel: Mapping[Run, pl.DataFrame], tasks: Mapping[str, Task],
              settings: HeadRolesSettings) -> dict[str, Output]:
    """``roles``: every dump's head measures; ``voita``: the probing stage's token-level accuracy per relation and
    direction of the states it scores (None: none); ``fitness_table``: the fitness stage's verdicts; ``importance``:
    (task, seed) -> the pruning stage's importance; ``deltas``: the disabling stage's per-task tables; ``gates`` and
    ``gate_predictions``: each gate job's record and dev predictions; ``michel``: (task, seed) -> Michel et al.'s curve;
    ``tasks``: the tasks by name. Returns ``roles``, ``importance_relations`` and ``gates``."""
    syntactic = stats.best_relation_margins(voita, settings.syntactic_relations) if voita is not None else None
    roles = stats.assign_roles(roles, settings.thresholds, syntactic)
    # each row's model in the model states' one spelling: pretrained, TASK/finetuned/seedN, TASK/scratch/seedN
    dumped = pl.struct("task", "state", "seed").map_elements(
        lambda r: r["state"] if r["seed"] is None else states.run_name(r["task"], r["state"], r["seed"]), return_dtype=pl.String)
    # the verdicts pool the fine-tuned seeds that were dumped
    tuned = roles.filter(pl.col("state") == states.FINETUNED).select("task", "seed").unique().sort("task", "seed")
    verdicts = verdict_stats.Verdicts(fitness_table, settings.model, verdict_stats.seeds_by_task(tuned.rows()))
    roles = verdicts.annotate(roles.with_columns(dumped.alias("_dump")), state="_dump").drop("_dump").sort(
        "task", "state", "seed", "layer", "head")
    scored = sorted(syntactic["state"].unique().to_list()) if syntactic is not None else []
    targets = stats.importance_targets(dict(importance), list(deltas))
    relations = stats.rank_correlations(roles, targets, *settings.bootstrap)
    return {
        "roles": roles_outputs(roles, scored, settings),
        "importance_relations": importance_outputs(relations, verdicts, settings),
        "gates": gates_outputs(gates, gate_predictions, michel, verdicts, tasks, settings),
    }
