"""The one vocabulary of model states (bertology_core/states.py): its names and labels, the errors that name the new
names when a config uses the former ones, and that no other module spells the names."""

from __future__ import annotations

import io
import re
import tokenize

import jsonschema
import pytest
import yaml

from bertology_core import configuration, states
from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())


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


# (config written with the former names, the message that must name key, new key or value, mapping and fix)
FORMER_CONFIGS = [
    ({"finetune": {"inits": ["untuned", "random", "pretrained"]}},
     "config 'finetune.inits' was renamed 'finetune.states' (untuned -> pretrained, pretrained -> finetuned, "
     "random -> scratch). Fix: replace it with finetune.states: [pretrained, scratch, finetuned]."),
    ({"finetune": {"per_init": {"random": {"epochs": 0.25}}}},
     "config 'finetune.per_init' was renamed 'finetune.per_state' (untuned -> pretrained, pretrained -> finetuned, "
     "random -> scratch). Fix: replace it with finetune.per_state: {scratch: {epochs: 0.25}}."),
    ({"disabling": {"inits": ["pretrained"]}},
     "config 'disabling.inits' was renamed 'disabling.states' (untuned -> pretrained, pretrained -> finetuned, "
     "random -> scratch). Fix: replace it with disabling.states: [finetuned]."),
    ({"attention": {"states": ["untuned", "pretrained"]}},
     "config 'attention.states' was renamed 'attention.dumped' (untuned -> pretrained, pretrained -> finetuned, "
     "random -> scratch). Fix: replace it with attention.dumped: [pretrained, finetuned]."),
    ({"probing": {"states": ["untuned", "finetuned", "random"]}},
     "config 'probing.states': 'untuned', 'random' were renamed (untuned -> pretrained, random -> random_weights). "
     "Fix: probing.states: [pretrained, finetuned, random_weights]."),
    ({"probing": {"syntactic_heads": {"states": ["untuned", "MRPC_seed1"]}}},
     "config 'probing.syntactic_heads.states': 'untuned' was renamed (untuned -> pretrained, random -> random_weights). "
     "Fix: probing.syntactic_heads.states: [pretrained, MRPC_seed1]."),
    ({"probing": {"reference": {"states": ["random"]}}},
     "config 'probing.reference.states': 'random' was renamed (untuned -> pretrained, random -> random_weights). "
     "Fix: probing.reference.states: [random_weights]."),
]


@pytest.mark.parametrize(("config", "message"), FORMER_CONFIGS, ids=[m.split("'")[1] for _, m in FORMER_CONFIGS])
def test_a_former_key_or_value_names_the_new_one_the_mapping_and_the_fix(config, message):
    assert configuration.former_state_names(config) == [message]
    # without that check the schema would reject it too, but saying neither the new name nor the mapping
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, SCHEMA)


def test_new_names_and_the_shipped_configs_pass():
    assert configuration.former_state_names({"finetune": {"states": ["pretrained"], "per_state": {"scratch": {}}},
                                             "probing": {"states": ["random_weights"], "syntactic_heads": {"states": None}}}) == []
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        assert configuration.former_state_names(yaml.safe_load(path.read_text())) == [], path


def test_every_former_name_is_reported_at_once():
    problems = configuration.former_state_names({"finetune": {"inits": ["random"]}, "probing": {"states": ["untuned"]}})
    assert [p.split("'")[1] for p in problems] == ["finetune.inits", "probing.states"]


def _string_literals(path):
    """Every string literal of a Python module or Snakemake file, with its line (f-strings' parts included)."""
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING:
            yield token.start[0], token.string


def test_no_module_but_states_spells_a_state_name_or_label():
    # ("random" is also a lottery subnetwork and a label sample, so only the former name that is nothing else)
    spelt = {*states.STATES, *(state.label for state in states.STATES.values()), "untuned"}
    files = [p for folder in ("bertology_core", "workflow_scripts", "rules", "tools", "benchmarks")
             for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".smk")] + [REPO / "Snakefile"]
    quoted = re.compile(r"[rbf]*(['\"])(.*)\1", re.S)
    found = [f"{path.relative_to(REPO)}:{line}: {literal}" for path in files if path.name != "states.py"
             for line, literal in _string_literals(path) if (match := quoted.fullmatch(literal)) and match[2] in spelt]
    assert found == [], "import the names from bertology_core.states:\n" + "\n".join(found)
