"""Device choice: one helper that every model-running job calls (the GPU itself cannot be exercised here)."""

from __future__ import annotations

import ast
import os
import re

import numpy as np
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


def test_a_job_leaves_new_memory_unfilled_and_results_do_not_depend_on_the_fill():
    """Deterministic mode's fill of new memory with NaN is a kernel per allocation on a GPU: jobs turn it off, which
    is safe only where every tensor is written before it is read; a short training run and a sweep's scoring give the
    same numbers bit for bit with the fill on (where an unwritten read would show NaN) and off."""
    from bertology_core.data import states, tasks
    from bertology_core.disabling import sweeps
    from bertology_core.finetune import training
    from bertology_core.inputs import batching
    from bertology_core.models import loading
    from conftest import GLUE_SMOKE, TINY_BERT

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    task = tasks.glue_task("RTE")
    train = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train").head(16)
    tokenizer = loading.load_tokenizer(TINY_BERT)
    data = batching.encode(train, tokenizer, 32)

    def run() -> tuple[list[float], np.ndarray]:
        model = loading.load_classifier(TINY_BERT, task, states.PRETRAINED, 0)
        record = training.train(model, task, data, train["label"].to_numpy(),
                                training.FinetuneConfig(batch_size=8, epochs=1, max_length=32), 0, progress=False)
        configs = [c for c in sweeps.sweep_configurations(model.config.num_hidden_layers, model.config.num_attention_heads)
                   if c.layer in (None, 0)]
        return record["loss_curve"], sweeps.evaluate_configurations(model, data, configs, "uniform").logits

    try:
        device.job_device(1)
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        unfilled = run()
        torch.utils.deterministic.fill_uninitialized_memory = True
        filled = run()
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
    assert unfilled[0] == filled[0]
    np.testing.assert_array_equal(unfilled[1], filled[1])


# the calls that score a model without gradients, and the argument that sizes their passes
SCORING_CALLS = {"evaluate_plan": 3, "evaluate_configurations": "rows_per_pass", "dev_scorer": 4,
                 "find_ticket": "rows_per_pass", "finetune_and_evaluate": "eval_batch_size",
                 "finetune_subnetwork": "eval_batch_size", "evaluate_dimension_sets": "rows_per_pass"}


def test_every_scoring_pass_of_a_job_is_sized_by_the_device_rule():
    """On a GPU a small pass is bound by launching its kernels: every script that scores a model sizes its passes with
    scoring.rows_per_pass (a stage's own size on a CPU, compute.gpu_rows_per_pass on a GPU), which every model job's
    resources carry."""
    assert "gpu_rows_per_pass" in (REPO / "rules" / "common.smk").read_text().split("def model_device")[1].split("\ndef ")[0]
    checked = 0
    for script in sorted(SCRIPTS.glob("*.py")):
        module = ast.parse(script.read_text())
        sized = {target.id for node in ast.walk(module) if isinstance(node, ast.Assign)
                 and _calls([ast.Module([node], [])], "rows_per_pass") for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(module):
            name = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
            if name not in SCORING_CALLS:
                continue
            where = SCORING_CALLS[name]
            argument = next((k.value for k in node.keywords if k.arg == where), None) if isinstance(where, str) else (
                node.args[where] if len(node.args) > where else None)
            assert argument is not None, f"{script.name}:{node.lineno}: {name} without its pass size ({where})"
            by_rule = _calls([ast.Module([ast.Expr(argument)], [])], "rows_per_pass") or (
                isinstance(argument, ast.Name) and argument.id in sized)
            assert by_rule, f"{script.name}:{node.lineno}: {name}'s pass size does not come from scoring.rows_per_pass"
            checked += 1
    assert checked >= 8
