"""The config schema itself, how a YAML config is read against it, and config.yaml against the schema: the
schema is the one source of every default; config.yaml restates them for a reader and must say exactly what
the schema says."""

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


def schema_defaults(schema: dict, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every ``default`` of an object property in the schema, by its key path."""
    out = {}
    for name, spec in (schema.get("properties") or {}).items():
        if "default" in spec and spec["default"] != {}:
            out[path + (name,)] = spec["default"]
        out |= schema_defaults(spec, path + (name,))
    return out


def value_at(config: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return KeyError
        config = config[key]
    return config


def test_config_yaml_states_the_schemas_defaults():
    schema = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    defaults = schema_defaults(schema)
    assert len(defaults) > 100  # the walk reaches the nested sections
    differ = {".".join(path): (default, value_at(config, path)) for path, default in defaults.items()
              if value_at(config, path) is not KeyError and value_at(config, path) != default}
    assert not differ, f"config.yaml and the schema's defaults differ (schema, config.yaml): {differ}"
