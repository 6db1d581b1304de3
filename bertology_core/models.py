"""Model specs: resolve a hub id, a local folder or an installed package to one HF folder.

A spec is resolved once (rule ``resolve_model``); the record names the folder,
its config hash and its geometry so every downstream output can say exactly which
weights it came from. Loading never runs remote code and reads safetensors only.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import (AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedConfig,
                          PreTrainedModel, PreTrainedTokenizerBase)

from bertology_core import compatibility, states
from bertology_core.compatibility import PACKAGE_PREFIX, ModelSpecError, is_hf_folder, package_model_folder  # noqa: F401
from bertology_core.glue import GlueTask

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

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "ResolvedModel":
        return cls(**data)  # type: ignore[arg-type]


def _sha256_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def resolve_model(spec: str) -> ResolvedModel:
    """Resolve ``spec`` to a local HF folder.

    ``package:NAME`` looks inside an installed package; an existing directory is
    used as is; anything else is a Hub id, downloaded (safetensors only) with
    ``huggingface_hub`` (honours ``HF_HUB_OFFLINE`` and the local cache).
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
        from huggingface_hub import snapshot_download

        kind = "hub"
        try:
            folder = Path(
                snapshot_download(
                    spec,
                    allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
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
            raise ModelSpecError(f"Hub model {spec!r} has no safetensors weights; .bin pickles are refused.")
    problems = compatibility.model_problems(folder) or _tokenizer_problems(folder)
    if problems:
        raise ModelSpecError(f"Model spec {spec!r}:\n  " + "\n  ".join(problems))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
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
    )


def _tokenizer_problems(folder: Path) -> list[str]:
    """Beyond what the files say (compatibility.tokenizer_problem): the tokenizer, loaded, must know the pieces of
    an English sentence rather than turn them all into its unknown token."""
    tokenizer = load_tokenizer(folder)
    ids = tokenizer(_SAMPLE_SENTENCE, add_special_tokens=False)["input_ids"]
    if ids and tokenizer.unk_token_id is not None and all(i == tokenizer.unk_token_id for i in ids):
        return [f"{folder}: the tokenizer turns every word of {_SAMPLE_SENTENCE!r} into {tokenizer.unk_token}. "
                "Fix: save the tokenizer the model was trained with into the folder."]
    return []


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


def _label_kwargs(task: GlueTask) -> dict[str, object]:
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


def load_classifier(path: str | os.PathLike[str], task: GlueTask, start: str, seed: int) -> PreTrainedModel:
    """A sequence classifier for ``task`` built on the encoder at ``path``, starting from (``states.STARTS_FROM``):

    ``states.PRETRAINED``: the pre-trained encoder with a fresh head;
    ``states.RANDOM_WEIGHTS``: only the architecture: every weight is drawn anew by
    the model's own initialiser (normal with std ``initializer_range``), as in
    Kovaleva et al.'s randomly initialised baseline. The seed fixes the draw;
    :data:`SAVED`: a folder already holding a classifier for the task, loaded as is.
    """
    torch.manual_seed(seed)
    if start == SAVED:
        return AutoModelForSequenceClassification.from_pretrained(path, use_safetensors=True, trust_remote_code=False)
    config = AutoConfig.from_pretrained(path, trust_remote_code=False, **_label_kwargs(task))
    if start == states.PRETRAINED:
        return AutoModelForSequenceClassification.from_pretrained(
            path, config=config, use_safetensors=True, trust_remote_code=False
        )
    if start == states.RANDOM_WEIGHTS:
        return AutoModelForSequenceClassification.from_config(config)
    raise ValueError(f"start must be {states.PRETRAINED!r}, {states.RANDOM_WEIGHTS!r} or {SAVED!r}, not {start!r}")



def load_encoder(path: str | os.PathLike[str], random_weights_seed: int | None = None) -> PreTrainedModel:
    """The encoder (no task head) at ``path``, in evaluation mode: its own weights (a pre-trained encoder, or a
    fine-tuned classifier's encoder), or with ``random_weights_seed`` the same architecture with every weight
    drawn by the model's own initialiser from that seed (the random-weights baseline of probing)."""
    if random_weights_seed is None:
        return AutoModel.from_pretrained(path, use_safetensors=True, trust_remote_code=False).eval()
    torch.manual_seed(random_weights_seed)
    return AutoModel.from_config(AutoConfig.from_pretrained(path, trust_remote_code=False)).eval()
