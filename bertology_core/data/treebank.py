"""Universal Dependencies treebanks in CoNLL-U: strict validation, then one Parquet row per sentence.

Parsing uses the ``conllu`` library; before it, every line is checked against the CoNLL-U
format (https://universaldependencies.org/format.html) so a broken file fails with the file,
line, field and fix instead of a silent mis-parse (``conllu`` accepts short lines).

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


def _check_sentence(path: Path, rows: list[tuple[int, list[str]]]) -> None:
    """Word ids 1..n in order, heads in 0..n, exactly one root."""
    words = [(line, cols) for line, cols in rows if WORD_ID.fullmatch(cols[0])]
    if not words:
        line = rows[0][0]
        raise _fail(path, line, "ID", "sentence has no words (only ranges or empty nodes)", "add its word lines")
    n = len(words)
    roots = 0
    for expected, (line, cols) in enumerate(words, start=1):
        if int(cols[0]) != expected:
            raise _fail(path, line, "ID", f"word id {cols[0]} where {expected} was expected",
                        "number the words of each sentence 1, 2, 3, ... without gaps")
        if not WORD_ID.fullmatch(cols[6]) and cols[6] != "0":
            raise _fail(path, line, "HEAD", f"{cols[6]!r} is not a word index",
                        "give the head's ID, or 0 for the root")
        if int(cols[6]) > n:
            raise _fail(path, line, "HEAD", f"head {cols[6]} is beyond the sentence's {n} words",
                        "point HEAD at a word of the same sentence")
        if int(cols[6]) == expected:
            raise _fail(path, line, "HEAD", "a word cannot be its own head", "fix the HEAD column")
        if cols[7] in ("", "_"):
            raise _fail(path, line, "DEPREL", "missing relation", "give the dependency relation")
        roots += cols[6] == "0"
    if roots != 1:
        raise _fail(path, words[0][0], "HEAD", f"sentence has {roots} roots (HEAD 0), not 1",
                    "give exactly one word HEAD 0 per sentence")


def validate(path: str | os.PathLike[str]) -> int:
    """Check a CoNLL-U file line by line; return its number of sentences or raise TreebankError."""
    path = Path(path)
    try:
        return _validate_lines(path)
    except UnicodeDecodeError:
        raise TreebankError(io.not_utf8_message(path)) from None


def _validate_lines(path: Path) -> int:
    sentences = 0
    rows: list[tuple[int, list[str]]] = []
    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip():
                if rows:
                    _check_sentence(path, rows)
                    sentences += 1
                    rows = []
                continue
            if line.startswith("#"):
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
        _check_sentence(path, rows)
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
