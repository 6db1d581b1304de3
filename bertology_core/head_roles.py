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
  NMT models counted their own (BPE) tokens the same way; a word split into several pieces is then as rare as its
  rarest piece. ``rare_share`` is the share of real query tokens whose maximum weight (over all keys) falls on a
  rarest real token of the example (several when tied). The paper names the head that does this most and sets no
  threshold; the role here needs ``rare_share`` >= ``rare_share`` of the config (0.5: the majority of tokens, our
  choice, fixed before any run).
- **Syntactic** (section 5.2): a head is syntactic for a dependency relation when its accuracy (Clark et al.'s
  "most attended word is the relation's head") is "at least 10% higher than" the baseline that predicts the most
  frequent relative position for that relation: accuracy - baseline >= 0.10 (absolute), from the probing stage's
  syntactic-head tables (:mod:`bertology_core.syntactic_heads`) on UD EWT, not the GLUE dev text of the other roles.

Everything is counted over every real query token of every example in the dump (the dump's seeded sample of the
task's dev set): what the paper averages over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

ROLES = ("positional", "rare", "syntactic")


@dataclass(frozen=True)
class RoleThresholds:
    """The shares that give a head a role (the config's ``head_roles.thresholds``)."""

    positional_share: float = 0.9  # Voita et al. 5.1
    rare_share: float = 0.5  # not in the paper (it names the one head that does it most): ours
    syntactic_margin: float = 0.10  # Voita et al. 5.2, absolute accuracy over the best offset baseline

    def __post_init__(self) -> None:
        for name in ("positional_share", "rare_share", "syntactic_margin"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"head_roles.thresholds.{name} = {value}: a share in (0, 1]. Fix: set it between 0 and 1.")


def piece_frequencies(tokenizer, texts: Iterable[str | None]) -> Counter:
    """How often each word piece (the tokenizer's token string, as dumps store it) occurs in ``texts``, without
    special tokens and without truncation. ``None`` entries (a single-sentence task's second sentence) are skipped."""
    texts = [text for text in texts if text]
    counts: Counter = Counter()
    for start in range(0, len(texts), 2048):
        for ids in tokenizer(texts[start:start + 2048], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    tokens = tokenizer.convert_ids_to_tokens(list(counts))
    return Counter({token: counts[i] for token, i in zip(tokens, list(counts))})


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
        })


def dump_roles(dump, frequencies: Counter) -> pl.DataFrame:
    """The roles table of one attention dump (:class:`bertology_core.dumps.AttentionDump`): every example, every
    head. Reads one example's maps at a time (all its layers and heads)."""
    from bertology_core.dumps import dequantise

    tokens = dump.tokens()
    heads = dump.scan().select(pl.col("layer").max() + 1, pl.col("head").max() + 1, pl.col("length").max()).collect().row(0)
    num_layers, num_heads, max_length = (int(v) for v in heads)
    counts = RoleCounts(num_layers, num_heads, max_length)
    examples = {row["example"]: ExampleTokens.from_dump_row(row["tokens"], row["segment_ids"], frequencies)
                for row in tokens.select("example", "tokens", "segment_ids").iter_rows(named=True)}
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


def assign_roles(roles: pl.DataFrame, thresholds: RoleThresholds, syntactic: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add the role columns to a roles table (one row per state, layer and head): ``positional``, ``rare`` (bools by
    the thresholds) and, when ``syntactic`` (state, layer, head, best_relation, relation_margin) is given for the
    row's state, ``syntactic`` and ``syntactic_relation``; ``specialised``: any role. Syntactic is null where
    the probing stage did not score the state."""
    frame = roles.with_columns(
        (pl.col("positional_share") >= thresholds.positional_share).alias("positional"),
        (pl.col("rare_share") >= thresholds.rare_share).alias("rare"),
    )
    if syntactic is not None and syntactic.height:
        frame = frame.join(syntactic.select(
            "state", pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), "best_relation", "relation_margin"),
            on=["state", "layer", "head"], how="left")
        frame = frame.with_columns(
            (pl.col("relation_margin") >= thresholds.syntactic_margin).alias("syntactic"),
            pl.when(pl.col("relation_margin") >= thresholds.syntactic_margin).then(pl.col("best_relation")).alias("syntactic_relation"),
        ).drop("best_relation")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Boolean).alias("syntactic"), pl.lit(None, pl.String).alias("syntactic_relation"),
                                   pl.lit(None, pl.Float64).alias("relation_margin"))
    return frame.with_columns(
        (pl.col("positional") | pl.col("rare") | pl.col("syntactic").fill_null(False)).alias("specialised"),
        pl.concat_str(
            [pl.when(pl.col(role)).then(pl.lit(role)) for role in ROLES], separator="+", ignore_nulls=True
        ).replace("", "none").alias("roles"),
    )


def best_relation_margins(per_head: pl.DataFrame, best: pl.DataFrame, exclude: Iterable[str] = ("all",)) -> pl.DataFrame:
    """Per (state, layer, head), the dependency relation where the head's accuracy beats that relation's best
    offset baseline by most (over both directions): ``state, layer, head, best_relation, relation_margin``.
    ``per_head`` and ``best`` are the syntactic-head stage's tables (every head's accuracy per relation; the
    relations it scores, with their baseline accuracy)."""
    scored = per_head.filter(~pl.col("relation").is_in(list(exclude))).join(
        best.select("state", "relation", "baseline_accuracy"), on=["state", "relation"], how="inner"
    ).with_columns((pl.col("accuracy") - pl.col("baseline_accuracy")).alias("relation_margin"))
    top = scored.sort("relation_margin", descending=True).group_by(["state", "layer", "head"], maintain_order=True).first()
    return top.select("state", pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32),
                      pl.col("relation").alias("best_relation"), "relation_margin")
