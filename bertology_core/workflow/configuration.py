"""Reading a YAML config against its JSON schema: what YAML gets wrong before the schema sees it, and messages
that lead with the key.

PyYAML follows YAML 1.1, where a float needs a dot: ``learning_rate: 2e-5`` arrives as the string
``'2e-5'``, and the schema would reject it as "not of type 'number'" although the user wrote a number. One rule
for every number written as text (``"32"``, ``"2e-5"``): read as the number the schema asks for, with a warning
naming the key. Snakemake's own messages name neither the file and line of a YAML error nor, for a schema error,
anything before a dump of the schema; these functions do.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

def merged(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Config files merged as Snakemake merges ``--configfile`` files: a later file's mapping updates an earlier one's key
    by key, at every depth; any other value replaces it. For tools that read a config without Snakemake."""

    def update(into: dict[str, Any], values: dict[str, Any]) -> None:
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                update(into[key], value)
            else:
                into[key] = value

    config: dict[str, Any] = {}
    for path in paths:
        update(config, yaml.safe_load(Path(path).read_text()) or {})
    return config


def validated(paths: Iterable[str | Path], schema: str | Path) -> dict[str, Any]:
    """Config files :func:`merged`, read as the workflow reads them (numbers written as text made numbers, checked
    against ``schema``, its defaults filled in by Snakemake's ``validate``): for tools that build the experiment."""
    from snakemake.utils import validate

    config = merged(paths)
    schema_data = yaml.safe_load(Path(schema).read_text())
    numbers_from_strings(config, schema_data)
    if problems := schema_problems(config, schema_data):
        raise ValueError(f"config does not fit {schema}:\n  " + "\n  ".join(problems))
    validate(config, schema=str(Path(schema).resolve()))
    return config


# what Python's float() accepts as a plain decimal number (no inf, nan or underscores)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


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


def _wants(node: dict[str, Any], kind: str) -> bool:
    kinds = node.get("type")
    return kind in (kinds if isinstance(kinds, list) else [kinds])


def numbers_from_strings(config: Any, schema: dict[str, Any]) -> list[str]:
    """Turn, in place, every string that spells a number into one where the schema asks for a number
    (``'2e-5'`` -> ``2e-05``) or an integer (``'32'`` -> ``32``). Returns the dotted keys changed (the workflow
    warns about each). ``'true'`` and ``'false'`` where the schema asks for a boolean become one, without a warning:
    Snakemake's ``--config`` reads every value inside a mapping as text, so that is the only way to give one there.
    Anything else is left to the schema."""
    changed: list[str] = []

    def walk(value: Any, node: dict[str, Any], path: str) -> Any:
        node = _resolve(node, schema)
        if isinstance(value, str) and _wants(node, "boolean") and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if isinstance(value, str) and _wants(node, "integer") and _INTEGER.fullmatch(value.strip()):
            changed.append(path)
            return int(value)
        if isinstance(value, str) and _wants(node, "number") and _NUMBER.fullmatch(value.strip()):
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


def flatten(config: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of the config by its dotted key (list items as ``key[i]``), as numbers_from_strings names them."""
    if isinstance(config, dict):
        return {k: v for key, value in config.items() for k, v in flatten(value, f"{path}.{key}" if path else str(key)).items()}
    if isinstance(config, list):
        return {k: v for index, item in enumerate(config) for k, v in flatten(item, f"{path}[{index}]").items()}
    return {path: config}


def number_warning(key: str, written: str, value: float | int) -> str:
    """The warning for a number written as text (:func:`numbers_from_strings`)."""
    return (f"config '{key}' = {written!r} is text (quoted, or a YAML 1.1 float without a dot such as 2e-5); read as "
            f"the number {value!r}. Fix: write it as a number ({float(value)!r} for a float) to silence this.")


def yaml_problem(path: str | Path) -> str | None:
    """Why the YAML file at ``path`` cannot be a config (None when it can): the parser's problem with its file,
    line and column, or a top level that is not a mapping."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        return f"{path}: byte {error.start} is not UTF-8. Fix: save the file as UTF-8."
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        if error.context_mark is not None and mark is not None and error.context_mark.line != mark.line:
            where += f" (in what starts at line {error.context_mark.line + 1})"
        lines = path.read_text(encoding="utf-8").splitlines()
        tabs = mark is not None and mark.line < len(lines) and "\t" in lines[mark.line]
        what = "; ".join(str(part) for part in (error.context, error.problem) if part)
        return (f"{where}: not valid YAML ({what}). Fix: {'indent with spaces, not tabs' if tabs else 'correct the line'}"
                " (a key is `name: value`, nested keys indented by spaces, lists in [ ] or on `- ` lines).")
    except yaml.YAMLError as error:
        return f"{path}: not valid YAML ({error})."
    if data is not None and not isinstance(data, dict):
        return f"{path}: the top level is a {type(data).__name__}, not a mapping of keys. Fix: write `key: value` lines."
    return None


def _dotted(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the choice closest to ``word``, or nothing."""
    guess = _close(word, choices)
    return f" (did you mean {guess!r}?)" if guess else ""


def _close(word: str, choices: Iterable[str]) -> str | None:
    choices = [str(choice) for choice in choices]
    lowered = {choice.lower(): choice for choice in choices}
    if word.lower() in lowered:
        return lowered[word.lower()]
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


# keys whose old name misled -> (the new name, what it is): a config with the old one is refused naming the new one
# (never read under the old name: a run does what its config says, or stops)
RENAMED = {
    "fitness.unfit": ("fitness.if_unfit", "what the analyses do with a model that is not fit: warn, skip or fail"),
    "compute.training_minutes_per_10k_examples": (
        "compute.training_request_minutes_per_10k_examples",
        "the runtime a training job asks a cluster for per epoch and 10,000 examples, not a speed"),
    "compute.training_min_minutes": ("compute.training_request_min_minutes", "the least runtime a training job asks for"),
    "pruning.paper_protocol": ("pruning.dev_chosen_tickets",
                               "also the tickets chosen and reported on dev, as Prasanna et al. did, beside the held-out ones"),
    "head_roles.gates.weights": ("head_roles.gates.encoder",
                                 "whether the encoder's weights train with the gates (trained) or stay as fine-tuned (frozen)"),
    "disabling.gpu_rows_per_pass": ("compute.gpu_rows_per_pass",
                                    "the rows of every scoring pass on a GPU, in every stage, not only the sweeps'"),
}


def schema_problems(config: Any, schema: dict[str, Any]) -> list[str]:
    """One line per place where ``config`` does not fit ``schema``, each leading with the key and the value, then
    what is allowed, and "did you mean" for a misspelt key or choice; empty when it fits. (Snakemake's
    ``validate`` prints the whole schema node before the line that matters.)"""
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path]):
        key = _dotted(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = sorted(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                path = f"{key}.{extra}" if error.absolute_path else str(extra)
                if path in RENAMED:
                    now, meaning = RENAMED[path]
                    problems.append(f"config '{path}' is now '{now}' ({meaning}). Fix: rename the key in your config.")
                    continue
                guess = _close(str(extra), allowed)
                where = f"config '{key}'" if error.absolute_path else "config"
                problems.append(f"{where} has no key {extra!r}{f' (did you mean {guess!r}?)' if guess else ''}. "
                                f"Allowed keys: {', '.join(allowed)}.")
            continue
        value = repr(error.instance)
        value = value if len(value) <= 120 else value[:117] + "..."
        line = f"config '{key}' = {value}: {error.message}"
        if error.validator == "enum" and isinstance(error.instance, str):
            if (guess := _close(error.instance, error.validator_value)) is not None:
                line += f" (did you mean {guess!r}?)"
        description = error.schema.get("description") if isinstance(error.schema, dict) else None
        problems.append(line + (f". Allowed: {description.strip()}" if description else "."))
    return problems


def per_task_problems(config: Any, tasks: list[str], path: str = "", declared: Collection[str] = ()) -> list[str]:
    """Every ``per_task`` mapping of the config (at any depth) must name only tasks in ``tasks``: a key outside
    them, misspelt or unknown, would be ignored without a word. A task ``declared`` but not run (a config layered over
    one that runs it: mappings merge, so a layer cannot drop the key) is :func:`per_task_ignored` instead."""
    problems = []
    for where, task in _per_task_names(config, path):
        if task in tasks:
            continue
        if task in declared:  # a task of its own, never a misspelling of another
            continue
        guess = _close(str(task), tasks)
        problems.append(f"config '{where}' names {task!r}, which is not in tasks {tasks}"
                        f"{f' (did you mean {guess!r}?)' if guess else ''}: its settings would be ignored. "
                        f"Fix: add {task} to tasks, or drop {where}.{task}.")
    return problems


def per_task_ignored(config: Any, tasks: list[str], declared: Collection[str]) -> list[str]:
    """The warnings for ``per_task`` settings of a declared task this config does not run: ignored, and said so."""
    ignored: dict[str, list[str]] = {}
    for where, task in _per_task_names(config, ""):
        if task not in tasks and task in declared:
            ignored.setdefault(str(task), []).append(where)
    return [f"config: the per_task settings of {task} ({', '.join(wheres)}) are ignored: {task} is not in tasks {tasks}."
            for task, wheres in ignored.items()]


def _per_task_names(config: Any, path: str) -> list[tuple[str, Any]]:
    """(where, task) of every key of every ``per_task`` mapping of the config, at any depth."""
    found = []
    if isinstance(config, dict):
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "per_task" and isinstance(value, dict):
                found += [(where, task) for task in value]
            else:
                found += _per_task_names(value, where)
    return found


if __name__ == "__main__":  # python -m bertology_core.workflow.configuration FILE...: the YAML check before snakemake reads them
    found = [problem for name in sys.argv[1:] if (problem := yaml_problem(name))]
    print("\n".join(found), file=sys.stderr) if found else None
    raise SystemExit(1 if found else 0)
