"""Where a model-running job computes: one place that every workflow script running a model calls, so that a
job given a GPU by the scheduler (compute.gpus) uses it, and runs as deterministically there as on the CPU."""

from __future__ import annotations

import os

import torch


def default_device() -> torch.device:
    """The first CUDA GPU when torch sees one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def job_device(threads: int) -> torch.device:
    """Set up torch for one job (``threads`` CPU threads, deterministic algorithms) and return its device.

    Deterministic algorithms on CUDA need cuBLAS's fixed workspace, which cuBLAS reads when CUDA starts; without it
    the first matrix multiply raises. It is set here, before anything touches CUDA."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    return default_device()
