"""Claims of the seed papers against this run: the paper's number, ours with an interval, and a verdict.

Each claim is a statement about a statistic ``theta`` and a *region* where ``theta`` must lie for the claim
to hold (``theta > 0``: disabling the best head raises the score; ``0.32 <= theta <= 0.61``: the heterogeneous
share). This run measures ``theta`` with a percentile bootstrap interval at ``level`` (the unit resampled is
given per claim: dev examples, sentences, heads), and the verdict rule (:func:`verdict`) is:

- **model unfit**: the number rests on a fine-tuned model that is not fit for analysis
  (:mod:`bertology_core.fitness`), or ``analysis.unfit: skip`` left out every model it would rest on;
- **reproduced**: the whole interval lies inside the region;
- **not reproduced**: the whole interval lies outside it;
- **inconclusive**: the interval straddles a boundary of the region, or the number cannot be trusted yet
  (the ``note`` says why: e.g. a pattern labeller not validated against human labels);
- **not run**: the config does not run the stage the claim needs.

Nothing is chosen on the data it is reported on: the best head to disable and the syntactic head are chosen
on one half of the data and reported on the other; Michel et al.'s curve ranks heads by importance on train.
Where our protocol departs from the paper's (model, data size, labeller, treebank), the ``paper_setup`` column
says so. Where the paper gives one model's point estimate with no interval (Clark et al.'s 86.8 vs 40.0,
Kovaleva et al.'s +3.2), the claim tested is its direction; the size is in ``paper_value`` to compare by eye.
The intervals hold the run's seeds fixed: with two or three seeds, seed-to-seed variation is shown by the
per-seed rows of each stage's own tables, not by these intervals. Figures are numbered as in the published
(EMNLP/NeurIPS/BlackboxNLP) versions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from bertology_core.bootstrap import metric_on_resamples, percentile_interval, resample_indices
from bertology_core.pruning_stats import prunable_share

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, MODEL_UNFIT, NOT_RUN = (
    "reproduced", "not reproduced", "inconclusive", "model unfit", "not run")


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


CLAIMS: tuple[Claim, ...] = (
    Claim("heterogeneous_share", "Kovaleva et al. 2019", "section 4.1, fig. 2",
          "Heterogeneous attention maps (the ones that could be informative) make up 32% (MRPC) to 61% (QQP) of all maps.",
          "32-61%", "share of the fine-tuned model's maps the CNN calls heterogeneous, %; resampling dev examples",
          Region(0.32, 0.61, closed=True), 100,
          "BERT-base fine-tuned on 7 GLUE tasks; a CNN trained on ~400 hand-labelled maps (F1 0.86); up to 1000 dev "
          "examples", "patterns"),
    Claim("last_layers_change_most", "Kovaleva et al. 2019", "section 4.3, fig. 5",
          "Fine-tuning changes the last two layers' attention most (all tasks but QQP).",
          "last two layers lowest cosine",
          "lowest mean cosine (pre-trained vs fine-tuned maps) of the layers before the last two, minus the highest of "
          "the last two; > 0 when the last two changed most; resampling dev examples",
          Region(0.0, None), 1, "BERT-base, 12 layers; cosine of flattened maps padded to a fixed length", "change"),
    Claim("best_head_disabling_gain", "Kovaleva et al. 2019", "section 4.6, fig. 8",
          "Disabling a single head can raise the score: from +0.1 (STS-B) to +1.2 points (MRPC).",
          "+0.1 to +1.2 points",
          "score change when the best head (chosen on one half of dev) is disabled, on the other half, mean over seeds, "
          "points; resampling dev examples",
          Region(0.0, None), 100,
          "BERT-base, one fine-tuning run, best head chosen and reported on the same full dev set", "disabling"),
    Claim("first_layer_disabling_gain_rte", "Kovaleva et al. 2019", "section 4.6, fig. 9",
          "Disabling the whole first layer raises RTE by 3.2 points.",
          "+3.2 points (RTE)", "score change with layer 1 disabled on RTE, mean over seeds, points; resampling dev examples",
          Region(0.0, None), 100, "BERT-base, one fine-tuning run, RTE dev set (baseline about 58%)", "disabling"),
    Claim("syntactic_head_obj", "Clark et al. 2019", "section 4.2, table 1",
          "A single head finds the direct object of a verb far better than the best fixed offset: 86.8 against 40.0 (dobj).",
          "86.8 vs 40.0",
          "accuracy of the best head for obj minus the best offset's, both chosen on half the treebank sentences and "
          "scored on the other half, points; resampling sentences",
          Region(0.0, None), 100,
          "BERT-base on the WSJ with Stanford Dependencies (dobj), head and offset chosen on the reported data; here the "
          "pre-trained encoder on UD English EWT (obj)", "probing"),
    Claim("mask_agreement_kappa", "Prasanna et al. 2020", "section 6 (stability of the good subnetworks)",
          "The good subnetworks are not stable across fine-tuning seeds: the heads that survive structured pruning agree "
          "at most fairly (Fleiss' kappa 0.4 or less, Landis and Koch's 'fair').",
          "0.18-0.32 (as cited by the seed lecture; not checked against the paper text here)",
          "Fleiss' kappa of the s-pruning head masks across seeds; resampling heads (seeds fixed)",
          Region(None, 0.40, closed=True), 1, "BERT-base, 5 seeds, 9 GLUE tasks", "pruning"),
    Claim("prunable_share", "Michel et al. 2019", "section 4.2, fig. 3b",
          "About 40% of BERT's heads can be pruned (least important first) without a noticeable loss.",
          "40% (MNLI; 50% MRPC, 60% SST-2 in appendix B)",
          "share of heads pruned, in importance order, before the dev score first falls more than the tolerance below "
          "the full model's, mean over seeds, %; resampling dev examples. The paper's 40% is four steps of 10% of the "
          "heads: 38.9% of BERT-base's 144 (and of MiniLM's 72)",
          Region(0.38, None, closed=True), 100,
          "BERT-base fine-tuned on MNLI; 'noticeable' judged by eye, steps of 10% of heads", "pruning"),
    Claim("confident_heads_important", "Voita et al. 2019", "sections 4.2 and 6.2",
          "The most important heads are the most confident ones.",
          "important heads are confident (shown per head, no correlation given)",
          "Spearman correlation over a fine-tuned model's heads between confidence (mean maximum attention weight on its dev "
          "dump) and Michel et al.'s importance E|dL/dxi| (on a train sample, not normalised by layer, as Voita et al.'s "
          "relevance is not); resampling heads",
          Region(0.0, None), 1,
          "Transformer NMT encoders (6 layers x 8 heads; WMT and OpenSubtitles), importance by layer-wise relevance "
          "propagation; here a fine-tuned classifier with Michel et al.'s gradient importance", "roles"),
    Claim("l0_gates_beat_michel", "Voita et al. 2019 against Michel et al. 2019", "Voita et al. section 6",
          "The heads L0-penalised gates keep do better than the same number kept in Michel et al.'s importance order (the "
          "two papers are concurrent and never compared: the seed lecture sets them side by side).",
          "not compared in either paper (Voita et al.: 38 of 48 encoder heads pruned for -0.15 BLEU)",
          "per strength whose gates prune 10% to 90% of the heads (a range fixed in advance): dev score with the heads the "
          "gates keep, at gate 1, minus with Michel et al.'s order cut at the same number, both on the fine-tuned weights "
          "(gates trained with the weights frozen), points; resampling dev examples (paired). The learnt gate values and "
          "the gates trained with the weights (Voita et al.) are in the head roles section's table",
          Region(0.0, None), 100,
          "Voita et al.: NMT encoders, gates trained with the whole model until convergence; here one epoch on the task's "
          "train split, scored on Michel et al.'s dev sample", "roles"),
    Claim("outliers_disrupt", "Kovaleva et al. 2021", "abstract; the authors' blog post (figs. 1-3)",
          "Disabling the outlier LayerNorm dimensions (weight and bias at 0 in every layer's output LayerNorm) degrades the "
          "model (the paper: significantly, while as many random dimensions do not); tested here: it costs more than as many "
          "random dimensions.",
          "BERT-base: outlier dimensions 308 and 381; disabling them degrades MLM and GLUE scores, random dimensions do not "
          "(the size per task is in the paper's tables, not read here)",
          "score change with the model's outlier dimensions disabled in the output LayerNorms minus the mean change over "
          "random draws of as many dimensions, mean over seeds, points; resampling dev examples (paired)",
          Region(None, 0.0), 100,
          "BERT-base (12 layers) and other encoders on GLUE dev; here a smaller encoder, where the criterion's 'more than a "
          "quarter of the layers' counts fewer layers (looser), each fine-tuned model's own outliers, and a dev sample", "outliers"),
    Claim("pos_before_dependencies", "Tenney et al. 2019", "section 4, table 1 and fig. 1",
          "Part-of-speech information is added at lower layers than dependency relations, in the order of the classical "
          "NLP pipeline.",
          "expected layer POS 3.39 < dependencies 5.69 (of 24)",
          "expected layer (cumulative scoring) of the dependency-relation probe minus the part-of-speech probe's, in layers, "
          "on the pre-trained encoder; resampling treebank dev sentences (paired)",
          Region(0.0, None), 1,
          "BERT-large (24 layers), edge probes (span pooling and a two-layer MLP) on OntoNotes POS and EWT dependencies; here "
          "linear word-level probes (the relation on the word's and its head's vectors) on a UD EWT sample, each layer "
          "standardised before the mix", "layer_mix"),
    Claim("probing_peak_middle", "Liu et al. 2019; Tenney et al. 2019", "Liu et al. section 4 (layer-wise transferability)",
          "Linear probes of a transformer do best on its middle layers, not its first or last.",
          "middle layers", "relative depth (best layer / number of layers; embeddings = 0) of the most accurate "
          "probe; middle = the middle half, 0.25 to 0.75; resampling treebank sentences",
          Region(0.25, 0.75, closed=True), 1,
          "BERT-base/large and ELMo, 17 probing tasks; here the pre-trained encoder on UD English EWT", "probing"),
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


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    low, high = percentile_interval(np.asarray(draws, dtype=float), level)
    return float(low), float(high)


def heterogeneous_share(classes: Mapping[tuple[str, int], pl.DataFrame], resamples: int, level: float, seed: int,
                        labels_source: str, validated: bool) -> list[Measured]:
    """Per task: the share of maps the CNN labels heterogeneous in the fine-tuned dumps (``classes``:
    (task, seed) -> classes table with ``idx`` and ``cnn_label``), seeds pooled; a cluster bootstrap over dev
    examples (all maps of an example together). Not trusted unless the labeller was validated on hand labels
    (:func:`bertology_core.patterns.labeller_validated`)."""
    rows = []
    for task in sorted({t for t, _ in classes}):
        seeds = sorted(s for t, s in classes if t == task)
        maps = pl.concat([classes[(task, s)].select("idx", "cnn_label") for s in seeds])
        per_example = maps.group_by("idx").agg(
            (pl.col("cnn_label") == "heterogeneous").sum().alias("hits"), pl.len().alias("maps")).sort("idx")
        hits, total = per_example["hits"].to_numpy().astype(float), per_example["maps"].to_numpy().astype(float)
        draws = resample_indices(len(hits), resamples, seed)
        low, high = _interval(hits[draws].sum(1) / total[draws].sum(1), level)
        note = f"labeller: {labels_source}" if validated else (
            f"the pattern labeller is not validated against hand labels ({labels_source}): its shares cannot be "
            "compared with the paper's yet")
        rows.append(Measured("heterogeneous_share", task, float(hits.sum() / total.sum()), low, high,
                             tuple((task, s) for s in seeds), validated, note))
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
        low, high = _interval(statistic(per_example[draws]), level)
        means = np.nanmean(per_example, axis=0)
        note = "layers by mean cosine, most changed first: " + ", ".join(f"{layers[i] + 1}" for i in np.argsort(means))
        rows.append(Measured("last_layers_change_most", task, float(statistic(per_example)), low, high,
                             tuple((task, s) for s in seeds), note=note))
    return rows


def best_head_gain(selection: pl.DataFrame, seeds: Mapping[str, Sequence[int]]) -> list[Measured]:
    """Per task (and disabling mode, when several): the across-seed held-out change of the best single head
    (disabling_stats.selection_table)."""
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


def mask_agreement(stability: pl.DataFrame, seeds: Mapping[str, Sequence[int]]) -> list[Measured]:
    """Per task: Fleiss' kappa of the s-pruning head masks across seeds, with its interval (pruning summary)."""
    rows = []
    heads = stability.filter((pl.col("method") == "s") & (pl.col("element") == "heads"))
    for r in heads.sort("task").iter_rows(named=True):
        rows.append(Measured("mask_agreement_kappa", r["task"], r["fleiss_kappa"], r["kappa_ci_low"], r["kappa_ci_high"],
                             tuple((r["task"], s) for s in seeds[r["task"]]),
                             note=f"{r['seeds']} seeds, {r['kept_share']:.0%} of heads kept on average"))
    return rows


def michel_prunable_share(curves: Mapping[tuple[str, int], pl.DataFrame], predictions: Mapping[tuple[str, int], pl.DataFrame],
                          metric_of: Mapping[str, str], tolerance: float, resamples: int, level: float, seed: int) -> list[Measured]:
    """Per task: Michel et al.'s prunable share, mean over seeds; the curve of every seed rescored on the same
    resamples of the dev examples (``predictions``: step, idx, label, prediction; ``curves``: step, share_pruned)."""
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
        low, high = _interval(np.mean(resampled, axis=0), level)
        rows.append(Measured("prunable_share", task, float(np.mean(per_seed)), low, high, tuple((task, s) for s in seeds),
                             note=f"tolerance {tolerance:.0%} of the full score; seeds: " + ", ".join(f"{v:.0%}" for v in per_seed)))
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
        low, high = _interval(np.argmax(accuracy, axis=1) / depth, level)
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
    """Per fine-tuned model and strength of the frozen-weights gates that prune a share of heads in
    :data:`COMPARED_PRUNED_SHARE`: the heads they keep (at gate 1) against Michel et al.'s order (head roles summary
    ``gates``: ``binary_minus_michel`` and its interval)."""
    low, high = COMPARED_PRUNED_SHARE
    if "weights" not in gates.columns:  # no gates in this config
        return []
    chosen = gates.filter((pl.col("weights") == "frozen") & pl.col("share_pruned").is_between(low, high))
    return [Measured("l0_gates_beat_michel", f"{r['task']} seed {r['seed']}, {r['heads_kept']} of {r['heads']} heads",
                     r["binary_minus_michel"], r["binary_ci_low"], r["binary_ci_high"], ((r["task"], r["seed"]),),
                     note=f"{r['metric']}; strength {r['strength']:g}; with the learnt gate values {r['gates_minus_michel'] * 100:+.1f} points")
            for r in chosen.sort("task", "seed", "heads_kept").iter_rows(named=True)]


PAPER_PLACEMENT = "output"  # Kovaleva et al. 2021 disable the output LayerNorms


def outliers_disrupt(contrast: pl.DataFrame) -> list[Measured]:
    """Per task, across its seeds whose models have outlier dimensions: the outliers' score change in the output
    LayerNorms minus the random draws' mean (the outliers stage's ``contrast``), with its paired interval."""
    if not contrast.height:
        return []
    rows = contrast.filter((pl.col("placement") == PAPER_PLACEMENT) & pl.col("seed").is_null()).sort("task")
    return [Measured("outliers_disrupt", r["task"], r["difference"], r["ci_low"], r["ci_high"],
                     tuple((r["task"], int(s)) for s in r["pooled_seeds"].split(",")),
                     note=f"outliers {r['outliers_delta'] * 100:+.1f} points, random {r['random_mean_delta'] * 100:+.1f} "
                          f"[{r['random_low'] * 100:+.1f}, {r['random_high'] * 100:+.1f}] over {r['draws']} draws; seeds {r['pooled_seeds']}"
                          + (f"; seeds {r['seeds_without_outliers']} have no outlier dimension" if r.get("seeds_without_outliers") else ""))
            for r in rows.iter_rows(named=True)]


POS_FIELDS, DEPENDENCY_FIELDS = ("upos", "xpos"), ("deprels",)


def pos_before_dependencies(words: pl.DataFrame, label_specs: Mapping[str, Mapping], resamples: int, level: float,
                            seed: int) -> list[Measured]:
    """The pre-trained encoder's expected layer of the dependency-relation label set minus the part-of-speech one's
    (the label sets named by their treebank ``field`` in ``label_specs``, the probing stage's ``labels``), with a paired
    interval over dev sentences; nothing when the config probes no such pair."""
    from bertology_core.layer_mix_stats import expected_layer_difference, interval

    pos = [name for name, spec in label_specs.items() if spec["field"] in POS_FIELDS]
    dependencies = [name for name, spec in label_specs.items() if spec["field"] in DEPENDENCY_FIELDS]
    rows = []
    for lower in pos:
        for higher in dependencies:
            value, draws = expected_layer_difference(words, lower, higher, resamples, seed)
            # NaN (no interval) when more than 1% of the resamples leave an expected layer undefined
            low, high = interval(draws, level)
            rows.append(Measured("pos_before_dependencies", f"{higher} - {lower}", value, low, high,
                                 note=f"{int(words['layer'].max())} layers"))
    return rows


def claims_table(measured: Sequence[Measured], fit: Mapping[tuple[str, int], bool], stages: Mapping[str, str]) -> pl.DataFrame:
    """The claims table: one row per measured statistic (shown in the claim's scale), with its verdict; a row for
    each claim nothing was measured for, by what its stage did (``stages``: report section -> ``ran``, ``skipped``
    (analysis.unfit: skip left out every model it would analyse) or ``not run``)."""
    rows = []
    done = set()
    for m in measured:
        claim = BY_KEY[m.key]
        unfit_models = [f"{t} seed {s}" for t, s in m.models if not fit.get((t, s), True)]
        note = "; ".join(filter(None, [m.note, f"unfit: {', '.join(unfit_models)}" if unfit_models else ""]))
        rows.append(_row(claim, m.scope, m.value, m.ci_low, m.ci_high,
                         verdict(m.ci_low, m.ci_high, claim.region, bool(unfit_models), m.trusted and math.isfinite(m.value)), note))
        done.add(m.key)
    for claim in CLAIMS:
        if claim.key in done:
            continue
        stage = stages.get(claim.stage, "not run")
        if stage == "skipped":
            decided, why = MODEL_UNFIT, "analysis.unfit: skip left out every model this claim would rest on: none is fit"
        elif stage == "ran":
            decided, why = NOT_RUN, "its stage ran, but not on the data this claim needs (see statistic)"
        else:
            decided, why = NOT_RUN, "the config does not run the stage this claim needs"
        rows.append(_row(claim, "", float("nan"), float("nan"), float("nan"), decided, why))
    order = {claim.key: i for i, claim in enumerate(CLAIMS)}
    return pl.DataFrame(rows).with_columns(pl.col("claim").replace_strict(order, return_dtype=pl.Int32).alias("_order")).sort(
        "_order", "scope").drop("_order")


def _row(claim: Claim, scope: str, value: float, low: float, high: float, decided: str, note: str) -> dict[str, object]:
    # what a reader compares comes first (the page's table is wider than a screen); the long prose last
    return {
        "claim": claim.key, "scope": scope, "verdict": decided, "paper_value": claim.paper_value,
        "this_run": value * claim.scale, "ci_low": low * claim.scale, "ci_high": high * claim.scale,
        "claim_holds_if": claim.region.describe(claim.scale), "paper": claim.paper, "source": claim.source,
        "statement": claim.statement, "statistic": claim.statistic, "note": note, "paper_setup": claim.paper_setup,
    }


def verdict_rule(level: float) -> str:
    """The verdict rule in words, as the report prints it beside the table."""
    return VERDICT_RULE.format(level=f"{level:.0%}")


VERDICT_RULE = (
    "Verdict rule: each claim holds when its statistic lies in the region given in claim_holds_if. Reproduced: the whole "
    "{level} bootstrap interval (ci_low to ci_high) lies inside that region; not reproduced: the whole interval lies outside; "
    "inconclusive: the interval straddles a boundary, or the number is not trusted yet (note says why); model unfit: "
    "the number rests on a fine-tuned model that is not fit for analysis (see the baselines); not run: the config does "
    "not run the stage. Nothing is chosen on the data it is reported on (best heads: one half of the data chooses, the "
    "other reports). paper_setup says how the paper's protocol differs from this run's."
)
