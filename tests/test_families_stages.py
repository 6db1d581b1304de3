"""The stages' library calls on every family's fixture (tests/fixtures/tiny-*), in seconds: fine-tuning (its
first-token saving included), the disabling sweep against the naive method, head and MLP importance, s-pruning's
compaction against the gated model, and probing's word vectors. The whole workflow on every fixture is
configs/smoke_families.yaml (docs/engine.md, Encoder families)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology_core.data import tasks, states, treebank
from bertology_core.disabling import sweeps
from bertology_core.finetune import training
from bertology_core.inputs import batching
from bertology_core.models import loading
from bertology_core.pruning import compaction
from bertology_core.probing import probes
from bertology_core.pruning import importance
from bertology_core.scoring import plans as scoring
from bertology_core.engine.plan import StructureMask
from conftest import FIXTURES, GLUE_SMOKE, UD_SMOKE

FIXTURE_MODELS = ["tiny-bert", "tiny-xlm-roberta", "tiny-distilbert", "tiny-albert", "tiny-deberta-v3", "tiny-modernbert"]
MRPC = tasks.glue_task("MRPC")


@pytest.fixture(scope="module", params=FIXTURE_MODELS)
def fine_tuned(request):
    """The fixture fine-tuned on 24 smoke MRPC pairs for one epoch, and the encoded dev pairs."""
    folder = FIXTURES / request.param
    tokenizer = loading.load_tokenizer(folder)
    train = tasks.read_files(tasks.glue_task(MRPC.name, GLUE_SMOKE), "train").head(24)
    dev = tasks.read_files(tasks.glue_task(MRPC.name, GLUE_SMOKE), "dev").head(6)
    model = loading.load_classifier(folder, MRPC, states.PRETRAINED, 1)
    config = training.FinetuneConfig(batch_size=8, epochs=1, learning_rate=1e-3, max_length=32)
    record = training.train(model, MRPC, batching.encode(train, tokenizer, 32), train["label"].to_numpy(), config, 1, progress=False)
    assert record["steps"] == 3 and np.isfinite(record["final_loss_mean_last_20"])
    return request.param, model.eval(), batching.encode(dev, tokenizer, 32), dev["label"].to_numpy()


def test_disabling_sweep_equals_the_naive_method(fine_tuned):
    _, model, dev, _ = fine_tuned
    heads = sweeps.single_heads(model.config.num_hidden_layers, model.config.num_attention_heads)
    sweep = sweeps.evaluate_configurations(model, dev, heads, rows_per_pass=12).logits
    naive = sweeps.evaluate_configurations(model, dev, heads, reuse_prefix=False, examples_per_batch=2).logits
    assert sweep.shape == (len(heads), 6, 2)
    np.testing.assert_allclose(sweep, naive, atol=1e-5, rtol=0)


def test_importance_and_compaction(fine_tuned):
    name, model, dev, labels = fine_tuned
    heads, mlps = importance.gate_importance(model, MRPC, dev, labels, batch_size=3)
    assert heads.shape == (model.config.num_hidden_layers, model.config.num_attention_heads) and mlps.shape == (model.config.num_hidden_layers,)
    assert np.isfinite(heads).all() and (heads >= 0).all() and heads.sum() > 0
    # s-pruning's mask: the least important half of the heads and the least important MLP
    order = np.argsort(heads, axis=None)[: heads.size // 2]
    mask = StructureMask.for_model(model).without(heads=[tuple(np.unravel_index(i, heads.shape)) for i in order],
                                                  mlps=[int(np.argmin(mlps))])
    gated = scoring.evaluate_plan(model, dev, mask.plan(), rows_per_pass=4)
    residual = compaction.residual_mask(model, mask)
    compact = compaction.compact(model, mask)
    compacted = scoring.evaluate_plan(compact, dev, residual.plan(), rows_per_pass=4)
    print(f"{name}: compacted vs gated max logit difference {np.abs(compacted - gated).max():.1e}")
    np.testing.assert_allclose(compacted, gated, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", FIXTURE_MODELS)
def test_probing_word_vectors(name):
    folder = FIXTURES / name
    encoder = loading.load_encoder(folder)
    sentences = [forms for path in sorted(UD_SMOKE.glob("*.conllu")) for forms in treebank.read_conllu(path)["forms"].to_list()]
    aligned = probes.align_words(loading.load_tokenizer(folder), sentences, 64)
    with torch.no_grad():
        vectors, complete = probes.word_representations(encoder, aligned, "first", batch_size=2)
    words = sum(len(s) for s in sentences)
    assert vectors.shape == (encoder.config.num_hidden_layers + 1, words, encoder.config.hidden_size)
    assert complete.all() and np.isfinite(vectors).all()
