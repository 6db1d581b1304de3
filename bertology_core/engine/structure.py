"""The structure of an encoder, found from the model itself: what runs at each depth, and which of its linear maps
are the head projections, the attention output projection and the feed-forward network (MLP).

Every analysis intervenes *by depth*: head ``(layer, head)`` is head ``head`` of the ``layer``-th self-attention the
input passes through. Where a model reuses one layer's weights across depth (ALBERT), the same modules run at several
depths and a head is still counted by depth, as ALBERT's users count them.

How the parts are found, with no attribute path per family:

- *what runs at each depth*: the layer and attention classes the model declares itself
  (``_can_record_outputs``: ``"hidden_states"`` and ``"attentions"``, transformers' own record of where hidden
  states and attention weights come from), instances in registration order; when there are fewer layer modules
  than ``num_hidden_layers``, consecutive depths share a module (ALBERT's groups). Models without that declaration
  (DeBERTa-v2/v3) are read from their ``nn.ModuleList`` of ``num_hidden_layers`` layers and, in each, the module
  whose class is a ``...SelfAttention``.
- *where the attention probabilities are*: models that route attention through transformers' ``AttentionInterface``
  (``_supports_attention_backend``: BERT, RoBERTa, ELECTRA, DistilBERT, ALBERT, ModernBERT, XLM-R) call the engine's
  registered function (:mod:`bertology_core.engine.attention_function`); DeBERTa's disentangled attention computes
  them inside its own module and passes them through its dropout (the attention module's ``nn.Dropout`` called on a
  4-D ``[batch, head, query, key]`` tensor), where the engine takes them instead.
- *which linear map is which*: one traced forward pass of a few tokens records, per depth, the order in which the
  depth's ``nn.Linear`` modules run around the attention probabilities: those inside the attention module before
  them project the input to heads (query, key, value, fused or not, and DeBERTa's positional projections); the first
  one after them is the attention output projection; the next is the MLP's input and the depth's last is the MLP's
  output (BERT's ``intermediate.dense`` / ``output.dense``, DistilBERT's ``lin1`` / ``lin2``, ALBERT's ``ffn`` /
  ``ffn_output``, ModernBERT's ``Wi`` / ``Wo``). The trace runs in evaluation mode with the random state saved and
  restored, so it changes nothing a caller computes; it is redone when the model's modules change (compaction).
- *which LayerNorm is which*: the same trace records the depth's LayerNorms (``nn.LayerNorm``, ``nn.RMSNorm``). In a
  post-LayerNorm encoder a norm closes the layer after its MLP's residual sum (BERT's ``output.LayerNorm``,
  DistilBERT's ``output_layer_norm``, ALBERT's ``full_layer_layer_norm``): that is the *output norm*, and the last
  norm between the attention output projection and the MLP is the *attention norm* (``attention.output.LayerNorm``,
  ``sa_layer_norm``, ALBERT's ``attention.LayerNorm``). A pre-LayerNorm encoder (ModernBERT) has no norm after its
  MLP; its norms feed one sub-layer each and neither is named.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import (ATTN_IMPLEMENTATION, Interceptor, intercepting,
                                                      uses_attention_interface)


class UnsupportedStructure(TypeError):
    """The model is not an encoder whose depths, attention and MLPs the engine can find."""


# --- what runs at each depth (static) ----------------------------------------------------------


def _declared_class(model: PreTrainedModel, output: str) -> type | None:
    recorded = getattr(type(model), "_can_record_outputs", None) or {}
    target = recorded.get(output)
    target = target[0] if isinstance(target, (tuple, list)) else target
    target = getattr(target, "target_class", target)  # OutputRecorder(...) or the class itself
    return target if isinstance(target, type) else None


def depth_layers(model: PreTrainedModel) -> list[nn.Module]:
    """The layer module that runs at each depth (``num_hidden_layers`` entries; repeated where weights are shared)."""
    depths = int(model.config.num_hidden_layers)
    base = model.base_model
    layer_class = _declared_class(model, "hidden_states")
    if layer_class is not None:
        found = [m for m in base.modules() if isinstance(m, layer_class)]
    else:
        lists = [m for m in base.modules() if isinstance(m, nn.ModuleList) and len(m) == depths]
        found = list(lists[0]) if len(lists) == 1 else []
    if not found or depths % len(found):
        raise UnsupportedStructure(
            f"{type(model).__name__}: cannot find the {depths} encoder layers (config 'num_hidden_layers'); found "
            f"{len(found)} layer modules. Only encoders with one self-attention layer per depth are supported.")
    per_module = depths // len(found)  # consecutive depths share a module (ALBERT: num_hidden_groups)
    return [found[depth // per_module] for depth in range(depths)]


def depth_attentions(model: PreTrainedModel) -> list[nn.Module]:
    """The self-attention module that runs at each depth."""
    attention_class = _declared_class(model, "attentions")
    found = []
    for layer in depth_layers(model):
        candidates = [m for m in layer.modules() if (isinstance(m, attention_class) if attention_class is not None
                                                     else type(m).__name__.endswith("SelfAttention"))]
        if len(candidates) != 1:
            raise UnsupportedStructure(f"{type(model).__name__}: {type(layer).__name__} holds {len(candidates)} self-attention "
                                       "modules; the engine needs exactly one per layer.")
        found.append(candidates[0])
    return found


# --- depth of the running layer ----------------------------------------------------------------


@dataclass
class DepthTracker:
    """Counts the layers a forward pass has entered: ``depth`` is the running layer's depth (None outside a pass)."""

    num_layers: int
    depth: int | None = None
    _entered: int = 0
    on_enter: list[Callable[[nn.Module, int, tuple, dict], tuple[tuple, dict] | None]] = field(default_factory=list)


@contextlib.contextmanager
def track_depth(model: PreTrainedModel) -> Iterator[DepthTracker]:
    """Inside the block ``tracker.depth`` is the depth of the layer running in ``model`` (hooks removed after).
    Callbacks in ``tracker.on_enter`` run as each layer is entered and may replace its arguments."""
    if getattr(model, "is_activation_checkpointing", False):
        raise RuntimeError(f"{type(model).__name__}: gradient checkpointing reruns layers in the backward pass, which breaks "
                           "counting layers by depth. Fix: model.gradient_checkpointing_disable() before intervening.")
    layers = depth_layers(model)
    tracker = DepthTracker(len(layers))

    def start(module, args, kwargs):
        tracker._entered, tracker.depth = 0, None

    def stop(module, args, output):  # outside a pass of this model no layer of it is running
        tracker.depth = None

    def enter(module, args, kwargs):
        if tracker._entered >= tracker.num_layers:
            raise RuntimeError(f"{type(model).__name__}: more than {tracker.num_layers} layers ran in one forward pass")
        tracker.depth = tracker._entered
        tracker._entered += 1
        for callback in tracker.on_enter:
            replaced = callback(module, tracker.depth, args, kwargs)
            if replaced is not None:
                args, kwargs = replaced
        return args, kwargs

    handles = [model.base_model.register_forward_pre_hook(start, with_kwargs=True),
               model.base_model.register_forward_hook(stop, always_call=True)]
    handles += [layer.register_forward_pre_hook(enter, with_kwargs=True) for layer in dict.fromkeys(layers)]
    try:
        yield tracker
    finally:
        for handle in handles:
            handle.remove()


@functools.cache
def _forward_parameters(module_class: type) -> tuple[str, ...]:
    return tuple(list(inspect.signature(module_class.forward).parameters)[1:])  # without self


def parameter_names(module: nn.Module) -> tuple[str, ...]:
    """The names of ``module.forward``'s parameters, read once per class (layer hooks run on every pass)."""
    return _forward_parameters(type(module))


def named_arguments(module: nn.Module, args: tuple, kwargs: dict) -> dict[str, object]:
    """A module call's arguments by parameter name (positional ones bound to the forward's signature)."""
    return {**dict(zip(parameter_names(module), args)), **kwargs}


# --- which linear map is which (traced) --------------------------------------------------------


@dataclass(frozen=True)
class DepthParts:
    """The modules of one depth."""

    layer: nn.Module
    attention: nn.Module
    head_projections: tuple[nn.Linear, ...]  # hidden -> heads (query, key, value; fused or not)
    output_projection: nn.Linear  # attention context -> hidden
    mlp_input: nn.Linear
    mlp_output: nn.Linear
    # post-LayerNorm encoders (BERT's attention.output.LayerNorm and output.LayerNorm): the LayerNorm after the
    # attention's residual sum and the one after the MLP's, whose outputs are the residual stream; None in a
    # pre-LayerNorm encoder (ModernBERT), whose norms feed one sub-layer only
    attention_norm: nn.Module | None = None
    output_norm: nn.Module | None = None


NORM_TYPES: tuple[type, ...] = (nn.LayerNorm, nn.RMSNorm)


def missing_part_reason(model: PreTrainedModel, part: str) -> str:
    """Why ``model`` has no ``part`` (a :class:`DepthParts` field that is None), and what to do."""
    if part == "attention_norm" and all(p.output_norm is not None for p in structure(model)):
        return (f"{type(model).__name__}: the engine found no LayerNorm (nn.LayerNorm or nn.RMSNorm) between its attention "
                "output projection and its MLP, so the attention-output LayerNorm cannot be edited. Fix: leave the "
                "attention placement out, or this model out of the outliers stage.")
    if part in ("attention_norm", "output_norm"):
        return (f"{type(model).__name__} normalises before each sub-layer (pre-LayerNorm): no LayerNorm's output is the "
                "residual stream, so disabling LayerNorm dimensions (Kovaleva et al. 2021, on post-LayerNorm encoders: "
                "BERT, RoBERTa, ELECTRA, XLM-R, DistilBERT, ALBERT, DeBERTa) does not apply. Fix: leave this model out "
                "of the outliers stage.")
    return f"{type(model).__name__}: the engine found no {part} in its layers"


_STRUCTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def probability_modules(model: PreTrainedModel) -> list[nn.Module]:
    """For a model that computes attention inside its own module: per depth, the attention module's dropout, which
    the probabilities pass through (DeBERTa); the engine reads and replaces them at its output."""
    found = []
    for attention in depth_attentions(model):
        dropouts = [m for name, m in attention.named_children() if isinstance(m, nn.Dropout) and name == "dropout"]
        if len(dropouts) != 1:
            raise UnsupportedStructure(
                f"{type(model).__name__}: {type(attention).__name__} does not use transformers' AttentionInterface and has "
                "no 'dropout' on its probabilities; the engine cannot reach its attention.")
        found.append(dropouts[0])
    return found


def _fingerprint(model: PreTrainedModel) -> tuple[int, ...]:
    return tuple(id(m) for m in model.modules())


def structure(model: PreTrainedModel) -> list[DepthParts]:
    """The parts of every depth (traced once per set of modules, then cached)."""
    cached = _STRUCTURES.get(model)
    if cached is not None and cached[0] == _fingerprint(model):
        return cached[1]
    parts = _trace(model)
    _STRUCTURES[model] = (_fingerprint(model), parts)
    return parts


def _trace(model: PreTrainedModel) -> list[DepthParts]:
    layers, attentions = depth_layers(model), depth_attentions(model)
    events: list[tuple[int, str, nn.Module]] = []
    handles = []
    with track_depth(model) as tracker, contextlib.ExitStack() as stack:
        for layer in dict.fromkeys(layers):
            for module in layer.modules():
                kind = "linear" if isinstance(module, nn.Linear) else "norm" if isinstance(module, NORM_TYPES) else None
                if kind is not None:
                    handles.append(module.register_forward_hook(
                        lambda m, args, out, kind=kind: events.append((tracker.depth, kind, m))))
        recorder = None
        if uses_attention_interface(model):
            previous = model.config._attn_implementation
            if previous != ATTN_IMPLEMENTATION:
                model.set_attn_implementation(ATTN_IMPLEMENTATION)
                stack.callback(model.set_attn_implementation, previous)

            def record(module: nn.Module, probs: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
                events.append((tracker.depth, "attention", module))  # the engine's function records the probabilities
                return probs

            recorder = Interceptor(structure, record)
        else:
            for dropout in dict.fromkeys(probability_modules(model)):
                handles.append(dropout.register_forward_hook(
                    lambda m, args, out: events.append((tracker.depth, "attention", m)) if args[0].dim() == 4 else None))
        stack.enter_context(intercepting(recorder))  # an active plan must neither act on nor capture the trace
        modes = {module: module.training for module in model.modules()}
        try:
            model.eval()
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                tokens = torch.arange(3, 7, device=model.device).clamp(max=model.config.vocab_size - 1)[None]
                model(input_ids=tokens, attention_mask=torch.ones_like(tokens))
        finally:
            for module, mode in modes.items():
                module.training = mode
            for handle in handles:
                handle.remove()
    return [_classify(model, depth, layers[depth], attentions[depth], [(kind, m) for d, kind, m in events if d == depth])
            for depth in range(len(layers))]


def _classify(model: PreTrainedModel, depth: int, layer: nn.Module, attention: nn.Module,
              events: list[tuple[str, nn.Module]]) -> DepthParts:
    kinds = [kind for kind, _ in events]
    if kinds.count("attention") != 1:
        raise UnsupportedStructure(f"{type(model).__name__}: layer {depth} computed attention probabilities "
                                   f"{kinds.count('attention')} times in one pass; the engine needs once.")
    split = kinds.index("attention")
    inside = {id(m) for m in attention.modules()}
    before = list(dict.fromkeys(m for kind, m in events[:split] if kind == "linear" and id(m) in inside))
    after = events[split + 1:]
    linear_after = [i for i, (kind, _) in enumerate(after) if kind == "linear"]
    hidden = int(model.config.hidden_size)
    if len(linear_after) < 3 or not before:
        raise UnsupportedStructure(f"{type(model).__name__}: layer {depth} does not run head projections, an attention output "
                                   "projection and a two-matrix feed-forward network around its attention.")
    output_projection, mlp_input, mlp_output = (after[i][1] for i in (linear_after[0], linear_after[1], linear_after[-1]))
    if output_projection.out_features != hidden or mlp_input.in_features != hidden or mlp_output.out_features != hidden:
        raise UnsupportedStructure(f"{type(model).__name__}: layer {depth}'s linear maps around attention are not "
                                   "hidden -> hidden projections and a feed-forward network from and to hidden_size.")
    between = [m for kind, m in after[linear_after[0] + 1:linear_after[1]] if kind == "norm"]
    last = [m for kind, m in after[linear_after[-1] + 1:] if kind == "norm"]
    # post-LayerNorm: a norm closes the layer after its MLP; otherwise the norm between attention and MLP is the
    # MLP's input norm (pre-LayerNorm) and neither is the residual stream
    post_norm = bool(last)
    return DepthParts(layer, attention, tuple(before), output_projection, mlp_input, mlp_output,
                      between[-1] if post_norm and between else None, last[-1] if post_norm else None)
