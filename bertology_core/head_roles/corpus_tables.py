"""Where the rare-token role's word-piece frequencies are counted (config ``head_roles.frequency_corpus``): the
task's training split (null), or a plain UTF-8 text file, one text per line, read a line at a time. Voita et al.
2019 (5.3) count on their NMT model's own training data; a sample of the encoder's pre-training text (Wikipedia and
BookCorpus for BERT) is the closer choice for a pre-trained encoder, the task's training split the default. No torch,
no tokenizer: the stage's checks import it when the workflow is parsed."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

KEY = "head_roles.frequency_corpus"
# what the roles table's ``frequency_source`` says where the pieces were counted on the task's training split
TASK_SPLIT = "task training split"
# how much of the file's start the checks decode: a compressed or binary file fails here, before any job
CHECKED_BYTES = 1 << 16


def source_name(configured: str | None) -> str:
    """The roles table's ``frequency_source``: :data:`TASK_SPLIT`, or ``corpus <path as configured>``."""
    return TASK_SPLIT if configured is None else f"corpus {configured}"


def problems(path: Path, configured: str) -> list[str]:
    """Why ``path`` (``configured``, as the config writes it) cannot be the frequency corpus: missing, not a file, empty,
    blank, or not UTF-8 at its start (empty when it can). Reads the file's start only, so a large corpus is checked
    in no time."""
    where = f"{KEY} {configured!r} ({path})"
    fix = ("Fix: point it at a plain UTF-8 text file, one text per line (relative paths are relative to the repository), "
           "e.g. a sample of the encoder's pre-training text, or set it to null to count on each task's training split.")
    if not path.exists():
        return [f"{where} does not exist. {fix}"]
    if not path.is_file():
        return [f"{where} is not a file. {fix}"]
    if path.stat().st_size == 0:
        return [f"{where} is empty: no piece would be counted, so every piece would be rare. {fix}"]
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    with path.open("rb") as handle:
        start = handle.read(CHECKED_BYTES)
        try:
            text = decoder.decode(start, final=len(start) < CHECKED_BYTES)
        except UnicodeDecodeError as error:
            return [f"{where} is not UTF-8 text (byte {error.start}: {error.reason}; a compressed file must be "
                    f"decompressed first). {fix}"]
        while not text.strip():  # only blank lines so far: read on until a text or the end (decoded leniently)
            chunk = handle.read(CHECKED_BYTES)
            if not chunk:
                return [f"{where} holds only blank lines: no piece would be counted. {fix}"]
            text = chunk.decode("utf-8", errors="replace")
    return []


def lines(path: Path) -> Iterator[str]:
    """The texts of a corpus file, one per non-blank line (line ends and a byte-order mark left out), read a line at a
    time so that the file never sits in memory. A byte that is not UTF-8 stops it with a ``ValueError`` naming the
    key and the file."""
    number = 0
    with path.open(encoding="utf-8-sig", newline=None) as handle:
        try:
            for number, line in enumerate(handle, 1):
                text = line.rstrip("\n")
                if text.strip():
                    yield text
        except UnicodeDecodeError as error:
            # the file is decoded a buffer at a time: the bad byte is on a line after the last one read
            raise ValueError(f"{KEY} {str(path)!r}: a byte after line {number} is not UTF-8 ({error.reason}). Fix: "
                             "convert the file to UTF-8 (iconv -f <encoding> -t UTF-8), or drop the bad lines.") from None
