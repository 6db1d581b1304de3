"""The library's boundaries, read from its source: its packages in layers that import only downwards, no import cycle
between packages or modules, and the torch-free half imports no torch.

The torch-free half is what runs at parse time and in the light environment (envs/tables.yaml): the shared packages
``data``, ``stats``, ``summaries``, ``report`` and ``workflow``, the cost model (all of ``cost`` but its calibration),
the model checks read from files alone, and each stage's tables. A stage module says by its name which side it is on:
``*stats.py``, ``*tables.py``, ``summary.py`` and ``stage.py`` never reach torch, and every other module of a stage
does (the model-running side), so a new module is checked by what it is called, and a torch-free module that is not
named so is an error too. Imports are followed through the whole package, lazy ones included
(:mod:`bertology_core.workflow.code_imports`), and compared by their full dotted names (``safetensors.torch``
imports torch). The workflow scripts of every rule that runs in envs/tables.yaml must not reach torch either (the
rules as tests/test_packaging.py reads them)."""

import ast
import graphlib
from pathlib import Path

import pytest

from bertology_core.workflow import code_imports
from test_packaging import rules_with_scripts

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "bertology_core"
# an import name equal to or starting with these, or ending in ".torch" (safetensors.torch), reaches torch
HEAVY = ("torch", "transformers")
LIGHT_ENV = "tables"
# the torch-free packages, whole, but for the modules in TORCH_SIDE
TORCH_FREE_PACKAGES = ("data", "stats", "summaries", "jobs", "report", "workflow", "cost")
# cost's calibration times a device's passes with the stages' own code: the one torch module of a torch-free package
TORCH_SIDE = ("cost/calibration.py",)
# outside the stages and the packages above: the model checks read from files alone, at parse time
TORCH_FREE_MODULES = ("models/compatibility.py",)
# a stage module named so is torch-free; every other stage module runs models (imports torch)
TORCH_FREE_SUFFIXES = ("stats", "tables")
TORCH_FREE_NAMES = ("summary.py", "stage.py")
# torch-free stage modules that are not tables, and why
UNNAMED_TORCH_FREE = {
    "patterns/annotation.py": "the labelling page: one HTML file for a browser, no table",
}


def modules():
    return sorted(path for path in LIBRARY.rglob("*.py") if path.name != "__init__.py")


def name(path):
    return path.relative_to(LIBRARY).with_suffix("").as_posix()


def torch_free_by_name(filename):
    """Whether a stage module's file name says it never reaches torch: ``stats.py``, ``<what>_stats.py``, ``tables.py``,
    ``<what>_tables.py``, ``summary.py`` or ``stage.py``."""
    stem = filename.removesuffix(".py")
    return filename in TORCH_FREE_NAMES or any(stem == suffix or stem.endswith(f"_{suffix}")
                                               for suffix in TORCH_FREE_SUFFIXES)


def test_the_library_has_no_import_cycle():
    graph = {name(path): {name(found) for found in code_imports.local_imports(path, REPO)} for path in modules()}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle in bertology_core: {' -> '.join(error.args[1])}")
    assert set(order) == set(graph)


# The packages' order, lowest first: a package imports only from its own layer or those below it. Every package not
# named here is a stage's (the layer between models and report); stages may import each other without a cycle.
LAYERS = (("engine",), ("data",), ("stats", "summaries"), ("models", "inputs"), ("scoring",), ("jobs",), None, ("report",),
          ("workflow", "cost"))


def package_imports(library=LIBRARY, repo=REPO):
    """{package: the other packages its modules import} over the library's modules."""
    graph = {path.name: set() for path in library.iterdir() if (path / "__init__.py").is_file()}
    for path in library.rglob("*.py"):
        package = path.relative_to(library).parts[0]
        for found in code_imports.local_imports(path, repo):
            if (other := found.relative_to(library).parts[0]) != package:
                graph[package].add(other)
    return graph


def layer_problems(graph, layers=LAYERS):
    """Each import that goes up a layer, as ``package -> package``; the packages of no named layer are the stages'."""
    named = {package: rank for rank, layer in enumerate(layers) if layer for package in layer}
    stage_rank = layers.index(None)
    rank = {package: named.get(package, stage_rank) for package in graph}
    return sorted(f"{package} -> {other}" for package, others in graph.items() for other in others
                  if rank[other] > rank[package])


def test_the_packages_import_only_downwards():
    graph = package_imports()
    assert set(graph) >= {p for layer in LAYERS if layer for p in layer}, "a named layer's package is missing"
    assert not layer_problems(graph), f"imports up a layer: {layer_problems(graph)}"
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"package cycle in bertology_core: {' -> '.join(error.args[1])}")


def test_an_upward_import_is_found(tmp_path):
    # the checks above can fail: a stage's module importing the workflow, and a model module importing a stage
    for module in ("engine/plan.py", "models/loading.py", "pruning/lottery.py", "workflow/checks.py"):
        (tmp_path / "bertology_core" / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "bertology_core" / module).parent.joinpath("__init__.py").touch()
    (tmp_path / "bertology_core/engine/plan.py").write_text("")
    (tmp_path / "bertology_core/models/loading.py").write_text("from bertology_core.pruning import lottery\n")
    (tmp_path / "bertology_core/pruning/lottery.py").write_text("from bertology_core.workflow import checks\n")
    (tmp_path / "bertology_core/workflow/checks.py").write_text("from bertology_core.engine import plan\n")
    graph = package_imports(tmp_path / "bertology_core", tmp_path)
    assert graph == {"engine": set(), "models": {"pruning"}, "pruning": {"workflow"}, "workflow": {"engine"}}
    assert layer_problems(graph) == ["models -> pruning", "pruning -> workflow"]


def test_a_cycle_is_found():
    # the check above can fail: a two-module cycle in the same shape as the library's imports
    graph = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


def is_heavy(imported):
    return imported.startswith(HEAVY) or imported.endswith(".torch")


def dotted_imports(path):
    """Every absolute import of a file by its full dotted name: :func:`code_imports.imported_names`, plus ``a.b`` for
    every ``from a import b`` (``from safetensors import torch`` is ``safetensors.torch``)."""
    names = set(code_imports.imported_names(path))
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def heavy_imports(path, repo=REPO):
    """{file (relative to ``repo``): its heavy imports} over ``path`` and every project module it reaches."""
    found = {}
    for module in sorted({path} | code_imports.reached_modules(path, repo)):
        heavy = sorted(imported for imported in dotted_imports(module) if is_heavy(imported))
        if heavy:
            found[module.relative_to(repo).as_posix()] = heavy
    return found


def test_a_heavy_import_is_found(tmp_path):
    # the check below can fail: a torch import behind a module of the project's own, in each spelling
    (tmp_path / "bertology_core" / "pkg").mkdir(parents=True)
    (tmp_path / "bertology_core" / "pkg" / "weights.py").write_text(
        "def load(path):\n    from safetensors.torch import load_file\n    return load_file(path)\n")
    (tmp_path / "bertology_core" / "pkg" / "other.py").write_text("from safetensors import torch\nimport transformers.utils\n")
    (tmp_path / "bertology_core" / "pkg" / "fine.py").write_text("import safetensors\nimport numpy.torchlike\n")
    script = tmp_path / "script.py"
    script.write_text("import polars\nfrom bertology_core.pkg import fine, other, weights\n")
    assert heavy_imports(script, tmp_path) == {
        "bertology_core/pkg/other.py": ["safetensors.torch", "transformers.utils"],
        "bertology_core/pkg/weights.py": ["safetensors.torch"],
    }
    # and in the library: the classifier's training half imports torch, its tables do not
    assert heavy_imports(LIBRARY / "patterns" / "training.py")
    assert not heavy_imports(LIBRARY / "patterns" / "tables.py")


def stage_packages(library=LIBRARY):
    """The packages of no named layer: one per stage."""
    named = {package for layer in LAYERS if layer for package in layer}
    return sorted(path.name for path in library.iterdir()
                  if (path / "__init__.py").is_file() and path.name not in named)


def stage_modules():
    return sorted(path for package in stage_packages() for path in (LIBRARY / package).glob("*.py")
                  if path.name != "__init__.py")


def torch_free_modules():
    shared = [path for package in TORCH_FREE_PACKAGES for path in (LIBRARY / package).rglob("*.py")
              if path.relative_to(LIBRARY).as_posix() not in TORCH_SIDE]
    named = [path for path in stage_modules() if torch_free_by_name(path.name)]
    listed = [LIBRARY / path for path in TORCH_FREE_MODULES + tuple(UNNAMED_TORCH_FREE)]
    return sorted(set(shared + named + listed))


@pytest.mark.parametrize("path", torch_free_modules(), ids=name)
def test_the_torch_free_half_never_imports_torch(path):
    assert path.is_file()
    heavy = heavy_imports(path)
    assert not heavy, f"{name(path)} reaches torch: {heavy}"


@pytest.mark.parametrize("path", stage_modules(), ids=name)
def test_a_stage_module_is_named_for_its_side(path):
    # the converse of the test above: a stage module that reaches no torch carries a torch-free name (or is one of the
    # few listed with their reason), so the name always tells which environment a module can run in
    module = path.relative_to(LIBRARY).as_posix()
    if torch_free_by_name(path.name):
        assert module not in UNNAMED_TORCH_FREE, f"{module} is named torch-free: drop it from UNNAMED_TORCH_FREE"
    elif module not in UNNAMED_TORCH_FREE:
        assert heavy_imports(path), (
            f"{module} imports no torch: name it <what>_stats.py or <what>_tables.py (or summary.py), "
            "so that the light environment's rule covers it")


def test_the_listed_exceptions_still_hold():
    for module in TORCH_SIDE:
        assert (LIBRARY / module).parent.name in TORCH_FREE_PACKAGES
        assert heavy_imports(LIBRARY / module), f"{module} reaches no torch: drop it from TORCH_SIDE"
    for module in TORCH_FREE_MODULES:
        assert (LIBRARY / module).parent.name not in TORCH_FREE_PACKAGES + tuple(stage_packages())
    for module in UNNAMED_TORCH_FREE:
        assert (LIBRARY / module).parent.name in stage_packages()


def test_the_name_rule_reads_the_suffix():
    torch_free = ("stats.py", "gate_stats.py", "tables.py", "dump_tables.py", "summary.py", "stage.py")
    torch_side = ("training.py", "statistics.py", "stats_plots.py", "dumps.py", "summary_cnn.py", "stage_runs.py")
    assert all(map(torch_free_by_name, torch_free)) and not any(map(torch_free_by_name, torch_side))


def light_environment_scripts():
    """The workflow scripts of the rules whose conda environment is envs/tables.yaml."""
    return sorted({script for _, env, script in rules_with_scripts() if env == LIGHT_ENV})


def test_the_light_environment_runs_the_summaries():
    # the rule parser found the light rules (an empty list would leave the test below with nothing to check)
    assert {"pattern_summary", "linguistic_summary", "claims"} <= set(light_environment_scripts())


@pytest.mark.parametrize("script", light_environment_scripts())
def test_the_light_environment_scripts_never_import_torch(script):
    path = REPO / "workflow_scripts" / f"{script}.py"
    assert path.is_file()
    heavy = heavy_imports(path)
    assert not heavy, f"workflow_scripts/{script}.py runs in envs/{LIGHT_ENV}.yaml but reaches torch: {heavy}"


def test_every_package_is_a_boundary_the_test_knows():
    # a package is in a named layer or a stage's, whose modules' names say their side; the lists above name real files
    packages = {path.name for path in LIBRARY.iterdir() if (path / "__init__.py").is_file()}
    assert set(TORCH_FREE_PACKAGES) <= packages
    assert stage_packages() and not set(stage_packages()) & set(TORCH_FREE_PACKAGES)
    for path in TORCH_SIDE + TORCH_FREE_MODULES + tuple(UNNAMED_TORCH_FREE):
        assert (LIBRARY / path).is_file(), path


def summary_scripts():
    return sorted(path.stem for path in (REPO / "workflow_scripts").glob("*_summary.py"))


@pytest.mark.parametrize("script", summary_scripts())
def test_a_stage_summary_is_library_code_written_by_the_one_writer(script):
    # the stage's <stage>/summary.py shapes the tables and draws the figures; the script reads, calls and writes. The
    # stage is the rule file that runs the script (rules/<stage>.smk)
    stage = next(path.stem for path in (REPO / "rules").glob("*.smk") if f"workflow_scripts/{script}.py" in path.read_text())
    assert (LIBRARY / stage / "summary.py").is_file(), f"{script}: no bertology_core/{stage}/summary.py"
    tree = ast.parse((REPO / "workflow_scripts" / f"{script}.py").read_text())
    called = {getattr(node.func, "attr", getattr(node.func, "id", None)) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "write_outputs" in called and "summarise" in called
    assert not called & {"write_table", "save_chart", "with_caption", "head_heatmap", "note_chart"}, called
