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
- **Rare tokens** (section 5.3): a head "points to the least frequent tokens in a sentence": "among sentences where
  the least frequent token in a sentence is not in the top-500 most frequent tokens, this head points to the rarest
  token in 66% of cases, and to one of the two least frequent tokens in 83% of cases". Frequency is counted in word
  pieces, the model's own tokens (the head sees pieces; Voita et al.'s NMT models had their own BPE tokens); each
  piece counts on its own, so a word split into pieces has one rare piece or several. *Where* they are counted
  differs from the paper by default: Voita et al. count on the NMT model's own training data, the text the model
  learnt from. Here, with config ``head_roles.frequency_corpus`` null (the default), they are counted on the
  fine-tuning task's training split (as prepared: a sample where ``data.max_train_examples`` is set), which is not
  the encoder's pre-training text: a piece frequent in the task but rare in pre-training (or the reverse) is ranked
  as the task has it, for the pre-trained encoder's dump too. Set ``frequency_corpus`` to a text file sampled from
  the pre-training text (Wikipedia and BookCorpus for BERT; :mod:`bertology_core.head_roles.corpus_tables`) to be
  closer to the paper; the roles table's ``frequency_source`` says which was used. Only examples whose rarest real
  piece is not among the ``top_frequent`` (config ``head_roles.rare_top_frequent``, 500: the paper's) most frequent
  pieces of that text count (:func:`frequent_count`; ties at the boundary count as frequent, a piece unseen in it is
  never frequent). ``rare_share`` is the share
  of their real query tokens whose maximum weight (over all keys, special tokens included, as for the positional
  role) falls on a rarest real token of the example (several when tied); ``rare2_share`` the share that falls on
  one of the two least frequent (the real tokens whose count is at most the second-lowest count of the example:
  ties included); ``rare_chance`` the hit rate of a head whose maximum falls on a uniformly random real token: the
  mean over the counted queries of (rarest real tokens / real tokens). In a short example several pieces may tie as
  rarest, so chance is not small. The paper names the head that does this most and sets no threshold; the role here
  needs ``rare_share`` >= the config's ``rare_share`` (0.5: the majority of the counted tokens, our choice, fixed
  before any run) *and* the head above chance by a one-sided t-test over the counted examples of each example's hit
  share minus its chance rate (the queries of one example share its rarest token, so the example is the unit) at the
  config's ``rare_significance`` (0.05): :func:`bertology_core.head_roles.stats.assign_roles`.
- **Syntactic** (section 5.2): a head is syntactic when, for one of the paper's four major relations (nsubj, dobj,
  amod, advmod; UD's obj for dobj: the config's ``syntactic_relations``) in one direction (dependent -> head or
  head -> dependent), its token-level accuracy (how often a query piece's maximum weight, special tokens left out,
  falls on a piece of the related word) is "at least 10% higher than the baseline that looks at the most frequent
  relative position for this dependency relation" *in that direction*: accuracy - baseline >= 0.10. The paper's
  Table 1 prints accuracies in points, and does not say whether 10% is absolute or relative: here absolute. From
  the probing stage's Voita et al. table (:class:`bertology_core.probing.syntactic_heads.VoitaCounts`) on UD EWT, not the
  task dev text of the other roles. Only the pre-trained encoder and the fine-tuned models the probing stage scores
  have a verdict; ``specialised`` (any role) is null where it is unknown.

The roles, their thresholds (``positional_share``, ``rare_share``, ``rare_significance``, ``syntactic_margin``) and
the comparisons with importance are in :mod:`bertology_core.head_roles.stats`. Confidence and the positional role are
counted over every real query token of every example in the dump (the dump's seeded sample of the task's dev set):
what the paper averages over; the rare-token role over those of the examples that pass its filter. The maximum is
``argmax``'s: on a tie the first key (leftmost) wins.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from bertology_core.attention.dump_tables import dequantise
from bertology_core.data import tasks
from bertology_core.head_roles import corpus_tables

RARE_TOP_FREQUENT = 500  # Voita et al. 5.3: sentences whose least frequent token is not in the top-500


def piece_frequencies(tokenizer, texts: Iterable[str | None], batch: int = 2048) -> Counter:
    """How often each word piece (the tokenizer's token string, as dumps store it) occurs in ``texts``, without
    special tokens and without truncation. ``None`` and empty entries (a single-sentence task's second sentence, a
    blank line) are skipped. ``texts`` is read ``batch`` texts at a time, so a generator over a large corpus file
    (:func:`bertology_core.head_roles.corpus_tables.lines`) never sits in memory."""
    texts = iter(texts)
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    while read := list(itertools.islice(texts, batch)):
        chunk = [text for text in read if text]
        if not chunk:
            continue
        ids = np.fromiter(itertools.chain.from_iterable(tokenizer(chunk, add_special_tokens=False)["input_ids"]), dtype=np.int64)
        if ids.size and ids.max() >= counts.size:  # an id past len(tokenizer): grow rather than drop it
            counts = np.pad(counts, (0, int(ids.max()) + 1 - counts.size))
        counts += np.bincount(ids, minlength=counts.size)
    seen = np.flatnonzero(counts).tolist()
    by_token: Counter = Counter()
    for token, i in zip(tokenizer.convert_ids_to_tokens(seen), seen):
        by_token[token] += int(counts[i])  # two ids may spell the same piece
    return by_token


def frequency_texts(train: str | Path | None = None, corpus: str | Path | None = None) -> Iterator[str | None]:
    """The texts the pieces are counted on: the lines of ``corpus`` (a text file, read a line at a time:
    :func:`corpus_tables.lines`) where given, else both sentences of every example of ``train`` (a prepared split)."""
    if corpus is not None:
        return corpus_tables.lines(Path(corpus))
    if train is None:
        raise ValueError("no frequency source: neither a training split nor a corpus file. Fix: pass one of them.")
    first, second = tasks.sentence_texts(pl.read_parquet(train))
    return iter(first + (second or []))


def frequent_count(frequencies: Counter, top: int = RARE_TOP_FREQUENT) -> float:
    """The count (in the frequency source) from which a piece is among the ``top`` most frequent: the ``top``-th
    largest count (ties at the boundary are frequent too); every seen piece is frequent when fewer than ``top`` are
    seen, an unseen one (count 0) never is; ``inf`` (nothing frequent, no filter) when ``top`` is 0 or nothing was
    counted."""
    counts = sorted((c for c in frequencies.values() if c > 0), reverse=True)
    if top <= 0 or not counts:
        return math.inf
    return float(counts[min(top, len(counts)) - 1])


@dataclass
class ExampleTokens:
    """What the roles need of one dumped example: which positions are real tokens, the rarest of them, and whether
    the example counts for the rare-token role."""

    real: np.ndarray  # [L] bool: not a special token
    rarest: np.ndarray  # [L] bool: a real token of the lowest frequency (in the frequency source) in the example
    two_rarest: np.ndarray  # [L] bool: a real token whose count is at most the example's second-lowest (ties included)
    rare_counted: bool  # its rarest real piece is not among the frequency source's most frequent

    @classmethod
    def from_dump_row(cls, tokens: list[str], segment_ids: list[int | None], frequencies: Counter,
                      frequent_from: float = math.inf) -> "ExampleTokens":
        """``frequent_from``: the count from which a piece is frequent (:func:`frequent_count`); the default counts
        every example."""
        real = np.array([segment is not None for segment in segment_ids], dtype=bool)
        counts = np.array([frequencies.get(token, 0) if is_real else np.inf for token, is_real in zip(tokens, real)], dtype=float)
        if not real.any():
            nothing = np.zeros_like(real)
            return cls(real=real, rarest=nothing, two_rarest=nothing.copy(), rare_counted=False)
        ordered = np.sort(counts[real])
        rarest = real & (counts == ordered[0])
        two_rarest = real & (counts <= ordered[min(1, len(ordered) - 1)])
        return cls(real=real, rarest=rarest, two_rarest=two_rarest, rare_counted=bool(ordered[0] < frequent_from))


class RoleCounts:
    """Per (layer, head) sums over query tokens; :meth:`table` turns them into the roles table."""

    def __init__(self, num_layers: int, num_heads: int, max_length: int):
        shape = (num_layers, num_heads)
        self.queries = np.zeros(shape, dtype=np.int64)
        self.confidence_sum = np.zeros(shape)
        # the rare-token role: only queries of the examples that count for it (ExampleTokens.rare_counted)
        self.rare_examples = 0
        self.rare_queries = 0
        self.rare_hits = np.zeros(shape, dtype=np.int64)
        self.rare2_hits = np.zeros(shape, dtype=np.int64)
        self.rare_chance_sum = 0.0  # sum over counted queries of (rarest tokens / real tokens)
        # per counted example, its hit share minus its chance rate: sums of the excess and of its square per head (the
        # test against chance is over examples, whose queries share one rarest token and are not independent)
        self.rare_excess_sum = np.zeros(shape)
        self.rare_excess_squares = np.zeros(shape)
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
        if example.rare_counted:
            self.rare_examples += 1
            self.rare_queries += queries.size
            hits = example.rarest[attended].sum(-1)
            self.rare_hits += hits
            self.rare2_hits += example.two_rarest[attended].sum(-1)
            # a head whose maximum falls on a uniformly random real token hits a rarest one with probability (rarest
            # tokens) / (real tokens): higher than over every key, so a head that only skips the special tokens is
            # not above chance for that alone
            chance = example.rarest.sum() / real.sum()
            self.rare_chance_sum += queries.size * chance
            excess = hits / queries.size - chance
            self.rare_excess_sum += excess
            self.rare_excess_squares += excess**2
        self.confidence_sum += rows[..., real].max(-1).sum(-1)
        self.examples += 1

    def table(self) -> pl.DataFrame:
        """One row per (layer, head): ``queries``, ``confidence``, ``positional_offset`` (the dominant key - query),
        ``positional_share`` (its share of the queries); for the rare-token role ``rare_examples`` and ``rare_queries``
        (the examples, and their real queries, whose rarest piece is not frequent), ``rare_hits``, ``rare_share``
        (hits / rare_queries), ``rare_chance`` (a uniformly attending head's expected share) and ``rare2_share`` (on
        one of the two least frequent tokens); null shares when no example counts."""
        layers, heads = self.queries.shape
        dominant = self.offsets.argmax(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.take_along_axis(self.offsets, dominant[..., None], -1)[..., 0] / self.queries
            confidence = self.confidence_sum / self.queries
            rare = self.rare_hits / self.rare_queries
            rare2 = self.rare2_hits / self.rare_queries
            chance = self.rare_chance_sum / self.rare_queries if self.rare_queries else np.nan
        return pl.DataFrame({
            "layer": np.repeat(np.arange(layers), heads).astype(np.int32),
            "head": np.tile(np.arange(heads), layers).astype(np.int32),
            "examples": np.full(layers * heads, self.examples, dtype=np.int64),
            "queries": self.queries.reshape(-1),
            "confidence": confidence.reshape(-1),
            "positional_offset": (dominant - (self.max_length - 1)).reshape(-1).astype(np.int32),
            "positional_share": share.reshape(-1),
            "rare_examples": np.full(layers * heads, self.rare_examples, dtype=np.int64),
            "rare_queries": np.full(layers * heads, self.rare_queries, dtype=np.int64),
            "rare_hits": self.rare_hits.reshape(-1),
            "rare_share": rare.reshape(-1).astype(float),
            "rare_chance": np.full(layers * heads, chance, dtype=float),
            "rare_excess_sum": self.rare_excess_sum.reshape(-1),
            "rare_excess_squares": self.rare_excess_squares.reshape(-1),
            "rare2_share": rare2.reshape(-1).astype(float),
        }).with_columns(pl.col(pl.Float64).fill_nan(None))


def dump_roles(dump, frequencies: Counter, top_frequent: int = RARE_TOP_FREQUENT) -> pl.DataFrame:
    """The roles table of one attention dump (:class:`bertology_core.attention.dump_tables.AttentionDump`): every example, every
    head; the rare-token role on the examples whose rarest piece is not among the ``top_frequent`` most frequent of
    ``frequencies``. Reads 64 examples' maps at a time (all their layers and heads: :meth:`example_chunks`)."""
    tokens = dump.tokens()
    frequent_from = frequent_count(frequencies, top_frequent)
    examples = {row["example"]: ExampleTokens.from_dump_row(row["tokens"], row["segment_ids"], frequencies, frequent_from)
                for row in tokens.select("example", "tokens", "segment_ids").iter_rows(named=True)}
    if not any(example.real.any() for example in examples.values()):
        raise ValueError(f"{dump.tokens_path}: no example has a real (non-special) token, so no head has a role to "
                         "measure. Fix: dump examples with text (attention.max_examples, the task's dev split).")
    shape = dump.scan().select(pl.col("layer").max() + 1, pl.col("head").max() + 1, pl.col("length").max()).collect().row(0)
    num_layers, num_heads, max_length = (int(v) for v in shape)
    counts = RoleCounts(num_layers, num_heads, max_length)
    for frame in dump.example_chunks(["example", "layer", "head", "length", "weights"]):
        for (example,), group in frame.group_by("example", maintain_order=True):
            length = int(group["length"][0])
            values = np.stack([np.asarray(w, dtype=np.uint16) for w in group["weights"]])
            maps = dequantise(values, dump.scale).reshape(num_layers, num_heads, length, length)
            counts.add(maps, examples[example])
    return counts.table()
