"""Head roles (Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting,
the Rest Can Be Pruned", sections 4-5), measured on attention dumps.

Definitions, as in the paper, with what an encoder with [CLS]/[SEP] changes:

- **Confidence** (section 4.2): "the average of its maximum attention weight excluding the end of sentence
  symbol, where average is taken over tokens in a set of sentences". The end-of-sentence symbol is the NMT
  encoder's attention sink; BERT-style encoders sink attention into their special tokens ([SEP], and [CLS]:
  Clark et al. 2019), so every special token is left out here, both as the token whose attention is read (query)
  and as a key the maximum is taken over. The weights are not renormalised.
- **Positional** (section 5.1): a head is positional when "at least 90% of the time its maximum attention weight
  is assigned to a specific relative position (in practice either -1 or +1)". For every real (non-special) query
  token the key of its maximum weight is taken over *all* keys (a head whose maximum is [SEP] is not positional);
  the head's dominant offset is its most frequent (key - query) and ``positional_share`` that offset's share.
  The role holds when the share reaches ``positional_share`` (0.9) for any offset, as the paper's definition says.
- **Rare tokens** (section 5.3): a head "points to the least frequent tokens in a sentence". Frequency is counted
  in word pieces (the model's own tokens) over the task's training text: the head sees pieces, and Voita et al.'s
  NMT models counted their own (BPE) tokens the same way; each piece counts on its own, so a word split into pieces
  has one rare piece or several. ``rare_share`` is the share of real query tokens whose maximum weight (over all keys) falls on a
  rarest real token of the example (several when tied). The paper names the head that does this most and sets no
  threshold; the role here needs ``rare_share`` >= ``rare_share`` of the config (0.5: the majority of tokens, our
  choice, fixed before any run). There is no chance baseline: in a short example several pieces may tie as rarest.
- **Syntactic** (section 5.2): a head is syntactic for a dependency relation when its accuracy (Clark et al.'s
  "most attended word is the relation's head") is "at least 10% higher than" the baseline that predicts the most
  frequent relative position for that relation: accuracy - baseline >= 0.10 (absolute), for the paper's four major
  relations (nsubj, dobj, amod, advmod; UD's obj for dobj: the config's ``syntactic_relations``), from the probing
  stage's syntactic-head tables (:mod:`bertology_core.syntactic_heads`) on UD EWT, not the GLUE dev text of the
  other roles. Only the pre-trained encoder and the fine-tuned models the probing stage scores have a verdict;
  ``specialised`` (any role) is null where it is unknown.

The roles, their thresholds (``positional_share``, ``rare_share``, ``syntactic_margin``) and the comparisons with
importance are in :mod:`bertology_core.head_roles_stats`. Everything is counted over every real query token of every example in the dump (the dump's seeded sample of the
task's dev set): what the paper averages over. The maximum is ``argmax``'s: on a tie the first key (leftmost) wins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

def piece_frequencies(tokenizer, texts: Iterable[str | None]) -> Counter:
    """How often each word piece (the tokenizer's token string, as dumps store it) occurs in ``texts``, without
    special tokens and without truncation. ``None`` entries (a single-sentence task's second sentence) are skipped."""
    texts = [text for text in texts if text]
    counts: Counter = Counter()
    for start in range(0, len(texts), 2048):
        for ids in tokenizer(texts[start:start + 2048], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    by_token: Counter = Counter()
    for token, i in zip(tokenizer.convert_ids_to_tokens(list(counts)), list(counts)):
        by_token[token] += counts[i]  # two ids may spell the same piece
    return by_token


@dataclass
class ExampleTokens:
    """What the roles need of one dumped example: which positions are real tokens, and the rarest of them."""

    real: np.ndarray  # [L] bool: not a special token
    rarest: np.ndarray  # [L] bool: a real token of the lowest training frequency in the example

    @classmethod
    def from_dump_row(cls, tokens: list[str], segment_ids: list[int | None], frequencies: Counter) -> "ExampleTokens":
        real = np.array([segment is not None for segment in segment_ids], dtype=bool)
        counts = np.array([frequencies.get(token, 0) if is_real else np.inf for token, is_real in zip(tokens, real)], dtype=float)
        rarest = real & (counts == counts[real].min()) if real.any() else np.zeros_like(real)
        return cls(real=real, rarest=rarest)


class RoleCounts:
    """Per (layer, head) sums over query tokens; :meth:`table` turns them into the roles table."""

    def __init__(self, num_layers: int, num_heads: int, max_length: int):
        shape = (num_layers, num_heads)
        self.queries = np.zeros(shape, dtype=np.int64)
        self.confidence_sum = np.zeros(shape)
        self.rare_hits = np.zeros(shape, dtype=np.int64)
        self.max_length = max_length
        # offsets -(max_length - 1) .. max_length - 1 of the most attended key
        self.offsets = np.zeros((*shape, 2 * max_length - 1), dtype=np.int64)
        self.examples = 0

    def add(self, maps: np.ndarray, example: ExampleTokens) -> None:
        """Count one example: ``maps`` ``[layers, heads, L, L]`` (query, key) of every head."""
        real, queries = example.real, np.flatnonzero(example.real)
        if not queries.size:
            return
        rows = maps[:, :, queries, :]  # [layers, heads, Q, L]
        attended = rows.argmax(-1)  # over every key
        self.queries += queries.size
        layers, heads, width = self.offsets.shape
        shifted = attended - queries + self.max_length - 1  # [layers, heads, Q] in 0 .. width - 1
        cells = (np.arange(layers * heads)[:, None] * width + shifted.reshape(layers * heads, -1)).reshape(-1)
        self.offsets += np.bincount(cells, minlength=layers * heads * width).reshape(layers, heads, width)
        self.rare_hits += example.rarest[attended].sum(-1)
        self.confidence_sum += rows[..., real].max(-1).sum(-1)
        self.examples += 1

    def table(self) -> pl.DataFrame:
        """One row per (layer, head): ``queries``, ``confidence``, ``positional_offset`` (the dominant key - query),
        ``positional_share`` (its share of the queries), ``rare_share``."""
        layers, heads = self.queries.shape
        dominant = self.offsets.argmax(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.take_along_axis(self.offsets, dominant[..., None], -1)[..., 0] / self.queries
            confidence = self.confidence_sum / self.queries
            rare = self.rare_hits / self.queries
        return pl.DataFrame({
            "layer": np.repeat(np.arange(layers), heads).astype(np.int32),
            "head": np.tile(np.arange(heads), layers).astype(np.int32),
            "examples": np.full(layers * heads, self.examples, dtype=np.int64),
            "queries": self.queries.reshape(-1),
            "confidence": confidence.reshape(-1),
            "positional_offset": (dominant - (self.max_length - 1)).reshape(-1).astype(np.int32),
            "positional_share": share.reshape(-1),
            "rare_share": rare.reshape(-1),
        }).with_columns(pl.col(pl.Float64).fill_nan(None))


def dump_roles(dump, frequencies: Counter) -> pl.DataFrame:
    """The roles table of one attention dump (:class:`bertology_core.dumps.AttentionDump`): every example, every
    head. Reads one example's maps at a time (all its layers and heads)."""
    from bertology_core.dumps import dequantise

    tokens = dump.tokens()
    examples = {row["example"]: ExampleTokens.from_dump_row(row["tokens"], row["segment_ids"], frequencies)
                for row in tokens.select("example", "tokens", "segment_ids").iter_rows(named=True)}
    if not any(example.real.any() for example in examples.values()):
        raise ValueError(f"{dump.tokens_path}: no example has a real (non-special) token, so no head has a role to "
                         "measure. Fix: dump examples with text (attention.max_examples, the task's dev split).")
    shape = dump.scan().select(pl.col("layer").max() + 1, pl.col("head").max() + 1, pl.col("length").max()).collect().row(0)
    num_layers, num_heads, max_length = (int(v) for v in shape)
    counts = RoleCounts(num_layers, num_heads, max_length)
    # examples are stored in row groups by batch: reading a batch of examples at a time keeps memory small
    order = sorted(examples)
    for start in range(0, len(order), 64):
        chunk = order[start:start + 64]
        frame = dump.scan().filter(pl.col("example").is_between(chunk[0], chunk[-1])).select(
            "example", "layer", "head", "length", "weights").collect().sort("example", "layer", "head")
        for (example,), group in frame.group_by("example", maintain_order=True):
            length = int(group["length"][0])
            values = np.stack([np.asarray(w, dtype=np.uint16) for w in group["weights"]])
            maps = dequantise(values, dump.scale).reshape(num_layers, num_heads, length, length)
            counts.add(maps, examples[example])
    return counts.table()
