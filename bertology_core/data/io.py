"""Atomic file output: write to a temporary sibling, then rename; and where a text input is not UTF-8.

An interrupted job (SIGKILL, power loss) therefore leaves either the previous
file or nothing, never a truncated file that looks complete.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; rename it onto ``final`` on success.

    Works for files and directories. The temporary name starts with ``.tmp-`` so it
    is never mistaken for a result; on error it is removed.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    # a killed writer of this same output leaves its temporary behind; only one job writes an output
    for stale in final.parent.glob(f".tmp-{glob.escape(final.name)}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    # mkdtemp gives a directory; callers that write a file get a path inside it.
    target = tmp / final.name
    try:
        yield target
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(data: Any, path: str | os.PathLike[str]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_parquet(frame: pl.DataFrame, path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """``frame`` as zstd Parquet, atomically; ``metadata``: key-value pairs kept in the file's footer."""
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd", metadata=metadata)


def write_text(text: str, path: str | os.PathLike[str]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path: str | os.PathLike[str]) -> Any:
    return json.loads(Path(path).read_text())


def not_utf8_message(path: str | os.PathLike[str]) -> str:
    """``path:line: ...`` naming the first byte of ``path`` that is not UTF-8, and the fix. Called after a
    reader failed to decode the file: a text reader decodes in blocks, so its error names no line."""
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        return (f"{path}:{line}: byte 0x{data[error.start]:02x} at column {column} is not UTF-8 (the file was probably "
                "saved as Latin-1 or Windows-1252). Fix: convert the file to UTF-8, e.g. "
                f"`iconv -f cp1252 -t utf-8 {path} > fixed && mv fixed {path}`.")
    return f"{path}: decodes as UTF-8."
