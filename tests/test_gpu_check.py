"""tools/gpu_check.py (make gpu-check): without a GPU it says so; ``--dry`` runs its steps small on the CPU and reports
every comparison with its tolerance; a failed comparison makes the exit status 1."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "gpu_check.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
# the dry run's steps that the test runs: all but torch.compile's (minutes of compiling on a small CPU) and the optional
# smoke workflow, which `python tools/gpu_check.py --dry` runs
TESTED_STEPS = ["job records", "engine against eager", "sweep against one configuration at a time",
                "mixed against float32 training", "training repeats bit for bit", "step time against the cost model",
                "out-of-memory back-off"]


def gpu_check():
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    return gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_without_a_gpu_the_check_says_so_and_exits_0(tmp_path):
    plain = subprocess.run([sys.executable, str(TOOL), "--out", str(tmp_path)], capture_output=True, text=True, env=ENV,
                           check=False)
    assert plain.returncode == 0 and "no CUDA device" in plain.stdout
    assert not (tmp_path / "report.json").exists()


def test_the_dry_run_runs_its_steps_and_reports_each_comparison_with_its_tolerance(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL), "--dry", "--out", str(tmp_path), "--steps", *TESTED_STEPS],
                            capture_output=True, text=True, env=ENV, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["passed"] and report["failed"] == [] and report["job"]["deterministic"]
    assert list(report["steps"]) == TESTED_STEPS
    assert (tmp_path / "report.md").read_text().startswith("# GPU check: cpu")
    lines = result.stdout.splitlines()
    for name, step in report["steps"].items():
        assert step["checks"], name
        for check in step["checks"]:
            assert check["result"] in ("PASS", "INFO", "SKIP") and check["why"], (name, check)
            if check["result"] == "PASS":  # a value, how it is compared, against what, and its printed line
                assert {"value", "op", "tolerance"} <= set(check), check
                assert any(line.startswith(f"PASS {check['name']}: ") and line.endswith(")") for line in lines), check
    statuses = {name: step["status"] for name, step in report["steps"].items()}
    assert statuses["engine against eager"] == statuses["training repeats bit for bit"] == "pass"
    assert statuses["step time against the cost model"] == "info"  # priced on a CPU: reported, not asserted
    checks = {c["name"]: c for step in report["steps"].values() for c in step["checks"]}
    sweep = checks["sweep vs each configuration alone, largest logit difference, float32"]
    assert sweep["op"] == "<=" and sweep["tolerance"] == 1e-4 and sweep["value"] <= 1e-4
    assert checks["tensors differing, resumed vs uninterrupted"]["value"] == 0
    assert checks["fused against eager attention"]["result"] == "SKIP"  # no fused attention on a CPU


def test_a_failed_comparison_or_a_step_that_raises_makes_the_exit_status_1(tmp_path):
    # steps of the real main(): one comparison fails, one step raises, and the step after them still runs
    script = (f"import sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); import gpu_check\n"
              "def broken(run): raise RuntimeError('no kernel')\n"
              "gpu_check.STEPS = {'always fails': lambda run: run.compare('one', 1.0, '<=', 0.5, 'made to fail'),\n"
              "                   'broken': broken, 'fine': lambda run: run.compare('two', 2, '==', 2, 'equal')}\n"
              f"raise SystemExit(gpu_check.main(['--dry', '--out', {str(tmp_path)!r}]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV, check=False)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FAIL one: 1 <= 0.5 (made to fail)" in result.stdout and "PASS two: 2 == 2 (equal)" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["passed"] and report["failed"] == ["always fails: one", "broken: broken ran"]
    assert report["steps"]["always fails"]["checks"][0] == {"name": "one", "result": "FAIL", "value": 1.0, "op": "<=",
                                                            "tolerance": 0.5, "why": "made to fail"}
    assert "RuntimeError: no kernel" in report["steps"]["broken"]["checks"][0]["value"]
    assert [step["status"] for step in report["steps"].values()] == ["fail", "fail", "pass"]


def test_each_comparison_holds_or_not_and_nan_never_holds():
    holds = gpu_check().holds
    assert holds(1e-5, "<=", 1e-4) and not holds(2e-4, "<=", 1e-4) and not holds(math.nan, "<=", 1e-4)
    assert holds(0.95, ">=", 0.9) and not holds(0.5, ">=", 0.9) and not holds(math.nan, ">=", 0.9)
    assert holds(1.0, "in", (0.67, 1.5)) and not holds(1.6, "in", (0.67, 1.5)) and not holds(math.nan, "in", (0.67, 1.5))
    assert holds("cuda", "==", "cuda") and not holds(1, "==", 0)
    with pytest.raises(ValueError, match="unknown comparison"):
        holds(1, "<", 2)
