"""Helpers for tests that run the workflow: snakemake in a scratch directory, and result comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import torch
from safetensors.torch import load_file

from conftest import REPO

SMOKE = REPO / "configs" / "smoke.yaml"

# Files that legitimately differ between two runs of the same config: timings and the disk report.
VOLATILE_DIRS = {"benchmarks", "checkpoints"}
# compact.*: measured speed-ups; the report page shows them; the screenshot is the browser test's
VOLATILE_FILES = {"disk_usage.md", "compact.parquet", "compact.csv", "compact.md", "index.html", "screenshot.png"}
VOLATILE_KEYS = {"device", "resumed_at_step", "speedup"}


def snakemake(
    workdir: Path, *args: str, configs: tuple[Path, ...] = (SMOKE,), check: bool = True, env: dict | None = None,
    cores: int = 2, snakefile: Path = REPO / "Snakefile",
) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
        # targets and options before --configfile, which would take a target for one more config file
        "--cores", str(cores), *args, "--configfile", *map(str, configs),
    ]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    # own session: a failpoint's SIGKILL of its process group takes snakemake down, never pytest
    result = subprocess.run(command, capture_output=True, text=True, env=environment, start_new_session=True)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def jobs_to_run(
    workdir: Path, configs: tuple[Path, ...] = (SMOKE,), *args: str, snakefile: Path = REPO / "Snakefile"
) -> dict[str, int]:
    """Rule -> job count of a dry run (empty when nothing is to be done); ``args`` go to snakemake."""
    out = snakemake(workdir, "-n", "--quiet", "rules", *args, configs=configs, snakefile=snakefile).stdout
    counts = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            counts[parts[0]] = int(parts[1])
    return counts


def result_files(workdir: Path) -> dict[str, Path]:
    """Relative path -> file, for every result file that should be identical across equal runs."""
    results = workdir / "results"
    files = {}
    for path in sorted(results.rglob("*")):
        relative = path.relative_to(results)
        if (path.is_file() and relative.parts[0] not in VOLATILE_DIRS and path.name not in VOLATILE_FILES
                and not path.name.startswith("screenshot")):  # the browser test's screenshots of the page
            files[str(relative)] = path
    return files


def normalised_json(value, workdir: str):
    if isinstance(value, dict):
        return {
            k: normalised_json(v, workdir)
            for k, v in value.items()
            if k not in VOLATILE_KEYS and not k.endswith("_seconds") and k != "seconds"
        }
    if isinstance(value, list):
        return [normalised_json(v, workdir) for v in value]
    if isinstance(value, str):
        return value.replace(workdir, "<workdir>")
    return value


def assert_same_results(a: Path, b: Path, *, partial: bool = False) -> int:
    """Every result of run ``a`` equals run ``b``'s: Parquet tables, model weights and JSON records
    (timings and the run's own directory aside). ``partial``: run ``b`` stopped early (``--until``),
    so it may hold fewer files, but each must equal ``a``'s. Returns the number of files compared."""
    files_a, files_b = result_files(a), result_files(b)
    if partial:
        assert files_b.keys() <= files_a.keys(), set(files_b) - set(files_a)
    else:
        assert files_a.keys() == files_b.keys(), set(files_a) ^ set(files_b)
    for relative, path_b in files_b.items():
        path_a = files_a[relative]
        if path_a.suffix == ".parquet":
            assert pl.read_parquet(path_a).equals(pl.read_parquet(path_b)), relative
        elif path_a.suffix == ".safetensors":
            tensors_a, tensors_b = load_file(str(path_a)), load_file(str(path_b))
            assert tensors_a.keys() == tensors_b.keys(), relative
            assert all(torch.equal(tensors_a[k], tensors_b[k]) for k in tensors_a), relative
        elif path_a.suffix == ".json":
            data_a = normalised_json(json.loads(path_a.read_text()), str(a.resolve()))
            data_b = normalised_json(json.loads(path_b.read_text()), str(b.resolve()))
            assert data_a == data_b, relative
        else:
            assert path_a.read_bytes() == path_b.read_bytes(), relative
    return len(files_b)
