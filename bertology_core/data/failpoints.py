"""Named failpoints, so tests can kill a job at an exact moment instead of guessing with timers.

Set ``BERTOLOGY_FAILPOINT=<name>@<n>`` and the process group is sent SIGKILL the n-th time
``failpoint(name)`` is reached (``@<n>`` defaults to 1). Killing the whole group takes Snakemake
down with the job, as a node crash or `kill -9` of the session would, so no cleanup code of
anyone runs. Without the variable a failpoint costs one dictionary lookup.

Failpoints in the code: ``finetune.after_checkpoint`` (a checkpoint was just saved),
``dump.after_batch`` (a batch of attention maps was handed to the Parquet writer).
"""

from __future__ import annotations

import os
import signal

ENV = "BERTOLOGY_FAILPOINT"
_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    target, _, count = wanted.partition("@")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(count or 1):
        os.killpg(os.getpgid(0), signal.SIGKILL)
