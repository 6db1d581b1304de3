"""Writing attention dumps (:mod:`bertology_core.attention.dump_tables` gives their layout and reads them): the
encoder runs on the engine, batch after batch, and each batch's maps are written as they come, so memory does not grow
with the number of examples."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bertology_core.attention.dump_tables import ATTENTION_SCHEMA, DEFAULT_BITS, SCALE_KEY, TOKENS_SCHEMA, dump_paths, quantise
from bertology_core.data.tasks import sentence_texts
from bertology_core.data.io import atomic_path
from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import InterventionPlan
from bertology_core.models import loading
from bertology_core.inputs.batching import Encoded
from bertology_core.models.device import default_device
from bertology_core.data.failpoints import failpoint


@dataclass
class EncodedExamples:
    idx: list[int]
    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None  # None when the tokenizer returns none (loading.load_tokenizer: RoBERTa, ...)
    segment_ids: list[list[int | None]]  # 0/1 per sentence, None for special tokens, for every model
    word_ids: list[list[int | None]]  # the tokenizer's own words, from 0 in each sentence (see the module docstring)
    tokens: list[list[str]]


def encode_examples(frame: pl.DataFrame, tokenizer: Any, max_length: int) -> EncodedExamples:
    """Tokenise like fine-tuning does (:func:`bertology_core.data.tasks.sentence_texts`), keeping each piece's
    sentence (``segment_ids``) and word (``word_ids``: the tokenizer's own pre-tokenised words, numbered from 0
    in each sentence)."""
    first, second = sentence_texts(frame)
    out = tokenizer(first, second, truncation=True, max_length=max_length)
    ids = out["input_ids"]
    return EncodedExamples(
        idx=frame["idx"].to_list(),
        input_ids=ids,
        token_type_ids=out.get("token_type_ids"),
        segment_ids=[out.sequence_ids(i) for i in range(len(ids))],
        word_ids=[out.word_ids(i) for i in range(len(ids))],
        tokens=[tokenizer.convert_ids_to_tokens(x) for x in ids],
    )


def write_dump(
    model: Any,
    tokenizer: Any,
    frame: pl.DataFrame,
    prefix: str | Path,
    max_length: int = 128,
    batch_size: int = 32,
    layers: list[int] | None = None,
    bits: int = DEFAULT_BITS,
    compression_level: int = 1,  # zstd 1: same size as 3 on attention maps (1.13 B/value), 16% faster
) -> dict[str, Any]:
    """Run ``model`` over ``frame`` and dump its attention maps; return a summary record.

    The model must use the bertology engine (:func:`~bertology_core.engine.attention_function.use_engine`); capture goes
    through an ``InterventionPlan`` sink, so dumping is just an intervention that stores.
    """
    if not 8 <= bits <= 16:
        raise ValueError(f"bits must be between 8 and 16, not {bits}")
    scale = 2**bits - 1
    encoded = encode_examples(frame, tokenizer, max_length)
    attention_path, tokens_path = dump_paths(prefix)
    num_layers = model.config.num_hidden_layers
    wanted = sorted(set(range(num_layers) if layers is None else layers))
    # Examples are numbered by length (stable), so batches waste no compute on padding and each
    # row group covers a contiguous range of example numbers (statistics can skip the rest).
    order = np.argsort([len(x) for x in encoded.input_ids], kind="stable")
    encoded = EncodedExamples(*[None if (values := getattr(encoded, f)) is None else [values[i] for i in order]
                                for f in EncodedExamples.__dataclass_fields__])
    started = time.perf_counter()
    values = 0
    model.eval()
    with atomic_path(attention_path) as tmp_attention, atomic_path(tokens_path) as tmp_tokens:
        writer = pq.ParquetWriter(
            tmp_attention,
            ATTENTION_SCHEMA.with_metadata({SCALE_KEY: str(scale).encode()}),
            compression="zstd",
            compression_level=compression_level,
            use_dictionary=["example", "idx", "layer", "head", "length"],
            use_byte_stream_split=["weights.list.element"],
            write_statistics=True,
        )
        # Quantising and compressing batch k (numpy and pyarrow release the GIL) overlaps the
        # forward pass of batch k+1; at most two batches are in memory at once.
        inputs = Encoded(encoded.input_ids, encoded.token_type_ids, model.config.pad_token_id or 0)
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending: Future[int] | None = None
                for start in range(0, len(order), batch_size):
                    examples = np.arange(start, min(start + batch_size, len(order)))
                    captured, lengths = _forward_batch(model, inputs, examples, wanted)
                    if pending is not None:
                        values += pending.result()
                        failpoint("dump.after_batch")  # the Parquet file is half written here
                    pending = pool.submit(_write_batch, encoded, examples, lengths, captured, writer, scale)
                if pending is not None:
                    values += pending.result()
        finally:
            writer.close()
        tokens_table = pa.table(
            {
                "example": pa.array(range(len(encoded.idx)), pa.int32()),
                "idx": pa.array(encoded.idx, pa.int64()),
                "tokens": pa.array(encoded.tokens, pa.list_(pa.string())),
                "token_type_ids": pa.array(encoded.token_type_ids or [None] * len(encoded.idx), pa.list_(pa.int8())),
                "segment_ids": pa.array(encoded.segment_ids, pa.list_(pa.int8())),
                "word_ids": pa.array(encoded.word_ids, pa.list_(pa.int32())),
            },
            schema=TOKENS_SCHEMA,
        )
        pq.write_table(tokens_table, tmp_tokens, compression="zstd")
    seconds = time.perf_counter() - started
    size = attention_path.stat().st_size
    return {
        "examples": len(encoded.idx),
        "layers": wanted,
        "heads": model.config.num_attention_heads,
        "values": values,
        "bytes": size,
        "bytes_per_value": size / max(values, 1),
        "bits": bits,
        "seconds": seconds,
    }


def dump_model_folder(folder: str | Path, frame: pl.DataFrame, prefix: str | Path, device: Any = None,
                      **options: Any) -> dict[str, Any]:
    """Load the encoder and tokenizer of a Hugging Face folder (safetensors, no remote code) onto ``device`` (default:
    :func:`bertology_core.models.device.default_device`), put it on the bertology engine and :func:`write_dump` ``frame``
    with it; the summary names the folder."""
    encoder = use_engine(loading.load_encoder(folder).to(device or default_device()))
    summary = write_dump(encoder, loading.load_tokenizer(folder), frame, prefix, **options)
    summary["model_folder"] = str(folder)
    return summary


def _forward_batch(
    model: Any, encoded: Encoded, examples: np.ndarray, layers: list[int]
) -> tuple[dict[int, torch.Tensor], list[int]]:
    """One padded forward pass; returns each requested layer's probabilities and the true lengths."""
    lengths = encoded.lengths()[examples].tolist()
    inputs = {key: value.to(model.device) for key, value in encoded.collate(examples).items()}
    captured: dict[int, torch.Tensor] = {}

    def sink(layer: int, probs: torch.Tensor, real: torch.Tensor) -> None:
        captured[layer] = probs  # [batch, head, query, key]; quantised below, after padding is dropped

    plan = InterventionPlan(sink=sink, capture_layers=frozenset(layers))
    with torch.inference_mode(), intervene(model, plan):
        model(**inputs)
    return captured, lengths


def _write_batch(
    encoded: EncodedExamples,
    examples: np.ndarray,
    lengths: list[int],
    captured: dict[int, torch.Tensor],
    writer: pq.ParquetWriter,
    scale: int,
) -> int:
    """Drop padding, quantise and write one row group per (layer, head); return the values written."""
    width = max(lengths)
    lengths_array = np.asarray(lengths, np.int32)
    positions = np.arange(width)
    # [batch, query, key]: True inside each example's real L x L block; boolean indexing walks it
    # in C order, so selecting with it yields every map flattened row-major, example after example.
    real = (positions[None, :, None] < lengths_array[:, None, None]) & (positions[None, None, :] < lengths_array[:, None, None])
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths_array.astype(np.int64) ** 2)]).astype(np.int32))
    columns = {
        "example": pa.array(examples.astype(np.int32)),
        "idx": pa.array([encoded.idx[i] for i in examples], pa.int64()),
        "length": pa.array(lengths_array),
    }
    values = 0
    for layer in sorted(captured):
        probs = captured.pop(layer).float().cpu().numpy()
        flat = quantise(probs.transpose(1, 0, 2, 3)[:, real], scale)  # [head, sum of L^2]
        for head in range(flat.shape[0]):
            table = pa.table(
                {
                    "example": columns["example"],
                    "idx": columns["idx"],
                    "layer": pa.array(np.full(len(examples), layer, np.int16)),
                    "head": pa.array(np.full(len(examples), head, np.int16)),
                    "length": columns["length"],
                    "weights": pa.ListArray.from_arrays(offsets, pa.array(flat[head])),
                },
                schema=writer.schema,
            )
            writer.write_table(table, row_group_size=len(examples))
            values += flat.shape[1]
    return values


