"""How much each stage keeps on disk, and how much one run wrote: the stage is the folder under results/."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl


def disk_usage(results: str | os.PathLike[str], since: float | None = None) -> pl.DataFrame:
    """One row per stage (first folder below ``results``): files and bytes kept, and bytes in files
    modified at or after ``since`` (a POSIX time, e.g. when the run started). Hidden temporaries
    (``.tmp-*``, left by a killed writer) are counted under their own name so they are seen."""
    results = Path(results)
    rows: dict[str, dict[str, int]] = {}
    for root, dirs, files in os.walk(results):
        relative = Path(root).relative_to(results)
        stage = relative.parts[0] if relative.parts else "."
        for name in files:
            info = (Path(root) / name).stat()
            key = ".tmp (killed writers)" if ".tmp-" in root or name.startswith(".tmp-") else stage
            row = rows.setdefault(key, {"files": 0, "bytes": 0, "bytes_written_this_run": 0})
            row["files"] += 1
            row["bytes"] += info.st_size
            if since is not None and info.st_mtime >= since:
                row["bytes_written_this_run"] += info.st_size
    frame = pl.DataFrame(
        [{"stage": stage, **row} for stage, row in sorted(rows.items())],
        schema={"stage": pl.String, "files": pl.Int64, "bytes": pl.Int64, "bytes_written_this_run": pl.Int64},
    )
    return frame.with_columns(
        (pl.col("bytes") / 2**20).round(1).alias("MiB"),
        (pl.col("bytes_written_this_run") / 2**20).round(1).alias("MiB_written_this_run"),
    )


def format_table(frame: pl.DataFrame) -> str:
    """A small Markdown table (stage, files, MiB kept, MiB written by this run, total row)."""
    lines = ["| stage | files | MiB kept | MiB written this run |", "|---|---:|---:|---:|"]
    for row in frame.iter_rows(named=True):
        lines.append(f"| {row['stage']} | {row['files']} | {row['MiB']:.1f} | {row['MiB_written_this_run']:.1f} |")
    total = frame.select(pl.sum("files"), pl.sum("MiB"), pl.sum("MiB_written_this_run")).row(0)
    lines.append(f"| **total** | {total[0]} | {total[1]:.1f} | {total[2]:.1f} |")
    return "\n".join(lines) + "\n"
