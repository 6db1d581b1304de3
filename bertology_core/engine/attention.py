"""One intervention-aware attention for every analysis (capture, disable, gate), on transformers 5.

transformers 5 removed ``head_mask``, ``prune_heads`` and attention weights under SDPA.
This module replaces them with a single mechanism, in the style of transformers'
own ``AttentionInterface`` and TransformerLens's hook points:

- ``bertology_attention`` is eager attention (``softmax(QK^T * scaling + mask) V``)
  registered as ``attn_implementation="bertology"`` together with the eager
  attention *mask* (``AttentionMaskInterface``; without it padding would be ignored).
  Without a plan it computes exactly what ``"eager"`` computes.
- Layers are counted by depth (:mod:`bertology_core.engine.encoder` finds them from the model's
  structure; ALBERT's shared layer is a different layer at each depth). DeBERTa-v2/v3
  computes attention in its own module, not through ``AttentionInterface``: there the
  engine applies the same plan where the probabilities leave the module's dropout.
- What it does beyond that is read from an ``InterventionPlan`` made active by the
  ``intervene`` context manager (a ``ContextVar``, reset in ``finally``; nothing is
  global and nothing leaks between calls):
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
      outlier dimension (post-LayerNorm encoders only; :func:`~bertology_core.engine.encoder.structure`);
  * per-example edits (``per_example=True``): the values are given per batch row instead of per
    configuration, so one backward pass of the summed loss gives every example's own gradient;
  * several configurations in one forward pass: the batch is repeated once per
    configuration (configuration-major: row ``c * B + b``), and only from the first
    layer where the configurations differ, so layers below it are computed once
    (with whatever intervention the configurations share applied there).

Why sites rather than a field per kind of edit: the validation, the search for the first layer
where configurations differ and the hooks that apply an edit are one loop over sites, so a new kind
of edit (the LayerNorm dimensions) is one entry of :data:`POINTS` and, if it acts on a module's
output, the module that :class:`~bertology_core.engine.encoder.DepthParts` names for it.

``first_token_output`` (from :mod:`bertology_core.engine.encoder`, re-exported here) is a separate saving
for classifiers whose head reads only the first token's final state: the last layer's
feed-forward network is computed for that token alone (attention itself, and any
intervention in it, is unchanged); for a mean-pooling head (ModernBERT's option) it does nothing.
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

from bertology_core.engine import encoder
from bertology_core.engine.encoder import TRACE, encoder_layers, first_token_output  # noqa: F401 - part of this module's API

ATTN_IMPLEMENTATION = "bertology"

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
    :class:`~bertology_core.engine.encoder.DepthParts` field whose output it multiplies (None: it acts on the attention
    probabilities)."""

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
    _tracker: encoder.DepthTracker | None = field(default=None, init=False, repr=False, compare=False)
    _mask: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)  # DeBERTa: the running call's
    _attentions: frozenset[int] = field(default=frozenset(), init=False, repr=False, compare=False)  # ids of its model's

    @property
    def depth(self) -> int | None:
        """The depth of the layer running in the model the plan is active for (None outside a forward pass)."""
        return None if self._tracker is None else self._tracker.depth

    @property
    def intervened_layers(self) -> list[int]:
        return sorted({s.layer for s in self.edits})

    def values(self, layer: int, point: str) -> torch.Tensor | None:
        """The values of ``point`` in ``layer``, or None where the plan does not edit it."""
        return self.edits.get(Site((layer, point)))

    def first_differing_layer(self) -> int:
        """The first layer where some configurations' edits differ (the last intervened layer when they are all
        alike): layers below it compute the same thing in every configuration."""
        for edited, values in sorted(self.edits.items()):
            if not bool((values == values[:1]).all()):
                return edited.layer
        layers = self.intervened_layers
        return layers[-1] if layers else 0

    def _rows(self, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, int]:
        """Per-configuration values of ``layer`` and the number of configurations in its batch:
        below the expansion layer the batch is not repeated yet and every row is alike."""
        if self.expand_at_layer is not None and layer < self.expand_at_layer:
            return values[:1], 1
        return values, self.num_configs


_ACTIVE_PLAN: contextvars.ContextVar[InterventionPlan | None] = contextvars.ContextVar("bertology_plan", default=None)


def _allowed_keys(attention_mask: torch.Tensor | None, keys: int, device: torch.device) -> torch.Tensor:
    """``[batch or 1, 1, query or 1, key]`` booleans: True where the query may attend to the key (not padding, and
    inside the window of a local-attention layer). Masks come additive (eager: 0 or the dtype's minimum), boolean
    (True means attend) or as 0/1 integers (DeBERTa)."""
    if attention_mask is None:
        return torch.ones(1, 1, 1, keys, dtype=torch.bool, device=device)
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point():
        return attention_mask == 0
    return attention_mask != 0


def _key_is_real(allowed: torch.Tensor, batch: int) -> torch.Tensor:
    """``[batch, key]`` booleans: True where some query may attend to the key, i.e. it is a real (non-padding) token."""
    return allowed.any(dim=-2)[:, 0].expand(batch, -1)


def _per_row(plan: InterventionPlan, values: torch.Tensor, layer: int, like: torch.Tensor, dtype: torch.dtype | None = None,
             trailing_last: bool = False) -> torch.Tensor:
    """Values of ``layer`` for each row of the batch tensor ``like`` (``[rows, ...]``), shaped to broadcast
    against it: ``[num_configs, ...]`` repeated configuration-major, or per-example values as they are. The values'
    trailing dimension (heads, hidden) lines up with ``like``'s second dimension (probabilities ``[rows, head, ...]``)
    or, with ``trailing_last``, its last (a module's output ``[rows, position, hidden]``)."""
    if plan.per_example:
        per_row = values
    else:
        rows, num_configs = plan._rows(values, layer)
        per_row = rows.repeat_interleave(like.shape[0] // num_configs, dim=0)
    per_row = per_row.to(like.device, dtype or per_row.dtype)
    ones = [1] * (like.dim() - per_row.dim())
    if trailing_last:
        return per_row.reshape(per_row.shape[0], *ones, *per_row.shape[1:])
    return per_row.reshape(*per_row.shape, *ones)


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
    """Eager attention, plus whatever the active ``InterventionPlan`` asks of the running layer. (A local-attention
    layer's window, ModernBERT's ``sliding_window``, is already in ``attention_mask``.)"""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, head, query_pos, key_pos]
    if attention_mask is not None:
        logits = logits + attention_mask
    probs = nn.functional.softmax(logits, dim=-1)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)

    if (trace := TRACE.get()) is not None:
        trace(module)
    plan = _ACTIVE_PLAN.get()
    if plan is not None and plan.depth is not None and id(module) in plan._attentions:  # not another model's attention
        probs = _apply_plan(plan, plan.depth, probs, attention_mask)

    output = torch.matmul(probs, value).transpose(1, 2).contiguous()  # [batch, query_pos, head, head_dim]
    return output, probs


def _apply_plan(
    plan: InterventionPlan, layer: int, probs: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    batch, _, _, keys = probs.shape
    allowed = None
    uniform_heads, head_scale = plan.values(layer, HEAD_UNIFORM), plan.values(layer, HEAD_SCALE)
    if uniform_heads is not None:
        allowed = _allowed_keys(attention_mask, keys, probs.device)
        uniform = allowed.to(probs.dtype)
        # 1/L over the L keys the query may attend to; a query with none (DeBERTa's padding rows) gets zeros
        uniform = (uniform / uniform.sum(-1, keepdim=True).clamp(min=1)).expand_as(probs)
        probs = torch.where(_per_row(plan, uniform_heads, layer, probs), uniform, probs)
    if head_scale is not None:
        probs = probs * _per_row(plan, head_scale, layer, probs, probs.dtype)
    if plan.sink is not None and (plan.capture_layers is None or layer in plan.capture_layers):
        if allowed is None:
            allowed = _allowed_keys(attention_mask, keys, probs.device)
        plan.sink(layer, probs, _key_is_real(allowed, batch))
    return probs


AttentionInterface.register(ATTN_IMPLEMENTATION, bertology_attention)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


def use_engine(model: PreTrainedModel) -> PreTrainedModel:
    """Switch ``model`` to the bertology attention (in place) and return it. A model that computes attention in
    its own module (DeBERTa) keeps it: the engine reaches its probabilities through hooks while intervening."""
    if encoder.uses_attention_interface(model):
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def _output_hook(plan: InterventionPlan, point: str):
    """Multiply a module's output by ``point``'s values of the running layer (the MLP output, a LayerNorm)."""
    trailing_last = POINTS[point].trailing is not None

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if _ACTIVE_PLAN.get() is not plan or plan.depth is None:  # a nested plan is active: it alone applies
            return output
        values = plan.values(plan.depth, point)
        if values is None:
            return output
        return output * _per_row(plan, values, plan.depth, output, output.dtype, trailing_last)

    return hook


def _expand_callback(plan: InterventionPlan):
    """Repeat the batch once per configuration as layers are entered (a layer callback of the depth tracker).

    At the expansion depth the hidden states and the attention mask are repeated; at later depths only the
    attention mask, which the encoder passes unchanged to every layer, still has the original batch size. Other
    arguments (rotary or relative position tables) have no batch dimension to repeat.
    """

    def callback(module: nn.Module, depth: int, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if _ACTIVE_PLAN.get() is not plan or depth < plan.expand_at_layer:
            return None
        names = encoder.parameter_names(module)
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
    return model is not model.base_model and not encoder.reads_first_token_only(model)


def _expand_inputs(plan: InterventionPlan):
    """Forward pre-hook on the whole model repeating every batch-sized input once per configuration: where the
    configurations differ from the first layer on, for the naive method, and for models whose head reads the attention
    mask (:func:`_head_reads_the_mask`); what runs between the embeddings and the first layer (DeBERTa-v2-xlarge's
    convolution) then sees the repeated batch too."""

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if _ACTIVE_PLAN.get() is not plan:
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


def _probability_hooks(model: PreTrainedModel, plan: InterventionPlan) -> list:
    """For a model computing attention in its own module (DeBERTa): keep each attention call's mask, and apply the
    plan to the probabilities where they leave the module's dropout."""

    def keep_mask(module, args, kwargs):
        if _ACTIVE_PLAN.get() is plan:
            mask = encoder.named_arguments(module, args, kwargs).get("attention_mask")
            plan._mask = None if mask is None else mask.bool()  # as DeBERTa reads it: nonzero means attend

    def apply(module, args, output):
        if _ACTIVE_PLAN.get() is not plan or plan.depth is None or output.dim() != 4:
            return output
        return _apply_plan(plan, plan.depth, output, plan._mask)

    handles = [a.register_forward_pre_hook(keep_mask, with_kwargs=True) for a in dict.fromkeys(encoder.depth_attentions(model))]
    handles += [d.register_forward_hook(apply) for d in dict.fromkeys(encoder.probability_modules(model))]
    return handles


def _check_edits(model: PreTrainedModel, plan: InterventionPlan) -> None:
    """Every edit names a layer of ``model`` and has the shape its point asks: ``[num_configs, *trailing]``
    (``[batch, *trailing]`` per example); a point acting on a module the model lacks is refused here."""
    if plan.per_example and plan.num_configs != 1:
        raise ValueError("a per-example plan has one configuration (num_configs=1)")
    num_layers = model.config.num_hidden_layers
    rows = "batch" if plan.per_example else f"num_configs={plan.num_configs}"
    parts = encoder.structure(model) if any(POINTS[getattr(s, "point", "")].module for s in plan.edits if isinstance(s, Site)) else None
    for edited, values in plan.edits.items():
        if not isinstance(edited, Site):
            raise TypeError(f"plan edits are keyed by attention.site(layer, point), not {edited!r}")
        if not 0 <= edited.layer < num_layers:
            raise ValueError(f"{edited}: layer {edited.layer} out of range: the model has {num_layers} layers")
        point = POINTS[edited.point]
        trailing = () if point.trailing is None else (int(getattr(model.config, point.trailing)),)
        if values.dim() != 1 + len(trailing) or tuple(values.shape[1:]) != trailing or (
                not plan.per_example and values.shape[0] != plan.num_configs):
            names = "".join(f", {point.trailing}={size}" for size in trailing)
            raise ValueError(f"{edited}: values must be [{rows}{names}], got {tuple(values.shape)}")
        if point.boolean and values.dtype != torch.bool:
            raise ValueError(f"{edited}: values must be booleans, got {values.dtype}")
        if point.module is not None and getattr(parts[edited.layer], point.module) is None:
            raise encoder.UnsupportedStructure(encoder.missing_part_reason(model, point.module))


@contextlib.contextmanager
def intervene(model: PreTrainedModel, plan: InterventionPlan, reuse_prefix: bool = True) -> Iterator[InterventionPlan]:
    """Make ``plan`` active for forward passes of ``model`` inside the block.

    With ``num_configs > 1`` the batch is repeated at the first layer where the
    configurations differ (``reuse_prefix=True``) or at the first layer (``False``,
    the naive method); outputs then have ``num_configs * B`` rows, configuration-major.
    """
    if encoder.uses_attention_interface(model) and model.config._attn_implementation != ATTN_IMPLEMENTATION:
        raise RuntimeError("call bertology_core.engine.attention.use_engine(model) before intervening")
    _check_edits(model, plan)
    parts = encoder.structure(model) if any(POINTS[s.point].module for s in plan.edits) else None
    with contextlib.ExitStack() as stack:
        plan._tracker = stack.enter_context(encoder.track_depth(model))
        plan._attentions = frozenset(map(id, encoder.depth_attentions(model)))
        handles = []
        for point in dict.fromkeys(s.point for s in plan.edits if POINTS[s.point].module):
            modules = [getattr(parts[s.layer], POINTS[point].module) for s in plan.edits if s.point == point]
            handles += [m.register_forward_hook(_output_hook(plan, point)) for m in dict.fromkeys(modules)]
        if not encoder.uses_attention_interface(model):
            handles += _probability_hooks(model, plan)
        if plan.num_configs > 1:
            plan.expand_at_layer = plan.first_differing_layer() if reuse_prefix and not _head_reads_the_mask(model) else 0
            if plan.expand_at_layer == 0:  # repeat the input itself: everything between embeddings and layers sees it
                handles.append(model.register_forward_pre_hook(_expand_inputs(plan), with_kwargs=True))
            else:
                plan._tracker.on_enter.append(_expand_callback(plan))
        for handle in handles:
            stack.callback(handle.remove)
        stack.enter_context(encoder._set(_ACTIVE_PLAN, plan))
        yield plan
