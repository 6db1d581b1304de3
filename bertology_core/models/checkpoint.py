"""Training checkpoints that resume bit for bit, stored as safetensors + JSON (never pickle).

A checkpoint holds everything the training loop's future depends on: model weights, the
optimizer's per-parameter state and param groups, the scheduler's counters, the torch
(and CUDA) random generators, the numpy shuffling generator as of the start of the current
epoch with the position inside that epoch, and the record so far (losses). Restoring it
and continuing gives the same weights as never stopping (tested).

A checkpoint carries a ``fingerprint`` of what the run depends on (hyper-parameters, seed,
model, data); one with another fingerprint is stale and ignored, so changing a setting
never resumes the old run. Checkpoints are written atomically (temporary folder, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from bertology_core.data.failpoints import failpoint
from bertology_core.data.io import atomic_path

log = logging.getLogger(__name__)

STATE_FILE = "training_state.safetensors"
META_FILE = "training_state.json"


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (hyper-parameters, seed, file hashes...)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class TrainingState:
    """The loop's own position; tensors live in the model, optimizer and generators."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    # numpy bit-generator state at the start of ``epoch`` (the epoch's batches are redrawn from it)
    epoch_generator_state: dict[str, Any] | None = None
    examples_seen: int = 0
    train_seconds: float = 0.0
    losses: list[float] = field(default_factory=list)


@dataclass
class Checkpointer:
    """Where and how often to checkpoint one training run.

    ``every_steps`` and ``every_seconds`` (either may be None) trigger a save, whichever comes first.
    """

    directory: Path
    fingerprint: str
    every_steps: int | None = None
    every_seconds: float | None = 600.0

    def computed_in(self, precision: dict[str, str]) -> "Checkpointer":
        """The same checkpointer for a run computed in ``precision`` (its fingerprint includes it): a checkpoint
        written in one precision, or on another kind of device, is never resumed in another."""
        return replace(self, fingerprint=fingerprint(self.fingerprint, precision))

    def due(self, steps_since: int, seconds_since: float) -> bool:
        return bool(
            (self.every_steps and steps_since >= self.every_steps)
            or (self.every_seconds is not None and seconds_since >= self.every_seconds)
        )

    def save(
        self,
        state: TrainingState,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
    ) -> None:
        tensors: dict[str, torch.Tensor] = {
            f"model.{name}": value.detach().cpu().contiguous() for name, value in model.state_dict().items()
        }
        optimizer_state = optimizer.state_dict()
        scalar_state: dict[str, dict[str, Any]] = {}
        for index, values in optimizer_state["state"].items():
            for key, value in values.items():
                if torch.is_tensor(value):
                    tensors[f"optimizer.{index}.{key}"] = value.detach().cpu().contiguous()
                else:
                    scalar_state.setdefault(str(index), {})[key] = value
        tensors["rng.torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            for device, rng in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"rng.cuda.{device}"] = rng
        meta = {
            "fingerprint": self.fingerprint,
            "state": state.__dict__,
            "optimizer_param_groups": optimizer_state["param_groups"],
            "optimizer_scalars": scalar_state,
            "scheduler": scheduler.state_dict(),
        }
        with atomic_path(self.directory) as tmp:
            tmp.mkdir()
            save_file(tensors, str(tmp / STATE_FILE))
            (tmp / META_FILE).write_text(json.dumps(meta))
        log.info("checkpoint saved at step %d in %s", state.step, self.directory)

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
    ) -> TrainingState | None:
        """Restore a checkpoint with our fingerprint into the objects; None when there is none."""
        meta_path = self.directory / META_FILE
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != self.fingerprint:
            log.info("ignoring checkpoint in %s: it belongs to other settings", self.directory)
            self.remove()
            return None
        tensors = load_file(str(self.directory / STATE_FILE))
        model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        for index, values in meta["optimizer_scalars"].items():
            state.setdefault(int(index), {}).update(values)
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer_param_groups"]})
        scheduler.load_state_dict(meta["scheduler"])
        torch.set_rng_state(tensors["rng.torch"])
        cuda_states = [tensors[f"rng.cuda.{d}"] for d in range(torch.cuda.device_count()) if f"rng.cuda.{d}" in tensors]
        if cuda_states:
            torch.cuda.set_rng_state_all(cuda_states)
        restored = TrainingState(**meta["state"])
        log.info("resuming from checkpoint at step %d (%s)", restored.step, self.directory)
        return restored

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


ARRAYS_FILE = "arrays.safetensors"
ARRAYS_META = "arrays.json"


@dataclass
class ArrayCheckpoint:
    """Where a long job that is not a training loop (configurations scored in groups of passes, a search's scored
    sets) keeps the arrays it finished and the state it needs to go on, so that a job killed or out of time resumes
    instead of starting over. Saved atomically (safetensors + JSON) once ``every_seconds`` have passed since the last
    save; ``fingerprint``: what the results depend on (model, data, settings). How the job resumes from its arrays is
    its own (e.g. :func:`bertology_core.scoring.plans.evaluate_plans`)."""

    directory: Path
    fingerprint: str
    every_seconds: float | None = 600.0

    def due(self, seconds_since: float) -> bool:
        return self.every_seconds is not None and seconds_since >= self.every_seconds

    def save(self, arrays: dict[str, Any], state: dict[str, Any] | None = None) -> None:
        from safetensors.numpy import save_file as save_arrays

        with atomic_path(self.directory) as tmp:
            tmp.mkdir()
            # contiguous copies: safetensors writes an array's buffer, and a strided view's is not its values
            save_arrays({name: np.array(value, order="C") for name, value in arrays.items() if value is not None},
                        str(tmp / ARRAYS_FILE))
            (tmp / ARRAYS_META).write_text(json.dumps({"fingerprint": self.fingerprint, "state": state or {}}))
        log.info("saved %d arrays in %s", len(arrays), self.directory)

    def load(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The saved arrays and state where the checkpoint has our fingerprint; None (and a stale one removed) when
        there is none."""
        from safetensors.numpy import load_file as load_arrays

        meta_path = self.directory / ARRAYS_META
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != self.fingerprint:
            self.discard("it belongs to other settings")
            return None
        log.info("resuming from %s", self.directory)
        return load_arrays(str(self.directory / ARRAYS_FILE)), dict(meta.get("state", {}))

    def finished(self, arrays: dict[str, Any], state: dict[str, Any] | None = None) -> None:
        """The part of the job this checkpoint covers is done: its arrays are saved (where checkpoints are on) and
        kept until the job has written its outputs (:func:`remove_checkpoints`), so that a job killed after this part
        (a sweep's later mode, a search's report) does not do it again."""
        if self.every_seconds is not None:
            self.save(arrays, state)

    def discard(self, why: str) -> None:
        log.info("ignoring the checkpoint in %s: %s", self.directory, why)
        self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def scores_checkpoint(directory: str | os.PathLike[str], every_seconds: float | None, params: dict[str, Any],
                      model_folder: str | os.PathLike[str], data: str | os.PathLike[str], *settings: Any) -> ArrayCheckpoint:
    """The :class:`ArrayCheckpoint` of a scoring job at ``directory``: its fingerprint holds the job's ``params``,
    the hashes of the model's weights and of its data file, and ``settings`` that change the passes' shapes (rows
    per pass, the device's kind, a sweep's mode)."""
    weights = [file_sha256(path) for path in sorted(Path(model_folder).glob("*.safetensors"))]
    return ArrayCheckpoint(Path(directory), fingerprint(params, weights, file_sha256(data), *settings), every_seconds)


class Replay:
    """The results of a deterministic job's expensive calls (scores, importance), in the order it makes them, saved to
    an :class:`ArrayCheckpoint` as they come: a rerun after a kill gets the saved results back in the same order
    without computing them, and computes from the first one missing. The job must make the same calls in the same
    order given the same results (a search whose every choice follows from its scores), so that the rerun's results
    equal an uninterrupted run's. Without a checkpoint it only computes."""

    def __init__(self, checkpoint: ArrayCheckpoint | None):
        self.checkpoint, self.results, self.position = checkpoint, [], 0
        self.saved = time.monotonic()
        if checkpoint is not None and (restored := checkpoint.load()) is not None:
            arrays, state = restored
            self.results = [{name: arrays[f"{call}:{name}"] for name in names} for call, names in enumerate(state["calls"])]

    def __call__(self, compute: Callable[[], dict[str, Any]]) -> dict[str, np.ndarray]:
        """``compute()``'s named arrays, or the saved ones of this call."""
        if self.position < len(self.results):
            result = self.results[self.position]
        else:
            result = {name: np.asarray(value) for name, value in compute().items()}
            self.results.append(result)
            if self.checkpoint is not None and self.checkpoint.due(time.monotonic() - self.saved):
                self.checkpoint.save(*self._saved())
                self.saved = time.monotonic()
                failpoint("scores.after_checkpoint")
        self.position += 1
        return result

    def finish(self) -> None:
        """Every call is made: the results are saved (:meth:`ArrayCheckpoint.finished`)."""
        if self.checkpoint is not None:
            self.checkpoint.finished(*self._saved())

    def _saved(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return ({f"{call}:{name}": value for call, named in enumerate(self.results) for name, value in named.items()},
                {"calls": [list(named) for named in self.results]})


def remove_checkpoints(directory: str | os.PathLike[str]) -> None:
    """A job's checkpoints, once it has written its outputs (its workflow script's last step)."""
    shutil.rmtree(directory, ignore_errors=True)
