"""Sites and plans: what the engine does in one forward pass, and where.

An ``InterventionPlan`` (made active by :func:`~bertology_core.engine.intervention.intervene`) asks for:

* capture: each requested layer's probabilities ``[batch, head, query, key]`` go
  to a sink;
* edits at named *sites*, ``site(layer, point)`` (named ``blocks.<layer>.<point>`` as
  TransformerLens names its hook points); a plan is a mapping of site to values, one row per
  configuration, and every point follows one rule (:data:`POINTS`: its values' trailing shape and
  where they act):
  - ``heads.scale`` ``[configs, heads]``: a multiplicative scale on each head's probabilities
    (0 is Michel et al.'s masking, a tensor with ``requires_grad`` is a gate whose gradient gives
    head importance);
  - ``heads.uniform`` ``[configs, heads]`` booleans: Kovaleva et al.'s disabling, the head
    attends equally, 1/L, to the L keys its query may attend to: the non-padding tokens of its
    example and, in a local-attention layer (ModernBERT's sliding window), only those inside the
    query's window (others get 0);
  - ``mlp.scale`` ``[configs]``: a multiplicative scale on the layer's feed-forward (MLP) output
    before the residual connection, Prasanna et al. 2020's MLP mask (0 removes the MLP, a tensor
    with ``requires_grad`` is a gate whose gradient gives MLP importance);
  - ``attention_norm.scale`` and ``output_norm.scale`` ``[configs, hidden]``: a multiplicative
    scale on each hidden dimension of the layer's LayerNorm after attention (BERT's
    ``attention.output.LayerNorm``) or at its output (``output.LayerNorm``), which is editing that
    dimension's LayerNorm weight and bias alike: 0 is Kovaleva et al. 2021's disabling of an
    outlier dimension (post-LayerNorm encoders only; :func:`~bertology_core.engine.structure.structure`);
* per-example edits (``per_example=True``): the values are given per batch row instead of per
  configuration, so one backward pass of the summed loss gives every example's own gradient;
* several configurations in one forward pass (``num_configs``; :mod:`bertology_core.engine.expansion`).

Why sites rather than a field per kind of edit: the validation, the search for the first layer
where configurations differ and the hooks that apply an edit are one loop over sites, so a new kind
of edit (the LayerNorm dimensions) is one entry of :data:`POINTS` and, if it acts on a module's
output, the module that :class:`~bertology_core.engine.structure.DepthParts` names for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import active_owner
from bertology_core.engine.structure import DepthTracker

# sink(layer_idx, probs [batch, head, query, key], key_is_real [batch, key]) -> None
AttentionSink = Callable[[int, torch.Tensor, torch.Tensor], None]

HEAD_SCALE = "heads.scale"
HEAD_UNIFORM = "heads.uniform"
MLP_SCALE = "mlp.scale"
ATTENTION_NORM_SCALE = "attention_norm.scale"
OUTPUT_NORM_SCALE = "output_norm.scale"


@dataclass(frozen=True)
class Point:
    """What an edit point takes and where it acts: ``trailing`` names the config size of each value's trailing
    dimension (``num_attention_heads``, ``hidden_size``; none for one value per row); ``module`` is the
    :class:`~bertology_core.engine.structure.DepthParts` field whose output it multiplies (None: it acts on the
    attention probabilities)."""

    trailing: str | None
    module: str | None
    boolean: bool = False


POINTS: dict[str, Point] = {
    HEAD_SCALE: Point("num_attention_heads", None),
    HEAD_UNIFORM: Point("num_attention_heads", None, boolean=True),
    MLP_SCALE: Point(None, "mlp_output"),
    ATTENTION_NORM_SCALE: Point("hidden_size", "attention_norm"),
    OUTPUT_NORM_SCALE: Point("hidden_size", "output_norm"),
}


class Site(tuple):
    """Where an edit acts: ``(layer, point)``, named ``blocks.<layer>.<point>``. Build it with :func:`site`."""

    __slots__ = ()

    @property
    def layer(self) -> int:
        return self[0]

    @property
    def point(self) -> str:
        return self[1]

    def __str__(self) -> str:
        return f"blocks.{self[0]}.{self[1]}"


def site(layer: int, point: str) -> Site:
    """The site of ``point`` (one of :data:`POINTS`) in layer ``layer`` (zero-indexed depth)."""
    if point not in POINTS:
        raise ValueError(f"unknown edit point {point!r}; the engine's points are {sorted(POINTS)}")
    return Site((int(layer), point))


def per_layer(point: str, values: dict[int, torch.Tensor]) -> dict[Site, torch.Tensor]:
    """Edits of one point in several layers: ``{layer: values}`` -> ``{site(layer, point): values}``."""
    return {site(layer, point): value for layer, value in values.items()}


@dataclass
class InterventionPlan:
    """What the engine does in one forward pass.

    ``num_configs`` configurations share the input batch of size B; ``edits`` maps each edited
    :func:`site` to its values, ``[num_configs, *trailing]`` (:data:`POINTS`). With ``per_example``
    (one configuration) they are ``[B, *trailing]`` instead: one value per example of the batch.
    A site without an entry runs untouched in every configuration.
    """

    num_configs: int = 1
    edits: dict[Site, torch.Tensor] = field(default_factory=dict)
    per_example: bool = False
    sink: AttentionSink | None = None
    capture_layers: frozenset[int] | None = None  # None: every layer (when a sink is given)
    expand_at_layer: int | None = None  # set by ``intervene``: where the batch is repeated
    # set by ``intervene`` once: the first layer where the configurations' edits differ (expansion.first_differing_layer)
    differing_layer: int | None = field(default=None, init=False, repr=False, compare=False)
    # set by ``intervene``: the depth tracker of the model the plan is active for, and the ids of its attention modules
    tracker: DepthTracker | None = field(default=None, init=False, repr=False, compare=False)
    attention_ids: frozenset[int] = field(default=frozenset(), init=False, repr=False, compare=False)

    @property
    def depth(self) -> int | None:
        """The depth of the layer running in the model the plan is active for (None outside a forward pass)."""
        return None if self.tracker is None else self.tracker.depth

    @property
    def is_active(self) -> bool:
        """Whether this plan is the engine's active one (not set aside by a nested plan or a structure trace)."""
        return active_owner() is self

    @property
    def intervened_layers(self) -> list[int]:
        return sorted({s.layer for s in self.edits})

    def values(self, layer: int, point: str) -> torch.Tensor | None:
        """The values of ``point`` in ``layer``, or None where the plan does not edit it."""
        return self.edits.get(Site((layer, point)))

    def rows(self, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, int]:
        """Per-configuration values of ``layer`` and the number of configurations in its batch:
        below the expansion layer the batch is not repeated yet and every row is alike."""
        if self.expand_at_layer is not None and layer < self.expand_at_layer:
            return values[:1], 1
        return values, self.num_configs


@dataclass(frozen=True)
class StructureMask:
    """Which heads (``[layers, heads]``) and MLPs (``[layers]``) are kept (True) in a structured subnetwork."""

    heads: np.ndarray
    mlps: np.ndarray

    @classmethod
    def full(cls, num_layers: int, num_heads: int) -> "StructureMask":
        return cls(np.ones((num_layers, num_heads), dtype=bool), np.ones(num_layers, dtype=bool))

    @classmethod
    def for_model(cls, model: PreTrainedModel) -> "StructureMask":
        return cls.full(model.config.num_hidden_layers, model.config.num_attention_heads)

    @property
    def heads_kept(self) -> int:
        return int(self.heads.sum())

    @property
    def mlps_kept(self) -> int:
        return int(self.mlps.sum())

    def without(self, heads: list[tuple[int, int]] = (), mlps: list[int] = ()) -> "StructureMask":
        new_heads, new_mlps = self.heads.copy(), self.mlps.copy()
        for layer, head in heads:
            new_heads[layer, head] = False
        for layer in mlps:
            new_mlps[layer] = False
        return StructureMask(new_heads, new_mlps)

    def plan(self) -> InterventionPlan:
        """An engine plan masking (gate 0) every removed head and MLP; layers left whole are untouched."""
        scale = {
            layer: torch.from_numpy(self.heads[layer].astype(np.float32))[None, :]
            for layer in range(self.heads.shape[0])
            if not self.heads[layer].all()
        }
        mlp_scale = {layer: torch.zeros(1) for layer in range(self.mlps.shape[0]) if not self.mlps[layer]}
        return InterventionPlan(edits={**per_layer(HEAD_SCALE, scale),
                                       **per_layer(MLP_SCALE, mlp_scale)})
