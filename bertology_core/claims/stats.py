"""Claims of the seed papers against this run: the paper's number, ours with an interval, and a verdict.

Each claim is a statement about a statistic ``theta`` and a *region* where ``theta`` must lie for the claim
to hold (``theta > 0``: disabling the best head raises the score; ``0.32 <= theta <= 0.61``: the heterogeneous
share). This run measures ``theta`` with an interval at ``level`` (a percentile bootstrap unless the claim says
otherwise: Clopper-Pearson for a share of labelled maps; the unit resampled is given per claim: dev examples,
sentences, heads), and the verdict rule (:func:`verdict`) is:

- **model unfit**: the number rests on a fine-tuned model that is not fit for analysis
  (:mod:`bertology_core.fitness.verdict_stats`), or ``fitness.if_unfit: skip`` left out every model it would rest on;
- **reproduced**: the whole interval lies inside the region;
- **not reproduced**: the whole interval lies outside it;
- **inconclusive**: the interval straddles a boundary of the region, or the number cannot be trusted
  (the ``note`` says why: too few seeds, masks whose sizes decide kappa, gates on retrained weights, a pattern
  labeller not validated against the label card's labels, two labelling passes that disagree about the region);
- **not run**: the config does not run the stage the claim needs;
- **not applicable**: the claim is about a task (RTE) this run does not have (a declared task of one's own is not
  the paper's task); claims about any fine-tuned model run on every task.

The region is the paper's *effect*, from its own numbers, not only its sign (``Claim.region_source`` says where each
comes from): "about 40% of heads can be pruned" is three to five 10% steps (25-55%), not "at least 38%"; "disabling
the outliers degrades the model while random dimensions do not" is a loss larger than every random draw's, not one
below the random mean; Clark et al.'s "far better" head is 10 points or more above the offset; where a paper gives one
run's size with no interval (Kovaleva et al.'s +3.2 points on RTE, Tenney et al.'s 2.3 of 24 layers) the region is at
least half of it. Where the paper's claim is an ordering or an existence with no size (which layers change most, a
correlation's direction) the region is that direction, and the paper's numbers are in ``paper_value`` to compare by eye.

**One verdict per claim** (:func:`pooled`), whatever the number of rows the config makes: the claim's effect is the mean
over its tasks of each task's mean over its fine-tuning seeds (rows of one model, such as gate strengths or disabling
modes, averaged first), with an interval from a two-level bootstrap: the seeds are resampled, then each drawn seed's own
examples (the upstream stages keep per-seed intervals, and where a row has no resamples of its own its interval stands
for them by a split normal, :func:`unit_draws`). Seed-to-seed variation is thus inside the interval: with 1-3 seeds the
interval widens where the seeds disagree, so "reproduced" is not the seeds that happened to be drawn. The verdict is
:func:`verdict`'s rule on that interval. More rows with the same effect only narrow it. Rows on unfit models are left
out, rows on *weak* models (:mod:`bertology_core.fitness.verdict_stats`: above the trivial predictor, the lower bound less than a
quarter of the way to BERT-base's published score) count and are named in ``rests_on``. A finding with no number (no outlier dimension
in a model, no gate strength in the compared range) is stated as such. Per-model rows, each task's seeds pooled, and
each labelling pass keep their own verdicts below the headline, for reading. The stages' levels must equal
``claims.level`` (checked when the workflow is parsed).

Nothing is chosen on the data it is reported on: the best head to disable and the syntactic head are chosen
on one half of the data and reported on the other; Michel et al.'s curve ranks heads by importance on train.
Where our protocol departs from the paper's (model, data size, labeller, treebank), the ``paper_setup`` column
says so. The pattern labels are the label card's (``data/pattern_labels``): made by eye, by whom the card says (for
the CPU profile's model, one labeller, the project's engineering agent, in two sessions), not by the paper's authors.
Figures are numbered as in the published (EMNLP/NeurIPS/BlackboxNLP) versions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from scipy import stats

from bertology_core.data import states
from bertology_core.layer_mix.stats import expected_layer_difference
from bertology_core.pruning.stats import prunable_share
from bertology_core.stats.bootstrap import DEFINED_SHARE, Sentences, metric_on_resamples, percentile_interval, resample_indices

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
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the values the statistic can take (a share: 0 to 1)


CLAIMS: tuple[Claim, ...] = (
    Claim("heterogeneous_share", "Kovaleva et al. 2019", "section 4.1, fig. 2",
          "Heterogeneous attention maps (the ones that could be informative) make up 32% (MRPC) to 61% (QQP) of all maps.",
          "32-61%",
          "share of the fine-tuned model's maps that are heterogeneous, %, estimated from the label card's labels (made by eye; "
          "the card says by whom) drawn at random from its dump, each labelling pass alone and pooled (Clopper-Pearson "
          "interval over maps); where no label names the dump, the pattern labeller's share (resampling dev examples), "
          "trusted only when the labeller is validated",
          Region(0.32, 0.61, closed=True), 100,
          "BERT-base fine-tuned on 7 GLUE tasks; a CNN trained on ~400 maps labelled by the authors (F1 0.86) labels every map; up to "
          "1000 dev examples; here a smaller encoder, a share estimated from a random sample of maps labelled by eye (the label card says by whom)",
          "patterns", "the paper's own range over its tasks (MRPC 32% to QQP 61%)", bounds=(0.0, 1.0)),
    Claim("last_layers_change_most", "Kovaleva et al. 2019", "section 4.3, fig. 5",
          "Fine-tuning changes the last two layers' attention most (all tasks but QQP).",
          "last two layers lowest cosine",
          "lowest mean cosine (pre-trained vs fine-tuned maps) of the layers before the last two, minus the highest of "
          "the last two, per fine-tuned model; > 0 when the last two changed most; resampling dev examples",
          Region(0.0, None), 1, "BERT-base, 12 layers; cosine of flattened maps padded to a fixed length", "attention_change",
          "an ordering: the claim is which layers change most (fig. 5 gives no size), so any positive gap is the effect"),
    Claim("best_head_disabling_gain", "Kovaleva et al. 2019", "section 4.6, fig. 8",
          "Disabling a single head can raise the score: from +0.1 (STS-B) to +1.2 points (MRPC).",
          "+0.1 to +1.2 points",
          "score change when a fine-tuned model's best head (chosen on one half of dev) is disabled, on the other half, "
          "points; resampling dev examples",
          Region(0.0, None), 100,
          "BERT-base, one fine-tuning run, best head chosen and reported on the same full dev set", "disabling",
          "an existence claim: some head's disabling raises the score. The paper's sizes (+0.1 to +1.2 points) are those of "
          "the best of 144 heads chosen and reported on the same dev set, which inflates them; a held-out gain is expected "
          "smaller, and the smallest of the paper's (+0.1) is within one example of zero on every task: any gain"),
    Claim("first_layer_disabling_gain_rte", "Kovaleva et al. 2019", "section 4.6, fig. 9",
          "Disabling the whole first layer raises RTE by 3.2 points.",
          "+3.2 points (RTE)", "score change with layer 1 disabled on RTE, per fine-tuned model, points; resampling dev "
          "examples", Region(0.016, None, closed=True), 100,
          "BERT-base, one fine-tuning run, RTE dev set (baseline about 58%)", "disabling",
          "at least 1.6 points, half the paper's +3.2: the paper gives one run on RTE's 277 dev examples and no interval; "
          "+3.2 points is 9 examples net, so its own standard error is at least sqrt(9)/277 = 1.1 points, and the smallest "
          "effect it could have detected with a third of the power (Simonsohn 2015's 'small telescopes', 1.52 standard "
          "errors) is 1.6 points: a gain below that is not the paper's effect",
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
          "same baseline; the paper's gap is 46.8 points", bounds=(-1.0, 1.0)),
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
          "Landis and Koch's 'fair' agreement or less (0.40), the paper's reading of its 0.18-0.32", bounds=(-1.0, 1.0)),
    Claim("prunable_share", "Michel et al. 2019", "section 4.2, fig. 3b",
          "About 40% of BERT's heads can be pruned (least important first) without a noticeable loss.",
          "40% (MNLI)",
          "share of heads pruned, in importance order, before the dev score first falls more than the tolerance below "
          "the full model's, per fine-tuned model, %; resampling dev examples",
          Region(0.25, 0.55, closed=True), 100,
          "BERT-base fine-tuned on MNLI; importance on the whole training set (its code's default), from each token's "
          "gradient; 'noticeable' judged by eye, steps of 10% of heads", "pruning",
          "'about 40%' (the paper's 'up to 40% ... performance drops sharply when pruning further'), four steps of 10% of "
          "the heads (38.9% of BERT-base's 144): three to five steps, 25% to 55% (half a step beyond them, as a step of "
          "round(10% of the heads) is 9.7% of 72 heads)", bounds=(0.0, 1.0)),
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
          "only a within-layer correlation tests it (whether the very top heads are the confident ones is not tested apart)", bounds=(-1.0, 1.0)),
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
          "of the random draws of as many dimensions (the worst taken anew on each resample), per fine-tuned model, points; "
          "resampling dev examples (paired); a model with no outlier dimension is a finding (not reproduced for it)",
          Region(None, 0.0), 100,
          "BERT-base (12 layers) and other encoders on GLUE dev; here a smaller encoder, where the criterion's 'more than a "
          "quarter of the layers' counts fewer layers (looser), each fine-tuned model's own outliers, and a dev sample", "outliers",
          "a large loss against none: the outliers cost more than every random draw, not merely more than the draws' mean "
          "(stricter with more draws: outliers.random_draws sets how many)"),
    Claim("pos_before_dependencies", "Tenney et al. 2019", "section 4, table 1 and fig. 1",
          "Part-of-speech information is added at lower layers than dependency relations, in the order of the classical "
          "NLP pipeline.",
          "expected layer POS 3.39 < dependencies 5.69 (of 24): 9.6% of the depth apart",
          "expected layer (cumulative scoring) of the dependency-relation probe minus the part-of-speech probe's, as a "
          "share of the encoder's layers, on the pre-trained encoder, mean over probe seeds; resampling treebank dev "
          "sentences and one probe seed per resample (paired)",
          Region(0.048, None, closed=True), 100,
          "BERT-large (24 layers), edge probes (span pooling and a two-layer MLP) on OntoNotes POS and EWT dependencies, one "
          "run each; here linear word-level probes (the relation on the word's and its head's vectors) on a UD EWT sample, "
          "each layer standardised before the mix, several probe seeds", "layer_mix",
          "at least half the paper's gap, as a share of the depth (2.3 of 24 layers, 9.6%; half: 4.8%): the paper gives "
          "one run per probe and no interval, so half its size is the tolerance, as for the RTE layer (no standard "
          "error to derive it from here: the paper reports none); on a 6-layer encoder 4.8% is 0.29 layers, the region "
          "scaling with the depth as the paper's gap would", bounds=(-1.0, 1.0)),
    Claim("probing_peak_middle", "Liu et al. 2019; Tenney et al. 2019", "Liu et al. section 4 (layer-wise transferability)",
          "Linear probes of a transformer do best on its middle layers, not its first or last.",
          "middle layers", "relative depth (best layer / number of layers; embeddings = 0) of the most accurate "
          "probe; middle = the middle half, 0.25 to 0.75; resampling treebank sentences",
          Region(0.25, 0.75, closed=True), 1,
          "BERT-base/large and ELMo, 17 probing tasks; here the pre-trained encoder on UD English EWT", "probing",
          "'middle layers', read as the middle half of the depth", bounds=(0.0, 1.0)),
)
BY_KEY = {claim.key: claim for claim in CLAIMS}


@dataclass(frozen=True)
class Measured:
    """One row of the claims table before its verdict: a claim's statistic on one scope (a fine-tuned model, a task,
    a label set). ``task`` and ``seed`` say which unit of the claim's pooled estimate the row is (:func:`pooled`): rows
    of one task are pooled over their seeds, rows of one seed (strengths, modes) averaged; ``draws``: the statistic on
    resamples of the row's own examples (sentences, heads), where the row has them, else its interval stands for them
    (:func:`unit_draws`). ``finding``: a verdict the row states without a number (no outlier dimension found)."""

    key: str
    scope: str
    value: float
    ci_low: float
    ci_high: float
    models: tuple[tuple[str, int], ...] = ()  # (task, seed) of the fine-tuned models the number rests on
    trusted: bool = True
    note: str = ""
    counted: bool = True  # whether the row counts towards the claim's one verdict (False: shown for comparison only)
    task: str | None = None
    seed: int | None = None
    draws: np.ndarray | None = field(default=None, compare=False, repr=False)
    finding: str | None = None
    veto: str = ""  # why the row's number, though trusted, cannot carry a verdict (labelling passes that disagree)


def heterogeneous_share(classes: Mapping[tuple[str, int], pl.DataFrame], resamples: int, level: float, seed: int,
                        labels_source: str, validated: bool) -> list[Measured]:
    """Per fine-tuned model: the share of maps the CNN labels heterogeneous in its dump (``classes``: (task, seed) ->
    classes table with ``idx`` and ``cnn_label``); a cluster bootstrap over dev examples (all maps of an example
    together). Not trusted unless the labeller was validated against the label card's labels
    (:func:`bertology_core.patterns.feature_tables.labeller_validated`)."""
    rows = []
    for task, run_seed in sorted(classes):
        per_example = classes[(task, run_seed)].group_by("idx").agg(
            (pl.col("cnn_label") == "heterogeneous").sum().alias("hits"), pl.len().alias("maps")).sort("idx")
        hits, total = per_example["hits"].to_numpy().astype(float), per_example["maps"].to_numpy().astype(float)
        draws = resample_indices(len(hits), resamples, seed)
        shares = hits[draws].sum(1) / total[draws].sum(1)
        low, high = percentile_interval(shares, level)
        note = f"labeller: {labels_source}" if validated else (
            f"the pattern labeller is not validated against the label card's labels ({labels_source}): its shares cannot "
            "be compared with the paper's yet")
        rows.append(Measured("heterogeneous_share", f"{task} seed {run_seed}", float(hits.sum() / total.sum()), low, high,
                             ((task, run_seed),), validated, note, task=task, seed=run_seed, draws=shares))
    return rows


# the label card's random samples, one per labelling session: the training labels' random part and the test labels'
# (the report's key under which each pass's shares sit: none for the training labels)
PASSES = {"labels": None, "test labels": "test"}


def hand_label_heterogeneous_share(report: Mapping) -> dict[str, dict[str, tuple[int, int, tuple[tuple[str, int], ...]]]]:
    """Per task and labelling pass (:data:`PASSES`): (heterogeneous maps, maps, the fine-tuned models) among the label
    card's labels drawn at random from the fine-tuned models' dumps (the pattern classifier's ``report``: the training
    labels' random part, and the test labels' ``test-random`` part, made in another session; each a simple random
    sample of the maps of a dump). Empty when no label names a fine-tuned dump of this run."""
    counts: dict[str, dict[str, list]] = {}
    for name, key in PASSES.items():
        for row in ((report.get(key) or {}) if key else report).get("hand_label_shares_random_sample") or []:
            if not states.is_seeded(row["state"]) or states.split_seeded(row["state"])[0] != states.FINETUNED:
                continue
            seed = states.split_seeded(row["state"])[1]
            entry = counts.setdefault(row["task"], {}).setdefault(name, [0, 0, set()])
            entry[0] += int(row["maps"]) if row["label"] == "heterogeneous" else 0
            entry[1] += int(row["maps"])
            entry[2].add((row["task"], seed))
    return {task: {name: (hits, total, tuple(sorted(models))) for name, (hits, total, models) in passes.items()}
            for task, passes in sorted(counts.items())}


def heterogeneous_share_from_hand_labels(report: Mapping, level: float, labeller: Mapping[str, float],
                                         labeller_note: str, resamples: int = 1000, seed: int = 0,
                                         labelled_by: str = "") -> list[Measured]:
    """Per task whose fine-tuned dumps have labels drawn at random: the heterogeneous share of those maps with a
    Clopper-Pearson interval (a share is a proportion: a random sample of labelled maps estimates it without any
    labeller), for each labelling pass (shown, not counted) and both pooled (counted). When the passes' own intervals
    disagree about the region (their verdicts differ) the pooled row keeps its number but carries a veto: two random
    samples of the same dumps' maps, labelled in two sessions, that tell different stories give no verdict, here or in
    the claim's headline. The pooled row's draws for the headline come from the Jeffreys Beta posterior of its share
    (never collapsing at 0 or all maps). ``labeller``: task -> the pattern labeller's
    share over every map, shown beside it with ``labeller_note``; ``labelled_by``: who made the labels (the card)."""
    rows, region = [], BY_KEY["heterogeneous_share"].region
    who = f" ({labelled_by})" if labelled_by else ""
    rng = np.random.default_rng(seed)
    for task, passes in hand_label_heterogeneous_share(report).items():
        own = {}
        for name, (hits, total, models) in passes.items():
            if not total:
                continue
            interval = stats.binomtest(hits, total).proportion_ci(confidence_level=level, method="exact")
            own[name] = verdict(float(interval.low), float(interval.high), region)
            made = who if name == "labels" else " (the card's test labels, labelled in another session)"
            rows.append(Measured("heterogeneous_share", f"{task}, {name} alone", hits / total, float(interval.low),
                                 float(interval.high), models, counted=False, task=task,
                                 note=f"{hits} of {total} maps of the {name}' random sample{made}; {own[name]} alone"))
        hits = sum(h for h, _, _ in passes.values())
        total = sum(t for _, t, _ in passes.values())
        if not total:
            continue
        models = tuple(sorted({m for _, _, ms in passes.values() for m in ms}))
        interval = stats.binomtest(hits, total).proportion_ci(confidence_level=level, method="exact")
        agree = len(set(own.values())) <= 1
        apart = ""
        if len(passes) == 2:
            (h1, t1, _), (h2, t2, _) = passes.values()
            apart = f"; the passes apart: Fisher's exact p = {stats.fisher_exact([[h1, t1 - h1], [h2, t2 - h2]])[1]:.3f}"
        beside = f"; the labeller's share of every map {100 * labeller[task]:.1f}%" if task in labeller else ""
        rows.append(Measured(
            "heterogeneous_share", f"{task}, labels pooled", hits / total, float(interval.low), float(interval.high), models,
            task=task, draws=rng.beta(hits + 0.5, total - hits + 0.5, resamples),
            veto="" if agree else "the labelling passes disagree about the region",
            note=f"{hits} of {total} maps drawn at random from the fine-tuned dumps, by eye{who}, {len(passes)} labelling "
                 f"passes pooled{apart}" + ("" if agree else "; the passes disagree about the region ("
                 + ", ".join(f"{n}: {v}" for n, v in own.items()) + "): not pooled into a verdict")
                 + f"{beside} ({labeller_note})"))
    return rows


def last_layers_change(changes: Mapping[tuple[str, int], pl.DataFrame], resamples: int, level: float, seed: int) -> list[Measured]:
    """Per fine-tuned model: min over the layers before the last two of the layer's mean cosine, minus the max over
    the last two (``changes``: (task, seed) -> ``idx, layer, head, cosine``); resampling examples."""
    rows = []
    for task, run_seed in sorted(changes):
        frame = changes[(task, run_seed)]
        layers = sorted(frame["layer"].unique().to_list())
        if len(layers) < 3:
            continue  # no layer before the last two to compare with
        wide = frame.group_by("idx", "layer").agg(pl.col("cosine").mean()).pivot(on="layer", index="idx", values="cosine").sort("idx")
        per_example = wide.select([str(layer) for layer in layers]).to_numpy()  # [examples, layers]

        def statistic(values: np.ndarray) -> np.ndarray:  # values [..., examples, layers] -> [...]
            means = np.nanmean(values, axis=-2)
            return means[..., :-2].min(-1) - means[..., -2:].max(-1)

        draws = statistic(per_example[resample_indices(per_example.shape[0], resamples, seed)])
        low, high = percentile_interval(draws, level)
        means = np.nanmean(per_example, axis=0)
        note = "layers by mean cosine, most changed first: " + ", ".join(f"{layers[i] + 1}" for i in np.argsort(means))
        rows.append(Measured("last_layers_change_most", f"{task} seed {run_seed}", float(statistic(per_example)), low, high,
                             ((task, run_seed),), note=note, task=task, seed=run_seed, draws=draws))
    return rows


def best_head_gain(selection: pl.DataFrame, seeds: Mapping[str, Sequence[int]]) -> list[Measured]:
    """Per fine-tuned model (and disabling mode, when several): the held-out change of its best single head, chosen on
    the selection half of dev, reported on the other (stats.selection_table's per-seed rows)."""
    rows = []
    per_seed = selection.filter((pl.col("kind") == "head") & pl.col("seed").is_not_null())
    several = per_seed["mode"].n_unique() > 1
    for row in per_seed.sort("task", "seed", "mode").iter_rows(named=True):
        scope = f"{row['task']} seed {row['seed']}" + (f" ({row['mode']})" if several else "")
        rows.append(Measured("best_head_disabling_gain", scope, row["report_delta"], row["report_ci_low"],
                             row["report_ci_high"], ((row["task"], int(row["seed"])),), task=row["task"], seed=int(row["seed"]),
                             note=f"head {row['config']} chosen on {row['selection_examples']} dev examples, reported on "
                                  f"{row['report_examples']} others"))
    return rows


def first_layer_gain(deltas: pl.DataFrame, seeds: Mapping[str, Sequence[int]], task: str = "RTE") -> list[Measured]:
    """Per fine-tuned model of ``task``: the change when the first layer is disabled (a layer the paper names: nothing
    to choose, so all swept examples report it)."""
    rows = deltas.filter((pl.col("task") == task) & (pl.col("kind") == "layer") & (pl.col("layer") == 0) & pl.col("seed").is_not_null())
    several = rows["mode"].n_unique() > 1
    return [Measured("first_layer_disabling_gain_rte", f"{task} seed {r['seed']}" + (f" ({r['mode']})" if several else ""),
                     r["delta"], r["ci_low"], r["ci_high"], ((task, int(r["seed"])),), task=task, seed=int(r["seed"]),
                     note=f"{r['examples']} dev examples, {r['mode']} attention")
            for r in rows.sort("seed", "mode").iter_rows(named=True)]


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
                             tuple((r["task"], s) for s in ticket_seeds), trusted=enough, note=note, task=r["task"]))
    return rows


def michel_prunable_share(curves: Mapping[tuple[str, int], pl.DataFrame], predictions: Mapping[tuple[str, int], pl.DataFrame],
                          metric_of: Mapping[str, str], tolerance: float, resamples: int, level: float, seed: int,
                          importance_note: str = "", label_names_of: Mapping[str, tuple[str, ...] | None] | None = None,
                          ) -> list[Measured]:
    """Per fine-tuned model: Michel et al.'s prunable share, its curve rescored on resamples of the dev examples
    (``predictions``: step, idx, label, prediction; ``curves``: step, share_pruned); ``importance_note``: what the
    ranking was computed on, beside each row (the paper used all of train). A token task's predictions hold each
    sentence's words: scored over words, resampling sentences (``label_names_of``: its labels, for span F1)."""
    rows = []
    for task, run_seed in sorted(curves):
        shares = curves[(task, run_seed)].sort("step")["share_pruned"].to_list()
        frame = predictions[(task, run_seed)]
        sentences = None
        if isinstance(frame.schema["prediction"], pl.List):  # a token task: a row per word
            frame = frame.with_columns(pl.int_ranges(pl.col("label").list.len()).alias("word")).explode("label", "prediction", "word")
            frame = frame.with_columns(pl.format("{}:{}", "idx", "word").alias("unit"))
        else:
            frame = frame.with_columns(pl.col("idx").cast(pl.String).alias("unit"))
        first = frame.filter(pl.col("step") == 0).sort("idx", *(["word"] if "word" in frame.columns else []))
        units = first["unit"].to_list()
        if "word" in frame.columns:
            sentences = Sentences.of_runs(first["idx"].to_numpy(), (label_names_of or {}).get(task))
        wide = frame.pivot(on="unit", index="step", values="prediction").sort("step")
        matrix = wide.select(units).to_numpy()  # [steps, examples (a token task's: words)]
        labels = first["label"].to_numpy()
        examples = len(units) if sentences is None else len(sentences)
        full = metric_on_resamples(metric_of[task], matrix, labels, np.arange(examples)[None, :], sentences)[:, 0]
        scores = metric_on_resamples(metric_of[task], matrix, labels, resample_indices(examples, resamples, seed),
                                     sentences)  # [steps, R]
        draws = np.array([prunable_share(shares, scores[:, r].tolist(), tolerance) for r in range(scores.shape[1])])
        low, high = percentile_interval(draws, level)
        rows.append(Measured("prunable_share", f"{task} seed {run_seed}", float(prunable_share(shares, full.tolist(), tolerance)),
                             low, high, ((task, run_seed),), task=task, seed=run_seed, draws=draws,
                             note=f"tolerance {tolerance:.0%} of the full score" + (f"; {importance_note}" if importance_note else "")))
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
                             note=f"best layer {layers[best]} of {depth} (accuracy {r.sum(0)[best] / n.sum(0)[best]:.3f})",
                             draws=np.argmax(accuracy, axis=1) / depth))
    return rows


def confident_heads_important(relations: pl.DataFrame, importance: str) -> list[Measured]:
    """Per fine-tuned model (task, seed): the head roles summary's Spearman correlation of confidence with Michel et
    al.'s importance (the target named ``importance``) and its interval over heads (``importance_relations``)."""
    rows = relations.filter((pl.col("measure") == "confidence") & (pl.col("target") == importance)).sort("task", "seed")
    return [Measured("confident_heads_important", f"{r['task']} seed {r['seed']}", r["spearman"], r["ci_low"], r["ci_high"],
                     ((r["task"], r["seed"]),), note=f"{r['heads']} heads", task=r["task"], seed=int(r["seed"]))
            for r in rows.iter_rows(named=True)]


COMPARED_PRUNED_SHARE = (0.1, 0.9)  # where the two pruning methods are compared (fixed before any run)


def l0_gates_beat_michel(gates: pl.DataFrame, michel_examples: str = "") -> list[Measured]:
    """Per fine-tuned model, weights setting and strength whose gates prune a share of heads in
    :data:`COMPARED_PRUNED_SHARE`: the heads they keep (at gate 1) against Michel et al.'s order (head roles summary
    ``gates``: ``binary_minus_michel`` and its interval). Gates trained with the weights are scored on weights trained
    one more epoch while Michel's order prunes the fine-tuned weights as they are: those rows are shown, not trusted.
    A model none of whose frozen-weights strengths pruned a share in the range gets a row saying so (a finding, no
    number: the comparison was not made). The two methods see different data (the gates their ``train_examples``,
    Michel's order ``michel_examples``): each row names both."""
    low, high = COMPARED_PRUNED_SHARE
    if "weights" not in gates.columns:  # no gates in this config
        return []
    chosen = gates.filter(pl.col("share_pruned").is_between(low, high))
    data = (lambda r: f"; gates trained on {r['train_examples']} training examples, Michel's order from {michel_examples}"
            if michel_examples and r.get("train_examples") is not None else "")
    rows = [Measured("l0_gates_beat_michel", f"{r['task']} seed {r['seed']}, {r['heads_kept']} of {r['heads']} heads, weights {r['weights']}",
                     r["binary_minus_michel"], r["binary_ci_low"], r["binary_ci_high"], ((r["task"], r["seed"]),),
                     trusted=r["weights"] == "frozen", counted=r["weights"] == "frozen", task=r["task"], seed=int(r["seed"]),
                     note=f"{r['metric']}; strength {r['strength']:g}; with the learnt gate values {r['gates_minus_michel'] * 100:+.1f} points"
                          + data(r) + ("" if r["weights"] == "frozen" else "; the gates' weights trained one more epoch, Michel's order's "
                             "did not: not a comparison of the heads alone"))
            for r in chosen.sort("task", "seed", "weights", "heads_kept").iter_rows(named=True)]
    compared = {(r.task, r.seed) for r in rows if r.counted}
    for (task, run_seed), frame in sorted(gates.filter(pl.col("weights") == "frozen").group_by("task", "seed"), key=lambda kv: kv[0]):
        if (task, int(run_seed)) in compared:
            continue
        pruned = ", ".join(f"{share:.0%} at {strength:g}" for strength, share in frame.sort("strength").select("strength", "share_pruned").iter_rows())
        rows.append(Measured("l0_gates_beat_michel", f"{task} seed {run_seed}, weights frozen", float("nan"), float("nan"),
                             float("nan"), ((task, int(run_seed)),), trusted=False, task=task, seed=int(run_seed),
                             finding=INCONCLUSIVE,
                             note=f"no strength pruned {low:.0%} to {high:.0%} of the heads (pruned: {pruned}): no comparison "
                                  "made; head_roles.gates' strengths set which shares are tried"))
    return rows


PAPER_PLACEMENT = "output"  # Kovaleva et al. 2021 disable the output LayerNorms


def outliers_disrupt(contrast: pl.DataFrame, dimensions: pl.DataFrame | None = None,
                     tasks: Sequence[str] | None = None) -> list[Measured]:
    """Per fine-tuned model with outlier dimensions: their score change in the output LayerNorms minus the worst random
    draw's (the outliers stage's ``contrast``: ``minus_worst``), with its paired interval; the contrast with the draws'
    mean is in the note. A fine-tuned model of ``tasks`` without any outlier dimension (the stage's ``dimensions``
    summary) gets a row stating that finding: the paper's outliers are absent there, so its claim about them does not
    hold for that model (not reproduced)."""
    rows: list[Measured] = []
    if contrast.height:
        per_seed = contrast.filter((pl.col("placement") == PAPER_PLACEMENT) & pl.col("seed").is_not_null()).sort("task", "seed")
        rows = [Measured("outliers_disrupt", f"{r['task']} seed {r['seed']}", r["minus_worst"], r["worst_ci_low"], r["worst_ci_high"],
                         ((r["task"], int(r["seed"])),), task=r["task"], seed=int(r["seed"]),
                         note=f"outliers {r['outliers_delta'] * 100:+.1f} points, worst random draw {r['random_worst'] * 100:+.1f}, "
                              f"random mean {r['random_mean_delta'] * 100:+.1f} [{r['random_low'] * 100:+.1f}, "
                              f"{r['random_high'] * 100:+.1f}] over {r['draws']} draws; outliers minus the random mean "
                              f"{r['difference'] * 100:+.1f} [{r['ci_low'] * 100:+.1f}, {r['ci_high'] * 100:+.1f}]")
                for r in per_seed.iter_rows(named=True)]
    if dimensions is not None and dimensions.height:
        fine_tuned = dimensions.filter((pl.col("state") == states.FINETUNED) & pl.col("seed").is_not_null())
        if "not_applicable" in fine_tuned.columns:  # a pre-LayerNorm encoder: the criterion does not apply, no finding
            fine_tuned = fine_tuned.filter(pl.col("not_applicable").is_null())
        if tasks is not None:
            fine_tuned = fine_tuned.filter(pl.col("task").is_in(list(tasks)))
        measured = {(r.task, r.seed) for r in rows}
        for (task, run_seed), frame in sorted(fine_tuned.group_by("task", "seed"), key=lambda kv: kv[0]):
            if (task, int(run_seed)) in measured or frame["dimension"].is_not_null().any():
                continue
            rows.append(Measured("outliers_disrupt", f"{task} seed {run_seed}", float("nan"), float("nan"), float("nan"),
                                 ((task, int(run_seed)),), trusted=False, task=task, seed=int(run_seed), finding=NOT_REPRODUCED,
                                 note="no outlier dimension found in this model by the paper's criterion (outliers.sigmas, "
                                      "outliers.min_layer_share): nothing to disable, the outliers the claim is about are absent"))
    return rows


POS_FIELDS, DEPENDENCY_FIELDS = ("upos", "xpos"), ("deprels",)


def pos_before_dependencies(words: pl.DataFrame, label_specs: Mapping[str, Mapping], resamples: int, level: float,
                            seed: int) -> list[Measured]:
    """The pre-trained encoder's expected layer of the dependency-relation label set minus the part-of-speech one's,
    as a share of its depth (the paper's gap is 2.3 of BERT-large's 24 layers) (the label sets named by their treebank ``field`` in ``label_specs``, the probing stage's ``labels``), with a paired
    interval over dev sentences; nothing when the config probes no such pair."""
    pos = [name for name, spec in label_specs.items() if spec["field"] in POS_FIELDS]
    dependencies = [name for name, spec in label_specs.items() if spec["field"] in DEPENDENCY_FIELDS]
    rows = []
    for lower in pos:
        for higher in dependencies:
            value, draws = expected_layer_difference(words, lower, higher, resamples, seed)
            depth = int(words["layer"].max())  # the mix's layers above the embeddings: the paper's 24 for BERT-large
            value, draws = value / depth, np.asarray(draws) / depth
            # NaN (no interval) when more than 1% of the resamples leave an expected layer undefined
            low, high = percentile_interval(draws, level, min_share=DEFINED_SHARE)
            rows.append(Measured("pos_before_dependencies", f"{higher} - {lower}", value, low, high, draws=draws,
                                 note=f"{value * depth:+.2f} of {depth} layers"))
    return rows


def unit_draws(m: Measured, resamples: int, level: float, rng: np.random.Generator,
               normal: np.ndarray | None = None) -> np.ndarray | None:
    """``[resamples]`` draws of one row's statistic over its own examples: the row's ``draws`` where it has them
    (index ``r`` is the ``r``-th resample of the examples, which the rows of one task share: their stages resample dev
    with the same seed; another number of draws is resampled to ``resamples``), else a split normal from its point and
    interval (each side of the interval gives the spread on that side, Altman and Bland 2011's normal approximation;
    the upstream stages keep intervals, not their resamples). ``normal``: the standard normal draws to scale, shared by
    the rows of one task so that rows measured on the same examples move together (averaging them never narrows the
    interval as if they were independent). None when the row has no number."""
    if not all(math.isfinite(v) for v in (m.value, m.ci_low, m.ci_high)):
        return None
    if m.draws is not None:
        draws = np.asarray(m.draws, dtype=float)
        if draws.size == resamples:
            return draws
        draws = draws[np.isfinite(draws)]
        if draws.size:
            return rng.choice(draws, resamples)
    z = stats.norm.ppf(0.5 + level / 2)
    normal = rng.standard_normal(resamples) if normal is None else normal
    below, above = max(m.value - m.ci_low, 0.0), max(m.ci_high - m.value, 0.0)  # a point outside its interval: no mirror
    return m.value + normal * np.where(normal < 0, below, above) / z


def seed_spread_factor(seeds: int, level: float) -> float:
    """How much the seed part of a task's bootstrap spread is widened: a percentile bootstrap over ``seeds`` values
    covers their mean far less often than ``level`` (about 52% with 2 seeds, 70% with 3, 83% with 5 at 95%), because it
    resamples from a spread that is itself estimated from a handful and biased low by ``(k - 1) / k``. Student's t with
    ``k - 1`` degrees of freedom and that bias give the factor ``sqrt(k / (k - 1)) * t / z`` (9.2 for 2 seeds, 2.7 for
    3, 1.6 for 5, 1.1 for 20), so that 2-3 seeds that disagree cannot make a verdict; 1 for a single seed (nothing to
    resample: the note says seed variation is not measured)."""
    if seeds < 2:
        return 1.0
    z = stats.norm.ppf(0.5 + level / 2)
    return float(math.sqrt(seeds / (seeds - 1)) * stats.t.ppf(0.5 + level / 2, seeds - 1) / z)


@dataclass(frozen=True)
class Pooled:
    """A claim's effect over several rows: its point, interval and verdict, and how they were reached."""

    value: float
    ci_low: float
    ci_high: float
    verdict: str
    how: str
    rests_on: str  # the fine-tuned models behind it, by fitness


def status_of(fit: Mapping[tuple[str, int], bool | str], model: tuple[str, int]) -> str:
    """A fine-tuned model's fitness (fit, weak, unfit) from the fitness table (a bool: fit or unfit)."""
    value = fit[model]
    return value if isinstance(value, str) else ("fit" if value else "unfit")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rests_on(models: Sequence[tuple[str, int]], fit: Mapping[tuple[str, int], bool | str]) -> str:
    by = {}
    for model in sorted(set(models)):
        by.setdefault(status_of(fit, model), []).append(f"{model[0]} seed {model[1]}")
    return "; ".join(f"{len(names)} {status}" + (f" ({', '.join(names)})" if status != "fit" else "")
                     for status, names in sorted(by.items(), key=lambda kv: ("fit", "weak", "unfit").index(kv[0])
                                                 if kv[0] in ("fit", "weak", "unfit") else 3))


def pooled(rows: Sequence[Measured], fit: Mapping[tuple[str, int], bool | str], region: Region, level: float,
           resamples: int, seed: int, bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[Pooled, list[tuple[str, Pooled]]]:
    """The claim's one verdict (module docstring), independent of how many rows the config makes: its effect over the
    rows that count, estimated over seeds and examples together. Rows of one fine-tuned model (strengths, modes) are
    averaged into one unit (their draws share the examples' resamples, so they move together); the units of a task
    (its seeds) are pooled by a two-level bootstrap: seeds drawn with replacement, then the examples (the same
    resample for every drawn seed: the seeds are scored on the same dev examples, Owen 2007's pigeonhole bootstrap),
    with the seed part widened by :func:`seed_spread_factor`; the tasks (or label sets), chosen by the config, are
    averaged. The interval is the percentile interval of those draws, the verdict :func:`verdict`'s. Left out: rows on
    unfit models, rows without a trusted number (the note says which). A row with a ``finding`` against the claim (no
    outlier dimension) or a ``veto`` (labelling passes that disagree) keeps the headline from a verdict it contradicts.
    Also returns each task's pooled row ``(task, Pooled)`` where a task has several seeds."""
    rng = np.random.default_rng(seed)
    nan = float("nan")
    counted = [m for m in rows if m.counted]
    unfit = [m for m in counted if any(status_of(fit, model) == "unfit" for model in m.models)]
    eligible = [m for m in counted if m not in unfit]
    if not counted:
        return Pooled(nan, nan, nan, INCONCLUSIVE, "no row counts towards the claim (rows shown for comparison only)",
                      _rests_on([model for m in rows for model in m.models], fit)), []
    if not eligible:
        return Pooled(nan, nan, nan, MODEL_UNFIT, f"{'every one of the ' if len(counted) > 1 else ''}{_count(len(counted), 'row')} "
                      f"rest{'s' if len(counted) == 1 else ''} on an unfit model",
                      _rests_on([model for m in counted for model in m.models], fit)), []
    normals = {m.task or m.scope: None for m in eligible}
    normals = {task: rng.standard_normal(resamples) for task in normals}
    usable = [(m, d) for m in eligible if m.trusted and not m.finding
              for d in [unit_draws(m, resamples, level, rng, normals[m.task or m.scope])] if d is not None]
    findings = [m for m in eligible if m.finding]
    vetoes = [m for m in eligible if m.veto]
    without = [m for m in eligible if m not in [u for u, _ in usable] and m not in findings]
    left_out = ([f"{_count(len(unfit), 'row')} on unfit models"] if unfit else []) + (
        [f"{_count(len(without), 'row')} without a trusted number (" + ", ".join(m.scope for m in without) + ")"] if without else [])
    if not usable:
        kinds = {m.finding for m in findings}
        if findings and len(kinds) == 1 and not without:
            return Pooled(nan, nan, nan, kinds.pop(), "every row states the same finding: " + findings[0].note,
                          _rests_on([model for m in findings for model in m.models], fit)), []
        return Pooled(nan, nan, nan, INCONCLUSIVE, "no row has a trusted number: " + "; ".join(
            left_out + [f"{m.scope}: {m.note}" for m in findings]), _rests_on([model for m in eligible for model in m.models], fit)), []
    if len(usable) == 1 and usable[0][0].draws is None:  # one row and nothing to pool: its own interval, not a simulation of it
        m = usable[0][0]
        value, low, high, per_task, seeds_counts, groups = m.value, m.ci_low, m.ci_high, [], [1], {m.task or m.scope: None}
    else:
        groups: dict[str, dict[object, list[tuple[Measured, np.ndarray]]]] = {}
        for m, d in usable:
            groups.setdefault(m.task or m.scope, {}).setdefault(m.seed if m.seed is not None else m.scope, []).append((m, d))
        group_values, group_draws, per_task, seeds_counts = [], [], [], []
        for name, units in groups.items():
            values = np.array([np.mean([m.value for m, _ in unit]) for unit in units.values()])
            draws = np.stack([np.nanmean([d for _, d in unit], axis=0) for unit in units.values()])  # [units, R]
            k = len(units)
            if k > 1:  # seeds drawn with replacement; the examples' resample r is the same for every drawn seed
                picked = rng.integers(0, k, size=(resamples, k))
                within = draws[picked, np.arange(resamples)[:, None]].mean(axis=1)
                between = values[picked].mean(axis=1) - values.mean()
                # kept within the values the statistic can take (a share is never below 0)
                task_draws = np.clip(within + (seed_spread_factor(k, level) - 1.0) * between, *bounds)
            else:
                task_draws = draws[0]
            value = float(values.mean())
            group_values.append(value)
            group_draws.append(task_draws)
            seeds_counts.append(k)
            if k > 1 and all(m.seed is not None for unit in units.values() for m, _ in unit):
                low, high = percentile_interval(task_draws, level)
                unit_models = [model for unit in units.values() for m, _ in unit for model in m.models]
                per_task.append((name, Pooled(value, low, high, verdict(low, high, region),
                                              f"mean over {k} seeds, seeds resampled (spread widened x{seed_spread_factor(k, level):.1f} "
                                              "for their number), then the examples", _rests_on(unit_models, fit))))
        value = float(np.mean(group_values))
        low, high = percentile_interval(np.mean(group_draws, axis=0), level)
    decided = verdict(low, high, region)
    seeded = any(m.seed is not None for m, _ in usable)
    kind = "task" if all(m.task is not None for m, _ in usable) else "scope"
    how = (f"mean over {_count(len(groups), kind)} ({', '.join(groups)})"
           + (f" of each one's mean over its seeds ({', '.join(map(str, seeds_counts))})" if seeded else "")
           + ("; seeds resampled (their spread widened for their number), then the examples" if seeded and max(seeds_counts) > 1 else "")
           + (f"; {resamples} resamples" if len(usable) > 1 or usable[0][0].draws is not None else "; the row's own interval")
           + (f"; left out: {'; '.join(left_out)}" if left_out else "")
           + ("; one fine-tuning seed per task: the interval holds the seed fixed, seed-to-seed variation is not measured"
              if seeded and max(seeds_counts) == 1 else ""))
    against = [m for m in findings if m.finding == NOT_REPRODUCED] + vetoes
    if against and decided in (REPRODUCED, NOT_REPRODUCED) and not (decided == NOT_REPRODUCED and not vetoes):
        how += "; but " + "; ".join(f"{m.scope}: {m.note}" for m in against) + ": inconclusive"
        decided = INCONCLUSIVE
    elif findings:
        how += "; findings: " + "; ".join(f"{m.scope}: {m.note}" for m in findings)
    rests = [model for m, _ in usable for model in m.models] + [model for m in findings for model in m.models]
    return Pooled(value, low, high, decided, how, _rests_on(rests, fit)), per_task


OVERALL = "overall"  # the scope of a claim's one verdict (the headline table's rows)


def claims_tables(measured: Sequence[Measured], fit: Mapping[tuple[str, int], bool | str], stages: Mapping[str, str],
                  level: float = 0.95, tasks: Sequence[str] | None = None, resamples: int = 1000,
                  seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The claims: one headline row per claim (its pooled effect and verdict by :func:`pooled`, or why there is none)
    and the detail table below it: every measured row (per fine-tuned model, label set, labelling pass) with its own
    verdict, and each task's seeds pooled. A claim nothing was measured for says what its stage did (``stages``: report
    section -> ``ran``, ``skipped`` (fitness.if_unfit: skip left out every model it would analyse) or ``not run``), or
    ``not applicable`` where it is about tasks none of which is among the run's ``tasks`` (None: every task). ``fit``:
    (task, seed) -> fit/weak/unfit (or a bool); a model missing from it is an error, never fit by default."""
    detail, headline = [], []
    by_claim: dict[str, list[Measured]] = {}
    for m in measured:
        claim = BY_KEY[m.key]
        missing = [f"{t} seed {s}" for t, s in m.models if (t, s) not in fit]
        if missing:
            raise ValueError(f"claim {m.key} ({m.scope}) rests on {', '.join(missing)}, which the fitness table "
                             "(results/fitness/fitness.parquet) has no verdict for. Fix: rerun the fitness rules for this model "
                             "(snakemake --forcerun model_fitness).")
        marked = {status: [f"{t} seed {s}" for t, s in m.models if status_of(fit, (t, s)) == status] for status in ("unfit", "weak")}
        note = "; ".join(filter(None, [m.note] + [f"{status}: {', '.join(names)}" for status, names in marked.items() if names]))
        trusted = m.trusted and math.isfinite(m.value) and not m.veto
        decided = verdict(m.ci_low, m.ci_high, claim.region, bool(marked["unfit"]), trusted)
        if m.finding and not marked["unfit"]:
            decided = m.finding
        if m.veto:
            note = f"{note}; {m.veto}: no verdict"
        detail.append(_row(claim, m.scope, m.value, m.ci_low, m.ci_high, decided, note, _rests_on(m.models, fit)))
        by_claim.setdefault(m.key, []).append(m)
    for claim in CLAIMS:
        if claim.key in by_claim:
            result, per_task = pooled(by_claim[claim.key], fit, claim.region, level, resamples, seed, claim.bounds)
            headline.append(_row(claim, OVERALL, result.value, result.ci_low, result.ci_high, result.verdict, result.how, result.rests_on))
            detail += [_row(claim, f"{task}, seeds pooled", p.value, p.ci_low, p.ci_high, p.verdict, p.how, p.rests_on)
                       for task, p in per_task]
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
        headline.append(_row(claim, OVERALL, float("nan"), float("nan"), float("nan"), decided, why, ""))
    order = {claim.key: i for i, claim in enumerate(CLAIMS)}
    schema = {c: pl.Float64 if c in ("this_run", "ci_low", "ci_high") else pl.String for c in DETAIL_COLUMNS}
    detail_table = pl.DataFrame(detail, schema=schema) if detail else pl.DataFrame(schema=schema)
    if detail_table.height:  # the papers' order, each model's rows before its task's pooled row, seed 2 before seed 10
        detail_table = detail_table.with_columns(
            pl.col("claim").replace_strict(order, return_dtype=pl.Int32).alias("_order"),
            pl.col("scope").str.contains("pooled").alias("_pooled"),
            pl.col("scope").str.replace(r" seed \d+.*$", "").alias("_task"),
            pl.col("scope").str.extract(r" seed (\d+)").cast(pl.Int64).alias("_seed"),
        ).sort("_order", "_pooled", "_task", "_seed", "scope", nulls_last=True, maintain_order=True).drop(
            "_order", "_pooled", "_task", "_seed")
    return pl.DataFrame(headline).select(HEADLINE_COLUMNS), detail_table


# the headline table: what a reader compares first, one row per claim
# (where each region comes from and the paper's figure are in the detail table's columns)
HEADLINE_COLUMNS = ("claim", "verdict", "paper_value", "this_run", "ci_low", "ci_high", "claim_holds_if", "rests_on", "note",
                    "paper_setup", "statement", "paper")


DETAIL_COLUMNS = ("claim", "scope", "verdict", "paper_value", "this_run", "ci_low", "ci_high", "claim_holds_if", "rests_on",
                  "note", "region_from", "paper", "source", "statement", "statistic", "paper_setup")


def _row(claim: Claim, scope: str, value: float, low: float, high: float, decided: str, note: str, rests_on: str) -> dict[str, object]:
    # what a reader compares comes first (the page's table is wider than a screen); the long prose last
    return {
        "claim": claim.key, "scope": scope, "verdict": decided, "paper_value": claim.paper_value,
        "this_run": value * claim.scale, "ci_low": low * claim.scale, "ci_high": high * claim.scale,
        "claim_holds_if": claim.region.describe(claim.scale), "rests_on": rests_on, "note": note,
        "region_from": claim.region_source, "paper": claim.paper,
        "source": claim.source, "statement": claim.statement, "statistic": claim.statistic, "paper_setup": claim.paper_setup,
    }


def verdict_rule(level: float) -> str:
    """The verdict rule in words, as the report prints it beside the table."""
    return VERDICT_RULE.format(level=f"{level:.0%}")


VERDICT_RULE = (
    "Verdict rule: each claim holds when its statistic lies in the region given in claim_holds_if: the paper's effect, "
    "from its own numbers (region_from says where the region comes from), not only its sign. One verdict per claim, "
    "whatever the number of rows: the claim's effect is the mean over its tasks of each task's mean over its fine-tuning "
    "seeds (strengths or modes of one model averaged first), with a {level} interval from a two-level bootstrap that "
    "resamples the seeds, then each drawn seed's dev examples (or sentences, heads), so seed-to-seed variation is in the "
    "interval. Reproduced: the whole interval lies inside the region; not reproduced: the whole interval lies outside; "
    "inconclusive: the interval straddles a boundary, or no row has a trusted number (note says why); model unfit: every "
    "row rests on a fine-tuned model not fit for analysis (rows on unfit models are left out of the effect; rows on weak "
    "models, above the trivial predictor but whose interval's lower bound is less than a quarter of the way to BERT-base's published score, count and are named in "
    "rests_on); not run: the config does not run the stage; not applicable: the claim is about a task this run does not "
    "have. A finding without a number (no outlier dimension found) is stated as such. The rows below the headline are each "
    "model's (and each task's seeds pooled) with their own verdicts, for reading, not voting. A verdict is about this "
    "run's models and data: 'reproduced' does not make the paper's number ours, 'not reproduced' is about this encoder "
    "and setup (paper_setup says how they differ). Nothing is chosen on the data it is reported on (best heads: one half "
    "of the data chooses, the other reports)."
)
