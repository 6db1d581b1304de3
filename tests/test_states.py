"""The one vocabulary of model states (bertology_core/data/states.py): its names and labels, and that no other module
spells the names."""

from __future__ import annotations

import io
import re
import tokenize

import pytest

from bertology_core.data import states
from conftest import REPO


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


def _string_literals(path):
    """Every string literal of a Python module or Snakemake file, with its line (f-strings' parts included)."""
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING:
            yield token.start[0], token.string


def test_no_module_but_states_spells_a_state_name_or_label():
    spelt = {*states.STATES, *(state.label for state in states.STATES.values())}
    files = [p for folder in ("bertology_core", "workflow_scripts", "rules", "tools", "benchmarks")
             for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".smk")] + [REPO / "Snakefile"]
    quoted = re.compile(r"[rbf]*(['\"])(.*)\1", re.S)
    found = [f"{path.relative_to(REPO)}:{line}: {literal}" for path in files if path.name != "states.py"
             for line, literal in _string_literals(path) if (match := quoted.fullmatch(literal)) and match[2] in spelt]
    assert found == [], "import the names from bertology_core.data.states:\n" + "\n".join(found)
