"""The engine's attention function, registered with transformers' attention interface (transformers 5).

transformers 5 removed ``head_mask``, ``prune_heads`` and attention weights under SDPA.
The engine replaces them with a single mechanism, in the style of transformers'
own ``AttentionInterface`` and TransformerLens's hook points:

- ``bertology_attention`` is eager attention (``softmax(QK^T * scaling + mask) V``)
  registered as ``attn_implementation="bertology"`` together with the eager
  attention *mask* (``AttentionMaskInterface``; without it padding would be ignored).
  Without an interceptor it computes exactly what ``"eager"`` computes.
- What it does beyond that is asked by the active :class:`Interceptor` (a ``ContextVar``, set and reset in
  ``finally`` by :func:`intercepting`; nothing is global and nothing leaks between calls): the intervention plan
  that :func:`~bertology_core.engine.intervention.intervene` makes active, or the trace that finds a model's
  structure (:func:`~bertology_core.engine.structure.structure`). Its hook is given each attention module's
  probabilities and returns those the module goes on with. One interceptor is active at a time: hooks that an
  intervention installs on other modules act only while its owner is the active one, so a trace, or a nested
  plan, sets the outer plan aside.
- DeBERTa-v2/v3 computes attention in its own module, not through ``AttentionInterface``
  (:func:`uses_attention_interface`): there the engine applies the same plan where the probabilities leave the
  module's dropout (:func:`~bertology_core.engine.structure.probability_modules`).

This module imports nothing from the rest of the engine.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ATTN_IMPLEMENTATION = "bertology"

# hook(attention module, probabilities [batch, head, query, key], attention_mask) -> the probabilities to go on with
ProbabilityHook = Callable[[nn.Module, torch.Tensor, torch.Tensor | None], torch.Tensor]


@dataclass(frozen=True, eq=False)
class Interceptor:
    """Who the engine's attention serves in the running context: ``owner`` (an intervention plan, or the structure
    trace) and its ``hook`` on the attention probabilities. ``scales_only(module)`` says that for this module the hook
    at most multiplies each head's probabilities by a number (a head scale: no uniform attention, no capture), so it
    may act on the head's output instead, ``(s P) V = s (P V)``, and the probabilities need not exist."""

    owner: object
    hook: ProbabilityHook
    scales_only: Callable[[nn.Module], bool] | None = None


# Devices where a pass that needs no probabilities runs fused attention (SDPA) rather than the eager product: on a GPU
# it saves the [batch, head, query, key] tensors and their memory traffic. A CPU keeps the eager product, whose float32
# results the CPU profile's were validated against bit for bit (SDPA sums in another order: about 1e-7 apart).
FUSED_DEVICES = frozenset({"cuda"})


ACTIVE: contextvars.ContextVar[Interceptor | None] = contextvars.ContextVar("bertology_interceptor", default=None)


def active_owner() -> object | None:
    """The owner of the active interceptor (None when none is active)."""
    active = ACTIVE.get()
    return None if active is None else active.owner


@contextlib.contextmanager
def intercepting(interceptor: Interceptor | None) -> Iterator[None]:
    """Inside the block ``interceptor`` is the active one (None: no one's); the one before is restored after."""
    token = ACTIVE.set(interceptor)
    try:
        yield
    finally:
        ACTIVE.reset(token)


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
    """Eager attention, plus whatever the active :class:`Interceptor` asks of the running layer (an active
    ``InterventionPlan``'s edits and capture). (A local-attention layer's window, ModernBERT's ``sliding_window``,
    is already in ``attention_mask``.) Where the interceptor only scales heads here, on a device of
    :data:`FUSED_DEVICES` and without attention dropout, fused attention computes the output and no probabilities
    are returned."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    active = ACTIVE.get()
    if (active is not None and active.scales_only is not None and query.device.type in FUSED_DEVICES
            and not (module.training and dropout > 0) and active.scales_only(module)):
        mask = attention_mask
        if mask is not None and mask.is_floating_point() and mask.dtype != query.dtype:
            # under autocast the product runs in bfloat16, where float32's minimum overflows to -inf (a query with no
            # key to attend to would give NaN instead of eager's uniform row): rebuild the mask in the query's dtype
            mask = torch.where(mask == 0, 0.0, torch.finfo(query.dtype).min).to(query.dtype)
        output = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
        # [batch, head, query_pos, head_dim] scaled per head, in float32 as eager scales its float32 probabilities
        output = active.hook(module, output.float(), attention_mask).to(output.dtype)
        return output.transpose(1, 2).contiguous(), None
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, head, query_pos, key_pos]
    if attention_mask is not None:
        logits = logits + attention_mask
    probs = nn.functional.softmax(logits, dim=-1)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)

    if active is not None:
        probs = active.hook(module, probs, attention_mask)

    output = torch.matmul(probs, value).transpose(1, 2).contiguous()  # [batch, query_pos, head, head_dim]
    return output, probs


AttentionInterface.register(ATTN_IMPLEMENTATION, bertology_attention)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


def uses_attention_interface(model: PreTrainedModel) -> bool:
    """Whether the model computes attention through transformers' ``AttentionInterface`` (where the engine's
    registered function serves it) rather than inside its own module (DeBERTa-v2/v3)."""
    return bool(getattr(model, "_supports_attention_backend", False))


def use_engine(model: PreTrainedModel) -> PreTrainedModel:
    """Switch ``model`` to the bertology attention (in place) and return it. A model that computes attention in
    its own module (DeBERTa) keeps it: the engine reaches its probabilities through hooks while intervening."""
    if uses_attention_interface(model):
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model
