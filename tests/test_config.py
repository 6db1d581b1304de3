"""The config schema is the one source of every default: config.yaml restates them for a reader, and must
say exactly what the schema says."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


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
    schema = yaml.safe_load((ROOT / "schemas/config.schema.yaml").read_text())
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    defaults = schema_defaults(schema)
    assert len(defaults) > 100  # the walk reaches the nested sections
    differ = {".".join(path): (default, value_at(config, path)) for path, default in defaults.items()
              if value_at(config, path) is not KeyError and value_at(config, path) != default}
    assert not differ, f"config.yaml and the schema's defaults differ (schema, config.yaml): {differ}"
