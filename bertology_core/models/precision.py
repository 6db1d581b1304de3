"""The precision policy (``compute.precision``): in what number format each kind of job computes.

Two kinds of work, two rules:

- **training** (fine-tuning, the re-fine-tuned lottery subnetworks, the L0 head gates: everything that runs
  :func:`bertology_core.finetune.training.train`): under ``mixed``, bfloat16 autocast (``torch.autocast``) with the
  weights, gradients and optimiser state in float32 (the master weights), where the device computes bfloat16
  (CUDA GPUs that report it, CPUs with AVX512-BF16 or AMX); elsewhere float32 with TF32 matrix products on CUDA.
  Lower precision is for training, where the fitness verdicts and the floors of the CPU profile show it harmless;
- **measurement** (evaluation, attention dumps, disabling sweeps and greedy search, head importance and lottery
  scoring, outlier disabling, probing features: every difference between configurations): float32, with TF32 matrix
  products on CUDA under ``mixed`` (a 10-bit mantissa in the products, float32 accumulation), never bfloat16.

``float32`` computes everything in float32 (TF32 off). Models always load in float32 (:mod:`models.loading`), so a
checkpoint saved in half precision never trains in pure half precision. The resolved precision is part of a
training checkpoint's fingerprint (a checkpoint written in one precision never resumes in another) and of each
job's record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

POLICIES = ("float32", "mixed")
BF16_AUTOCAST, TF32, FLOAT32 = "bfloat16-autocast", "tf32", "float32"


def computes_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` has bfloat16 arithmetic in hardware: a CUDA GPU that says so, or a CPU with AVX512-BF16 or
    AMX (oneDNN's own check accepts any AVX512 CPU, where bfloat16 is emulated and slower than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return False


@dataclass(frozen=True)
class Precision:
    """The policy resolved for one device: what training and measurement compute in."""

    policy: str
    device: str  # the device type: cpu, cuda
    training: str  # BF16_AUTOCAST, TF32 or FLOAT32
    measurement: str  # TF32 or FLOAT32

    def to_dict(self) -> dict[str, str]:
        return {"policy": self.policy, "device": self.device, "training": self.training, "measurement": self.measurement}


def resolve(policy: str, device: torch.device, bfloat16: bool | None = None) -> Precision:
    """``policy`` (:data:`POLICIES`) on ``device``; ``bfloat16`` overrides :func:`computes_bfloat16` (tests)."""
    if policy not in POLICIES:
        raise ValueError(f"compute.precision = {policy!r}: expected one of {POLICIES}. Fix: set compute.precision to "
                         "mixed (bfloat16 training where the device computes it, TF32 on CUDA) or float32.")
    if policy == "float32":
        return Precision(policy, device.type, FLOAT32, FLOAT32)
    fast = computes_bfloat16(device) if bfloat16 is None else bfloat16
    cuda = device.type == "cuda"
    return Precision(policy, device.type, BF16_AUTOCAST if fast else (TF32 if cuda else FLOAT32), TF32 if cuda else FLOAT32)


def set_matmul_precision(tf32: bool) -> None:
    """Float32 matrix products in TF32 (``tf32``) or in full float32, on CUDA (cuBLAS, cuDNN) and, for full float32,
    in oneDNN too (which could otherwise compute float32 products in bfloat16)."""
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def measuring(precision: Precision) -> None:
    """Set up a job that measures (evaluation, dumps, sweeps, importance, outliers, probing features)."""
    set_matmul_precision(precision.measurement == TF32)


@contextlib.contextmanager
def training(precision: Precision) -> Iterator[None]:
    """Around a training step's forward pass (the backward pass runs outside it, as torch.autocast asks): bfloat16
    autocast under :data:`BF16_AUTOCAST`; TF32 products under :data:`TF32`; float32 otherwise. The weights stay
    float32 throughout."""
    if precision.training == BF16_AUTOCAST:
        with torch.autocast(precision.device, dtype=torch.bfloat16):
            yield
    else:
        yield


def for_job(policy: str, device: torch.device) -> Precision:
    """The policy resolved for a job on ``device``, with the job set up to measure (:func:`measuring`); a training
    job passes the result to :func:`bertology_core.finetune.training.train`."""
    precision = resolve(policy, device)
    measuring(precision)
    return precision
