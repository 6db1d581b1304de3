"""The config schema itself, how a YAML config is read against it, and config.yaml against the schema: the
schema is the one source of every default; config.yaml restates them for a reader and must say exactly what
the schema says."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from bertology_core.workflow import configuration
from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
# the JSON Schema keywords the schema uses; anything else in a schema node is a typo or a description cut short
KEYWORDS = {
    "$schema", "$ref", "description", "type", "additionalProperties", "definitions", "properties", "items", "enum",
    "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "uniqueItems",
    "required", "pattern", "propertyNames", "allOf", "minProperties", "oneOf", "minLength",
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
                            " per_task: {RTE: {learning_rate: 1e-4}}}\nlinguistic: {spacy_models: {en: '1e5'}}\n")
    assert config["finetune"]["hyperparameters"]["learning_rate"] == "2e-5"
    changed = configuration.numbers_from_strings(config, SCHEMA)
    assert sorted(changed) == ["finetune.hyperparameters.learning_rate", "finetune.per_task.RTE.learning_rate"]
    assert config["finetune"]["hyperparameters"]["learning_rate"] == pytest.approx(2e-5)
    assert config["finetune"]["per_task"]["RTE"]["learning_rate"] == pytest.approx(1e-4)
    assert config["linguistic"]["spacy_models"]["en"] == "1e5"  # a string option stays a string
    jsonschema.validate(config, SCHEMA)


def test_a_boolean_given_as_text_by_snakemakes_config_option_is_read_as_one():
    config = {"compute": {"check_disk": "false"}, "attention": {"keep_dumps": "True"}, "linguistic": {"spacy_models": {"en": "false"}}}
    assert configuration.numbers_from_strings(config, SCHEMA) == []  # no warning: --config cannot write it otherwise
    assert config["compute"]["check_disk"] is False and config["attention"]["keep_dumps"] is True
    assert config["linguistic"]["spacy_models"]["en"] == "false"  # a string option stays a string


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


def test_every_number_written_as_text_is_read_as_one_and_named_for_the_warning():
    config = {"finetune": {"hyperparameters": {"batch_size": "32", "epochs": "1", "learning_rate": "2e-5"}}}
    changed = configuration.numbers_from_strings(config, SCHEMA)
    assert sorted(changed) == ["finetune.hyperparameters.batch_size", "finetune.hyperparameters.epochs",
                               "finetune.hyperparameters.learning_rate"]
    assert config["finetune"]["hyperparameters"] == {"batch_size": 32, "epochs": 1.0, "learning_rate": 2e-5}
    assert "config 'finetune.hyperparameters.batch_size' = '32' is text" in configuration.number_warning(
        "finetune.hyperparameters.batch_size", "32", 32)
    assert configuration.numbers_from_strings({"finetune": {"hyperparameters": {"batch_size": "3.5"}}}, SCHEMA) == []


@pytest.mark.parametrize(("config", "expected"), [
    ({"finetune": {"hyperparameters": {"learnin_rate": 1e-4}}},
     "config 'finetune.hyperparameters' has no key 'learnin_rate' (did you mean 'learning_rate'?). Allowed keys: batch_size"),
    ({"taks": ["MRPC"]}, "config has no key 'taks' (did you mean 'tasks'?)"),
    ({"tasks": ["MRPC", "../mrpc"]}, "config 'tasks[1]' = '../mrpc': '../mrpc' does not match"),
    ({"fitness": {"if_unfit": "Skip"}}, "(did you mean 'skip'?). Allowed: What downstream stages do"),
    ({"outliers": {"min_layer_share": 1}}, "config 'outliers.min_layer_share' = 1: 1 is greater than or equal to the maximum of 1"),
    ({"finetune": {"mem_mb": 8000}}, "config 'finetune' has no key 'mem_mb'. Allowed keys: "),
    # a probed model in another spelling than <TASK>/finetuned/seed<N>
    ({"probing": {"syntactic_heads": {"states": ["pretrained", "MRPC_seed1"]}}},
     "config 'probing.syntactic_heads.states[1]' = 'MRPC_seed1': 'MRPC_seed1' does not match"),
    ({"layer_mix": {"states": ["MRPC/scratch/seed1"]}},
     "Allowed: pretrained, random_weights or <TASK>/finetuned/seed<N> (e.g. MRPC/finetuned/seed1)"),
])
def test_schema_errors_lead_with_the_key_the_value_and_what_is_allowed_without_the_schema(config, expected):
    problems = configuration.schema_problems(config, SCHEMA)
    assert any(expected in problem for problem in problems), problems
    assert not any("Failed validating" in problem or "On instance" in problem for problem in problems)


@pytest.mark.parametrize("old", sorted(configuration.RENAMED))
def test_a_key_under_its_old_name_is_refused_naming_the_new_one(old):
    # the old name beside the defaults' new one, as Snakemake merges a config written before the rename
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    *parents, key = old.split(".")
    node = config
    for parent in parents:
        node = node[parent]
    value = config
    for part in configuration.RENAMED[old][0].split("."):  # the new key's default, wherever it now is
        value = value[part]
    node[key] = value
    assert configuration.schema_problems(config, SCHEMA) == [
        f"config '{old}' is now '{configuration.RENAMED[old][0]}' ({configuration.RENAMED[old][1]}). Fix: rename the key "
        "in your config."]


def test_the_shipped_configs_fit_the_schema():
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml")), *sorted((REPO / "configs" / "examples").glob("*.yaml"))]:
        assert configuration.yaml_problem(path) is None
        config = yaml.safe_load(path.read_text())
        configuration.numbers_from_strings(config, SCHEMA)
        assert configuration.schema_problems(config, SCHEMA) == [], path


@pytest.mark.parametrize(("text", "expected"), [
    ("finetune:\n  hyperparameters:\n\tbatch_size: 3\n", ":3:1: not valid YAML (while scanning for the next token; found character '\\t'"),
    ("finetune:\n  hyperparameters: {batch_size: 3\ntasks: [MRPC]\n", ":3:6 (in what starts at line 2): not valid YAML (while parsing a flow mapping"),
    ("- MRPC\n- RTE\n", "the top level is a list, not a mapping of keys"),
])
def test_invalid_yaml_is_named_by_file_and_line(tmp_path, text, expected):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    assert expected in configuration.yaml_problem(path)
    assert str(path) in configuration.yaml_problem(path)


def test_per_task_settings_of_a_task_not_run_are_refused_at_any_depth():
    config = {"data": {"per_task": {"MRPC": {}}}, "disabling": {"per_task": {"CoLa": {"seeds": [1]}}},
              "fitness": {"per_task": {"RTE": {}}}}
    problems = configuration.per_task_problems(config, ["MRPC", "CoLA"])
    assert len(problems) == 2
    assert "config 'disabling.per_task' names 'CoLa', which is not in tasks ['MRPC', 'CoLA'] (did you mean 'CoLA'?)" in problems[0]
    assert "config 'fitness.per_task' names 'RTE'" in problems[1]
    # a declared task not run (a layer over a config that runs it cannot drop the key: mappings merge) is ignored and
    # said so; a misspelling of a task run, or an undeclared name, is still refused
    declared = {"MRPC", "CoLA", "RTE"}
    assert configuration.per_task_problems(config, ["MRPC", "CoLA"], declared=declared) == [problems[0]]
    assert configuration.per_task_ignored(config, ["MRPC", "CoLA"], declared) == [
        "config: the per_task settings of RTE (fitness.per_task) are ignored: RTE is not in tasks ['MRPC', 'CoLA']."]


def test_every_rule_asks_for_its_resources_by_its_name_and_has_a_need():
    import re

    from bertology_core.jobs import needs

    rules = {m.group(1) for path in (REPO / "rules").glob("*.smk")
             for m in re.finditer(r"^(?:rule|checkpoint) (\w+):", path.read_text(), re.MULTILINE)}
    requested = {m.group(1) for path in (REPO / "rules").glob("*.smk")
                 for m in re.finditer(r'\*\*requests\("(\w+)"', path.read_text())}
    node = SCHEMA["properties"]["compute"]["properties"]["mem_mb"]
    # every rule asks through requests() under its own name, has a fitted (or stated, or borrowed until measured) need,
    # and the schema's overrides name exactly those rules
    assert rules == requested == set(needs.load()) | set(needs.BORROWED) == set(node["propertyNames"]["enum"])
    assert not set(needs.BORROWED) & set(needs.load()) and set(needs.BORROWED.values()) <= set(needs.load())
    assert node["default"] == {} and yaml.safe_load((REPO / "config.yaml").read_text())["compute"]["mem_mb"] == {}
    assert configuration.schema_problems({"compute": {"mem_mb": {"probe_layer": 9000}}}, SCHEMA)
