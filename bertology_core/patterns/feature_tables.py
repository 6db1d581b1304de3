"""Self-attention pattern classes of Kovaleva et al. 2019 (section 4.1, fig. 1-2).

The paper's five classes, as it defines them:

- ``vertical``: "mainly corresponds to attention to special BERT tokens [CLS] and [SEP]": columns
  (stripes) of the map; people who label maps also call a stripe on a full stop or a frequent word vertical;
- ``diagonal``: attention to the previous or the following token: a line along the main diagonal (at
  the resolution of a map a token attending to itself draws the same line);
- ``vertical_diagonal``: a mix of the two;
- ``block``: intra-sentence attention, for inputs of two distinct sentences;
- ``heterogeneous``: no distinct structure (highly variable with the input).

The paper trained a CNN on ~400 hand-labelled maps (:mod:`bertology_core.patterns.cnn`); this module
gives interpretable per-map features and a transparent rule labeller on them, whose thresholds are
fitted to hand labels (:mod:`bertology_core.patterns.label_tables`) and stand in for them when a model has none.

Feature definitions (``A`` is an L x L map, rows are queries and sum to 1; means are over rows):

- ``cls_mass``, ``sep_mass``: mean attention on the [CLS] / [SEP] columns, as Clark et al. 2019 measure
  attention to special tokens; ``special_mass`` is their sum;
- ``stripe_mass``: mean attention on the k most attended columns, k = the number of special tokens (so
  a map of stripes on [CLS] and [SEP] scores its ``special_mass``, and stripes on other tokens count too);
- ``content_stripe_mass``: the largest mean attention a single non-special column receives;
- ``diagonal_mass``: ``A[i, i-1] + A[i, i+1]`` (previous and next token); ``self_mass``: ``A[i, i]``;
  ``band_mass``: their sum, the line a person sees along the diagonal;
- ``stripe_excess``, ``band_excess``: the two masses above what a uniform map of the same length has
  (``k / L`` and ``(3L - 2) / L^2``), rescaled so 0 is uniform and 1 is all attention there: raw masses
  have a floor that grows as inputs get shorter (a 10-token map puts 30% on any 3 columns), so the rule
  labeller judges the excess;
- ``within_segment``: for two-segment inputs, over rows of non-special tokens, the share of their
  attention on non-special tokens outside the diagonal band (|i - j| > 1) that stays in their own
  segment (NaN for one segment or no such attention): a diagonal map is not a block;
- ``entropy``: mean row entropy divided by ``log L`` (1 = uniform rows);
- ``max_column_mass``: the largest mean attention any single column receives.

Further features, for the pattern CNN's second input (what a person sees at a glance and an 8-layer
CNN on a 32 x 32 thumbnail of a long map may lose):

- ``log_length``: log L; ``previous_mass``, ``next_mass``: ``A[i, i-1]`` and ``A[i, i+1]`` apart;
- ``second_column_mass``, ``third_column_mass``: the 2nd and 3rd largest column masses;
  ``column_entropy``: entropy of the column masses / log L (low: a few stripes);
  ``log_column_contrast``: log of the largest column mass over the median one;
- ``argmax_modal_share``: share of rows whose largest weight is on the same column (a stripe);
  ``argmax_band_share``, ``argmax_self_share``: share of rows whose largest weight is within one token of
  the query, on the query itself; ``row_max``: mean of each row's largest weight (peaked rows);
- ``stripe_consistency``: share of rows putting at least 2/L on the most attended column (a stripe the
  whole height of the map, not one row's spike);
- ``off_band_stripe_mass``: ``stripe_mass`` after removing the diagonal band (|i - j| <= 1), and
  ``off_band_stripe_share``: that over all off-band attention (a diagonal map's column masses are
  spread, a vertical+diagonal one keeps a stripe off the band);
- ``content_band_mass``: ``band_mass`` over the non-special tokens only;
- ``line_mass``: the largest mean attention on a line parallel to the main diagonal off its band (offset
  ``j - i = k`` with ``|k| >= 3``, with its two neighbouring offsets, as a person sees a slightly ragged
  line): in a sentence pair, a word attending to its counterpart in the other sentence draws such lines,
  which the labelling guide counts as diagonal; ``line_excess``: its excess over the line mass of the map whose
  every row is the column masses (a stripe crosses every diagonal once; against that map stripes make no line).

The rule labeller (:func:`rule_label`) asks what a person labelling by the guide asks, "what structure
carries most of the visible ink?": the structure is the stripe excess plus the diagonal strength (the
larger of ``band_excess`` and ``line_excess``); too little structure is heterogeneous (or block, for a pair
whose off-band attention stays in its own sentence, checked first); otherwise the stripes' share of the structure decides
between vertical (mostly stripes), diagonal (mostly lines) and vertical+diagonal (both).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl

from bertology_core.attention.dump_tables import dequantise

# how a classifier's labels_source begins when it learnt the label card's labels (patterns.training), not the rules'; the
# card says who made them (data/pattern_labels: for the CPU model, the project's engineering agent), not "hand labels"
HAND_LABELS = "labels made by eye"


def trained_on_hand_labels(labels_source: str) -> bool:
    """Whether a pattern classifier's ``labels_source`` says it learnt hand labels (not the rule labeller's)."""
    return labels_source.startswith(HAND_LABELS)


def labeller_validated(report: dict[str, Any], min_f1: float) -> tuple[bool, str]:
    """Whether a pattern classifier's shares may be compared with a paper's: it learnt hand labels and its macro
    F1 over the classes with enough hand labels reaches ``min_f1``, scored on the test labels when there are any
    (maps never trained, fitted or designed on; the score's bootstrap interval goes in the description), else cross-validated on the labels drawn at random (the maps as the analysis meets them) or on all; and a
    description."""
    if not trained_on_hand_labels(report["labels_source"]):
        return False, report["labels_source"]
    test = report.get("test")
    if test is not None:
        f1 = test["cnn"]["macro_f1_frequent_classes"]
        if f1 is None:
            return False, f"{report['labels_source']}: no class has patterns.min_class_labels labels"
        low, high = test["cnn"]["macro_f1_frequent_classes_interval"]
        classes = test.get("scored_classes", report["frequent_classes"])
        text = (f"CNN trained on {report['labels_source']}; macro F1 {f1:.2f} [{low:.2f}, {high:.2f}] "
                f"({100 * test.get('level', 0.95):.0f}% bootstrap over test maps) over {', '.join(classes)} on {test['maps']} "
                "test labels never trained or designed on")
        return bool(f1 >= min_f1), text if f1 >= min_f1 else f"{text}, below {min_f1:.2f}"
    on_random = "cnn_cross_validated_random_sample" in report
    scores = report["cnn_cross_validated_random_sample" if on_random else "cnn_cross_validated"]
    f1 = scores["macro_f1_frequent_classes"]
    if f1 is None:
        return False, f"{report['labels_source']}: no class has patterns.min_class_labels labels"
    left_out = f"{report['test_left_out']}, so " if "test_left_out" in report else ""
    text = (f"{left_out}CNN trained on {report['labels_source']}; cross-validated macro F1 {f1:.2f} over "
            f"{', '.join(report['frequent_classes'])} on {'the randomly drawn' if on_random else 'all'} "
            f"{scores['maps']} labels ({scores['macro_f1']:.2f} over every labelled class)")
    return bool(f1 >= min_f1), text if f1 >= min_f1 else f"{text}, below {min_f1:.2f}"


CLASSES = ("vertical", "diagonal", "vertical_diagonal", "block", "heterogeneous")
FEATURES = (
    "cls_mass", "sep_mass", "special_mass", "stripe_mass", "content_stripe_mass", "diagonal_mass", "self_mass",
    "band_mass", "stripe_excess", "band_excess", "within_segment", "entropy", "max_column_mass",
    "log_length", "previous_mass", "next_mass", "second_column_mass", "third_column_mass", "column_entropy",
    "log_column_contrast", "argmax_modal_share", "argmax_band_share", "argmax_self_share", "row_max",
    "stripe_consistency", "off_band_stripe_mass", "off_band_stripe_share", "content_band_mass", "line_mass", "line_excess",
)
LINE_MIN_OFFSET = 3  # lines closer to the main diagonal are the diagonal band itself


def feature_matrix(frame: pl.DataFrame) -> np.ndarray:
    """``[n, len(FEATURES)]`` float32 of a frame of :func:`dump_features` rows; ``within_segment`` is -1 for a
    single-segment input (NaN in the frame)."""
    missing = [f for f in FEATURES if f not in frame.columns]
    if missing:
        raise KeyError(f"features {missing} missing: the features were computed by an older version; recompute them")
    return frame.select(pl.col(f).cast(pl.Float64).fill_nan(None).fill_null(-1.0) for f in FEATURES).to_numpy().astype(np.float32)


def map_features(attention: np.ndarray, special: np.ndarray, cls: np.ndarray, segments: np.ndarray) -> dict[str, float]:
    """Features of one map. ``special``/``cls`` are boolean masks over positions ([CLS] and [SEP], [CLS]
    only); ``segments`` holds 0/1 per position and -1 for special tokens."""
    length = attention.shape[0]
    rows = np.arange(length)
    diagonal = np.zeros(length)
    diagonal[1:] += attention[rows[1:], rows[1:] - 1]
    diagonal[:-1] += attention[rows[:-1], rows[:-1] + 1]
    self_attention = np.diagonal(attention)
    column_mass = attention.mean(axis=0)
    sep = special & ~cls
    stripes = max(1, int(special.sum()))
    probs = np.clip(attention, 1e-12, 1.0)
    entropy = float(-(probs * np.log(probs)).sum(axis=1).mean() / np.log(length)) if length > 1 else 0.0
    within = float("nan")
    if (segments == 1).any() and (segments == 0).any():
        content = ~special
        positions = rows[content]
        off_band = np.abs(positions[:, None] - positions[None, :]) > 1
        content_rows = attention[np.ix_(content, content)] * off_band
        row_segments = segments[content]
        same = row_segments[:, None] == row_segments[None, :]
        total = content_rows.sum(axis=1)
        keep = total > 0
        if keep.any():
            within = float(((content_rows * same).sum(axis=1)[keep] / total[keep]).mean())
    stripe_mass = float(np.sort(column_mass)[-stripes:].sum())
    band_mass = float((diagonal + self_attention).mean())
    previous = attention[rows[1:], rows[1:] - 1].sum() / length
    ranked = np.sort(column_mass)[::-1]
    top_columns = np.argmax(attention, axis=1)
    in_band = np.abs(rows[:, None] - rows[None, :]) <= 1
    off_band_attention = attention * ~in_band
    off_band_stripe = float(np.sort(off_band_attention.mean(axis=0))[-stripes:].sum())
    content_map = attention[np.ix_(~special, ~special)]
    content_positions = np.arange(content_map.shape[0])
    content_band = (content_map * (np.abs(content_positions[:, None] - content_positions[None, :]) <= 1)).sum(axis=1)
    column_probs = np.clip(column_mass / column_mass.sum(), 1e-12, 1.0)
    line = parallel_line_mass(attention)
    return {
        "cls_mass": float(column_mass[cls].sum()),
        "sep_mass": float(column_mass[sep].sum()),
        "special_mass": float(column_mass[special].sum()),
        "stripe_mass": stripe_mass,
        "content_stripe_mass": float(column_mass[~special].max()) if (~special).any() else 0.0,
        "diagonal_mass": float(diagonal.mean()),
        "self_mass": float(self_attention.mean()),
        "band_mass": band_mass,
        "stripe_excess": _excess(stripe_mass, min(stripes, length) / length),
        "band_excess": _excess(band_mass, (3 * length - 2) / length**2 if length > 1 else 1.0),
        "within_segment": within,
        "entropy": entropy,
        "max_column_mass": float(column_mass.max()),
        "log_length": float(np.log(length)),
        "previous_mass": float(previous),
        "next_mass": float(diagonal.mean() - previous),
        "second_column_mass": float(ranked[1]) if length > 1 else 0.0,
        "third_column_mass": float(ranked[2]) if length > 2 else 0.0,
        "column_entropy": float(-(column_probs * np.log(column_probs)).sum() / np.log(length)) if length > 1 else 0.0,
        "log_column_contrast": float(np.log(ranked[0] / max(float(np.median(column_mass)), 1e-6))),
        "argmax_modal_share": float(np.bincount(top_columns, minlength=length).max() / length),
        "argmax_band_share": float((np.abs(top_columns - rows) <= 1).mean()),
        "argmax_self_share": float((top_columns == rows).mean()),
        "row_max": float(attention.max(axis=1).mean()),
        "stripe_consistency": float((attention[:, int(np.argmax(column_mass))] >= 2.0 / length).mean()),
        "off_band_stripe_mass": off_band_stripe,
        "off_band_stripe_share": off_band_stripe / max(float(off_band_attention.sum(axis=1).mean()), 1e-6),
        "content_band_mass": float(content_band.mean()) if content_band.size else 0.0,
        "line_mass": line,
        # against the map of its own column masses, not a uniform map: a stripe crosses every diagonal once, so a
        # map of stripes holds "lines" of its column masses and has no line excess
        "line_excess": _excess(line, parallel_line_mass(np.tile(column_mass, (length, 1)))),
    }


def parallel_line_mass(attention: np.ndarray) -> float:
    """The largest mean attention (over rows) on three neighbouring diagonals ``j - i = k - 1, k, k + 1`` with
    ``|k| >= LINE_MIN_OFFSET``: a line parallel to the main diagonal, off its band; 0 for maps too short to
    hold one."""
    length = attention.shape[0]
    if length <= LINE_MIN_OFFSET + 1:
        return 0.0
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
    per_offset = np.bincount((offsets + length - 1).ravel(), weights=attention.ravel(), minlength=2 * length - 1) / length
    window = np.convolve(per_offset, np.ones(3), mode="same")  # window[k] = offsets k-1, k, k+1
    far = np.abs(np.arange(-(length - 1), length)) >= LINE_MIN_OFFSET
    return float(window[far].max())


def _excess(mass: float, uniform: float) -> float:
    """``mass`` above a uniform map's ``uniform``, rescaled to [0, 1] (0 when the uniform map fills it all)."""
    return max(0.0, (mass - uniform) / (1.0 - uniform)) if uniform < 1.0 else 0.0


@dataclass(frozen=True)
class RuleThresholds:
    """Thresholds of the rule labeller (config ``patterns.rules``); fitted to hand labels by
    :func:`bertology_core.patterns.label_tables.fit_rule_thresholds`. The defaults of ``structure`` and the two
    shares are those fitted (from :meth:`neutral`) on the 70% fitting split of the all-MiniLM-L6-v2 hand labels
    (``data/pattern_labels``); the block thresholds are the earlier rule's (those labels hold no block)."""

    structure: float = 0.2  # stripe excess + diagonal strength below this: no structure (heterogeneous)
    diagonal_share: float = 0.45  # stripes' share of the structure at most this -> diagonal
    vertical_share: float = 0.825  # ... at least this -> vertical; in between -> vertical_diagonal
    block: float = 0.85  # within_segment at least this (two-segment inputs, stripe excess below structure) -> block
    block_max_band: float = 0.4  # ... unless band_excess reaches this (a diagonal line, not a block)

    def __post_init__(self) -> None:
        if not self.structure > 0:
            raise ValueError(f"pattern rule threshold structure must be above 0, not {self.structure}")
        if self.diagonal_share > self.vertical_share:
            raise ValueError(f"pattern rule thresholds: diagonal_share ({self.diagonal_share}) above vertical_share "
                             f"({self.vertical_share}) leaves no room for vertical_diagonal. Fix: diagonal_share <= vertical_share.")

    @classmethod
    def neutral(cls) -> "RuleThresholds":
        """A start for fitting that encodes no fitted value: the middle of each threshold's range (the block
        thresholds as the defaults: hand labels rarely hold enough block maps to fit them)."""
        return cls(structure=0.5, diagonal_share=1 / 3, vertical_share=2 / 3)

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> "RuleThresholds":
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown pattern rule thresholds {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)


def diagonal_strength(features: dict[str, float]) -> float:
    """How strongly a map draws diagonal lines: the main band's excess or a parallel line's, the larger."""
    return max(features["band_excess"], features["line_excess"])


def rule_label(features: dict[str, float], thresholds: RuleThresholds = RuleThresholds()) -> str:
    """The class of one map from its features: block when a two-segment input keeps its off-band attention
    within its sentences, with no stripe structure and no strong diagonal band (uniform attention within short
    sentences covers the band too); else too little stripe or line structure is heterogeneous; otherwise the
    stripes' share of the structure picks vertical, vertical+diagonal or diagonal."""
    stripe, line = features["stripe_excess"], diagonal_strength(features)
    within = features["within_segment"]
    within = float("nan") if within is None else within
    if (not np.isnan(within) and within >= thresholds.block and features["band_excess"] < thresholds.block_max_band
            and stripe < thresholds.structure):
        return "block"
    structure = stripe + line
    if structure < thresholds.structure:
        return "heterogeneous"
    share = stripe / structure
    if share >= thresholds.vertical_share:
        return "vertical"
    if share <= thresholds.diagonal_share:
        return "diagonal"
    return "vertical_diagonal"


def special_masks(segment_ids: list[int | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``special``, ``cls`` masks and segments (-1 for specials) from a dump's ``segment_ids`` (null =
    special token). The first special token is the classifier token ([CLS], RoBERTa's <s>)."""
    special = np.array([s is None for s in segment_ids])
    cls = np.zeros_like(special)
    if special.any():
        cls[int(np.argmax(special))] = True
    segments = np.array([-1 if s is None else s for s in segment_ids])
    return special, cls, segments


def dump_features(dump: Any, thresholds: RuleThresholds = RuleThresholds(), layers: list[int] | None = None,
                  keys: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per map of an :class:`~bertology_core.attention.dump_tables.AttentionDump`: ``example, idx, layer, head,
    length``, the features and ``rule_label``; only ``layers`` or only the ``(example, layer, head)`` rows of
    ``keys`` when given."""
    tokens = dump.tokens()
    masks = {row["example"]: special_masks(row["segment_ids"]) for row in tokens.iter_rows(named=True)}
    rows = []
    where = None if layers is None else pl.col("layer").is_in(layers)
    for frame in dump.example_chunks(["example", "idx", "layer", "head", "length", "weights"], where=where):
        if keys is not None:
            frame = frame.join(keys.select("example", "layer", "head"), on=["example", "layer", "head"], how="semi")
        for example, idx, layer, head, length, weights in frame.iter_rows():
            attention = dequantise(np.asarray(weights, dtype=np.uint16), dump.scale).reshape(length, length)
            features = map_features(attention, *masks[example])
            rows.append({"example": example, "idx": idx, "layer": layer, "head": head, "length": length, **features,
                         "rule_label": rule_label(features, thresholds)})
    return pl.DataFrame(rows).sort("example", "layer", "head")
