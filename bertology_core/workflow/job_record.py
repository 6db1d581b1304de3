"""What a job measured of itself, written as the last line of its log when its process exits: CPU seconds (user +
system of the process, all its threads, and of the children it waited for), wall seconds since the process started,
and peak resident memory, read from the kernel (``getrusage``, ``/proc``), and whether it died of an uncaught
exception.

Snakemake 9's benchmark files sample a job's processes every 0.5 s for 30 samples (its first 15 s) and every 30 s
after, so their ``cpu_time`` misses up to 30 s at the end of a job (a 40-second job records about its first 15 s) and
``max_rss`` can miss a peak between samples; the estimate's validation (tools/estimate_runtime.py ``--measure cpu``)
and the rules' fitted memory and time (tools/fit_needs.py) read these records instead.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import IO, Any

PREFIX = "job record: "


def process_age(fallback_started: float) -> float:
    """Seconds since this process started (``/proc``: the interpreter's start-up counted, as in its CPU seconds);
    without ``/proc``, since ``fallback_started`` (a :func:`time.monotonic` value)."""
    try:
        # field 22 of /proc/self/stat (counted after the parenthesised command name): start time in clock ticks
        # since boot
        started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return time.monotonic() - fallback_started


def peak_rss_bytes(own_maxrss: int) -> float:
    """The process's own peak resident memory: ``VmHWM`` of ``/proc/self/status``. Not ``ru_maxrss``: Linux carries
    the peak of the process it was forked from across ``exec``, so a job started by a 240 MB Snakemake process reports
    at least 240 MB however little it uses. Without ``/proc``, ``ru_maxrss`` (KiB on Linux, bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(own_maxrss) * (1.0 if sys.platform == "darwin" else 1024.0)


def measure(started: float) -> dict[str, Any]:
    """The process's record now: ``cpu_seconds``, ``wall_seconds`` (:func:`process_age`), ``max_rss_mb`` (the
    larger of its own peak, :func:`peak_rss_bytes`, and its largest waited-for child's), ``failed`` (an uncaught
    exception)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    child_peak = children.ru_maxrss * (1.0 if sys.platform == "darwin" else 1024.0)
    return {"cpu_seconds": round(own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime, 3),
            "wall_seconds": round(process_age(started), 3),
            "max_rss_mb": round(max(peak_rss_bytes(own.ru_maxrss), child_peak) / 2**20, 1),
            "failed": getattr(sys, "last_value", None) is not None}


def write_at_exit(handle: IO[str]) -> None:
    """Append the process's record to ``handle`` (the job's log) when the interpreter exits: a job killed by a signal
    writes none; one that died of an uncaught exception says ``failed`` (one that raised ``SystemExit`` cannot be told
    apart here: a reader also checks that the job's outputs exist)."""
    started = time.monotonic()

    def write() -> None:
        try:
            handle.write(PREFIX + json.dumps(measure(started)) + "\n")
            handle.flush()
        except ValueError:  # the log was closed by the script itself
            pass

    atexit.register(write)


def read(path: str | Path) -> dict[str, Any] | None:
    """The record of a finished job's log, or None where the log is missing or holds none (a job that was killed, or
    ran before jobs wrote records) or its job failed."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if line.startswith(PREFIX):
            record = json.loads(line[len(PREFIX):])
            return None if record.get("failed") else record
    return None
