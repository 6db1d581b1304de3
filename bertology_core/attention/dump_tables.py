"""The files of an attention dump and their reader: every layer's and head's map per example, at its true length,
in Parquet. Needs no torch: the stages that read dumps (patterns, linguistic features, attention change, head roles)
import this; :mod:`bertology_core.attention.dumps` writes them.

Layout (one dump = two files written atomically):

- ``<name>.attention.parquet``: one row per (example, layer, head) with columns
  ``example`` (0..N-1 within the dump, numbered by increasing length), ``idx`` (the dataset's example id),
  ``layer``, ``head``, ``length`` (real tokens, L) and ``weights``: the L x L map,
  row-major (query, key), as unsigned fixed point with ``bits`` bits (default 14:
  ``round(p * 16383)``, absolute error <= 3.1e-5, as good as float16 or better for every
  value >= 1/16 and far below the 1e-3 analyses care about; 16 bits give 7.6e-6).
  The scale is stored in the file's metadata (``bertology_scale``).
  Each row group holds one (batch of examples, layer, head), so Parquet statistics
  let ``polars.scan_parquet`` skip everything but one layer, one head or one example.
  Byte-stream-split encoding plus zstd keeps it near one byte per value.
- ``<name>.tokens.parquet``: one row per example: ``example, idx, tokens,
  token_type_ids`` (null when the tokenizer returns none: :func:`bertology_core.models.loading.load_tokenizer`),
  ``segment_ids`` (0/1 for the first or second sentence, null for special tokens) and ``word_ids``
  (null for special tokens): the tokenizer's own pre-tokenised words, numbered from 0 in each
  sentence, so what a word is depends on the tokenizer: in "didn't bark." BERT's are didn, ', t,
  bark and . ; a SentencePiece tokenizer's didn't and bark. ; a byte-level BPE's didn, 't, bark
  and . (no analysis reads them; the word-level ones align words themselves).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_BITS = 14  # 1.1 bytes per value with byte-stream-split + zstd on real maps (16 bits: 1.4)
SCALE_KEY = b"bertology_scale"

ATTENTION_SCHEMA = pa.schema(
    [
        ("example", pa.int32()),
        ("idx", pa.int64()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("length", pa.int32()),
        ("weights", pa.list_(pa.uint16())),
    ]
)
TOKENS_SCHEMA = pa.schema(
    [
        ("example", pa.int32()),
        ("idx", pa.int64()),
        ("tokens", pa.list_(pa.string())),
        ("token_type_ids", pa.list_(pa.int8())),
        ("segment_ids", pa.list_(pa.int8())),
        ("word_ids", pa.list_(pa.int32())),
    ]
)


def dump_paths(prefix: str | Path) -> tuple[Path, Path]:
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + ".attention.parquet"), prefix.with_name(prefix.name + ".tokens.parquet")


def quantise(probs: np.ndarray, scale: int) -> np.ndarray:
    """Round ``probs`` (in [0, 1]) to fixed point; works in place on ``probs`` to save passes."""
    np.clip(probs, 0.0, 1.0, out=probs)
    np.multiply(probs, scale, out=probs)
    np.add(probs, 0.5, out=probs)  # + 0.5 then truncation = round half up, for non-negative values
    return probs.astype(np.uint16)


def dequantise(values: np.ndarray, scale: int) -> np.ndarray:
    return values.astype(np.float32) / scale


class AttentionDump:
    """Read a dump back: numpy maps for one (example, layer, head), or lazy polars scans."""

    def __init__(self, prefix: str | Path):
        self.attention_path, self.tokens_path = dump_paths(prefix)
        if not self.attention_path.is_file():
            raise FileNotFoundError(f"no attention dump at {self.attention_path}")
        metadata = pq.read_schema(self.attention_path).metadata or {}
        self.scale = int(metadata.get(SCALE_KEY, b"0"))
        if not self.scale:
            raise ValueError(f"{self.attention_path}: not a bertology dump (no {SCALE_KEY.decode()} in its metadata)")

    def scan(self) -> pl.LazyFrame:
        """Lazy frame over all maps; filter on ``layer``, ``head`` or ``example`` to read only those row groups."""
        return pl.scan_parquet(self.attention_path)

    def tokens(self) -> pl.DataFrame:
        return pl.read_parquet(self.tokens_path)

    def map(self, example: int, layer: int, head: int) -> np.ndarray:
        """One attention map, ``[query, key]`` float32 at the example's true length."""
        row = (
            self.scan()
            .filter((pl.col("example") == example) & (pl.col("layer") == layer) & (pl.col("head") == head))
            .select("length", "weights")
            .collect()
        )
        if row.height != 1:
            raise KeyError(f"no map for example={example}, layer={layer}, head={head} in {self.attention_path}")
        length = row["length"][0]
        return dequantise(row["weights"][0].to_numpy(), self.scale).reshape(length, length)

    def example_chunks(self, columns: list[str], examples: int = 64, where: pl.Expr | None = None) -> Iterator[pl.DataFrame]:
        """The rows of ``examples`` examples at a time (all their layers and heads, or those ``where`` keeps),
        ``columns`` of them sorted by example, layer and head: a dump keeps a batch of examples numbered by length in each row group, so a chunk
        reads its own row groups (the statistics skip the rest) and a reader holds one chunk's maps whatever the
        dump's size."""
        order = pl.read_parquet(self.tokens_path, columns=["example"])["example"].sort().to_list()
        for start in range(0, len(order), examples):
            first, last = order[start], order[min(start + examples, len(order)) - 1]
            chunk = pl.col("example").is_between(first, last)
            yield (self.scan().filter(chunk if where is None else chunk & where).select(columns).collect()
                   .sort("example", "layer", "head"))

    def maps(self, **where: int) -> Iterator[tuple[int, int, int, np.ndarray]]:
        """Yield ``(example, layer, head, map)`` for every map matching ``where`` (e.g. ``layer=3``)."""
        frame = self.scan()
        for column, value in where.items():
            frame = frame.filter(pl.col(column) == value)
        for example, layer, head, length, weights in frame.select("example", "layer", "head", "length", "weights").collect().iter_rows():
            yield example, layer, head, dequantise(np.asarray(weights, dtype=np.uint16), self.scale).reshape(length, length)
