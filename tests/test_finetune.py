import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch

from bertology_core.data import batch_order, tasks, states
from bertology_core.finetune import training
from bertology_core.inputs import batching
from bertology_core.models import loading
from conftest import GLUE_SMOKE, TINY_BERT


def test_training_batches_cover_every_example_once_per_epoch():
    lengths = np.random.default_rng(0).integers(3, 50, size=1000)
    for grouped in (False, True):
        batches = batch_order.training_batches(lengths, 32, np.random.default_rng(1), grouped)
        assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
        assert all(len(b) <= 32 for b in batches)
    grouped = batch_order.training_batches(lengths, 32, np.random.default_rng(1), True)
    plain = batch_order.training_batches(lengths, 32, np.random.default_rng(1), False)
    padding = lambda bs: sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in bs)  # noqa: E731
    assert padding(grouped) < padding(plain) / 3


def test_collate_pads_dynamically_and_masks_padding():
    data = batching.Encoded(input_ids=[[2, 5, 3], [2, 7, 8, 9, 3]], token_type_ids=[[0, 0, 0], [0, 0, 0, 1, 1]], pad_token_id=0)
    batch = data.collate([0, 1])
    assert batch["input_ids"].tolist() == [[2, 5, 3, 0, 0], [2, 7, 8, 9, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]]
    assert data.collate([0])["input_ids"].shape == (1, 3)
    # any selection, in any order, equals padding row by row
    rng = np.random.default_rng(0)
    ids = [list(rng.integers(1, 999, rng.integers(1, 40))) for _ in range(50)]
    data = batching.Encoded(input_ids=ids, token_type_ids=[[i % 2 for i in range(len(x))] for x in ids], pad_token_id=7)
    chosen = rng.permutation(50)[:17]
    batch = data.collate(chosen)
    width = max(len(ids[i]) for i in chosen)
    assert batch["input_ids"].dtype == torch.long and batch["attention_mask"].dtype == torch.long
    assert batch["input_ids"].tolist() == [ids[i] + [7] * (width - len(ids[i])) for i in chosen]
    assert batch["attention_mask"].tolist() == [[1] * len(ids[i]) + [0] * (width - len(ids[i])) for i in chosen]
    assert batch["token_type_ids"].tolist() == [[k % 2 for k in range(len(ids[i]))] + [0] * (width - len(ids[i])) for i in chosen]


def run(task_name: str, state: str, seed: int, checkpointer=None, **overrides):
    task = tasks.glue_task(task_name)
    train = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train")
    dev = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "dev")
    config = training.FinetuneConfig(**{"batch_size": 8, "epochs": 2, "learning_rate": 1e-3, "max_length": 32, **overrides})
    return training.finetune_and_evaluate(
        str(TINY_BERT), task, state, seed, train, {"dev": dev}, config, progress=False, checkpointer=checkpointer
    )


def test_same_seed_gives_identical_results_and_other_seed_differs():
    a, b, c = run("MRPC", "finetuned", 7), run("MRPC", "finetuned", 7), run("MRPC", "finetuned", 8)
    assert a.metrics["training"]["loss_curve"] == b.metrics["training"]["loss_curve"]
    assert a.predictions["dev"].equals(b.predictions["dev"])
    assert a.metrics["training"]["loss_curve"] != c.metrics["training"]["loss_curve"]


def test_training_reduces_loss_on_a_learnable_task():
    result = run("SST-2", "finetuned", 0, group_by_length=True)  # label is the word happy/sad
    curve = result.metrics["training"]["loss_curve"]
    assert result.metrics["training"]["steps"] == 12  # 48 examples / batch 8 x 2 epochs
    assert result.metrics["training"]["examples_seen"] == 96
    assert np.mean(curve[-3:]) < np.mean(curve[:3])


def test_pretrained_evaluates_without_training_and_predictions_align_with_dev():
    result = run("STS-B", "pretrained", 0)
    assert "training" not in result.metrics and result.metrics["state"] == "pretrained"
    predictions = result.predictions["dev"]
    dev = tasks.read_files(tasks.glue_task("STS-B", GLUE_SMOKE), "dev")
    assert predictions["idx"].equals(dev["idx"]) and predictions["label"].equals(dev["label"])
    assert predictions["prediction"].dtype == pl.Float64
    assert set(result.metrics["eval"]["dev"]) >= {"pearson", "spearman", "examples"}


def test_predict_is_independent_of_batch_size_and_order():
    task = tasks.glue_task("RTE")
    dev = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "dev")
    model = loading.load_classifier(TINY_BERT, task, states.PRETRAINED, 0)
    data = batching.encode(dev, loading.load_tokenizer(TINY_BERT), 32)
    np.testing.assert_allclose(training.predict(model, data, 3), training.predict(model, data, 100), atol=1e-5)
    one_by_one = np.concatenate(
        [training.predict(model, batching.Encoded([ids], [types], 0), 1) for ids, types in zip(data.input_ids, data.token_type_ids)]
    )
    np.testing.assert_allclose(one_by_one, training.predict(model, data, 100), atol=1e-5)


def test_config_from_dict_ignores_unknown_keys_and_keeps_paper_defaults():
    config = training.FinetuneConfig.from_dict({"learning_rate": 1e-4, "something_else": 1})
    assert config.learning_rate == 1e-4
    assert (config.batch_size, config.epochs, config.max_length, config.warmup_ratio) == (32, 3.0, 128, 0.1)


def test_training_without_data_is_an_error():
    task = tasks.glue_task("RTE")
    with pytest.raises(ValueError, match="needs training data"):
        training.finetune_and_evaluate(str(TINY_BERT), task, "scratch", 0, None, {}, training.FinetuneConfig())


class Crash(Exception):
    pass


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_result(tmp_path, monkeypatch):
    """Kill training right after its second checkpoint (mid-epoch), resume in a fresh model: the loss
    curve, weights and predictions equal a run that never stopped. Shuffling, dropout and AdamW
    state all have to be restored for that; group_by_length exercises the generator state."""
    from bertology_core.models import checkpoint

    # 48 examples / batch 8 = 6 steps per epoch, 3 epochs; checkpoints at steps 4 and 8 (epoch 1, batch 2)
    overrides = {"epochs": 3, "group_by_length": True}
    reference = run("SST-2", "finetuned", 5, **overrides)

    saves = []

    def crash_on_second(name):
        saves.append(name)
        if len(saves) == 2:
            raise Crash

    monkeypatch.setattr(training, "failpoint", crash_on_second)
    checkpointer = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="run-a", every_steps=4, every_seconds=None)
    with pytest.raises(Crash):
        run("SST-2", "finetuned", 5, **overrides, checkpointer=checkpointer)
    meta = (tmp_path / "ckpt" / checkpoint.META_FILE).read_text()
    assert '"step": 8, "epoch": 1, "batch_in_epoch": 2' in meta

    monkeypatch.setattr(training, "failpoint", lambda name: None)
    resumed = run("SST-2", "finetuned", 5, **overrides, checkpointer=checkpointer)
    assert resumed.metrics["training"]["resumed_at_step"] == 8
    assert resumed.metrics["training"]["loss_curve"] == reference.metrics["training"]["loss_curve"]
    assert resumed.predictions["dev"].equals(reference.predictions["dev"])
    for (name, a), (_, b) in zip(reference.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name

    # a checkpoint of other settings is ignored and deleted, never resumed
    checkpointer.save(checkpoint.TrainingState(step=1), resumed.model, *_optimizer_and_scheduler(resumed.model))
    other = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="run-b", every_steps=None, every_seconds=None)
    fresh = run("SST-2", "finetuned", 5, **overrides, checkpointer=other)
    assert fresh.metrics["training"]["resumed_at_step"] == 0
    assert fresh.metrics["training"]["loss_curve"] == reference.metrics["training"]["loss_curve"]
    assert not (tmp_path / "ckpt").exists()


def _optimizer_and_scheduler(model):
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return optimizer, get_linear_schedule_with_warmup(optimizer, 1, 10)


def test_encode_counts_the_examples_cut_to_max_length():
    from bertology_core.models import loading
    from bertology_core.inputs.batching import encode

    tokenizer = loading.load_tokenizer(TINY_BERT)
    frame = pl.DataFrame({"idx": [0, 1], "sentence1": ["the cat sat on the mat", "the cat"],
                          "sentence2": ["the dog", "the dog"], "label": [0, 1]})
    full = encode(frame, tokenizer, 64)
    assert full.truncated == 0
    lengths = [len(ids) for ids in full.input_ids]
    cut = encode(frame, tokenizer, min(lengths) + 1)
    assert cut.truncated == 1 and max(len(ids) for ids in cut.input_ids) == min(lengths) + 1


def test_a_token_table_cuts_as_the_tokenizer_does_and_a_file_written_in_chunks_is_the_same_table(tmp_path):
    # one pass without the cut, a second over the long pairs only: the ids are the tokenizer's own truncated ones
    tokenizer = loading.load_tokenizer(str(TINY_BERT))
    frame = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "train")
    first, second = tasks.sentence_texts(frame)
    full = [len(ids) for ids in tokenizer(first, second)["input_ids"]]
    max_length = int(np.median(full))
    table = batching.token_table(frame, tokenizer, max_length)
    direct = tokenizer(first, second, truncation=True, max_length=max_length)
    assert table["input_ids"].to_list() == direct["input_ids"]
    assert table["token_type_ids"].to_list() == direct["token_type_ids"]
    assert table["full_length"].to_list() == full and 0 < sum(n > max_length for n in full) < frame.height
    splits = {"train": frame, "dev": frame.head(3)}
    batching.TokenFile.write(splits, tokenizer, max_length, tmp_path / "whole.parquet", chunk_rows=10_000)
    batching.TokenFile.write(splits, tokenizer, max_length, tmp_path / "chunks.parquet", chunk_rows=4)
    assert pq.ParquetFile(tmp_path / "chunks.parquet").num_row_groups == -(-frame.height // 4) + 1
    assert pl.read_parquet(tmp_path / "chunks.parquet").equals(pl.read_parquet(tmp_path / "whole.parquet"))
    assert pl.read_parquet_metadata(tmp_path / "chunks.parquet")["max_length"] == str(max_length)
    # an empty split (first or last) keeps the file's columns; without idx, a row is counted over its whole split
    empty = frame.head(0)
    batching.TokenFile.write({"dev": empty, "train": frame.drop("idx"), "test": empty}, tokenizer, max_length,
                             tmp_path / "edges.parquet", chunk_rows=4)
    edges = pl.read_parquet(tmp_path / "edges.parquet")
    assert edges["idx"].to_list() == list(range(frame.height)) and set(edges["split"]) == {"train"}
    assert edges.drop("idx").equals(pl.read_parquet(tmp_path / "whole.parquet").filter(pl.col("split") == "train").drop("idx"))


def test_a_token_file_gives_any_rows_of_a_split_exactly_as_tokenising_them_does(tmp_path):
    tokenizer = loading.load_tokenizer(str(TINY_BERT))
    task = tasks.glue_task("MRPC")
    splits = {split: tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), split) for split in ("train", "dev")}
    path = tmp_path / "tokens.parquet"
    batching.TokenFile.write(splits, tokenizer, 16, path)  # short: some pairs are cut
    tokens = batching.TokenFile.read(path, 16)
    some = splits["dev"].sample(fraction=0.5, seed=3, shuffle=True)
    for split, frame in (("train", splits["train"]), ("dev", some)):
        direct, cached = batching.encode(frame, tokenizer, 16), tokens.encoded(split, frame)
        assert cached.input_ids == direct.input_ids and cached.token_type_ids == direct.token_type_ids
        assert cached.pad_token_id == direct.pad_token_id and cached.truncated == direct.truncated > 0
    with pytest.raises(ValueError, match="max_length 16, the job asks 32"):
        batching.TokenFile.read(path, 32)
    # a job reads only the splits it uses
    only_dev = batching.TokenFile.read(path, 16, ["dev"])
    assert set(only_dev.table["split"]) == {"dev"} and only_dev.encoded("dev", some).input_ids == tokens.encoded("dev", some).input_ids
    with pytest.raises(ValueError, match="split 'train' has no tokens"):
        only_dev.encoded("train", splits["train"])
    stale = splits["dev"].with_columns(pl.col("idx") + 10_000)
    with pytest.raises(ValueError, match="no tokens for idx"):
        tokens.encoded("dev", stale)


def test_ragged_ids_hold_each_row_exactly_from_lists_polars_and_sliced_arrow():
    rows = [[101, 7, 102], [], [101, 5, 6, 9, 102], [3]]
    from_lists = batching.Ragged(rows)
    series = pl.Series(rows, dtype=pl.List(pl.Int32))
    from_polars = batching.Ragged(series)
    sliced = batching.Ragged(series.to_arrow().slice(1, 3))  # an Arrow slice keeps its parent's offsets
    assert from_lists.to_list() == from_polars.to_list() == rows and sliced.to_list() == rows[1:]
    assert from_lists == from_polars and from_lists == rows and not from_lists == rows[:3]
    assert from_lists.lengths().tolist() == [3, 0, 5, 1] and from_lists[-1].tolist() == [3]
    assert from_lists.take([2, 0]).tolist() == [101, 5, 6, 9, 102, 101, 7, 102]
    with pytest.raises(IndexError):
        from_lists[4]
    batch = batching.Encoded(rows, [[0] * len(r) for r in rows], pad_token_id=0).collate([2, 3])
    assert batch["input_ids"].tolist() == [[101, 5, 6, 9, 102], [3, 0, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 0, 0, 0, 0]]


def test_collate_pads_to_a_multiple_for_steps_replayed_per_shape():
    data = batching.Encoded(input_ids=[[2, 5, 3], [2, 7, 8, 9, 3]], token_type_ids=None, pad_token_id=0)
    assert data.collate([0, 1], 16)["input_ids"].shape == (2, 16)
    assert data.collate([0, 1], 16)["attention_mask"].sum(1).tolist() == [3, 5]
    assert data.collate([0, 1], 5)["input_ids"].shape == (2, 5)  # already a multiple: no padding added
    assert data.collate([0, 1])["input_ids"].shape == (2, 5)


def _no_dropout_run(compile_mode: str, steps: int = 4):
    """``steps`` training steps of the tiny BERT without dropout, float32: the losses and the final weights."""
    task = tasks.glue_task("SST-2")
    train = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train").head(8 * steps)
    model = loading.load_classifier(TINY_BERT, task, states.PRETRAINED, 0)
    for module in model.modules():  # dropout off: a compiled step draws its masks from another generator
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    data = batching.encode(train, loading.load_tokenizer(TINY_BERT), 32)
    config = training.FinetuneConfig(batch_size=8, epochs=1, learning_rate=1e-3, max_length=32, group_by_length=True,
                                     compile=compile_mode)
    record = training.train(model, task, data, train["label"].to_numpy(), config, 0, progress=False)
    return record, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_compiled_training_step_gives_eager_losses_and_weights():
    """torch.compile (inductor, here on the CPU) fuses kernels and so rounds differently: the same losses and weights
    to float32 rounding over a few steps, and the record says how the steps ran."""
    torch._dynamo.reset()
    eager, eager_weights = _no_dropout_run("none")
    compiled, compiled_weights = _no_dropout_run("default")
    assert (eager["compile"], compiled["compile"]) == ("none", "default")
    np.testing.assert_allclose(compiled["loss_curve"], eager["loss_curve"], rtol=1e-4, atol=1e-5)
    assert float((compiled_weights - eager_weights).abs().max()) < 1e-4


def test_cuda_graphs_are_refused_off_a_gpu_with_the_fix():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: cuda-graphs is allowed (tools/gpu_check.py compares it with eager)")
    model = loading.load_classifier(TINY_BERT, tasks.glue_task("SST-2"), states.PRETRAINED, 0)
    with pytest.raises(ValueError, match="needs a CUDA device.*Fix: set compute.compile to none"):
        training.compiled_forward(model, "cuda-graphs", torch.device("cpu"))
    with pytest.raises(ValueError, match="expected one of"):
        training.compiled_forward(model, "fast", torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device; none here")
def test_cuda_graph_steps_give_eager_losses_on_a_gpu():
    task = tasks.glue_task("SST-2")
    train = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "train").head(32)
    losses = {}
    for mode in ("none", "cuda-graphs"):
        model = loading.load_classifier(TINY_BERT, task, states.PRETRAINED, 0).to("cuda")
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        config = training.FinetuneConfig(batch_size=8, epochs=1, learning_rate=1e-3, max_length=32, compile=mode)
        losses[mode] = training.train(model, task, batching.encode(train, loading.load_tokenizer(TINY_BERT), 32),
                                      train["label"].to_numpy(), config, 0, progress=False)["loss_curve"]
    np.testing.assert_allclose(losses["cuda-graphs"], losses["none"], rtol=1e-3, atol=1e-4)


def _fits_at_most(model, rows: int):
    """A hook making ``model`` run out of memory on a batch of more than ``rows`` examples, as a GPU would."""

    def check(module, args, kwargs):
        if kwargs["input_ids"].shape[0] > rows:
            raise torch.OutOfMemoryError(f"a batch of {kwargs['input_ids'].shape[0]} rows")

    return model.register_forward_pre_hook(check, with_kwargs=True)


def test_evaluation_halves_a_batch_the_device_has_no_memory_for(caplog):
    task = tasks.glue_task("RTE")
    dev = tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), "dev")
    model = loading.load_classifier(TINY_BERT, task, states.PRETRAINED, 0)
    data = batching.encode(dev, loading.load_tokenizer(TINY_BERT), 32)
    expected = training.predict(model, data, 3)
    handle = _fits_at_most(model, 3)
    np.testing.assert_allclose(training.predict(model, data, 16), expected, atol=1e-5)
    handle.remove()
    assert "out of memory with 16 examples a pass: 8 from now on" in caplog.text
    handle = _fits_at_most(model, 0)  # not even one example: the error goes on
    with pytest.raises(torch.OutOfMemoryError):
        training.predict(model, data, 4)
    handle.remove()
