"""Physically smaller models from structured masks: heads and MLPs cut out of the weight matrices.

transformers 5 dropped ``prune_heads``; this does the same for every supported encoder, and for MLPs too, on the
parts :mod:`bertology_core.engine.structure` finds. A removed head's rows leave the head projections (query, key, value;
fused or not; DeBERTa's positional projections when not shared) and its columns leave the attention output
projection; the attention module's head count follows. A removed MLP keeps an input map with no outputs and an
output map ``Linear(0, hidden)`` without a bias (it adds nothing, and has nothing to train). A layer with no head left
keeps only its attention output bias, as the gated model does: its head projections give zeros of one head's width
(no parameters) and its output projection returns its bias. All of it is exact: the compacted model computes what
the engine computes with the same heads and MLPs gated to 0 (see tests).

Where weights are shared across depth (ALBERT), a unit is one set of weights serving several depths: it is cut only
when every depth it serves removes it (heads: when those depths remove the same heads); otherwise it stays and is
gated at the depths that remove it (:func:`residual_mask`), so the compacted model still computes the gated one.

Saved as ``model.safetensors`` + ``config.json`` + ``structure.json`` (the mask); :func:`load_compact`
rebuilds the architecture from the config, cuts it to the mask and loads the weights (no pickle).
"""

from __future__ import annotations

import json
import os
import types
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel

from bertology_core.engine.structure import DepthParts, depth_layers, structure
from bertology_core.engine.plan import StructureMask
from bertology_core.data.io import atomic_path

# attributes of an attention module that hold its number of heads (BERT-style, DistilBERT, others)
_HEAD_COUNT_ATTRIBUTES = ("num_attention_heads", "n_heads", "num_heads")


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int, bias: bool = True) -> nn.Linear:
    """A new Linear keeping ``index`` of its outputs (``dim=0``) or inputs (``dim=1``); ``bias=False``
    drops the bias."""
    weight = linear.weight.detach().index_select(dim, index).clone()
    bias = None if linear.bias is None or not bias else (linear.bias.detach().index_select(0, index).clone() if dim == 0 else linear.bias.detach().clone())
    with warnings.catch_warnings():  # a removed block is a Linear with zero inputs: nothing to initialise
        warnings.simplefilter("ignore", UserWarning)
        out = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None).to(weight.device, weight.dtype)
    out.weight.data.copy_(weight)
    if bias is not None:
        out.bias.data.copy_(bias)
    return out


class _Zeros(nn.Linear):
    """Stands for a head projection of a layer with no head left: zeros of one head's width (a Linear without inputs
    or parameters, so the structure trace still sees a projection), and the attention module runs one head on
    nothing: its context is zero."""

    def __init__(self, width: int):
        with warnings.catch_warnings():  # nothing to initialise
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(0, width, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states.new_zeros(*hidden_states.shape[:-1], self.out_features)


class _BiasOnly(nn.Linear):
    """Stands for the output projection of a layer with no head left: its bias alone (what it gives a zero context)."""

    def __init__(self, projection: nn.Linear):
        with warnings.catch_warnings():  # nothing to initialise but the bias, copied below
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(0, projection.out_features, bias=projection.bias is not None,
                             device=projection.weight.device, dtype=projection.weight.dtype)
        if projection.bias is not None:
            self.bias.data.copy_(projection.bias.detach())

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        shape = (*context.shape[:-1], self.out_features)
        return context.new_zeros(shape) if self.bias is None else self.bias.expand(shape)


def _keep_evaluation_mode(module: nn.Module, mode: bool = True) -> nn.Module:
    return module


def _pin_evaluation_mode(attention: nn.Module) -> None:
    """Keep a layer's attention module with no head left in evaluation mode even while its model trains: the one head
    of zeros it runs must draw no dropout masks that a removed module would not draw, so that re-fine-tuning a
    compacted subnetwork consumes the random stream as if the attention were gone. In every supported family but
    ALBERT (and ModernBERT with ``attention_dropout`` > 0) the module's only dropout acts on probabilities that
    multiply zero values; there it also drops out the output projection's bias, a difference only in training and
    only when no depth sharing the weights keeps a head."""
    attention.eval()
    attention.train = types.MethodType(_keep_evaluation_mode, attention)


def _replace(root: nn.Module, old: nn.Module, new: nn.Module) -> None:
    for parent in root.modules():
        for name, child in parent.named_children():
            if child is old:
                setattr(parent, name, new)


def _cuttable(model: PreTrainedModel, mask: StructureMask) -> tuple[set[int], set[int]]:
    """The depths whose heads, and whose MLP, can be cut out: every depth for unshared weights; for weights shared
    across depth, the depths of a module whose depths all remove the same heads (or all remove its MLP)."""
    depths_of: dict[int, list[int]] = {}
    for depth, layer in enumerate(depth_layers(model)):
        depths_of.setdefault(id(layer), []).append(depth)
    heads, mlps = set(), set()
    for depths in depths_of.values():
        if all((mask.heads[d] == mask.heads[depths[0]]).all() for d in depths):
            heads.update(depths)
        if all(not mask.mlps[d] for d in depths) or all(mask.mlps[d] for d in depths):
            mlps.update(depths)
    return heads, mlps


def residual_mask(model: PreTrainedModel, mask: StructureMask) -> StructureMask:
    """What :func:`compact` cannot cut and must stay gated: heads and MLPs removed at some depths of weights shared
    with depths that keep them (all kept, i.e. nothing to gate, for a model without shared weights)."""
    heads, mlps = _cuttable(model, mask)
    residual = StructureMask.for_model(model)
    for depth in range(len(mask.mlps)):
        if depth not in heads:
            residual.heads[depth] = mask.heads[depth]
        if depth not in mlps:
            residual.mlps[depth] = mask.mlps[depth]
    return residual


def compact(model: PreTrainedModel, mask: StructureMask) -> PreTrainedModel:
    """Cut the removed heads and MLPs of ``mask`` out of ``model`` (in place) and return it; what cannot be cut is
    in :func:`residual_mask` (call it before compacting)."""
    cut_heads, cut_mlps = _cuttable(model, mask)
    parts = structure(model)
    heads = int(model.config.num_attention_heads)
    # head rows are found from the configured geometry: a model already cut would be cut wrong
    all_heads = heads * int(getattr(model.config, "attention_head_size", None) or model.config.hidden_size // heads)
    for depth, part in enumerate(parts):
        if part.output_projection.in_features != all_heads:
            raise ValueError(f"{type(model).__name__} is already compacted (layer {depth}'s attention output projection "
                             f"reads {part.output_projection.in_features} values, the config's heads give {all_heads}). "
                             "Fix: compact the full model once with the final mask.")
    done: set[int] = set()
    for depth, part in enumerate(parts):
        if id(part.layer) in done:  # shared weights: cut once, at the first depth they serve
            continue
        done.add(id(part.layer))
        if depth in cut_heads:
            _cut_heads(model, part, np.flatnonzero(mask.heads[depth]))
        if depth in cut_mlps and not mask.mlps[depth]:
            empty = torch.zeros(0, dtype=torch.long, device=part.mlp_output.weight.device)
            _replace(part.layer, part.mlp_input, _slice_linear(part.mlp_input, empty, dim=0))
            # no bias: the gated MLP's whole output, bias included, is multiplied by 0, and when a compacted
            # subnetwork is re-fine-tuned a bias here would learn a vector the masked model cannot have
            _replace(part.layer, part.mlp_output, _slice_linear(part.mlp_output, empty, dim=1, bias=False))
    return model


def _cut_heads(model: PreTrainedModel, part: DepthParts, kept: np.ndarray) -> None:
    heads = int(model.config.num_attention_heads)
    if len(kept) == heads:
        return
    head_size = part.output_projection.in_features // heads
    device = part.output_projection.weight.device

    def rows(chunks: int) -> torch.Tensor:  # a projection's rows are [chunk (q, k, v when fused), head, head_size]
        index = [chunk * heads * head_size + torch.arange(h * head_size, (h + 1) * head_size)
                 for chunk in range(chunks) for h in kept]
        return (torch.cat(index) if index else torch.zeros(0, dtype=torch.long)).to(device)

    for projection in part.head_projections:
        chunks = projection.out_features // (heads * head_size)
        new = _slice_linear(projection, rows(chunks), dim=0) if len(kept) else _Zeros(chunks * head_size)
        _replace(part.layer, projection, new)
    if len(kept):
        _replace(part.layer, part.output_projection, _slice_linear(part.output_projection, rows(1), dim=1))
    else:
        _replace(part.layer, part.output_projection, _BiasOnly(part.output_projection))
    if not len(kept):
        _pin_evaluation_mode(part.attention)
    count = max(len(kept), 1)  # a layer with no head runs one head of zeros
    for name in _HEAD_COUNT_ATTRIBUTES:
        if isinstance(getattr(part.attention, name, None), int):
            setattr(part.attention, name, count)
    if isinstance(getattr(part.attention, "all_head_size", None), int):
        part.attention.all_head_size = count * head_size


def kept_parameter_share(model: PreTrainedModel, mask: StructureMask) -> float:
    """Share of the encoder layers' parameters a structure mask keeps, counted per depth: what the layers would hold
    if every depth had its own weights, less each removed head's projection rows and output columns and each removed
    MLP. For unshared weights it is what compaction leaves (``parameter_count`` after / before); for weights shared
    across depth (ALBERT), where a unit gated at some depths removes no parameter, it is the share the mask keeps."""
    heads = int(model.config.num_attention_heads)
    total = removed = 0
    for depth, part in enumerate(structure(model)):
        total += parameter_count(part.layer)
        head_size = part.output_projection.in_features // heads
        per_head = head_size * part.output_projection.out_features + sum(
            (p.out_features // (heads * head_size)) * head_size * (p.in_features + (p.bias is not None)) for p in part.head_projections)
        removed += per_head * int((~mask.heads[depth]).sum())
        if not mask.mlps[depth]:
            removed += parameter_count(part.mlp_input) + parameter_count(part.mlp_output)
    return 1 - removed / total


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_compact(model: PreTrainedModel, mask: StructureMask, folder: str | os.PathLike[str]) -> None:
    """Write the compacted model atomically: ``model.safetensors``, ``config.json``, ``structure.json``."""
    with atomic_path(folder) as tmp:
        tmp.mkdir()
        model.config.to_json_file(tmp / "config.json")
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(state, tmp / "model.safetensors")
        kept = {"heads": mask.heads.astype(int).tolist(), "mlps": mask.mlps.astype(int).tolist()}
        (tmp / "structure.json").write_text(json.dumps(kept))


def load_compact(folder: str | os.PathLike[str]) -> tuple[PreTrainedModel, StructureMask]:
    """The compacted model and its mask. Where weights are shared across depth, what could not be cut must still be
    gated: run it under ``intervene(model, residual_mask(model, mask).plan())`` (an empty plan for unshared weights)."""
    folder = Path(folder)
    kept = json.loads((folder / "structure.json").read_text())
    mask = StructureMask(np.array(kept["heads"], dtype=bool), np.array(kept["mlps"], dtype=bool))
    config = AutoConfig.from_pretrained(folder)
    model = compact(AutoModelForSequenceClassification.from_config(config, dtype=torch.float32), mask)
    model.load_state_dict(load_file(folder / "model.safetensors"), strict=True)
    return model.eval(), mask
