"""The one vocabulary of model states (bertology_core/states.py): its names, labels and former names."""

from __future__ import annotations

import re

import pytest

from bertology_core import states


def test_the_four_states_their_meanings_and_labels():
    assert {name: state.label for name, state in states.STATES.items()} == {
        "pretrained": "pre-trained", "finetuned": "fine-tuned", "scratch": "from scratch", "random_weights": "random weights"}
    assert all(state.meaning for state in states.STATES.values())
    assert states.FINE_TUNING == ("pretrained", "scratch", "finetuned") and states.TRAINED == ("finetuned", "scratch")
    assert states.STARTS_FROM == {"pretrained": "pretrained", "finetuned": "pretrained", "scratch": "random_weights"}


def test_seeded_names():
    assert states.seeded(states.FINETUNED, 3) == "finetuned_seed3" and states.split_seeded("MRPC_seed12") == ("MRPC", 12)
    assert states.dumped_state("pretrained") == "pretrained" and states.dumped_state("scratch_seed2") == "scratch"
    assert re.fullmatch(states.DUMPED_PATTERN, "finetuned_seed1") and not re.fullmatch(states.DUMPED_PATTERN, "finetuned")
    with pytest.raises(ValueError):
        states.split_seeded("pretrained")


def test_former_dump_names_map_to_the_new_ones_and_new_names_are_not_former():
    assert [states.former_dumped(n) for n in ("untuned", "pretrained_seed2", "random_seed1")] == [
        "pretrained", "finetuned_seed2", "scratch_seed1"]
    assert [states.former_dumped(n) for n in ("pretrained", "finetuned_seed1", "scratch_seed1", "MRPC_seed1")] == [None] * 4
    assert states.former_fine_tuning_name("finetuned") == "pretrained"  # what old label cards' fingerprints hashed
