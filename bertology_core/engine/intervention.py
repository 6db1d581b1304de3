"""Intervening: an ``InterventionPlan`` (:mod:`bertology_core.engine.plan`) made active for a model's forward passes.

Inside the ``intervene`` context manager the plan is the active interceptor of the engine's attention
(:mod:`bertology_core.engine.attention_function`; a ``ContextVar``, reset in ``finally``: nothing is global and
nothing leaks between calls), and hooks installed for the block apply it where each point acts:

- on the attention probabilities (``heads.scale``, ``heads.uniform``, and capture to the plan's sink): in the
  engine's attention function or, for DeBERTa-v2/v3, which computes attention in its own module, where the
  probabilities leave the module's dropout;
- on a module's output (``mlp.scale``, the LayerNorm scales): the module that
  :class:`~bertology_core.engine.structure.DepthParts` names for the point.

Layers are counted by depth (:mod:`bertology_core.engine.structure` finds them from the model's structure;
ALBERT's shared layer is a different layer at each depth). A plan of several configurations also has its batch
repeated (:mod:`bertology_core.engine.expansion`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import (ATTN_IMPLEMENTATION, Interceptor, intercepting,
                                                      uses_attention_interface)
from bertology_core.engine.expansion import first_differing_layer, repeat_batch
from bertology_core.engine.plan import HEAD_SCALE, HEAD_UNIFORM, POINTS, InterventionPlan, Site
from bertology_core.engine.structure import (UnsupportedStructure, depth_attentions, missing_part_reason,
                                             named_arguments, probability_modules, structure, track_depth)


def _allowed_keys(attention_mask: torch.Tensor | None, keys: int, device: torch.device) -> torch.Tensor:
    """``[batch or 1, 1, query or 1, key]`` booleans: True where the query may attend to the key (not padding, and
    inside the window of a local-attention layer). Masks come additive (eager: 0 or the dtype's minimum), boolean
    (True means attend) or as 0/1 integers (DeBERTa)."""
    if attention_mask is None:
        return torch.ones(1, 1, 1, keys, dtype=torch.bool, device=device)
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point():
        return attention_mask == 0
    return attention_mask != 0


def _key_is_real(allowed: torch.Tensor, batch: int) -> torch.Tensor:
    """``[batch, key]`` booleans: True where some query may attend to the key, i.e. it is a real (non-padding) token."""
    return allowed.any(dim=-2)[:, 0].expand(batch, -1)


def _per_row(plan: InterventionPlan, values: torch.Tensor, layer: int, like: torch.Tensor, dtype: torch.dtype | None = None,
             trailing_last: bool = False) -> torch.Tensor:
    """Values of ``layer`` for each row of the batch tensor ``like`` (``[rows, ...]``), shaped to broadcast
    against it: ``[num_configs, ...]`` repeated configuration-major, or per-example values as they are. The values'
    trailing dimension (heads, hidden) lines up with ``like``'s second dimension (probabilities ``[rows, head, ...]``)
    or, with ``trailing_last``, its last (a module's output ``[rows, position, hidden]``)."""
    if plan.per_example:
        per_row = values
    else:
        rows, num_configs = plan.rows(values, layer)
        per_row = rows.repeat_interleave(like.shape[0] // num_configs, dim=0)
    per_row = per_row.to(dtype=dtype or per_row.dtype)  # on the device already (_place_on)
    ones = [1] * (like.dim() - per_row.dim())
    if trailing_last:
        return per_row.reshape(per_row.shape[0], *ones, *per_row.shape[1:])
    return per_row.reshape(*per_row.shape, *ones)


def _apply_plan(
    plan: InterventionPlan, layer: int, probs: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    batch, _, _, keys = probs.shape
    allowed = None
    uniform_heads, head_scale = plan.values(layer, HEAD_UNIFORM), plan.values(layer, HEAD_SCALE)
    if uniform_heads is not None:
        allowed = _allowed_keys(attention_mask, keys, probs.device)
        uniform = allowed.to(probs.dtype)
        # 1/L over the L keys the query may attend to; a query with none (DeBERTa's padding rows) gets zeros
        uniform = (uniform / uniform.sum(-1, keepdim=True).clamp(min=1)).expand_as(probs)
        probs = torch.where(_per_row(plan, uniform_heads, layer, probs), uniform, probs)
    if head_scale is not None:
        probs = probs * _per_row(plan, head_scale, layer, probs, probs.dtype)
    if plan.sink is not None and (plan.capture_layers is None or layer in plan.capture_layers):
        if allowed is None:
            allowed = _allowed_keys(attention_mask, keys, probs.device)
        plan.sink(layer, probs, _key_is_real(allowed, batch))
    return probs


def _attention_hook(plan: InterventionPlan):
    """The plan's hook in the engine's attention function: apply it to the running layer's probabilities."""

    def hook(module: nn.Module, probs: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if plan.depth is not None and id(module) in plan.attention_ids:  # not another model's attention
            return _apply_plan(plan, plan.depth, probs, attention_mask)
        return probs

    return hook


def _scales_only(plan: InterventionPlan):
    """Whether the plan's hook at most scales each head of the running layer's attention (see ``Interceptor``)."""

    def check(module: nn.Module) -> bool:
        if plan.depth is None or id(module) not in plan.attention_ids:
            return True
        capturing = plan.sink is not None and (plan.capture_layers is None or plan.depth in plan.capture_layers)
        return not capturing and plan.values(plan.depth, HEAD_UNIFORM) is None

    return check


def _output_hook(plan: InterventionPlan, point: str):
    """Multiply a module's output by ``point``'s values of the running layer (the MLP output, a LayerNorm)."""
    trailing_last = POINTS[point].trailing is not None

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if not plan.is_active or plan.depth is None:  # a nested plan is active: it alone applies
            return output
        values = plan.values(plan.depth, point)
        if values is None:
            return output
        return output * _per_row(plan, values, plan.depth, output, output.dtype, trailing_last)

    return hook


def _probability_hooks(model: PreTrainedModel, plan: InterventionPlan) -> list:
    """For a model computing attention in its own module (DeBERTa): keep each attention call's mask, and apply the
    plan to the probabilities where they leave the module's dropout."""
    running: dict[str, torch.Tensor | None] = {"mask": None}  # the running attention call's mask

    def keep_mask(module, args, kwargs):
        if plan.is_active:
            mask = named_arguments(module, args, kwargs).get("attention_mask")
            running["mask"] = None if mask is None else mask.bool()  # as DeBERTa reads it: nonzero means attend

    def apply(module, args, output):
        if not plan.is_active or plan.depth is None or output.dim() != 4:
            return output
        return _apply_plan(plan, plan.depth, output, running["mask"])

    handles = [a.register_forward_pre_hook(keep_mask, with_kwargs=True) for a in dict.fromkeys(depth_attentions(model))]
    handles += [d.register_forward_hook(apply) for d in dict.fromkeys(probability_modules(model))]
    return handles


def _check_edits(model: PreTrainedModel, plan: InterventionPlan) -> None:
    """Every edit names a layer of ``model`` and has the shape its point asks: ``[num_configs, *trailing]``
    (``[batch, *trailing]`` per example); a point acting on a module the model lacks is refused here."""
    if plan.per_example and plan.num_configs != 1:
        raise ValueError("a per-example plan has one configuration (num_configs=1)")
    num_layers = model.config.num_hidden_layers
    rows = "batch" if plan.per_example else f"num_configs={plan.num_configs}"
    parts = structure(model) if any(POINTS[getattr(s, "point", "")].module for s in plan.edits if isinstance(s, Site)) else None
    for edited, values in plan.edits.items():
        if not isinstance(edited, Site):
            raise TypeError(f"plan edits are keyed by site(layer, point) (bertology_core.engine.plan), not {edited!r}")
        if not 0 <= edited.layer < num_layers:
            raise ValueError(f"{edited}: layer {edited.layer} out of range: the model has {num_layers} layers")
        point = POINTS[edited.point]
        trailing = () if point.trailing is None else (int(getattr(model.config, point.trailing)),)
        if values.dim() != 1 + len(trailing) or tuple(values.shape[1:]) != trailing or (
                not plan.per_example and values.shape[0] != plan.num_configs):
            names = "".join(f", {point.trailing}={size}" for size in trailing)
            raise ValueError(f"{edited}: values must be [{rows}{names}], got {tuple(values.shape)}")
        if point.boolean and values.dtype != torch.bool:
            raise ValueError(f"{edited}: values must be booleans, got {values.dtype}")
        if point.module is not None and getattr(parts[edited.layer], point.module) is None:
            raise UnsupportedStructure(missing_part_reason(model, point.module))


def _place_on(plan: InterventionPlan, device: torch.device) -> None:
    """Move the plan's edits to the model's device, once: a plan scored over many batches is entered once per batch,
    and a copy from the host inside a forward pass would stall the device at every hooked layer. Where the
    configurations first differ is read here too, while the values may still be on the host (reading it from the
    device waits for the device). A gate (a tensor with ``requires_grad``) is not moved: its copy would belong to one
    backward pass, and a plan entered again after it would train a stale copy; it must be made on the device."""
    if plan.num_configs > 1 and plan.differing_layer is None:
        plan.differing_layer = first_differing_layer(plan)
    for edited, values in plan.edits.items():
        if values.device == device:
            continue
        if values.requires_grad:
            raise ValueError(f"{edited}: a gate (requires_grad) on {values.device} for a model on {device}. Fix: create "
                             "the gate on the model's device (torch.ones(..., device=model.device)).")
        plan.edits[edited] = values.to(device, non_blocking=device.type == "cuda")


@contextlib.contextmanager
def intervene(model: PreTrainedModel, plan: InterventionPlan, reuse_prefix: bool = True) -> Iterator[InterventionPlan]:
    """Make ``plan`` active for forward passes of ``model`` inside the block.

    With ``num_configs > 1`` the batch is repeated at the first layer where the
    configurations differ (``reuse_prefix=True``) or at the first layer (``False``,
    the naive method); outputs then have ``num_configs * B`` rows, configuration-major
    (:mod:`bertology_core.engine.expansion`).
    """
    if uses_attention_interface(model) and model.config._attn_implementation != ATTN_IMPLEMENTATION:
        raise RuntimeError("call bertology_core.engine.attention_function.use_engine(model) before intervening")
    _check_edits(model, plan)
    _place_on(plan, next(model.parameters()).device)
    parts = structure(model) if any(POINTS[s.point].module for s in plan.edits) else None
    with contextlib.ExitStack() as stack:
        plan.tracker = stack.enter_context(track_depth(model))
        plan.attention_ids = frozenset(map(id, depth_attentions(model)))
        handles = []
        for point in dict.fromkeys(s.point for s in plan.edits if POINTS[s.point].module):
            modules = [getattr(parts[s.layer], POINTS[point].module) for s in plan.edits if s.point == point]
            handles += [m.register_forward_hook(_output_hook(plan, point)) for m in dict.fromkeys(modules)]
        if not uses_attention_interface(model):
            handles += _probability_hooks(model, plan)
        if plan.num_configs > 1:
            handles += repeat_batch(model, plan, reuse_prefix)
        for handle in handles:
            stack.callback(handle.remove)
        stack.enter_context(intercepting(Interceptor(plan, _attention_hook(plan), _scales_only(plan))))
        yield plan
