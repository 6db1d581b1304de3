"""The one vocabulary of model states: what every config key, path, wildcard value, table and page calls a model.

- ``pretrained``: the pre-trained encoder as published, not fine-tuned (scored with an untrained classifier head);
- ``finetuned``: fine-tuned from the pre-trained weights;
- ``scratch``: the same architecture with every weight drawn anew, then fine-tuned (the random-init baseline);
- ``random_weights``: the same architecture with every weight drawn anew, never trained.

A dumped or probed model of one fine-tuning seed adds the seed: ``finetuned_seed1``, ``scratch_seed1`` (attention
dumps); a probed fine-tuned model is named by its task, ``MRPC_seed1``. Every other module imports these names
and their display labels from here.

Before this vocabulary, fine-tuning called them ``untuned`` / ``pretrained`` / ``random``, attention dumps
``untuned`` / ``pretrained_seedN`` / ``random_seedN`` and probing ``untuned`` / ``random``: the ``FORMER_*`` mappings
below turn those into the errors that name the new ones (config keys, hand-label files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class State:
    name: str
    meaning: str
    label: str  # how figures and the page name it


PRETRAINED = "pretrained"
FINETUNED = "finetuned"
SCRATCH = "scratch"
RANDOM_WEIGHTS = "random_weights"

STATES: dict[str, State] = {
    state.name: state
    for state in (
        State(PRETRAINED, "the pre-trained encoder as published, not fine-tuned (scored with an untrained classifier head)",
              "pre-trained"),
        State(FINETUNED, "fine-tuned from the pre-trained weights", "fine-tuned"),
        State(SCRATCH, "the same architecture, every weight drawn anew by the model's initialiser, then fine-tuned",
              "from scratch"),
        State(RANDOM_WEIGHTS, "the same architecture, every weight drawn anew by the model's initialiser, never trained",
              "random weights"),
    )
}

# the states of fine-tuning's runs (results/finetune/<model>/<task>/<state>/), in the baselines table's order
FINE_TUNING = (PRETRAINED, SCRATCH, FINETUNED)
# the states a fine-tuning job trains
TRAINED = (FINETUNED, SCRATCH)
# the states an attention dump can hold (the trained ones per seed: finetuned_seed1)
DUMPED = (PRETRAINED, FINETUNED, SCRATCH)
# the states probing.states chooses (the finetuned ones are named <TASK>_seed<N>)
PROBED = (PRETRAINED, FINETUNED, RANDOM_WEIGHTS)
# the weights each fine-tuning state starts from (models.load_classifier)
STARTS_FROM = {PRETRAINED: PRETRAINED, FINETUNED: PRETRAINED, SCRATCH: RANDOM_WEIGHTS}

# a dumped state: pretrained, or a trained state and its seed (a regular expression for wildcards and label files)
DUMPED_PATTERN = rf"{PRETRAINED}|(?:{'|'.join(TRAINED)})_seed\d+"
_SEEDED = re.compile(r"(?P<prefix>.+)_seed(?P<seed>\d+)")


# the label of the fine-tuned minus pre-trained rows of per-state tables (linguistic.state_means), beside the labels
DIFFERENCE = "difference"


def label(name: str) -> str:
    """The display label of a state (``finetuned`` -> ``fine-tuned``)."""
    return STATES[name].label


def seeded(prefix: str, seed: int | str) -> str:
    """``finetuned``, 1 -> ``finetuned_seed1`` (a dumped state); ``MRPC``, 1 -> ``MRPC_seed1`` (a probed one)."""
    return f"{prefix}_seed{seed}"


def split_seeded(name: str) -> tuple[str, int]:
    """``<prefix>_seed<N>`` -> (prefix, N): a dumped state (``finetuned_seed1``) or a probed one (``MRPC_seed1``)."""
    match = _SEEDED.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not <state or task>_seed<N>")
    return match["prefix"], int(match["seed"])


def is_seeded(name: str) -> bool:
    return _SEEDED.fullmatch(name) is not None


def dumped_state(name: str) -> str:
    """The state of a dumped model: ``pretrained`` -> ``pretrained``; ``finetuned_seed1`` -> ``finetuned``."""
    return name if name == PRETRAINED else split_seeded(name)[0]


# --- the former names ---------------------------------------------------------------------------------------------

# fine-tuning's former init values (also attention.states's, finetune.per_init's keys and disabling.inits's): note that
# the former ``pretrained`` meant fine-tuned
FORMER_FINE_TUNING = {"untuned": PRETRAINED, "pretrained": FINETUNED, "random": SCRATCH}
# probing's former states: ``random`` meant random weights, never trained
FORMER_PROBED = {"untuned": PRETRAINED, "random": RANDOM_WEIGHTS}
# attention dumps' former states (hand-label files name them), as messages spell them (see former_dumped)
FORMER_DUMPED = {"untuned": PRETRAINED, "pretrained_seed<N>": f"{FINETUNED}_seed<N>", "random_seed<N>": f"{SCRATCH}_seed<N>"}


def renaming(mapping: dict[str, str]) -> str:
    """``untuned -> pretrained, pretrained -> finetuned, random -> scratch``: a mapping as an error message says it."""
    return ", ".join(f"{old} -> {new}" for old, new in mapping.items())


def former_dumped(name: str) -> str | None:
    """The new name of a former attention-dump state (``untuned`` -> ``pretrained``, ``pretrained_seed1`` ->
    ``finetuned_seed1``, ``random_seed1`` -> ``scratch_seed1``); None for anything else (a new name included)."""
    if name == "untuned":
        return PRETRAINED
    match = _SEEDED.fullmatch(name)
    if match and match["prefix"] in ("pretrained", "random"):
        return seeded(FORMER_FINE_TUNING[match["prefix"]], match["seed"])
    return None


def former_fine_tuning_name(state: str) -> str:
    """The former fine-tuning name of a state (``finetuned`` -> ``pretrained``): what label cards' recipe fingerprints
    were computed with (pattern_labels.recipe_fingerprint)."""
    return {new: old for old, new in FORMER_FINE_TUNING.items()}[state]
