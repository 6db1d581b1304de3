"""Time a model geometry's passes on a device, for the runtime cost model (:mod:`bertology_core.cost.model`).

The model is the architecture of a ``config.json`` with random weights (its cost does not depend on the weights), a
sequence classifier with two labels on the engine's attention, timed as the workflow's jobs run it:

- ``forward``: evaluation mode, no gradient, the last layer cut to the first token, float32 (TF32 on CUDA under the
  mixed policy): evaluation, sweeps, pruning searches, outliers; on a device of fused attention
  (:data:`~bertology_core.engine.attention_function.FUSED_DEVICES`) under a plan that scales every head, as those passes run there (the dumps and
  uniform disabling, which need the probabilities, run eager and somewhat slower);
- ``gradient``: forward and backward in evaluation mode to the activations alone, no weight gradient and no optimiser
  step (head importance's gradients to per-example gates in every layer; the frozen-weights head gates);
- ``train``: forward, backward, gradient clipping and an AdamW step, in the policy's training precision, on the
  model's default attention as fine-tuning runs it (SDPA where the model has it; the head gates, on the engine, run
  somewhat slower than this).

Batches are padded as real ones are (rows of different real lengths, attention masked). A kind's shapes are timed in
rounds, each shape once a round after a warm-up round, and each shape's median is kept: on a shared machine a slow
spell then spreads over every shape rather than tilting the fit. Shapes that would take much longer than the budget
are scaled down (fewer rows) first. A job's start-up is timed in fresh processes running the module-level imports of
a typical job script of its kind (:data:`STARTUP_SCRIPTS`): a model job's, then loading the model and its tokenizer
onto the device; a job that imports torch but loads no model; a table job.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from scipy.optimize import nnls
from transformers import AutoConfig, AutoModelForSequenceClassification, PretrainedConfig

from bertology_core.engine import plan
from bertology_core.engine import attention_function
from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.intervention import intervene
from bertology_core.engine.first_token import first_token_output
from bertology_core.finetune import training
from bertology_core.models import precision as precisions
from bertology_core.cost import model as cost

# (rows, length) per kind; on CUDA the forward passes reach the rows a GPU sweep runs (compute.gpu_rows_per_pass)
SHAPES = {
    "cpu": {"forward": [(8, 32), (16, 64), (48, 32), (48, 64), (48, 96), (48, 128), (16, 256)],
            "gradient": [(8, 32), (16, 32), (16, 64), (16, 96), (8, 128), (16, 128)],
            "train": [(8, 32), (8, 64), (32, 32), (32, 48), (32, 64), (32, 96), (16, 128), (32, 128)]},
    "cuda": {"forward": [(8, 32), (64, 64), (2048, 32), (512, 64), (2048, 64), (512, 128), (1024, 128), (256, 256), (4096, 64)],
             "gradient": [(8, 32), (32, 64), (32, 128), (128, 128), (64, 256)],
             "train": [(8, 32), (32, 32), (32, 64), (32, 128), (128, 128)]},
}
# a typical job script of each start-up kind (:func:`bertology_core.cost.estimate.startup_kind`), whose imports a
# fresh process runs; a model job then loads the model and its tokenizer onto the device
STARTUP_SCRIPTS = {"model": "dump_attention", "torch": "classify_maps", "tables": "disabling_summary"}
STARTUP_MODEL_LOAD = "from bertology_core.models import loading; loading.load_encoder({path!r}).to({device!r})"
STARTUP_TOKENIZER_LOAD = "; loading.load_tokenizer({path!r})"
SCRIPTS = Path(__file__).resolve().parents[2] / "workflow_scripts"


def random_classifier(config: PretrainedConfig, device: torch.device, engine: bool = True) -> torch.nn.Module:
    """A two-label classifier of ``config``'s architecture with random weights on ``device``: on the engine's attention
    (what sweeps, importance and dumps run), or with ``engine=False`` on transformers' default attention (what
    fine-tuning runs)."""
    config.num_labels = 2
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32).to(device)
    return use_engine(model) if engine else model


def _batch(config: PretrainedConfig, rows: int, length: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``rows`` random sequences padded to ``length``: the first full, the others of real lengths drawn from the upper
    half (as in length-grouped or sorted batches), so attention runs its masked path as on real data."""
    generator = torch.Generator().manual_seed(rows * 1000 + length)
    ids = torch.randint(min(1000, config.vocab_size // 2), min(config.vocab_size, 20000), (rows, length), generator=generator)
    real = torch.randint(max(1, length // 2), length + 1, (rows,), generator=generator)
    real[0] = length
    mask = (torch.arange(length)[None, :] < real[:, None]).long()
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
            "labels": torch.randint(0, 2, (rows,), generator=generator).to(device)}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pass_function(model: torch.nn.Module, kind: str, batch: dict[str, torch.Tensor], policy: precisions.Precision,
                  optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """One pass of ``kind`` on ``batch``, as the workflow's jobs run it."""

    fused = batch["input_ids"].device.type in attention_function.FUSED_DEVICES
    scales = scale_every_head(model) if kind == "forward" and fused else None

    def once() -> None:
        if kind == "forward":
            model.eval()
            with torch.inference_mode(), first_token_output(model), ExitStack() as stack:
                if scales is not None:
                    stack.enter_context(intervene(model, scales))
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
            return
        if kind == "gradient":  # gradients to the embeddings' output: every layer's activations, no weight
            model.eval()
            embeddings = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_()
            with first_token_output(model):
                loss = model(inputs_embeds=embeddings, attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
            torch.autograd.grad(loss, embeddings)
            return
        model.train()
        with precisions.training(policy), first_token_output(model):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return once


def scale_every_head(model: torch.nn.Module) -> plan.InterventionPlan:
    """A plan that scales every head of every layer by one: a sweep's pass, at the cost of its head scaling."""
    config = model.config
    return plan.InterventionPlan(edits={plan.site(layer, plan.HEAD_SCALE): torch.ones(1, config.num_attention_heads,
                                                                                        device=model.device)
                                        for layer in range(config.num_hidden_layers)})


# Kernels a pass launches on a GPU, counted on the CPU (:func:`count_kernels`). The profiler records every aten
# operator a pass calls, nested as they call each other; an operator launches a device kernel when it computes
# itself. Read top down, an operator
# - that takes tensor lists (``_foreach_*``, ``_fused_*``) launches what CUDA's multi_tensor_apply launches for them
#   (:func:`multi_tensor_launches`), whatever the CPU's implementation calls;
# - that is a view or alias (its schema returns an alias of an input: view, reshape, expand, transpose, slice, select,
#   detach, to, contiguous, ...) or an allocation or metadata change (:data:`NO_KERNEL`) launches nothing itself: what
#   it calls counts (a deterministic fill of fresh memory, a copy where a reshape must copy);
# - that has a kernel of its own (one registered for a backend: addmm, bmm, native_layer_norm, _softmax, fill_, ...)
#   launches one, and what its CPU implementation calls inside is not counted;
# - that CUDA runs as one fused kernel where the CPU composes it (:data:`FUSED_ON_CUDA`: dropout in training, which
#   CUDA runs as native_dropout and the CPU as bernoulli_, div_ and mul) launches one where it calls anything;
# - that calls no other operator and returns a tensor launches one (copy_), unless it is defined by other operators
#   alone (CompositeImplicitAutograd: dropout in evaluation returns its input);
# - any other (composite: linear, matmul, _to_copy, zeros_like) launches what it calls.
# One kernel an operator is a floor: on CUDA a few launch more (layer norm's backward two, the deterministic embedding
# backward a sort and its scans), and an .item() is a copy to the host and a wait rather than a kernel.
NO_KERNEL = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::empty_permuted",
                       "aten::new_empty", "aten::new_empty_strided", "aten::resize_", "aten::resize_as_", "aten::set_",
                       "aten::as_strided_", "aten::detach_", "aten::squeeze_", "aten::unsqueeze_", "aten::t_",
                       "aten::transpose_", "aten::_unsafe_view"})
FUSED_ON_CUDA = frozenset({"aten::dropout", "aten::feature_dropout"})
# tensors and blocks (of 65,536 elements) per launch of CUDA's multi_tensor_apply, by the lists an operator takes
# (ATen/native/cuda/MultiTensorApply.cuh, kernel arguments of 4 KB; builds for CUDA 13 pass 32 KB and launch fewer)
MULTI_TENSOR_MAX_TENSORS = (110, 64, 48, 36, 30)
MULTI_TENSOR_MAX_BLOCKS = 320
MULTI_TENSOR_CHUNK = 65536


def multi_tensor_launches(numels: Sequence[int], depth: int) -> int:
    """Kernels CUDA's multi_tensor_apply launches over tensors of ``numels`` elements in ``depth`` lists: one each time
    a launch is full (its most tensors, or its most chunks) and one for the rest."""
    sizes = [n for n in numels if n > 0]
    most_tensors = MULTI_TENSOR_MAX_TENSORS[min(depth, len(MULTI_TENSOR_MAX_TENSORS)) - 1]
    launches = tensors = blocks = 0
    for index, numel in enumerate(sizes):
        tensors += 1
        chunks = math.ceil(numel / MULTI_TENSOR_CHUNK)
        for chunk in range(chunks):
            blocks += 1
            last_chunk = chunk == chunks - 1
            if (tensors == most_tensors and last_chunk) or blocks == MULTI_TENSOR_MAX_BLOCKS or (last_chunk and index == len(sizes) - 1):
                launches += 1
                blocks = 0
                tensors = 0 if last_chunk else 1  # a tensor cut between launches starts the next one
    return launches


def _schemas(name: str) -> list[Any]:
    try:
        return list(torch._C._jit_get_schemas_for_operator(name))
    except RuntimeError:
        return []


_KIND_OF_OPERATOR: dict[str, str] = {}


def operator_kind(name: str) -> str:
    """How :func:`count_kernels` reads aten operator ``name``: ``multi`` (tensor lists), ``none`` (a view, alias,
    allocation or metadata change), ``fused`` (:data:`FUSED_ON_CUDA`), ``own`` (a kernel of its own), ``returns`` (a
    tensor from no other operator) or ``composite``."""
    if name in _KIND_OF_OPERATOR:
        return _KIND_OF_OPERATOR[name]
    schemas = _schemas(name)
    base = name.removeprefix("aten::")
    if base.startswith(("_foreach_", "_fused_")):
        found = "multi"
    elif name in NO_KERNEL or any(s.returns and all(r.alias_info is not None and not r.alias_info.is_write for r in s.returns)
                                  for s in schemas):
        found = "none"
    elif name in FUSED_ON_CUDA:
        found = "fused"
    elif any(_has_backend_kernel(name, s.overload_name, "CPU") for s in schemas):
        found = "own"
    elif any("Tensor" in str(r.type) for s in schemas for r in s.returns) and not any(
            _has_backend_kernel(name, s.overload_name, "CompositeImplicitAutograd") for s in schemas):
        found = "returns"
    else:
        found = "composite"
    _KIND_OF_OPERATOR[name] = found
    return found


def _has_backend_kernel(name: str, overload: str, key: str) -> bool:
    # a CPU build registers no CUDA kernels: the CPU's registration stands for the backend's (the same operators)
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"{name}.{overload}" if overload else name, key))
    except RuntimeError:
        return False


def profiled_kernels(events: Sequence[Any], list_numels: Sequence[int]) -> dict[str, int]:
    """Kernels per operator of a profile's ``events`` (``torch.profiler.profile(...).events()``), by the rule above;
    ``list_numels``: the sizes of the tensors in each list a multi-tensor operator takes (a training step's: one per
    trained parameter)."""
    counts: dict[str, int] = {}

    def visit(event: Any) -> None:
        name = event.name
        if not name.startswith("aten::"):
            for child in event.cpu_children:
                visit(child)
            return
        kind = operator_kind(name)
        if kind == "multi":
            depth = 4 if name.startswith("aten::_fused_adam") else 1  # params, gradients and both moments
            counts[name] = counts.get(name, 0) + multi_tensor_launches(list_numels, depth)
        elif kind == "own" or (kind == "fused" and event.cpu_children) or (kind == "returns" and not event.cpu_children):
            counts[name] = counts.get(name, 0) + 1
        else:
            for child in event.cpu_children:
                visit(child)

    for event in events:
        if event.cpu_parent is None:
            visit(event)
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def count_kernels(config: PretrainedConfig, shapes: dict[str, tuple[int, int]], policy: str = "mixed",
                  threads: int | None = None, fill_uninitialized: bool | None = None) -> dict[str, dict[str, int]]:
    """Kernels per operator of one pass of each kind in ``shapes`` (kind: (rows, length)) of ``config``'s geometry, as
    a CUDA GPU that computes bfloat16 would run it, counted on the CPU by the profiler (the rule above): the job's
    set-up (:func:`bertology_core.models.device.job_device`: deterministic algorithms), the policy's training
    precision as such a GPU resolves it (bfloat16 autocast under ``mixed``), forward passes on fused attention
    (:data:`~bertology_core.engine.attention_function.FUSED_DEVICES`), fine-tuning's fused AdamW (as
    :func:`~bertology_core.finetune.training.adamw` builds it on CUDA) and gradient clipping. Each pass is counted after
    one warm-up pass (the optimiser's state exists). ``fill_uninitialized``: torch's deterministic fill of fresh
    memory, on or off (None: as the job's set-up leaves it). The process's torch settings are restored after."""
    from torch.profiler import ProfilerActivity, profile

    from bertology_core.models.device import job_device

    deterministic = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    fill, threads_before, fused_devices = torch.utils.deterministic.fill_uninitialized_memory, torch.get_num_threads(), attention_function.FUSED_DEVICES
    matmul = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        device = job_device(threads or threads_before)
        if device.type != "cpu":
            device = torch.device("cpu")  # counted on the CPU wherever it runs: the profile's operators, not the GPU's
        if fill_uninitialized is not None:
            torch.utils.deterministic.fill_uninitialized_memory = fill_uninitialized
        resolved = precisions.resolve(policy, device, bfloat16=True)
        precisions.measuring(resolved)
        attention_function.FUSED_DEVICES = frozenset({*fused_devices, device.type})
        found = {}
        # CUDA's fused attention applies attention dropout inside its kernel; the CPU's has no dropout and trains on
        # the composed product instead: counted without attention dropout, the CPU runs its fused kernel as CUDA does
        counted = config.__class__.from_dict({**config.to_dict(), "attention_probs_dropout_prob": 0.0})
        for kind, (rows, length) in shapes.items():
            model = random_classifier(counted, device, engine=kind != "train")
            parameters = [p for p in model.parameters() if p.requires_grad]
            optimizer = training.adamw(parameters, 1e-5, torch.device("cuda"), resolved) if kind == "train" else None
            once = pass_function(model, kind, _batch(counted, rows, length, device), resolved, optimizer)
            once()
            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                once()
            found[kind] = profiled_kernels(profiled.events(), [p.numel() for p in parameters])
        return found
    finally:
        attention_function.FUSED_DEVICES = fused_devices
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.set_num_threads(threads_before)
        torch.set_float32_matmul_precision(matmul[0])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul[1:]


def time_passes(passes: Sequence[Callable[[], None]], device: torch.device, rounds: int, warm: bool = False) -> list[float]:
    """Seconds of each pass: the median over ``rounds`` rounds that run every pass once in turn (after one warm-up
    round unless ``warm``), so that a slow spell of a shared machine spreads over all shapes instead of biasing one."""
    if not warm:
        for once in passes:
            once()
        synchronize(device)
    times: list[list[float]] = [[] for _ in passes]
    for _ in range(rounds):
        for i, once in enumerate(passes):
            started = time.perf_counter()
            once()
            synchronize(device)
            times[i].append(time.perf_counter() - started)
    return [float(np.median(t)) for t in times]


def script_imports(script: str) -> str:
    """The module-level imports of workflow script ``script``, as a fresh process runs them (the workflow's code on
    the path, as ``_common`` puts it)."""
    tree = ast.parse((SCRIPTS / f"{script}.py").read_text())
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               and not (isinstance(node, ast.ImportFrom) and node.module == "_common")]
    return f"import sys; sys.path.insert(0, {str(SCRIPTS.parent)!r})\n" + "\n".join(ast.unparse(node) for node in imports)


def startup_seconds(command: str, repeats: int = 2) -> float:
    """Wall seconds of a fresh Python process running ``command`` (the fastest of ``repeats``)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", command], check=True, capture_output=True)
        best = min(best, time.perf_counter() - started)
    return best


def calibrate(config: PretrainedConfig, device: torch.device, policy: str, threads: int,
              budget_seconds: float = 240.0, shapes: dict[str, Sequence[tuple[int, int]]] | None = None,
              startup: bool = True, tokenizer: Any = None, patterns: dict[str, int] | None = None) -> cost.Calibration:
    """Time every kind's passes for ``config``'s geometry on ``device`` under the precision ``policy`` and fit their
    costs. Each kind gets about a third of ``budget_seconds`` (3 to 15 rounds); rows are scaled down where a round
    of the training shapes would take more than a tenth of it (a pass of the largest training shape sets the scale).
    With a ``tokenizer`` the stages that read attention dumps are timed too (:func:`time_map_stages`; ``patterns``:
    the config's ``image_size``, ``ensemble`` and ``classify_batch_size``).

    The passes run under the process's set-up: tools/calibrate.py makes it a job's first
    (:func:`bertology_core.models.device.job_device`: deterministic algorithms), so that what is timed is what the
    jobs run; the precision is resolved and set up as a job's (:func:`~bertology_core.models.precision.for_job`)."""
    if device.type == "cpu":
        torch.set_num_threads(threads)
    resolved = precisions.for_job(policy, device)
    geometry = cost.Geometry.from_config(config.to_dict())
    model = random_classifier(config, device)
    trained = random_classifier(config, device, engine=False)
    optimizer = training.adamw(trained.parameters(), 1e-5, device, resolved)  # as fine-tuning builds it
    shapes = dict(shapes or SHAPES["cuda" if device.type == "cuda" else "cpu"])
    # scale rows down where a round of the training shapes would take more than a tenth of the budget
    once = pass_function(trained, "train", _batch(config, *max(shapes["train"], key=lambda s: s[0] * s[1]), device), resolved, optimizer)
    once()
    synchronize(device)
    started = time.perf_counter()
    once()
    synchronize(device)
    probe = time.perf_counter() - started
    divisor = max(1, math.ceil(probe * len(shapes["train"]) * 10 / budget_seconds))
    points = []
    for kind in cost.KINDS:
        kind_shapes = sorted({(max(1, rows // divisor), length) for rows, length in shapes[kind]})
        batches = [_batch(config, rows, length, device) for rows, length in kind_shapes]
        functions = [pass_function(trained if kind == "train" else model, kind, b, resolved, optimizer) for b in batches]
        # rounds: about a third of the budget for each kind, at least 3 (the first round, timed, sizes them)
        first = time_passes(functions, device, 1)
        rounds = max(3, min(15, int(budget_seconds / 3 / max(sum(first), 1e-3))))
        for (rows, length), batch, seconds in zip(kind_shapes, batches, time_passes(functions, device, rounds, warm=True)):
            dense, attention = geometry.work(rows, length, first_token_cut=True)
            points.append({"kind": kind, "rows": rows, "length": length, "dense": dense, "attention": attention,
                           "tokens": int(batch["attention_mask"].sum()), "seconds": seconds})
    passes = {kind: cost.fit([p for p in points if p["kind"] == kind]) for kind in cost.KINDS}
    maps = {}
    if tokenizer is not None:
        settings = {"image_size": 32, "ensemble": 5, "classify_batch_size": 64, **(patterns or {})}
        maps = time_map_stages(config, tokenizer, device, passes["forward"], settings["image_size"], settings["ensemble"],
                               settings["classify_batch_size"])
        maps["tokenize"] = time_tokenizer(tokenizer)
        maps["pattern_training"] = time_pattern_training(settings["image_size"])
    startups = {}
    if startup:
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            load = "\n" + STARTUP_MODEL_LOAD.format(path=folder, device=str(device))
            if tokenizer is not None:
                tokenizer.save_pretrained(folder)
                load += STARTUP_TOKENIZER_LOAD.format(path=folder)
            startups = {kind: startup_seconds(script_imports(script) + (load if kind == "model" else ""))
                        for kind, script in STARTUP_SCRIPTS.items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return cost.Calibration(f"{device.type}: {name}", threads, policy, geometry, passes, startups, points, maps)


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "cpu"


def model_config(spec_folder: str | None, geometry: str | None) -> PretrainedConfig:
    """The config to calibrate: a model folder's ``config.json``, or a named geometry (``bert-base``: BertConfig's
    defaults, 12 x 768, feed-forward 3072) where the model is not on this machine."""
    if spec_folder:
        return AutoConfig.from_pretrained(spec_folder, trust_remote_code=False)
    if geometry == "bert-base":
        from transformers import BertConfig

        return BertConfig()
    raise ValueError(f"unknown geometry {geometry!r}: name a model folder or bert-base")


def synthetic_frame(tokenizer: Any, examples: int, words: int, seed: int) -> pl.DataFrame:
    """Sentence pairs of ``words`` random whole-word vocabulary entries each (about one piece a word)."""
    vocabulary = [w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2]
    rng = np.random.default_rng(seed)
    sentence = lambda: " ".join(rng.choice(vocabulary, size=words))  # noqa: E731
    return pl.DataFrame({"idx": np.arange(examples), "sentence1": [sentence() for _ in range(examples)],
                         "sentence2": [sentence() for _ in range(examples)], "label": np.zeros(examples, dtype=np.int64)})


def time_tokenizer(tokenizer: Any, examples: int = 400) -> dict[str, float]:
    """Seconds of :func:`~bertology_core.inputs.batching.encode` (what every model job does to its data first), fitted
    as ``per_example + per_piece x pieces`` from synthetic pairs of three lengths (the median of 3 timings each)."""
    from bertology_core.inputs.batching import encode

    rows = []
    for words in (4, 16, 48):
        frame = synthetic_frame(tokenizer, examples, words, words)
        encode(frame, tokenizer, 512)  # warm-up
        times = []
        for _ in range(3):
            started = time.perf_counter()
            encoded = encode(frame, tokenizer, 512)
            times.append(time.perf_counter() - started)
        rows.append((examples, float(encoded.lengths().sum()), float(np.median(times))))
    design = np.array([[n, pieces] for n, pieces, _ in rows])
    (per_example, per_piece), _ = nnls(design, np.array([seconds for _, _, seconds in rows]))
    return {"per_call": 0.0, "per_example": float(per_example), "per_piece": float(per_piece)}


# (examples, words a sentence) of the synthetic sentence-pair dumps the map stages are timed on: many short pairs to
# pairs cut at 128 pieces, each dump 800 maps or more, so that the cost of a map apart from its length (the CNN's
# pass, the feature columns) is told apart from the cost of its values: with few maps at short lengths the fit put
# pattern_features' cost on the values alone and priced the CPU profile's at half their CPU seconds
DUMP_SHAPES = ((32, 4), (16, 16), (12, 48), (12, 100))


def untrained_classifier(ensemble: int, image_size: int, source: str) -> Any:
    """A pattern classifier of ``ensemble`` untrained CNNs (seed 0) with the rule labeller's default thresholds: what
    classifying a dump costs does not depend on what the nets learnt."""
    from bertology_core.patterns import feature_tables
    from bertology_core.patterns.cnn import PatternEnsemble, PatternNet
    from bertology_core.patterns.training import LoadedClassifier

    torch.manual_seed(0)
    nets = [PatternNet(len(feature_tables.CLASSES), features=len(feature_tables.FEATURES)) for _ in range(ensemble)]
    return LoadedClassifier(PatternEnsemble(nets).eval(), np.array(feature_tables.CLASSES), image_size, source,
                            feature_tables.RuleThresholds())


def time_pattern_training(image_size: int, maps: int = 640, rounds: int = 3) -> dict[str, float]:
    """Seconds of training the pattern CNN per training map and pixel (``per_value``): the median of ``rounds`` fits of
    one net for one epoch (:class:`~bertology_core.patterns.cnn.PatternCNN`, its batch size) on ``maps`` random
    ``image_size`` x ``image_size`` maps with the pattern features. The rule pattern_classifier spends it nets x epochs
    x folds x training maps times (its cross-validation and final fit; :data:`bertology_core.cost.estimate.STAGE_WORK`).
    The CNN trains on the CPU whatever the accelerator: process CPU seconds."""
    from bertology_core.patterns import feature_tables
    from bertology_core.patterns.cnn import PatternCNN, pack

    generator = np.random.default_rng(0)
    X = pack(generator.random((maps, image_size, image_size), dtype=np.float32),
             generator.random((maps, len(feature_tables.FEATURES)), dtype=np.float32))
    y = np.array(feature_tables.CLASSES)[generator.integers(0, len(feature_tables.CLASSES), maps)]
    timings, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # as the rule runs (one thread): process CPU seconds of more threads would add up
    try:
        for _ in range(rounds):
            started = time.process_time()
            PatternCNN(image_size=image_size, epochs=1, ensemble=1).fit(X, y)
            timings.append(time.process_time() - started)
    finally:
        torch.set_num_threads(threads)
    return {"per_value": float(np.median(timings)) / (maps * image_size**2)}


def time_map_stages(config: PretrainedConfig, tokenizer: Any, device: torch.device, forward: cost.PassCost,
                    image_size: int, ensemble: int, classify_batch_size: int = 64,
                    shapes: Sequence[tuple[int, int]] = DUMP_SHAPES, rounds: int = 3) -> dict[str, dict[str, float]]:
    """Seconds of the stages that read attention dumps, fitted as ``maps x per_map + per_value x sum of length^2``
    (non-negative; ``per_call`` 0) from dumps of the model's geometry (``shapes``: examples, words a sentence): ``dump``
    (writing, the forward pass apart), ``pattern_features`` (:func:`~bertology_core.patterns.feature_tables.dump_features`)
    and ``classify_maps`` (:func:`~bertology_core.patterns.training.classify_dump` with an untrained ensemble of
    ``ensemble`` nets, ``classify_batch_size`` maps a pass), each shape's the median of ``rounds`` timings. On a CPU
    the seconds are the process's CPU seconds: the dump's writer thread compresses batch k beside the forward pass of
    batch k+1, which a job beside another on a busy machine does not get for free."""
    from bertology_core.attention import dumps
    from bertology_core.attention.dump_tables import AttentionDump
    from bertology_core.patterns import feature_tables
    from bertology_core.patterns.training import classify_dump

    model = random_classifier(config, device).eval()
    classifier = untrained_classifier(ensemble, image_size, "calibration")
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    geometry = cost.Geometry.from_config(config.to_dict())
    frames = [synthetic_frame(tokenizer, count, words, words + count) for count, words in shapes]
    timings: list[dict[str, list[float]]] = [{"dump": [], "pattern_features": [], "classify_maps": []} for _ in shapes]
    sizes: list[dict[str, float]] = [{} for _ in shapes]
    with tempfile.TemporaryDirectory() as folder:
        # every shape once a round, the median of ``rounds`` rounds: one timing a shape let a slow spell of a shared
        # machine decide a rate (two calibrations an hour apart priced classify_maps 1.8x apart)
        for _ in range(rounds):
            for number, frame in enumerate(frames):
                prefix = Path(folder) / f"dump{number}"
                started = clock()
                dumps.write_dump(model, tokenizer, frame, prefix, max_length=128, batch_size=32)
                dump_seconds = clock() - started
                dump = AttentionDump(prefix)
                started = clock()
                features = feature_tables.dump_features(dump)
                feature_seconds = clock() - started
                started = clock()
                classify_dump(classifier, dump, features, classify_batch_size)
                classify_seconds = clock() - started
                lengths = features["length"].to_numpy().astype(float)
                example_lengths = features.filter((pl.col("layer") == 0) & (pl.col("head") == 0))["length"].to_numpy()
                passes = cost.sorted_batches(example_lengths, 32)
                forward_seconds = sum(forward.seconds(*geometry.work(r, n, first_token_cut=False)) for r, n in passes)
                sizes[number] = {"maps": len(lengths), "squares": float((lengths ** 2).sum())}
                for stage, seconds in (("dump", max(0.0, dump_seconds - forward_seconds)),
                                       ("pattern_features", feature_seconds), ("classify_maps", classify_seconds)):
                    timings[number][stage].append(seconds)
    rows = [{**size, **{stage: float(np.median(values)) for stage, values in timed.items()}}
            for size, timed in zip(sizes, timings)]
    # no per-dump constant: with one, four dumps could not tell it from the cost per map (calibrations an hour apart
    # put pattern_features' cost 0.4 s a dump and 0.19 ms a map, or none and 0.54 ms), and a real dump has 20k maps
    found = {}
    design = np.array([[r["maps"], r["squares"]] for r in rows])
    for stage in ("dump", "pattern_features", "classify_maps"):
        (per_map, per_value), _ = nnls(design, np.array([r[stage] for r in rows]))
        found[stage] = {"per_call": 0.0, "per_map": float(per_map), "per_value": float(per_value)}
    return found
