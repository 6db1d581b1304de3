"""Where a model-running job computes: one place that every workflow script running a model calls, so that a
job given a GPU by the scheduler (compute.gpus) uses it, and runs as deterministically there as on the CPU."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import numpy as np
import torch

from bertology_core.models import precision
from bertology_core.models.precision import Precision


def default_device() -> torch.device:
    """The first CUDA GPU when torch sees one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def job_device(threads: int) -> torch.device:
    """Set up torch for one job (``threads`` CPU threads, deterministic algorithms) and return its device.

    Deterministic algorithms on CUDA need cuBLAS's fixed workspace, which cuBLAS reads when CUDA starts; without it
    the first matrix multiply raises. It is set here, before anything touches CUDA.

    Deterministic mode also fills every new tensor's memory with NaN (or the integer's largest value) by default, to
    expose reads of uninitialised memory: one extra kernel per allocation on a GPU and a pass over the memory on the
    CPU. Every tensor the workflow reads is written first (results equal bit for bit with the fill on and off:
    tests/test_device.py), so the fill is off."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    return default_device()


def model_job(threads: int, policy: str) -> tuple[torch.device, Precision]:
    """The preamble of every job that runs a model: its device (:func:`job_device`) and the precision policy
    (``compute.precision``) resolved there, the job set up to measure in it from here on (:func:`precision.for_job`);
    a training job passes the precision on to :func:`bertology_core.finetune.training.train`."""
    device = job_device(threads)
    return device, precision.for_job(policy, device)


def halving_on_oom(order: np.ndarray, size: int, step: Callable[[np.ndarray], None], device: torch.device, what: str,
                   *, undo: Callable[[], None] | None = None, halve: bool = True) -> int:
    """Call ``step`` on consecutive slices of ``order``, ``size`` rows at a time. A slice the device has no memory
    for (``torch.OutOfMemoryError``) is run again at half the size, after ``undo`` has taken back what its failed call
    did, and later slices keep the smaller size (padded shapes change with it: results move by rounding only). The
    error is raised at size 1, or when ``halve`` is False (a batch size that is part of what is computed). Returns
    the size the last slice ran at; ``what`` names a slice's rows in the warning."""
    start = 0
    while start < len(order):
        rows = order[start : start + size]
        try:
            step(rows)
        except torch.OutOfMemoryError:
            if size == 1 or not halve:
                raise
            failed = True
        else:
            failed = False
        if failed:  # out of the handler, so the failed slice's tensors are released before the cache is emptied
            if undo is not None:
                undo()
            size //= 2
            if device.type == "cuda":
                torch.cuda.empty_cache()
            logging.getLogger(__name__).warning("out of memory with %d %s a pass: %d from now on", size * 2, what, size)
            continue
        start += len(rows)
    return size
