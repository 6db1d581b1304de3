"""Tokenised examples and their padded batches: the one collation every model-running stage uses
(fine-tuning, evaluation, attention dumps, disabling, importance, probing)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bertology_core.data import io
from bertology_core.data.tasks import Task, sentence_texts
from bertology_core.data.word_pieces import as_in_running_text


class Ragged:
    """Variable-length rows of integers laid end to end (``values``) with each row's start (``offsets``, one more than
    the rows): a split's token ids in two arrays, not a Python list per example (MNLI's 393k training pairs: about
    60 MB instead of about 730 MB). Indexing gives a row as an array; ``take`` the chosen rows' values end to end."""

    __slots__ = ("values", "offsets")

    def __init__(self, rows: Any, dtype: Any = np.int32) -> None:
        if isinstance(rows, Ragged):
            self.values, self.offsets = rows.values, rows.offsets
            return
        if isinstance(rows, (pl.Series, pa.Array, pa.ChunkedArray)):
            array = rows.to_arrow() if isinstance(rows, pl.Series) else rows
            array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
            array = array.cast(pa.large_list(pa.from_numpy_dtype(np.dtype(dtype))))
            offsets = array.offsets.to_numpy().astype(np.int64)
            self.values = array.values.to_numpy()[offsets[0]:offsets[-1]]
            self.offsets = offsets - offsets[0]
            return
        rows = list(rows)
        self.offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(row) for row in rows], out=self.offsets[1:])
        self.values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(self.offsets[-1]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        other = other if isinstance(other, Ragged) else Ragged(other, self.values.dtype) if isinstance(other, list) else None
        return (other is not None and np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.values, other.values))

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, indices: list[int] | np.ndarray) -> np.ndarray:
        """The values of rows ``indices``, end to end."""
        rows = np.asarray(indices, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        ends = np.cumsum(lengths)  # each value's position: its row's start, plus its place within the row
        return self.values[np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)]

    def to_list(self) -> list[list[int]]:
        return [row.tolist() for row in self]


@dataclass
class Encoded:
    """Tokenised examples, unpadded: the ids of each example (:class:`Ragged`; a list of lists is converted)."""

    input_ids: Ragged
    token_type_ids: Ragged | None
    pad_token_id: int
    # examples longer than max_length, cut to it (RTE: 12% of train and dev at 128 word pieces with a BERT
    # tokenizer, as in the paper's setup): recorded so that a reader sees how much text the model never read
    truncated: int = 0
    # a token task's examples: for each piece, the index of the word it starts, -1 for every other piece (special
    # tokens, a word's later pieces), as :func:`token_table` aligns them; None for a sequence task
    word_index: Ragged | None = None
    # a token task's examples: each one's number of words, read or not (a word with no piece in the input: cut at
    # max_length, or read as nothing by the tokenizer)
    words: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.input_ids = Ragged(self.input_ids, np.int32)
        if self.token_type_ids is not None:
            self.token_type_ids = Ragged(self.token_type_ids, np.int8)
        if self.word_index is not None:
            self.word_index = Ragged(self.word_index, np.int32)
            if self.words is None:
                raise ValueError("a token task's examples need their word counts (words) beside word_index")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def unread_words(self) -> int:
        """A token task's words with no piece in the input (0 for a sequence task)."""
        if self.word_index is None or self.words is None:
            return 0
        return int(self.words.sum() - (self.word_index.values >= 0).sum())

    def read_words(self) -> np.ndarray:
        """A token task's words with a piece in the input, per example."""
        assert self.word_index is not None
        first = np.concatenate([[0], np.cumsum(self.word_index.values >= 0)])
        return first[self.word_index.offsets[1:]] - first[self.word_index.offsets[:-1]]

    def first_piece_mask(self, indices: list[int] | np.ndarray, width: int) -> np.ndarray:
        """``[rows, width]``: True on each word's first piece in the padded batch of ``indices`` (a token task)."""
        assert self.word_index is not None, "a sequence task's examples have no words"
        rows = np.asarray(indices, dtype=np.int64)
        lengths = self.input_ids.lengths()[rows]
        mask = np.arange(width)[None, :] < lengths[:, None]
        first = np.zeros(mask.shape, dtype=bool)
        first[mask] = self.word_index.take(rows) >= 0
        return first

    def first_piece_rows(self, indices: list[int] | np.ndarray, width: int, device: torch.device) -> torch.Tensor:
        """The flat positions (``row * width + column``, row-major) of :meth:`first_piece_mask`'s True entries, on
        ``device``: indexing a batch's flattened outputs with them needs no wait for the device (a boolean mask on a
        GPU does, to count its entries)."""
        return torch.from_numpy(np.flatnonzero(self.first_piece_mask(indices, width))).to(device, non_blocking=True)

    def piece_labels(self, labels: Ragged, indices: list[int] | np.ndarray, width: int) -> np.ndarray:
        """A token task's targets for the padded batch of ``indices``: each word's class id (``labels``: each
        sentence's, a :class:`Ragged`) on its first piece, -100 (what the loss ignores) everywhere else."""
        rows = np.asarray(indices, dtype=np.int64)
        first = self.first_piece_mask(rows, width)
        out = np.full(first.shape, -100, dtype=np.int64)
        row_of, _ = np.nonzero(first)  # row-major: each row's first pieces in word order
        words = self.word_index.take(rows)
        out[first] = labels.values[labels.offsets[rows[row_of]] + words[words >= 0]]
        return out

    def word_positions(self, indices: list[int] | np.ndarray, width: int) -> np.ndarray:
        """For each first piece of the padded batch of ``indices`` (row-major, :meth:`first_piece_mask`), the position
        of its word among every word of the examples, in example order (a token task's word-level outputs)."""
        assert self.words is not None and self.word_index is not None
        rows = np.asarray(indices, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(self.words)[:-1]])
        row_of, _ = np.nonzero(self.first_piece_mask(rows, width))
        words = self.word_index.take(rows)
        return starts[rows[row_of]] + words[words >= 0]

    def lengths(self) -> np.ndarray:
        return self.input_ids.lengths()

    def collate(self, indices: list[int] | np.ndarray, pad_to_multiple: int = 1) -> dict[str, torch.Tensor]:
        """Pad the selected examples to the longest of them (dynamic padding; up to a multiple of ``pad_to_multiple``
        tokens, for a step replayed per padded shape), filled in one step: the ids of the selected examples laid end
        to end land on the mask's True cells in row-major order."""
        lengths = self.input_ids.lengths()[np.asarray(indices, dtype=np.int64)]
        width = -(-int(lengths.max()) // pad_to_multiple) * pad_to_multiple
        mask = np.arange(width)[None, :] < lengths[:, None]
        ids = np.full(mask.shape, self.pad_token_id, dtype=np.int64)
        ids[mask] = self.input_ids.take(indices)
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}
        if self.token_type_ids is not None:
            types = np.zeros(mask.shape, dtype=np.int64)
            types[mask] = self.token_type_ids.take(indices)
            batch["token_type_ids"] = torch.from_numpy(types)
        return batch


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch on ``device``; to a GPU from pinned memory without waiting for the copy (the next kernel that reads it
    is queued after it)."""
    if device.type != "cuda":
        return {key: value.to(device) for key, value in batch.items()}
    return {key: value.pin_memory().to(device, non_blocking=True) for key, value in batch.items()}


def token_table(frame: pl.DataFrame, tokenizer: Any, max_length: int) -> pl.DataFrame:
    """Every example of ``frame`` tokenised as :func:`encode` does: ``idx``, ``input_ids`` (cut to ``max_length``),
    ``token_type_ids`` where the tokenizer returns them, and ``full_length`` (word pieces before the cut). Token type
    ids are kept when the tokenizer returns them (:func:`bertology_core.models.loading.load_tokenizer` sets it to return
    them exactly when the model embeds them).

    One pass without the cut gives every example's full length and, for the examples that fit, their ids; only the
    examples longer than ``max_length`` are tokenised again with truncation, so that the pair strategy decides what is
    cut and the ids are the tokenizer's own (an example that fits is the same either way)."""
    idx = frame["idx"] if "idx" in frame.columns else pl.Series("idx", range(frame.height), dtype=pl.Int64)  # else the row
    if frame.height == 0:  # a fast tokenizer refuses an empty batch
        columns = {"idx": idx, "input_ids": pl.Series([], dtype=pl.List(pl.Int32)), "full_length": pl.Series([], dtype=pl.Int32)}
        if "token_type_ids" in tokenizer.model_input_names:
            columns["token_type_ids"] = pl.Series([], dtype=pl.List(pl.Int8))
        return pl.DataFrame(columns)
    if "words" in frame.columns:
        return _word_table(frame, idx, tokenizer, max_length)
    first, second = sentence_texts(frame)
    out = tokenizer(first, second, truncation=False, padding=False, return_attention_mask=False)
    ids, types = out["input_ids"], out.get("token_type_ids")
    full_length = [len(example) for example in ids]
    long = [i for i, length in enumerate(full_length) if length > max_length]
    if long:
        cut = tokenizer([first[i] for i in long], None if second is None else [second[i] for i in long], truncation=True,
                        max_length=max_length, padding=False, return_attention_mask=False)
        for j, i in enumerate(long):
            ids[i] = cut["input_ids"][j]
            if types is not None:
                types[i] = cut["token_type_ids"][j]
    columns = {"idx": idx, "input_ids": pl.Series(ids, dtype=pl.List(pl.Int32)),
               "full_length": pl.Series(full_length, dtype=pl.Int32)}
    if types is not None:
        columns["token_type_ids"] = pl.Series(types, dtype=pl.List(pl.Int8))
    return pl.DataFrame(columns)


def first_pieces(word_ids: list[int | None]) -> list[int]:
    """For each piece, the index of the word it starts, else -1: the label of a word goes on its first piece, the
    others are ignored by the loss and the metric (BERT's tagging recipe, Devlin et al. 2019, section 5.3; transformers'
    token-classification examples)."""
    out, previous = [], None
    for word in word_ids:
        out.append(word if word is not None and word != previous else -1)
        previous = word
    return out


def _word_table(frame: pl.DataFrame, idx: pl.Series, tokenizer: Any, max_length: int) -> pl.DataFrame:
    """:func:`token_table` for a token task's sentences (column ``words``): the words tokenised as in running text
    (:func:`bertology_core.data.word_pieces.as_in_running_text`), each piece mapped to its word by the fast
    tokenizer's ``word_ids``; ``word_index`` (:func:`first_pieces`) and ``unread_words`` (words with no piece: cut at
    ``max_length``, or read as nothing by the tokenizer) added."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{type(tokenizer).__name__} is a slow tokenizer: a token task maps each word piece to its word "
                         "through a fast tokenizer's word_ids. Fix: use the model's fast tokenizer (tokenizer.json).")
    words = [as_in_running_text(sentence) for sentence in frame["words"].to_list()]
    out = tokenizer(words, is_split_into_words=True, truncation=False, padding=False, return_attention_mask=False)
    ids, types = out["input_ids"], out.get("token_type_ids")
    index = [first_pieces(out.word_ids(i)) for i in range(len(ids))]
    full_length = [len(example) for example in ids]
    if long := [i for i, length in enumerate(full_length) if length > max_length]:
        cut = tokenizer([words[i] for i in long], is_split_into_words=True, truncation=True, max_length=max_length,
                        padding=False, return_attention_mask=False)
        for j, i in enumerate(long):
            ids[i], index[i] = cut["input_ids"][j], first_pieces(cut.word_ids(j))
            if types is not None:
                types[i] = cut["token_type_ids"][j]
    unread = [len(sentence) - sum(1 for w in pieces if w >= 0) for sentence, pieces in zip(words, index, strict=True)]
    columns = {"idx": idx, "input_ids": pl.Series(ids, dtype=pl.List(pl.Int32)),
               "full_length": pl.Series(full_length, dtype=pl.Int32),
               "word_index": pl.Series(index, dtype=pl.List(pl.Int32)), "unread_words": pl.Series(unread, dtype=pl.Int32)}
    if types is not None:
        columns["token_type_ids"] = pl.Series(types, dtype=pl.List(pl.Int8))
    return pl.DataFrame(columns)


def from_table(table: pl.DataFrame, pad_token_id: int, max_length: int) -> Encoded:
    """The :class:`Encoded` examples of a :func:`token_table`, in its row order."""
    return Encoded(
        input_ids=Ragged(table["input_ids"], np.int32),
        token_type_ids=Ragged(table["token_type_ids"], np.int8) if "token_type_ids" in table.columns else None,
        pad_token_id=pad_token_id,
        truncated=int((table["full_length"] > max_length).sum()),
        word_index=Ragged(table["word_index"], np.int32) if "word_index" in table.columns else None,
        words=(table["unread_words"].to_numpy().astype(np.int64) + table["word_index"].list.eval(pl.element() >= 0)
               .list.sum().to_numpy().astype(np.int64)) if "word_index" in table.columns else None,
    )


def frame_labels(task: Task, frame: pl.DataFrame) -> np.ndarray | Ragged:
    """A prepared split's labels as the training and scoring loops take them: an array of class ids or scores, one per
    example; for a token task each sentence's class ids, a :class:`Ragged`."""
    return Ragged(frame["label"], np.int64) if task.is_token else frame["label"].to_numpy()


def encode(frame: pl.DataFrame, tokenizer: Any, max_length: int) -> Encoded:
    """Tokenise ``sentence1`` (and ``sentence2`` when present; :func:`bertology_core.data.tasks.sentence_texts`) with
    truncation to ``max_length`` (:func:`token_table`)."""
    return from_table(token_table(frame, tokenizer, max_length), pad_id(tokenizer), max_length)


def pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


# examples tokenised and written at a time by TokenFile.write (about 3 MB of ids at 40 word pieces each)
CHUNK_ROWS = 16_384


@dataclass(frozen=True)
class TokenFile:
    """A task's splits tokenised once for one model and ``max_length`` (rule ``tokenize_data``), so that the jobs that
    train or evaluate on them do not each tokenise again: :func:`token_table`'s columns plus ``split``."""

    path: Path
    table: pl.DataFrame
    pad_token_id: int
    max_length: int

    @classmethod
    def write(cls, splits: dict[str, pl.DataFrame], tokenizer: Any, max_length: int, path: str | Path,
              chunk_rows: int = CHUNK_ROWS) -> None:
        """Tokenise ``splits`` ``chunk_rows`` examples at a time, each chunk one row group of the file: the writer holds
        one chunk's tokens whatever the task's size."""
        metadata = {"pad_token_id": str(pad_id(tokenizer)), "max_length": str(max_length)}
        with io.atomic_path(path) as tmp:
            writer = None
            try:
                for split, frame in splits.items():
                    if "idx" not in frame.columns:  # the row, counted over the whole split, not per chunk
                        frame = frame.with_row_index("idx").with_columns(pl.col("idx").cast(pl.Int64))
                    # an empty split still gives the file its columns
                    for start in range(0, max(frame.height, 1), chunk_rows):
                        chunk = token_table(frame.slice(start, chunk_rows), tokenizer, max_length)
                        table = chunk.with_columns(pl.lit(split).alias("split")).to_arrow()
                        if writer is None:
                            schema = table.schema.with_metadata(metadata)
                            writer = pq.ParquetWriter(tmp, schema, compression="zstd")
                        writer.write_table(table.cast(schema))
            finally:
                if writer is not None:
                    writer.close()

    @classmethod
    def read(cls, path: str | Path, max_length: int, splits: list[str] | None = None) -> "TokenFile":
        """The file's rows of ``splits`` (None: all), checked to be cut at ``max_length``."""
        metadata = pl.read_parquet_metadata(path)
        found = metadata.get("max_length")
        if found is None or int(found) != max_length:
            raise ValueError(f"{path}: tokenised at max_length {found}, the job asks {max_length}. "
                             "Fix: delete the file and rerun (rule tokenize_data writes it).")
        table = pl.scan_parquet(path)
        if splits is not None:
            table = table.filter(pl.col("split").is_in(splits))
        return cls(Path(path), table.collect(), int(metadata["pad_token_id"]), max_length)

    def encoded(self, split: str, frame: pl.DataFrame) -> Encoded:
        """The examples of ``frame`` (a split's rows, any subset, any order), as :func:`encode` gives them."""
        rows = frame.select("idx").with_row_index("_order").join(self.table.filter(pl.col("split") == split), on="idx", how="left")
        if rows["input_ids"].null_count():
            missing = rows.filter(pl.col("input_ids").is_null())["idx"].head(5).to_list()
            raise ValueError(f"{self.path}: split {split!r} has no tokens for idx {missing}. Fix: delete the file and "
                             "rerun (it is stale: the split's data changed).")
        return from_table(rows.sort("_order"), self.pad_token_id, self.max_length)


def encode_split(frame: pl.DataFrame, split: str, tokenizer: Any, max_length: int, tokens: TokenFile | None = None) -> Encoded:
    """The examples of ``frame`` (rows of ``split``): from ``tokens`` where the split was tokenised beforehand, else
    tokenised here, the same way."""
    return tokens.encoded(split, frame) if tokens else encode(frame, tokenizer, max_length)
