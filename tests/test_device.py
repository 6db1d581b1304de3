"""Device choice: one helper that every model-running job calls (the GPU itself cannot be exercised here)."""

from __future__ import annotations

import ast
import os
import re

import pytest
import torch

from bertology_core.models import device
from conftest import REPO

SCRIPTS = REPO / "workflow_scripts"


def _rules() -> dict[str, str]:
    """Rule name -> its text, from every rules/*.smk file."""
    rules = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"^(?=(?:rule|checkpoint) \w+:)", path.read_text(), flags=re.M)[1:]:
            rules[re.match(r"(?:rule|checkpoint) (\w+):", block).group(1)] = block
    return rules


def _script_and_helpers(rule_text: str) -> list[ast.Module]:
    """The parsed script a rule runs, and the workflow_scripts helpers (``_probing``, ...) it imports."""
    script = SCRIPTS / re.search(r'script:\s*"\.\./workflow_scripts/(\w+\.py)"', rule_text).group(1)
    modules = [ast.parse(script.read_text())]
    for node in ast.walk(modules[0]):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if isinstance(node, ast.ImportFrom) else []
        modules += [ast.parse((SCRIPTS / f"{n}.py").read_text()) for n in names if n and (SCRIPTS / f"{n}.py").is_file()]
    return modules


def _calls(modules: list[ast.Module], name: str) -> int:
    return sum(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == name
               for module in modules for n in ast.walk(module))


def test_every_rule_that_requests_a_gpu_runs_a_script_that_asks_the_device_helper():
    gpu_rules = {name: text for name, text in _rules().items() if re.search(r"^\s+\*\*model_device\(", text, flags=re.M)}
    assert {"finetune", "evaluate_pretrained", "dump_attention", "probe_features", "syntactic_heads"} <= set(gpu_rules)
    for name, text in gpu_rules.items():
        modules = _script_and_helpers(text)
        assert _calls(modules, "model_job") >= 1, f"rule {name} requests a GPU but its script never calls device.model_job"
        # the helper is the one place: no script picks a device or sets torch's determinism on its own
        for forbidden in ("is_available", "set_num_threads", "use_deterministic_algorithms", "default_device"):
            assert _calls(modules, forbidden) == 0, f"rule {name}: its script calls {forbidden} itself"


def test_the_helper_sets_cublas_workspace_and_determinism_before_returning_the_gpu(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        chosen = device.job_device(1)
        assert chosen.type == "cuda"
        assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the CPU fallback is not what runs here")
def test_without_a_gpu_jobs_run_on_the_cpu():
    assert device.default_device() == torch.device("cpu")


def test_every_rule_that_runs_a_model_names_the_precision_policy_and_its_script_applies_it():
    model_rules = {name: text for name, text in _rules().items() if re.search(r'script:\s*"\.\./workflow_scripts/', text)
                   and _calls(_script_and_helpers(text), "model_job")}
    assert {"finetune", "dump_attention", "disabling_sweep", "head_gates", "subnetwork_finetune"} <= set(model_rules)
    for name, text in model_rules.items():
        assert 'precision=config["compute"]["precision"]' in text, f"rule {name} runs a model without compute.precision"
        # the one preamble: device.model_job resolves the policy and sets the job up in it, and nothing else does
        assert _calls(_script_and_helpers(text), "model_job") == 1, f"rule {name}: its script never applies the policy"
        assert _calls(_script_and_helpers(text), "for_job") == 0, f"rule {name}: its script applies the policy itself"


def test_a_model_job_gets_its_device_and_the_policy_resolved_there():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        chosen, resolved = device.model_job(1, "float32")
        assert chosen == device.default_device() and resolved.device == chosen.type
        assert (resolved.policy, resolved.training, resolved.measurement) == ("float32", "float32", "float32")
        with pytest.raises(ValueError, match="compute.precision = 'half'"):
            device.model_job(1, "half")
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
