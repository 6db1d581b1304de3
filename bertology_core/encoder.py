"""Structure of BERT-family encoders that the engine and training rely on, and a saving for classifiers.

Kept apart from :mod:`bertology_core.attention` so that fine-tuning (which uses
:func:`first_token_output`) does not depend on the attention engine's code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel


def encoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The stack of transformer layers of a BERT-family encoder (BERT, RoBERTa, ELECTRA, ...)."""
    base = model.base_model
    encoder = getattr(base, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__}: no encoder.layer ModuleList; only BERT-style encoders are supported")
    return layers


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
