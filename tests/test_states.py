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
    """One spelling of a trained model, as fine-tuning's folders write it: <state>/seed<N> under a task's folder,
    <TASK>/<state>/seed<N> where no folder names the task."""
    assert states.seeded(states.FINETUNED, 3) == "finetuned/seed3" and states.split_seeded("finetuned/seed12") == ("finetuned", 12)
    assert states.run_name("MRPC", states.FINETUNED, 1) == "MRPC/finetuned/seed1"
    assert states.split_run_name("STS-B/scratch/seed12") == ("STS-B", "scratch", 12)
    assert states.dumped_state("pretrained") == "pretrained" and states.dumped_state("scratch/seed2") == "scratch"
    assert re.fullmatch(states.DUMPED_PATTERN, "finetuned/seed1") and not re.fullmatch(states.DUMPED_PATTERN, "finetuned")
    assert not states.is_seeded("MRPC/finetuned/seed1") and not states.is_run_name("finetuned/seed1")
    for former in ("finetuned_seed1", "MRPC_seed1", "pretrained"):  # the spellings before this one are no state names
        assert not states.is_seeded(former) and not states.is_run_name(former)
        with pytest.raises(ValueError):
            states.split_seeded(former)
        with pytest.raises(ValueError):
            states.split_run_name(former)


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


def test_no_module_spells_a_trained_model_the_former_way():
    """A trained model is <state>/seed<N> (<TASK>/<state>/seed<N> without a task folder), never finetuned_seed1 or
    MRPC_seed1: paths, wildcards and tables use one spelling."""
    former = re.compile(r"(\}|\b(?:finetuned|scratch|pretrained|[A-Z][A-Z0-9-]*))_seed(\{|\d|<)")
    files = [p for folder in ("bertology_core", "workflow_scripts", "rules", "tools", "benchmarks", "schemas", "configs")
             for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".smk", ".yaml")]
    # the hand labels name their dumps (the label card's text tells their history, so it is not read)
    files += [REPO / "Snakefile", REPO / "config.yaml", *sorted((REPO / "data").rglob("*.csv")),
              *sorted((REPO / "tests" / "fixtures").rglob("*.csv"))]
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}" for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1) if former.search(line)]
    assert found == [], "spell a trained model <state>/seed<N> (bertology_core.data.states):\n" + "\n".join(found)
