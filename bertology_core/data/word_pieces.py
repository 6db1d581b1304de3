"""How a tokenizer's word pieces relate to words and characters, whatever its type: WordPiece (BERT,
DistilBERT), SentencePiece-style Unigram (ALBERT, DeBERTa-v2/v3, XLM-R: ``▁`` marks a word start) or
byte-level BPE (RoBERTa, ModernBERT: ``Ġ`` stands for a space). Only the tokenizer's own behaviour is read
(what it decodes a piece to, where it puts a piece's characters), never its family.

No torch here: the linguistic scores, which read dumps only, use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def as_in_running_text(words: Sequence[str]) -> list[str]:
    """``words`` as they stand in the running text of their sentence, the words joined by single spaces: every
    word but the first with its leading space. Tokenised with ``is_split_into_words``, each word then gets the
    pieces it has in that text, whatever the tokenizer: WordPiece and SentencePiece tokenizers split on the
    space or mark the word start themselves (the space changes nothing), and a byte-level BPE tokenizer, which
    keeps spaces in its pieces, gives ``Ġdog`` as in running text, where the bare word would be tokenised as
    the start of a text (``dog``, another piece, met mid-sentence only after a space).

    transformers 5 tokenises bare words so without a warning (version 4 refused them from RoBERTa's fast
    tokenizer unless it was made with ``add_prefix_space=True``); an ``add_prefix_space=True`` passed to
    ``from_pretrained`` leaves the pre-tokenizer of a ``TokenizersBackend`` (ModernBERT's) as it was; and where it
    does act (``RobertaTokenizer``), it gives the first word a space too, and every GLUE sentence with it."""
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def blank_pieces(tokenizer: Any, input_ids: Sequence[int], cache: dict[int, bool] | None = None) -> list[bool]:
    """For each id, whether its piece decodes to whitespace only: a bare word-start marker (``▁``, ``Ġ``) the
    tokenizer split off a word whose first character it cannot join to it (so it holds none of the word's
    characters), or a space of its own (byte-level BPE, between two spaces). A WordPiece piece never is.
    ``cache`` (id -> answer) spares decoding a piece twice."""
    cache = {} if cache is None else cache
    out = []
    for piece in input_ids:
        if piece not in cache:
            cache[piece] = not tokenizer.convert_tokens_to_string([tokenizer.convert_ids_to_tokens(piece)]).strip()
        out.append(cache[piece])
    return out


def blank_spans_to_next_piece(offsets: Sequence[tuple[int, int]], sequence_ids: Sequence[int | None],
                              blank: Sequence[bool]) -> list[tuple[int, int]]:
    """Character ``offsets`` of a tokenised text with every blank piece (:func:`blank_pieces`) given the span of
    the next piece of its sentence, so that a word-start marker belongs to the word it starts. Tokenizers place
    it differently: on the first character of the word (a SentencePiece tokenizer that splits on spaces first,
    ALBERT's or XLM-R's), or on the space before it (DeBERTa's, whose ``▁`` replaces the space, and byte-level
    BPE's ``Ġ``), where it would overlap no word. A blank piece with no piece after it in its sentence (a
    trailing space) keeps its span. Special tokens (sequence id None) are left as they are."""
    spans = [tuple(span) for span in offsets]
    following: tuple[int, int] | None = None
    sentence: int | None = None
    for position in range(len(spans) - 1, -1, -1):
        if sequence_ids[position] is None:
            continue
        if sequence_ids[position] != sentence:
            following, sentence = None, sequence_ids[position]
        if blank[position] and following is not None:
            spans[position] = following
        following = spans[position]
    return [(int(a), int(b)) for a, b in spans]
