"""Several configurations in one forward pass: the batch is repeated once per configuration (configuration-major:
row ``c * B + b``), and only from the first layer where the configurations differ, so layers below it are computed
once (with whatever intervention the configurations share applied there): prefix reuse.

:func:`~bertology_core.engine.intervention.intervene` calls :func:`repeat_batch` for a plan with ``num_configs > 1``;
a plan's values then act on the rows :meth:`~bertology_core.engine.plan.InterventionPlan.rows` gives each layer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import PreTrainedModel

from bertology_core.engine.first_token import reads_first_token_only
from bertology_core.engine.plan import InterventionPlan
from bertology_core.engine.structure import parameter_names


def first_differing_layer(plan: InterventionPlan) -> int:
    """The first layer where some configurations' edits differ (the last intervened layer when they are all
    alike): layers below it compute the same thing in every configuration."""
    for edited, values in sorted(plan.edits.items()):
        if not bool((values == values[:1]).all()):
            return edited.layer
    layers = plan.intervened_layers
    return layers[-1] if layers else 0


def repeat_batch(model: PreTrainedModel, plan: InterventionPlan, reuse_prefix: bool) -> list[RemovableHandle]:
    """Repeat the batch of ``plan``'s forward passes once per configuration: at the first layer where the
    configurations differ (``reuse_prefix=True``) or at the first layer (``False``, the naive method). Sets
    ``plan.expand_at_layer``; at layer 0 the model's input is repeated (a hook, returned to be removed), at a later
    layer the layer's arguments (a callback of ``plan.tracker``, which goes with it)."""
    differing = plan.differing_layer if plan.differing_layer is not None else first_differing_layer(plan)
    plan.expand_at_layer = differing if reuse_prefix and not _head_reads_the_mask(model) else 0
    if plan.expand_at_layer == 0:  # repeat the input itself: everything between embeddings and layers sees it
        return [model.register_forward_pre_hook(_expand_inputs(plan), with_kwargs=True)]
    plan.tracker.on_enter.append(_expand_callback(plan))
    return []


def _expand_callback(plan: InterventionPlan):
    """Repeat the batch once per configuration as layers are entered (a layer callback of the depth tracker).

    At the expansion depth the hidden states and the attention mask are repeated; at later depths only the
    attention mask, which the encoder passes unchanged to every layer, still has the original batch size. Other
    arguments (rotary or relative position tables) have no batch dimension to repeat.
    """

    def callback(module: nn.Module, depth: int, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not plan.is_active or depth < plan.expand_at_layer:
            return None
        names = parameter_names(module)
        hidden = args[0] if args else kwargs[names[0]]
        first = depth == plan.expand_at_layer
        original = hidden.shape[0] if first else hidden.shape[0] // plan.num_configs

        def repeat(name: str, x):
            if ((first and name == names[0]) or name == "attention_mask") and isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == original:
                return x.repeat(plan.num_configs, *([1] * (x.dim() - 1)))
            return x

        return (tuple(repeat(name, a) for name, a in zip(names, args)),
                {name: repeat(name, value) for name, value in kwargs.items()})

    return callback


def _head_reads_the_mask(model: PreTrainedModel) -> bool:
    """Whether a task head after the encoder reads the input's attention mask (ModernBERT's mean pooling): the batch
    must then be repeated at the model's input, where the head sees it too, not inside the encoder."""
    return model is not model.base_model and not reads_first_token_only(model)


def _expand_inputs(plan: InterventionPlan):
    """Forward pre-hook on the whole model repeating every batch-sized input once per configuration: where the
    configurations differ from the first layer on, for the naive method, and for models whose head reads the attention
    mask (:func:`_head_reads_the_mask`); what runs between the embeddings and the first layer (DeBERTa-v2-xlarge's
    convolution) then sees the repeated batch too."""

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not plan.is_active:
            return None
        first = next((x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor) and x.dim() > 0), None)
        if first is None:
            return None
        batch = first.shape[0]

        def repeat(x):
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == batch:
                return x.repeat(plan.num_configs, *([1] * (x.dim() - 1)))
            return x

        return tuple(repeat(a) for a in args), {k: repeat(v) for k, v in kwargs.items()}

    return hook
