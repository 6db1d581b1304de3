"""The claims table of one model (rule claims): each seed paper's claim, the paper's number, this run's with its
bootstrap interval, and the verdict."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks, io, states
from bertology_core.head_roles import stats
from bertology_core.patterns import feature_tables
from bertology_core.claims import stats as claims
from bertology_core.summaries import figures

inputs, params = snakemake.input, snakemake.params
runs, settings = params.runs, params.settings
bootstrap = (settings["resamples"], settings["level"], settings["seed"])
model = snakemake.wildcards.model


def keyed(name, keys):
    return {tuple(key): pl.read_parquet(path) for key, path in zip(keys, getattr(inputs, name))}


verdicts = pl.read_parquet(inputs.fitness).filter((pl.col("model") == model) & (pl.col("state") == states.FINETUNED))
if "strength" not in verdicts.columns:  # a fitness table written before weak existed: fit or unfit
    verdicts = verdicts.with_columns(pl.when(pl.col("fit")).then(pl.lit("fit")).otherwise(pl.lit("unfit")).alias("strength"))
fit = {(t, int(s)): strength for t, s, strength in verdicts.select("task", "seed", "strength").iter_rows()}
measured = []
labeller = io.read_json(inputs.report) if "report" in inputs.keys() else None
if inputs.classes:
    # a share is a proportion: where hand labels were drawn at random from a fine-tuned dump they estimate it without any
    # labeller; the labeller's share over every map stands beside it, and alone (trusted if validated) elsewhere
    validated, description = feature_tables.labeller_validated(labeller, settings["labeller_min_f1"])
    by_labeller = claims.heterogeneous_share(keyed("classes", runs["classes"]), *bootstrap, description, validated=validated)
    agreement = labeller.get("second_labeller")
    labeller_note = description + (f"; two labellings made apart agree on {agreement['agreement']:.0%} of "
                                   f"{agreement['maps']} maps" if agreement else "")
    labeller_share = {}
    for m in by_labeller:  # the labeller's share of every map of a task, its seeds pooled, beside the labels' share
        labeller_share.setdefault(m.task, []).append(m.value)
    by_hand = claims.heterogeneous_share_from_hand_labels(
        labeller, settings["level"], {task: sum(v) / len(v) for task, v in labeller_share.items()}, labeller_note,
        settings["resamples"], settings["seed"], labelled_by=(labeller.get("hand_labels") or {}).get("file", ""))
    measured += by_hand + [m for m in by_labeller if m.task not in {h.task for h in by_hand}]
if inputs.changes:
    measured += claims.last_layers_change(keyed("changes", runs["changes"]), *bootstrap)
if inputs.selection:
    measured += claims.best_head_gain(pl.concat([pl.read_parquet(p) for p in inputs.selection]), runs["swept_seeds"])
    measured += claims.first_layer_gain(pl.concat([pl.read_parquet(p) for p in inputs.deltas]), runs["swept_seeds"])
if "syntactic" in inputs.keys():
    measured += claims.syntactic_head(pl.read_parquet(inputs.syntactic))
if "stability" in inputs.keys():
    measured += claims.mask_agreement(pl.read_parquet(inputs.stability), runs["pruned_seeds"], settings["kappa_min_seeds"])
if inputs.michel_curves:
    metric_of = {task: tasks.Task.from_meaning(params.tasks[task]).main_metric for task, _ in runs["pruned"]}
    importance = params.importance
    label_names_of = {task: tasks.Task.from_meaning(params.tasks[task]).label_names for task, _ in runs["pruned"]}
    measured += claims.michel_prunable_share(keyed("michel_curves", runs["pruned"]), keyed("michel_predictions", runs["pruned"]),
                                             metric_of, params.tolerance, *bootstrap,
                                             importance_note=f"importance on {importance['importance_examples'] or 'all'} "
                                                             f"{importance['importance_split']} examples, |gradient| per "
                                                             f"{importance['importance_granularity']}",
                                             label_names_of=label_names_of)
if "role_relations" in inputs.keys():
    measured += claims.confident_heads_important(pl.read_parquet(inputs.role_relations), stats.IMPORTANCE)
    importance = params.importance
    measured += claims.l0_gates_beat_michel(pl.read_parquet(inputs.gates),
                                            f"{importance['importance_examples'] or 'all'} {importance['importance_split']} examples")
if inputs.outlier_contrast:
    dimensions = pl.read_parquet(inputs.outlier_dimensions) if "outlier_dimensions" in inputs.keys() else None
    measured += claims.outliers_disrupt(pl.concat([pl.read_parquet(p) for p in inputs.outlier_contrast], how="diagonal_relaxed"),
                                        dimensions, runs["outlier_tasks"])
if "mix_words" in inputs.keys():
    measured += claims.pos_before_dependencies(pl.read_parquet(inputs.mix_words), params.label_sets, *bootstrap)
if "probe_words" in inputs.keys():
    measured += claims.probing_peak(pl.read_parquet(inputs.probe_words), *bootstrap)
headline, detail = claims.claims_tables(measured, fit, runs["stages"], settings["level"], list(params.tasks),
                                       settings["resamples"], settings["seed"])
figures.write_table(headline, params.headline, note=claims.verdict_rule(settings["level"]))
figures.write_table(detail, params.out, note="Each fine-tuned model's row (and each task's seeds pooled, each labelling "
                    "pass) with its own verdict, below the claims' headline table: for reading, not voting.")
