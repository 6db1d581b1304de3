"""The library's boundaries, read from its source: no import cycle, and the torch-free half imports no torch.

The torch-free half is what runs at parse time and in the light environment (envs/tables.yaml): the shared packages
``data``, ``stats``, ``report`` and ``workflow``, and each stage's tables (the modules listed in ``TORCH_FREE``).
Imports are followed through the whole package, lazy ones included (:mod:`bertology_core.workflow.code_imports`)."""

import graphlib
from pathlib import Path

import pytest

from bertology_core.workflow import code_imports

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "bertology_core"
HEAVY = {"torch", "transformers"}
# the torch-free packages, whole
TORCH_FREE_PACKAGES = ("data", "stats", "report", "workflow")
# the torch-free side of each stage (its tables and statistics), and the model checks read from files alone
TORCH_FREE = (
    "attention_change/attention_change.py", "baselines/baselines.py", "disabling/disabling_stats.py", "fitness/fitness.py",
    "head_roles/head_roles.py", "head_roles/head_roles_stats.py", "head_roles/head_gates_stats.py",
    "layer_mix/layer_mix_stats.py", "linguistic/linguistic.py", "models/compatibility.py", "outliers/outliers_stats.py",
    "patterns/annotation.py", "patterns/pattern_labels.py", "patterns/patterns.py", "pruning/pruning_stats.py",
    "pruning/pruning_summary.py",
)


def modules():
    return sorted(path for path in LIBRARY.rglob("*.py") if path.name != "__init__.py")


def name(path):
    return path.relative_to(LIBRARY).with_suffix("").as_posix()


def test_the_library_has_no_import_cycle():
    graph = {name(path): {name(found) for found in code_imports.local_imports(path, REPO)} for path in modules()}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle in bertology_core: {' -> '.join(error.args[1])}")
    assert set(order) == set(graph)


def test_a_cycle_is_found():
    # the check above can fail: a two-module cycle in the same shape as the library's imports
    graph = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


def torch_free_modules():
    shared = [path for package in TORCH_FREE_PACKAGES for path in (LIBRARY / package).rglob("*.py")]
    return sorted(shared + [LIBRARY / path for path in TORCH_FREE])


@pytest.mark.parametrize("path", torch_free_modules(), ids=name)
def test_the_torch_free_half_never_imports_torch(path):
    assert path.is_file()
    heavy = code_imports.third_party_imports(path, REPO) & HEAVY
    reached = [name(module) for module in code_imports.reached_modules(path, REPO)
               if {n.split(".")[0] for n in code_imports.imported_names(module)} & HEAVY]
    assert not heavy, f"{name(path)} reaches {sorted(heavy)} (through {sorted(reached)})"


def test_every_package_is_a_boundary_the_test_knows():
    # a new package is either torch-free (listed above) or a stage's or the engine's: its torch side says so
    packages = {path.name for path in LIBRARY.iterdir() if (path / "__init__.py").is_file()}
    assert set(TORCH_FREE_PACKAGES) <= packages
    for path in TORCH_FREE:
        assert (LIBRARY / path).parent.name in packages
