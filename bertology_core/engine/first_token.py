"""The last layer on the first position alone, for classifiers whose head reads only the first token's final state.

A separate saving from the interventions (:mod:`bertology_core.engine.intervention`): the last layer's computation
after its attention (the output projection and the feed-forward network, or the feed-forward network alone) runs on
the first position, where the head reads; attention itself, and any intervention in it, is unchanged; for a
mean-pooling head (ModernBERT's option) it does nothing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel

from bertology_core.engine.structure import DepthParts, structure, track_depth


def reads_first_token_only(model: PreTrainedModel) -> bool:
    """Whether the model is a sequence classifier whose head reads the first token's final state alone: BERT's pooler,
    the classification heads of RoBERTa, ELECTRA and XLM-R, DistilBERT's and ALBERT's, DeBERTa's ``ContextPooler``,
    and ModernBERT's with ``classifier_pooling="cls"`` (not with ``"mean"``, which averages every token)."""
    is_sequence_classifier = type(model).__name__.endswith("ForSequenceClassification")
    return is_sequence_classifier and getattr(model.config, "classifier_pooling", "cls") == "cls"


def first_token_cut(part: DepthParts) -> tuple[nn.Module, bool]:
    """Where the last layer can be cut to the first position, and whether every 3-D argument is cut there (True) or
    only the first. Where the attention output projection sits in its own block with the residual stream, called as
    ``block(context, residual)`` (BERT's ``BertSelfOutput`` and its kin in RoBERTa, ELECTRA, XLM-R and DeBERTa), that
    block and all after it run on one position; where the projection is inside the attention module (DistilBERT,
    ALBERT, ModernBERT), the cut is at the feed-forward network's input."""
    owner = next(m for m in part.layer.modules() if any(c is part.output_projection for c in m.children()))
    inside_attention = any(m is owner for m in part.attention.modules())
    takes_residual = len(inspect.signature(owner.forward).parameters) >= 2
    if not inside_attention and takes_residual:
        return owner, True
    return part.mlp_input, False


@contextlib.contextmanager
def first_token_output(model: PreTrainedModel) -> Iterator[None]:
    """Inside the block the last layer's computation after its attention runs on position 0 alone.

    Exact for sequence classifiers whose head reads the first token alone (:func:`reads_first_token_only`; for any
    other model the block changes nothing). Where the attention output block takes the context and the residual
    stream (BERT, RoBERTa, ELECTRA, XLM-R, DeBERTa) both are cut to the first position, so the output projection and
    the feed-forward network (about three quarters of the layer's cost) run on one token; elsewhere (DistilBERT,
    ALBERT, ModernBERT) the feed-forward network's input is cut and its output (``[batch, 1, hidden]``) joins the
    residual stream by broadcasting, right at position 0 (what the head reads) and unused elsewhere (two thirds of
    the layer's cost in DistilBERT and ALBERT, about half in ModernBERT-base, whose gated MLP is narrower). It saves the same share in every configuration of a sweep and in the naive method alike.
    """
    if not reads_first_token_only(model):
        yield
        return
    cut_at, every_argument = first_token_cut(structure(model)[-1])
    with track_depth(model) as tracker:
        final = tracker.num_layers - 1

        def first_position(module, args):
            if tracker.depth != final:  # weights shared across depth: only the last depth is cut
                return None
            if every_argument:
                return tuple(a[:, :1] if isinstance(a, torch.Tensor) and a.dim() == 3 else a for a in args)
            return (args[0][:, :1],) + tuple(args[1:])

        handle = cut_at.register_forward_pre_hook(first_position)
        try:
            yield
        finally:
            handle.remove()
