"""The order in which training visits its examples: torch-free, so that the runtime estimate batches as training does."""

from __future__ import annotations

import numpy as np


def training_batches(
    lengths: np.ndarray, batch_size: int, generator: np.random.Generator, group_by_length: bool
) -> list[np.ndarray]:
    """One epoch of batches: a seeded shuffle, optionally grouped by length in mega-batches of 50."""
    order = generator.permutation(len(lengths))
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    mega = batch_size * 50
    batches: list[np.ndarray] = []
    for start in range(0, len(order), mega):
        chunk = order[start : start + mega]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in generator.permutation(len(batches))]
