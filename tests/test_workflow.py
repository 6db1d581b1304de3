"""The smoke config end to end through snakemake, and the rerun semantics users rely on.

Each test runs snakemake in its own working directory (``--directory``), so results
never mix with a real run in the repository.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.workflow
SMOKE = REPO / "configs" / "smoke.yaml"


def snakemake(workdir: Path, *args: str, configs: tuple[Path, ...] = (SMOKE,), check: bool = True):
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--cores", "2", "--configfile", *map(str, configs), *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def jobs_to_run(workdir: Path, configs: tuple[Path, ...] = (SMOKE,)) -> dict[str, int]:
    """Rule -> job count of a dry run (empty when nothing is to be done)."""
    out = snakemake(workdir, "-n", "--quiet", "rules", configs=configs).stdout
    counts = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("smoke")
    snakemake(workdir)
    return workdir


def test_smoke_run_writes_every_output(smoke_run):
    table = smoke_run / "results" / "tables" / "tiny-bert"
    for name in ("baselines.md", "baselines.csv", "baselines.parquet", "baselines_long.parquet"):
        assert (table / name).stat().st_size > 0
    markdown = (table / "baselines.md").read_text()
    assert "| MRPC | f1 |" in markdown and "| STS-B | pearson |" in markdown
    run = smoke_run / "results" / "finetune" / "tiny-bert" / "MRPC" / "pretrained" / "seed1"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["model"]["kind"] == "local" and len(metrics["model"]["config_sha256"]) == 64
    assert metrics["hyperparameters"]["learning_rate"] == 1e-3
    assert (run / "model" / "model.safetensors").is_file() and (run / "model" / "tokenizer_config.json").is_file()
    assert not list((run / "model").glob("*.bin"))
    assert (smoke_run / "logs" / "finetune" / "tiny-bert" / "MRPC" / "pretrained" / "seed1.log").is_file()
    assert not (smoke_run / "results" / "finetune" / "tiny-bert" / "MRPC" / "untuned" / "seed1" / "model").exists()
    for task in ("MRPC", "STS-B"):
        for state in ("untuned", "pretrained_seed1"):
            summary = json.loads((smoke_run / "results" / "attention" / "tiny-bert" / task / f"{state}.json").read_text())
            assert summary["examples"] == 8 and summary["layers"] == [0, 1] and summary["heads"] == 4
    fine_tuned = json.loads((smoke_run / "results/attention/tiny-bert/MRPC/pretrained_seed1.json").read_text())
    assert fine_tuned["model_folder"].endswith("finetune/tiny-bert/MRPC/pretrained/seed1/model")


def test_second_run_has_nothing_to_do(smoke_run):
    assert jobs_to_run(smoke_run) == {}


def test_changing_one_tasks_learning_rate_reruns_exactly_its_jobs(smoke_run, tmp_path):
    override = tmp_path / "lr.yaml"
    override.write_text(yaml.safe_dump({"finetune": {"per_task": {"STS-B": {"learning_rate": 5e-4}}}}))
    configs = (SMOKE, override)
    # untuned never trains, so its learning rate is not a parameter that matters: only trained runs rerun.
    assert jobs_to_run(smoke_run, configs) == {"finetune": 2, "dump_attention": 1, "baselines": 1, "all": 1}
    dry_run = snakemake(smoke_run, "-n", configs=configs).stdout
    planned = [line.split("output:")[1] for line in dry_run.splitlines() if line.strip().startswith("output:")]
    finetune_outputs = [o for o in planned if "/finetune/" in o]
    assert len(finetune_outputs) == 2 and all("/STS-B/" in o for o in finetune_outputs)


def test_killed_job_leaves_no_complete_output_and_next_run_redoes_it(tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({"tasks": ["MRPC"], "finetune": {"inits": ["pretrained"], "hyperparameters": {"epochs": 300}}}))
    configs = (SMOKE, slow)
    run = tmp_path / "results" / "finetune" / "tiny-bert" / "MRPC" / "pretrained" / "seed1"
    log = tmp_path / "logs" / "finetune" / "tiny-bert" / "MRPC" / "pretrained" / "seed1.log"
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
               "--cores", "1", "--configfile", *map(str, configs)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not (log.is_file() and "fine-tune MRPC" in log.read_text()):
            assert process.poll() is None and time.time() < deadline, "fine-tuning never started"
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not (run / "metrics.json").exists() and not (run / "model").exists()
    assert not (run / "predictions.parquet").exists()
    assert jobs_to_run(tmp_path, configs).get("finetune") == 1
    shorter = tmp_path / "short.yaml"
    shorter.write_text(yaml.safe_dump({"tasks": ["MRPC"], "finetune": {"inits": ["pretrained"]}}))
    # a SIGKILLed snakemake leaves its lock behind; --unlock is the documented way out
    snakemake(tmp_path, "--unlock", configs=(SMOKE, shorter))
    snakemake(tmp_path, "--rerun-incomplete", configs=(SMOKE, shorter))
    assert json.loads((run / "metrics.json").read_text())["hyperparameters"]["epochs"] == 1
    assert jobs_to_run(tmp_path, (SMOKE, shorter)) == {}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"tasks": ["MRPC", "mrpc"]}, "mrpc"),
        ({"finetune": {"hyperparameters": {"learnin_rate": 1e-4}}}, "learnin_rate"),
        ({"models": [{"name": "a b", "spec": "x"}]}, "a b"),
        ({"data": {"glue_dir": "does/not/exist"}}, "does/not/exist/MRPC/train.tsv"),
    ],
)
def test_bad_config_fails_before_any_job_with_a_clear_message(tmp_path, override, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(override))
    result = snakemake(tmp_path, "-n", configs=(SMOKE, bad), check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()
