"""The one vocabulary of model states: what every config key, path, wildcard value, table and page calls a model.

- ``pretrained``: the pre-trained encoder as published, not fine-tuned (scored with an untrained classifier head);
- ``finetuned``: fine-tuned from the pre-trained weights;
- ``scratch``: the same architecture with every weight drawn anew, then fine-tuned (the random-init baseline);
- ``random_weights``: the same architecture with every weight drawn anew, never trained.

A trained model adds its fine-tuning seed as a path segment, as fine-tuning's folders spell it
(``results/finetune/<model>/<task>/finetuned/seed1``): ``finetuned/seed1``, ``scratch/seed2`` (an attention dump, under
its task's folder); where no task folder says which task the model learnt (probing reads one treebank for every
model), the task comes first: ``MRPC/finetuned/seed1``. Paths, wildcards, tables and config lists all use this one
spelling. Every other module imports these names and their display labels from here.
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
        State(FINETUNED, "fine-tuned from the pre-trained weights (here, or elsewhere: a classifier given in the config)",
              "fine-tuned"),
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
# the states an attention dump can hold (the trained ones per seed: finetuned/seed1)
DUMPED = (PRETRAINED, FINETUNED, SCRATCH)
# the states probing.states chooses (a probed fine-tuned model is named <TASK>/finetuned/seed<N>)
PROBED = (PRETRAINED, FINETUNED, RANDOM_WEIGHTS)
# the weights each fine-tuning state starts from (loading.load_classifier)
STARTS_FROM = {PRETRAINED: PRETRAINED, FINETUNED: PRETRAINED, SCRATCH: RANDOM_WEIGHTS}

# a dumped state: pretrained, or a trained state and its seed (a regular expression for wildcards and label files)
DUMPED_PATTERN = rf"{PRETRAINED}|(?:{'|'.join(TRAINED)})/seed\d+"
_SEEDED = re.compile(rf"(?P<state>{'|'.join(TRAINED)})/seed(?P<seed>\d+)")
_RUN = re.compile(rf"(?P<task>[^/]+)/(?P<state>{'|'.join(TRAINED)})/seed(?P<seed>\d+)")


# the label of the fine-tuned minus pre-trained rows of per-state tables (score_tables.state_means), beside the labels
DIFFERENCE = "difference"


def label(name: str) -> str:
    """The display label of a state (``finetuned`` -> ``fine-tuned``)."""
    return STATES[name].label


def seeded(state: str, seed: int | str) -> str:
    """``finetuned``, 1 -> ``finetuned/seed1``: a trained model under its task's folder (an attention dump)."""
    return f"{state}/seed{seed}"


def split_seeded(name: str) -> tuple[str, int]:
    """``finetuned/seed1`` -> (``finetuned``, 1)."""
    match = _SEEDED.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not <state>/seed<N> with a trained state ({', '.join(TRAINED)})")
    return match["state"], int(match["seed"])


def is_seeded(name: str) -> bool:
    return _SEEDED.fullmatch(name) is not None


def dumped_state(name: str) -> str:
    """The state of a dumped model: ``pretrained`` -> ``pretrained``; ``finetuned/seed1`` -> ``finetuned``."""
    return name if name == PRETRAINED else split_seeded(name)[0]


def run_name(task: str, state: str, seed: int | str) -> str:
    """``MRPC``, ``finetuned``, 1 -> ``MRPC/finetuned/seed1``: a trained model where no folder names its task (a probed
    model, a config list of probed models), as ``results/finetune/<model>/`` spells its folder."""
    return f"{task}/{seeded(state, seed)}"


def split_run_name(name: str) -> tuple[str, str, int]:
    """``MRPC/finetuned/seed1`` -> (``MRPC``, ``finetuned``, 1)."""
    match = _RUN.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not <TASK>/<state>/seed<N> with a trained state ({', '.join(TRAINED)})")
    return match["task"], match["state"], int(match["seed"])


def is_run_name(name: str) -> bool:
    return _RUN.fullmatch(name) is not None



# how a label card's recipe fingerprint spells each fine-tuning state (label_tables.recipe_fingerprint): a frozen
# hash format, older than these names, so that the shipped cards' fingerprints (data/pattern_labels/*.json) match
FINGERPRINT_NAMES = {PRETRAINED: "untuned", FINETUNED: "pretrained", SCRATCH: "random"}
