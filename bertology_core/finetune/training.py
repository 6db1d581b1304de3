"""Fine-tuning and evaluation of sequence classifiers on a declared task, in one plain loop.

Defaults are those of Kovaleva et al. 2019 (from BERT's ``run_classifier``):
batch 32, 3 epochs, learning rate 2e-5, max length 128, AdamW with linear decay
after a 10% linear warm-up. Batches are padded dynamically; optionally examples
of similar length are batched together (``group_by_length``, as HF Trainer's
option), which changes batch composition, not the objective.

Everything random (head init, dropout, shuffling) derives from ``seed``, so a
run on CPU is repeatable bit for bit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from bertology_core.data import states
from bertology_core.data.batch_order import training_batches
from bertology_core.inputs.batching import Encoded, Ragged, TokenFile, encode_split, frame_labels, to_device
from bertology_core.models.checkpoint import Checkpointer, TrainingState
from bertology_core.models import precision as precisions
from bertology_core.models.device import default_device, halving_on_oom
from bertology_core.models.precision import Precision
from bertology_core.models.loading import SAVED, load_classifier_reported, load_tokenizer
from bertology_core.engine.first_token import first_token_output
from bertology_core.data.failpoints import failpoint
from bertology_core.data.tasks import Task
from bertology_core.stats.metrics import compute_metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinetuneConfig:
    batch_size: int = 32
    epochs: float = 3.0
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_length: int = 128
    group_by_length: bool = False
    # how a training step runs, not what it computes (COMPILE_MODES; compute.compile): not among the hyper-parameters
    compile: str = "none"

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "FinetuneConfig":
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "compile"}


# compute.compile: none (eager), default (torch.compile of the forward pass and its loss: fewer, fused kernels), or
# cuda-graphs (torch.compile's reduce-overhead mode, CUDA graphs replaying a step's kernels in one launch; batches padded
# to a multiple of CUDA_GRAPH_LENGTH_STEP tokens, so that at most max_length / step graphs are captured)
COMPILE_MODES = ("none", "default", "cuda-graphs")
CUDA_GRAPH_LENGTH_STEP = 16


def compiled_forward(model: PreTrainedModel, mode: str, device: torch.device, max_length: int = 512) -> Callable[..., Any]:
    """What a training step calls for its forward pass and loss under ``mode`` (:data:`COMPILE_MODES`); the compiled
    module shares ``model``'s parameters. A compiled step draws its dropout masks from inductor's own generator: the
    same distribution, not the same masks as eager, so losses agree in distribution, and exactly without dropout."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compute.compile = {mode!r}: expected one of {COMPILE_MODES}. Fix: set compute.compile to none.")
    if mode == "none":
        return model
    if mode == "cuda-graphs":
        if device.type != "cuda":
            raise ValueError(f"compute.compile = cuda-graphs needs a CUDA device; this job runs on {device.type}. "
                             "Fix: set compute.compile to none or default.")
        # one graph per padded shape (rows, width): every width bucket of a full and of a last, partial batch, compiled
        # rather than left to run eager past dynamo's default limit of 8
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * (max_length // CUDA_GRAPH_LENGTH_STEP + 1))
        return torch.compile(model, mode="reduce-overhead", dynamic=False)
    return torch.compile(model, dynamic=True)


# no weight decay for biases and normalisation weights (BERT's recipe)
NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Fine-tuning's optimiser groups: weight decay on every weight but biases and normalisation weights."""
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
    ]


def labels_tensor(task: Task, labels: np.ndarray | Ragged, rows: np.ndarray | list[int], data: Encoded,
                  width: int) -> torch.Tensor:
    """The targets of examples ``rows`` in a padded batch ``width`` pieces wide: a class id or a score per example; for
    a token task (``labels``: each sentence's class ids) a class id on each word's first piece and -100, which the
    loss ignores, on every other piece (Devlin et al. 2019's tagging recipe)."""
    if task.is_token:
        assert isinstance(labels, Ragged)
        return torch.from_numpy(data.piece_labels(labels, rows, width))
    return torch.tensor(np.asarray(labels)[np.asarray(rows, dtype=np.int64)],
                        dtype=torch.float32 if task.is_regression else torch.long)


# training losses are read from the device every this many steps (and before a checkpoint and at the end): reading
# one is a host-device synchronisation, which on a GPU would stall every step
LOSS_READ_STEPS = 25


def adamw(parameters: Any, learning_rate: float, device: torch.device, precision: Precision) -> torch.optim.AdamW:
    """Fine-tuning's optimiser: AdamW, fused where that pays. The fused kernel is one launch per step on a GPU; on a CPU
    (under the mixed policy, which trades bit-for-bit reproduction of float32 runs for speed) it saves a fifth of a
    bfloat16 step; the same update up to rounding."""
    return torch.optim.AdamW(parameters, lr=learning_rate, fused=device.type == "cuda" or precision.policy == "mixed")


def train(
    model: PreTrainedModel,
    task: Task,
    data: Encoded,
    labels: np.ndarray | Ragged,
    config: FinetuneConfig,
    seed: int,
    progress: bool = True,
    checkpointer: Checkpointer | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    optimizer_groups: list[dict[str, Any]] | None = None,
    precision: Precision | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` in place; return a training record (losses, steps, seconds).

    ``precision`` (:mod:`bertology_core.models.precision`; None: float32) says what the forward passes compute in:
    bfloat16 autocast, or float32 with or without TF32 products; the weights and the optimiser stay float32. The
    loop ends with the process set up to measure in ``precision`` (:func:`~bertology_core.models.precision.measuring`;
    without one, TF32 off).

    ``model(**batch, labels=...)`` must return an object with a ``loss``; the optimiser (AdamW, fine-tuning's
    learning rate unless a group sets its own) trains ``optimizer_groups`` (default: :func:`parameter_groups`).

    ``on_epoch_end(epoch)`` is called after each complete epoch with the model in eval mode (to score
    it along the way: ``benchmarks/finetune_recipes.py``); it must not change the model or draw random
    numbers from torch's global generator, else the run is no longer the one without it.

    With a ``checkpointer`` the loop saves its whole state now and then and, when a
    checkpoint of the same run exists, resumes from it; the result is identical to an
    uninterrupted run (the epoch's batch order is redrawn from the saved generator state).
    """
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    generator = np.random.default_rng(seed)
    lengths = data.lengths()
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    total_steps = max(1, math.ceil(steps_per_epoch * config.epochs))
    groups = parameter_groups(model, config.weight_decay) if optimizer_groups is None else optimizer_groups
    precision = precision or precisions.resolve("float32", device)
    precisions.set_matmul_precision(precision.training == precisions.TF32)
    optimizer = adamw(groups, config.learning_rate, device, precision)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total_steps), total_steps)
    if config.compile != "none" and model.config.problem_type is None:
        # what the model's first forward pass would set (transformers' rule for these labels): set before compiling,
        # else the compiled graph, guarded on it, is compiled a second time after the first step
        model.config.problem_type = "regression" if task.is_regression else "single_label_classification"
    forward = compiled_forward(model, config.compile, device, config.max_length)
    pad_to = CUDA_GRAPH_LENGTH_STEP if config.compile == "cuda-graphs" else 1
    # a checkpoint of a compiled run resumes only in one compiled alike (its rounding differs from eager's)
    computed_in = precision.to_dict() | ({"compile": config.compile} if config.compile != "none" else {})
    checkpointer = checkpointer.computed_in(computed_in) if checkpointer else None
    state = (checkpointer.load(model, optimizer, scheduler) if checkpointer else None) or TrainingState()
    resumed_at = state.step
    model.train()
    started = time.perf_counter() - state.train_seconds
    last_save_step, last_save_time = state.step, time.perf_counter()
    bar = tqdm(total=total_steps, initial=state.step, desc=f"fine-tune {task.name}", disable=not progress, mininterval=5.0)
    unread: list[torch.Tensor] = []  # the losses of the steps since they were last read from the device

    def read_losses() -> None:
        if unread:
            state.losses.extend(torch.stack(unread).tolist())
            unread.clear()
            bar.set_postfix(loss=f"{np.mean(state.losses[-20:]):.4f}", refresh=False)

    # the classifier reads [CLS] alone: the last layer's feed-forward runs on it only (exact, ~1/8 faster); the hooks
    # that do it are set once for the run
    with first_token_output(model):
        while state.step < total_steps:
            if state.epoch_generator_state is None:
                state.epoch_generator_state = generator.bit_generator.state
            else:  # resumed mid-epoch: redraw this epoch's batches from the same generator state
                generator.bit_generator.state = state.epoch_generator_state
            batches = training_batches(lengths, config.batch_size, generator, config.group_by_length)
            for batch_indices in batches[state.batch_in_epoch :]:
                if state.step >= total_steps:
                    break
                batch = to_device(data.collate(batch_indices, pad_to), device)
                target = to_device({"labels": labels_tensor(task, labels, batch_indices, data, batch["input_ids"].shape[1])},
                                   device)["labels"]
                with precisions.training(precision):
                    output = forward(**batch, labels=target)
                output.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                # a copy on the device (no wait): under CUDA graphs the next replay overwrites the step's output buffers
                unread.append(output.loss.detach().float().clone())
                state.step += 1
                state.batch_in_epoch += 1
                state.examples_seen += len(batch_indices)
                bar.update(1)
                if len(unread) >= LOSS_READ_STEPS:
                    read_losses()
                if checkpointer and state.step < total_steps and checkpointer.due(
                    state.step - last_save_step, time.perf_counter() - last_save_time
                ):
                    read_losses()
                    state.train_seconds = time.perf_counter() - started
                    checkpointer.save(state, model, optimizer, scheduler)
                    last_save_step, last_save_time = state.step, time.perf_counter()
                    failpoint("finetune.after_checkpoint")
            state.epoch += 1
            state.batch_in_epoch = 0
            state.epoch_generator_state = None
            if on_epoch_end is not None:
                model.eval()
                on_epoch_end(state.epoch)
                model.train()
    read_losses()
    bar.close()
    model.eval()
    precisions.measuring(precision)
    return {
        "steps": state.step,
        "resumed_at_step": resumed_at,
        "examples_seen": state.examples_seen,
        "train_seconds": time.perf_counter() - started,
        "compile": config.compile,
        "final_loss_mean_last_20": float(np.mean(state.losses[-20:])) if state.losses else float("nan"),
        "loss_curve": state.losses,
    }


@torch.inference_mode()
def predict(model: PreTrainedModel, data: Encoded, batch_size: int) -> np.ndarray:
    """Logits for every example, in the input order (for a token task, every word of every example, in order: the
    logits of its first piece, NaN for a word with no piece in the input); batches sorted by length to save padding,
    read from the device once at the end (a copy per batch would make the host wait for the device each time). A batch
    the device has no memory for is halved and run again, and later batches keep the smaller size (padded shapes
    change the logits by rounding only)."""
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort(-data.lengths(), kind="stable")
    words = data.words if data.word_index is not None else None
    rows = len(data) if words is None else int(words.sum())
    logits = np.full((rows, model.config.num_labels), np.nan if words is not None else 0.0, dtype=np.float32)
    outputs: list[torch.Tensor] = []
    placed: list[np.ndarray] = []  # each batch's rows of ``logits``

    def step(indices: np.ndarray) -> None:
        batch = to_device(data.collate(indices), device)
        out = model(**batch).logits.float()
        if words is not None:  # each word's first piece
            width = batch["input_ids"].shape[1]
            out = out.reshape(-1, out.shape[-1])[data.first_piece_rows(indices, width, device)]
            placed.append(data.word_positions(indices, width))
        else:
            placed.append(indices)
        outputs.append(out)

    halving_on_oom(order, batch_size, step, device, "examples")
    if outputs:
        logits[np.concatenate(placed)] = torch.cat(outputs).cpu().numpy()
    return logits


def predictions_frame(task: Task, frame: pl.DataFrame, logits: np.ndarray) -> pl.DataFrame:
    """Per-example predictions: ``idx, label, prediction, logits`` (the later sweeps and bootstraps need them). For a
    token task (``logits``: every word's, :func:`predict`) each column holds a sentence's words; a word with no piece in
    the input (its logits NaN) is predicted -1, no label, and scored as wrong."""
    if not task.is_token:
        return pl.DataFrame(
            {
                "idx": frame["idx"],
                "label": frame["label"],
                "prediction": pl.Series(task.predictions(logits), dtype=task.label_dtype),
                "logits": pl.Series([row.tolist() for row in logits], dtype=pl.List(pl.Float32)),
            }
        )
    words = frame["label"].list.len().to_numpy().astype(np.int64)
    if len(logits) != int(words.sum()):
        raise ValueError(f"{task.name}: {len(logits)} words' logits for {int(words.sum())} words")
    predicted = task.predictions(logits)
    bounds = np.concatenate([[0], np.cumsum(words)])
    return pl.DataFrame(
        {
            "idx": frame["idx"],
            "label": frame["label"],
            "prediction": pl.Series([predicted[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])], dtype=task.label_dtype),
            "logits": pl.Series([logits[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])],
                                dtype=pl.List(pl.List(pl.Float32))),
        }
    )


def prediction_metrics(task: Task, predictions: pl.DataFrame) -> dict[str, float]:
    """The task's metrics (:func:`bertology_core.stats.metrics.compute_metrics`) of a predictions table's
    ``prediction`` column against its ``label`` column (for a token task: each sentence's words as lists, or a row per
    word with its ``idx`` and ``word``, as the disabling sweeps keep them)."""
    if task.is_token and not isinstance(predictions.schema["prediction"], pl.List):
        predictions = predictions.sort("idx", "word").group_by("idx", maintain_order=True).agg("label", "prediction")
    if task.is_token:
        return compute_metrics(task, [np.asarray(p) for p in predictions["prediction"].to_list()],
                               [np.asarray(g) for g in predictions["label"].to_list()])
    return compute_metrics(task, predictions["prediction"].to_numpy(), predictions["label"].to_numpy())


def readable_training_data(task: Task, frame: pl.DataFrame, tokenizer: Any, max_length: int,
                           tokens: TokenFile | None = None) -> tuple[pl.DataFrame, Encoded, int]:
    """A training split encoded (:func:`encode_split`), without a token task's sentences that have no word the
    tokenizer reads (a batch of them has no labelled piece: its loss, a mean over none, would be NaN); returns the
    rows kept, their encoding and how many were left out."""
    encoded = encode_split(frame, "train", tokenizer, max_length, tokens)
    if not task.is_token or not (unreadable := encoded.read_words() == 0).any():
        return frame, encoded, 0
    log.warning("%d training sentences have no word the tokenizer reads: left out of training", unreadable.sum())
    frame = frame.filter(pl.Series(~unreadable))
    return frame, encode_split(frame, "train", tokenizer, max_length, tokens), int(unreadable.sum())


@dataclass
class RunResult:
    model: PreTrainedModel
    tokenizer: Any
    metrics: dict[str, Any]
    predictions: dict[str, pl.DataFrame]  # eval split -> per-example predictions


def finetune_and_evaluate(
    model_path: str,
    task: Task,
    state: str,
    seed: int,
    train_frame: pl.DataFrame | None,
    eval_frames: dict[str, pl.DataFrame],
    config: FinetuneConfig,
    progress: bool = True,
    device: torch.device | None = None,
    eval_batch_size: int = 64,
    checkpointer: Checkpointer | None = None,
    precision: Precision | None = None,
    tokens: TokenFile | None = None,
    given: bool = False,
) -> RunResult:
    """Build the classifier of ``state`` (:mod:`bertology_core.data.states`: finetuned, scratch or pretrained), train it
    unless pretrained, evaluate.

    ``pretrained`` is the paper's "pre-trained" column: the pre-trained encoder with
    a freshly initialised, untrained classification head. ``eval_batch_size`` only
    changes speed; ``checkpointer`` makes training resumable (see :func:`train`); ``precision`` is what training
    computes in (None: float32); ``tokens``: the splits tokenised beforehand with the model's tokenizer at
    ``config.max_length`` (else each is tokenised here, the same way); ``given``: ``model_path`` is a classifier
    already fine-tuned into ``state`` (models[].finetuned), loaded with its head and only evaluated.
    """
    trains = state != states.PRETRAINED and not given
    tokenizer = load_tokenizer(model_path)
    model, loaded = load_classifier_reported(model_path, task, SAVED if given else states.STARTS_FROM[state], seed)
    model.to(device or default_device())
    precision = precision or precisions.resolve("float32", next(model.parameters()).device)
    record: dict[str, Any] = {
        "task": task.name,
        "state": state,
        "seed": seed,
        # an untrained model only depends on how inputs are cut
        "hyperparameters": config.to_dict() if trains else {"max_length": config.max_length},
        # a given classifier: trained elsewhere, on examples this record cannot count
        **({"train_examples": None} if given else {}),
        "device": str(next(model.parameters()).device),
        "precision": precision.to_dict(),
        # the weights drawn anew (the task head only: an encoder weight that did not load stops the job) and the
        # file's tensors not read (a pre-training head); the from-scratch state loads nothing
        "weights_loaded": loaded.to_json(),
    }
    if trains:
        if train_frame is None:
            raise ValueError(f"state={state!r} needs training data")
        train_frame, encoded, unreadable = readable_training_data(task, train_frame, tokenizer, config.max_length, tokens)
        if unreadable:
            record["train_unreadable_sentences"] = unreadable
        record["train_examples"] = len(encoded)
        record["train_truncated"] = encoded.truncated
        if task.is_token:
            record["train_unread_words"] = encoded.unread_words
        record["training"] = train(
            model, task, encoded, frame_labels(task, train_frame), config, seed, progress, checkpointer, precision=precision
        )
    predictions: dict[str, pl.DataFrame] = {}
    record["eval"] = {}
    for split, frame in eval_frames.items():
        started = time.perf_counter()
        encoded_split = encode_split(frame, split, tokenizer, config.max_length, tokens)
        logits = predict(model, encoded_split, eval_batch_size)
        predictions[split] = predictions_frame(task, frame, logits)
        record["eval"][split] = {
            **prediction_metrics(task, predictions[split]),
            "examples": frame.height,
            "truncated": encoded_split.truncated,
            **({"words": int(frame["words"].list.len().sum()), "unread_words": encoded_split.unread_words}
               if task.is_token else {}),
            "eval_seconds": time.perf_counter() - started,
        }
    model.to("cpu")  # saved and handed on from the CPU, whatever trained it
    return RunResult(model=model, tokenizer=tokenizer, metrics=record, predictions=predictions)
