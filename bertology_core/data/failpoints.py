"""Named failpoints, so tests can kill or stall a job at an exact moment instead of guessing with timers.

Set ``BERTOLOGY_FAILPOINT=<name>@<n>`` and the process group is sent SIGKILL the n-th time
``failpoint(name)`` is reached (``@<n>`` defaults to 1). Killing the whole group takes Snakemake
down with the job, as a node crash or `kill -9` of the session would, so no cleanup code of
anyone runs. ``<name>@<n>:hang`` stops there instead, until something kills the process: a job that
reaches its time limit on a cluster, which ends it (SIGTERM, then SIGKILL) and leaves its retry to the
workflow. With ``BERTOLOGY_FAILPOINT_ONCE=<file>`` the failpoint fires only where that file does not exist
yet, and creates it: once in a whole run, across jobs, nodes and retries. Without the variable a failpoint
costs one dictionary lookup.

Failpoints in the code: ``finetune.after_checkpoint`` (a checkpoint was just saved),
``dump.after_batch`` (a batch of attention maps was handed to the Parquet writer),
``scores.after_checkpoint`` (a resumable scoring job saved its progress).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "BERTOLOGY_FAILPOINT"
ONCE_ENV = "BERTOLOGY_FAILPOINT_ONCE"
_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    target, _, rest = wanted.partition("@")
    if target != name:
        return
    count, _, action = rest.partition(":")
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] < int(count or 1):
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        try:  # exclusive creation: of two jobs reaching it together, one fires
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    if action == "hang":
        while True:
            time.sleep(60)
    os.killpg(os.getpgid(0), signal.SIGKILL)
