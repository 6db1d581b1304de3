"""Tokenised examples and their padded batches: the one collation every model-running stage uses
(fine-tuning, evaluation, attention dumps, disabling, importance, probing)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from bertology_core.data.glue import sentence_texts


@dataclass
class Encoded:
    """Tokenised examples, unpadded: one list of ids per example."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    pad_token_id: int
    # examples longer than max_length, cut to it (RTE: 12% of train and dev at 128 word pieces with a BERT
    # tokenizer, as in the paper's setup): recorded so that a reader sees how much text the model never read
    truncated: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self))

    def collate(self, indices: list[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """Pad the selected examples to the longest of them (dynamic padding), filled in one step: the ids of the
        selected examples laid end to end land on the mask's True cells in row-major order."""
        chosen = [self.input_ids[i] for i in indices]
        lengths = np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
        mask = np.arange(lengths.max())[None, :] < lengths[:, None]
        ids = np.full(mask.shape, self.pad_token_id, dtype=np.int64)
        ids[mask] = np.fromiter(itertools.chain.from_iterable(chosen), dtype=np.int64, count=int(lengths.sum()))
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}
        if self.token_type_ids is not None:
            types = np.zeros(mask.shape, dtype=np.int64)
            types[mask] = np.fromiter(itertools.chain.from_iterable(self.token_type_ids[i] for i in indices), dtype=np.int64,
                                      count=int(lengths.sum()))
            batch["token_type_ids"] = torch.from_numpy(types)
        return batch


def encode(frame: pl.DataFrame, tokenizer: Any, max_length: int) -> Encoded:
    """Tokenise ``sentence1`` (and ``sentence2`` when present; :func:`bertology_core.data.glue.sentence_texts`) with truncation to
    ``max_length``. Token type ids are kept when the tokenizer returns them (:func:`bertology_core.models.models.load_tokenizer`
    sets it to return them exactly when the model embeds them)."""
    first, second = sentence_texts(frame)
    out = tokenizer(first, second, truncation=True, max_length=max_length, padding=False)
    # a second pass without truncation counts the examples cut (the pair strategy decides what is cut, so the
    # truncated ids are the tokenizer's own)
    full = tokenizer(first, second, truncation=False, padding=False, return_attention_mask=False,
                     return_token_type_ids=False)["input_ids"]
    return Encoded(
        input_ids=out["input_ids"],
        token_type_ids=out.get("token_type_ids"),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        truncated=sum(len(ids) > max_length for ids in full),
    )
