"""Claims of the seed papers against this run: the paper's number, ours with an interval, and a verdict.

Each claim is a statement about a statistic ``theta`` and a *region* where ``theta`` must lie for the claim
to hold (``theta > 0``: disabling the best head raises the score; ``0.32 <= theta <= 0.61``: the heterogeneous
share). This run measures ``theta`` with an interval at ``level`` (a percentile bootstrap unless the claim says
otherwise: Clopper-Pearson for a share of hand-labelled maps; the unit resampled is given per claim: dev examples,
sentences, heads), and the verdict rule (:func:`verdict`) is:

- **model unfit**: the number rests on a fine-tuned model that is not fit for analysis
  (:mod:`bertology_core.fitness.verdict_stats`), or ``fitness.if_unfit: skip`` left out every model it would rest on;
- **reproduced**: the whole interval lies inside the region;
- **not reproduced**: the whole interval lies outside it;
- **inconclusive**: the interval straddles a boundary of the region, or the number cannot be trusted
  (the ``note`` says why: too few seeds, masks whose sizes decide kappa, gates on retrained weights, a pattern
  labeller not validated against human labels);
- **not run**: the config does not run the stage the claim needs;
- **not applicable**: the claim is about a task (RTE) this run does not have (a declared task of one's own is not
  the paper's task); claims about any fine-tuned model run on every task.

The region is the paper's *effect*, from its own numbers, not only its sign (``Claim.region_source`` says where each
comes from): "about 40% of heads can be pruned" is three to five 10% steps (25-55%), not "at least 38%"; "disabling
the outliers degrades the model while random dimensions do not" is a loss larger than every random draw's, not one
below the random mean; Clark et al.'s "far better" head is 10 points or more above the offset. Where the paper's claim
is an ordering or an existence (a gain, which layers change most) the region is that direction, and the paper's size
is in ``paper_value`` to compare by eye.

A claim measured in several rows (tasks, seeds, strengths, label sets) also gets one verdict for the claim, by a
written rule (:func:`overall_verdict`), over the rows whose models are fit and that count (rows shown only for
comparison, such as gates scored on retrained weights, do not): **reproduced** when every row is reproduced by its own
interval and lies inside the region after Holm's correction for the number of rows (one-sided tests at half of
``1 - level`` per bound, so that one row alone keeps its own verdict), **not reproduced** when a row is not reproduced
by its own interval and lies outside after Holm's correction, **inconclusive** otherwise, **model unfit** when no row
rests on fit models only. Each row's one-sided p-values against the region's bounds come from its interval (Altman
and Bland 2011, "How to obtain the P value from a confidence interval", the normal approximation, with the interval's
half on that side as the standard error's multiple), since the upstream stages keep intervals, not their resamples;
the stages' levels must equal ``claims.level`` (checked when the workflow is parsed).

Nothing is chosen on the data it is reported on: the best head to disable and the syntactic head are chosen
on one half of the data and reported on the other; Michel et al.'s curve ranks heads by importance on train.
Where our protocol departs from the paper's (model, data size, labeller, treebank), the ``paper_setup`` column
says so. Most intervals hold the run's fine-tuning seeds fixed (kappa's covers leaving each seed out, the expected
layer's covers probe seeds): seed-to-seed variation is shown by the per-seed rows and judged by the overall rule.
Figures are numbered as in the published (EMNLP/NeurIPS/BlackboxNLP) versions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from scipy import stats

from bertology_core.data import states
from bertology_core.layer_mix.stats import expected_layer_difference
from bertology_core.pruning.stats import prunable_share
from bertology_core.stats.bootstrap import DEFINED_SHARE, metric_on_resamples, percentile_interval, resample_indices

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, MODEL_UNFIT, NOT_RUN, NOT_APPLICABLE = (
    "reproduced", "not reproduced", "inconclusive", "model unfit", "not run", "not applicable")


@dataclass(frozen=True)
class Region:
    """Where ``theta`` must lie: ``low < theta < high`` (``closed``: ``low <= theta <= high``, for a range the
    paper gives, or for a statistic that moves in steps and may sit on a bound); None is unbounded."""

    low: float | None = None
    high: float | None = None
    closed: bool = False

    def contains(self, value: float) -> bool:
        low = -math.inf if self.low is None else self.low
        high = math.inf if self.high is None else self.high
        return low <= value <= high if self.closed else low < value < high

    def describe(self, scale: float = 1.0) -> str:
        strict, loose = ("at least", "at most") if self.closed else ("above", "below")
        if self.low is not None and self.high is not None:
            return f"{'from' if self.closed else 'strictly between'} {self.low * scale:g} {'to' if self.closed else 'and'} {self.high * scale:g}"
        if self.low is not None:
            return f"{strict} {self.low * scale:g}"
        return f"{loose} {self.high * scale:g}"


def verdict(ci_low: float, ci_high: float, region: Region, unfit: bool = False, trusted: bool = True) -> str:
    """The verdict rule (module docstring): the interval ``[ci_low, ci_high]`` against ``region``."""
    if unfit:
        return MODEL_UNFIT
    if not trusted or not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return INCONCLUSIVE
    if region.contains(ci_low) and region.contains(ci_high):
        return REPRODUCED
    # wholly outside: both ends out, on the same side (the region is an interval)
    below = region.low is not None and not region.contains(ci_high) and ci_high <= region.low
    above = region.high is not None and not region.contains(ci_low) and ci_low >= region.high
    return NOT_REPRODUCED if below or above else INCONCLUSIVE


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    source: str  # the figure, table or section the number comes from
    statement: str
    paper_value: str
    statistic: str  # what this run measures, and the unit the bootstrap resamples
    region: Region
    scale: float  # shown values = theta x scale (100: points or percent)
    paper_setup: str
    stage: str  # the report section (and stage) whose results the claim reads
    region_source: str = ""  # where the region comes from: the paper's own numbers, or why a direction is the effect
    tasks: tuple[str, ...] = ()  # the tasks the claim is about (none: any fine-tuned model's)


CLAIMS: tuple[Claim, ...] = (
    Claim("heterogeneous_share", "Kovaleva et al. 2019", "section 4.1, fig. 2",
          "Heterogeneous attention maps (the ones that could be informative) make up 32% (MRPC) to 61% (QQP) of all maps.",
          "32-61%",
          "share of the fine-tuned model's maps that are heterogeneous, %, estimated from the hand labels drawn at random from "
          "its dump (Clopper-Pearson interval over maps); where no hand labels name the dump, the pattern labeller's share "
          "(resampling dev examples), trusted only when the labeller is validated",
          Region(0.32, 0.61, closed=True), 100,
          "BERT-base fine-tuned on 7 GLUE tasks; a CNN trained on ~400 hand-labelled maps (F1 0.86) labels every map; up to "
          "1000 dev examples; here a smaller encoder, a share estimated from a random sample of hand-labelled maps",
          "patterns", "the paper's own range over its tasks (MRPC 32% to QQP 61%)"),
    Claim("last_layers_change_most", "Kovaleva et al. 2019", "section 4.3, fig. 5",
          "Fine-tuning changes the last two layers' attention most (all tasks but QQP).",
          "last two layers lowest cosine",
          "lowest mean cosine (pre-trained vs fine-tuned maps) of the layers before the last two, minus the highest of "
          "the last two; > 0 when the last two changed most; resampling dev examples",
          Region(0.0, None), 1, "BERT-base, 12 layers; cosine of flattened maps padded to a fixed length", "attention_change",
          "an ordering: the claim is which layers change most (fig. 5 gives no size), so any positive gap is the effect"),
    Claim("best_head_disabling_gain", "Kovaleva et al. 2019", "section 4.6, fig. 8",
          "Disabling a single head can raise the score: from +0.1 (STS-B) to +1.2 points (MRPC).",
          "+0.1 to +1.2 points",
          "score change when the best head (chosen on one half of dev) is disabled, on the other half, mean over seeds, "
          "points; resampling dev examples",
          Region(0.0, None), 100,
          "BERT-base, one fine-tuning run, best head chosen and reported on the same full dev set", "disabling",
          "an existence claim: some head's disabling raises the score; the paper's gains (+0.1 to +1.2 points) set no "
          "lower bound beyond a gain"),
    Claim("first_layer_disabling_gain_rte", "Kovaleva et al. 2019", "section 4.6, fig. 9",
          "Disabling the whole first layer raises RTE by 3.2 points.",
          "+3.2 points (RTE)", "score change with layer 1 disabled on RTE, mean over seeds, points; resampling dev examples",
          Region(0.0, None), 100, "BERT-base, one fine-tuning run, RTE dev set (baseline about 58%)", "disabling",
          "the claim is a gain (the paper's +3.2 points is one run's point estimate, with no interval to bound it by)",
          ("RTE",)),
    Claim("syntactic_head_obj", "Clark et al. 2019", "section 4.2, table 1",
          "A single head finds the direct object of a verb far better than the best fixed offset: 86.8 against 40.0 (dobj).",
          "86.8 vs 40.0",
          "accuracy of the best head for obj minus the best offset's, both chosen on half the treebank sentences and "
          "scored on the other half, points; resampling sentences",
          Region(0.10, None), 100,
          "BERT-base on the WSJ with Stanford Dependencies (dobj), head and offset chosen on the reported data; here the "
          "pre-trained encoder on UD English EWT (obj)", "probing",
          "'far better': at least 10 points, the margin Voita et al. 2019 (section 5.2) require of a syntactic head over the "
          "same baseline; the paper's gap is 46.8 points"),
    Claim("mask_agreement_kappa", "Prasanna et al. 2020", "section 5 (stability of the good subnetworks); the authors' notebook",
          "The good subnetworks are not stable across fine-tuning seeds: the heads that survive structured pruning agree "
          "at most fairly (Fleiss' kappa 0.4 or less, Landis and Koch's 'fair').",
          "0.18-0.32 over the GLUE tasks (WNLI -0.25); the authors' statistics_on_pruning.ipynb",
          "Fleiss' kappa of the s-pruning head masks across the seeds that kept a ticket (a seed whose pruning removed nothing "
          "is left out); interval: resampling heads (seeds fixed), widened to cover kappa with each seed left out in turn; "
          "inconclusive with fewer ticket seeds than claims.kappa_min_seeds, or when masks of the seeds' sizes could not agree "
          "beyond 0.40 even if nested (the kappa ceiling: different sizes alone lower kappa)",
          Region(None, 0.40, closed=True), 1,
          "BERT-base, 5 seeds, 9 GLUE tasks, masks chosen on dev, every seed's mask counted (their notebook keeps no-ticket "
          "seeds; here they are left out)", "pruning",
          "Landis and Koch's 'fair' agreement or less (0.40), the paper's reading of its 0.18-0.32"),
    Claim("prunable_share", "Michel et al. 2019", "section 4.2, fig. 3b",
          "About 40% of BERT's heads can be pruned (least important first) without a noticeable loss.",
          "40% (MNLI)",
          "share of heads pruned, in importance order, before the dev score first falls more than the tolerance below "
          "the full model's, mean over seeds, %; resampling dev examples",
          Region(0.25, 0.55, closed=True), 100,
          "BERT-base fine-tuned on MNLI; importance on the whole training set (its code's default), from each token's "
          "gradient; 'noticeable' judged by eye, steps of 10% of heads", "pruning",
          "'about 40%' (the paper's 'up to 40% ... performance drops sharply when pruning further'), four steps of 10% of "
          "the heads (38.9% of BERT-base's 144): three to five steps, 25% to 55% (half a step beyond them, as a step of "
          "round(10% of the heads) is 9.7% of 72 heads)"),
    Claim("confident_heads_important", "Voita et al. 2019", "sections 4.2 and 6.2",
          "The most important heads are the most confident ones.",
          "important heads are confident (within each layer, heads sorted by relevance; no correlation given)",
          "Spearman correlation within layers (both measures ranked within each layer, the ranks' correlation pooled over "
          "layers) between a fine-tuned model's head confidence (mean maximum attention weight on its dev dump) and Michel et "
          "al.'s importance (on a train sample); resampling heads within layers (the model fixed)",
          Region(0.0, None), 1,
          "Transformer NMT encoders (6 layers x 8 heads; WMT and OpenSubtitles), importance by layer-wise relevance "
          "propagation, compared within layers by eye; here a fine-tuned classifier with Michel et al.'s gradient importance",
          "head_roles", "a direction: the paper shows the ordering within layers, with no size; both measures trend with depth, so "
          "only a within-layer correlation tests it (whether the very top heads are the confident ones is not tested apart)"),
    Claim("l0_gates_beat_michel", "Voita et al. 2019 against Michel et al. 2019", "Voita et al. section 6",
          "The heads L0-penalised gates keep do better than the same number kept in Michel et al.'s importance order (the "
          "two papers are concurrent and never compared: the seed lecture sets them side by side).",
          "not compared in either paper (Voita et al.: 38 of 48 encoder heads pruned for -0.15 BLEU)",
          "per strength whose gates prune 10% to 90% of the heads (a range fixed in advance): dev score with the heads the "
          "gates keep, at gate 1, minus with Michel et al.'s order cut at the same number, both on the fine-tuned weights "
          "(gates trained with the weights frozen), points; resampling dev examples (paired). Gates trained with the weights "
          "(Voita et al.) are scored on weights trained one more epoch, an advantage Michel's order does not get: their rows "
          "are shown but not trusted",
          Region(0.0, None), 100,
          "Voita et al.: NMT encoders, gates trained with the whole model until convergence; here one epoch on the task's "
          "train split, scored on Michel et al.'s dev sample", "head_roles",
          "a comparison the papers never made: better, by any margin"),
    Claim("outliers_disrupt", "Kovaleva et al. 2021", "abstract; the authors' blog post (figs. 1-3)",
          "Disabling the outlier LayerNorm dimensions (weight and bias at 0 in every layer's output LayerNorm) degrades the "
          "model, while disabling as many random dimensions does not.",
          "BERT-base: outlier dimensions 308 and 381; disabling them degrades MLM and GLUE scores, random dimensions do not "
          "('the output is not affected at all'; the size per task is in the paper's figure, not read here)",
          "score change with the model's outlier dimensions disabled in the output LayerNorms minus the change of the worst "
          "of the random draws of as many dimensions (the worst taken anew on each resample), mean over seeds, points; "
          "resampling dev examples (paired)",
          Region(None, 0.0), 100,
          "BERT-base (12 layers) and other encoders on GLUE dev; here a smaller encoder, where the criterion's 'more than a "
          "quarter of the layers' counts fewer layers (looser), each fine-tuned model's own outliers, and a dev sample", "outliers",
          "a large loss against none: the outliers cost more than every random draw, not merely more than the draws' mean "
          "(stricter with more draws: outliers.random_draws sets how many)"),
    Claim("pos_before_dependencies", "Tenney et al. 2019", "section 4, table 1 and fig. 1",
          "Part-of-speech information is added at lower layers than dependency relations, in the order of the classical "
          "NLP pipeline.",
          "expected layer POS 3.39 < dependencies 5.69 (of 24)",
          "expected layer (cumulative scoring) of the dependency-relation probe minus the part-of-speech probe's, in layers, "
          "on the pre-trained encoder, mean over probe seeds; resampling treebank dev sentences and one probe seed per "
          "resample (paired)",
          Region(0.0, None), 1,
          "BERT-large (24 layers), edge probes (span pooling and a two-layer MLP) on OntoNotes POS and EWT dependencies, one "
          "run each; here linear word-level probes (the relation on the word's and its head's vectors) on a UD EWT sample, "
          "each layer standardised before the mix, several probe seeds", "layer_mix",
          "an ordering: the claim is which comes first (2.3 of 24 layers apart in the paper, on another encoder's depth)"),
    Claim("probing_peak_middle", "Liu et al. 2019; Tenney et al. 2019", "Liu et al. section 4 (layer-wise transferability)",
          "Linear probes of a transformer do best on its middle layers, not its first or last.",
          "middle layers", "relative depth (best layer / number of layers; embeddings = 0) of the most accurate "
          "probe; middle = the middle half, 0.25 to 0.75; resampling treebank sentences",
          Region(0.25, 0.75, closed=True), 1,
          "BERT-base/large and ELMo, 17 probing tasks; here the pre-trained encoder on UD English EWT", "probing",
          "'middle layers', read as the middle half of the depth"),
)
BY_KEY = {claim.key: claim for claim in CLAIMS}


@dataclass(frozen=True)
class Measured:
    """One row of the claims table before its verdict: a claim's statistic on one scope (task, label set)."""

    key: str
    scope: str
    value: float
    ci_low: float
    ci_high: float
    models: tuple[tuple[str, int], ...] = ()  # (task, seed) of the fine-tuned models the number rests on
    trusted: bool = True
    note: str = ""
    counted: bool = True  # whether the row counts towards the claim's one verdict (False: shown for comparison only)


def heterogeneous_share(classes: Mapping[tuple[str, int], pl.DataFrame], resamples: int, level: float, seed: int,
                        labels_source: str, validated: bool) -> list[Measured]:
    """Per task: the share of maps the CNN labels heterogeneous in the fine-tuned dumps (``classes``:
    (task, seed) -> classes table with ``idx`` and ``cnn_label``), seeds pooled; a cluster bootstrap over dev
    examples (all maps of an example together). Not trusted unless the labeller was validated on hand labels
    (:func:`bertology_core.patterns.feature_tables.labeller_validated`)."""
    rows = []
    for task in sorted({t for t, _ in classes}):
        seeds = sorted(s for t, s in classes if t == task)
        maps = pl.concat([classes[(task, s)].select("idx", "cnn_label") for s in seeds])
        per_example = maps.group_by("idx").agg(
            (pl.col("cnn_label") == "heterogeneous").sum().alias("hits"), pl.len().alias("maps")).sort("idx")
        hits, total = per_example["hits"].to_numpy().astype(float), per_example["maps"].to_numpy().astype(float)
        draws = resample_indices(len(hits), resamples, seed)
        low, high = percentile_interval(hits[draws].sum(1) / total[draws].sum(1), level)
        note = f"labeller: {labels_source}" if validated else (
            f"the pattern labeller is not validated against hand labels ({labels_source}): its shares cannot be "
            "compared with the paper's yet")
        rows.append(Measured("heterogeneous_share", task, float(hits.sum() / total.sum()), low, high,
                             tuple((task, s) for s in seeds), validated, note))
    return rows


def hand_label_heterogeneous_share(report: Mapping) -> dict[str, tuple[int, int, tuple[tuple[str, int], ...]]]:
    """Per task: (heterogeneous maps, maps, the fine-tuned models) among the hand labels drawn at random from the
    fine-tuned models' dumps (the pattern classifier's ``report``: the training labels' random part and the test
    labels' ``test-random`` part, both simple random samples of the maps of a dump, pooled). Empty when no hand label
    names a fine-tuned dump of this run."""
    rows = list(report.get("hand_label_shares_random_sample") or []) + list(
        (report.get("test") or {}).get("hand_label_shares_random_sample") or [])
    counts: dict[str, list] = {}
    for row in rows:
        if not states.is_seeded(row["state"]) or states.split_seeded(row["state"])[0] != states.FINETUNED:
            continue
        seed = states.split_seeded(row["state"])[1]
        hits, total, models = counts.setdefault(row["task"], [0, 0, set()])
        counts[row["task"]][0] += int(row["maps"]) if row["label"] == "heterogeneous" else 0
        counts[row["task"]][1] += int(row["maps"])
        models.add((row["task"], seed))
    return {task: (hits, total, tuple(sorted(models))) for task, (hits, total, models) in sorted(counts.items())}


def heterogeneous_share_from_hand_labels(report: Mapping, level: float, labeller: Mapping[str, float],
                                         labeller_note: str) -> list[Measured]:
    """Per task whose fine-tuned dumps have hand labels drawn at random: the heterogeneous share of those maps with a
    Clopper-Pearson interval (a share is a proportion: a random sample of labelled maps estimates it without any
    labeller). ``labeller``: task -> the pattern labeller's share over every map, shown beside it with
    ``labeller_note`` (its agreement with the hand labels)."""
    rows = []
    for task, (hits, total, models) in hand_label_heterogeneous_share(report).items():
        if not total:
            continue
        interval = stats.binomtest(hits, total).proportion_ci(confidence_level=level, method="exact")
        beside = f"; the labeller's share of every map {100 * labeller[task]:.1f}%" if task in labeller else ""
        rows.append(Measured("heterogeneous_share", task, hits / total, float(interval.low), float(interval.high), models,
                             note=f"hand labels: {hits} of {total} maps drawn at random from the fine-tuned dumps"
                                  f"{beside} ({labeller_note})"))
    return rows


def last_layers_change(changes: Mapping[tuple[str, int], pl.DataFrame], resamples: int, level: float, seed: int) -> list[Measured]:
    """Per task: min over the layers before the last two of the layer's mean cosine, minus the max over the last
    two (``changes``: (task, seed) -> ``idx, layer, head, cosine``); seeds averaged; resampling examples."""
    rows = []
    for task in sorted({t for t, _ in changes}):
        seeds = sorted(s for t, s in changes if t == task)
        frame = pl.concat([changes[(task, s)] for s in seeds])
        layers = sorted(frame["layer"].unique().to_list())
        if len(layers) < 3:
            continue  # no layer before the last two to compare with
        wide = frame.group_by("idx", "layer").agg(pl.col("cosine").mean()).pivot(on="layer", index="idx", values="cosine").sort("idx")
        per_example = wide.select([str(layer) for layer in layers]).to_numpy()  # [examples, layers]

        def statistic(values: np.ndarray) -> np.ndarray:  # values [..., examples, layers] -> [...]
            means = np.nanmean(values, axis=-2)
            return means[..., :-2].min(-1) - means[..., -2:].max(-1)

        draws = resample_indices(per_example.shape[0], resamples, seed)
        low, high = percentile_interval(statistic(per_example[draws]), level)
        means = np.nanmean(per_example, axis=0)
        note = "layers by mean cosine, most changed first: " + ", ".join(f"{layers[i] + 1}" for i in np.argsort(means))
        rows.append(Measured("last_layers_change_most", task, float(statistic(per_example)), low, high,
                             tuple((task, s) for s in seeds), note=note))
    return rows


def best_head_gain(selection: pl.DataFrame, seeds: Mapping[str, Sequence[int]]) -> list[Measured]:
    """Per task (and disabling mode, when several): the across-seed held-out change of the best single head
    (stats.selection_table)."""
    rows = []
    pooled = selection.filter((pl.col("kind") == "head") & pl.col("seed").is_null())
    several = pooled["mode"].n_unique() > 1
    for row in pooled.sort("task", "mode").iter_rows(named=True):
        scope = f"{row['task']} ({row['mode']})" if several else row["task"]
        rows.append(Measured("best_head_disabling_gain", scope, row["report_delta"], row["report_ci_low"],
                             row["report_ci_high"], tuple((row["task"], s) for s in seeds[row["task"]]),
                             note=f"head {row['config']} chosen on {row['selection_examples']} dev examples, reported on "
                                  f"{row['report_examples']} others"))
    return rows


def first_layer_gain(deltas: pl.DataFrame, seeds: Mapping[str, Sequence[int]], task: str = "RTE") -> list[Measured]:
    """The across-seed change when the first layer is disabled on ``task`` (a layer the paper names: nothing to
    choose, so all swept examples report it)."""
    rows = deltas.filter((pl.col("task") == task) & (pl.col("kind") == "layer") & (pl.col("layer") == 0) & pl.col("seed").is_null())
    several = rows["mode"].n_unique() > 1
    return [Measured("first_layer_disabling_gain_rte", f"{task} ({r['mode']})" if several else task, r["delta"], r["ci_low"],
                     r["ci_high"], tuple((task, s) for s in seeds[task]), note=f"{r['examples']} dev examples, {r['mode']} attention")
            for r in rows.sort("mode").iter_rows(named=True)]


def syntactic_head(held_out: pl.DataFrame, relation: str = "obj") -> list[Measured]:
    """The held-out best head minus the held-out best offset for ``relation`` (syntactic_heads.held_out_best)."""
    row = held_out.filter(pl.col("relation") == relation)
    if row.is_empty():
        return []
    r = row.row(0, named=True)
    return [Measured("syntactic_head_obj", f"{r['state']} {relation}", r["difference"], r["ci_low"], r["ci_high"],
                     note=f"head {r['clark_name']} ({r['direction']}) {100 * r['accuracy']:.1f} vs offset "
                          f"{r['baseline_offset']:+d} {100 * r['baseline_accuracy']:.1f} on {r['report_words']} words")]


def mask_agreement(stability: pl.DataFrame, seeds: Mapping[str, Sequence[int]], min_seeds: int = 3) -> list[Measured]:
    """Per task: Fleiss' kappa of the s-pruning head masks across the seeds that kept a ticket (pruning summary's
    stability table), with an interval that covers both the bootstrap over heads (seeds fixed) and kappa with each
    seed left out in turn; not trusted with fewer than ``min_seeds`` ticket seeds (Prasanna et al. used 5)."""
    rows = []
    heads = stability.filter((pl.col("method") == "s") & (pl.col("element") == "heads"))
    for r in heads.sort("task").iter_rows(named=True):
        without = r.get("seeds_without_ticket") or ""
        ends = [v for v in (r["kappa_ci_low"], r["kappa_ci_high"], r.get("kappa_loo_min"), r.get("kappa_loo_max"))
                if v is not None and math.isfinite(v)]
        low, high = (min(ends), max(ends)) if len(ends) >= 2 else (float("nan"), float("nan"))
        ceiling = r.get("kappa_max")
        sized = ceiling is None or not math.isfinite(ceiling) or ceiling > BY_KEY["mask_agreement_kappa"].region.high
        enough = r["seeds"] >= min_seeds and sized
        ticket_seeds = [s for s in seeds[r["task"]] if str(s) not in without.split(", ")]
        note = (f"{r['seeds']} seeds with a ticket, {r['kept_share']:.0%} of heads kept on average "
                f"({r.get('kept_share_min', float('nan')):.0%} to {r.get('kept_share_max', float('nan')):.0%})"
                + (f"; kappa with one seed left out {r['kappa_loo_min']:.2f} to {r['kappa_loo_max']:.2f}"
                   if r.get("kappa_loo_min") is not None and math.isfinite(r["kappa_loo_min"]) else "")
                + (f"; seeds without a ticket, left out: {without}" if without else "")
                + (f"; the most nested masks of these sizes would agree at {ceiling:.2f}" if ceiling is not None else "")
                + ("" if r["seeds"] >= min_seeds else f"; fewer than claims.kappa_min_seeds = {min_seeds} ticket seeds: "
                   "agreement across so few seeds cannot be judged")
                + ("" if sized else "; masks of these sizes cannot agree beyond 0.40 however chosen: the sizes alone "
                   "give the claim"))
        rows.append(Measured("mask_agreement_kappa", r["task"], r["fleiss_kappa"], low, high,
                             tuple((r["task"], s) for s in ticket_seeds), trusted=enough, note=note))
    return rows


def michel_prunable_share(curves: Mapping[tuple[str, int], pl.DataFrame], predictions: Mapping[tuple[str, int], pl.DataFrame],
                          metric_of: Mapping[str, str], tolerance: float, resamples: int, level: float, seed: int,
                          importance_note: str = "") -> list[Measured]:
    """Per task: Michel et al.'s prunable share, mean over seeds; the curve of every seed rescored on the same
    resamples of the dev examples (``predictions``: step, idx, label, prediction; ``curves``: step, share_pruned);
    ``importance_note``: what the ranking was computed on, beside each row (the paper used all of train)."""
    rows = []
    for task in sorted({t for t, _ in curves}):
        seeds = sorted(s for t, s in curves if t == task)
        per_seed, resampled = [], []
        draws = None
        for s in seeds:
            shares = curves[(task, s)].sort("step")["share_pruned"].to_list()
            frame = predictions[(task, s)]
            wide = frame.pivot(on="idx", index="step", values="prediction").sort("step")
            idx = sorted(frame["idx"].unique().to_list())
            matrix = wide.select([str(i) for i in idx]).to_numpy()  # [steps, examples]
            labels = frame.filter(pl.col("step") == 0).sort("idx")["label"].to_numpy()
            if draws is None:
                draws = resample_indices(len(idx), resamples, seed)
            full = metric_on_resamples(metric_of[task], matrix, labels, np.arange(len(idx))[None, :])[:, 0]
            per_seed.append(prunable_share(shares, full.tolist(), tolerance))
            scores = metric_on_resamples(metric_of[task], matrix, labels, draws)  # [steps, resamples]
            resampled.append([prunable_share(shares, scores[:, r].tolist(), tolerance) for r in range(scores.shape[1])])
        low, high = percentile_interval(np.mean(resampled, axis=0), level)
        rows.append(Measured("prunable_share", task, float(np.mean(per_seed)), low, high, tuple((task, s) for s in seeds),
                             note=f"tolerance {tolerance:.0%} of the full score; seeds: " + ", ".join(f"{v:.0%}" for v in per_seed)
                                  + (f"; {importance_note}" if importance_note else "")))
    return rows


def probing_peak(words: pl.DataFrame, resamples: int, level: float, seed: int) -> list[Measured]:
    """Per label set of one state's task probes (``labels, kind, layer, sentence, correct``): the relative depth
    of the most accurate layer; resampling sentences (a word's neighbours share its sentence)."""
    rows = []
    task_words = words.filter(pl.col("kind") == "task")
    for (name,), frame in sorted(task_words.partition_by("labels", as_dict=True).items()):
        per_sentence = frame.group_by("sentence", "layer").agg(pl.col("correct").sum().alias("right"), pl.len().alias("words"))
        right = per_sentence.pivot(on="layer", index="sentence", values="right").sort("sentence")
        count = per_sentence.pivot(on="layer", index="sentence", values="words").sort("sentence")
        layers = sorted(frame["layer"].unique().to_list())
        r = right.select([str(l) for l in layers]).fill_null(0).to_numpy().astype(float)
        n = count.select([str(l) for l in layers]).fill_null(0).to_numpy().astype(float)
        depth = max(layers)
        best = int(np.argmax(r.sum(0) / n.sum(0)))
        draws = resample_indices(r.shape[0], resamples, seed)
        accuracy = r[draws].sum(1) / n[draws].sum(1)  # [resamples, layers]
        low, high = percentile_interval(np.argmax(accuracy, axis=1) / depth, level)
        state = frame["state"][0] if "state" in frame.columns else ""
        rows.append(Measured("probing_peak_middle", f"{state} {name}".strip(), best / depth, low, high,
                             note=f"best layer {layers[best]} of {depth} (accuracy {r.sum(0)[best] / n.sum(0)[best]:.3f})"))
    return rows


def confident_heads_important(relations: pl.DataFrame, importance: str) -> list[Measured]:
    """Per fine-tuned model (task, seed): the head roles summary's Spearman correlation of confidence with Michel et
    al.'s importance (the target named ``importance``) and its interval over heads (``importance_relations``)."""
    rows = relations.filter((pl.col("measure") == "confidence") & (pl.col("target") == importance)).sort("task", "seed")
    return [Measured("confident_heads_important", f"{r['task']} seed {r['seed']}", r["spearman"], r["ci_low"], r["ci_high"],
                     ((r["task"], r["seed"]),), note=f"{r['heads']} heads")
            for r in rows.iter_rows(named=True)]


COMPARED_PRUNED_SHARE = (0.1, 0.9)  # where the two pruning methods are compared (fixed before any run)


def l0_gates_beat_michel(gates: pl.DataFrame) -> list[Measured]:
    """Per fine-tuned model, weights setting and strength whose gates prune a share of heads in
    :data:`COMPARED_PRUNED_SHARE`: the heads they keep (at gate 1) against Michel et al.'s order (head roles summary
    ``gates``: ``binary_minus_michel`` and its interval). Gates trained with the weights are scored on weights trained
    one more epoch while Michel's order prunes the fine-tuned weights as they are: those rows are shown, not trusted."""
    low, high = COMPARED_PRUNED_SHARE
    if "weights" not in gates.columns:  # no gates in this config
        return []
    chosen = gates.filter(pl.col("share_pruned").is_between(low, high))
    return [Measured("l0_gates_beat_michel", f"{r['task']} seed {r['seed']}, {r['heads_kept']} of {r['heads']} heads, weights {r['weights']}",
                     r["binary_minus_michel"], r["binary_ci_low"], r["binary_ci_high"], ((r["task"], r["seed"]),),
                     trusted=r["weights"] == "frozen", counted=r["weights"] == "frozen",
                     note=f"{r['metric']}; strength {r['strength']:g}; with the learnt gate values {r['gates_minus_michel'] * 100:+.1f} points"
                          + ("" if r["weights"] == "frozen" else "; the gates' weights trained one more epoch, Michel's order's "
                             "did not: not a comparison of the heads alone"))
            for r in chosen.sort("task", "seed", "weights", "heads_kept").iter_rows(named=True)]


PAPER_PLACEMENT = "output"  # Kovaleva et al. 2021 disable the output LayerNorms


def outliers_disrupt(contrast: pl.DataFrame) -> list[Measured]:
    """Per task, across its seeds whose models have outlier dimensions: the outliers' score change in the output
    LayerNorms minus the worst random draw's (the outliers stage's ``contrast``: ``minus_worst``), with its paired
    interval; the contrast with the draws' mean is in the note."""
    if not contrast.height:
        return []
    rows = contrast.filter((pl.col("placement") == PAPER_PLACEMENT) & pl.col("seed").is_null()).sort("task")
    return [Measured("outliers_disrupt", r["task"], r["minus_worst"], r["worst_ci_low"], r["worst_ci_high"],
                     tuple((r["task"], int(s)) for s in r["pooled_seeds"].split(",")),
                     note=f"outliers {r['outliers_delta'] * 100:+.1f} points, worst random draw {r['random_worst'] * 100:+.1f}, "
                          f"random mean {r['random_mean_delta'] * 100:+.1f} [{r['random_low'] * 100:+.1f}, "
                          f"{r['random_high'] * 100:+.1f}] over {r['draws']} draws; outliers minus the random mean "
                          f"{r['difference'] * 100:+.1f} [{r['ci_low'] * 100:+.1f}, {r['ci_high'] * 100:+.1f}]; seeds {r['pooled_seeds']}"
                          + (f"; seeds {r['seeds_without_outliers']} have no outlier dimension" if r.get("seeds_without_outliers") else ""))
            for r in rows.iter_rows(named=True)]


POS_FIELDS, DEPENDENCY_FIELDS = ("upos", "xpos"), ("deprels",)


def pos_before_dependencies(words: pl.DataFrame, label_specs: Mapping[str, Mapping], resamples: int, level: float,
                            seed: int) -> list[Measured]:
    """The pre-trained encoder's expected layer of the dependency-relation label set minus the part-of-speech one's
    (the label sets named by their treebank ``field`` in ``label_specs``, the probing stage's ``labels``), with a paired
    interval over dev sentences; nothing when the config probes no such pair."""
    pos = [name for name, spec in label_specs.items() if spec["field"] in POS_FIELDS]
    dependencies = [name for name, spec in label_specs.items() if spec["field"] in DEPENDENCY_FIELDS]
    rows = []
    for lower in pos:
        for higher in dependencies:
            value, draws = expected_layer_difference(words, lower, higher, resamples, seed)
            # NaN (no interval) when more than 1% of the resamples leave an expected layer undefined
            low, high = percentile_interval(draws, level, min_share=DEFINED_SHARE)
            rows.append(Measured("pos_before_dependencies", f"{higher} - {lower}", value, low, high,
                                 note=f"{int(words['layer'].max())} layers"))
    return rows


def side_p_values(value: float, low: float, high: float, region: Region, level: float) -> tuple[float, float]:
    """One row's evidence about the region, from its point and interval (Altman and Bland 2011, the normal
    approximation; each side of the interval gives the standard error on that side): ``p_inside``, the p-value of "the
    statistic lies outside the region" (small when the row is inside: the larger of the one-sided p-values against each
    bound, an intersection-union test), and ``p_outside``, the p-value of "it lies inside" (small when outside: the
    smaller one-sided p-value against a bound; each bound is tested at half of ``1 - level``, as the two tails of the
    row's own interval are). 1 where the row says nothing (NaN)."""
    if not all(math.isfinite(v) for v in (value, low, high)):
        return 1.0, 1.0
    z = stats.norm.ppf(0.5 + level / 2)

    def beyond(bound: float, above: bool) -> float:
        """One-sided p-value that the statistic lies on the far side of ``bound`` (below it when ``above``); a
        statistic sitting on a bound is on its inside only where the region is closed."""
        distance = value - bound if above else bound - value
        spread = (value - low if above else high - value) / z
        if spread <= 0:
            return 0.0 if distance > 0 or (distance == 0 and region.closed) else 1.0
        return float(stats.norm.sf(distance / spread))

    bounds = [(bound, above) for bound, above in ((region.low, True), (region.high, False)) if bound is not None]
    inside = [beyond(bound, above) for bound, above in bounds]
    outside = [beyond(bound, not above) for bound, above in bounds]
    return max(inside), min(outside)


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise level ``alpha``."""
    order = np.argsort(p_values, kind="stable")
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def overall_verdict(rows: Sequence[tuple[float, float, float, bool, bool]], region: Region, level: float) -> tuple[str, str]:
    """One verdict for a claim measured in several rows (module docstring): ``rows`` are (value, ci_low, ci_high,
    unfit, trusted) in the claim's own units, the rows that count towards it. Reproduced needs every fit row
    reproduced by its own interval *and* inside the region after Holm's correction; not reproduced needs a fit row not
    reproduced by its own interval *and* outside after Holm's correction: the claim's verdict never contradicts its
    rows. Returns the verdict and a line saying how it was reached."""
    fit = [(v, lo, hi, trusted) for v, lo, hi, unfit, trusted in rows if not unfit]
    if not fit:
        return MODEL_UNFIT, f"every one of the {len(rows)} rows rests on an unfit model"
    alpha = (1 - level) / 2  # each bound is a one-sided test: a row's own interval at ``level`` is these tests at alpha
    sides = [side_p_values(v, lo, hi, region, level) if trusted else (1.0, 1.0) for v, lo, hi, trusted in fit]
    own = [verdict(lo, hi, region, trusted=trusted and math.isfinite(v)) for v, lo, hi, trusted in fit]
    inside = [held and row == REPRODUCED for held, row in zip(holm([p for p, _ in sides], alpha), own)]
    outside = [held and row == NOT_REPRODUCED for held, row in zip(holm([p for _, p in sides], alpha), own)]
    untrusted = sum(not trusted for *_, trusted in fit)
    how = (f"Holm over {len(fit)} fit rows: {sum(inside)} inside the region, {sum(outside)} outside"
           + (f", {untrusted} not trusted" if untrusted else "")
           + (f"; {len(rows) - len(fit)} rows on unfit models left out" if len(rows) > len(fit) else ""))
    if all(inside):
        return REPRODUCED, how
    if any(outside):
        return NOT_REPRODUCED, how
    return INCONCLUSIVE, how


OVERALL = "overall"  # the scope of a claim's one verdict over its rows


def claims_table(measured: Sequence[Measured], fit: Mapping[tuple[str, int], bool], stages: Mapping[str, str],
                 level: float = 0.95, tasks: Sequence[str] | None = None) -> pl.DataFrame:
    """The claims table: one row per measured statistic (shown in the claim's scale), with its verdict; for a claim
    measured in several rows, one more row (scope ``overall``) with the claim's verdict by :func:`overall_verdict`; a
    row for each claim nothing was measured for, by what its stage did (``stages``: report section -> ``ran``,
    ``skipped`` (fitness.if_unfit: skip left out every model it would analyse) or ``not run``), or ``not applicable``
    where the claim is about tasks none of which is among the run's ``tasks`` (None: every task). A fine-tuned model a row
    rests on must have a fitness verdict in ``fit``: a missing one is an error, never fit by default."""
    rows = []
    done: dict[str, list[tuple[float, float, float, bool, bool]]] = {}
    for m in measured:
        claim = BY_KEY[m.key]
        missing = [f"{t} seed {s}" for t, s in m.models if (t, s) not in fit]
        if missing:
            raise ValueError(f"claim {m.key} ({m.scope}) rests on {', '.join(missing)}, which the fitness table "
                             "(results/fitness/fitness.parquet) has no verdict for. Fix: rerun the fitness rules for this model "
                             "(snakemake --forcerun model_fitness).")
        unfit_models = [f"{t} seed {s}" for t, s in m.models if not fit[(t, s)]]
        note = "; ".join(filter(None, [m.note, f"unfit: {', '.join(unfit_models)}" if unfit_models else ""]))
        trusted = m.trusted and math.isfinite(m.value)
        rows.append(_row(claim, m.scope, m.value, m.ci_low, m.ci_high,
                         verdict(m.ci_low, m.ci_high, claim.region, bool(unfit_models), trusted), note))
        done.setdefault(m.key, [])
        if m.counted:
            done[m.key].append((m.value, m.ci_low, m.ci_high, bool(unfit_models), trusted))
    for key, measured_rows in done.items():
        shown = sum(r["claim"] == key for r in rows)
        if shown > 1 and measured_rows:
            decided, how = overall_verdict(measured_rows, BY_KEY[key].region, level)
            if shown > len(measured_rows):
                how += f"; {shown - len(measured_rows)} rows shown for comparison only, not counted"
            rows.append(_row(BY_KEY[key], OVERALL, float("nan"), float("nan"), float("nan"), decided, how))
    for claim in CLAIMS:
        if claim.key in done:
            continue
        stage = stages.get(claim.stage, "not run")
        if claim.tasks and tasks is not None and not set(claim.tasks) & set(tasks):
            decided, why = NOT_APPLICABLE, (f"the claim is about {', '.join(claim.tasks)}, which this run does not have "
                                            f"among its tasks ({', '.join(tasks)})")
        elif stage == "skipped":
            decided, why = MODEL_UNFIT, "fitness.if_unfit: skip left out every model this claim would rest on: none is fit"
        elif stage == "ran":
            decided, why = NOT_RUN, "its stage ran, but not on the data this claim needs (see statistic)"
        else:
            decided, why = NOT_RUN, (f"the config does not run {claim.stage}, the stage this claim needs (stages, or "
                                     f"the {claim.stage} settings that choose its tasks and states)")
        rows.append(_row(claim, "", float("nan"), float("nan"), float("nan"), decided, why))
    order = {claim.key: i for i, claim in enumerate(CLAIMS)}
    return pl.DataFrame(rows).with_columns(
        pl.col("claim").replace_strict(order, return_dtype=pl.Int32).alias("_order"),
        (pl.col("scope") == OVERALL).alias("_overall"),
    ).sort("_order", "_overall", "scope").drop("_order", "_overall")


def _row(claim: Claim, scope: str, value: float, low: float, high: float, decided: str, note: str) -> dict[str, object]:
    # what a reader compares comes first (the page's table is wider than a screen); the long prose last
    return {
        "claim": claim.key, "scope": scope, "verdict": decided, "paper_value": claim.paper_value,
        "this_run": value * claim.scale, "ci_low": low * claim.scale, "ci_high": high * claim.scale,
        "claim_holds_if": claim.region.describe(claim.scale), "region_from": claim.region_source, "paper": claim.paper,
        "source": claim.source, "statement": claim.statement, "statistic": claim.statistic, "note": note,
        "paper_setup": claim.paper_setup,
    }


def verdict_rule(level: float) -> str:
    """The verdict rule in words, as the report prints it beside the table."""
    return VERDICT_RULE.format(level=f"{level:.0%}")


VERDICT_RULE = (
    "Verdict rule: each claim holds when its statistic lies in the region given in claim_holds_if: the paper's effect, "
    "from its own numbers (region_from says where the region comes from), not only its sign. Reproduced: the whole "
    "{level} interval (ci_low to ci_high) lies inside that region; not reproduced: the whole interval lies outside; "
    "inconclusive: the interval straddles a boundary, or the number is not trusted (note says why); model unfit: "
    "the number rests on a fine-tuned model that is not fit for analysis (see the baselines); not run: the config does "
    "not run the stage; not applicable: the claim is about a task this run does not have. A claim measured in several rows has one more row, scope 'overall': reproduced when every row on "
    "fit models lies inside the region after Holm's correction for the number of rows, not reproduced when at least one "
    "lies outside after it, inconclusive otherwise (p-values from each row's interval, Altman and Bland 2011). A verdict "
    "is about this run's models and data: 'reproduced' does not make the paper's number ours, 'not reproduced' is about "
    "this encoder and setup (paper_setup says how they differ), and an interval that holds the fine-tuning seeds fixed says "
    "nothing about other seeds (the per-seed rows and the overall rule do). Nothing is chosen on the data it is reported "
    "on (best heads: one half of the data chooses, the other reports)."
)
