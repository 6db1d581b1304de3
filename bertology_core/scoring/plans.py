"""Scoring a model under engine plans: the one forward loop that every stage measuring a configuration runs
(disabling sweeps and greedy search, outlier disabling, head importance's pruning curve, lottery searches, the head
gates' evaluation, a compacted model against its mask).

Examples are sorted by length to save padding; a group of configurations shares each forward pass (batch expansion,
one row per configuration and example) with the last layer cut to the first token
(:func:`~bertology_core.engine.first_token.first_token_output`); a pass the device has no memory for is split in two.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.first_token import first_token_output
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import InterventionPlan
from bertology_core.data.failpoints import failpoint
from bertology_core.inputs.batching import Encoded, to_device
from bertology_core.models.checkpoint import ArrayCheckpoint
from bertology_core.models.device import halving_on_oom


class PassLogits(NamedTuple):
    """Logits ``[configs, examples, labels]`` of every configuration and, where a reference configuration ran in every
    pass (the intact model in a sweep, the chosen set in a greedy step), the reference's logits from each
    configuration's own forward pass (same shape; ``None`` otherwise). A configuration is compared with the reference
    row of its own pass: passes of other shapes sum their products in another order, which on this CPU in float32
    moves logits by about 5e-7 (all-MiniLM-L6-v2 on STS-B) and on a GPU, with TF32 products, is expected to move them
    by far more (``make gpu-check`` measures it)."""

    logits: np.ndarray
    reference: np.ndarray | None


def rows_per_pass(device: torch.device, cpu: int, gpu: int) -> int:
    """Rows (configurations x examples) per forward pass on ``device``: ``cpu`` on a CPU, where larger passes fall out
    of cache and run slower per row; ``gpu`` elsewhere, a cap that :func:`evaluate_plans` halves when the device has
    no memory for a pass."""
    return cpu if device.type == "cpu" else gpu


@torch.inference_mode()
def evaluate_plans(
    model: PreTrainedModel,
    data: Encoded,
    num_configs: int,
    groups: Sequence[Sequence[int]],
    plan_of: Callable[[Sequence[int]], InterventionPlan],
    rows_per_pass: int = 48,
    reuse_prefix: bool = True,
    examples_per_batch: int | None = None,
    reference: int | None = None,
    checkpoint: ArrayCheckpoint | None = None,
) -> PassLogits:
    """Logits ``[num_configs, examples, labels]`` (a token task's: ``[num_configs, words, labels]``, every example's words
    end to end, each on its first piece, NaN for a word with no piece): each group of configuration indices shares forward passes under the
    engine plan ``plan_of(group)`` (batch expansion, one row per configuration and example), with the last layer cut
    to the first token (:func:`~bertology_core.engine.first_token.first_token_output`); batches as in
    :func:`~bertology_core.disabling.sweeps.evaluate_configurations`. A pass the device has no memory for is split in two and run again, and every
    later pass keeps the smaller size (the logits do not depend on the batching). With prefix reuse, ``reference`` (a
    configuration's index) joins every pass as one more configuration and counts among its rows; without it every
    configuration runs alone in passes of the same shape, so the reference's own passes serve every configuration.
    With a ``checkpoint``, the finished groups (and the pass size after running out of memory) are saved as it says and
    a rerun resumes after them: its logits equal an uninterrupted run's bit for bit; when every group is done they are
    kept (:meth:`~bertology_core.models.checkpoint.ArrayCheckpoint.finished`) until the job has written its outputs."""
    use_engine(model)
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort(-data.lengths(), kind="stable")
    # a token task's rows are its words (its examples' words end to end), each scored on its first piece; a word with no
    # piece in the input keeps NaN logits (predicted -1: tasks.Task.predictions)
    token = data.word_index is not None and data.words is not None
    rows = int(data.words.sum()) if token else len(data)
    logits = np.full((num_configs, rows, model.config.num_labels), np.nan if token else 0.0, dtype=np.float32)
    joined = reference is not None and reuse_prefix
    if reference is not None and not any(reference in group for group in groups):
        raise ValueError(f"the reference configuration {reference} is in no group")
    own_reference = np.full_like(logits, np.nan if token else 0.0) if joined else None
    cap = None  # rows per pass (configurations x examples) after the device ran out of memory: halved until one fits
    arrays = {"logits": logits, "own_reference": own_reference}
    done = [False] * len(groups)
    if checkpoint is not None and (restored := checkpoint.load()) is not None:
        saved_arrays, state = restored
        wanted = {name for name, value in arrays.items() if value is not None}
        if (len(state.get("done", [])) != len(groups) or set(saved_arrays) != wanted
                or any(saved_arrays[name].shape != arrays[name].shape for name in wanted)):
            checkpoint.discard("its groups or shapes are not this job's")
        else:
            for name in wanted:
                arrays[name][...] = saved_arrays[name]
            done, cap = list(state["done"]), state.get("cap")
    saved = time.monotonic()
    for number, group in enumerate(groups):
        if done[number]:
            continue
        group = list(group)
        members = group if not joined or reference in group else [*group, reference]
        plan = plan_of(members)
        batch_size = examples_per_batch or max(1, rows_per_pass // len(members))
        passes: list[tuple[np.ndarray, torch.Tensor]] = []  # read from the device once the group is done, not per pass

        def run(examples: np.ndarray) -> None:
            batch = to_device(data.collate(examples), device)
            with intervene(model, plan, reuse_prefix=reuse_prefix), first_token_output(model):
                out = model(**batch).logits.float()
            if token:  # [members, words of the batch, labels]: each word's first piece
                width = batch["input_ids"].shape[1]
                first = data.first_piece_rows(examples, width, device)
                passes.append((data.word_positions(examples, width), out.reshape(len(members), len(examples) * width, -1)[:, first]))
            else:
                passes.append((examples, out.reshape(len(members), len(examples), -1)))

        size = batch_size if cap is None else max(1, min(batch_size, cap // len(members)))
        fitted = halving_on_oom(order, size, run, device, f"examples of {len(members)} configurations")
        if fitted < size:  # rows per pass after the device ran out of memory, kept for the later groups
            cap = fitted * len(members)
        for (placed, _), out in zip(passes, _to_host([out for _, out in passes])):
            logits[np.ix_(group, placed)] = out[: len(group)]
            if own_reference is not None:
                own_reference[np.ix_(group, placed)] = out[members.index(reference)][None]
        done[number] = True
        if checkpoint is not None and not all(done) and checkpoint.due(time.monotonic() - saved):
            checkpoint.save(arrays, {"done": done, "cap": cap})
            saved = time.monotonic()
            failpoint("scores.after_checkpoint")
    if checkpoint is not None:
        checkpoint.finished(arrays, {"done": done, "cap": cap})
    if reference is not None and not joined:
        own_reference = np.broadcast_to(logits[reference], logits.shape).copy()
    return PassLogits(logits, own_reference)


def _to_host(outputs: list[torch.Tensor]) -> list[np.ndarray]:
    """Each pass's logits on the host, in one copy from the device (one wait for it, not one per pass)."""
    if not outputs:
        return []
    joined = torch.cat([out.flatten() for out in outputs]).cpu().numpy()
    return [part.reshape(out.shape) for part, out in zip(np.split(joined, np.cumsum([o.numel() for o in outputs])[:-1]), outputs)]


def evaluate_plan(model: PreTrainedModel, data: Encoded, plan: InterventionPlan | None = None,
                  rows_per_pass: int = 64) -> np.ndarray:
    """Logits ``[examples, labels]`` of ``model`` under one plan (None: the model as it is, through the engine):
    :func:`evaluate_plans` with one configuration, ``rows_per_pass`` examples a pass."""
    return evaluate_plans(model, data, 1, [[0]], lambda _: plan or InterventionPlan(), rows_per_pass).logits[0]
