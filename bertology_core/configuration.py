"""Reading a YAML config against its JSON schema: what YAML gets wrong before the schema sees it.

PyYAML follows YAML 1.1, where a float needs a dot: ``learning_rate: 2e-5`` arrives as the string
``'2e-5'``, and the schema would reject it as "not of type 'number'" although the user wrote a number.
"""

from __future__ import annotations

import re
from typing import Any

# what Python's float() accepts as a plain decimal number (no inf, nan or underscores)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """A schema node with its ``$ref`` (to ``#/definitions/...``) and ``allOf`` parts merged in."""
    merged = dict(node)
    if "$ref" in merged:
        target: Any = root
        for part in merged.pop("$ref").removeprefix("#/").split("/"):
            target = target[part]
        merged = {**_resolve(target, root), **merged}
    for part in merged.pop("allOf", []):
        merged = {**_resolve(part, root), **merged}
    return merged


def _wants_number(node: dict[str, Any]) -> bool:
    kinds = node.get("type")
    return "number" in (kinds if isinstance(kinds, list) else [kinds])


def numbers_from_strings(config: Any, schema: dict[str, Any]) -> list[str]:
    """Turn, in place, every string that spells a decimal number into a float where the schema asks for a
    number (``'2e-5'`` -> ``2e-05``). Returns the dotted keys changed. Anything else is left to the schema."""
    changed: list[str] = []

    def walk(value: Any, node: dict[str, Any], path: str) -> Any:
        node = _resolve(node, schema)
        if isinstance(value, str) and _wants_number(node) and _NUMBER.fullmatch(value.strip()):
            changed.append(path)
            return float(value)
        if isinstance(value, dict):
            properties = node.get("properties", {})
            extra = node.get("additionalProperties")
            for key in value:
                child = properties.get(key, extra if isinstance(extra, dict) else None)
                if child is not None:
                    value[key] = walk(value[key], child, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for index, item in enumerate(value):
                value[index] = walk(item, node["items"], f"{path}[{index}]")
        return value

    walk(config, schema, "")
    return changed


# --- the state names before the one vocabulary (bertology_core.states) ------------------------------------------

# keys whose values changed meaning (the former fine-tuning ``pretrained`` is the new ``finetuned``), renamed so that
# an old config cannot be read with the new meanings: old key -> (new key, whether its names are the list's items or
# the mapping's keys)
RENAMED_KEYS = {
    "finetune.inits": ("finetune.states", "items"),
    "finetune.per_init": ("finetune.per_state", "keys"),
    "disabling.inits": ("disabling.states", "items"),
    "attention.states": ("attention.dumped", "items"),
}
# keys that kept their name; only their former values are refused (probing's untuned and random)
RENAMED_VALUES = ("probing.states", "probing.reference.states", "probing.syntactic_heads.states")


def _get(config: Any, dotted: str) -> tuple[bool, Any]:
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _flow(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()


def former_state_names(config: Any) -> list[str]:
    """One message per config key or value that uses the state names before :mod:`bertology_core.states` (empty when
    none does), each naming the key, its new name or value, the mapping and the fix. Run before the schema, whose
    messages would only say that a key is not allowed or a value not one of the new ones."""
    from bertology_core import states

    problems = []
    for old, (new, where) in RENAMED_KEYS.items():
        found, value = _get(config, old)
        if not found:
            continue
        mapping = states.FORMER_FINE_TUNING
        if where == "items" and isinstance(value, list):
            value = [mapping.get(item, item) for item in value]
        elif where == "keys" and isinstance(value, dict):
            value = {mapping.get(key, key): item for key, item in value.items()}
        problems.append(f"config '{old}' was renamed '{new}' ({states.renaming(mapping)}). Fix: replace it with "
                        f"{new}: {_flow(value)}.")
    for key in RENAMED_VALUES:
        found, value = _get(config, key)
        if not found or not isinstance(value, list):
            continue
        mapping = states.FORMER_PROBED
        former = [item for item in value if item in mapping]
        if former:
            fixed = [mapping.get(item, item) for item in value]
            problems.append(f"config '{key}': {', '.join(repr(item) for item in former)} "
                            f"{'was' if len(former) == 1 else 'were'} renamed ({states.renaming(mapping)}). "
                            f"Fix: {key}: {_flow(fixed)}.")
    return problems
