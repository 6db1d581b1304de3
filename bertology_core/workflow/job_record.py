"""What a job measured of itself, written as the last line of its log when its process exits: CPU seconds (user +
system of the process, all its threads, and of the children it waited for), wall seconds since its script began,
and peak resident memory, read from the kernel (``getrusage``).

Snakemake's benchmark files sample a job's processes every 0.5 s for its first 15 s and every 30 s after, so their
``cpu_time`` misses up to 30 s at the end of a job (a 40-second job records about its first 15 s) and ``max_rss`` can
miss a peak between samples; the estimate's validation (tools/estimate_runtime.py ``--measure cpu``) and the rules'
``mem_mb`` (tools/peak_memory.py) read these records instead.
"""

from __future__ import annotations

import atexit
import json
import resource
import sys
import time
from pathlib import Path
from typing import IO, Any

PREFIX = "job record: "


def measure(started: float) -> dict[str, float]:
    """The process's record now: ``cpu_seconds``, ``wall_seconds`` since ``started`` (a :func:`time.monotonic`
    value), ``max_rss_mb`` (the larger of the process's peak and its largest waited-for child's)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    unit = 1.0 if sys.platform == "darwin" else 1024.0
    return {"cpu_seconds": round(own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime, 3),
            "wall_seconds": round(time.monotonic() - started, 3),
            "max_rss_mb": round(max(own.ru_maxrss, children.ru_maxrss) * unit / 2**20, 1)}


def write_at_exit(handle: IO[str]) -> None:
    """Append the process's record to ``handle`` (the job's log) when the interpreter exits: a job killed by a signal
    writes none; a failed job's record is overwritten when Snakemake reruns it (its script opens the log anew)."""
    started = time.monotonic()

    def write() -> None:
        try:
            handle.write(PREFIX + json.dumps(measure(started)) + "\n")
            handle.flush()
        except ValueError:  # the log was closed by the script itself
            pass

    atexit.register(write)


def read(path: str | Path) -> dict[str, Any] | None:
    """The record of a finished job's log, or None where the log is missing or holds none (a job that failed, was
    killed, or ran before jobs wrote records)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if line.startswith(PREFIX):
            return json.loads(line[len(PREFIX):])
    return None
