"""Learned head gates with a relaxed L0 penalty (Voita et al. 2019, section 6), through the attention engine.

Definitions, as in Voita et al. and their code (github.com/lena-voita/the-story-of-heads,
``lib/layers/concrete_gate.py``), after Louizos, Welling and Kingma 2018, "Learning Sparse Neural Networks
through L0 Regularization":

- every head's output (its context vector, before the output projection) is multiplied by a gate ``g_h`` (the
  engine's ``scale``, the same gate Michel et al.'s importance differentiates);
- training samples each gate from the Hard Concrete distribution: ``u ~ U(eps, 1 - eps)``,
  ``s = sigmoid((log u - log(1 - u) + log_alpha) / temperature)``, stretched to ``(low, high)`` = (-0.1, 1.1) and
  clipped to [0, 1], so a gate is exactly 0 or 1 with positive probability. One draw per gate and batch (their
  ``local_rep=False``);
- the penalty is the expected number of open gates, ``P(g_h != 0) = sigmoid(log_alpha - temperature *
  log(-low / high))`` (Louizos et al.'s eq. 12); Voita et al.'s code sums it over a layer's heads and averages over
  layers (one regulariser per attention layer, ``reduce_mean`` over them), which is what ``penalty`` times the
  strength lambda adds to the task loss here: ``L = L_task + lambda * mean_layers(sum_heads P(g_h != 0))``;
- at evaluation the gates are deterministic: ``clip(sigmoid(log_alpha) * (high - low) + low, 0, 1)`` (their
  ``is_train=False``), and a head is pruned when its gate is exactly 0 (their sparsity rate counts non-zero gates).
  Kept heads keep their fractional gate values, as in the paper's pruned models.
- the temperature is their code's default, 0.33 (Louizos et al. use 2/3). Voita et al. start from the converged
  model and train *all* its parameters with the gates; ``train_weights=False`` trains the gates alone (cheaper). Kept
  heads keep learnt gate values, a rescaling Michel et al.'s pruning does not have: the heads the gates choose, at
  gate 1 on the fine-tuned weights (frozen gates), are what compares the two choices of heads alone. The initial ``log_alpha`` (3.0: every
  deterministic gate 1, ``P(open)`` 0.98) and the gates' learning rate are ours; their code leaves both to its
  variable initialiser and Transformer schedule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn
from transformers import PreTrainedModel

from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import HEAD_SCALE, InterventionPlan, per_layer
from bertology_core.finetune import training
from bertology_core.inputs.batching import Encoded
from bertology_core.models.checkpoint import Checkpointer
from bertology_core.models.precision import Precision
from bertology_core.engine.first_token import first_token_output
from bertology_core.data.tasks import Task
from bertology_core.engine.plan import StructureMask
from bertology_core.pruning.importance import least_important


@dataclass(frozen=True)
class GateSettings:
    """The Hard Concrete distribution and how its parameters train (the config's ``head_roles.gates``)."""

    temperature: float = 0.33
    stretch: tuple[float, float] = (-0.1, 1.1)
    initial_log_alpha: float = 3.0
    learning_rate: float = 0.1  # the gates' (Adam); the weights, when they train, keep fine-tuning's
    eps: float = 1e-6

    def __post_init__(self) -> None:
        low, high = self.stretch
        if not (low < 0 and high > 1):
            raise ValueError(f"head_roles.gates.stretch = {list(self.stretch)}: the L0 penalty needs low < 0 and high > 1 "
                             "(Louizos et al.). Fix: use [-0.1, 1.1].")
        if not 0 < self.temperature <= 1:
            raise ValueError(f"head_roles.gates.temperature = {self.temperature}: must be in (0, 1]. Fix: use 0.33.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"stretch": list(self.stretch)}


class HardConcreteGates(nn.Module):
    """One Hard Concrete gate per (layer, head): samples in training mode, deterministic values in eval mode."""

    def __init__(self, num_layers: int, num_heads: int, settings: GateSettings = GateSettings()):
        super().__init__()
        self.settings = settings
        self.log_alpha = nn.Parameter(torch.full((num_layers, num_heads), float(settings.initial_log_alpha)))

    def _stretch(self, concrete: torch.Tensor) -> torch.Tensor:
        low, high = self.settings.stretch
        return (concrete * (high - low) + low).clamp(0.0, 1.0)

    def sample(self) -> torch.Tensor:
        """One draw of every gate (torch's global generator: seeded and checkpointed by the training loop)."""
        eps = self.settings.eps
        noise = torch.rand_like(self.log_alpha) * (1 - 2 * eps) + eps
        return self._stretch(torch.sigmoid((noise.log() - (1 - noise).log() + self.log_alpha) / self.settings.temperature))

    def deterministic(self) -> torch.Tensor:
        return self._stretch(torch.sigmoid(self.log_alpha))

    def forward(self) -> torch.Tensor:
        return self.sample() if self.training else self.deterministic()

    def open_probability(self) -> torch.Tensor:
        """``P(g != 0)`` of every gate (Louizos et al. eq. 12)."""
        low, high = self.settings.stretch
        return torch.sigmoid(self.log_alpha - self.settings.temperature * math.log(-low / high))

    def penalty(self) -> torch.Tensor:
        """Voita et al.'s L0 term: per layer the expected number of open gates, averaged over layers."""
        return self.open_probability().sum(-1).mean()


@dataclass
class GatedOutput:
    loss: torch.Tensor
    task_loss: torch.Tensor
    penalty: torch.Tensor


class GatedClassifier(nn.Module):
    """A sequence classifier whose heads are multiplied by Hard Concrete gates through the attention engine; its loss
    is the task loss plus ``strength`` times the gates' L0 penalty. With ``train_weights=False`` only the gates
    have gradients."""

    def __init__(self, classifier: PreTrainedModel, strength: float, settings: GateSettings = GateSettings(),
                 train_weights: bool = True):
        super().__init__()
        self.classifier = use_engine(classifier)
        config = classifier.config
        self.gates = HardConcreteGates(config.num_hidden_layers, config.num_attention_heads, settings)
        self.strength = float(strength)
        self.train_weights = train_weights
        self.classifier.requires_grad_(train_weights)

    def plan(self, gates: torch.Tensor) -> InterventionPlan:
        return InterventionPlan(
            edits=per_layer(HEAD_SCALE, {layer: gates[layer][None, :] for layer in range(gates.shape[0])}))

    def forward(self, labels: torch.Tensor | None = None, **batch: torch.Tensor) -> GatedOutput:
        penalty = self.gates.penalty()
        with intervene(self.classifier, self.plan(self.gates())), first_token_output(self.classifier):
            output = self.classifier(**batch, labels=labels)
        return GatedOutput(loss=output.loss + self.strength * penalty, task_loss=output.loss, penalty=penalty)

    def parameter_groups(self, config: training.FinetuneConfig) -> list[dict[str, Any]]:
        """The optimiser's groups: the gates (their own learning rate, no weight decay: decay would pull every
        ``log_alpha`` to 0, a half-open gate) and, when they train, the weights with fine-tuning's groups."""
        groups = training.parameter_groups(self.classifier, config.weight_decay) if self.train_weights else []
        return groups + [{"params": [self.gates.log_alpha], "weight_decay": 0.0, "lr": self.gates.settings.learning_rate}]

    def evaluation_plan(self) -> InterventionPlan:
        """The deterministic gates as a plan for the classifier alone (no gradient)."""
        with torch.no_grad():
            return self.plan(self.gates.deterministic().detach())

    def kept(self) -> np.ndarray:
        """``[layers, heads]`` bool: heads whose deterministic gate is not 0."""
        with torch.no_grad():
            return (self.gates.deterministic() > 0).cpu().numpy()


def train_gates(
    classifier: PreTrainedModel,
    task: Task,
    data: Encoded,
    labels: np.ndarray,
    config: training.FinetuneConfig,
    strength: float,
    settings: GateSettings,
    train_weights: bool,
    seed: int,
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
    precision: Precision | None = None,
) -> tuple[GatedClassifier, dict[str, Any]]:
    """Train Hard Concrete head gates (and the weights with ``train_weights``) on ``data`` with penalty strength
    ``strength``, with fine-tuning's loop (:func:`bertology_core.finetune.training.train`: its schedule, clipping, seeding and
    resumable checkpoints), in ``precision`` (None: float32). Returns the gated model (eval mode) and the training
    record."""
    # the gates on the classifier's device: a step then needs no copy between host and device
    gated = GatedClassifier(classifier, strength, settings, train_weights).to(next(classifier.parameters()).device)
    record = training.train(gated, task, data, labels, config, seed, progress, checkpointer,
                            optimizer_groups=gated.parameter_groups(config), precision=precision)
    gates = gated.gates.deterministic().detach().cpu().numpy()
    record |= {
        "strength": strength,
        "train_weights": train_weights,
        "settings": settings.to_dict(),
        "gates": gates.round(6).tolist(),
        "heads_kept": int((gates > 0).sum()),
        "expected_open": float(gated.gates.open_probability().sum().detach()),
    }
    return gated, record


def michel_mask(importance_table: pl.DataFrame, kept: int, normalized: bool = True) -> StructureMask:
    """Michel et al.'s ordering cut at ``kept`` heads: the ``kept`` most important heads of the importance table
    (``element, layer, head, importance, normalized``; the layer-normalised scores when ``normalized``, as their
    curve ranks them); of tied heads the lowest (layer, head) is pruned first, as
    :func:`bertology_core.pruning.importance.least_important` does. This is
    the mask the iterative curve reaches at that count when it does not recompute importance."""
    heads = importance_table.filter(pl.col("element") == "head")
    num_layers, num_heads = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    scores = np.zeros((num_layers, num_heads))
    column = "normalized" if normalized else "importance"
    scores[heads["layer"].to_numpy(), heads["head"].to_numpy()] = heads[column].to_numpy()
    full = StructureMask.full(num_layers, num_heads)
    return full.without(heads=least_important(scores, full.heads, num_layers * num_heads - kept))
