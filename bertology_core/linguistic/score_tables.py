"""Attention to linguistic features and token-to-token attention (Kovaleva et al. 2019, sections 4.4-4.5).

Feature definitions follow the paper's code (text-machine-lab/dark-secrets-of-BERT, via its fork
amanaknows/dark-secrets-of-BERT, ``visualize_attention.ipynb``), with spaCy tags:

- nouns: Penn tags NN, NNS, NNP, NNPS; verbs: VB, VBD, VBG, VBN, VBP, VBZ; pronouns: PRP, PRP$;
- subjects: dependency labels nsubj, nsubjpass, csubj, csubjpass, agent, expl;
- objects: dobj, iobj, dative, attr, oprd;
- negation: the paper's 17 words (neither, nor, not, never, none, don't, won't, ...). spaCy splits
  contractions (``do`` + ``n't``), so a token counts when its lower-cased text is in the list or
  it is ``n't``/has the ``neg`` dependency; the paper matched word-piece strings, which over-matches;
- [CLS] and [SEP] (special tokens of the model), scored like any other token type.

Words are aligned to word pieces by character offsets (every piece overlapping the word; a piece that is
a bare word-start marker, SentencePiece's ``▁`` or byte-level BPE's ``Ġ``, counts with the word it starts:
:func:`bertology_core.data.word_pieces.blank_spans_to_next_piece`).

Per-head score of a token type (the paper's): for each position, the attention it receives from
every token divided by the sequence length (the column mean of the map); the maximum over the
positions of that type; averaged over the examples that contain the type (examples without it are
skipped, as the paper's text says; its code counted them as 0).

Token-to-token (section 4.5): the share of [CLS]'s attention row (last layer) on each token type of
a partition ([CLS], [SEP], punctuation, pronoun, noun, verb, other), and the paper's max score of
[CLS] -> type.

Token-to-token between words, in both directions. A relation (:data:`LINKS`) pairs two words with two
roles; a direction ``(from, to)`` (config ``linguistic.directions``: both of each relation) scores the
attention the ``from`` word pays to the ``to`` word, so ``verb->subject`` and ``subject->verb`` are the
two directions of one relation and the same pairs of words, read from the two sides of the map:

- ``subject-verb``: a subject and its verb. Reproduced from the paper's code (``extract_subj_verb``):
  a token with the ``nsubj`` dependency whose head has the universal tag VERB, within one sentence;
  its directions are the code's ``SUBJ-VERB`` (here ``subject->verb``) and ``VERB-SUBJ``
  (``verb->subject``). The ``subject`` role is this narrower nsubj-of-a-verb, not the broader
  subject feature above.
- ``noun-pronoun``: a pronoun and its antecedent noun. Not reproduced: the code's
  ``analyze_cross_attention`` implements only the subject-verb pair, and we run no coreference
  resolution, so every noun is paired with every pronoun of the input (both sentences: a pronoun may
  refer to a noun of the other sentence) and the maximum over pairs stands in for the antecedent.
  ``pronoun->noun`` is the pronoun looking back at its antecedent, ``noun->pronoun`` the other way.

Per-head score of a direction, as in the paper's code: the maximum over the example's word pairs,
averaged over the examples with at least one pair. What differs from its code: the attention between
two words is word-level (sum over the ``to`` word's pieces, mean over the ``from`` word's pieces, as
Clark et al. 2019) where the code read single piece-to-piece weights; pairs come from the parse, where
the code matched word-piece strings anywhere in the input and zipped the two lists of positions (which
pairs the wrong pieces as soon as a sentence has two subjects, or a subject of two pieces); examples
without a pair are skipped, where the code counted them as 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from bertology_core.attention.dump_tables import dequantise
from bertology_core.data import states
from bertology_core.data.tasks import tokenizer_text
from bertology_core.data.word_pieces import blank_pieces, blank_spans_to_next_piece

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
VERB_TAGS = frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"})
PRONOUN_TAGS = frozenset({"PRP", "PRP$"})
SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass", "agent", "expl"})
OBJECT_DEPS = frozenset({"dobj", "iobj", "dative", "attr", "oprd"})
NEGATION_WORDS = frozenset({
    "neither", "nor", "not", "never", "none", "don't", "won't", "didn't", "hadn't", "haven't", "can't",
    "isn't", "wasn't", "shouldn't", "couldn't", "nothing", "nowhere",
})
FEATURES = ("noun", "verb", "pronoun", "subject", "object", "negation", "[CLS]", "[SEP]")
CLS_PARTITION = ("[CLS]", "[SEP]", "punctuation", "pronoun", "noun", "verb", "other")
# relation -> its two roles; every direction (from, to) is one relation read from one side
LINKS = {"subject-verb": ("subject", "verb"), "noun-pronoun": ("noun", "pronoun")}


TOKEN_SCHEMA = {
    "idx": pl.Int64, "segment": pl.Int8, "i": pl.Int32, "text": pl.String, "lower": pl.String, "char": pl.Int32,
    "tag": pl.String, "pos": pl.String, "dep": pl.String, "head": pl.Int32, "is_punct": pl.Boolean,
}


def spacy_tokens(nlp: Any, frame: pl.DataFrame, batch_size: int = 256) -> pl.DataFrame:
    """Run spaCy once over the sentences of a prepared task split (``idx, sentence1, sentence2``): one
    row per spaCy token, ``segment`` 0/1 for the first/second sentence, ``head`` the index of its head."""
    records: dict[str, list] = {name: [] for name in TOKEN_SCHEMA}
    for segment, column in enumerate(("sentence1", "sentence2")):
        present = frame.filter(pl.col(column).is_not_null())
        for idx, doc in zip(present["idx"], nlp.pipe(present[column].to_list(), batch_size=batch_size)):
            for token in doc:
                for name, value in (
                    ("idx", idx), ("segment", segment), ("i", token.i), ("text", token.text), ("lower", token.lower_),
                    ("char", token.idx), ("tag", token.tag_), ("pos", token.pos_), ("dep", token.dep_),
                    ("head", token.head.i), ("is_punct", token.is_punct),
                ):
                    records[name].append(value)
    return pl.DataFrame(records, schema=TOKEN_SCHEMA)


def token_features(token: dict[str, Any]) -> set[str]:
    """The paper's feature types of one token (a row of :func:`spacy_tokens`)."""
    found = set()
    if token["tag"] in NOUN_TAGS:
        found.add("noun")
    if token["tag"] in VERB_TAGS:
        found.add("verb")
    if token["tag"] in PRONOUN_TAGS:
        found.add("pronoun")
    if token["dep"] in SUBJECT_DEPS:
        found.add("subject")
    if token["dep"] in OBJECT_DEPS:
        found.add("object")
    if token["lower"] in NEGATION_WORDS or token["lower"] == "n't" or token["dep"] == "neg":
        found.add("negation")
    return found


@dataclass
class ExampleAnnotation:
    """Word-piece positions per token type and, per relation of :data:`LINKS`, its word pairs (the
    pieces of each role's word), for one input."""

    length: int
    positions: dict[str, list[int]] = field(default_factory=dict)  # feature -> piece positions
    partition: list[str] = field(default_factory=list)  # CLS_PARTITION type of every piece
    links: dict[str, list[dict[str, list[int]]]] = field(default_factory=dict)  # relation -> [role -> pieces]


def pieces_of(span: tuple[int, int], offsets: list[tuple[int, int]], sequence_ids: list[int | None], segment: int) -> list[int]:
    """Word-piece positions in ``segment`` whose character span overlaps ``span``."""
    start, end = span
    return [
        i for i, ((a, b), s) in enumerate(zip(offsets, sequence_ids))
        if s == segment and b > a and a < end and b > start
    ]


def annotate_example(
    tokens: list[dict[str, Any]], offsets: list[tuple[int, int]], sequence_ids: list[int | None], cls_position: int = 0
) -> ExampleAnnotation:
    """Combine an input's spaCy tokens (rows of :func:`spacy_tokens`, both segments) with its
    tokenisation (character ``offsets`` per piece and ``sequence_ids``: 0/1, None for special tokens)."""
    length = len(offsets)
    special = [s is None for s in sequence_ids]
    annotation = ExampleAnnotation(length=length, partition=["other"] * length)
    positions: dict[str, set[int]] = {name: set() for name in FEATURES}
    positions["[CLS]"].add(cls_position)
    positions["[SEP]"].update(i for i, s in enumerate(special) if s and i != cls_position)
    links: dict[str, list[dict[str, list[int]]]] = {name: [] for name in LINKS}
    nouns: list[list[int]] = []
    pronouns: list[list[int]] = []
    for segment in (0, 1):
        doc = [t for t in tokens if t["segment"] == segment]
        by_index = {t["i"]: t for t in doc}
        pieces = {t["i"]: pieces_of((t["char"], t["char"] + len(t["text"])), offsets, sequence_ids, segment) for t in doc}
        types = {t["i"]: token_features(t) for t in doc}
        for token in doc:
            for name in types[token["i"]]:
                positions[name].update(pieces[token["i"]])
            kind = "punctuation" if token["is_punct"] else next(
                (k for k in ("pronoun", "noun", "verb") if k in types[token["i"]]), None
            )
            if kind:
                for position in pieces[token["i"]]:
                    annotation.partition[position] = kind
            head = by_index.get(token["head"])
            if token["dep"] == "nsubj" and head is not None and head["pos"] == "VERB" and pieces[token["i"]] and pieces[head["i"]]:
                links["subject-verb"].append({"subject": pieces[token["i"]], "verb": pieces[head["i"]]})
        nouns += [pieces[i] for i, t in types.items() if "noun" in t and pieces[i]]
        pronouns += [pieces[i] for i, t in types.items() if "pronoun" in t and pieces[i]]
    # a pronoun may refer to a noun of the other sentence: pairs span the whole input
    links["noun-pronoun"] = [{"noun": n, "pronoun": p} for n in nouns for p in pronouns]
    for i, s in enumerate(special):
        if s:
            annotation.partition[i] = "[CLS]" if i == cls_position else "[SEP]"
    annotation.positions = {name: sorted(p) for name, p in positions.items() if p}
    annotation.links = {name: p for name, p in links.items() if p}
    return annotation


def feature_scores(attention: np.ndarray, annotation: ExampleAnnotation) -> dict[str, float]:
    """The paper's score per feature present in the example: max over its positions of the column mean."""
    received = attention.mean(axis=0)
    return {name: float(received[positions].max()) for name, positions in annotation.positions.items()}


def word_attention(attention: np.ndarray, source: list[int], target: list[int]) -> float:
    """Attention from one word to another: sum over the target's pieces, mean over the source's."""
    return float(attention[np.ix_(source, target)].sum(axis=1).mean())


def direction_name(source: str, target: str) -> str:
    """``from->to``: the ``from`` word attends to the ``to`` word (its row, their column)."""
    return f"{source}->{target}"


def relation_of(source: str, target: str) -> str:
    """The relation of :data:`LINKS` whose two roles are ``source`` and ``target``."""
    for name, roles in LINKS.items():
        if source != target and {source, target} == set(roles):
            return name
    known = ", ".join(f"{a}/{b}" for a, b in LINKS.values())
    raise ValueError(f"no relation pairs {source!r} with {target!r}; a direction is two roles of one relation: {known}")


def check_directions(directions: Iterable[Iterable[str]]) -> tuple[tuple[str, str], ...]:
    """``directions`` as (from, to) tuples, each two roles of one relation, none repeated."""
    out = tuple((str(a), str(b)) for a, b in directions)
    for source, target in out:
        relation_of(source, target)
    if len(set(out)) != len(out):
        raise ValueError(f"a direction is listed twice: {out}")
    return out


def relation_scores(
    attention: np.ndarray, annotation: ExampleAnnotation, directions: Iterable[tuple[str, str]]
) -> dict[str, float]:
    """Per direction ``from->to`` with a pair in the example: the maximum over its relation's word pairs
    of the attention from the ``from`` word to the ``to`` word (:func:`word_attention`)."""
    scores = {}
    for source, target in directions:
        pairs = annotation.links.get(relation_of(source, target))
        if pairs:
            scores[direction_name(source, target)] = max(word_attention(attention, p[source], p[target]) for p in pairs)
    return scores


def cls_distribution(attention: np.ndarray, annotation: ExampleAnnotation, cls_position: int) -> dict[str, float]:
    """Share of [CLS]'s attention row on each type of the partition (sums to 1)."""
    row = attention[cls_position]
    shares = dict.fromkeys(CLS_PARTITION, 0.0)
    for position, kind in enumerate(annotation.partition):
        shares[kind] += float(row[position])
    return shares


def mean_by_key(rows: Iterable[dict[str, float]]) -> dict[str, tuple[float, int]]:
    """Mean and count per key over dicts in which the key appears (absent = example skipped)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: (sums[key] / counts[key], counts[key]) for key in sums}


def example_encodings(tokenizer: Any, data: pl.DataFrame, dump_tokens: pl.DataFrame) -> dict[int, tuple[list, list, int]]:
    """Re-tokenise each dumped example with character offsets: ``example -> (offsets, sequence_ids, cls)``.

    The texts are given to the tokenizer as the dump gave them (:func:`bertology_core.data.tasks.tokenizer_text`), and a
    bare word-start marker takes the span of the piece after it (:func:`bertology_core.data.word_pieces.blank_spans_to_next_piece`).
    The dump stores tokens, not offsets; tokenising the same text again to the dump's length must give
    the same tokens, which is checked (a different tokenizer or text is an error, not a silent shift)."""
    texts = {row["idx"]: (tokenizer_text(row["sentence1"]), tokenizer_text(row["sentence2"])) for row in data.iter_rows(named=True)}
    out = {}
    blank_cache: dict[int, bool] = {}
    for example, idx, tokens, segment_ids in dump_tokens.select("example", "idx", "tokens", "segment_ids").iter_rows():
        first, second = texts[idx]
        encoding = tokenizer(first, second, truncation=True, max_length=len(tokens), return_offsets_mapping=True)
        again = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
        if again != list(tokens):
            raise ValueError(f"example {example} (idx {idx}): re-tokenised text differs from the dump's tokens; "
                             "the dump was made with another tokenizer or data")
        sequence_ids = encoding.sequence_ids()
        cls = next(i for i, s in enumerate(sequence_ids) if s is None)
        blank = blank_pieces(tokenizer, encoding["input_ids"], blank_cache)
        out[example] = (blank_spans_to_next_piece(encoding["offset_mapping"], sequence_ids, blank), sequence_ids, cls)
    return out


RELATION_SCHEMA = {
    "layer": pl.Int64, "head": pl.Int64, "relation": pl.String, "direction": pl.String, "from": pl.String,
    "to": pl.String, "score": pl.Float64, "examples": pl.Int64,
}


def relation_table(sums: dict[tuple[int, int, str], list[float]], directions: Iterable[tuple[str, str]]) -> pl.DataFrame:
    """``layer, head, relation, direction, from, to, score, examples`` from per-example direction scores
    keyed by (layer, head, ``from->to``): the mean over the examples with a pair of the relation."""
    roles = {direction_name(a, b): (a, b) for a, b in directions}
    rows = [
        {"layer": layer, "head": head, "relation": relation_of(*roles[name]), "direction": name, "from": roles[name][0],
         "to": roles[name][1], "score": float(np.mean(values)), "examples": len(values)}
        for (layer, head, name), values in sums.items()
    ]
    return pl.DataFrame(rows, schema=RELATION_SCHEMA).sort("layer", "head", "relation", "direction")


def score_dump(
    dump: Any, tokenizer: Any, data: pl.DataFrame, spacy_rows: pl.DataFrame,
    directions: Iterable[Iterable[str]],
) -> dict[str, pl.DataFrame]:
    """Per-head feature scores, scores of every direction in ``directions`` (every layer) and [CLS]'s
    distribution (last layer) of a dump."""
    directions = check_directions(directions)

    dump_tokens = dump.tokens()
    encodings = example_encodings(tokenizer, data, dump_tokens)
    by_idx = {idx: group.to_dicts() for (idx,), group in spacy_rows.group_by("idx")}
    annotations = {
        example: annotate_example(by_idx.get(idx, []), *encodings[example])
        for example, idx in dump_tokens.select("example", "idx").iter_rows()
    }
    layers = dump.scan().select("layer").unique().collect()["layer"].sort().to_list()
    last = layers[-1]
    feature_sums: dict[tuple[int, int, str], list[float]] = {}
    relation_sums: dict[tuple[int, int, str], list[float]] = {}
    cls_rows: list[dict[str, Any]] = []
    for layer in layers:
        frame = dump.scan().filter(pl.col("layer") == layer).select("example", "head", "length", "weights").collect()
        for example, head, length, weights in frame.iter_rows():
            attention = dequantise(np.asarray(weights, dtype=np.uint16), dump.scale).reshape(length, length)
            annotation = annotations[example]
            for name, value in feature_scores(attention, annotation).items():
                feature_sums.setdefault((layer, head, name), []).append(value)
            for name, value in relation_scores(attention, annotation, directions).items():
                relation_sums.setdefault((layer, head, name), []).append(value)
            if layer == last:
                cls = encodings[example][2]
                shares = cls_distribution(attention, annotation, cls)
                maxima = {f"max->{name}": float(attention[cls, positions].max()) for name, positions in annotation.positions.items()}
                cls_rows.append({"example": example, "head": head, **shares, **maxima})

    def tidy(sums: dict[tuple[int, int, str], list[float]], name: str) -> pl.DataFrame:
        return pl.DataFrame(
            [{"layer": l, "head": h, name: k, "score": float(np.mean(v)), "examples": len(v)} for (l, h, k), v in sums.items()]
        ).sort("layer", "head", name)

    cls_frame = pl.DataFrame(cls_rows, infer_schema_length=None)  # max-> columns vary by example
    share_columns = list(CLS_PARTITION)
    cls_shares = cls_frame.unpivot(index=["example", "head"], on=share_columns, variable_name="type", value_name="share")
    cls_shares = cls_shares.group_by("head", "type").agg(pl.col("share").mean(), pl.len().alias("examples")).with_columns(
        pl.lit(last).alias("layer"))
    max_columns = [c for c in cls_frame.columns if c.startswith("max->")]
    cls_max = cls_frame.unpivot(index=["example", "head"], on=max_columns, variable_name="type", value_name="score").drop_nulls()
    cls_max = cls_max.group_by("head", "type").agg(pl.col("score").mean(), pl.len().alias("examples")).with_columns(
        pl.col("type").str.replace("max->", ""), pl.lit(last).alias("layer"))
    return {
        "features": tidy(feature_sums, "feature"),
        "relations": relation_table(relation_sums, directions),
        "cls_shares": cls_shares.sort("head", "type"),
        "cls_max": cls_max.sort("head", "type"),
    }


def state_means(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Scores (``task, model_state, *keys, score, examples``) averaged over seeds per model state, plus the fine-tuned
    minus pre-trained difference (``model_state`` :data:`states.DIFFERENCE`) when both states were dumped; sorted, so tables and
    figure data are the same on every run."""
    pre_trained, fine_tuned = states.label(states.PRETRAINED), states.label(states.FINETUNED)
    mean = frame.group_by(["task", "model_state", *keys]).agg(pl.col("score").mean(), pl.col("examples").sum())
    parts = [mean.drop("examples")]
    if set(mean["model_state"]) >= {fine_tuned, pre_trained}:
        wide = mean.pivot(on="model_state", index=["task", *keys], values="score")
        parts.append(wide.select("task", *keys, (pl.col(fine_tuned) - pl.col(pre_trained)).alias("score"))
                     .with_columns(pl.lit(states.DIFFERENCE).alias("model_state")))
    return pl.concat(parts, how="diagonal").drop_nulls("score").sort("task", "model_state", *keys)
