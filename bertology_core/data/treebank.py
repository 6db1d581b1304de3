"""Universal Dependencies treebanks in CoNLL-U: strict validation, then one Parquet row per sentence.

Parsing uses the ``conllu`` library; before it, every line is checked against the CoNLL-U
format (https://universaldependencies.org/format.html) so a broken file fails with the file,
line, field and fix instead of a silent mis-parse (``conllu`` accepts short lines), and every
sentence's dependency tree is checked as UD's tools/validate.py does at level 2 (ids, heads, one
root, no cycle; see ``_check_sentence``), naming the sentence and word.

Rows hold *syntactic words*: multiword tokens (``3-4 don't``) are dropped in favour of the
words they contain (``do``, ``n't``), and empty nodes (``5.1``, enhanced graphs only) are
dropped, as in the basic dependency tree that probing and Clark et al. 2019 use.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import conllu
import polars as pl

from bertology_core.data import io
from bertology_core.data.tasks import subsample

FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
WORD_ID = re.compile(r"[1-9][0-9]*")
RANGE_ID = re.compile(r"[1-9][0-9]*-[1-9][0-9]*")
EMPTY_ID = re.compile(r"[0-9]+\.[1-9][0-9]*")

SCHEMA = {
    "sentence": pl.Int32,
    "sent_id": pl.String,
    "text": pl.String,
    "forms": pl.List(pl.String),
    "lemmas": pl.List(pl.String),
    "upos": pl.List(pl.String),
    "xpos": pl.List(pl.String),
    "heads": pl.List(pl.Int32),  # 1-based word index of the head, 0 = root
    "deprels": pl.List(pl.String),  # full relation, subtype included (nmod:poss)
}


class TreebankError(ValueError):
    """A CoNLL-U file that breaks the format; the message names file, line, field and fix."""


def _fail(path: Path, line: int, field: str, problem: str, fix: str) -> TreebankError:
    return TreebankError(f"{path}:{line}: field '{field}': {problem}. Fix: {fix}")


SENT_ID = re.compile(r"#\s*sent_id\s*=\s*(.*?)\s*")
# Appended to every tree-structure fix: UD's validator explains the same problems in more detail.
UD_FIX = "or validate the file with UD's tools/validate.py --level 2; remove the sentence if it cannot be fixed"


def _check_sentence(path: Path, rows: list[tuple[int, list[str]]], sentence: str) -> None:
    """The tree structure of one sentence, as UD's tools/validate.py checks it at level 2.

    Done: word ids 1..n consecutive; HEAD an integer 0..n, never the word itself; DEPREL given; exactly one
    word with HEAD 0, whose DEPREL is ``root`` (and ``root`` nowhere else); every word reaches that root
    without a cycle. Multiword token ranges (``3-4``) and empty nodes (``5.1``) are allowed and left out of
    the tree (empty nodes and the DEPS column belong to the enhanced graph, which is not checked).
    Not done: the rest of level 2 (UPOS, features and relation names from UD's lists, sent_id uniqueness,
    ``# text``, ranges' spans, enhanced DEPS) and levels 3-5 (relation-specific and language-specific rules).
    ``sentence`` names the sentence in messages (its sent_id, else its ordinal and first line)."""
    words = [(line, cols) for line, cols in rows if WORD_ID.fullmatch(cols[0])]
    if not words:
        line = rows[0][0]
        raise _fail(path, line, "ID", f"sentence has no words, only ranges or empty nodes ({sentence})",
                    f"add its word lines, {UD_FIX}")
    n = len(words)
    heads = [0] * (n + 1)  # heads[i]: the head of word i; heads[0] is the artificial root
    roots: list[int] = []

    def at(word: object) -> str:  # built only for a message: formatting it per word would slow the loop
        return f"({sentence}, word {word})"

    for expected, (line, cols) in enumerate(words, start=1):
        if int(cols[0]) != expected:
            raise _fail(path, line, "ID", f"word id {cols[0]} where {expected} was expected {at(cols[0])}",
                        f"number the words of each sentence 1, 2, 3, ... without gaps, {UD_FIX}")
        if not WORD_ID.fullmatch(cols[6]) and cols[6] != "0":
            raise _fail(path, line, "HEAD", f"{cols[6]!r} is not a word index {at(cols[0])}",
                        f"give the head's ID, or 0 for the root, {UD_FIX}")
        head = int(cols[6])
        if head > n:
            raise _fail(path, line, "HEAD", f"head {cols[6]} is beyond the sentence's {n} words {at(cols[0])}",
                        f"point HEAD at a word of the same sentence, {UD_FIX}")
        if head == expected:
            raise _fail(path, line, "HEAD", f"a word cannot be its own head {at(cols[0])}",
                        f"correct the HEAD column of this sentence, {UD_FIX}")
        if cols[7] in ("", "_"):
            raise _fail(path, line, "DEPREL", f"missing relation {at(cols[0])}",
                        f"give the dependency relation, {UD_FIX}")
        # UD compares the universal part of the relation: root:xyz counts as root
        is_root = cols[7] == "root" or cols[7].startswith("root:")
        if head == 0:
            if not is_root:
                raise _fail(path, line, "DEPREL",
                            f"the word with HEAD 0 has DEPREL {cols[7]!r}, not 'root' {at(cols[0])}",
                            f"give the root word DEPREL root, {UD_FIX}")
            if roots:
                raise _fail(path, line, "HEAD",
                            f"a second root: words {roots[0]} and {expected} both have HEAD 0 {at(cols[0])}",
                            f"give exactly one word HEAD 0 per sentence: correct the HEAD column of this sentence, "
                            f"{UD_FIX}")
            roots.append(expected)
        elif is_root:
            raise _fail(path, line, "DEPREL",
                        f"DEPREL {cols[7]!r} on a word whose HEAD is {head}, not 0 {at(cols[0])}",
                        f"only the word with HEAD 0 has DEPREL root: correct the HEAD or DEPREL column, {UD_FIX}")
        heads[expected] = head
    cycle = _cycle(heads)
    if cycle is not None:
        # with heads in 0..n and no root, following heads must loop: name the loop in both cases
        loop = " -> ".join(map(str, [*cycle, cycle[0]]))
        line, cols = words[cycle[0] - 1]
        if not roots:
            raise _fail(path, line, "HEAD",
                        f"no word has HEAD 0, so the sentence has no root; its heads loop {loop} {at(cycle[0])}",
                        f"give exactly one word HEAD 0 per sentence: correct the HEAD column of this sentence, "
                        f"{UD_FIX}")
        raise _fail(path, line, "HEAD", f"the heads form a cycle {loop}: these words never reach the root "
                    f"(word {roots[0]}) {at(cycle[0])}", f"correct the HEAD column of this sentence, {UD_FIX}")


def _cycle(heads: list[int]) -> list[int] | None:
    """A cycle of ``heads`` (word -> head, 0 the root), smallest word first, or None if every word reaches 0.

    Each word is walked once: a walk stops at a word already known to reach the root (O(n) per sentence)."""
    state = bytearray(len(heads))  # 0: not seen, 1: on the current walk, 2: reaches the root
    state[0] = 2
    for start in range(1, len(heads)):
        walk = []
        node = start
        while state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = heads[node]
        if state[node] == 1:  # the walk came back to itself
            cycle = walk[walk.index(node):]
            first = cycle.index(min(cycle))
            return cycle[first:] + cycle[:first]
        for node in walk:
            state[node] = 2
    return None


def validate(path: str | os.PathLike[str]) -> int:
    """Check a CoNLL-U file line by line, and each sentence's tree as UD's validate.py does at level 2 (see
    :func:`_check_sentence`); return its number of sentences or raise TreebankError. Streams: one sentence
    in memory at a time."""
    path = Path(path)
    try:
        return _validate_lines(path)
    except UnicodeDecodeError:
        raise TreebankError(io.not_utf8_message(path)) from None


def _validate_lines(path: Path) -> int:
    sentences = 0
    rows: list[tuple[int, list[str]]] = []
    sent_id: str | None = None
    first_line = 0  # the current sentence's first line (comment or word), named when it has no sent_id

    def name() -> str:
        if sent_id:
            return f"sentence {sent_id!r}"
        return f"sentence {sentences + 1} of the file, no sent_id, from line {first_line}"

    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip():
                if rows:
                    _check_sentence(path, rows, name())
                    sentences += 1
                    rows = []
                sent_id, first_line = None, 0
                continue
            first_line = first_line or number
            if line.startswith("#"):
                if match := SENT_ID.fullmatch(line):
                    sent_id = match.group(1)
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise _fail(path, number, "line", f"{len(cols)} tab-separated fields instead of 10",
                            "write ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC separated by single tabs "
                            "(use _ for an empty field)")
            if not (WORD_ID.fullmatch(cols[0]) or RANGE_ID.fullmatch(cols[0]) or EMPTY_ID.fullmatch(cols[0])):
                raise _fail(path, number, "ID", f"{cols[0]!r} is not a word id, range (3-4) or empty node (5.1)",
                            "fix the first column")
            rows.append((number, cols))
    if rows:  # a last sentence without the closing blank line
        _check_sentence(path, rows, name())
        sentences += 1
    if sentences == 0:
        raise _fail(path, 1, "file", "no sentences", "point treebank.files at a CoNLL-U file with sentences")
    return sentences


def read_conllu(path: str | os.PathLike[str], max_sentences: int | None = None) -> pl.DataFrame:
    """Validate, then parse into one row per sentence of syntactic words (see module docstring)."""
    path = Path(path)
    validate(path)
    records: dict[str, list] = {name: [] for name in SCHEMA}
    with path.open(encoding="utf-8") as handle:
        for number, sentence in enumerate(conllu.parse_incr(handle)):
            if max_sentences is not None and number >= max_sentences:
                break
            words = [token for token in sentence if isinstance(token["id"], int)]
            records["sentence"].append(number)
            records["sent_id"].append(sentence.metadata.get("sent_id", str(number)))
            records["text"].append(sentence.metadata.get("text", " ".join(w["form"] for w in words)))
            records["forms"].append([w["form"] for w in words])
            records["lemmas"].append([w["lemma"] for w in words])
            records["upos"].append([w["upos"] for w in words])
            records["xpos"].append([w["xpos"] or "_" for w in words])
            records["heads"].append([int(w["head"]) for w in words])
            records["deprels"].append([w["deprel"] for w in words])
    return pl.DataFrame(records, schema=SCHEMA)


def download(url: str, path: str | os.PathLike[str], sha256: str | None = None, timeout: float = 60) -> str:
    """Fetch ``url`` to ``path`` (written atomically) and return its sha256; a file whose sha256 is not
    ``sha256`` (when given) is not kept. Errors name the address and the fix, for a machine without internet too."""
    manual = (f"Fix: connect this machine to the internet and rerun, or download the file elsewhere "
              f"(curl -L -O {url}), copy it into a folder here with the other treebank files, and set treebank.dir to "
              "that folder and treebank.url: null.")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as error:
        raise TreebankError(f"{url}: could not be downloaded ({type(error).__name__}: {error}). {manual}") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise TreebankError(f"{url}: field 'sha256' of the download is {digest}, not the {sha256} of treebank.sha256: "
                            f"another file or another release. Fix: correct treebank.url, or treebank.sha256 if you meant "
                            f"this release. {manual}")
    with io.atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return digest


def sample(frame: pl.DataFrame, sentences: int | None, seed: int) -> pl.DataFrame:
    """A seeded sample of at most ``sentences`` sentences of a prepared split, in treebank order (all when None)."""
    return subsample(frame, sentences, seed, order="sentence")
