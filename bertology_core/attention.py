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
  * several configurations in one forward pass: the batch is repeated once per
    configuration (configuration-major: row ``c * B + b``), and only from the first
    layer where the configurations differ, so layers below it are computed once
    (with whatever intervention the configurations share applied there).

``first_token_output`` is a separate saving for classifiers: their head reads only the first
token's final state, so the last layer's attention-output projection and feed-forward network
are computed for that token alone (attention itself, and any intervention in it, is unchanged).
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

ATTN_IMPLEMENTATION = "bertology"

# sink(layer_idx, probs [batch, head, query, key], key_is_real [batch, key]) -> None
AttentionSink = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass
class InterventionPlan:
    """What the engine does in one forward pass.

    ``num_configs`` configurations share the input batch of size B; ``scale[l]`` and
    ``uniform[l]`` are ``[num_configs, num_heads]`` for each intervened layer ``l``.
    A layer without an entry runs untouched in every configuration.
    """

    num_configs: int = 1
    scale: dict[int, torch.Tensor] = field(default_factory=dict)
    uniform: dict[int, torch.Tensor] = field(default_factory=dict)
    sink: AttentionSink | None = None
    capture_layers: frozenset[int] | None = None  # None: every layer (when a sink is given)
    expand_at_layer: int | None = None  # set by ``intervene``: where the batch is repeated

    @property
    def intervened_layers(self) -> list[int]:
        return sorted(set(self.scale) | set(self.uniform))

    def first_differing_layer(self) -> int:
        """The first layer where some configurations' interventions differ (the last intervened
        layer when they are all alike): layers below it compute the same thing in every configuration."""
        for layer in self.intervened_layers:
            for values in (self.scale.get(layer), self.uniform.get(layer)):
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


def _per_row(values: torch.Tensor, num_configs: int, batch: int) -> torch.Tensor:
    """``[num_configs, head]`` -> ``[num_configs * B, head, 1, 1]`` in configuration-major order."""
    per_row = values.repeat_interleave(batch // num_configs, dim=0)
    return per_row[:, :, None, None]


def _rows_on(
    plan: InterventionPlan, values: torch.Tensor, layer: int, probs: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, int]:
    rows, num_configs = plan._rows(values, layer)
    return rows.to(probs.device, dtype or rows.dtype), num_configs


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
        switch = _per_row(*_rows_on(plan, plan.uniform[layer], layer, probs), batch)
        probs = torch.where(switch, uniform, probs)
    if layer in plan.scale:
        probs = probs * _per_row(*_rows_on(plan, plan.scale[layer], layer, probs, probs.dtype), batch)
    if plan.sink is not None and (plan.capture_layers is None or layer in plan.capture_layers):
        if real is None:
            real = _key_is_real(attention_mask, batch, keys, probs.device)
        plan.sink(layer, probs, real)
    return probs


AttentionInterface.register(ATTN_IMPLEMENTATION, bertology_attention)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


def encoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The stack of transformer layers of a BERT-family encoder (BERT, RoBERTa, ELECTRA, ...)."""
    base = model.base_model
    encoder = getattr(base, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__}: no encoder.layer ModuleList; only BERT-style encoders are supported")
    return layers


def use_engine(model: PreTrainedModel) -> PreTrainedModel:
    """Switch ``model`` to the bertology attention (in place) and return it."""
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


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
        for values in (plan.scale.get(layer), plan.uniform.get(layer)):
            if values is not None and tuple(values.shape) != (plan.num_configs, model.config.num_attention_heads):
                raise ValueError(
                    f"layer {layer}: plan tensors must be [num_configs={plan.num_configs}, "
                    f"heads={model.config.num_attention_heads}], got {tuple(values.shape)}"
                )
    handles = []
    if plan.num_configs > 1:
        plan.expand_at_layer = plan.first_differing_layer() if reuse_prefix else 0
        for index, layer in enumerate(encoder_layers(model)):
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


def _first_token_hook(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook on a layer's attention-output block (``BertSelfOutput`` and kin: ``(attention
    context, residual input)``): keep the first position only, so everything after it in the layer runs
    on one token."""
    return tuple(a[:, :1] if isinstance(a, torch.Tensor) and a.dim() == 3 else a for a in args)


@contextlib.contextmanager
def first_token_output(model: PreTrainedModel) -> Iterator[None]:
    """Inside the block the last layer outputs only position 0 (``[batch, 1, hidden]``).

    Exact for sequence classifiers whose head reads the first token alone: BERT's pooler, RoBERTa's and
    ELECTRA's classification heads. The last layer's attention-output projection and feed-forward network
    (about three quarters of its cost) then run on one token instead of the whole sequence; it saves the
    same share in every configuration of a sweep and in the naive method alike.
    """
    last = encoder_layers(model)[-1]
    output_block = getattr(getattr(last, "attention", None), "output", None)
    if not isinstance(output_block, nn.Module):
        raise TypeError(f"{type(model).__name__}: the last layer has no attention.output block to slice")
    handle = output_block.register_forward_pre_hook(_first_token_hook)
    try:
        yield
    finally:
        handle.remove()
