"""What a workflow script imports, read from the source: the project's own modules it reaches (to fingerprint the
code a job runs) and the third-party packages they import (to check that a job's environment holds them).

Imports are found anywhere in a file (function-level and lazy imports included), so a package imported only on
one path still counts: an environment that lacks it would fail on that path.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "bertology_core"
SCRIPTS = "workflow_scripts"


def imported_names(path: Path) -> set[str]:
    """Every absolute import of a file: ``import a.b`` gives ``a.b``; ``from a import b`` gives ``a``, and also ``a.b``
    when ``a`` is in this project's package (``b`` may be a module: ``from bertology_core.data import tasks``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            if node.module.split(".")[0] == PACKAGE:
                names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def local_module(name: str, repo: Path) -> Path | None:
    """The file of a project module (``bertology_core.<package>.<module>`` or a workflow-script helper such as
    ``_common``); None for anything else (a package, whose ``__init__`` holds no code, or a name in a module)."""
    if name.startswith(f"{PACKAGE}."):
        # bertology_core.<package>.<module>; a package's own __init__ holds no code
        module = repo.joinpath(*name.split(".")).with_suffix(".py")
        return module if module.is_file() else None
    helper = repo / SCRIPTS / f"{name}.py"
    return helper if helper.is_file() else None


def local_imports(path: Path, repo: Path) -> set[Path]:
    """The project modules a file imports directly."""
    return {found for name in imported_names(path) if (found := local_module(name, repo)) is not None}


def reached_modules(script: Path, repo: Path) -> set[Path]:
    """The project modules a script reaches, followed through their own imports (the script itself excluded)."""
    pending, seen = [script], set()
    while pending:
        for module in local_imports(pending.pop(), repo) - seen:
            seen.add(module)
            pending.append(module)
    return seen


def third_party_imports(script: Path, repo: Path) -> set[str]:
    """Top-level names of the packages outside the standard library and the project that a script and the project
    modules it reaches import."""
    names: set[str] = set()
    for path in {script} | reached_modules(script, repo):
        for name in imported_names(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != PACKAGE and local_module(name, repo) is None:
                names.add(top)
    return names
