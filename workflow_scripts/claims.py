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
fit = {(t, int(s)): bool(f) for t, s, f in verdicts.select("task", "seed", "fit").iter_rows()}
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
    by_hand = claims.heterogeneous_share_from_hand_labels(labeller, settings["level"], {m.scope: m.value for m in by_labeller},
                                                          labeller_note)
    measured += by_hand + [m for m in by_labeller if m.scope not in {h.scope for h in by_hand}]
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
    measured += claims.michel_prunable_share(keyed("michel_curves", runs["pruned"]), keyed("michel_predictions", runs["pruned"]),
                                             metric_of, params.tolerance, *bootstrap,
                                             importance_note=f"importance on {importance['importance_examples'] or 'all'} "
                                                             f"{importance['importance_split']} examples, |gradient| per "
                                                             f"{importance['importance_granularity']}")
if "role_relations" in inputs.keys():
    measured += claims.confident_heads_important(pl.read_parquet(inputs.role_relations), stats.IMPORTANCE)
    measured += claims.l0_gates_beat_michel(pl.read_parquet(inputs.gates))
if inputs.outlier_contrast:
    measured += claims.outliers_disrupt(pl.concat([pl.read_parquet(p) for p in inputs.outlier_contrast], how="diagonal_relaxed"))
if "mix_words" in inputs.keys():
    measured += claims.pos_before_dependencies(pl.read_parquet(inputs.mix_words), params.label_sets, *bootstrap)
if "probe_words" in inputs.keys():
    measured += claims.probing_peak(pl.read_parquet(inputs.probe_words), *bootstrap)
table = claims.claims_table(measured, fit, runs["stages"], settings["level"], list(params.tasks))
figures.write_table(table, params.out, note=claims.verdict_rule(settings["level"]))
