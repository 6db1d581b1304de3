"""Outlier LayerNorm dimensions (Kovaleva et al. 2021, "BERT Busters") in a model: its LayerNorm parameters per layer,
and its dev predictions with the outliers, or as many random dimensions, disabled through the attention engine.

The criterion and the configurations are in :mod:`bertology_core.outliers.stats` (the definitions, from the paper,
are in its docstring). Disabling a dimension is the engine's LayerNorm-dimension edit (``attention_norm.scale`` and
``output_norm.scale`` at 0, every layer), which equals zeroing that dimension's LayerNorm weight and bias in a copy of
the model; several configurations share each forward pass by the engine's batch expansion, from the first layer on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedModel

from bertology_core.engine.plan import ATTENTION_NORM_SCALE, OUTPUT_NORM_SCALE, InterventionPlan, per_layer
from bertology_core.engine.structure import UnsupportedStructure, missing_part_reason, structure
from bertology_core.inputs.batching import Encoded
from bertology_core.models.checkpoint import ArrayCheckpoint
from bertology_core.scoring import plans as scoring
from bertology_core.outliers.stats import NORMS, Criterion, DimensionSet, outlier_table, standardised

POINT_OF_NORM = {"output_norm": OUTPUT_NORM_SCALE, "attention_norm": ATTENTION_NORM_SCALE}


def layernorm_parameters(model: PreTrainedModel) -> pl.DataFrame:
    """Every depth's output and attention-output LayerNorm weights and biases: ``norm, layer, dimension, weight,
    bias`` (a LayerNorm without a bias has bias 0); a LayerNorm shared across depth (ALBERT) appears once, at its first
    depth. Raises :class:`~bertology_core.engine.structure.UnsupportedStructure` for a
    pre-LayerNorm encoder, whose norms are not the residual stream (the criterion does not apply)."""
    frames, seen = [], set()
    for layer, part in enumerate(structure(model)):
        for norm in NORMS:
            module = getattr(part, norm)
            if module is None:
                raise UnsupportedStructure(missing_part_reason(model, norm))
            if id(module) in seen:  # shared across depth (ALBERT): one LayerNorm, counted once, at its first depth
                continue
            seen.add(id(module))
            weight = module.weight.detach().float().cpu().numpy()
            bias = np.zeros_like(weight) if getattr(module, "bias", None) is None else module.bias.detach().float().cpu().numpy()
            frames.append(pl.DataFrame({"norm": norm, "layer": layer, "dimension": np.arange(len(weight)),
                                        "weight": weight.astype(float), "bias": bias.astype(float)}))
    return pl.concat(frames).with_columns(pl.col("layer").cast(pl.Int16), pl.col("dimension").cast(pl.Int32))


def build_plan(configs: Sequence[DimensionSet], num_layers: int, hidden: int) -> InterventionPlan:
    """One engine plan evaluating ``configs`` side by side: each configuration's dimensions at 0 in its placement's
    LayerNorms of every layer (configuration-major batch expansion)."""
    edits = {}
    for norm, point in POINT_OF_NORM.items():
        values = torch.ones(len(configs), hidden)
        for index, config in enumerate(configs):
            if norm in config.norms:
                if any(not 0 <= d < hidden for d in config.dimensions):
                    raise ValueError(f"{config.name}: dimensions outside the model's {hidden}: {config.dimensions}")
                values[index, list(config.dimensions)] = 0.0
        if not bool((values == 1).all()):
            edits.update(per_layer(point, {layer: values for layer in range(num_layers)}))
    return InterventionPlan(len(configs), edits)


def evaluate_dimension_sets(model: PreTrainedModel, data: Encoded, configs: Sequence[DimensionSet],
                            rows_per_pass: int = 48, checkpoint: ArrayCheckpoint | None = None) -> scoring.PassLogits:
    """Logits ``[configs, examples, labels]`` with each configuration's dimensions disabled, the first configuration
    (the intact model) in every pass. Every configuration
    differs from the first layer on, so nothing is shared between them but the embeddings; they run ``rows_per_pass``
    rows at a time (configurations x examples), the row count at which the disabling sweeps run fastest per row.
    ``checkpoint``: where a killed job resumes (:func:`~bertology_core.scoring.plans.evaluate_plans`)."""
    num_layers, hidden = model.config.num_hidden_layers, model.config.hidden_size
    per_pass = max(1, min(len(configs), rows_per_pass))
    groups = [list(range(start, min(start + per_pass, len(configs)))) for start in range(0, len(configs), per_pass)]
    return scoring.evaluate_plans(model, data, len(configs), groups,
                                  lambda group: build_plan([configs[i] for i in group], num_layers, hidden), rows_per_pass,
                                  reference=0, checkpoint=checkpoint)


def find_outliers(model: PreTrainedModel, criterion: Criterion) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """The model's LayerNorm parameters with their ``z`` (:func:`~bertology_core.outliers.stats.standardised`), its
    per-dimension outlier table, and why the criterion does not apply ("" when it does): for a pre-LayerNorm encoder
    both tables are empty and the reason says why, so a workflow over several encoders goes on."""
    try:
        parameters = layernorm_parameters(model)
    except UnsupportedStructure as error:
        return pl.DataFrame(), pl.DataFrame(), str(error)
    return standardised(parameters), outlier_table(parameters, criterion), ""
