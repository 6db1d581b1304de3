"""Lottery tickets in fine-tuned BERT (Prasanna, Rogers and Rumshisky 2020, "When BERT Plays the Lottery").

Two ways to find a "good" subnetwork of a fine-tuned model, both iterative, both evaluated after every
iteration and both stopped by the same rule (:func:`prune_while_above`): keep pruning while the pruned model
keeps at least ``keep`` (90%) of the full fine-tuned model's score; the subnetwork is the last one that did.

- *m-pruning* (magnitude, unstructured; after Chen et al. 2020): each iteration removes the 10% of the
  remaining encoder weights with the smallest magnitude, globally across the encoder's weight matrices
  (embeddings excluded; biases, LayerNorms, pooler and classifier kept). Uses ``torch.nn.utils.prune``.
- *s-pruning* (structured): each iteration removes the 10% of all heads and one MLP (a layer's feed-forward
  block) with the lowest importance, Michel et al.'s gate-gradient score (:mod:`bertology_core.pruning.importance`),
  recomputed on the current subnetwork. By default it is computed as Prasanna et al.'s code computes it
  (``compute_heads_mlps_importance`` in their src/find_head_mlp_masks.py): one gate per head and per MLP shared by
  each batch, the absolute gradient of the batch loss summed over batches (``pruning.ticket_importance_granularity:
  batch``), heads normalised by their layer's l2 norm, MLPs not; Michel et al.'s curve keeps their own per-token
  importance (``pruning.importance_granularity``). m-pruning ranks by magnitude and uses no importance.

Then "good" (the survivors), "bad" (as many elements, taken from the pruned ones: for m-pruning the weights
of smallest magnitude) and "random" (as many elements drawn uniformly) subnetworks are each re-fine-tuned from the *pre-trained* weights with their mask
fixed, and compared. Stability across fine-tuning seeds (survival maps, Fleiss' kappa of the masks with
seeds as raters; the paper: 0.18-0.32 for heads) is in :mod:`bertology_core.pruning.stats`.

Where this differs from Prasanna et al.: they (and their code) score the 90% rule on dev and then report the
re-fine-tuned subnetworks on the same dev, so the stopping point, i.e. the ticket, is chosen on the data that
scores it. Here a ticket is found under a *protocol* (:func:`protocol_examples`, :data:`PROTOCOLS`):
``held_out`` splits dev in two seeded halves (stratified by label, as the disabling stage's
:func:`bertology_core.disabling.stats.split_halves`), scores the rule on half A only and reports on half B;
``paper`` keeps their protocol (chosen and reported on all of dev) beside it, so that the size of the
difference shows. The pruning order itself does not look at dev: m-pruning ranks by magnitude, s-pruning by
importance on ``pruning.importance_split`` (train by default); only where to stop does. Both protocols share
these settings: importance on the same split (the authors' code computes it on the examples that score the
90% rule, dev by default), and the floor of ``keep_above_constant`` (not in the paper) when it is on; so
the two protocols differ only in which examples choose and which report.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import polars as pl
import torch
from torch import nn
from torch.nn.utils import prune
from transformers import PreTrainedModel

from bertology_core.data import states
from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import InterventionPlan
from bertology_core.engine.structure import depth_layers
from bertology_core.disabling.stats import split_halves
from bertology_core.finetune import training
from bertology_core.finetune.training import FinetuneConfig
from bertology_core.inputs.batching import Encoded, TokenFile, encode_split, frame_labels
from bertology_core.models.checkpoint import ArrayCheckpoint, Checkpointer, Replay
from bertology_core.models.device import default_device
from bertology_core.models.loading import load_classifier_reported, load_tokenizer
from bertology_core.models import precision as precisions
from bertology_core.models.precision import Precision
from bertology_core.data.tasks import Task, subsample
from bertology_core.stats.metrics import compute_metrics, sentence_rows
from bertology_core.engine.plan import StructureMask
from bertology_core.pruning import compaction
from bertology_core.pruning.importance import gate_importance, least_important, normalize_by_layer
from bertology_core.pruning.stats import PROTOCOLS
from bertology_core.scoring import plans as scoring

State = TypeVar("State")


@dataclass(frozen=True)
class Iteration(Generic[State]):
    iteration: int
    state: State
    score: float
    kept_share: float  # of the prunable elements
    phase: str = ""


def best_constant_score(task: Task, labels: np.ndarray) -> float | None:
    """The best primary-metric score a constant prediction gets on ``labels`` (the majority class, for
    accuracy): the floor of :func:`prune_while_above`. None for regression, where a constant has no
    correlation."""
    if task.is_regression:
        return None
    metric = task.main_metric
    # a token task's constant tags every word alike (labels: each sentence's)
    units = sum(len(sentence) for sentence in labels) if task.is_token else len(labels)
    return max(compute_metrics(task, np.full(units, label), labels)[metric] for label in range(task.num_labels))


def prune_while_above(
    start: State,
    prune_step: Callable[[State], State | None],
    evaluate: Callable[[State], float],
    kept_share: Callable[[State], float],
    keep: float = 0.9,
    max_iterations: int = 100,
    reference: float | None = None,
    start_score: float | None = None,
    phase: str = "",
    floor: float | None = None,
) -> tuple[int, list[Iteration[State]]]:
    """Prune iteratively while the score stays at least ``keep`` times the full model's.

    ``start`` is the full model's state (iteration 0; its score is the ``reference`` unless one is given, for
    a later phase starting from an already pruned state); ``prune_step`` returns the next, more pruned state
    (None when nothing is left to prune). Iterations go on until one scores below the threshold (it is
    recorded, so curves show where the rule stopped), nothing is left, or ``max_iterations`` were pruned.
    ``floor`` (not in the paper; off by default): an iteration must also score strictly above it, e.g. the
    best constant prediction's score, for models so close to it that ``keep`` x full lies below it and the
    rule alone would prune down to a constant predictor.
    Returns the index of the chosen iteration (the last one at or above the threshold) and every iteration.
    """
    first = evaluate(start) if start_score is None else start_score
    full = first if reference is None else reference
    # keep x full, as the authors' code compares; for a negative score (MCC, correlations) the same
    # distance below it; a float tolerance so that exactly 90% counts as 90%
    threshold = (keep * full if full >= 0 else (2 - keep) * full) - 1e-12
    history = [Iteration(0, start, first, kept_share(start), phase)]
    chosen = 0
    state = start
    while len(history) <= max_iterations:
        state = prune_step(state)
        if state is None:
            break
        score = evaluate(state)
        history.append(Iteration(len(history), state, score, kept_share(state), phase))
        if not score >= threshold or (floor is not None and not score > floor):
            break
        chosen = len(history) - 1
    return chosen, history


# --- m-pruning ---------------------------------------------------------------------------------


def encoder_weights(model: PreTrainedModel) -> list[tuple[str, nn.Linear]]:
    """The weight matrices m-pruning acts on: every ``nn.Linear`` inside the encoder layers (Q, K, V,
    attention output, the two MLP matrices), by their module name; a matrix shared across depth (ALBERT) once."""
    inside = {id(module) for layer in depth_layers(model) for module in layer.modules()}
    return [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear) and id(module) in inside]


WeightMasks = dict[str, torch.Tensor]  # "bert.encoder.layer.0.attention.self.query" -> bool mask of its weight


def current_weight_masks(model: PreTrainedModel) -> WeightMasks:
    return {
        name: (module.weight_mask.bool().clone() if hasattr(module, "weight_mask") else torch.ones_like(module.weight, dtype=torch.bool))
        for name, module in encoder_weights(model)
    }


def apply_weight_masks(model: PreTrainedModel, masks: WeightMasks) -> None:
    """Fix ``masks`` on the encoder weights (``torch.nn.utils.prune.custom_from_mask``): the masked entries
    are zero in every forward pass and receive no gradient, so the mask survives fine-tuning."""
    for name, module in encoder_weights(model):
        if hasattr(module, "weight_mask"):
            prune.remove(module, "weight")
        prune.custom_from_mask(module, "weight", masks[name].to(module.weight.device))


@torch.no_grad()
def magnitude_prune_step(model: PreTrainedModel, amount: float = 0.1) -> WeightMasks:
    """Remove ``amount`` of the *remaining* encoder weights with the smallest magnitude, globally (one
    threshold across all matrices); returns the new masks.

    The masks of ``torch.nn.utils.prune.global_unstructured`` with ``L1Unstructured`` (the rounded ``amount`` of the
    remaining weights whose magnitude ``torch.topk`` ranks smallest, over the remaining weights in module order), left
    on the model as ``torch.nn.utils.prune`` leaves them, without its float32 copies of every weight and mask (3.4 GB
    above the model at BERT-base, and more each step)."""
    modules = [module for _, module in encoder_weights(model)]
    masks = [module.weight_mask.bool() if hasattr(module, "weight_mask") else torch.ones_like(module.weight, dtype=torch.bool)
             for module in modules]
    remaining = torch.cat([module.weight.abs().reshape(-1)[mask.reshape(-1)] for module, mask in zip(modules, masks)])
    # torch's reading of amount (prune._compute_nparams_toprune): a share of the remaining weights, or a count
    if isinstance(amount, numbers.Integral):
        count = int(amount)
    elif 0.0 <= float(amount) <= 1.0:
        count = round(float(amount) * remaining.numel())
    else:
        raise ValueError(f"amount must be a share in [0, 1] or a count of weights, not {amount!r}")
    if not 0 <= count <= remaining.numel():
        raise ValueError(f"cannot prune {count} of the {remaining.numel()} remaining weights")
    keep = torch.ones(remaining.numel(), dtype=torch.bool, device=remaining.device)
    if count:
        keep[torch.topk(remaining, k=count, largest=False).indices] = False
    del remaining
    offset = 0
    for module, mask in zip(modules, masks):
        flat = mask.reshape(-1).clone()
        kept = int(flat.sum())
        flat[flat.clone()] = keep[offset : offset + kept]
        offset += kept
        new = flat.view_as(mask)
        if hasattr(module, "weight_mask"):  # as prune's hook computes it before each forward
            module.weight_mask.copy_(new)
            module.weight = module.weight_orig * module.weight_mask
        else:
            prune.custom_from_mask(module, "weight", new)
    return current_weight_masks(model)


def kept_weight_share(masks: WeightMasks) -> float:
    return float(sum(int(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values()))


# --- s-pruning ---------------------------------------------------------------------------------


def structured_prune_step(
    mask: StructureMask,
    head_importance: np.ndarray,
    mlp_importance: np.ndarray,
    head_share: float = 0.1,
    mlps_per_step: int = 1,
    normalize: bool = True,
) -> StructureMask | None:
    """Remove the ``head_share`` of *all* heads and the ``mlps_per_step`` MLPs with the lowest importance
    among the kept ones (heads ranked after per-layer normalisation); None when nothing is left."""
    count = max(1, round(head_share * mask.heads.size)) if head_share > 0 else 0
    scores = normalize_by_layer(head_importance) if normalize else head_importance
    heads = least_important(scores, mask.heads, count)
    mlps = [layer for (layer,) in least_important(mlp_importance, mask.mlps, mlps_per_step)]
    if not heads and not mlps:
        return None
    return mask.without(heads=heads, mlps=mlps)


def structured_pruning(
    start: StructureMask,
    evaluate: Callable[[StructureMask], float],
    importance: Callable[[StructureMask], tuple[np.ndarray, np.ndarray]],
    head_share: float = 0.1,
    mlps_per_step: int = 1,
    keep: float = 0.9,
    refine: bool = True,
    max_iterations: int = 100,
    normalize: bool = True,
    floor: float | None = None,
) -> tuple[int, list[Iteration[StructureMask]]]:
    """s-pruning: ``head_share`` of all heads and ``mlps_per_step`` MLPs per iteration, importance recomputed
    on the current subnetwork each time (``importance(mask) -> (heads [L, H], mlps [L])``), while the score
    stays at least ``keep`` of the full model's.

    With ``refine`` (as the authors' code does after this first phase) two more phases start from the
    subnetwork kept so far, with the same threshold: heads only at half the share, then MLPs only, one at a
    time. ``floor``: as in :func:`prune_while_above`. Returns the index of the chosen iteration and every
    iteration (``phase``: heads+mlps, heads, mlps), numbered on from one phase to the next.
    """

    def step(head: float, mlps: int) -> Callable[[StructureMask], StructureMask | None]:
        return lambda mask: structured_prune_step(mask, *importance(mask), head_share=head, mlps_per_step=mlps, normalize=normalize)

    phases = [("heads+mlps", head_share, mlps_per_step)]
    if refine:
        phases += [("heads", head_share / 2, 0), ("mlps", 0.0, 1)]
    history: list[Iteration[StructureMask]] = []
    state, score, reference, chosen_index = start, None, None, 0
    for name, head, mlps in phases:
        chosen, run = prune_while_above(
            state, step(head, mlps), evaluate, structure_kept_share, keep, max_iterations, reference, score, name, floor
        )
        reference = run[0].score if reference is None else reference
        # a later phase starts from the previous phase's choice (its iteration 0, not recorded again) and
        # numbers its iterations on from the last recorded one
        offset = len(history) - 1 if history else 0
        history += [Iteration(offset + it.iteration, it.state, it.score, it.kept_share, it.phase) for it in run[(1 if history else 0):]]
        if chosen > 0:
            chosen_index = offset + chosen
        state, score = run[chosen].state, run[chosen].score
    return chosen_index, history


def structure_kept_share(mask: StructureMask) -> float:
    return (mask.heads_kept + mask.mlps_kept) / (mask.heads.size + mask.mlps.size)


# --- good, bad and random subnetworks -------------------------------------------------------------


def complement_sample(kept: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A "bad" mask: as many elements as ``kept`` keeps, taken from those it pruned; when fewer were pruned
    than kept, all pruned ones plus a random draw from the kept ones fill the count."""
    flat = kept.reshape(-1)
    count = int(flat.sum())
    pruned, survivors = np.flatnonzero(~flat), np.flatnonzero(flat)
    if len(pruned) >= count:
        chosen = rng.choice(pruned, size=count, replace=False)
    else:
        chosen = np.concatenate([pruned, rng.choice(survivors, size=count - len(pruned), replace=False)])
    out = np.zeros_like(flat)
    out[chosen] = True
    return out.reshape(kept.shape)


def random_sample(kept: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A "random" mask: as many elements as ``kept`` keeps, drawn uniformly from all of them."""
    flat = kept.reshape(-1)
    out = np.zeros_like(flat)
    out[rng.choice(flat.size, size=int(flat.sum()), replace=False)] = True
    return out.reshape(kept.shape)


def structure_subnetwork(good: StructureMask, kind: str, seed: int | list[int]) -> StructureMask:
    """The ``good`` mask itself, or its ``bad`` / ``random`` counterpart (heads and MLPs drawn separately,
    so each has the good one's counts)."""
    if kind == "good":
        return good
    rng = np.random.default_rng(seed)
    draw = {"bad": complement_sample, "random": random_sample}[kind]
    return StructureMask(draw(good.heads, rng), draw(good.mlps, rng))


def weight_subnetwork(good: WeightMasks, kind: str, seed: int | list[int], magnitudes: dict[str, torch.Tensor] | None = None) -> WeightMasks:
    """The m-pruning counterpart of :func:`structure_subnetwork`, with the count matched over all encoder
    weights together (m-pruning's threshold is global). ``random``: that many weights drawn uniformly.
    ``bad``, as in the authors' code (an inverted L1 pruning): the weights of *smallest* magnitude in the
    fine-tuned model (``magnitudes``), i.e. every pruned weight first, then the smallest survivors."""
    if kind == "good":
        return good
    names = sorted(good)
    flat = torch.cat([good[n].reshape(-1) for n in names]).numpy()
    if kind == "bad":
        if magnitudes is None:
            raise ValueError("the m-pruning 'bad' subnetwork needs the fine-tuned weights' magnitudes")
        values = torch.cat([magnitudes[n].abs().reshape(-1) for n in names]).numpy()
        drawn = np.zeros_like(flat)
        drawn[np.argsort(values, kind="stable")[: int(flat.sum())]] = True
    else:
        drawn = random_sample(flat, np.random.default_rng(seed))
    out, offset = {}, 0
    for name in names:
        size = good[name].numel()
        out[name] = torch.from_numpy(drawn[offset : offset + size].copy()).reshape(good[name].shape)
        offset += size
    return out


# --- which examples choose a ticket and which report it ------------------------------------------------


def protocol_examples(
    dev: pl.DataFrame,
    protocol: str,
    stratify: bool,
    split_seed: int | None = None,
    examples: int | None = None,
    sample_seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks over ``dev``'s rows: the examples that choose the ticket (score the 90% rule) and those
    its re-fine-tuned subnetworks are reported on.

    - ``held_out`` (not Prasanna et al.'s): :func:`~bertology_core.disabling.stats.split_halves` of dev's
      labels (``split_seed``; each class halved separately with ``stratify``) gives half A, which chooses,
      and half B, all of which reports; no example does both.
    - ``paper`` (Prasanna et al.'s): all of dev chooses and all of dev reports, the same examples.

    ``examples`` (with ``sample_seed``): under ``held_out``, a seeded sample of half A chooses, to save time
    (None: all of it); the report examples are never sampled. It does not apply to ``paper``, whose point is
    that the choosing and the report examples are the same.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: one of {sorted(PROTOCOLS)}")
    if protocol == "held_out":
        if split_seed is None:
            raise ValueError("the held_out protocol needs a split_seed")
        pool = split_halves(dev["label"].to_numpy(), stratify, split_seed)
        report = ~pool
    else:
        return np.ones(dev.height, dtype=bool), np.ones(dev.height, dtype=bool)
    chosen = subsample(dev.filter(pl.Series(pool)), examples, sample_seed)["idx"]
    return dev["idx"].is_in(chosen.implode()).to_numpy(), report


@dataclass(frozen=True)
class Ticket(Generic[State]):
    """A lottery ticket under one protocol: every pruning iteration as scored on the choosing examples, the
    chosen one, and the full fine-tuned model's metrics on the report examples (the tables' reference)."""

    method: str
    protocol: str
    chosen: int
    history: list[Iteration[State]]
    floor: float | None
    selection_examples: int
    report_examples: int
    full_report_metrics: dict[str, float]

    @property
    def best(self) -> Iteration[State]:
        return self.history[self.chosen]

    def curve(self) -> pl.DataFrame:
        """One row per iteration: ``score`` on the choosing examples, ``chosen`` marks the ticket."""
        rows = []
        for it in self.history:
            extra = {"heads_kept": it.state.heads_kept, "mlps_kept": it.state.mlps_kept} if isinstance(it.state, StructureMask) else {}
            rows.append({"iteration": it.iteration, "phase": it.phase or self.method, "kept_share": it.kept_share, "score": it.score,
                         "chosen": it.iteration == self.best.iteration, **extra})
        return pl.DataFrame(rows).with_columns(
            pl.lit(self.method).alias("method"), pl.lit(self.protocol).alias("protocol"),
            (pl.col("score") / self.history[0].score).alias("share_of_full"), pl.lit(self.floor, dtype=pl.Float64).alias("floor"),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """The ticket's mask as uint8 tensors: ``heads`` and ``mlps`` (s), or one per weight matrix (m)."""
        state = self.best.state
        if isinstance(state, StructureMask):
            return {"heads": torch.from_numpy(state.heads.astype(np.uint8)), "mlps": torch.from_numpy(state.mlps.astype(np.uint8))}
        return {name: mask.to(torch.uint8).contiguous() for name, mask in state.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method, "protocol": self.protocol, "protocol_label": PROTOCOLS[self.protocol],
            "iteration": self.best.iteration, "kept_share": self.best.kept_share, "score": self.best.score,
            "full_score": self.history[0].score, "floor": self.floor,
            "selection_examples": self.selection_examples, "report_examples": self.report_examples,
            "full_report_metrics": self.full_report_metrics,
        }


def find_ticket(
    model: PreTrainedModel,
    task: Task,
    method: str,
    protocol: str,
    selection: Encoded,
    selection_labels: np.ndarray,
    report: Encoded,
    report_labels: np.ndarray,
    *,
    keep: float = 0.9,
    keep_above_constant: bool = False,
    method_settings: Mapping[str, Any],
    importance_data: tuple[Encoded, np.ndarray] | None = None,
    normalize: bool = True,
    batch_size: int = 32,
    importance_granularity: str = "batch",
    checkpoint: ArrayCheckpoint | None = None,
    rows_per_pass: int | None = None,
) -> Ticket:
    """m- or s-pruning of ``model`` (``method``), every iteration scored on ``selection`` only (half A under
    ``held_out``): the 90% rule, and the floor with ``keep_above_constant``, never see ``report``, which
    only scores the full model once, before pruning, as the reference the subnetworks are reported against.

    ``method_settings``: m: ``rate``, ``max_iterations``; s: ``head_share``, ``mlps_per_step``, ``refine``
    (with ``importance_data``, the train examples and labels of the gate-gradient importance, ``normalize`` and
    ``importance_granularity``, :func:`~bertology_core.pruning.importance.gate_importance`'s ``granularity``, whose batches
    are of ``batch_size`` under ``batch``: by default Prasanna et al.'s, a gate shared by each batch); the scoring passes
    run ``rows_per_pass`` examples each (default ``batch_size``; a speed setting). m-pruning leaves its masks on
    ``model``. With a ``checkpoint``, every
    score and importance computed is saved as it says (:class:`~bertology_core.models.checkpoint.Replay`): a rerun
    after a kill replays the iterations they cover without a pass (the pruning steps themselves are redone: they
    follow from the scores and importance) and goes on from there.
    """
    metric = task.main_metric
    replay = Replay(checkpoint)
    rows = rows_per_pass or batch_size
    full_predictions = replay(lambda: {"predictions": task.predictions(scoring.evaluate_plan(model, report, None, rows))})
    full_report = compute_metrics(task, full_predictions["predictions"], report_labels)
    floor = best_constant_score(task, selection_labels) if keep_above_constant else None

    def score(plan: InterventionPlan | None) -> float:
        def compute() -> dict[str, float]:
            predictions = task.predictions(scoring.evaluate_plan(model, selection, plan, rows))
            return {"score": compute_metrics(task, predictions, selection_labels)[metric]}

        value = float(replay(compute)["score"])
        logging.getLogger(__name__).info("%s %s-pruning: %s %.4f on %d choosing examples", protocol, method, metric, value, len(selection_labels))
        return value

    def importance(mask: StructureMask) -> tuple[np.ndarray, np.ndarray]:
        found = replay(lambda: dict(zip(("heads", "mlps"), gate_importance(model, task, *importance_data, mask, batch_size,
                                                                          importance_granularity))))
        return found["heads"], found["mlps"]

    if method == "m":
        chosen, history = prune_while_above(
            current_weight_masks(model),
            lambda masks: magnitude_prune_step(model, method_settings["rate"]),
            lambda masks: score(None),  # the model carries the masks (torch.nn.utils.prune)
            kept_weight_share,
            keep,
            method_settings["max_iterations"],
            floor=floor,
        )
    elif method == "s":
        if importance_data is None:
            raise ValueError("s-pruning needs the importance examples and labels")
        chosen, history = structured_pruning(
            StructureMask.for_model(model),
            lambda mask: score(mask.plan()),
            importance,
            head_share=method_settings["head_share"],
            mlps_per_step=method_settings["mlps_per_step"],
            keep=keep,
            refine=method_settings["refine"],
            normalize=normalize,
            floor=floor,
        )
    else:
        raise ValueError(f"unknown pruning method {method!r}: m or s")
    replay.finish()
    return Ticket(method, protocol, chosen, history, floor, len(selection_labels), len(report_labels), full_report)


# --- re-fine-tuning a subnetwork ----------------------------------------------------------------------


def finetune_subnetwork(
    model_path: str,
    task: Task,
    seed: int,
    train_frame: pl.DataFrame,
    eval_frame: pl.DataFrame,
    config: FinetuneConfig,
    mask: StructureMask | WeightMasks | None,
    eval_batch_size: int = 64,
    progress: bool = False,
    device: torch.device | None = None,
    precision: Precision | None = None,
    tokens: TokenFile | None = None,
    checkpointer: Checkpointer | None = None,
) -> tuple[dict[str, Any], pl.DataFrame]:
    """Fine-tune the *pre-trained* encoder (fresh classifier head, ``seed``) with ``mask`` fixed, in ``precision``
    (None: float32); evaluate. ``tokens``: the task's splits tokenised beforehand (else tokenised here, the same way).
    ``checkpointer``: training saves its state now and then and resumes from it (:func:`training.train`; the masked
    model is built the same way before a checkpoint is loaded into it).

    A structure mask is applied by compaction (the removed heads and MLPs are cut out, which is exact and
    faster to train than gating; what weights shared across depth keep at another depth stays gated); weight masks are fixed with ``torch.nn.utils.prune`` (masked weights stay
    zero and get no gradient). ``None`` fine-tunes the full model with the same recipe.
    Returns the run's record (``metrics`` on all of ``eval_frame``) and the per-example predictions
    (``idx, label, prediction``), from which a summary scores any protocol's report examples, so that how
    dev is split never reruns the fine-tuning.
    """
    tokenizer = load_tokenizer(model_path)
    model, loaded = load_classifier_reported(model_path, task, states.PRETRAINED, seed)
    model.to(device or default_device())
    precision = precision or precisions.resolve("float32", next(model.parameters()).device)
    # the encoder layers' parameters; a ModuleList counts a layer shared across depth (ALBERT) once
    total = compaction.parameter_count(nn.ModuleList(depth_layers(model)))
    gates, gated_share = contextlib.nullcontext(), None
    if isinstance(mask, StructureMask):
        residual = compaction.residual_mask(model, mask)
        if not (residual.heads.all() and residual.mlps.all()):  # weights shared across depth: gate what cannot be cut
            gated_share = compaction.kept_parameter_share(model, mask)
        compaction.compact(model, mask)
        if gated_share is not None:
            gates = intervene(use_engine(model), residual.plan())
    elif mask is not None:
        apply_weight_masks(model, mask)
    train_frame, encoded, _ = training.readable_training_data(task, train_frame, tokenizer, config.max_length, tokens)
    with gates:
        record = training.train(model, task, encoded, frame_labels(task, train_frame), config, seed, progress,
                                checkpointer, precision=precision)
        evaluated = encode_split(eval_frame, "dev", tokenizer, config.max_length, tokens)
        logits = training.predict(model, evaluated, eval_batch_size)
    predictions = task.predictions(logits)
    if isinstance(mask, dict):  # m-pruning: share of the prunable weight matrices' entries
        kept = kept_weight_share(current_weight_masks(model))
    elif gated_share is not None:  # weights shared across depth: the share the mask keeps, counted per depth
        kept = gated_share
    else:  # s-pruning: share of the encoder layers' parameters left after compaction
        kept = compaction.parameter_count(nn.ModuleList(depth_layers(model))) / total
    labels = eval_frame["label"].to_numpy()
    # a token task's: each sentence's words' predictions
    rows = [p.tolist() for p in sentence_rows(predictions, labels)] if task.is_token else predictions
    per_example = eval_frame.select("idx", "label").with_columns(pl.Series("prediction", rows, dtype=task.label_dtype))
    return {
        "metrics": compute_metrics(task, predictions, labels),
        "train_examples": len(encoded),
        "train_seconds": record["train_seconds"],
        "steps": record["steps"],
        "resumed_at_step": record["resumed_at_step"],
        "parameters_kept_share": kept,
        "final_loss_mean_last_20": record["final_loss_mean_last_20"],
        "weights_loaded": loaded.to_json(),
        "precision": precision.to_dict(),
    }, per_example
