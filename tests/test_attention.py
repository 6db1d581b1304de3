"""The attention engine: equivalence with eager, exact uniform mode, batch expansion, no leaks."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BertConfig, BertForSequenceClassification, ElectraConfig, ElectraForSequenceClassification,
    RobertaConfig, RobertaForSequenceClassification,
)

from bertology_core import attention

FAMILIES = {
    "bert": (BertConfig, BertForSequenceClassification, {}),
    "roberta": (RobertaConfig, RobertaForSequenceClassification, {"pad_token_id": 1}),
    "electra": (ElectraConfig, ElectraForSequenceClassification, {"embedding_size": 32}),
}


def tiny(family: str = "bert", layers: int = 3):
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    config = config_cls(vocab_size=99, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=64, num_labels=3,
                        attn_implementation="eager", **extra)
    return model_cls(config).eval()


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (3, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_engine_without_plan_reproduces_eager(family):
    model = tiny(family)
    inputs = batch()
    reference = model(**inputs, output_hidden_states=True, output_attentions=True)
    attention.use_engine(model)
    ours = model(**inputs, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(ours.logits, reference.logits, atol=1e-5, rtol=0)
    for mine, theirs in zip(ours.hidden_states, reference.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    for mine, theirs in zip(ours.attentions, reference.attentions, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_engine_reproduces_eager_on_minilm(minilm_path):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    inputs = tokenizer(["A short one.", "A much longer sentence, with padding for the other."], padding=True, return_tensors="pt")
    eager = AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    ours = attention.use_engine(AutoModel.from_pretrained(minilm_path).eval())
    with torch.inference_mode():
        a, b = eager(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True)
    for mine, theirs in zip(b.hidden_states, a.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_uniform_mode_is_one_over_real_length_and_zero_on_padding():
    model = attention.use_engine(tiny())
    inputs = batch()
    captured = {}
    plan = attention.InterventionPlan(uniform={1: torch.tensor([[True, False, False, True]])},
                                      sink=lambda layer, probs, real: captured.__setitem__(layer, (probs, real)))
    with torch.no_grad(), attention.intervene(model, plan):
        model(**inputs)
    probs, real = captured[1]
    lengths = inputs["attention_mask"].sum(1)
    for example, length in enumerate(lengths.tolist()):
        for head in (0, 3):
            rows = probs[example, head, :length]  # queries of real tokens
            torch.testing.assert_close(rows[:, :length], torch.full((length, length), 1 / length))
            assert (rows[:, length:] == 0).all()
            torch.testing.assert_close(rows.sum(-1), torch.ones(length))
        assert not torch.allclose(probs[example, 1, 0, :length], torch.full((length,), 1 / length))
    assert real.tolist() == (inputs["attention_mask"] == 1).tolist()


def test_zero_scale_equals_removing_the_heads_output():
    model = attention.use_engine(tiny())
    inputs = batch()
    scale = torch.ones(1, 4)
    scale[0, 2] = 0.0
    with torch.no_grad(), attention.intervene(model, attention.InterventionPlan(scale={0: scale})):
        masked = model(**inputs).logits
    # reference: zero the head's slice of the context before the output projection
    layer = attention.encoder_layers(model)[0].attention.output.dense
    head_dim = 64 // 4

    def zero_head(module, args):
        context = args[0].clone()
        context[..., 2 * head_dim:3 * head_dim] = 0
        return (context,)

    handle = layer.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            reference = model(**inputs).logits
    finally:
        handle.remove()
    torch.testing.assert_close(masked, reference, atol=1e-6, rtol=0)


@pytest.mark.parametrize("reuse_prefix", [True, False])
def test_batch_expansion_equals_separate_passes(reuse_prefix):
    model = attention.use_engine(tiny(layers=4))
    inputs = batch()
    uniform = torch.zeros(3, 4, dtype=torch.bool)
    uniform[1, 0] = True
    scale = torch.ones(3, 4)
    scale[2, 3] = 0.0
    plan = attention.InterventionPlan(num_configs=3, uniform={2: uniform}, scale={2: scale, 3: torch.ones(3, 4)})
    with torch.no_grad(), attention.intervene(model, plan, reuse_prefix=reuse_prefix):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == (2 if reuse_prefix else 0)
    for config in range(3):
        single = attention.InterventionPlan(uniform={2: uniform[config:config + 1]}, scale={2: scale[config:config + 1]})
        with torch.no_grad(), attention.intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)


def test_shared_interventions_below_the_first_difference_are_applied_once():
    model = attention.use_engine(tiny(layers=4))
    inputs = batch()
    shared = torch.ones(3, 4)
    shared[:, 1] = 0.0  # every configuration masks head 1 of layer 0
    uniform = torch.zeros(3, 4, dtype=torch.bool)
    uniform[1, 2] = True
    uniform[2, 0] = True
    plan = attention.InterventionPlan(num_configs=3, scale={0: shared}, uniform={2: uniform})
    with torch.no_grad(), attention.intervene(model, plan):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == 2
    for config in range(3):
        single = attention.InterventionPlan(scale={0: shared[config:config + 1]}, uniform={2: uniform[config:config + 1]})
        with torch.no_grad(), attention.intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_first_token_output_leaves_classifier_logits_unchanged(family):
    model = attention.use_engine(tiny(family, layers=3))
    inputs = batch()
    uniform = torch.zeros(2, 4, dtype=torch.bool)
    uniform[1, 2] = True  # a head of the last layer, the one that is sliced
    plan = attention.InterventionPlan(num_configs=2, uniform={2: uniform})
    with torch.no_grad(), attention.intervene(model, plan):
        full = model(**inputs).logits
        with attention.first_token_output(model):
            sliced = model(**inputs, output_hidden_states=True)
    assert sliced.hidden_states[-1].shape[1] == 1  # the last layer really ran on one position
    assert not torch.equal(full[:3], full[3:])  # the intervention in the sliced layer still acts
    torch.testing.assert_close(sliced.logits, full, atol=1e-5, rtol=0)
    assert not attention.encoder_layers(model)[-1].attention.output._forward_pre_hooks


def test_first_token_output_gives_the_same_training_gradients():
    model = tiny("bert", layers=2)  # eval mode: no dropout, so both passes compute the same function
    inputs = {**batch(), "labels": torch.tensor([0, 2, 1])}
    model(**inputs).loss.backward()
    full = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with attention.first_token_output(model):
        model(**inputs).loss.backward()
    for name, p in model.named_parameters():
        if name in full:
            torch.testing.assert_close(p.grad, full[name], atol=1e-6, rtol=1e-4, msg=name)


def test_contexts_do_not_leak_and_hooks_are_removed():
    model = attention.use_engine(tiny())
    inputs = batch()
    with torch.no_grad():
        clean = model(**inputs).logits
    plan = attention.InterventionPlan(num_configs=2, scale={1: torch.zeros(2, 4)})
    with pytest.raises(RuntimeError, match="boom"), attention.intervene(model, plan):
        raise RuntimeError("boom")
    with torch.no_grad():
        after = model(**inputs).logits
    torch.testing.assert_close(after, clean, atol=0, rtol=0)
    assert all(not layer._forward_pre_hooks for layer in attention.encoder_layers(model))
    # nested contexts: the inner plan wins inside, the outer one is restored after
    outer = attention.InterventionPlan(scale={0: torch.zeros(1, 4)})
    with torch.no_grad(), attention.intervene(model, outer):
        outer_logits = model(**inputs).logits
        with attention.intervene(model, attention.InterventionPlan()):
            torch.testing.assert_close(model(**inputs).logits, clean, atol=1e-6, rtol=0)
        torch.testing.assert_close(model(**inputs).logits, outer_logits, atol=0, rtol=0)


def test_gate_gradient_matches_finite_difference():
    model = attention.use_engine(tiny())
    inputs = batch()
    gate = torch.ones(1, 4, requires_grad=True)
    with attention.intervene(model, attention.InterventionPlan(scale={1: gate})):
        model(**inputs).logits.sum().backward()
    epsilon = 1e-3
    for head in range(4):
        values = []
        for sign in (1, -1):
            shifted = torch.ones(1, 4, dtype=torch.float64)
            shifted[0, head] += sign * epsilon
            with torch.no_grad(), attention.intervene(model.double(), attention.InterventionPlan(scale={1: shifted})):
                values.append(model(**{k: v for k, v in inputs.items()}).logits.sum().item())
            model.float()
        assert abs((values[0] - values[1]) / (2 * epsilon) - gate.grad[0, head].item()) < 1e-3


def test_plan_shapes_and_layers_are_checked():
    model = attention.use_engine(tiny())
    with pytest.raises(ValueError, match="out of range"), attention.intervene(model, attention.InterventionPlan(scale={7: torch.ones(1, 4)})):
        pass
    with pytest.raises(ValueError, match=r"\[num_configs=2, heads=4\]"), attention.intervene(
        model, attention.InterventionPlan(num_configs=2, scale={0: torch.ones(1, 4)})
    ):
        pass
    with pytest.raises(ValueError, match=r"mlp_scale must be \[2\]"), attention.intervene(
        model, attention.InterventionPlan(num_configs=2, mlp_scale={0: torch.ones(3)})
    ):
        pass
    eager = tiny()
    with pytest.raises(RuntimeError, match="use_engine"), attention.intervene(eager, attention.InterventionPlan()):
        pass


def test_zero_mlp_scale_equals_removing_the_mlp():
    import copy

    model = attention.use_engine(tiny(layers=3))
    inputs = batch()
    removed = copy.deepcopy(model)
    with torch.no_grad():
        removed.bert.encoder.layer[1].output.dense.weight.zero_()
        removed.bert.encoder.layer[1].output.dense.bias.zero_()
        reference = removed(**inputs, output_hidden_states=True).hidden_states[-1]
        with attention.intervene(model, attention.InterventionPlan(mlp_scale={1: torch.zeros(1)})):
            gated = model(**inputs, output_hidden_states=True).hidden_states[-1]
        clean = model(**inputs, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(gated, reference, atol=1e-5, rtol=0)
    assert not torch.allclose(clean, reference, atol=1e-2)
    assert not model.bert.encoder.layer[1].output.dense._forward_hooks


def test_mlp_and_head_configurations_in_one_pass_equal_separate_passes():
    model = attention.use_engine(tiny(layers=4))
    inputs = batch()
    mlp = torch.tensor([1.0, 0.0, 0.5])
    scale = torch.ones(3, 4)
    scale[0, 1] = 0.0
    plan = attention.InterventionPlan(num_configs=3, mlp_scale={2: mlp}, scale={3: scale})
    with torch.no_grad(), attention.intervene(model, plan):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == 2
    for config in range(3):
        single = attention.InterventionPlan(mlp_scale={2: mlp[config:config + 1]}, scale={3: scale[config:config + 1]})
        with torch.no_grad(), attention.intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)
    # an outer plan's MLP gate does not act inside a nested plan
    with torch.no_grad(), attention.intervene(model, attention.InterventionPlan(mlp_scale={2: torch.zeros(1)})):
        with attention.intervene(model, attention.InterventionPlan()):
            inner = model(**inputs).logits
    with torch.no_grad():
        torch.testing.assert_close(inner, model(**inputs).logits, atol=1e-6, rtol=0)


def test_per_example_gates_give_each_examples_own_gradient():
    model = attention.use_engine(tiny(layers=3))
    inputs = batch()
    labels = torch.tensor([0, 2, 1])
    heads = torch.ones(3, 4, requires_grad=True)
    mlp = torch.ones(3, requires_grad=True)
    plan = attention.InterventionPlan(scale={1: heads}, mlp_scale={0: mlp}, per_example=True)
    loss = torch.nn.functional.cross_entropy
    with attention.intervene(model, plan):
        loss(model(**inputs).logits, labels, reduction="sum").backward()
    for row in range(3):
        one = {k: v[row:row + 1] for k, v in inputs.items()}
        head_gate = torch.ones(1, 4, requires_grad=True)
        mlp_gate = torch.ones(1, requires_grad=True)
        with attention.intervene(model, attention.InterventionPlan(scale={1: head_gate}, mlp_scale={0: mlp_gate})):
            loss(model(**one).logits, labels[row:row + 1]).backward()
        torch.testing.assert_close(heads.grad[row], head_gate.grad[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(mlp.grad[row], mlp_gate.grad[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="one configuration"), attention.intervene(
        model, attention.InterventionPlan(num_configs=2, per_example=True)
    ):
        pass
