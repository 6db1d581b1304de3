"""Head and MLP importance from gate gradients, and iterative head pruning (Michel et al. 2019).

Definitions, as in Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better than One?":

- every head ``h`` gets a gate ``xi_h`` multiplying its attention (the engine's ``scale``; 1 = intact,
  0 = masked). Its importance is eq. (2), ``I_h = E_x |dL(x) / dxi_h|``, the expected *absolute* gradient of the
  loss over a set of examples, at the current mask. Where the absolute value is taken is a choice
  (:func:`gate_importance`'s ``granularity``), and the two reference codes differ:
  * ``token``: Michel et al.'s own code (``calculate_head_importance`` in their fork of
    pytorch-pretrained-BERT, ``examples/classifier_eval.py``) takes ``|dot(grad_ctx, ctx)|``, the gradient with
    respect to a gate on the head's context vector at each token position, summed over positions and examples and
    divided by the number of tokens (the last layer, where only [CLS] gets a gradient, by the number of examples);
  * ``example``: eq. 2 read literally, the absolute gradient of each example's loss (a gate per example);
  * ``batch``: Prasanna et al.'s code (``compute_heads_importance`` in ``find_head_masks.py``,
    ``compute_heads_mlps_importance`` in ``find_head_mlp_masks.py``, from transformers' run_bertology.py): the
    absolute gradient of a batch's loss with respect to one gate shared by the batch, summed over batches and divided
    by the number of tokens.
  Each paper's ranking follows its own code by default: Michel et al.'s curve (and ``importance.parquet``) at
  ``pruning.importance_granularity`` (``token``), the lottery tickets' s-pruning at
  ``pruning.ticket_importance_granularity`` (``batch``); they are computed in separate jobs, each its own passes,
  so a second granularity costs no extra pass. Padding never counts. One backward pass of the summed loss with a gate per example (``per_example`` plan) gives
  all three: every example's own gradient, their sum, and (through the engine's sink and an MLP output hook) the
  gradients of the gated probabilities and MLP outputs that give the per-token values.
- the scores of each layer are normalised by their l2 norm (section 4.1: "we normalize the importance scores
  by layer (using the l2 norm)"); configurable (``normalize_by_layer``, ``exponent``). With it on, a constant
  divisor of a layer (tokens, examples, the batch size) does not change the ranking, but the raw importance, which
  the head roles stage correlates with role measures over all heads, keeps it: under ``token`` the last layer is
  divided by the examples and the others by the tokens.
- iterative pruning (section 4.2): heads are masked in increasing order of importance, a fixed share of all
  heads per step (10% by default), evaluating after each step; optionally the importance is recomputed on the
  pruned model after each step.

MLP gates (``mlp.scale``) are Prasanna et al. 2020's extension: the same gradient rule gives the importance of
each layer's feed-forward block, for their structured pruning (:mod:`bertology_core.pruning.lottery`); at ``token``
granularity per position, ``|sum over hidden of mlp_output * dL/dmlp_output|``, divided as the heads are.
Importance is computed on a split chosen in the config (a train subset by default, so that the heads are
not chosen on the dev set they are evaluated on; ``importance_examples: null`` takes all of it, as Michel et al.
did with the training set).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch
from torch import nn
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.first_token import first_token_output, reads_first_token_only
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import HEAD_SCALE, MLP_SCALE, AttentionSink, InterventionPlan, StructureMask, per_layer
from bertology_core.engine.structure import UnsupportedStructure, structure
from bertology_core.finetune.training import labels_tensor
from bertology_core.inputs.batching import Encoded, to_device
from bertology_core.models.device import halving_on_oom
from bertology_core.scoring import plans as scoring
from bertology_core.data.tasks import Task
from bertology_core.stats.metrics import compute_metrics, sentence_rows


GRANULARITIES = ("token", "example", "batch")


def gate_importance(
    model: PreTrainedModel,
    task: Task,
    data: Encoded,
    labels: np.ndarray,
    mask: StructureMask | None = None,
    batch_size: int = 32,
    granularity: str = "token",
) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised importance of every head ``[layers, heads]`` and MLP ``[layers]`` at ``granularity``.

    - ``token`` (Michel et al.'s code): ``|dL/dxi_{h,x,t}|``, the gradient with respect to a gate on head ``h``'s
      context vector at query position ``t`` of example ``x`` (``dot(grad_ctx, ctx)`` there; here
      ``sum_k probs[t, k] * dL/dprobs[t, k]``, read from the probabilities after the plan's scale), summed over the
      real positions of every example; MLPs alike, ``|sum_hidden mlp_output * dL/dmlp_output|`` per position. Below
      the last layer divided by the number of real (non-padding) tokens; the last layer by the number of examples
      where the classifier reads the first token only (the one position whose gradient is not zero there, as in
      Michel et al.'s code), else by the tokens too. ``L`` is the *summed* loss of a batch: Michel et al.'s code
      differentiates the batch mean, i.e. this value divided by the batch size, a constant when every batch is full
      (their last, partial batch weighs a little more per example).
    - ``example`` (eq. 2 read literally): ``E_x |dL(x)/dxi|``, each example's own gradient (a gate per example),
      averaged over the examples.
    - ``batch`` (Prasanna et al.'s code, ``compute_heads_mlps_importance`` in src/find_head_mlp_masks.py of
      sai-prasanna/bert-experiments, from transformers' run_bertology.py): ``|dL(B)/dxi|`` with one gate per head and
      per MLP shared by the batch ``B`` (their ``head_mask`` ``[layers, heads]`` and ``mlp_mask`` ``[layers]``,
      broadcast over the batch; the batches of ``batch_size`` examples in the data's order, as their sequential
      sampler; the result depends on the batch size, 64 in their find_masks.sh), summed over batches and divided by
      the number of real tokens; ``L(B)`` is their batch-*mean* loss, here times ``batch_size`` (a constant, so that
      full batches give the summed loss's gradient; a last, partial batch weighs as in their code). What differs:
      their code never zeroes the gates' ``.grad`` between batches, so each batch adds the running sum of the
      gradients so far; that is a bug we do not reproduce. Their head-and-MLP script divides only the MLPs by the
      tokens, and rescales both min-max after the layer normalisation; neither changes their ranking.

    Gates sit at the values of ``mask`` (1 kept, 0 removed). Under ``example`` and ``batch`` the gradient of a
    removed element is still defined (how much the loss would change if it came back a little); under ``token`` a
    removed element scores 0, as a masked head's (zero) context does in Michel et al.'s code. Pruning ranks only kept
    ones. ``L`` is the model's own training loss (cross-entropy; squared error for regression).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown importance granularity {granularity!r}: one of {GRANULARITIES}")
    use_engine(model)
    model.eval()
    num_layers, num_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    mask = mask or StructureMask.full(num_layers, num_heads)
    device = next(model.parameters()).device
    head_sum = torch.zeros(num_layers, num_heads, dtype=torch.float64, device=device)
    mlp_sum = torch.zeros(num_layers, dtype=torch.float64, device=device)
    # batches sorted by length (less padding) where the batches' make-up does not matter; in the data's order for batch
    order = np.arange(len(data)) if granularity == "batch" else np.argsort(-data.lengths(), kind="stable")
    # gates in the model's precision (float32 at least): their gradients are the example and batch values
    dtype = torch.promote_types(torch.float32, next(model.parameters()).dtype)
    # on the device once: a copy from the host per layer and batch would wait for the device each time
    head_values = torch.from_numpy(mask.heads).to(device, dtype)
    mlp_values = torch.from_numpy(mask.mlps).to(device, dtype)
    parts = structure(model) if granularity == "token" else None

    read = data.read_words() if task.is_token else None  # each example's labelled words

    def accumulate(rows: np.ndarray) -> None:
        batch = to_device(data.collate(rows), device)
        # the loss's terms: the batch's examples, or a token task's labelled words (none: no loss to differentiate)
        terms = int(read[rows].sum()) if read is not None else len(rows)
        if not terms:
            return
        real = batch["attention_mask"].bool()  # [batch, position]
        heads = [head_values[layer].expand(len(rows), -1).clone().requires_grad_(True) for layer in range(num_layers)]
        mlps = [mlp_values[layer].expand(len(rows)).clone().requires_grad_(True) for layer in range(num_layers)]
        plan = InterventionPlan(edits={**per_layer(HEAD_SCALE, dict(enumerate(heads))),
                                       **per_layer(MLP_SCALE, dict(enumerate(mlps)))},
                                per_example=True,
                                sink=_token_head_sink(head_sum) if granularity == "token" else None)
        with contextlib.ExitStack() as stack:
            stack.enter_context(intervene(model, plan))
            if granularity == "token":
                # registered after the plan's own hooks: they see the MLP output after its gate
                for module in dict.fromkeys(part.mlp_output for part in parts):
                    stack.callback(module.register_forward_hook(_token_mlp_hook(plan, mlp_sum, real)).remove)
            stack.enter_context(first_token_output(model))
            target = labels_tensor(task, labels, rows, data, batch["input_ids"].shape[1])
            output = model(**batch, labels=to_device({"labels": target}, device)["labels"])
            # the model's loss is a mean over the batch (a token task's: over its labelled words): times their number it
            # is the sum of per-example losses, whose gradient with respect to example b's gate is example b's own
            # gradient (and their sum the gradient with respect to one gate shared by the batch); under token the hooks
            # read the gradients
            grads = torch.autograd.grad(output.loss * terms, [*heads, *mlps])
        if granularity == "example":
            head_sum.add_(torch.stack([g.abs().sum(0) for g in grads[:num_layers]]).double())
            mlp_sum.add_(torch.stack([g.abs().sum() for g in grads[num_layers:]]).double())
        elif granularity == "batch":
            # the gradient of the batch-mean loss, as Prasanna et al.'s code takes it, times the configured batch size
            weight = batch_size / terms
            head_sum.add_(torch.stack([g.sum(0).abs() for g in grads[:num_layers]]).double() * weight)
            mlp_sum.add_(torch.stack([g.sum().abs() for g in grads[num_layers:]]).double() * weight)

    # a batch the device has no memory for is halved and run again, the sums as they were before it (the token hooks
    # add to them during the backward pass), except under batch granularity, whose batches are its definition
    before = head_sum.clone(), mlp_sum.clone()  # the sums after the last batch that ran (copied in place: no allocation)

    def step(rows: np.ndarray) -> None:
        accumulate(rows)
        before[0].copy_(head_sum)
        before[1].copy_(mlp_sum)

    def undo() -> None:
        head_sum.copy_(before[0])
        mlp_sum.copy_(before[1])

    halving_on_oom(order, batch_size, step, device, "examples", undo=undo, halve=granularity != "batch")
    # the examples whose loss has a term (a token task's sentence with no readable word has none)
    examples, tokens = len(order) if read is None else int((read > 0).sum()), int(data.lengths().sum())
    if granularity == "example":
        divisor = np.full(num_layers, examples, dtype=float)
    else:
        divisor = np.full(num_layers, tokens, dtype=float)
        if granularity == "token" and reads_first_token_only(model):
            divisor[-1] = examples
    return head_sum.cpu().numpy() / divisor[:, None], mlp_sum.cpu().numpy() / divisor


def _token_head_sink(head_sum: torch.Tensor) -> AttentionSink:
    """An engine sink adding, once the backward pass reaches each layer's (gated) probabilities ``p``, every head's
    ``sum over real query positions of |sum_k p[q, k] * dL/dp[q, k]|`` (the gradient with respect to a gate on the
    head's context at ``q``) to ``head_sum[layer]``."""

    def sink(layer: int, probs: torch.Tensor, key_is_real: torch.Tensor) -> None:
        if not probs.requires_grad:
            return
        kept = probs.detach()
        queries = key_is_real[:, None, :].to(kept.dtype)  # self-attention: query positions are the keys

        def add(grad: torch.Tensor) -> None:
            per_query = (kept * grad).sum(-1).abs()  # [batch, head, query]
            head_sum[layer] += (per_query * queries).sum((0, 2)).double()

        probs.register_hook(add)

    return sink


def _token_mlp_hook(plan: InterventionPlan, mlp_sum: torch.Tensor, real: torch.Tensor):
    """A forward hook on a depth's MLP output module (shared across depth in ALBERT: the plan's depth says which)
    adding, in the backward pass, ``sum over real positions of |sum_hidden out * dL/dout|`` to ``mlp_sum[depth]``.
    Where the last layer runs on the first position alone
    (:func:`~bertology_core.engine.first_token.first_token_output`) its output has one position."""

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        depth = plan.depth
        if depth is None or not output.requires_grad:
            return
        if output.dim() != 3 or output.shape[1] not in (1, real.shape[1]):
            raise UnsupportedStructure(f"token importance: the MLP output of depth {depth} is "
                                       f"{tuple(output.shape)}, not [batch, {real.shape[1]} positions (or 1), "
                                       "hidden]")
        kept = output.detach()
        weights = real[:, : output.shape[1]].to(kept.dtype)  # one position: the first token's, always real

        def add(grad: torch.Tensor) -> None:
            mlp_sum[depth] += ((kept * grad).sum(-1).abs() * weights).sum().double()

        output.register_hook(add)

    return hook


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


def dev_scorer(model: PreTrainedModel, task: Task, dev: pl.DataFrame, encoded: Encoded, batch_size: int,
               record: list | None = None) -> Callable[[InterventionPlan | None], float]:
    """The task's primary metric on ``dev`` (encoded as ``encoded``) for a plan (None: the model as it is); logs
    each score. ``record``: each call appends its per-example frame (``idx, label, prediction``)."""
    labels, metric = dev["label"].to_numpy(), task.main_metric

    def score(plan: InterventionPlan | None) -> float:
        predictions = task.predictions(scoring.evaluate_plan(model, encoded, plan, batch_size))
        value = compute_metrics(task, predictions, labels)[metric]
        logging.info("dev %s %.4f", metric, value)
        if record is not None:  # a token task's: each sentence's words' predictions
            rows = [p.tolist() for p in sentence_rows(predictions, labels)] if task.is_token else predictions
            record.append(dev.select("idx", "label").with_columns(
                pl.Series("prediction", rows, dtype=task.label_dtype if task.is_token else None)))
        return value

    return score
