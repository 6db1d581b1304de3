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
