"""The recipes in configs/examples/: each one's dry run plans exactly the jobs its header says (so that a recipe
cannot rot when a stage changes), and the README lists every one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO
from workflow_utils import jobs_to_run

EXAMPLES = sorted((REPO / "configs" / "examples").glob("*.yaml"))


def header(path: Path) -> tuple[tuple[Path, ...], dict[str, int]]:
    """The config files the recipe's first snakemake command layers (``--configfile A B``) and the jobs its
    ``plans:`` block lists (rule -> count)."""
    text = path.read_text()
    command = re.search(r"^#\s+snakemake .*?--configfile ((?:\S+\.yaml ?)+)", text, re.MULTILINE)
    assert command, f"{path.name}: no '#   snakemake ... --configfile ...' line"
    block = re.search(r"^# plans: (.*?)\n(?!#   )", text, re.MULTILINE | re.DOTALL)
    assert block, f"{path.name}: no '# plans:' block"
    listed = " ".join(line.lstrip("# ") for line in block.group(1).splitlines())
    plans = {rule: int(count) for rule, count in re.findall(r"(\w+) (\d+)", listed)}
    return tuple(REPO / name for name in command.group(1).split()), plans


def test_there_are_recipes_for_the_first_jobs_and_the_readme_lists_them():
    names = {path.stem for path in EXAMPLES}
    assert {"one_stage", "my_finetuned_model", "my_csv_task", "quick_small_run", "slurm_offline"} <= names
    readme = (REPO / "README.md").read_text()
    assert [name for name in names if f"configs/examples/{name}.yaml" not in readme] == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_a_recipes_dry_run_plans_the_jobs_its_header_says(path, tmp_path):
    configs, plans = header(path)
    assert configs[-1] == path
    assert jobs_to_run(tmp_path / "run", configs) == plans
