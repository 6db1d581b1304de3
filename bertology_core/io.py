"""Atomic file output: write to a temporary sibling, then rename.

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


def write_parquet(frame: pl.DataFrame, path: str | os.PathLike[str]) -> None:
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd")


def write_text(text: str, path: str | os.PathLike[str]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path: str | os.PathLike[str]) -> Any:
    return json.loads(Path(path).read_text())
