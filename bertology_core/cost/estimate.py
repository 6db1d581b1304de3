"""What each job of a dry run costs on a calibrated device (:mod:`bertology_core.cost.model`): the passes its rule
runs, built from the job's own params and resources and the token lengths of its data, priced pass by pass.

Each model-running rule tokenises its data (the calibrated cost of the tokenizer per example and word piece), and its
passes follow its code (the batching of :func:`~bertology_core.data.batch_order.training_batches` for training,
longest-first passes for evaluation, sweeps grouped by the first layer where their configurations differ with the intact
model in every pass); a job adds the calibrated start-up of a model job. Searches whose length depends on their results
are priced at their bound (greedy disabling: every step; lottery pruning: every iteration up to the configured or
structural maximum), and say so. Rules that run no timed pass (probes, scores over attention maps) are
priced by units of their work (:data:`STAGE_WORK`) at rates fitted on a finished run (``tools/estimate_runtime.py
--fit-stages``): their cost runs on the CPU and does not move with the accelerator. Without such a rate a rule is priced
at the start-up of its kind of job alone (:func:`startup_kind`) and marked ``work not priced``. Passes are priced in
the seconds the calibration timed them in (on a CPU with one thread: wall = CPU seconds), the map stages in CPU
seconds on a CPU (a dump's writer thread included).

Torch-free: the token lengths come in as :class:`Lengths` (tools/estimate_runtime.py tokenises the prepared data).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertology_core.data import tasks
from bertology_core.data.batch_order import training_batches
from bertology_core.outliers.stats import PLACEMENTS
from bertology_core.cost.model import Calibration, ordered_batches, padded_batches, sorted_batches


@dataclass(frozen=True)
class Job:
    """One job of a dry run: its rule, wildcards, params, resources and threads, as Snakemake holds them."""

    rule: str
    wildcards: dict[str, str]
    params: dict[str, Any]
    resources: dict[str, Any]
    threads: int
    benchmark: str | None = None
    inputs: tuple[str, ...] = ()
    named_inputs: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    imports_torch: bool = False  # its script reaches torch (code_imports.third_party_imports): a heavier start-up
    outputs: tuple[str, ...] = ()
    named_outputs: dict[str, str] = field(default_factory=dict)
    local: bool = False  # a local rule's: runs where Snakemake runs, never submitted to a cluster


@dataclass
class Lengths:
    """Word-piece lengths (special tokens included, not yet cut) of every example of each prepared split, with its
    ``idx``: ``frames[(task, split)]`` is a polars frame ``idx, length``."""

    frames: dict[tuple[str, str], Any]

    def of(self, task: str, split: str, max_length: int, examples: int | None = None, seed: int = 0) -> np.ndarray:
        frame = tasks.subsample(self.frames[(task, split)], examples, seed)
        return np.minimum(frame["length"].to_numpy(), max_length)


@dataclass
class Price:
    """A job's estimated seconds and what they are made of."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)
    note: str = ""
    bounded: tuple[str, ...] = ()  # the parts priced at a search's bound (or as the whole model)


def _train_seconds(calibration: Calibration, lengths: np.ndarray, hyper: Mapping[str, Any], seed: int, kind: str = "train") -> float:
    batch = int(hyper.get("batch_size", 32))
    epochs = float(hyper.get("epochs", 3.0))
    steps_per_epoch = math.ceil(len(lengths) / batch)
    total = max(1, math.ceil(steps_per_epoch * epochs))
    generator = np.random.default_rng(seed)
    seconds, done = 0.0, 0
    while done < total:
        batches = training_batches(lengths, batch, generator, bool(hyper.get("group_by_length", False)))
        for rows, length in padded_batches(lengths, batches[: total - done]):
            seconds += calibration.seconds(kind, rows, length)
        done += min(len(batches), total - done)
    return seconds


def _forward_seconds(calibration: Calibration, lengths: np.ndarray, rows: int, first_token_cut: bool = True) -> float:
    return sum(calibration.seconds("forward", r, length, first_token_cut=first_token_cut) for r, length in sorted_batches(lengths, rows))


def _sweep_seconds(calibration: Calibration, lengths: np.ndarray, groups: list[tuple[int, int, int]], rows_per_pass: int) -> float:
    """Passes of configuration groups ``(first layer, configurations counted for the batch, configurations run)``."""
    seconds = 0.0
    for first_layer, counted, run in groups:
        examples = max(1, rows_per_pass // counted)
        for rows, length in sorted_batches(lengths, examples):
            seconds += calibration.seconds("forward", rows * run, length, from_layer=first_layer, shared_rows=rows)
    return seconds


def _on_cpu(calibration: Calibration) -> bool:
    return calibration.device.startswith("cpu")


def _rows_per_pass(job: Job, calibration: Calibration) -> int:
    return int(job.resources["rows_per_pass"] if _on_cpu(calibration) else job.resources["gpu_rows_per_pass"])


def _scoring_rows(job: Job, calibration: Calibration, cpu_rows: int) -> int:
    """Rows of a pass that scores without gradients, as the job sizes it (scoring.rows_per_pass): the stage's own size
    on a CPU, ``compute.gpu_rows_per_pass`` on a GPU."""
    return int(cpu_rows if _on_cpu(calibration) else job.resources.get("gpu_rows_per_pass", cpu_rows))


def _geometry(calibration: Calibration) -> tuple[int, int]:
    return calibration.geometry.layers, calibration.geometry.heads


def finetune(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    hyper = job.params["hyperparameters"]
    task, max_length = job.wildcards["task"], int(hyper["max_length"])
    parts = {}
    if job.rule == "finetune":
        parts["train"] = _train_seconds(calibration, lengths.of(task, "train", max_length), hyper, int(job.wildcards["seed"]))
    eval_batch = _scoring_rows(job, calibration, int(job.resources.get("eval_batch_size", 64)))
    parts["evaluate"] = sum(_forward_seconds(calibration, lengths.of(task, split, max_length), eval_batch, first_token_cut=False)
                            for split in job.params["eval_splits"])
    return Price(sum(parts.values()), parts)  # the splits come tokenised (tokenize_data)


def tokenize_data(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """Every prepared split of the task (its data inputs, ``results/data/{task}/{split}.parquet``), tokenised once."""
    splits = [Path(path).stem for path in job.inputs if path.endswith(".parquet")]
    seconds = calibration.tokenize_seconds(*(lengths.of(job.wildcards["task"], split, 1 << 30) for split in splits))
    return Price(seconds, {"tokenize": seconds}, "" if "tokenize" in calibration.maps else "work not priced")


def subnetwork_finetune(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    hyper = job.params["hyperparameters"]
    task, max_length = job.wildcards["task"], int(hyper["max_length"])
    train = lengths.of(task, "train", max_length, job.params["max_train_examples"], job.params["subsample_seed"])
    parts = {"train": _train_seconds(calibration, train, hyper, int(job.wildcards["seed"])),
             "evaluate": _forward_seconds(calibration, lengths.of(task, "dev", max_length), _scoring_rows(job, calibration, int(job.params["eval_batch_size"])), False)}
    return Price(sum(parts.values()), parts, "a pruned subnetwork priced as the whole model", ("train", "evaluate"))


def head_gates(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    hyper = dict(job.params["hyperparameters"]) | {"epochs": job.params["settings"]["epochs"]}
    task, max_length = job.wildcards["task"], int(hyper["max_length"])
    train = lengths.of(task, "train", max_length, job.params["settings"].get("train_examples"), job.params["subsample_seed"])
    kind = "train" if job.wildcards["weights"] == "trained" else "gradient"  # frozen weights: no weight update
    dev = lengths.of(task, "dev", max_length, job.params["dev_sample"]["examples"], job.params["dev_sample"]["seed"])
    parts = {"train": _train_seconds(calibration, train, hyper, int(job.wildcards["seed"]), kind),
             "evaluate": 4 * _forward_seconds(calibration, dev, _scoring_rows(job, calibration, int(job.resources.get("eval_batch_size", 64))))}
    return Price(sum(parts.values()), parts)


def disabling_sweep(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    layers, heads = _geometry(calibration)
    task = job.wildcards["task"]
    dev = lengths.of(task, "dev", int(job.params["max_length"]), job.params["max_examples"], job.params["subsample_seed"])
    per_layer = heads + (1 if job.params["layers"] else 0)
    # each layer's heads (and the layer) share a pass; the intact model joins every pass (the last layer's group holds it)
    groups = [(layer, per_layer, per_layer + 1) for layer in range(layers - 1)] + [(layers - 1, per_layer + 1, per_layer + 1)]
    seconds = len(job.params["modes"]) * _sweep_seconds(calibration, dev, groups, _rows_per_pass(job, calibration))
    return Price(seconds + calibration.tokenize_seconds(dev), {"sweep": seconds, "tokenize": calibration.tokenize_seconds(dev)})


def disabling_greedy(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    layers, heads = _geometry(calibration)
    task, max_steps = job.wildcards["task"], int(job.params["max_steps"])
    dev = lengths.of(task, "dev", int(job.params["max_length"]), job.params.get("max_examples"), job.params.get("subsample_seed", 0))
    half = dev[::2]  # the selection half (its lengths; the split itself is stratified by label)
    rows = _rows_per_pass(job, calibration)
    search = 0.0
    for step in range(2, max_steps + 1):  # step 1 reuses the sweep; every later step tries every head not yet chosen
        # a layer's heads share a pass with the set chosen so far (the reference)
        search += _sweep_seconds(calibration, half, [(layer, heads + 1, heads + 1) for layer in range(layers)], rows)
    # the report: the intact model and each step's set, about one group from the first chosen head's layer (0 at worst)
    report = _sweep_seconds(calibration, dev[1::2], [(0, max_steps + 1, max_steps + 1)], rows)
    parts = {"search": search, "report": report, "tokenize": calibration.tokenize_seconds(dev)}
    # priced whole, not at a share of the bound fitted on a finished run: a search of a few steps runs them all unless
    # no head raises the score, and a share fitted on one run's steps says nothing of another config's max_steps
    return Price(sum(parts.values()), parts, "every step priced (the search may stop earlier)")


def outlier_disabling(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    task = job.wildcards["task"]
    dev = lengths.of(task, "dev", int(job.params["max_length"]), job.params["max_examples"], job.params["subsample_seed"])
    configs = 1 + len(PLACEMENTS) * (1 + int(job.params["draws"]))
    rows = _rows_per_pass(job, calibration)
    per_pass = max(1, min(configs, rows))
    groups = []
    for start in range(0, configs, per_pass):
        size = min(per_pass, configs - start) + (0 if start == 0 else 1)  # the intact model in every pass
        groups.append((0, size, size))
    parts = {"disabling": _sweep_seconds(calibration, dev, groups, rows), "tokenize": calibration.tokenize_seconds(dev)}
    return Price(sum(parts.values()), parts, "priced as if outlier dimensions are found")


def _importance_seconds(job: Job, lengths: Lengths, calibration: Calibration) -> float:
    importance = job.params["importance"]
    task, max_length = job.wildcards["task"], int(job.params["max_length"])
    data = lengths.of(task, importance["importance_split"], max_length, importance["importance_examples"], importance["subsample_seed"])
    batch = int(importance.get("importance_batch_size") or job.resources.get("batch_size") or job.params.get("batch_size", 32))
    if job.rule == "head_importance" and not importance.get("importance_batch_size") and not _on_cpu(calibration):
        batch = int(job.resources.get("gpu_gradient_rows_per_pass", batch))  # a speed setting there: the GPU's size
    # batch granularity scores the batches in data order; the other granularities sort by length
    batches = ordered_batches(data, batch) if importance.get("importance_batch_size") else sorted_batches(data, batch)
    return sum(calibration.seconds("gradient", r, length) for r, length in batches)


def _dev_sample(job: Job, lengths: Lengths) -> np.ndarray:
    sample = job.params["dev_sample"]
    return lengths.of(job.wildcards["task"], "dev", int(job.params["max_length"]), sample["examples"], sample["seed"])


def head_importance(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    layers, heads = _geometry(calibration)
    per_step = max(1, round(float(job.params["step_share"]) * layers * heads))
    steps = math.ceil(layers * heads / per_step)
    batch = _scoring_rows(job, calibration, int(job.resources.get("batch_size", 32)))
    importance = _importance_seconds(job, lengths, calibration)
    parts = {"importance": importance * (steps if job.params["recompute"] else 1),
             "curve": (1 + steps) * _forward_seconds(calibration, _dev_sample(job, lengths), batch),
             "tokenize": calibration.tokenize_seconds(_dev_sample(job, lengths))}
    return Price(sum(parts.values()), parts)


def lottery_pruning(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    layers, heads = _geometry(calibration)
    dev = _dev_sample(job, lengths)
    held_out = job.wildcards["protocol"] == "held_out"
    selection = dev[::2] if held_out else dev
    batch = _scoring_rows(job, calibration, int(job.params["batch_size"]))
    evaluation = _forward_seconds(calibration, selection, batch)
    method = job.params["method"]
    if job.wildcards["method"] == "m":
        iterations, importance = 1 + int(method["max_iterations"]), 0.0
    else:  # phases: heads with MLPs, then (refine) heads at half the share and MLPs one by one; each iteration
        # recomputes importance; a phase's bound is what is left to prune
        share = max(1, round(float(method["head_share"]) * layers * heads))
        iterations = math.ceil(layers * heads / share)
        if method.get("refine", True):
            iterations += math.ceil(layers * heads / max(1, share // 2)) + layers
        importance = iterations * _importance_seconds(job, lengths, calibration)
    parts = {"evaluations": iterations * evaluation, "importance": importance,
             "report": _forward_seconds(calibration, dev[1::2] if held_out else dev, batch),
             "tokenize": calibration.tokenize_seconds(dev)}
    return Price(sum(parts.values()), parts, "every iteration up to the bound priced (the search stops at its threshold)",
                 ("evaluations", "importance"))


def compact_model(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    dev = _dev_sample(job, lengths)
    parts = {"evaluate": 7 * _forward_seconds(calibration, dev, _scoring_rows(job, calibration, int(job.resources.get("batch_size", 32)))),
             "tokenize": calibration.tokenize_seconds(dev)}
    return Price(sum(parts.values()), parts)


def _dumped_lengths(job: Job, lengths: Lengths) -> np.ndarray:
    """Lengths of the examples a dump holds: its job's sample of dev (``dump_params``, attached by the estimate to the
    jobs that read a dump), or the hand-labelled examples (``only_idx``)."""
    dump = job.params.get("dump_params", job.params)
    dev = lengths.of(job.wildcards["task"], "dev", int(dump["max_length"]), dump.get("max_examples"), dump.get("seed", 0))
    if job.params.get("only_idx") is not None:
        dev = dev[: len(job.params["only_idx"])]
    return dev


def _maps(calibration: Calibration) -> int:
    return calibration.geometry.layers * calibration.geometry.heads


def dump_attention(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    dev = _dumped_lengths(job, lengths)
    parts = {"forward": _forward_seconds(calibration, dev, int(job.params["batch_size"]), first_token_cut=False),
             "tokenize": calibration.tokenize_seconds(dev)}
    if "dump" in calibration.maps:
        parts["write"] = calibration.map_seconds("dump", dev, _maps(calibration))
    return Price(sum(parts.values()), parts, "" if "write" in parts else "writing the maps not priced")


def map_stage(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """A stage that reads every map of a dump (pattern features, the CNN's classes)."""
    if job.rule not in calibration.maps or "dump_params" not in job.params:
        return Price(0.0, {}, "work not priced")
    seconds = calibration.map_seconds(job.rule, _dumped_lengths(job, lengths), _maps(calibration))
    return Price(seconds, {"maps": seconds})


def probe_features(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """Every layer's states of the treebank samples (``("treebank", split)`` lengths: the sentences' word pieces),
    in treebank order, ``batch_size`` sentences a pass, the whole last layer."""
    sample = job.params["sample"]
    seconds = 0.0
    for split in ("train", "dev"):
        sentences = lengths.of("treebank", split, int(job.params["max_length"]), sample[split], sample["seed"])
        seconds += sum(calibration.seconds("forward", r, length, first_token_cut=False)
                       for r, length in ordered_batches(sentences, int(job.params["batch_size"])))
    return Price(seconds, {"forward": seconds}, "aligning words to pieces not priced")


def _treebank_words(job: Job, lengths: Lengths) -> float:
    sample = job.params["sample"]
    return float(sum(lengths.of(TREEBANK_WORDS, split, 1 << 30, sample[split], sample["seed"]).sum() for split in ("train", "dev")))


def _map_values(job: Job, lengths: Lengths, calibration: Calibration, dumps: int = 1) -> float:
    return dumps * _maps(calibration) * float((_dumped_lengths(job, lengths).astype(float) ** 2).sum())


def _syntactic_sentences(job: Job, lengths: Lengths) -> np.ndarray:
    settings = job.params["settings"]
    return lengths.of("treebank", settings["split"], int(job.params["max_length"]), settings["sentences"], job.params["seed"])


def _cnn_training_values(job: Job, lengths: Lengths, calibration: Calibration) -> float:
    """What the pattern CNN's training processes: nets x epochs x folds (the cross-validation's folds - 1 shares and
    the final fit on all) x training maps x pixels. The training maps: the hand-labelled ones where the run has hand
    labels (``training_maps``, counted from the label file by tools/estimate_runtime.py), else the configured sample
    of rule labels."""
    params = job.params
    return float(params["ensemble"] * params["epochs"] * params["cv_folds"] * params.get("training_maps", params["train_maps"])
                 * params["image_size"] ** 2)


def pattern_classifier(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """The CNN's training at the calibrated seconds per training map and pixel
    (:func:`~bertology_core.cost.calibration.time_pattern_training`); fitting the rule labeller on the hand labels and
    reading the maps are stage work (:data:`STAGE_WORK`, over the same units)."""
    rate = calibration.maps.get("pattern_training")
    if rate is None:
        return Price(0.0, {}, "")
    seconds = rate["per_value"] * _cnn_training_values(job, lengths, calibration)
    return Price(seconds, {"train": seconds})


def _syntactic_heads_values(job: Job, lengths: Lengths, calibration: Calibration) -> float:
    return _maps(calibration) * float((_syntactic_sentences(job, lengths).astype(float) ** 2).sum())


TREEBANK_WORDS = "treebank words"  # Lengths key of the treebank's sentences' word counts
# What the work that no timed pass prices grows with (its units), for rates fitted on a finished run
# (tools/estimate_runtime.py --fit-stages): the rule's seconds after start-up and its priced parts, over these units,
# the same CPU assumed. The probes train epochs x (layers + 1) softmax regressions over words x hidden features (the
# epochs: early stopping, folded into the rate); the map stages read every map; the pattern classifier's rest (fitting
# the rule labeller, reading the maps) over the units of its timed CNN training.
STAGE_WORK: dict[str, tuple[Callable[[Job, Lengths, Calibration], float], str]] = {
    "probe_layers": (lambda j, l, c: _treebank_words(j, l) * (c.geometry.layers + 1) * c.geometry.hidden * len(j.params["labels"]),
                     "words x layers x hidden size x label sets"),
    "layer_mix": (lambda j, l, c: _treebank_words(j, l) * (c.geometry.layers + 1) * c.geometry.hidden * len(j.params["labels"])
                  * len(j.params["probe_seeds"]), "words x layers x hidden size x label sets x probe seeds"),
    "linguistic_scores": (_map_values, "maps x length^2"),
    "head_roles": (_map_values, "maps x length^2"),
    "attention_change": (lambda j, l, c: _map_values(j, l, c, dumps=2), "maps x length^2 of two dumps"),
    "syntactic_heads": (_syntactic_heads_values, "maps x length^2 of the sentences"),
    "pattern_classifier": (_cnn_training_values, "nets x epochs x folds x training maps x pixels"),
    "spacy_tokens": (lambda j, l, c: float(l.of(j.wildcards["task"], "dev", 1 << 30).sum()), "word pieces of dev"),
}


def stage_units(job: Job, lengths: Lengths, calibration: Calibration) -> float | None:
    """The units of ``job``'s work where its rule is in :data:`STAGE_WORK`, else None."""
    found = STAGE_WORK.get(job.rule)
    return found[0](job, lengths, calibration) if found else None


def rate_key(job: Job) -> str:
    """Whose fitted rate or share of the bound a job takes: its rule; for the searches and subnetworks also their method
    (an s-pruning search or subnetwork is another length than an m-pruning one; the full model is no search); for the
    probes whether a converged logistic regression (lbfgs, another cost per unit) is fitted beside the SGD probes."""
    if job.rule == "lottery_pruning":
        return f"{job.rule}:{job.wildcards['method']}"
    if job.rule == "subnetwork_finetune":
        return f"{job.rule}:{job.wildcards['network'].split('-')[0]}"
    if job.rule == "probe_layers" and job.params.get("reference_regularisation") is not None:
        return f"{job.rule}:reference"
    return job.rule


@dataclass(frozen=True)
class FitTerm:
    """What one measured job says about its rate key: ``work`` seconds the calibration did not price, over ``units``
    (a :data:`STAGE_WORK` rule's units, or a bounded job's seconds at its whole bound)."""

    key: str
    work: float
    units: float
    kind: str  # "seconds_per_unit" or "share_of_bound"


def fit_terms(measured: list[tuple[Job, float]], lengths: Lengths, calibration: Calibration) -> list[FitTerm | None]:
    """Per measured job, its :class:`FitTerm` (None for a job whose passes the calibration prices whole): for a
    :data:`STAGE_WORK` rule, its seconds after start-up and its priced parts; for a job with bounded parts (searches,
    subnetworks), its seconds after start-up and its other parts, over its bounded parts."""
    bare = dataclasses.replace(calibration, stages={})
    terms: list[FitTerm | None] = []
    for job, seconds in measured:
        priced = price(job, lengths, bare)
        if job.rule in STAGE_WORK:
            terms.append(FitTerm(rate_key(job), max(0.0, seconds - priced.seconds), stage_units(job, lengths, calibration) or 0.0,
                                 "seconds_per_unit"))
        elif priced.bounded:
            bounded = sum(priced.parts[name] for name in priced.bounded)
            terms.append(FitTerm(rate_key(job), max(0.0, seconds - (priced.seconds - bounded)), bounded, "share_of_bound"))
        else:
            terms.append(None)
    return terms


def rates_of(terms: list[FitTerm | None], source: str) -> dict[str, dict[str, Any]]:
    """The rates of ``terms``, summed per key (a long job weighs as much as its work)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for term in terms:
        if term is not None:
            total = sums.setdefault((term.key, term.kind), [0.0, 0.0])
            total[0] += term.work
            total[1] += term.units
    return {key: {kind: work / units, "from": source} for (key, kind), (work, units) in sums.items() if units > 0}


def fit_stage_rates(measured: list[tuple[Job, float]], lengths: Lengths, calibration: Calibration, source: str) -> dict[str, dict[str, Any]]:
    """What a finished run's measured seconds per job say about the work the calibration cannot time
    (:func:`fit_terms`): for each :func:`rate_key` of a :data:`STAGE_WORK` rule its ``seconds_per_unit``, for each
    rate key of a bounded job its ``share_of_bound``. A job resumed from a checkpoint measured its last attempt alone:
    leave it out."""
    return rates_of(fit_terms(measured, lengths, calibration), source)


def cross_fitted_rates(measured: list[tuple[Job, float]], lengths: Lengths, calibration: Calibration, source: str,
                       group: Callable[[Job], str], held_out: str = "its group",
                       terms: list[FitTerm | None] | None = None) -> list[dict[str, dict[str, Any]]]:
    """Per measured job, the rates fitted on the run's jobs of other groups alone (``group``: e.g. the job's task;
    ``held_out`` says what was left out in the rates' source, "without ..."): what the estimate would have said of
    each job without having seen it or its group, so that a run can validate rates fitted on itself. A key whose
    every job is in the job's group has no rate there. ``terms``: :func:`fit_terms` of ``measured``, where the caller
    already has them (they price every job's passes)."""
    terms = fit_terms(measured, lengths, calibration) if terms is None else terms
    groups = [group(job) for job, _ in measured]
    fitted: dict[str, dict[str, dict[str, Any]]] = {}
    for name in set(groups):
        fitted[name] = rates_of([t for t, g in zip(terms, groups) if g != name], f"{source} without {held_out}")
    return [fitted[name] for name in groups]


def syntactic_heads(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """Forward passes of the treebank sample with every map kept (the scoring of the maps is stage work)."""
    seconds = sum(calibration.seconds("forward", r, length, first_token_cut=False)
                  for r, length in ordered_batches(_syntactic_sentences(job, lengths), int(job.params["settings"]["batch_size"])))
    return Price(seconds, {"forward": seconds})


# bytes of English text per word piece of a BERT-style WordPiece vocabulary (about 1.3 pieces to a word of about 5.7
# bytes with its space): a rough figure, as a corpus file is priced without tokenising it
CORPUS_BYTES_PER_PIECE = 4.5


@functools.lru_cache(maxsize=16)
def _corpus_lines(path: str, size: int, stamp: int) -> int:
    """Lines of a text file (cached by its size and modification time: a plan prices every roles job)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            lines, last = lines + chunk.count(b"\n"), chunk[-1:]
    return lines + (last != b"\n")


def head_roles(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """Counting the word pieces of what the rare-token role counts on (one pass of the tokenizer without a second,
    uncut one: about half of what :func:`~bertology_core.inputs.batching.encode` costs): the task's training text, or
    the job's ``frequency_corpus`` input (head_roles.frequency_corpus), its lines at its bytes over
    :data:`CORPUS_BYTES_PER_PIECE` pieces; the maps' scoring is stage work."""
    corpus = job.named_inputs.get("frequency_corpus")
    if corpus and Path(corpus).is_file():
        stat = Path(corpus).stat()
        lines = max(1, _corpus_lines(str(corpus), stat.st_size, stat.st_mtime_ns))
        # every line at the mean length: a broadcast view, not an array as long as the corpus
        texts = np.broadcast_to(np.float64(stat.st_size / CORPUS_BYTES_PER_PIECE / lines), (lines,))
        seconds = 0.5 * calibration.tokenize_seconds(texts)
        note = f"frequency corpus of {stat.st_size / 1e6:.3g} MB priced at {CORPUS_BYTES_PER_PIECE} bytes a piece"
        return Price(seconds, {"count pieces": seconds}, note)
    seconds = 0.5 * calibration.tokenize_seconds(lengths.of(job.wildcards["task"], "train", 1 << 30))
    return Price(seconds, {"count pieces": seconds})


PRICED: dict[str, Callable[[Job, Lengths, Calibration], Price]] = {
    "finetune": finetune, "evaluate_pretrained": finetune, "evaluate_finetuned": finetune,
    "subnetwork_finetune": subnetwork_finetune,
    "head_gates": head_gates, "disabling_sweep": disabling_sweep, "disabling_greedy": disabling_greedy,
    "outlier_disabling": outlier_disabling, "head_importance": head_importance, "lottery_pruning": lottery_pruning,
    "compact_model": compact_model, "dump_attention": dump_attention, "tokenize_data": tokenize_data,
    "syntactic_heads": syntactic_heads, "head_roles": head_roles, "labelled_maps": dump_attention,
    "probe_features": probe_features, "pattern_features": map_stage, "classify_maps": map_stage,
    "pattern_classifier": pattern_classifier,
}


# the rules whose jobs start like a model job (torch, transformers and the model or tokenizer loaded)
MODEL_RULES = {rule for rule, pricer in PRICED.items() if pricer not in (map_stage, head_roles, pattern_classifier)}


def startup_kind(job: Job, calibration: Calibration) -> str:
    """How ``job`` starts (:data:`bertology_core.cost.calibration.STARTUP_SCRIPTS`): ``model`` (a model and its
    tokenizer loaded), ``torch`` (a script that imports torch and loads no model; a calibration without that kind
    prices it as a model job), or ``tables``."""
    if job.rule in MODEL_RULES:
        return "model"
    if job.imports_torch:
        return "torch" if "torch" in calibration.startup else "model"
    return "tables"


def price(job: Job, lengths: Lengths, calibration: Calibration) -> Price:
    """The job's seconds: the calibrated start-up of its kind of job, its priced passes (bounded parts at the share of
    their bound a finished run reached, where the calibration has one) and its stage work at a fitted rate."""
    pricer = PRICED.get(job.rule)
    result = pricer(job, lengths, calibration) if pricer else Price(0.0, {}, "")
    parts, notes = dict(result.parts), [result.note] if result.note else []
    key = rate_key(job)
    share = calibration.stages.get(key, {}).get("share_of_bound")
    if share is not None and result.bounded:
        for name in result.bounded:
            parts[name] *= share
        notes = [f"{share:.2f} of the bound, the share reached in {calibration.stages[key]['from']}"]
    # a key without a rate of its own (e.g. the one reference probe of a run) takes its rule's, and says so
    rated = key if "seconds_per_unit" in calibration.stages.get(key, {}) else job.rule
    rate = calibration.stages.get(rated, {}).get("seconds_per_unit")
    units = stage_units(job, lengths, calibration) if rate is not None else None
    if units is not None:
        parts["work"] = rate * units
        notes.append(f"rate of {STAGE_WORK[job.rule][1]}{'' if rated == key else f' of {rated} (none of {key})'} "
                     f"from {calibration.stages[rated]['from']}")
    elif job.rule in STAGE_WORK or pricer is None:
        notes.append("work not priced")
    startup = calibration.startup.get(startup_kind(job, calibration), 0.0)
    return Price(startup + sum(parts.values()), {"startup": startup, **parts}, "; ".join(notes), result.bounded)
