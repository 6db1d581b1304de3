"""The precision policy (bertology_core/models/precision.py): what it resolves to on each device, bfloat16 training
on this CPU with float32 weights, float32 unchanged, and checkpoints never resumed across precisions."""

import numpy as np
import pytest
import torch

from bertology_core.data import tasks
from bertology_core.finetune import training
from bertology_core.models import checkpoint, precision
from conftest import GLUE_SMOKE, TINY_BERT

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_the_policy_resolves_per_device():
    assert precision.resolve("float32", CPU).to_dict() == {"policy": "float32", "device": "cpu", "training": "float32",
                                                           "measurement": "float32"}
    assert precision.resolve("float32", CUDA, bfloat16=True).training == precision.FLOAT32
    mixed_cpu = precision.resolve("mixed", CPU, bfloat16=True)
    assert (mixed_cpu.training, mixed_cpu.measurement) == (precision.BF16_AUTOCAST, precision.FLOAT32)
    assert precision.resolve("mixed", CPU, bfloat16=False).training == precision.FLOAT32
    old_gpu = precision.resolve("mixed", CUDA, bfloat16=False)
    assert (old_gpu.training, old_gpu.measurement) == (precision.TF32, precision.TF32)
    assert precision.resolve("mixed", CUDA, bfloat16=True).measurement == precision.TF32  # never bfloat16
    with pytest.raises(ValueError, match="compute.precision"):
        precision.resolve("fp16", CPU)


def test_measuring_in_float32_turns_tf32_off():
    precision.set_matmul_precision(True)
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
    precision.measuring(precision.resolve("float32", CPU))
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cuda.matmul.allow_tf32


def _run(policy_precision, seed=3, checkpointer=None):
    task = tasks.glue_task("SST-2")
    train, dev = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train"), tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "dev")
    config = training.FinetuneConfig(batch_size=8, epochs=2, learning_rate=1e-3, max_length=32, group_by_length=True)
    return training.finetune_and_evaluate(str(TINY_BERT), task, "finetuned", seed, train, {"dev": dev}, config,
                                          progress=False, checkpointer=checkpointer, precision=policy_precision)


def test_float32_policy_is_the_loop_without_a_policy():
    plain, policy = _run(None), _run(precision.resolve("float32", CPU))
    assert plain.metrics["training"]["loss_curve"] == policy.metrics["training"]["loss_curve"]
    assert plain.predictions["dev"].equals(policy.predictions["dev"])
    assert policy.metrics["precision"]["training"] == "float32"


@pytest.mark.skipif(not precision.computes_bfloat16(CPU), reason="this CPU has no bfloat16 arithmetic (AVX512-BF16, AMX)")
def test_bfloat16_training_on_this_cpu_keeps_float32_weights_and_follows_the_float32_run():
    mixed = precision.resolve("mixed", CPU)
    assert mixed.training == precision.BF16_AUTOCAST
    with precision.training(mixed):  # inside the forward pass, products are bfloat16
        assert torch.nn.Linear(4, 4)(torch.ones(2, 4)).dtype == torch.bfloat16
    full, half = _run(precision.resolve("float32", CPU)), _run(mixed)
    assert half.metrics["precision"]["training"] == precision.BF16_AUTOCAST
    assert {p.dtype for p in half.model.parameters()} == {torch.float32}  # the master weights
    a, b = np.array(full.metrics["training"]["loss_curve"]), np.array(half.metrics["training"]["loss_curve"])
    assert not np.array_equal(a, b)  # the policy acted
    np.testing.assert_allclose(b, a, rtol=0.05, atol=0.02)  # and the same training, within bfloat16's precision


class Crash(Exception):
    pass


def test_a_checkpoint_is_never_resumed_in_another_precision(tmp_path, monkeypatch):
    def crash(name):
        raise Crash

    monkeypatch.setattr(training, "failpoint", crash)
    checkpointer = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="run", every_steps=4, every_seconds=None)
    with pytest.raises(Crash):  # a checkpoint at step 4, written under the mixed policy
        _run(precision.resolve("mixed", CPU), checkpointer=checkpointer)
    assert (tmp_path / "ckpt" / checkpoint.META_FILE).is_file()
    monkeypatch.setattr(training, "failpoint", lambda name: None)
    resumed = _run(precision.resolve("float32", CPU), checkpointer=checkpointer)
    assert resumed.metrics["training"]["resumed_at_step"] == 0  # the mixed run's checkpoint is not resumed
    assert resumed.metrics["training"]["loss_curve"] == _run(precision.resolve("float32", CPU)).metrics["training"]["loss_curve"]


def test_models_load_in_float32_whatever_the_file_holds(tmp_path):
    from bertology_core.models import loading
    half = loading.load_classifier(str(TINY_BERT), tasks.glue_task("MRPC"), "pretrained", 0).to(torch.bfloat16)
    half.save_pretrained(tmp_path / "half")
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(str(TINY_BERT)).save_pretrained(tmp_path / "half")
    loaded = loading.load_classifier(str(tmp_path / "half"), tasks.glue_task("MRPC"), loading.SAVED, 0)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
