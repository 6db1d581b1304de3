"""Attention dumps: exact round trip, no padding, a layout that lets readers skip, atomic writes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bertology_core.attention import dump_tables, dumps
from bertology_core.data import tasks
from bertology_core.engine.attention_function import use_engine
from conftest import GLUE_SMOKE, TINY_BERT, tiny_mrpc_dump


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("dump") / "mrpc"
    summary, frame, tokenizer = tiny_mrpc_dump(prefix, 11)
    return prefix, summary, frame, tokenizer


def test_round_trip_matches_eager_attention_at_true_length(dumped):
    prefix, summary, frame, tokenizer = dumped
    reader = dump_tables.AttentionDump(prefix)
    eager = AutoModel.from_pretrained(TINY_BERT, attn_implementation="eager").eval()
    tokens = reader.tokens()
    assert summary["examples"] == 11 and tokens.height == 11
    assert sorted(tokens["idx"].to_list()) == sorted(frame["idx"].to_list())
    worst = 0.0
    for example, idx, token_list, types, segments, word_ids in tokens.iter_rows():
        row = frame.filter(pl.col("idx") == idx)
        encoded = tokenizer(row["sentence1"][0], row["sentence2"][0], truncation=True, max_length=32, return_tensors="pt")
        assert token_list == tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        assert types == encoded["token_type_ids"][0].tolist()
        assert word_ids[0] is None and word_ids[-1] is None and word_ids[1] == 0
        assert segments[0] is None and segments[1] == 0 and segments[-2] == 1
        assert [s for s, t in zip(segments, types) if s is not None] == [t for s, t in zip(segments, types) if s is not None]
        with torch.no_grad():
            reference = eager(**encoded, output_attentions=True).attentions
        for layer in range(2):
            for head in range(4):
                stored = reader.map(example, layer, head)
                assert stored.shape == (len(token_list), len(token_list))  # no padding stored
                worst = max(worst, float(np.abs(stored - reference[layer][0, head].numpy()).max()))
    assert worst <= 0.5 / reader.scale + 1e-7
    assert summary["values"] == sum(len(t) ** 2 for t in tokens["tokens"].to_list()) * 2 * 4


def test_row_groups_hold_one_layer_head_and_a_contiguous_example_range(dumped):
    prefix, _, _, _ = dumped
    attention_path, _ = dump_tables.dump_paths(prefix)
    metadata = pq.ParquetFile(attention_path).metadata
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    ranges = set()
    for group in range(metadata.num_row_groups):
        stats = {names[i]: metadata.row_group(group).column(i).statistics for i in range(4)}
        assert stats["layer"].min == stats["layer"].max and stats["head"].min == stats["head"].max
        ranges.add((stats["example"].min, stats["example"].max))
    assert sorted(ranges) == [(0, 3), (4, 7), (8, 10)]  # batches of 4, numbered by length
    assert metadata.num_row_groups == 3 * 2 * 4
    lengths = dump_tables.AttentionDump(prefix).tokens()["tokens"].list.len().to_list()
    assert lengths == sorted(lengths)


def test_reader_filters_lazily(dumped):
    prefix, _, _, _ = dumped
    reader = dump_tables.AttentionDump(prefix)
    one_head = list(reader.maps(layer=1, head=2))
    assert len(one_head) == 11 and {(l, h) for _, l, h, _ in one_head} == {(1, 2)}
    for _, _, _, matrix in one_head:
        np.testing.assert_allclose(matrix.sum(1), 1.0, atol=matrix.shape[0] / reader.scale)
    assert reader.scan().filter(pl.col("example") == 5).select(pl.len()).collect().item() == 8
    with pytest.raises(KeyError):
        reader.map(99, 0, 0)


def test_interrupted_dump_leaves_no_file(tmp_path):
    model = use_engine(AutoModel.from_pretrained(TINY_BERT).eval())
    tokenizer = AutoTokenizer.from_pretrained(TINY_BERT)
    frame = tasks.read_files(tasks.glue_task("RTE", GLUE_SMOKE), "dev")
    calls = {"n": 0}

    def failing_forward(module, args, kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed mid-dump")

    handle = model.register_forward_pre_hook(failing_forward, with_kwargs=True)
    with pytest.raises(RuntimeError, match="killed mid-dump"):
        dumps.write_dump(model, tokenizer, frame, tmp_path / "rte", batch_size=4)
    handle.remove()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError):
        dump_tables.AttentionDump(tmp_path / "rte")


@pytest.mark.parametrize("family", ["tiny-distilbert", "tiny-albert", "tiny-deberta-v3", "tiny-modernbert", "tiny-xlm-roberta"])
def test_every_family_dumps_its_eager_attention(family, tmp_path):
    """Each family's fixture (its own structure and tokenizer type; some without token types) dumps what its eager
    attention computes, at true length."""
    from bertology_core.models import loading
    from conftest import FIXTURES

    folder = FIXTURES / family
    model = use_engine(AutoModel.from_pretrained(folder).eval())
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = loading.load_tokenizer(folder)
    frame = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "dev").slice(0, 5)
    dumps.write_dump(model, tokenizer, frame, tmp_path / "d", max_length=32, batch_size=2)
    reader = dump_tables.AttentionDump(tmp_path / "d")
    layers = model.config.num_hidden_layers
    for example, idx, token_list, types, _, word_ids in reader.tokens().iter_rows():
        assert (types is None) == ("token_type_ids" not in tokenizer.model_input_names)
        ids = torch.tensor([tokenizer.convert_tokens_to_ids(token_list)])
        with torch.no_grad():
            types_in = {} if types is None else {"token_type_ids": torch.tensor([types])}
            reference = eager(input_ids=ids, output_attentions=True, **types_in).attentions
        for layer in range(layers):
            stored = reader.map(example, layer, 0)
            assert stored.shape == (len(token_list), len(token_list))
            assert np.abs(stored - reference[layer][0, 0].numpy()).max() <= 0.5 / reader.scale + 1e-6
