"""Change of self-attention after fine-tuning (Kovaleva et al. 2019, section 4.3).

Per head, the cosine similarity between the pre-trained and the fine-tuned model's attention
maps for the same input, flattened, averaged over the dumped dev examples. The paper (and its
code) compared maps padded to a fixed length; we compare the unpadded L x L maps, so padding
rows (identical in both models) do not inflate the similarity. The paper found the last two
layers change most.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from bertology_core.dumps import AttentionDump, dequantise


def cosine_similarity(before: np.ndarray, after: np.ndarray) -> float:
    norm = float(np.linalg.norm(before) * np.linalg.norm(after))
    return float(np.dot(before, after) / norm) if norm > 0 else float("nan")


def per_example_cosine(before: AttentionDump, after: AttentionDump, layer: int) -> pl.DataFrame:
    """``idx, head, cosine`` for one layer, over the examples both dumps hold (joined on ``idx``)."""
    columns = ["idx", "head", "length", "weights"]
    a = before.scan().filter(pl.col("layer") == layer).select(columns).collect()
    b = after.scan().filter(pl.col("layer") == layer).select(columns).collect()
    joined = a.join(b, on=["idx", "head"], suffix="_after")
    if joined.filter(pl.col("length") != pl.col("length_after")).height:
        raise ValueError(
            f"{before.attention_path} and {after.attention_path} tokenise the same example differently; "
            "dump both with the same tokenizer and max_length"
        )
    cosines = [
        cosine_similarity(dequantise(np.asarray(w, np.uint16), before.scale), dequantise(np.asarray(v, np.uint16), after.scale))
        for w, v in zip(joined["weights"], joined["weights_after"])
    ]
    return joined.select("idx", "head").with_columns(pl.Series("cosine", cosines, dtype=pl.Float64))


def per_example_change(before: AttentionDump, after: AttentionDump, layers: list[int]) -> pl.DataFrame:
    """``idx, layer, head, cosine`` of every example both dumps hold (the unit a bootstrap resamples)."""
    frames = [per_example_cosine(before, after, layer).with_columns(pl.lit(layer).alias("layer")) for layer in layers]
    return pl.concat(frames).select("idx", "layer", "head", "cosine").sort("idx", "layer", "head")


def attention_change(per_example: pl.DataFrame) -> pl.DataFrame:
    """``layer, head, cosine_mean, cosine_std, examples`` (1 = unchanged) from :func:`per_example_change`."""
    return (
        per_example
        .group_by("layer", "head")
        .agg(
            pl.col("cosine").mean().alias("cosine_mean"),
            pl.col("cosine").std().alias("cosine_std"),
            pl.len().alias("examples"),
        )
        .sort("layer", "head")
    )
