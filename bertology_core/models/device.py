"""Where a model-running job computes: one place that every workflow script running a model calls, so that a
job given a GPU by the scheduler (compute.gpus) uses it, and runs as deterministically there as on the CPU."""

from __future__ import annotations

import os

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
