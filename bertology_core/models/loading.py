"""Model specs: resolve a hub id, a local folder or an installed package to one HF folder.

A spec is resolved once (rule ``resolve_model``); the record names the folder,
its config hash and its geometry so every downstream output can say exactly which
weights it came from. Loading never runs remote code and reads safetensors only.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from safetensors import SafetensorError
from transformers import (AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification,
                          AutoTokenizer, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase)

from bertology_core.data import states
from bertology_core.models import compatibility
from bertology_core.models.compatibility import PACKAGE_PREFIX, ModelSpecError, is_hf_folder, package_model_folder
from bertology_core.data.tasks import Task

# an English sentence any tokenizer of a GLUE model must cut into known pieces
_SAMPLE_SENTENCE = "The cat sat on the mat and the dog did not."


@dataclass(frozen=True)
class ResolvedModel:
    spec: str
    kind: str  # "package" | "local" | "hub"
    path: str
    revision: str | None
    config_sha256: str
    weights_sha256: str
    model_type: str
    num_hidden_layers: int
    num_attention_heads: int
    # the weights a sequence classifier built on the encoder draws anew and the file's tensors it does not read
    # (LoadReport): every encoder weight loaded, or the model was refused
    weights_loaded: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "ResolvedModel":
        return cls(**data)  # type: ignore[arg-type]


def read_resolved(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model's ``resolved.json`` (rule resolve_model), refused where the folder it names is not on this machine: a
    Hub model is fetched where Snakemake runs, into ``model_cache``, which every node of a cluster must see."""
    from bertology_core.data import io

    resolved = io.read_json(path)
    if not is_hf_folder(Path(resolved["path"])):
        raise ModelSpecError(
            f"model {resolved.get('spec', path)!r}: its files at {resolved['path']} (written by resolve_model on the host "
            f"that runs Snakemake) are not on this machine ({os.uname().nodename}). Fix: set model_cache in the config to "
            "a folder on storage every node sees (a cluster's shared file system), then rerun resolve_model "
            f"(snakemake {path} --forcerun resolve_model), or point the model's spec at a shared folder.")
    return resolved


def _sha256_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def resolve_model(spec: str, cache_dir: str | os.PathLike[str] | None = None) -> ResolvedModel:
    """Resolve ``spec`` to a local HF folder.

    ``package:NAME`` looks inside an installed package; an existing directory is
    used as is; anything else is a Hub id, downloaded (safetensors only) with
    ``huggingface_hub`` into ``cache_dir`` (None: its own cache; honours ``HF_HUB_OFFLINE``).
    """
    revision: str | None = None
    if spec.startswith(PACKAGE_PREFIX):
        kind, folder = "package", package_model_folder(spec[len(PACKAGE_PREFIX):])
    elif Path(spec).expanduser().is_dir():
        kind, folder = "local", Path(spec).expanduser().resolve()
        if not is_hf_folder(folder):
            raise ModelSpecError(
                f"Model folder {folder} has no config.json or no *.safetensors weights. "
                "Fix: save the model with save_pretrained() (safetensors; .bin pickles are refused)."
            )
    else:
        kind = "hub"
        try:
            folder = Path(
                snapshot_download(
                    spec,
                    allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
                    cache_dir=cache_dir,
                )
            )
        except OSError as error:  # hub errors (network, auth, offline mode, not found) are all OSErrors
            raise ModelSpecError(
                f"Model spec {spec!r} is not an installed package ('{PACKAGE_PREFIX}NAME') or an existing folder, "
                f"and the Hugging Face Hub could not provide it ({type(error).__name__}: {error}). "
                "Fix: check the id and the network (HF_HUB_OFFLINE), or point the spec at a local folder "
                "(for a folder, write a path: ./models/mine or an absolute one)."
            ) from error
        revision = folder.name
        if not is_hf_folder(folder):
            raise ModelSpecError(
                f"Hub model {spec!r} has no safetensors weights; .bin pickles are refused (unpickling runs code). Fix: "
                "where you trust the checkpoint, load it once with transformers and save_pretrained() it into a folder "
                "(safetensors by default; the tokenizer too), then name that folder in the config instead.")
    problems = compatibility.model_problems(folder) or _tokenizer_problems(folder)
    if problems:
        raise ModelSpecError(f"Model spec {spec!r}:\n  " + "\n  ".join(problems))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    # instantiated once, here, so that a model whose encoder weights do not all load stops the run before any job
    # that would analyse it (transformers itself only warns and draws the missing weights at random)
    _, report = _load_checked(AutoModelForSequenceClassification, folder)
    return ResolvedModel(
        spec=spec,
        kind=kind,
        path=str(folder),
        revision=revision,
        config_sha256=_sha256_files([folder / "config.json"]),
        weights_sha256=_sha256_files(list(folder.glob("*.safetensors"))),
        model_type=config.model_type,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        weights_loaded=report.to_json(),
    )


def _tokenizer_problems(folder: Path) -> list[str]:
    """Beyond what the files say (compatibility.tokenizer_problem): the tokenizer, loaded, must know the pieces of
    an English sentence rather than turn them all into its unknown token."""
    tokenizer = load_tokenizer(folder)

    def unknown(text: str) -> int:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return sum(i == tokenizer.unk_token_id for i in ids) if tokenizer.unk_token_id is not None else 0

    ids = tokenizer(_SAMPLE_SENTENCE, add_special_tokens=False)["input_ids"]
    if ids and unknown(_SAMPLE_SENTENCE) == len(ids):
        return [f"{folder}: the tokenizer turns every word of {_SAMPLE_SENTENCE!r} into {tokenizer.unk_token}. "
                "Fix: save the tokenizer the model was trained with into the folder."]
    # an uncased WordPiece vocabulary read by a tokenizer that keeps case (do_lower_case false in its files): every
    # capitalised word becomes the unknown token (15% of MRPC's word pieces with all-MiniLM-L6-v2), though plain
    # text tokenizes. (SentencePiece and byte-level vocabularies are checked by the sample sentence alone: the real
    # ones are cased or byte-level, and the tiny test fixtures' are lower case without being uncased models.)
    backend = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    wordpiece = type(backend).__name__ == "WordPiece"
    if wordpiece and unknown(_SAMPLE_SENTENCE.title()) and not unknown(_SAMPLE_SENTENCE.lower()):
        return [f"{folder}: the tokenizer turns capitalised words into {tokenizer.unk_token} "
                f"({tokenizer.tokenize(_SAMPLE_SENTENCE.title())[:4]}) but not their lower case: the vocabulary is "
                "uncased and the tokenizer keeps case. Fix: set do_lower_case true in tokenizer_config.json (and "
                "lowercase: true in tokenizer.json's normalizer), or save the tokenizer the model was trained with."]
    return []


# sentences two tokenizers must cut into the same ids to be the same tokenizer (cased and uncased words, digits,
# punctuation, a pair)
_SAME_TOKENS_SAMPLE = (_SAMPLE_SENTENCE, _SAMPLE_SENTENCE.upper(), "Dr. Smith paid $1,234.56 on 3/4/2021 -- didn't he?",
                       "naïve café résumé", ("A man is playing.", "Someone plays a guitar!"))


def tokenizer_difference(given: str | os.PathLike[str], encoder: str | os.PathLike[str]) -> str | None:
    """Why the tokenizer in folder ``given`` is not the one in ``encoder`` (None when both cut a sample of sentences
    and a pair into the same ids): every job reads the tasks tokenised with the encoder's tokenizer."""
    first, second = load_tokenizer(given), load_tokenizer(encoder)
    if len(first) != len(second):
        return f"{given}: its tokenizer has {len(first)} entries, the encoder's ({encoder}) {len(second)}"
    for text in _SAME_TOKENS_SAMPLE:
        pair = text if isinstance(text, tuple) else (text,)
        if first(*pair)["input_ids"] != second(*pair)["input_ids"]:
            return (f"{given}: its tokenizer cuts {text!r} into {first.tokenize(*pair)[:8]}, the encoder's ({encoder}) "
                    f"into {second.tokenize(*pair)[:8]}")
    return None


def load_tokenizer(path: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The tokenizer of the model folder ``path`` (no remote code), set to return token type ids exactly when the
    folder's model embeds them (:func:`embeds_token_types`; a folder without config.json: as the tokenizer class
    decides). Left to themselves, transformers 5's classes decide by family, not by model: ALBERT's tokenizer
    returns none although ALBERT has segment embeddings, pre-trained on sentence pairs; for a DistilBERT folder
    whose tokenizer_config.json names no class, AutoTokenizer loads BERT's, which returns them for a model with
    none (its forward takes them into ``**kwargs`` and ignores them). The ids the tokenizer gives a sentence pair
    are its own (0 and 1 for these families)."""
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    if (Path(path) / "config.json").is_file():
        names = [name for name in tokenizer.model_input_names if name != "token_type_ids"]
        if embeds_token_types(AutoConfig.from_pretrained(path, trust_remote_code=False)):
            names.insert(1, "token_type_ids")
        tokenizer.model_input_names = names
    return tokenizer


def embeds_token_types(config: PreTrainedConfig) -> bool:
    """Whether the model has an embedding of two or more token types (``type_vocab_size``: BERT, ALBERT and
    ELECTRA 2; RoBERTa and XLM-R 1, a row every token gets; DeBERTa-v3 0; DistilBERT and ModernBERT none)."""
    return int(getattr(config, "type_vocab_size", 0) or 0) >= 2


def _label_kwargs(task: Task) -> dict[str, object]:
    if task.is_regression:
        return {"num_labels": 1, "problem_type": "regression"}
    names = task.label_names or ()
    return {
        "num_labels": len(names),
        "problem_type": "single_label_classification",
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }


# load_classifier's start for a folder that already holds a classifier for the task (a fine-tuned model)
SAVED = "saved"

# at most this many tensor names in a message (the count says how many more)
_NAMES_SHOWN = 8


@dataclass(frozen=True)
class LoadReport:
    """What ``from_pretrained`` did with a folder's weights (transformers' ``output_loading_info``): ``new``, the
    weights drawn anew because the file lacks them (only ever a task head: outside the encoder, or the encoder's
    pooler, which feeds the classifier only and which a model pre-trained without a sentence-level objective does
    not have); ``unused``, the file's tensors the model does not read (a pre-training head such as BERT's
    ``cls.predictions``, or a fine-tuned classifier's head when the encoder alone is loaded)."""

    new: tuple[str, ...]
    unused: tuple[str, ...]
    # head weights the file held that were drawn anew all the same: a sequence classifier's head trained on some
    # task, never the start of a pre-trained state
    redrawn: tuple[str, ...] = ()
    # head weights taken from the file: a pre-trained pooler, or a pre-training head reused by name (ModernBERT's MLM
    # transform ``head``); under the pre-trained start never a head trained on a task (those are ``redrawn``)
    head_loaded: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        return {"new": list(self.new), "unused": list(self.unused), "redrawn": list(self.redrawn),
                "head_loaded": list(self.head_loaded)}


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:_NAMES_SHOWN])
    return shown + (f" and {len(keys) - _NAMES_SHOWN} more" if len(keys) > _NAMES_SHOWN else "")


def _shared_prefix(missing: list[str], unused: list[str]) -> str | None:
    """A prefix the file's tensor names carry where the model's have none (``wrapper.encoder.`` + the usual name):
    one under which the file holds most of the missing weights; None when there is none."""
    held = set(unused)
    for name in missing[:1]:
        for prefix in {key[: -len(name)] for key in unused if key.endswith("." + name)}:
            if sum(prefix + other in held for other in missing) >= 0.9 * len(missing):
                return prefix
    return None


def checked_load_report(model: PreTrainedModel, info: dict[str, Any], path: str | os.PathLike[str],
                        strict: bool = False) -> LoadReport:
    """The :class:`LoadReport` of ``model`` loaded from ``path`` with ``output_loading_info`` and
    ``ignore_mismatched_sizes``, or a :class:`ModelSpecError` naming the tensors and the fix when an encoder weight
    did not load: missing from the file, of another shape than the config gives it, or present in the file with no
    place in the model (layers beyond ``num_hidden_layers``). ``strict``: every weight must load (a saved
    classifier, whose head is part of what was saved).

    transformers only warns about these (its load report in the log) and draws the missing weights at random, so a
    folder whose tensor names carry another prefix loads as a random encoder. The encoder is the base model
    (``model.base_model``) less its pooler; the rest is the task head."""
    base = model.base_model
    prefix = f"{model.base_model_prefix}."
    parts = {name for name, _ in base.named_children() if name != "pooler"}
    # a buffer the file also holds (a persisted token_type_ids or position_ids) is not a weight that lost its place
    buffers = {name for name, _ in base.named_buffers()} | {name.split(".")[-1] for name, _ in base.named_buffers()}

    def in_encoder(key: str) -> bool:  # a name of the model's or of the file's, with or without the prefix
        rest = key.removeprefix(prefix) if (base is not model or key.startswith(prefix)) else key
        return rest.split(".")[0] in parts

    def is_buffer(key: str) -> bool:
        rest = key.removeprefix(prefix)
        return rest in buffers or rest.split(".")[-1] in buffers

    missing = sorted(info.get("missing_keys") or ())
    unused = sorted(info.get("unexpected_keys") or ())
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda item: item[0])
    problems = []
    if errors := list(info.get("error_msgs") or ()):
        problems.append("transformers reported: " + "; ".join(str(error) for error in errors))
    lost = [key for key in missing if strict or in_encoder(key)]
    if lost:
        hint = ""
        stripped = [key.removeprefix(prefix) if base is not model else key for key in lost]
        if (extra := _shared_prefix(stripped, unused)) is not None:
            hint = (f" The file holds them under another name: its tensors carry the prefix {extra!r} (e.g. "
                    f"{extra + stripped[0]!r}). Fix: rename the tensors without that prefix and save the model with "
                    "save_pretrained(), or load the checkpoint into its model class and save_pretrained() that.")
        else:
            hint = (" Fix: point the spec at the folder save_pretrained() wrote for this model (the config.json and the "
                    "weights saved together).")
        problems.append(f"{len(lost)} weight(s) of the {'model' if strict else 'encoder'} are not in the weights files, so "
                        f"they would be drawn at random: {_names(lost)}.{hint}")
    wrong = [(key, tuple(saved), tuple(wanted)) for key, saved, wanted in mismatched if strict or in_encoder(key)]
    if wrong:
        listed = [f"{key} {list(saved)} in the file, {list(wanted)} by config.json" for key, saved, wanted in wrong]
        problems.append(f"{len(wrong)} weight(s) have another shape in the file than config.json gives them: "
                        f"{_names(listed)}. Fix: use the config.json saved with these weights.")
    homeless = [key for key in unused if in_encoder(key) and not is_buffer(key)]
    if homeless and not lost:
        problems.append(f"{len(homeless)} encoder tensor(s) in the weights files have no place in the model config.json "
                        f"describes (e.g. layers beyond num_hidden_layers): {_names(homeless)}. Fix: use the config.json "
                        "saved with these weights.")
    if problems:
        raise ModelSpecError(f"{path}: the weights do not all load into the model its config.json describes; no "
                             "analysis may run on an encoder whose pre-trained weights did not all load.\n  "
                             + "\n  ".join(problems))
    new = missing + [key for key, _, _ in mismatched]
    head = [name for name, _ in model.named_parameters() if not in_encoder(name) and name not in new]
    return LoadReport(new=tuple(sorted(new)), unused=tuple(unused), head_loaded=tuple(sorted(head)))


def _load_checked(model_class: Any, path: str | os.PathLike[str], strict: bool = False,
                  **kwargs: Any) -> tuple[PreTrainedModel, LoadReport]:
    """``model_class.from_pretrained(path)`` (safetensors, no remote code) with its :func:`checked_load_report`;
    a file that is not safetensors or is cut short is an error naming the file and the fix."""
    try:
        # float32 whatever the file holds: a checkpoint saved in half precision would otherwise train in pure half
        # precision, with no float32 master weights (bertology_core/models/precision.py)
        model, info = model_class.from_pretrained(path, use_safetensors=True, trust_remote_code=False,
                                                  output_loading_info=True, ignore_mismatched_sizes=True,
                                                  dtype=torch.float32, **kwargs)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:  # a bad file, an impossible config
        raise ModelSpecError(f"{path}: the model does not load ({type(error).__name__}: {error}). Fix: point the spec "
                             "at a complete folder written by save_pretrained().") from error
    return model, checked_load_report(model, info, path, strict)


def _redraw_trained_head(model: PreTrainedModel, report: LoadReport, path: str | os.PathLike[str]) -> LoadReport:
    """A classifier built on a classifier checkpoint, of sequences or of tokens (its label count fits the task), would
    start with the head trained on the checkpoint's task; every head weight outside the encoder is drawn anew by the model's own
    initialiser (after the caller's seed), so the pre-trained state is the encoder with an untrained head. Weights
    of a pre-training head that the classifier reuses by name (ModernBERT's MLM ``head`` transform, BERT's pooler
    inside the encoder) are kept: they are pre-trained, not trained on a task."""
    if compatibility.classifier_labels(compatibility.read_config(Path(path))) is None:
        return report
    base = model.base_model
    modules = [module for module in model.children() if module is not base]
    names = sorted({f"{name}.{parameter}" for name, module in model.named_children() if module is not base
                    for parameter, _ in module.named_parameters()} - set(report.new))
    for module in modules:  # transformers skips weights it marked as loaded
        for part in module.modules():
            part._is_hf_initialized = False
            for tensor in [*part.parameters(recurse=False), *part.buffers(recurse=False)]:
                tensor._is_hf_initialized = False
        module.apply(model._init_weights)
    return LoadReport(new=report.new, unused=report.unused, redrawn=tuple(names),
                      head_loaded=tuple(name for name in report.head_loaded if name not in names))


def head_class(task: Task) -> Any:
    """The transformers auto class of a task's classifier: a head on the first token's state (a sequence task), or on
    every token's (a token task: transformers' token classification, its loss ignoring the label -100)."""
    return AutoModelForTokenClassification if task.is_token else AutoModelForSequenceClassification


def load_classifier_reported(path: str | os.PathLike[str], task: Task, start: str,
                             seed: int) -> tuple[PreTrainedModel, LoadReport]:
    """:func:`load_classifier` with the :class:`LoadReport` of its weights (empty lists for ``RANDOM_WEIGHTS``,
    where nothing is loaded)."""
    torch.manual_seed(seed)
    classifier = head_class(task)
    if start == SAVED:
        model, report = _load_checked(classifier, path, strict=True)
        if model.config.num_labels != task.num_labels:
            raise ModelSpecError(f"{path}: a saved classifier with {model.config.num_labels} label(s), but {task.name} has "
                                 f"{task.num_labels}. Fix: give the classifier fine-tuned on {task.name}.")
        return model, report
    config = AutoConfig.from_pretrained(path, trust_remote_code=False, **_label_kwargs(task))
    if start == states.PRETRAINED:
        model, report = _load_checked(classifier, path, config=config)
        return model, _redraw_trained_head(model, report, path)
    if start == states.RANDOM_WEIGHTS:
        return classifier.from_config(config, dtype=torch.float32), LoadReport(new=(), unused=())
    raise ValueError(f"start must be {states.PRETRAINED!r}, {states.RANDOM_WEIGHTS!r} or {SAVED!r}, not {start!r}")


def load_classifier(path: str | os.PathLike[str], task: Task, start: str, seed: int) -> PreTrainedModel:
    """A classifier for ``task`` (:func:`head_class`: of sequences or of tokens) built on the encoder at ``path``,
    starting from (``states.STARTS_FROM``):

    ``states.PRETRAINED``: the pre-trained encoder with a fresh head;
    ``states.RANDOM_WEIGHTS``: only the architecture: every weight is drawn anew by
    the model's own initialiser (normal with std ``initializer_range``), as in
    Kovaleva et al.'s randomly initialised baseline. The seed fixes the draw;
    :data:`SAVED`: a folder already holding a classifier for the task, loaded as is.

    Every encoder weight must load (:func:`checked_load_report`), and for ``SAVED`` the head too.
    """
    return load_classifier_reported(path, task, start, seed)[0]


def load_encoder(path: str | os.PathLike[str], random_weights_seed: int | None = None) -> PreTrainedModel:
    """The encoder (no task head) at ``path``, in evaluation mode: its own weights (a pre-trained encoder, or a
    fine-tuned classifier's encoder), each of which must load (:func:`checked_load_report`), or with
    ``random_weights_seed`` the same architecture with every weight drawn by the model's own initialiser from that
    seed (the random-weights baseline of probing)."""
    if random_weights_seed is None:
        return _load_checked(AutoModel, path)[0].eval()
    torch.manual_seed(random_weights_seed)
    return AutoModel.from_config(AutoConfig.from_pretrained(path, trust_remote_code=False), dtype=torch.float32).eval()
