"""Which attention heads track which dependency relations (Clark et al. 2019, "What Does BERT Look At?", sec. 4).

Definitions, as in the paper and its code (github.com/clarkkev/attention-analysis):

- Word-level attention (``bpe_utils.get_word_word_attention`` with ``mode="mean"``, the paper's choice):
  the attention *to* a split word is the sum of the attention to its pieces, the attention *from* a split
  word the mean of its pieces' attention, so each word's attention still sums to one. Special tokens
  ([CLS], [SEP]) are then left out, without renormalising (the argmax does not change).
- A head's prediction for a word (``Syntax_Analysis.ipynb``): attention to the word itself is ignored
  (the diagonal is zeroed; here it is set below any weight so it is never chosen), then
  ``dep->head`` predicts the word the dependent attends to most, ``head<-dep`` the word that attends most
  to the dependent (the transposed map). Accuracy per relation is the share of its words whose predicted
  head is the gold head; the paper's table reports, per relation, the best head over both directions.
- The baseline predicts the head at a fixed offset from the word (offsets -3..+2 in their code: 0 is the
  word itself, never right); a position left of the sentence is the root, right of it the last word; the
  best offset is chosen per relation on the same data.
- ``root`` and ``punct`` rows are left out of the table, and relations with fewer than 100 words; the
  ``all`` row counts every word.

Clark et al. choose the best head and the best offset on the same sentences they report them on (their
notebook maxes over the dev set), which flatters the head more than the baseline (144 x 2 candidates against
6). :func:`held_out_best` also gives the honest version: both chosen on one half of the sentences and
reported on the other, with a bootstrap interval (over the report half's sentences) of their difference.

The paper uses the WSJ with Stanford Dependencies; here Universal Dependencies relations (``obj`` for
``dobj``, ``nmod:poss`` for ``poss``, ``aux:pass`` for ``auxpass``; with ``strip_subtypes`` the subtype is
dropped). Layers and heads are 0-based here; the paper counts from 1 (``clark_name``).

Voita et al. 2019 (section 5.2) score a head differently, and :class:`VoitaCounts` counts their version in the same
pass over the sentences (the head roles stage's syntactic role reads it; Clark et al.'s tables above serve their
own claim):

- per relation *and direction*, at token (word-piece) level: "how often it assigns its maximum attention weight
  (excluding EOS) to a token with which it is in one of the aforementioned dependency relations", each relation
  "counted separately", "allowed to hold in either direction". For a gold pair (dependent word d, head word h,
  relation r): in ``dep->head`` the queries are d's pieces and the target is h; in ``head->dep`` the queries are
  h's pieces and the target is d (the paper's s->v and v->s for nsubj). Each piece of the query word is one trial,
  a hit when its own row's argmax over the keys, special tokens left out (the end-of-sentence analogue, as the
  head roles' confidence leaves them out), falls on a piece of the target word. Attention to the query itself is
  not excluded (the paper excludes EOS only). Their models are BPE; how they handle a split word is not stated:
  here every piece of the query word is a trial and any piece of the target word is a hit.
- the baseline "looks at the most frequent relative position for this dependency relation": per (relation,
  direction), for every token offset o the share of trials where query position + o is a piece of the target word;
  the baseline is the offset with the highest share (on a tie the smallest |o|, then the leftward one), over every
  offset the data holds, chosen on the same sentences as the heads (as the paper). When words are single pieces
  this is exactly the most frequent relative position; the two directions' baselines mirror each other (Table 1
  of the paper prints one per relation).
- ``accuracy`` = hits / trials per (relation, direction, layer, head); pairs whose dependent or head word is not
  complete (truncated, or without pieces) and the root (no head word) are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import torch

from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import InterventionPlan
from bertology_core.inputs.batching import Encoded
from bertology_core.stats.bootstrap import percentile_interval, resample_indices

DIRECTIONS = ("dep->head", "head<-dep")
CLARK_OFFSETS = (-3, -2, -1, 0, 1, 2)
# Voita et al.'s two directions: whose pieces attend (the query word) -> the word they should attend to
VOITA_DIRECTIONS = ("dep->head", "head->dep")


def word_level_attention(probs: np.ndarray, piece_words: Sequence[int], num_words: int) -> np.ndarray:
    """``[..., pieces, pieces]`` attention over word pieces -> ``[..., words, words]`` over words (see the
    module docstring); pieces of word -1 (special tokens) are left out; a word without pieces gets zeros."""
    pieces = np.asarray(piece_words)
    to_word = np.zeros((len(pieces), num_words), dtype=np.float64)
    real = np.flatnonzero(pieces >= 0)
    to_word[real, pieces[real]] = 1.0
    counts = to_word.sum(axis=0)
    from_word = np.divide(to_word.T, counts[:, None], out=np.zeros_like(to_word.T), where=counts[:, None] > 0)
    return from_word @ probs.astype(np.float64) @ to_word


def predicted_heads(word_attention: np.ndarray, direction: str, candidates: np.ndarray | None = None) -> np.ndarray:
    """1-based predicted head of every word, ``[..., words]``, from ``[..., words, words]`` attention.
    ``candidates``: words that may be predicted (default all); a word never predicts itself."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    scores = word_attention if direction == "dep->head" else np.swapaxes(word_attention, -1, -2)
    scores = scores.copy()
    words = scores.shape[-1]
    scores[..., np.arange(words), np.arange(words)] = -1.0
    if candidates is not None:
        scores[..., ~np.asarray(candidates, dtype=bool)] = -1.0
    return scores.argmax(axis=-1) + 1


def offset_predictions(num_words: int, offset: int) -> np.ndarray:
    """Clark et al.'s fixed-offset baseline: the head of word ``i`` (0-based) is at 1-based position
    ``i + offset + 1``, clamped to the root (0) on the left and the last word on the right."""
    return np.clip(np.arange(num_words) + offset + 1, 0, num_words)


@dataclass
class RelationCounts:
    """Running counts over sentences: words per relation, correct head predictions per relation,
    direction, layer and head, and correct offset-baseline predictions per relation and offset."""

    num_layers: int
    num_heads: int
    offsets: tuple[int, ...] = CLARK_OFFSETS
    words: dict[str, int] = field(default_factory=dict)
    correct: dict[str, np.ndarray] = field(default_factory=dict)
    baseline: dict[str, np.ndarray] = field(default_factory=dict)
    # per evaluated word (kept for held_out_best): its sentence, relation, and which predictions are right
    sentences: int = 0
    word_sentence: list[int] = field(default_factory=list)
    word_relation: list[str] = field(default_factory=list)
    word_hits: list[np.ndarray] = field(default_factory=list)  # [directions, layers, heads] bool
    word_offset_hits: list[np.ndarray] = field(default_factory=list)  # [offsets] bool
    # Voita et al.'s token-level counts, filled by :func:`relation_counts` in the same pass (None: not counted)
    voita: VoitaCounts | None = None

    def add(self, word_attention: np.ndarray, heads: Sequence[int], relations: Sequence[str], evaluated: np.ndarray) -> None:
        """One sentence: ``word_attention`` ``[layers, heads, words, words]``, gold 1-based ``heads`` (0 =
        root), ``relations`` per word, ``evaluated`` words (those with a representation)."""
        gold = np.asarray(heads)
        evaluated = np.asarray(evaluated, dtype=bool)
        predictions = np.stack([predicted_heads(word_attention, d, evaluated) for d in DIRECTIONS])  # [2, L, H, W]
        hits = predictions == gold
        offset_hits = np.stack([offset_predictions(len(gold), o) == gold for o in self.offsets])  # [offsets, W]
        for word in np.flatnonzero(evaluated):
            self.word_sentence.append(self.sentences)
            self.word_relation.append(relations[word])
            self.word_hits.append(hits[..., word])
            self.word_offset_hits.append(offset_hits[:, word])
            for relation in (relations[word], "all"):
                if relation not in self.words:
                    self.words[relation] = 0
                    self.correct[relation] = np.zeros((len(DIRECTIONS), self.num_layers, self.num_heads), np.int64)
                    self.baseline[relation] = np.zeros(len(self.offsets), np.int64)
                self.words[relation] += 1
                self.correct[relation] += hits[..., word]
                self.baseline[relation] += offset_hits[:, word]
        self.sentences += 1

    def per_head(self) -> pl.DataFrame:
        """Accuracy of every (relation, direction, layer, head)."""
        rows = []
        for relation, count in sorted(self.words.items()):
            for d, direction in enumerate(DIRECTIONS):
                for layer in range(self.num_layers):
                    for head in range(self.num_heads):
                        rows.append({"relation": relation, "direction": direction, "layer": layer, "head": head,
                                     "words": count, "accuracy": self.correct[relation][d, layer, head] / count})
        return pl.DataFrame(rows, schema_overrides={"layer": pl.Int16, "head": pl.Int16})

    def best(self, exclude: Sequence[str] = ("root", "punct"), min_words: int = 100) -> pl.DataFrame:
        """Clark et al.'s table 1: per relation, the best head over both directions and the best offset."""
        rows = []
        for relation, count in self.words.items():
            if relation in exclude or count < min_words:
                continue
            d, layer, head = np.unravel_index(self.correct[relation].argmax(), self.correct[relation].shape)
            best_offset = int(self.baseline[relation].argmax())
            rows.append({
                "relation": relation, "words": count, "direction": DIRECTIONS[d], "layer": int(layer), "head": int(head),
                "clark_name": f"{layer + 1}-{head + 1}", "accuracy": self.correct[relation][d, layer, head] / count,
                "baseline_offset": self.offsets[best_offset], "baseline_accuracy": self.baseline[relation][best_offset] / count,
            })
        schema = {"relation": pl.String, "words": pl.Int64, "direction": pl.String, "layer": pl.Int16, "head": pl.Int16,
                  "clark_name": pl.String, "accuracy": pl.Float64, "baseline_offset": pl.Int16, "baseline_accuracy": pl.Float64}
        frame = pl.DataFrame(rows, schema=schema)
        return frame.sort(pl.col("relation") != "all", -pl.col("words"))


@dataclass
class VoitaCounts:
    """Voita et al.'s token-level syntactic accuracy (the module docstring's second part): running counts per
    (relation, direction) of trials, per-head hits and the offsets of the target word's pieces from each query
    piece. ``relations``: the relations counted (None: every one)."""

    num_layers: int
    num_heads: int
    relations: frozenset[str] | None = None
    pairs: dict[str, int] = field(default_factory=dict)
    trials: dict[tuple[str, str], int] = field(default_factory=dict)
    hits: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # [layers, heads]
    offsets: dict[tuple[str, str], Counter] = field(default_factory=dict)

    def add(self, maps: np.ndarray, piece_words: Sequence[int], heads: Sequence[int], relations: Sequence[str],
            complete: Sequence[bool]) -> None:
        """One sentence: piece-level ``maps`` ``[layers, heads, pieces, pieces]`` (query, key), each piece's word
        (``piece_words``, -1 for special tokens), gold 1-based ``heads`` (0 = root), ``relations`` per word and the
        ``complete`` words (every piece kept)."""
        pieces = np.asarray(piece_words)
        real = pieces >= 0
        if not real.any():
            return
        # each query's argmax over the real keys, as the word it belongs to: [layers, heads, pieces]
        attended = pieces[np.where(real, maps, -np.inf).argmax(-1)]
        complete = np.asarray(complete, dtype=bool)
        for dependent, (head, relation) in enumerate(zip(heads, relations)):
            if head == 0 or (self.relations is not None and relation not in self.relations):
                continue
            governor = head - 1
            if not (complete[dependent] and complete[governor]):
                continue
            self.pairs[relation] = self.pairs.get(relation, 0) + 1
            for direction, query, target in (("dep->head", dependent, governor), ("head->dep", governor, dependent)):
                queries, targets = np.flatnonzero(pieces == query), np.flatnonzero(pieces == target)
                key = (relation, direction)
                if key not in self.trials:
                    self.trials[key] = 0
                    self.hits[key] = np.zeros((self.num_layers, self.num_heads), np.int64)
                    self.offsets[key] = Counter()
                self.trials[key] += len(queries)
                self.hits[key] += (attended[:, :, queries] == target).sum(-1)
                # one count per (query piece, offset that lands on the target word): a share of the trials
                self.offsets[key].update((targets[None, :] - queries[:, None]).ravel().tolist())

    def baseline(self, relation: str, direction: str) -> tuple[int, float]:
        """The most frequent relative position of (``relation``, ``direction``) and its accuracy (share of trials);
        on a tie the smallest |offset|, then the leftward one."""
        key = (relation, direction)
        offset, count = min(self.offsets[key].items(), key=lambda kv: (-kv[1], abs(kv[0]), kv[0]))
        return int(offset), count / self.trials[key]

    def table(self, exclude: Sequence[str] = ("root", "punct"), min_pairs: int = 1) -> pl.DataFrame:
        """One row per (relation, direction, layer, head): ``pairs`` (gold pairs of the relation), ``trials`` (query
        pieces), ``accuracy``, ``baseline_offset``, ``baseline_accuracy``; relations in ``exclude`` or with fewer than
        ``min_pairs`` pairs are left out."""
        frames = []
        layer = np.repeat(np.arange(self.num_layers), self.num_heads)
        head = np.tile(np.arange(self.num_heads), self.num_layers)
        for relation, direction in sorted(self.trials, key=lambda k: (k[0], VOITA_DIRECTIONS.index(k[1]))):
            if relation in exclude or self.pairs[relation] < min_pairs:
                continue
            offset, accuracy = self.baseline(relation, direction)
            trials = self.trials[(relation, direction)]
            n = len(layer)
            frames.append(pl.DataFrame({
                "relation": [relation] * n, "direction": [direction] * n, "pairs": [self.pairs[relation]] * n,
                "layer": layer, "head": head, "trials": [trials] * n,
                "accuracy": self.hits[(relation, direction)].reshape(-1) / trials,
                "baseline_offset": [offset] * n, "baseline_accuracy": [accuracy] * n,
            }))
        schema = {"relation": pl.String, "direction": pl.String, "pairs": pl.Int64, "layer": pl.Int16, "head": pl.Int16,
                  "trials": pl.Int64, "accuracy": pl.Float64, "baseline_offset": pl.Int32, "baseline_accuracy": pl.Float64}
        if not frames:
            return pl.DataFrame(schema=schema)
        return pl.concat([f.cast(schema) for f in frames])


def held_out_best(
    counts: RelationCounts, selection: np.ndarray, resamples: int = 1000, level: float = 0.95, seed: int = 0,
    exclude: Sequence[str] = ("root", "punct"), min_words: int = 100,
) -> pl.DataFrame:
    """Clark et al.'s table 1 without choosing on the reported data: per relation (and ``all``), the best head
    (over both directions) and the best offset are chosen on the sentences where ``selection`` (one bool per
    sentence) is true and scored on the others; ``difference`` is the head's accuracy minus the baseline's
    there, with a percentile interval from ``resamples`` bootstrap draws of the report half's sentences."""
    sentence = np.asarray(counts.word_sentence)
    relation = np.asarray(counts.word_relation, dtype=object)
    hits = np.stack(counts.word_hits) if counts.word_hits else np.zeros((0, len(DIRECTIONS), counts.num_layers, counts.num_heads), bool)
    offset_hits = np.stack(counts.word_offset_hits) if counts.word_offset_hits else np.zeros((0, len(counts.offsets)), bool)
    chosen_half = np.asarray(selection, dtype=bool)[sentence] if sentence.size else np.zeros(0, bool)
    report_sentences = np.flatnonzero(~np.asarray(selection, dtype=bool))
    position = {s: i for i, s in enumerate(report_sentences)}
    rows = []
    for name, total in counts.words.items():
        if name in exclude or total < min_words:
            continue
        words = np.ones(len(relation), bool) if name == "all" else relation == name
        choose, report = words & chosen_half, words & ~chosen_half
        if not choose.any() or not report.any():
            continue
        d, layer, head = np.unravel_index(hits[choose].sum(0).argmax(), hits.shape[1:])
        offset = int(offset_hits[choose].sum(0).argmax())
        head_right, base_right = hits[report][:, d, layer, head], offset_hits[report][:, offset]
        # per report sentence: words of the relation, right by the head, right by the baseline
        where = np.array([position[s] for s in sentence[report]])
        n = np.bincount(where, minlength=len(report_sentences)).astype(float)
        h = np.bincount(where, weights=head_right, minlength=len(report_sentences))
        b = np.bincount(where, weights=base_right, minlength=len(report_sentences))
        draws = resample_indices(len(report_sentences), resamples, seed)
        with np.errstate(invalid="ignore", divide="ignore"):
            resampled = (h[draws].sum(1) - b[draws].sum(1)) / n[draws].sum(1)
        low, high = percentile_interval(resampled, level)
        rows.append({
            "relation": name, "selection_words": int(choose.sum()), "report_words": int(report.sum()),
            "direction": DIRECTIONS[d], "layer": int(layer), "head": int(head), "clark_name": f"{layer + 1}-{head + 1}",
            "selection_accuracy": float(hits[choose][:, d, layer, head].mean()), "accuracy": float(head_right.mean()),
            "baseline_offset": counts.offsets[offset], "baseline_accuracy": float(base_right.mean()),
            "difference": float(head_right.mean() - base_right.mean()), "ci_low": float(low), "ci_high": float(high),
        })
    schema = {"relation": pl.String, "selection_words": pl.Int64, "report_words": pl.Int64, "direction": pl.String,
              "layer": pl.Int16, "head": pl.Int16, "clark_name": pl.String, "selection_accuracy": pl.Float64,
              "accuracy": pl.Float64, "baseline_offset": pl.Int16, "baseline_accuracy": pl.Float64,
              "difference": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort(pl.col("relation") != "all", -pl.col("report_words"))


def relation_counts(
    model,
    aligned,
    heads: Sequence[Sequence[int]],
    relations: Sequence[Sequence[str]],
    batch_size: int = 16,
    offsets: Sequence[int] = CLARK_OFFSETS,
    voita_relations: Iterable[str] | None = None,
) -> RelationCounts:
    """Run ``model`` (on the attention engine) over word-aligned sentences (:func:`probes.align_words`)
    and count, per relation, every head's correct predictions and the offset baselines' (Clark et al., on word-level
    attention), and in the same pass Voita et al.'s token-level counts (``.voita``, :class:`VoitaCounts`) of the
    ``voita_relations`` (None: every relation) on the piece-level maps."""
    config = model.config
    counts = RelationCounts(config.num_hidden_layers, config.num_attention_heads, tuple(offsets))
    counts.voita = VoitaCounts(config.num_hidden_layers, config.num_attention_heads,
                               None if voita_relations is None else frozenset(voita_relations))
    sentences = Encoded(aligned.input_ids, None, config.pad_token_id or 0)
    for start in range(0, len(sentences), batch_size):
        rows = list(range(start, min(start + batch_size, len(sentences))))
        captured: dict[int, torch.Tensor] = {}

        def sink(layer: int, probs: torch.Tensor, real: torch.Tensor) -> None:
            captured[layer] = probs.float().cpu()

        with torch.inference_mode(), intervene(model, InterventionPlan(sink=sink)):
            model(**{key: value.to(model.device) for key, value in sentences.collate(rows).items()})
        maps = torch.stack([captured[layer] for layer in range(config.num_hidden_layers)], dim=1).numpy()  # [B, L, H, T, T]
        for i, r in enumerate(rows):
            n = len(aligned.input_ids[r])
            counts.voita.add(maps[i, :, :, :n, :n], aligned.piece_words[r], heads[r], relations[r], aligned.complete[r])
            words = word_level_attention(maps[i, :, :, :n, :n], aligned.piece_words[r], len(aligned.complete[r]))
            counts.add(words, heads[r], relations[r], aligned.complete[r])
    return counts
