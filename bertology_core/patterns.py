"""Self-attention pattern classes of Kovaleva et al. 2019 (section 4.1, fig. 1-2).

The paper's five classes, as it defines them:

- ``vertical``: attention to the special tokens [CLS] and [SEP] (columns of the map);
- ``diagonal``: attention to the previous or the following token;
- ``vertical_diagonal``: a mix of the two;
- ``block``: intra-sentence attention, for inputs of two distinct sentences;
- ``heterogeneous``: no distinct structure (highly variable with the input).

This module gives interpretable per-map features and a transparent rule-based labeller on
them (thresholds are parameters, set in the config). The paper instead trained a CNN on ~400
hand-labelled maps (:mod:`bertology_core.pattern_cnn`); the rule labels stand in for hand labels
when a user has none, and every output says which labels were used.

Feature definitions (``A`` is an L x L map, rows are queries and sum to 1):

- ``cls_mass``, ``sep_mass``: mean over rows of the attention on the [CLS] / [SEP] columns, as
  Clark et al. 2019 measure attention to special tokens; ``special_mass`` is their sum;
- ``diagonal_mass``: mean over rows ``i`` of ``A[i, i-1] + A[i, i+1]`` (previous and next token);
- ``self_mass``: mean of ``A[i, i]``;
- ``within_segment``: for two-segment inputs, over rows of non-special tokens, the share of their
  attention on non-special tokens that stays in their own segment (NaN for one segment);
- ``entropy``: mean row entropy divided by ``log L`` (1 = uniform rows);
- ``max_column_mass``: the largest mean attention any single column receives (a vertical
  stripe on some other token).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl

# how a classifier's labels_source begins when it learnt people's labels (pattern_training), not the rules'
HAND_LABELS = "hand labels"


def trained_on_hand_labels(labels_source: str) -> bool:
    """Whether a pattern classifier's ``labels_source`` says it learnt hand labels (not the rule labeller's)."""
    return labels_source.startswith(HAND_LABELS)


CLASSES = ("vertical", "diagonal", "vertical_diagonal", "block", "heterogeneous")
FEATURES = (
    "cls_mass", "sep_mass", "special_mass", "diagonal_mass", "self_mass", "within_segment", "entropy",
    "max_column_mass",
)


def map_features(attention: np.ndarray, special: np.ndarray, cls: np.ndarray, segments: np.ndarray) -> dict[str, float]:
    """Features of one map. ``special``/``cls`` are boolean masks over positions ([CLS] and [SEP], [CLS]
    only); ``segments`` holds 0/1 per position and -1 for special tokens."""
    length = attention.shape[0]
    rows = np.arange(length)
    diagonal = np.zeros(length)
    diagonal[1:] += attention[rows[1:], rows[1:] - 1]
    diagonal[:-1] += attention[rows[:-1], rows[:-1] + 1]
    column_mass = attention.mean(axis=0)
    sep = special & ~cls
    probs = np.clip(attention, 1e-12, 1.0)
    entropy = float(-(probs * np.log(probs)).sum(axis=1).mean() / np.log(length)) if length > 1 else 0.0
    within = float("nan")
    if (segments == 1).any() and (segments == 0).any():
        content = ~special
        content_rows = attention[content][:, content]
        row_segments = segments[content]
        same = row_segments[:, None] == row_segments[None, :]
        total = content_rows.sum(axis=1)
        keep = total > 0
        if keep.any():
            within = float(((content_rows * same).sum(axis=1)[keep] / total[keep]).mean())
    return {
        "cls_mass": float(column_mass[cls].sum()),
        "sep_mass": float(column_mass[sep].sum()),
        "special_mass": float(column_mass[special].sum()),
        "diagonal_mass": float(diagonal.mean()),
        "self_mass": float(np.diagonal(attention).mean()),
        "within_segment": within,
        "entropy": entropy,
        "max_column_mass": float(column_mass.max()),
    }


@dataclass(frozen=True)
class RuleThresholds:
    """Thresholds of the rule-based labeller (config ``patterns.rules``)."""

    vertical: float = 0.5  # special_mass at least this -> vertical
    diagonal: float = 0.5  # diagonal_mass at least this -> diagonal
    mixed_each: float = 0.25  # vertical+diagonal: both masses at least this ...
    mixed_total: float = 0.6  # ... and together at least this
    block: float = 0.85  # within_segment at least this (two-segment inputs) -> block
    block_max_diagonal: float = 0.3  # ... unless the attention is mostly on neighbours

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> "RuleThresholds":
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown pattern rule thresholds {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)


def rule_label(features: dict[str, float], thresholds: RuleThresholds = RuleThresholds()) -> str:
    """The class of one map from its features: mixed first, then vertical, diagonal, block, else heterogeneous."""
    special, diagonal = features["special_mass"], features["diagonal_mass"]
    if special >= thresholds.mixed_each and diagonal >= thresholds.mixed_each and special + diagonal >= thresholds.mixed_total:
        return "vertical_diagonal"
    if special >= thresholds.vertical:
        return "vertical"
    if diagonal >= thresholds.diagonal:
        return "diagonal"
    within = features["within_segment"]
    if not np.isnan(within) and within >= thresholds.block and diagonal < thresholds.block_max_diagonal:
        return "block"
    return "heterogeneous"


def special_masks(segment_ids: list[int | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``special``, ``cls`` masks and segments (-1 for specials) from a dump's ``segment_ids`` (null =
    special token). The first special token is the classifier token ([CLS], RoBERTa's <s>)."""
    special = np.array([s is None for s in segment_ids])
    cls = np.zeros_like(special)
    if special.any():
        cls[int(np.argmax(special))] = True
    segments = np.array([-1 if s is None else s for s in segment_ids])
    return special, cls, segments


def dump_features(dump: Any, thresholds: RuleThresholds = RuleThresholds(), layers: list[int] | None = None) -> pl.DataFrame:
    """One row per map of an :class:`~bertology_core.dumps.AttentionDump`: ``example, idx, layer, head,
    length``, the features and ``rule_label``."""
    from bertology_core.dumps import dequantise

    tokens = dump.tokens()
    masks = {row["example"]: special_masks(row["segment_ids"]) for row in tokens.iter_rows(named=True)}
    frame = dump.scan()
    if layers is not None:
        frame = frame.filter(pl.col("layer").is_in(layers))
    rows = []
    for example, idx, layer, head, length, weights in (
        frame.select("example", "idx", "layer", "head", "length", "weights").collect().iter_rows()
    ):
        attention = dequantise(np.asarray(weights, dtype=np.uint16), dump.scale).reshape(length, length)
        features = map_features(attention, *masks[example])
        rows.append({"example": example, "idx": idx, "layer": layer, "head": head, "length": length, **features,
                     "rule_label": rule_label(features, thresholds)})
    return pl.DataFrame(rows).sort("example", "layer", "head")


def resized_maps(dump: Any, keys: pl.DataFrame, size: int) -> np.ndarray:
    """``[n, size, size]`` resized maps for the ``(example, layer, head)`` rows of ``keys``, in its order."""
    from bertology_core.dumps import dequantise
    from bertology_core.pattern_cnn import resize_map

    wanted = keys.select("example", "layer", "head").with_row_index("order")
    found = (
        dump.scan()
        .join(wanted.lazy(), on=["example", "layer", "head"])
        .select("order", "length", "weights")
        .collect()
        .sort("order")
    )
    if found.height != wanted.height:
        raise KeyError(f"{wanted.height - found.height} requested maps are not in {dump.attention_path}")
    out = np.empty((found.height, size, size), dtype=np.float32)
    for i, (length, weights) in enumerate(found.select("length", "weights").iter_rows()):
        out[i] = resize_map(dequantise(np.asarray(weights, dtype=np.uint16), dump.scale).reshape(length, length), size)
    return out
