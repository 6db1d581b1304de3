"""One intervention-aware attention for every analysis (capture, disable, gate), on transformers 5.

transformers 5 removed ``head_mask``, ``prune_heads`` and attention weights under SDPA.
This module replaces them with a single mechanism, in the style of transformers'
own ``AttentionInterface`` and TransformerLens's hook points:

- ``bertology_attention`` is eager attention (``softmax(QK^T * scaling + mask) V``)
  registered as ``attn_implementation="bertology"`` together with the eager
  attention *mask* (``AttentionMaskInterface``; without it padding would be ignored).
  Without a plan it computes exactly what ``"eager"`` computes.
- What it does beyond that is read from an ``InterventionPlan`` made active by the
  ``intervene`` context manager (a ``ContextVar``, reset in ``finally``; nothing is
  global and nothing leaks between calls):
  * capture: each requested layer's probabilities ``[batch, head, query, key]`` go
    to a sink;
  * per head, per configuration: a multiplicative ``scale`` on the head's
    probabilities (0 is Michel et al.'s masking, a tensor with ``requires_grad`` is
    a gate whose gradient gives head importance) and a ``uniform`` switch, Kovaleva
    et al.'s disabling: the head attends equally, 1/L, to the L non-padding tokens
    of its example (padding gets 0);
  * per layer, per configuration: a multiplicative ``mlp_scale`` on the layer's feed-forward
    (MLP) output before the residual connection, Prasanna et al. 2020's MLP mask (0 removes the
    MLP, a tensor with ``requires_grad`` is a gate whose gradient gives MLP importance);
  * per-example gates (``per_example=True``): the values are given per batch row instead of per
    configuration, so one backward pass of the summed loss gives every example's own gradient;
  * several configurations in one forward pass: the batch is repeated once per
    configuration (configuration-major: row ``c * B + b``), and only from the first
    layer where the configurations differ, so layers below it are computed once
    (with whatever intervention the configurations share applied there).

``first_token_output`` (from :mod:`bertology_core.encoder`, re-exported here) is a separate saving
for classifiers: their head reads only the first token's final state, so the last layer's
attention-output projection and feed-forward network are computed for that token alone
(attention itself, and any intervention in it, is unchanged).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from bertology_core.encoder import encoder_layers, first_token_output  # noqa: F401 - part of this module's API

ATTN_IMPLEMENTATION = "bertology"

# sink(layer_idx, probs [batch, head, query, key], key_is_real [batch, key]) -> None
AttentionSink = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass
class InterventionPlan:
    """What the engine does in one forward pass.

    ``num_configs`` configurations share the input batch of size B; ``scale[l]`` and
    ``uniform[l]`` are ``[num_configs, num_heads]`` and ``mlp_scale[l]`` is ``[num_configs]``
    for each intervened layer ``l``. With ``per_example`` (one configuration) they are
    ``[B, num_heads]`` and ``[B]`` instead: one value per example of the batch.
    A layer without an entry runs untouched in every configuration.
    """

    num_configs: int = 1
    scale: dict[int, torch.Tensor] = field(default_factory=dict)
    uniform: dict[int, torch.Tensor] = field(default_factory=dict)
    mlp_scale: dict[int, torch.Tensor] = field(default_factory=dict)
    per_example: bool = False
    sink: AttentionSink | None = None
    capture_layers: frozenset[int] | None = None  # None: every layer (when a sink is given)
    expand_at_layer: int | None = None  # set by ``intervene``: where the batch is repeated

    @property
    def intervened_layers(self) -> list[int]:
        return sorted(set(self.scale) | set(self.uniform) | set(self.mlp_scale))

    def first_differing_layer(self) -> int:
        """The first layer where some configurations' interventions differ (the last intervened
        layer when they are all alike): layers below it compute the same thing in every configuration."""
        for layer in self.intervened_layers:
            for values in (self.scale.get(layer), self.uniform.get(layer), self.mlp_scale.get(layer)):
                if values is not None and not bool((values == values[:1]).all()):
                    return layer
        layers = self.intervened_layers
        return layers[-1] if layers else 0

    def _rows(self, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, int]:
        """Per-configuration values of ``layer`` and the number of configurations in its batch:
        below the expansion layer the batch is not repeated yet and every row is alike."""
        if self.expand_at_layer is not None and layer < self.expand_at_layer:
            return values[:1], 1
        return values, self.num_configs


_ACTIVE_PLAN: contextvars.ContextVar[InterventionPlan | None] = contextvars.ContextVar("bertology_plan", default=None)


def _key_is_real(attention_mask: torch.Tensor | None, batch: int, keys: int, device: torch.device) -> torch.Tensor:
    """``[batch, key]`` booleans: True where the key is a real (non-padding) token."""
    if attention_mask is None:
        return torch.ones(batch, keys, dtype=torch.bool, device=device)
    if attention_mask.dtype == torch.bool:  # sdpa-style boolean mask: True means attend
        return attention_mask[:, 0, 0, :].expand(batch, keys)
    return (attention_mask[:, 0, 0, :] == 0).expand(batch, keys)  # eager additive mask: 0 or dtype min


def _per_row(plan: InterventionPlan, values: torch.Tensor, layer: int, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Values of ``layer`` for each row of the batch tensor ``like`` (``[rows, ...]``), shaped to broadcast
    against it: ``[num_configs, ...]`` repeated configuration-major, or per-example values as they are."""
    if plan.per_example:
        per_row = values
    else:
        rows, num_configs = plan._rows(values, layer)
        per_row = rows.repeat_interleave(like.shape[0] // num_configs, dim=0)
    per_row = per_row.to(like.device, dtype or per_row.dtype)
    return per_row.reshape(*per_row.shape, *([1] * (like.dim() - per_row.dim())))


def bertology_attention(
    module: nn.Module,
    query: torch.Tensor,  # [batch, head, query_pos, head_dim]
    key: torch.Tensor,  # [batch, head, key_pos, head_dim]
    value: torch.Tensor,  # [batch, head, key_pos, head_dim]
    attention_mask: torch.Tensor | None,  # [batch, 1, query_pos, key_pos], additive
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention, plus whatever the active ``InterventionPlan`` asks of this layer."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, head, query_pos, key_pos]
    if attention_mask is not None:
        logits = logits + attention_mask
    probs = nn.functional.softmax(logits, dim=-1)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)

    plan = _ACTIVE_PLAN.get()
    layer = getattr(module, "layer_idx", None)
    if plan is not None and layer is not None:
        probs = _apply_plan(plan, layer, probs, attention_mask)

    output = torch.matmul(probs, value).transpose(1, 2).contiguous()  # [batch, query_pos, head, head_dim]
    return output, probs


def _apply_plan(
    plan: InterventionPlan, layer: int, probs: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    batch, _, _, keys = probs.shape
    real = None
    if layer in plan.uniform:
        real = _key_is_real(attention_mask, batch, keys, probs.device)
        uniform = real[:, None, None, :].to(probs.dtype)
        uniform = (uniform / uniform.sum(-1, keepdim=True)).expand_as(probs)
        probs = torch.where(_per_row(plan, plan.uniform[layer], layer, probs), uniform, probs)
    if layer in plan.scale:
        probs = probs * _per_row(plan, plan.scale[layer], layer, probs, probs.dtype)
    if plan.sink is not None and (plan.capture_layers is None or layer in plan.capture_layers):
        if real is None:
            real = _key_is_real(attention_mask, batch, keys, probs.device)
        plan.sink(layer, probs, real)
    return probs


AttentionInterface.register(ATTN_IMPLEMENTATION, bertology_attention)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


def use_engine(model: PreTrainedModel) -> PreTrainedModel:
    """Switch ``model`` to the bertology attention (in place) and return it."""
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def _mlp_block(layer: nn.Module) -> nn.Module:
    """The linear map producing a layer's feed-forward (MLP) output, before dropout, the residual
    connection and the LayerNorm: ``layer.output.dense`` in BERT, RoBERTa and ELECTRA."""
    block = getattr(getattr(layer, "output", None), "dense", None)
    if not isinstance(block, nn.Module):
        raise TypeError(f"{type(layer).__name__}: no output.dense feed-forward block to gate")
    return block


def _mlp_hook(plan: InterventionPlan, layer: int):
    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if _ACTIVE_PLAN.get() is not plan:  # a nested plan is active: it alone applies
            return output
        return output * _per_row(plan, plan.mlp_scale[layer], layer, output, output.dtype)

    return hook


def _expand_hook(num_configs: int, first: bool):
    """Forward pre-hook repeating the batch once per configuration.

    At the first expanded layer the hidden states and every batch-sized argument are
    repeated; at later layers only the arguments the encoder passes unchanged to every
    layer (the attention mask) still have the original batch size and are repeated.
    """

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = args[0] if args else kwargs["hidden_states"]
        original = hidden.shape[0] if first else hidden.shape[0] // num_configs

        def repeat(x):
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == original:
                return x.repeat(num_configs, *([1] * (x.dim() - 1)))
            return x

        return tuple(repeat(a) for a in args), {k: repeat(v) for k, v in kwargs.items()}

    return hook


@contextlib.contextmanager
def intervene(model: PreTrainedModel, plan: InterventionPlan, reuse_prefix: bool = True) -> Iterator[InterventionPlan]:
    """Make ``plan`` active for forward passes of ``model`` inside the block.

    With ``num_configs > 1`` the batch is repeated at the first layer where the
    configurations differ (``reuse_prefix=True``) or at the first layer (``False``,
    the naive method); outputs then have ``num_configs * B`` rows, configuration-major.
    """
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        raise RuntimeError("call bertology_core.attention.use_engine(model) before intervening")
    num_layers = model.config.num_hidden_layers
    for layer in plan.intervened_layers:
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer {layer} out of range: the model has {num_layers} layers")
        heads = model.config.num_attention_heads
        for values in (plan.scale.get(layer), plan.uniform.get(layer)):
            if values is None:
                continue
            if values.dim() != 2 or values.shape[1] != heads or (not plan.per_example and values.shape[0] != plan.num_configs):
                raise ValueError(
                    f"layer {layer}: head tensors must be [{'batch' if plan.per_example else f'num_configs={plan.num_configs}'}, "
                    f"heads={heads}], got {tuple(values.shape)}"
                )
        values = plan.mlp_scale.get(layer)
        if values is not None and (values.dim() != 1 or (not plan.per_example and values.shape[0] != plan.num_configs)):
            raise ValueError(f"layer {layer}: mlp_scale must be [{'batch' if plan.per_example else plan.num_configs}], got {tuple(values.shape)}")
    if plan.per_example and plan.num_configs != 1:
        raise ValueError("a per-example plan has one configuration (num_configs=1)")
    handles = []
    layers = encoder_layers(model)
    for layer in plan.mlp_scale:
        handles.append(_mlp_block(layers[layer]).register_forward_hook(_mlp_hook(plan, layer)))
    if plan.num_configs > 1:
        plan.expand_at_layer = plan.first_differing_layer() if reuse_prefix else 0
        for index, layer in enumerate(layers):
            if index >= plan.expand_at_layer:
                hook = _expand_hook(plan.num_configs, first=index == plan.expand_at_layer)
                handles.append(layer.register_forward_pre_hook(hook, with_kwargs=True))
    token = _ACTIVE_PLAN.set(plan)
    try:
        yield plan
    finally:
        _ACTIVE_PLAN.reset(token)
        for handle in handles:
            handle.remove()
