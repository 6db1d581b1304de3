"""Head and layer disabling sweeps (Kovaleva et al. 2019, section 4.6) on the attention engine.

Definitions, as in the paper:

- *disabling* a head in ``uniform`` mode replaces its attention weights by uniform attention: each query
  attends 1/L to each of the L (non-padding) tokens of its example. ``zero`` mode instead multiplies the
  head's weights by 0 (Michel et al. 2019's masking: the head contributes nothing but the output bias).
- a *configuration* is a set of disabled heads: the intact model (none), one head, one whole layer (all
  its heads), or any set (the greedy search below). Layers and heads are zero-indexed in tables;
  configuration names are one-indexed as papers print them (``L1H3`` is layer 0, head 2).

Speed: configurations are evaluated several per forward pass. They are grouped by the first layer where
they differ (``l``); the engine computes layers below ``l`` once per batch and repeats the batch once per
configuration only from ``l`` on (prefix reuse + batch expansion). Every head of layer ``l`` (and the
whole layer ``l``) shares one pass, with the intact model in every pass as the reference its deltas are taken
against (:class:`~bertology_core.scoring.plans.PassLogits`), so a full single-head sweep costs about (H + 2) / (H + 1) x sum_l (L - l) / L^2 of
the naive method's one full forward pass per configuration (0.63 for 6 layers of 12 heads, 0.58 for 12). Both
methods also run the last layer after its attention on the [CLS] token alone
(:func:`~bertology_core.engine.first_token.first_token_output`): a quarter of that layer's cost is left where the cut
is at the attention output block (BERT, DeBERTa), about a third where it is at the MLP (DistilBERT, ALBERT,
ModernBERT), which moves the bound to about 0.56 for 6 layers and 0.55 for 12.

Beyond the paper: greedy multi-head disabling (:func:`greedy_disable`), choosing on one half of dev and
reporting on the other (:func:`~bertology_core.disabling.stats.split_halves`), so the reported gain is not selected on the data it is
measured on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedModel

from bertology_core.engine.plan import HEAD_SCALE, HEAD_UNIFORM, InterventionPlan, per_layer
from bertology_core.stats.bootstrap import Sentences, metric_on_resamples, paired_deltas, resample_indices
from bertology_core.inputs.batching import Encoded, encode
from bertology_core.data import tasks
from bertology_core.data.tasks import Task
from bertology_core.data.failpoints import failpoint
from bertology_core.data.tables import repeated
from bertology_core.models import loading
from bertology_core.models.checkpoint import ArrayCheckpoint
from bertology_core.scoring import plans as scoring

log = logging.getLogger(__name__)

MODES = ("uniform", "zero")
Head = tuple[int, int]  # (layer, head), zero-indexed


@dataclass(frozen=True)
class Configuration:
    """A set of disabled heads, with what it is for the tables (``kind``: intact | head | layer | set)."""

    name: str
    kind: str
    disabled: frozenset[Head] = field(default_factory=frozenset)
    layer: int | None = None
    head: int | None = None


INTACT = Configuration("intact", "intact")


def head_name(layer: int, head: int) -> str:
    return f"L{layer + 1}H{head + 1}"


def single_heads(num_layers: int, num_heads: int) -> list[Configuration]:
    """Every head alone: ``num_layers x num_heads`` configurations (the paper's fig. 8)."""
    return [
        Configuration(head_name(layer, head), "head", frozenset({(layer, head)}), layer, head)
        for layer in range(num_layers)
        for head in range(num_heads)
    ]


def whole_layers(num_layers: int, num_heads: int) -> list[Configuration]:
    """Every layer with all its heads disabled (the paper's fig. 9)."""
    return [
        Configuration(f"L{layer + 1}", "layer", frozenset((layer, head) for head in range(num_heads)), layer, None)
        for layer in range(num_layers)
    ]


def head_set(disabled: frozenset[Head] | set[Head]) -> Configuration:
    name = "+".join(head_name(*h) for h in sorted(disabled)) or "intact"
    return Configuration(name, "set" if disabled else "intact", frozenset(disabled))


def sweep_configurations(num_layers: int, num_heads: int, layers: bool = True) -> list[Configuration]:
    """The intact model, every single head and (``layers``) every whole layer."""
    return [INTACT, *single_heads(num_layers, num_heads), *(whole_layers(num_layers, num_heads) if layers else [])]


def build_plan(configs: Sequence[Configuration], mode: str, num_layers: int, num_heads: int) -> InterventionPlan:
    """One engine plan evaluating ``configs`` side by side (configuration-major batch expansion)."""
    if mode not in MODES:
        raise ValueError(f"disabling mode must be one of {MODES}, not {mode!r}")
    disabled: dict[int, torch.Tensor] = {}
    for index, config in enumerate(configs):
        for layer, head in config.disabled:
            if not (0 <= layer < num_layers and 0 <= head < num_heads):
                raise ValueError(f"{config.name}: head ({layer}, {head}) outside the model's {num_layers} x {num_heads}")
            disabled.setdefault(layer, torch.zeros(len(configs), num_heads, dtype=torch.bool))[index, head] = True
    if mode == "uniform":
        return InterventionPlan(len(configs), per_layer(HEAD_UNIFORM, disabled))
    return InterventionPlan(len(configs), per_layer(HEAD_SCALE, {k: (~v).float() for k, v in disabled.items()}))


def _groups(configs: Sequence[Configuration], num_layers: int, reuse_prefix: bool) -> list[list[int]]:
    """Indices of the configurations sharing a forward pass: those whose first disabled head beyond what
    all of them disable lies in the same layer (the intact model is in the last layer's group; as the reference,
    :func:`~bertology_core.scoring.plans.evaluate_plans` adds it to every other pass)."""
    if not reuse_prefix:
        return [[i] for i in range(len(configs))]
    shared = frozenset.intersection(*(c.disabled for c in configs)) if configs else frozenset()

    def first_layer(i: int) -> int:
        own = configs[i].disabled - shared
        return min(layer for layer, _ in own) if own else num_layers - 1

    ordered = sorted(range(len(configs)), key=first_layer)
    return [list(g) for _, g in groupby(ordered, key=first_layer)]


@torch.inference_mode()
def evaluate_configurations(
    model: PreTrainedModel,
    data: Encoded,
    configs: Sequence[Configuration],
    mode: str = "uniform",
    rows_per_pass: int = 48,
    reuse_prefix: bool = True,
    examples_per_batch: int | None = None,
    reference: Configuration | None = None,
    checkpoint: ArrayCheckpoint | None = None,
) -> scoring.PassLogits:
    """Logits ``[configs, examples, labels]`` of ``model`` with each configuration's heads disabled, and those of the
    ``reference`` configuration (default: :data:`INTACT` where it is among ``configs``) in every pass
    (:class:`~bertology_core.scoring.plans.PassLogits`).

    A pass evaluates a group of G configurations (the reference among them) on ``max(1, rows_per_pass // G)`` examples
    (or a fixed ``examples_per_batch``): on CPU a batch of many more rows than that is slower *per row* (the
    attention tensors fall out of cache), which would eat the savings of prefix reuse.
    ``reuse_prefix=False`` is the naive method (one full forward pass per configuration, same engine):
    the benchmark's reference, run with the same ``examples_per_batch``. Examples are sorted by length
    to save padding; uniform attention covers only an example's own tokens, so results do not depend
    on the batching beyond the order in which products are summed. ``checkpoint``: where a killed job resumes
    (:func:`~bertology_core.scoring.plans.evaluate_plans`).
    """
    num_layers, num_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    if reference is None and INTACT in configs:
        reference = INTACT
    every = list(configs) + ([reference] if reference is not None and reference not in configs else [])
    scored = scoring.evaluate_plans(model, data, len(every), _groups(every, num_layers, reuse_prefix),
                            lambda group: build_plan([every[i] for i in group], mode, num_layers, num_heads),
                            rows_per_pass, reuse_prefix, examples_per_batch,
                            reference=None if reference is None else every.index(reference), checkpoint=checkpoint)
    count = len(configs)
    return scoring.PassLogits(scored.logits[:count], None if scored.reference is None else scored.reference[:count])


@dataclass(frozen=True)
class ScoredModel:
    """A fine-tuned classifier ready to be scored on its dev sample: the model on the job's device, the sample (sorted
    by idx) and its encoding."""

    model: PreTrainedModel
    dev: pl.DataFrame
    encoded: Encoded


def load_scored_model(folder: str, dev_path: str, task: Task, max_examples: int | None, subsample_seed: int,
                      max_length: int, device: torch.device) -> ScoredModel:
    """The fine-tuned model at ``folder`` and a seeded sample of at most ``max_examples`` of its task's dev split
    (``tasks.subsample``), encoded with the model's tokenizer: what a disabling job scores."""
    dev = tasks.subsample(pl.read_parquet(dev_path), max_examples, subsample_seed).sort("idx")
    model = loading.load_classifier(folder, task, loading.SAVED, 0).to(device)
    return ScoredModel(model, dev, encode(dev, loading.load_tokenizer(folder), max_length))


def sweep_frame(task: Task, dev: pl.DataFrame, configs: Sequence[Configuration], predictions: np.ndarray,
                intact_predictions: np.ndarray, mode: str) -> pl.DataFrame:
    """Tidy per-example predictions: ``mode, config, kind, layer, head, idx, label, prediction, intact_prediction``
    (the intact model's prediction in the configuration's own pass, :class:`~bertology_core.scoring.plans.PassLogits`);
    a token task's rows are its words (``word``: the position in the example, between ``idx`` and ``label``)."""
    units = tasks.scored_units(task, dev)
    n = len(units["idx"])
    dtype = pl.Int64 if task.is_token else task.label_dtype
    return pl.DataFrame(
        {
            "mode": repeated([mode], len(configs) * n, pl.String),
            "config": repeated([c.name for c in configs], n, pl.String),
            "kind": repeated([c.kind for c in configs], n, pl.String),
            "layer": repeated([c.layer for c in configs], n, pl.Int16),
            "head": repeated([c.head for c in configs], n, pl.Int16),
            **{name: np.tile(values, len(configs)) for name, values in units.items()},
            "prediction": pl.Series(predictions.reshape(-1), dtype=dtype),
            "intact_prediction": pl.Series(intact_predictions.reshape(-1), dtype=dtype),
        }
    )


def configuration_scores(metric: str, predictions: np.ndarray, labels: np.ndarray,
                         sentences: Sentences | None = None) -> np.ndarray:
    """``metric`` of each row of ``predictions`` ``[C, n]`` on all examples (a token task's: all words, ``sentences``
    grouping them) -> ``[C]``."""
    every = np.arange(labels.shape[0] if sentences is None else len(sentences))[None, :]
    return metric_on_resamples(metric, predictions, labels, every, sentences)[:, 0]


@dataclass(frozen=True)
class GreedyStep:
    step: int
    added: Head
    disabled: frozenset[Head]
    selection_score: float
    selection_gain: float  # over the previous step's set, on the selection half


def greedy_disable(
    evaluate: Callable[[list[Configuration], Configuration], tuple[np.ndarray, np.ndarray]],
    labels: np.ndarray,
    metric: str,
    heads: Sequence[Head],
    max_steps: int,
    sentences: Sentences | None = None,
) -> tuple[float, list[GreedyStep]]:
    """Greedy multi-head disabling on one set of examples (the selection half).

    Starting from the intact model, repeatedly add the head whose disabling raises ``metric`` most over the set chosen
    so far (ties: the lowest layer, then head), and stop when no head raises it or after ``max_steps``.
    ``evaluate(configs, reference)`` returns the predictions ``[len(configs), n]`` of ``configs`` and those of
    ``reference`` (the set chosen so far) in each one's own forward pass: a gain compares rows of the same pass.
    Returns the intact score and the steps. A token task's predictions and labels are its words, ``sentences`` grouping
    them."""
    chosen: frozenset[Head] = frozenset()
    intact_predictions, _ = evaluate([INTACT], INTACT)
    intact_score, steps = float(configuration_scores(metric, intact_predictions, labels, sentences)[0]), []
    while len(steps) < max_steps:
        candidates = [h for h in sorted(heads) if h not in chosen]
        if not candidates:
            break
        current = head_set(chosen) if chosen else INTACT
        predictions, reference = evaluate([head_set(chosen | {h}) for h in candidates], current)
        scores = configuration_scores(metric, predictions, labels, sentences)
        gains = np.where(np.isnan(scores), -np.inf, scores - configuration_scores(metric, reference, labels, sentences))
        best = int(np.argmax(gains))  # first maximum: lowest (layer, head)
        if not gains[best] > 0:
            break
        chosen = chosen | {candidates[best]}
        steps.append(GreedyStep(len(steps) + 1, candidates[best], chosen, float(scores[best]), float(gains[best])))
    return intact_score, steps


@dataclass(frozen=True)
class GreedySettings:
    """The greedy search's choices (config ``disabling``): the disabling mode, the most heads to add, the seed of
    the selection/report split, and the bootstrap of the report half's deltas."""

    mode: str
    max_steps: int
    split_seed: int
    resamples: int
    level: float
    bootstrap_seed: int


def greedy_search(model: PreTrainedModel, task: Task, dev: pl.DataFrame, selection: np.ndarray,
                  encode: Callable[[pl.DataFrame], Encoded], sweep: pl.DataFrame, settings: GreedySettings,
                  rows_per_pass: int, checkpoint: ArrayCheckpoint | None = None) -> tuple[pl.DataFrame, int]:
    """Greedy multi-head disabling (:func:`greedy_disable`) chosen on the ``selection`` half of ``dev`` (sorted by
    idx; a mask) and every step's set reported on the other half against the intact model, with paired bootstrap
    intervals. The single-head sweep's predictions (``sweep``, same examples and mode) are reused, so the first
    step costs no forward pass. Returns the table (step 0 = intact) and the number of configurations computed
    beyond the sweep. With a ``checkpoint``, the predictions computed so far are saved as it says, and a rerun after a
    kill replays the steps they cover without a pass (the search is deterministic given them)."""
    metric, units = task.main_metric, tasks.scored_units(task, dev)
    labels = units["label"]
    # a token task's units are words: a half is whole sentences, and its bootstrap draws sentences
    sentences = Sentences.of_runs(units["idx"], task.label_names) if task.is_token else None
    chosen = sentences.expand(selection) if sentences is not None else selection  # the selection half's units
    halves_of = {"selection": sentences.subset(chosen), "report": sentences.subset(~chosen)} if sentences is not None else {}
    halves = {"selection": encode(dev.filter(pl.Series(selection))), "report": encode(dev.filter(pl.Series(~selection)))}
    # a configuration's predictions and those of the set it was compared with, in its own pass: the sweep's single
    # heads against the intact model
    keys = [key for key in ("idx", "word") if key in units]
    known = {(name, INTACT.name): tuple(group.sort(keys)[column].to_numpy()[chosen] for column in ("prediction", "intact_prediction"))
             for (name,), group in sweep.partition_by("config", as_dict=True).items()}
    computed: list[tuple[str, str]] = []  # (configuration, reference) scored beyond the sweep, in order
    if checkpoint is not None and (restored := checkpoint.load()) is not None:
        arrays, state = restored
        computed = [tuple(pair) for pair in state["computed"]]
        known.update({pair: (arrays[f"{pair[0]}\t{pair[1]}\tprediction"], arrays[f"{pair[0]}\t{pair[1]}\treference"])
                      for pair in computed})
    saved = time.monotonic()

    def saved_predictions() -> dict[str, np.ndarray]:
        return {f"{a}\t{b}\t{part}": known[(a, b)][index] for a, b in computed for index, part in enumerate(("prediction", "reference"))}

    def evaluate_selection(configs: list[Configuration], reference: Configuration) -> tuple[np.ndarray, np.ndarray]:
        nonlocal saved
        missing = [c for c in configs if (c.name, reference.name) not in known]
        if missing:
            computed.extend((c.name, reference.name) for c in missing)
            scored = evaluate_configurations(model, halves["selection"], missing, settings.mode, rows_per_pass=rows_per_pass,
                                             reference=reference)
            pairs = zip(task.predictions(scored.logits), task.predictions(scored.reference))
            known.update(zip([(c.name, reference.name) for c in missing], pairs))
            if checkpoint is not None and checkpoint.due(time.monotonic() - saved):
                checkpoint.save(saved_predictions(), {"computed": computed})
                saved = time.monotonic()
                failpoint("scores.after_checkpoint")
        return tuple(np.stack([known[(c.name, reference.name)][part] for c in configs]) for part in (0, 1))

    heads = [(layer, head) for layer in range(model.config.num_hidden_layers) for head in range(model.config.num_attention_heads)]
    intact_score, steps = greedy_disable(evaluate_selection, labels[chosen], metric, heads, settings.max_steps,
                                         halves_of.get("selection"))
    if checkpoint is not None:
        checkpoint.finished(saved_predictions(), {"computed": computed})
    configs = [INTACT, *[head_set(step.disabled) for step in steps]]
    scored = evaluate_configurations(model, halves["report"], configs, settings.mode, rows_per_pass=rows_per_pass)
    report, own_intact = task.predictions(scored.logits), task.predictions(scored.reference)
    deltas = paired_deltas(metric, report[1:], own_intact[1:], labels[~chosen],
                           resample_indices(int((~selection).sum()), settings.resamples, settings.bootstrap_seed),
                           halves_of.get("report"))
    low, high = deltas.interval(settings.level)
    report_scores = configuration_scores(metric, report, labels[~chosen], halves_of.get("report"))
    rows = [{
        "step": 0, "added": None, "layer": None, "head": None, "disabled": "intact",
        "selection_score": intact_score, "selection_delta": 0.0,
        "report_score": float(report_scores[0]), "report_delta": 0.0, "report_ci_low": 0.0, "report_ci_high": 0.0,
    }]
    for position, step in enumerate(steps):
        rows.append({
            "step": step.step, "added": head_name(*step.added), "layer": step.added[0], "head": step.added[1],
            "disabled": configs[position + 1].name,
            "selection_score": step.selection_score, "selection_delta": step.selection_score - intact_score,
            "report_score": float(report_scores[position + 1]), "report_delta": float(deltas.delta[position]),
            "report_ci_low": float(low[position]), "report_ci_high": float(high[position]),
        })
    table = pl.DataFrame(rows, schema_overrides={"added": pl.String, "layer": pl.Int16, "head": pl.Int16}).with_columns(
        pl.lit(settings.mode).alias("mode"), pl.lit(metric).alias("metric"),
        pl.lit(int(selection.sum())).alias("selection_examples"), pl.lit(int((~selection).sum())).alias("report_examples"),
    )
    return table, len(computed)
