"""A runtime cost model: what a job's forward and training passes cost on one device, from a short calibration.

A pass of ``rows`` sequences padded to ``length`` word pieces through an encoder (:class:`Geometry`) does

- *dense* work, proportional to rows x length: per layer the query, key and value projections (3 h^2 multiply-adds
  per token), the output projection and the feed-forward network (h^2 + 2 h i), the last two on the first token
  alone in the last layer where a classifier reads only it (the engine's first-token cut);
- *attention* work, proportional to rows x length^2: the scores and the weighted sum (2 L h per token).

Its time on a device is ``overhead + dense / dense_rate + attention / attention_rate`` (the ``sum`` form: a CPU runs
Python, kernels and the optimiser one after another) or ``max(floor, dense / dense_rate + attention / attention_rate)``
(the ``max`` form: a GPU runs the kernels while Python queues the next ones, so a small pass costs its launch floor),
with the rates and the floor or overhead fitted to passes timed on the device (:func:`fit`,
``bertology_core.cost.calibration``); the form that fits the calibration's own passes better is kept. Three kinds
of pass are calibrated apart: ``forward`` (inference, no gradient), ``gradient`` (forward and backward, no optimiser
step: head importance) and ``train`` (forward, backward and an AdamW step, in the precision the job trains in).

This module is torch-free: the estimate (tools/estimate_runtime.py) prices the jobs of a dry run with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

KINDS = ("forward", "gradient", "train")
FORMS = ("sum", "max")


@dataclass(frozen=True)
class Geometry:
    """What a pass's work depends on: layers, hidden size and feed-forward size (and the heads, which a sweep's
    configurations count). The work is counted for BERT's layout (and RoBERTa's, ELECTRA's, XLM-R's, DeBERTa's): the
    first-token cut at the attention output block. DistilBERT, ALBERT and ModernBERT cut at the feed-forward input
    (their output projection runs on every token), ModernBERT's gated feed-forward has 3 h i multiply-adds and its
    mean pooling no cut: for those the work is somewhat undercounted."""

    layers: int
    hidden: int
    intermediate: int
    heads: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Geometry":
        """From a Hugging Face ``config.json`` (BERT's key names, and DistilBERT's ``n_layers``/``dim``/``hidden_dim``)."""
        layers = config.get("num_hidden_layers", config.get("n_layers"))
        hidden = config.get("hidden_size", config.get("dim"))
        intermediate = config.get("intermediate_size", config.get("hidden_dim"))
        heads = config.get("num_attention_heads", config.get("n_heads"))
        if not all(isinstance(v, int) and v > 0 for v in (layers, hidden, intermediate, heads)):
            raise ValueError("the model's config.json names no layer count, hidden size, feed-forward size and head count "
                             "(num_hidden_layers, hidden_size, intermediate_size, num_attention_heads)")
        return cls(layers, hidden, intermediate, heads)

    def work(self, rows: float, length: float, from_layer: int = 0, shared_rows: float | None = None,
             first_token_cut: bool = True) -> tuple[float, float]:
        """Floating-point operations ``(dense, attention)`` of one forward pass: ``rows`` sequences padded to ``length``
        from ``from_layer`` on, and ``shared_rows`` of them (default: all) below it, the layers a sweep's configurations
        share (prefix reuse)."""
        h, i = self.hidden, self.intermediate
        below = rows if shared_rows is None else shared_rows
        dense = attention = 0.0
        for layer in range(self.layers):
            r = rows if layer >= from_layer else below
            tokens_after_attention = r if (first_token_cut and layer == self.layers - 1) else r * length
            dense += 2 * (3 * h * h * r * length + (h * h + 2 * h * i) * tokens_after_attention)
            attention += 2 * (2 * length * length * h * r)
        return dense, attention


@dataclass(frozen=True)
class PassCost:
    """One kind of pass on one device: its fitted form and coefficients (seconds)."""

    form: str  # "sum" or "max"
    constant: float  # the overhead (sum form) or the floor (max form), seconds
    seconds_per_dense: float  # seconds per dense floating-point operation
    seconds_per_attention: float
    error: float = 0.0  # the fit's mean absolute relative error on the calibration's passes

    def seconds(self, dense: float, attention: float) -> float:
        work = dense * self.seconds_per_dense + attention * self.seconds_per_attention
        return self.constant + work if self.form == "sum" else max(self.constant, work)


def fit(points: Sequence[Mapping[str, float]]) -> PassCost:
    """The :class:`PassCost` of timed passes ``{dense, attention, seconds}``: non-negative least squares on relative
    errors for each form; the form kept is the one that predicts each pass better when fitted without it
    (leave-one-out mean absolute relative error, its ``error``)."""
    if len(points) < 4:
        raise ValueError(f"a pass cost needs at least 4 timed passes, got {len(points)}")
    fitted = {}
    for form in FORMS:
        misses = []
        for left_out in range(len(points)):
            rest = [p for i, p in enumerate(points) if i != left_out]
            candidate = _fit_form(rest, form)
            point = points[left_out]
            misses.append(abs(candidate.seconds(point["dense"], point["attention"]) - point["seconds"]) / point["seconds"])
        whole = _fit_form(points, form)
        fitted[form] = PassCost(form, whole.constant, whole.seconds_per_dense, whole.seconds_per_attention, float(np.mean(misses)))
    return min(fitted.values(), key=lambda c: c.error)


def _fit_form(points: Sequence[Mapping[str, float]], form: str) -> PassCost:
    """One form's coefficients (see :func:`fit`)."""
    dense = np.array([p["dense"] for p in points], dtype=float)
    attention = np.array([p["attention"] for p in points], dtype=float)
    seconds = np.array([p["seconds"] for p in points], dtype=float)
    weights = 1 / seconds  # relative errors: a 10 ms pass counts as much as a 10 s one
    scale = np.array([1.0, dense.max(), attention.max() or 1.0])
    design = np.column_stack([np.ones_like(dense), dense / scale[1], attention / scale[2]])
    if form == "sum":
        coefficients, _ = nnls(design * weights[:, None], seconds * weights)
        coefficients = coefficients / scale
        return PassCost("sum", float(coefficients[0]), float(coefficients[1]), float(coefficients[2]))
    # max form: the rates from the passes well above the smallest, the floor from the smallest
    large = seconds > 1.5 * seconds.min()
    chosen = large if large.sum() >= 2 else np.ones_like(large)
    work_only, _ = nnls(design[chosen][:, 1:] * weights[chosen][:, None], seconds[chosen] * weights[chosen])
    work_only = work_only / scale[1:]
    return PassCost("max", float(seconds.min()), float(work_only[0]), float(work_only[1]))


@dataclass(frozen=True)
class Calibration:
    """Pass costs of one model geometry on one device in one precision policy, and a job's start-up there."""

    device: str  # what torch calls the device, and its name (e.g. "cpu: Intel(R) Xeon(R) Processor")
    threads: int
    precision: str  # the policy (compute.precision)
    geometry: Geometry
    passes: dict[str, PassCost]  # KINDS
    # seconds before a job's work (estimate.startup_kind): "model" (imports, loading a model and its tokenizer),
    # "torch" (a script that imports torch and loads no model), "tables"
    startup: dict[str, float]
    points: list[dict[str, Any]] = field(default_factory=list)  # every timed pass, for the record
    # the stages that read dumps: seconds {"per_call", "per_map", "per_value"} (x length^2); "tokenize":
    # {"per_example", "per_piece"}; "pattern_training": {"per_value"} (a training map's pixel, one net, one epoch)
    maps: dict[str, dict[str, float]] = field(default_factory=dict)
    # rules that run no timed pass, priced by their work units (estimate.STAGE_WORK) at a rate fitted on a finished
    # run of this CPU: {rule: {"seconds_per_unit", "from"}}
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: int = 1  # processes doing the same passes at once while these were timed (tools/calibrate.py --jobs)

    def map_seconds(self, stage: str, lengths: np.ndarray, maps_per_example: int) -> float:
        """Seconds of ``stage`` over every map of examples of ``lengths`` (``maps_per_example``: layers x heads)."""
        rate = self.maps[stage]
        lengths = np.asarray(lengths, dtype=float)
        return rate.get("per_call", 0.0) + maps_per_example * float(len(lengths) * rate["per_map"] + (lengths ** 2).sum() * rate["per_value"])

    def tokenize_seconds(self, *lengths: np.ndarray) -> float:
        """Seconds of tokenising examples of ``lengths`` (word pieces), as a job does before its passes (0 where the
        calibration did not time the tokenizer)."""
        rate = self.maps.get("tokenize")
        if not rate:
            return 0.0
        return sum(len(part) * rate["per_example"] + float(np.sum(part)) * rate["per_piece"] for part in lengths)

    def seconds(self, kind: str, rows: float, length: float, **work: Any) -> float:
        return self.passes[kind].seconds(*self.geometry.work(rows, length, **work))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def read(cls, path: str | Path) -> "Calibration":
        values = json.loads(Path(path).read_text())
        try:
            return cls(values["device"], values["threads"], values["precision"], Geometry(**values["geometry"]),
                       {k: PassCost(**v) for k, v in values["passes"].items()}, values["startup"], values.get("points", []),
                       values.get("maps", {}), values.get("stages", {}), int(values.get("jobs", 1)))
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a calibration file ({error}). Fix: write it with `make calibrate`.") from error


def padded_batches(lengths: np.ndarray, batches: Iterable[np.ndarray]) -> list[tuple[int, int]]:
    """``(rows, padded length)`` of each batch of example indices."""
    return [(len(b), int(lengths[b].max())) for b in batches if len(b)]


def ordered_batches(lengths: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """``(rows, padded length)`` of the passes over examples in their own order, ``rows`` at a time."""
    lengths = np.asarray(lengths)
    return [(len(lengths[s : s + rows]), int(lengths[s : s + rows].max())) for s in range(0, len(lengths), max(1, rows))]


def sorted_batches(lengths: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """``(rows, padded length)`` of the passes over examples sorted by length, longest first, ``rows`` at a time
    (how evaluation, dumps and sweeps batch)."""
    ordered = np.sort(np.asarray(lengths))[::-1]
    return [(len(ordered[s : s + rows]), int(ordered[s])) for s in range(0, len(ordered), max(1, rows))]
