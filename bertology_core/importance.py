"""Head and MLP importance from gate gradients, and iterative head pruning (Michel et al. 2019).

Definitions, as in Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better than One?":

- every head ``h`` gets a gate ``xi_h`` multiplying its attention (the engine's ``scale``; 1 = intact,
  0 = masked). The importance of ``h`` is eq. (2): ``I_h = E_x |dL(x) / dxi_h|``, the expected *absolute*
  gradient of the loss over a set of examples, at the current mask. We take the absolute value per example
  (the paper's expectation), not per batch as some later code does: one backward pass of the summed loss
  with a gate per example (``per_example`` plan) gives every example's own gradient.
- the scores of each layer are normalised by their l2 norm (section 4.1: "we normalize the importance scores
  by layer (using the l2 norm)"); configurable (``normalize_by_layer``, ``exponent``).
- iterative pruning (section 4.2): heads are masked in increasing order of importance, a fixed share of all
  heads per step (10% by default), evaluating after each step; optionally the importance is recomputed on the
  pruned model after each step.

MLP gates (``mlp.scale``) are Prasanna et al. 2020's extension: the same gradient rule gives the importance of
each layer's feed-forward block, for their structured pruning (:mod:`bertology_core.lottery`).
Importance is computed on a split chosen in the config (a train subset by default, so that the heads are
not chosen on the dev set they are evaluated on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedModel

from bertology_core import attention, finetune
from bertology_core.finetune import Encoded, _labels_tensor
from bertology_core.glue import GlueTask
from bertology_core.metrics import compute_metrics, primary_metric


@dataclass(frozen=True)
class StructureMask:
    """Which heads (``[layers, heads]``) and MLPs (``[layers]``) are kept (True) in a structured subnetwork."""

    heads: np.ndarray
    mlps: np.ndarray

    @classmethod
    def full(cls, num_layers: int, num_heads: int) -> "StructureMask":
        return cls(np.ones((num_layers, num_heads), dtype=bool), np.ones(num_layers, dtype=bool))

    @classmethod
    def for_model(cls, model: PreTrainedModel) -> "StructureMask":
        return cls.full(model.config.num_hidden_layers, model.config.num_attention_heads)

    @property
    def heads_kept(self) -> int:
        return int(self.heads.sum())

    @property
    def mlps_kept(self) -> int:
        return int(self.mlps.sum())

    def without(self, heads: list[tuple[int, int]] = (), mlps: list[int] = ()) -> "StructureMask":
        new_heads, new_mlps = self.heads.copy(), self.mlps.copy()
        for layer, head in heads:
            new_heads[layer, head] = False
        for layer in mlps:
            new_mlps[layer] = False
        return StructureMask(new_heads, new_mlps)

    def plan(self) -> attention.InterventionPlan:
        """An engine plan masking (gate 0) every removed head and MLP; layers left whole are untouched."""
        scale = {
            layer: torch.from_numpy(self.heads[layer].astype(np.float32))[None, :]
            for layer in range(self.heads.shape[0])
            if not self.heads[layer].all()
        }
        mlp_scale = {layer: torch.zeros(1) for layer in range(self.mlps.shape[0]) if not self.mlps[layer]}
        return attention.InterventionPlan(edits={**attention.per_layer(attention.HEAD_SCALE, scale),
                                                 **attention.per_layer(attention.MLP_SCALE, mlp_scale)})


def gate_importance(
    model: PreTrainedModel,
    task: GlueTask,
    data: Encoded,
    labels: np.ndarray,
    mask: StructureMask | None = None,
    batch_size: int = 32,
) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised importance ``E_x |dL(x)/dxi|`` of every head ``[layers, heads]`` and MLP ``[layers]``.

    Gates sit at the values of ``mask`` (1 kept, 0 removed): the gradient of a removed element is still
    defined (how much the loss would change if it came back a little) but pruning only ranks kept ones.
    ``L`` is the model's own training loss (cross-entropy; squared error for regression), per example.
    """
    attention.use_engine(model)
    model.eval()
    num_layers, num_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    mask = mask or StructureMask.full(num_layers, num_heads)
    device = next(model.parameters()).device
    head_sum = np.zeros((num_layers, num_heads))
    mlp_sum = np.zeros(num_layers)
    order = np.argsort(-data.lengths(), kind="stable")
    head_values = torch.from_numpy(mask.heads.astype(np.float32))
    mlp_values = torch.from_numpy(mask.mlps.astype(np.float32))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = {k: v.to(device) for k, v in data.collate(rows).items()}
        heads = [head_values[layer].expand(len(rows), -1).clone().to(device).requires_grad_(True) for layer in range(num_layers)]
        mlps = [mlp_values[layer].expand(len(rows)).clone().to(device).requires_grad_(True) for layer in range(num_layers)]
        plan = attention.InterventionPlan(edits={**attention.per_layer(attention.HEAD_SCALE, dict(enumerate(heads))),
                                                 **attention.per_layer(attention.MLP_SCALE, dict(enumerate(mlps)))},
                                          per_example=True)
        with attention.intervene(model, plan), attention.first_token_output(model):
            output = model(**batch, labels=_labels_tensor(task, labels[rows]).to(device))
            # the model's loss is a mean over the batch: times the batch size it is the sum of per-example
            # losses, whose gradient with respect to example b's gate is example b's own gradient
            grads = torch.autograd.grad(output.loss * len(rows), [*heads, *mlps])
        head_sum += torch.stack([g.abs().sum(0) for g in grads[:num_layers]]).double().cpu().numpy()
        mlp_sum += torch.stack([g.abs().sum() for g in grads[num_layers:]]).double().cpu().numpy()
    return head_sum / len(order), mlp_sum / len(order)


def normalize_by_layer(importance: np.ndarray, exponent: float = 2.0) -> np.ndarray:
    """Divide each layer's head scores by their l``exponent`` norm (Michel et al. section 4.1); a layer of
    zeros stays zero."""
    norms = np.power(np.power(np.abs(importance), exponent).sum(-1, keepdims=True), 1.0 / exponent)
    return np.divide(importance, norms, out=np.zeros_like(importance, dtype=float), where=norms > 0)


def least_important(importance: np.ndarray, keep: np.ndarray, count: int) -> list[tuple[int, ...]]:
    """The ``count`` kept elements (``keep`` True) with the lowest importance; ties go to the lowest index
    (layer, then head), so the order is reproducible."""
    candidates = np.argwhere(keep)
    scores = importance[tuple(candidates.T)]
    order = np.lexsort((*candidates.T[::-1], scores))  # primary key: score, then layer, then head
    return [tuple(int(i) for i in candidates[k]) for k in order[:count]]


@dataclass(frozen=True)
class PruningStep:
    step: int
    heads_pruned: int
    share_pruned: float
    score: float
    mask: StructureMask


def iterative_head_pruning(
    evaluate: Callable[[StructureMask], float],
    importance: Callable[[StructureMask], np.ndarray],
    num_layers: int,
    num_heads: int,
    step_share: float = 0.1,
    recompute: bool = False,
) -> list[PruningStep]:
    """Michel et al.'s curve: mask the least important heads, ``step_share`` of all heads per step, until
    none is left, scoring each mask with ``evaluate``. ``importance(mask)`` returns the ``[layers, heads]``
    scores used for ranking; it is called once, or after every step with ``recompute``."""
    total = num_layers * num_heads
    per_step = max(1, round(step_share * total))
    mask = StructureMask.full(num_layers, num_heads)
    scores = importance(mask)
    steps = [PruningStep(0, 0, 0.0, evaluate(mask), mask)]
    while mask.heads_kept > 0:
        if recompute and steps[-1].step > 0:
            scores = importance(mask)
        mask = mask.without(heads=least_important(scores, mask.heads, per_step))
        pruned = total - mask.heads_kept
        steps.append(PruningStep(len(steps), pruned, pruned / total, evaluate(mask), mask))
    return steps


@torch.inference_mode()
def masked_logits(
    model: PreTrainedModel, data: Encoded, plan: attention.InterventionPlan | None = None, batch_size: int = 64
) -> np.ndarray:
    """Logits ``[examples, labels]`` with ``plan`` active, through the engine (only [CLS] goes past the
    last layer's attention); batches sorted by length."""
    attention.use_engine(model)
    with attention.intervene(model, plan or attention.InterventionPlan()), attention.first_token_output(model):
        return finetune.predict(model, data, batch_size)


def masked_predictions(
    model: PreTrainedModel, task: GlueTask, data: Encoded, plan: attention.InterventionPlan | None = None, batch_size: int = 64
) -> np.ndarray:
    """Class ids (scores for regression) from :func:`masked_logits`."""
    logits = masked_logits(model, data, plan, batch_size)
    return logits[:, 0] if task.is_regression else logits.argmax(-1)


def dev_scorer(model: PreTrainedModel, task: GlueTask, dev: pl.DataFrame, encoded: Encoded, batch_size: int,
               record: list | None = None) -> Callable[[attention.InterventionPlan | None], float]:
    """The task's primary metric on ``dev`` (encoded as ``encoded``) for a plan (None: the model as it is); logs
    each score. ``record``: each call appends its per-example frame (``idx, label, prediction``)."""
    labels, metric = dev["label"].to_numpy(), primary_metric(task)

    def score(plan: attention.InterventionPlan | None) -> float:
        predictions = masked_predictions(model, task, encoded, plan, batch_size)
        value = compute_metrics(task, predictions, labels)[metric]
        logging.info("dev %s %.4f", metric, value)
        if record is not None:
            record.append(dev.select("idx", "label").with_columns(pl.Series("prediction", predictions)))
        return value

    return score
