"""Change of self-attention after fine-tuning (Kovaleva et al. 2019, section 4.3).

What we compute: per layer and head, for every dev example both dumps hold (joined on the dataset's
``idx``), the cosine similarity between the pre-trained and the fine-tuned model's attention maps of
that input, each flattened from the example's L x L map over its real tokens only ([CLS], the
word pieces and [SEP]; L = its true length after truncation, the same in both dumps or an error),
dequantised from the dump's fixed point; then the mean, standard deviation and count over the
examples (:func:`attention_change`), each example weighing the same whatever its length. The summary
averages the per-head means over fine-tuning seeds.

Why the values differ from the paper's (its per-head cosine figure, fig. 5 here): the authors' code
ran every input padded to a fixed ``max_len`` (200 in its notebook) and compared the whole padded ``max_len x max_len``
maps. Padded key columns get next to no weight in either model (the attention mask), but the padded
query rows are not masked: each [PAD] position still spreads its attention over the real tokens, and
does so differently in the two models. Those rows, usually more numerous than the real ones, enter
the dot product and both norms, so their cosine mixes the change of the real tokens' attention with
the change of the [PAD] rows', in a proportion set by each input's length. Ours measures the real
tokens alone. The two agree on which heads change when the [PAD] rows change like the real ones, not
in general: compare our heatmaps with the paper's figure qualitatively (which layers and heads change
most; the paper found the last two layers), not value by value.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from bertology_core.attention.dump_tables import AttentionDump, dequantise


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
