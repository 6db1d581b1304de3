"""Physically smaller models from structured masks: heads and MLPs cut out of the weight matrices.

transformers 5 dropped ``prune_heads``; this does the same for BERT-family encoders, and for MLPs too.
A removed head's rows leave the query, key and value projections and its columns leave the attention
output projection; BERT's attention infers the number of heads from the projection size, so nothing else
changes. A removed MLP becomes an empty feed-forward block whose output projection is ``Linear(0, hidden)``
without a bias (it adds nothing, and has nothing to train). Both are exact: the compacted model computes what the engine computes
with the same heads and MLPs gated to 0 (see tests). A layer with no head left keeps only its attention
output bias, as the gated model does.

Saved as ``model.safetensors`` + ``config.json`` + ``structure.json`` (the mask); :func:`load_compact`
rebuilds the architecture from the config, cuts it to the mask and loads the weights (no pickle).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel

from bertology_core import attention
from bertology_core.importance import StructureMask
from bertology_core.io import atomic_path


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


class _Empty(nn.Module):
    """Stands for a removed block: maps ``[..., hidden]`` to ``[..., 0]`` (and no attention weights)."""

    def __init__(self, returns_weights: bool):
        super().__init__()
        self.returns_weights = returns_weights

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        empty = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
        return (empty, None) if self.returns_weights else empty


def compact(model: PreTrainedModel, mask: StructureMask) -> PreTrainedModel:
    """Cut the removed heads and MLPs of ``mask`` out of ``model`` (in place) and return it."""
    for index, layer in enumerate(attention.encoder_layers(model)):
        self_attention = layer.attention.self
        head_size = self_attention.attention_head_size
        kept = np.flatnonzero(mask.heads[index])
        if len(kept) < mask.heads.shape[1]:
            rows = torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in kept]) if len(kept) else torch.zeros(0, dtype=torch.long)
            rows = rows.to(layer.attention.output.dense.weight.device)
            layer.attention.output.dense = _slice_linear(layer.attention.output.dense, rows, dim=1)
            if len(kept):
                for name in ("query", "key", "value"):
                    setattr(self_attention, name, _slice_linear(getattr(self_attention, name), rows, dim=0))
                self_attention.num_attention_heads = len(kept)
                self_attention.all_head_size = len(kept) * head_size
            else:
                layer.attention.self = _Empty(returns_weights=True)
        if not mask.mlps[index]:
            empty = torch.zeros(0, dtype=torch.long, device=layer.output.dense.weight.device)
            layer.intermediate = _Empty(returns_weights=False)
            # no bias: the gated MLP's whole output, bias included, is multiplied by 0, and when a compacted
            # subnetwork is re-fine-tuned a bias here would learn a vector the masked model cannot have
            layer.output.dense = _slice_linear(layer.output.dense, empty, dim=1, bias=False)
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_compact(model: PreTrainedModel, mask: StructureMask, folder: str | os.PathLike[str]) -> None:
    """Write the compacted model atomically: ``model.safetensors``, ``config.json``, ``structure.json``."""
    with atomic_path(folder) as tmp:
        tmp.mkdir()
        model.config.to_json_file(tmp / "config.json")
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(state, tmp / "model.safetensors")
        structure = {"heads": mask.heads.astype(int).tolist(), "mlps": mask.mlps.astype(int).tolist()}
        (tmp / "structure.json").write_text(json.dumps(structure))


def load_compact(folder: str | os.PathLike[str]) -> tuple[PreTrainedModel, StructureMask]:
    folder = Path(folder)
    structure = json.loads((folder / "structure.json").read_text())
    mask = StructureMask(np.array(structure["heads"], dtype=bool), np.array(structure["mlps"], dtype=bool))
    config = AutoConfig.from_pretrained(folder)
    model = compact(AutoModelForSequenceClassification.from_config(config), mask)
    model.load_state_dict(load_file(folder / "model.safetensors"), strict=True)
    return model.eval(), mask
