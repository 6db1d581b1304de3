"""The config schema itself, and how a YAML config is read against it."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from bertology_core import configuration
from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
# the JSON Schema keywords the schema uses; anything else in a schema node is a typo or a description cut short
KEYWORDS = {
    "$schema", "$ref", "description", "type", "additionalProperties", "definitions", "properties", "items", "enum",
    "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "uniqueItems",
    "required", "pattern", "propertyNames", "allOf", "minProperties",
}


def _schema_nodes(node, path="schema"):
    """Every schema node (a mapping that describes a value), with where it is."""
    if not isinstance(node, dict):
        return
    yield path, node
    for key in ("properties", "definitions"):
        for name, child in node.get(key, {}).items():
            yield from _schema_nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties", "propertyNames"):
        yield from _schema_nodes(node.get(key), f"{path}[{key}]")
    for index, child in enumerate(node.get("allOf", [])):
        yield from _schema_nodes(child, f"{path}.allOf[{index}]")


def test_every_schema_node_holds_only_json_schema_keywords():
    # an unquoted YAML description with a comma ({description: a, b}) turns "b" into a key of its own
    strays = [(path, key) for path, node in _schema_nodes(SCHEMA) for key in node if key not in KEYWORDS]
    assert strays == []


def test_numbers_written_as_yaml_strings_are_read_as_numbers():
    # PyYAML (YAML 1.1) needs a dot in a float: 2e-5 is the string '2e-5'
    config = yaml.safe_load("finetune: {hyperparameters: {learning_rate: 2e-5, max_length: 64},"
                            " per_task: {RTE: {learning_rate: 1e-4}}}\nlinguistic: {spacy_model: '1e5'}\n")
    assert config["finetune"]["hyperparameters"]["learning_rate"] == "2e-5"
    changed = configuration.numbers_from_strings(config, SCHEMA)
    assert sorted(changed) == ["finetune.hyperparameters.learning_rate", "finetune.per_task.RTE.learning_rate"]
    assert config["finetune"]["hyperparameters"]["learning_rate"] == pytest.approx(2e-5)
    assert config["finetune"]["per_task"]["RTE"]["learning_rate"] == pytest.approx(1e-4)
    assert config["linguistic"]["spacy_model"] == "1e5"  # a string option stays a string
    jsonschema.validate(config, SCHEMA)


def test_a_string_that_is_no_number_is_left_for_the_schema_to_reject():
    config = {"finetune": {"hyperparameters": {"learning_rate": "fast", "epochs": "3"}}}
    assert configuration.numbers_from_strings(config, SCHEMA) == ["finetune.hyperparameters.epochs"]
    with pytest.raises(jsonschema.ValidationError, match="'fast' is not of type 'number'"):
        jsonschema.validate(config, SCHEMA)
