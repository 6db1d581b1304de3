"""The attention engine: equivalence with eager, exact uniform mode, batch expansion, no leaks."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.first_token import first_token_output, reads_first_token_only
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import (ATTENTION_NORM_SCALE, HEAD_SCALE, HEAD_UNIFORM, MLP_SCALE, OUTPUT_NORM_SCALE,
                                        InterventionPlan, per_layer, site)
from bertology_core.engine.structure import UnsupportedStructure, depth_layers, structure, track_depth

# one tiny random classifier per supported family (hidden 64, 4 heads, an MLP width of 37 unlike hidden):
# config arguments beyond the shared ones
FAMILIES = {
    "bert": {},
    "roberta": {"pad_token_id": 1},
    "electra": {"embedding_size": 32},
    "xlm-roberta": {"pad_token_id": 1},
    "distilbert": {},
    # one layer's weights at every depth (num_hidden_groups=1)
    "albert": {"embedding_size": 16},
    # DeBERTa-v3's disentangled attention: relative positions in buckets, no absolute positions
    "deberta-v2": {"relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_buckets": 8,
                   "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False, "type_vocab_size": 0},
    # global and local (sliding-window, 2 tokens each side) layers alternate; rotary positions
    "modernbert": {"global_attn_every_n_layers": 2, "local_attention": 4, "pad_token_id": 0, "bos_token_id": 1,
                   "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2},
}


def tiny(family: str = "bert", layers: int = 3, **extra):
    shared = {"vocab_size": 99, "hidden_size": 64, "num_hidden_layers": layers, "num_attention_heads": 4,
              "intermediate_size": 37, "max_position_embeddings": 64, "num_labels": 3}
    if family == "distilbert":  # its config names the same things differently
        shared = {"vocab_size": 99, "dim": 64, "n_layers": layers, "n_heads": 4, "hidden_dim": 37,
                  "max_position_embeddings": 64, "num_labels": 3}
    torch.manual_seed(0)
    config = AutoConfig.for_model(family, **shared, **FAMILIES[family], **extra)
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="eager").eval()


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (3, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


ALL = pytest.mark.parametrize("family", list(FAMILIES))


def capture(model, inputs, plan=None):
    """Every layer's probabilities as the engine computes them, and the logits."""
    captured = {}
    plan = plan or InterventionPlan()
    plan.sink = lambda layer, probs, real: captured.__setitem__(layer, (probs.clone(), real))
    with torch.no_grad(), intervene(model, plan):
        logits = model(**inputs).logits
    return captured, logits


@ALL
def test_engine_without_plan_reproduces_eager(family):
    model = tiny(family)
    inputs = batch()
    with torch.no_grad():
        reference = model(**inputs, output_hidden_states=True, output_attentions=True)
    use_engine(model)
    with torch.no_grad():
        ours = model(**inputs, output_hidden_states=True)
    torch.testing.assert_close(ours.logits, reference.logits, atol=1e-5, rtol=0)
    for mine, theirs in zip(ours.hidden_states, reference.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    captured, logits = capture(model, inputs)
    torch.testing.assert_close(logits, reference.logits, atol=1e-5, rtol=0)
    assert sorted(captured) == list(range(3))
    for layer, theirs in enumerate(reference.attentions):
        probs, real = captured[layer]
        lengths = inputs["attention_mask"].sum(1).tolist()
        for example, length in enumerate(lengths):  # padding queries are not compared: models treat them differently
            torch.testing.assert_close(probs[example, :, :length], theirs[example, :, :length], atol=1e-5, rtol=0)
        assert real.tolist() == (inputs["attention_mask"] == 1).tolist()


def test_engine_reproduces_eager_on_minilm(minilm_path):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    inputs = tokenizer(["A short one.", "A much longer sentence, with padding for the other."], padding=True, return_tensors="pt")
    eager = AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    ours = use_engine(AutoModel.from_pretrained(minilm_path).eval())
    with torch.inference_mode():
        a, b = eager(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True)
    for mine, theirs in zip(b.hidden_states, a.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


@ALL
def test_uniform_mode_is_one_over_the_keys_a_head_may_attend_to(family):
    """Rows of a disabled head are 1/L over the keys its query may attend to: the real tokens, and in a local
    (sliding-window) layer only those inside the window; 0 elsewhere. The allowed keys are read off the eager
    probabilities (non-zero exactly where allowed)."""
    model = use_engine(tiny(family))
    inputs = batch()
    intact, _ = capture(model, inputs)
    disabled, _ = capture(model, inputs, InterventionPlan(edits=per_layer(HEAD_UNIFORM, {1: torch.tensor([[True, False, False, True]])})))
    lengths = inputs["attention_mask"].sum(1).tolist()
    for example, length in enumerate(lengths):
        for head in (0, 3):
            rows = disabled[1][0][example, head, :length]  # queries of real tokens
            allowed = intact[1][0][example, head, :length] > 0
            counts = allowed.sum(-1, keepdim=True)
            torch.testing.assert_close(rows, allowed / counts, atol=1e-7, rtol=0)
            assert not allowed[:, length:].any()
        assert not torch.allclose(disabled[1][0][example, 1, 0, :length], torch.full((length,), 1 / length))
    if family == "modernbert":  # layer 1 is local: a window of 2 tokens each side, narrower than the sentence
        assert model.config.layer_types[1] == "sliding_attention"
        assert (intact[1][0][0, 0, :10] > 0).sum(-1).max() == 5


def at_depth(model, depth, module, hook):
    """Register ``hook(args) -> args`` as a forward pre-hook of ``module`` acting at ``depth`` only (a module can
    run at several depths when weights are shared); returns a context manager."""
    import contextlib

    @contextlib.contextmanager
    def block():
        with track_depth(model) as tracker:
            handle = module.register_forward_pre_hook(lambda m, args: hook(args) if tracker.depth == depth else None)
            try:
                yield
            finally:
                handle.remove()

    return block()


@ALL
def test_zero_scale_equals_removing_the_heads_output(family):
    model = use_engine(tiny(family))
    inputs = batch()
    scale = torch.ones(1, 4)
    scale[0, 2] = 0.0
    with torch.no_grad(), intervene(model, InterventionPlan(edits=per_layer(HEAD_SCALE, {1: scale}))):
        masked = model(**inputs).logits
    # reference: zero the head's slice of the context before the output projection
    projection = structure(model)[1].output_projection
    head_dim = 64 // 4

    def zero_head(args):
        context = args[0].clone()
        context[..., 2 * head_dim:3 * head_dim] = 0
        return (context,)

    with torch.no_grad(), at_depth(model, 1, projection, zero_head):
        reference = model(**inputs).logits
    with torch.no_grad():
        intact = model(**inputs).logits
    torch.testing.assert_close(masked, reference, atol=1e-6, rtol=0)
    assert not torch.allclose(masked, intact, atol=1e-4)


@ALL
@pytest.mark.parametrize("reuse_prefix", [True, False])
def test_batch_expansion_equals_separate_passes(family, reuse_prefix):
    model = use_engine(tiny(family, layers=4))
    inputs = batch()
    uniform = torch.zeros(3, 4, dtype=torch.bool)
    uniform[1, 0] = True
    scale = torch.ones(3, 4)
    scale[2, 3] = 0.0
    plan = InterventionPlan(num_configs=3, edits={**per_layer(HEAD_UNIFORM, {2: uniform}), **per_layer(HEAD_SCALE, {2: scale, 3: torch.ones(3, 4)})})
    with torch.no_grad(), intervene(model, plan, reuse_prefix=reuse_prefix):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == (2 if reuse_prefix else 0)
    for config in range(3):
        single = InterventionPlan(edits={**per_layer(HEAD_UNIFORM, {2: uniform[config:config + 1]}), **per_layer(HEAD_SCALE, {2: scale[config:config + 1]})})
        with torch.no_grad(), intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)


@ALL
def test_shared_interventions_below_the_first_difference_are_applied_once(family):
    model = use_engine(tiny(family, layers=4))
    inputs = batch()
    shared = torch.ones(3, 4)
    shared[:, 1] = 0.0  # every configuration masks head 1 of layer 0
    uniform = torch.zeros(3, 4, dtype=torch.bool)
    uniform[1, 2] = True
    uniform[2, 0] = True
    plan = InterventionPlan(num_configs=3, edits={**per_layer(HEAD_SCALE, {0: shared}), **per_layer(HEAD_UNIFORM, {2: uniform})})
    with torch.no_grad(), intervene(model, plan):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == 2
    for config in range(3):
        single = InterventionPlan(edits={**per_layer(HEAD_SCALE, {0: shared[config:config + 1]}), **per_layer(HEAD_UNIFORM, {2: uniform[config:config + 1]})})
        with torch.no_grad(), intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)


@ALL
def test_first_token_output_leaves_classifier_logits_unchanged(family):
    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    uniform = torch.zeros(2, 4, dtype=torch.bool)
    uniform[1, 2] = True  # a head of the last layer, the one that is sliced
    plan = InterventionPlan(num_configs=2, edits=per_layer(HEAD_UNIFORM, {2: uniform}))
    mlp_input = structure(model)[-1].mlp_input
    widths = []
    handle = mlp_input.register_forward_hook(lambda m, args, out: widths.append(args[0].shape[1]))
    try:
        with torch.no_grad(), intervene(model, plan):
            full = model(**inputs).logits
            with first_token_output(model):
                sliced = model(**inputs).logits
    finally:
        handle.remove()
    runs = widths[len(widths) // 2:]  # the sliced pass; weights shared across depth run the module at every depth
    assert runs[-1] == 1 and all(width == 10 for width in runs[:-1])  # the last layer's MLP really ran on one position
    assert not torch.equal(full[:3], full[3:])  # the intervention in the sliced layer still acts
    torch.testing.assert_close(sliced, full, atol=1e-5, rtol=0)
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_first_token_output_leaves_a_mean_pooling_classifier_whole():
    model = use_engine(tiny("modernbert", classifier_pooling="mean"))
    assert not reads_first_token_only(model)
    inputs = batch()
    with torch.no_grad():
        full = model(**inputs).logits
        with first_token_output(model):
            same = model(**inputs).logits
    torch.testing.assert_close(same, full, atol=0, rtol=0)
    assert reads_first_token_only(tiny("modernbert", classifier_pooling="cls"))


@ALL
def test_first_token_output_gives_the_same_training_gradients(family):
    model = tiny(family, layers=2)  # eval mode: no dropout, so both passes compute the same function
    inputs = {**batch(), "labels": torch.tensor([0, 2, 1])}
    model(**inputs).loss.backward()
    full = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with first_token_output(model):
        model(**inputs).loss.backward()
    for name, p in model.named_parameters():
        if name in full:
            torch.testing.assert_close(p.grad, full[name], atol=1e-6, rtol=1e-4, msg=name)


def test_contexts_do_not_leak_and_hooks_are_removed():
    model = use_engine(tiny())
    inputs = batch()
    with torch.no_grad():
        clean = model(**inputs).logits
    plan = InterventionPlan(num_configs=2, edits=per_layer(HEAD_SCALE, {1: torch.zeros(2, 4)}))
    with pytest.raises(RuntimeError, match="boom"), intervene(model, plan):
        raise RuntimeError("boom")
    with torch.no_grad():
        after = model(**inputs).logits
    torch.testing.assert_close(after, clean, atol=0, rtol=0)
    assert all(not layer._forward_pre_hooks for layer in depth_layers(model))
    # nested contexts: the inner plan wins inside, the outer one is restored after
    outer = InterventionPlan(edits=per_layer(HEAD_SCALE, {0: torch.zeros(1, 4)}))
    with torch.no_grad(), intervene(model, outer):
        outer_logits = model(**inputs).logits
        with intervene(model, InterventionPlan()):
            torch.testing.assert_close(model(**inputs).logits, clean, atol=1e-6, rtol=0)
        torch.testing.assert_close(model(**inputs).logits, outer_logits, atol=0, rtol=0)


@ALL
def test_gate_gradient_matches_finite_difference(family):
    model = use_engine(tiny(family))
    inputs = batch()
    gate = torch.ones(1, 4, requires_grad=True)
    with intervene(model, InterventionPlan(edits=per_layer(HEAD_SCALE, {1: gate}))):
        model(**inputs).logits.sum().backward()
    epsilon = 1e-3
    for head in range(4):
        values = []
        for sign in (1, -1):
            shifted = torch.ones(1, 4, dtype=torch.float64)
            shifted[0, head] += sign * epsilon
            with torch.no_grad(), intervene(model.double(), InterventionPlan(edits=per_layer(HEAD_SCALE, {1: shifted}))):
                values.append(model(**{k: v for k, v in inputs.items()}).logits.sum().item())
            model.float()
        assert abs((values[0] - values[1]) / (2 * epsilon) - gate.grad[0, head].item()) < 1e-3


def test_plan_shapes_and_layers_are_checked():
    model = use_engine(tiny())
    with pytest.raises(ValueError, match="out of range"), intervene(model, InterventionPlan(edits=per_layer(HEAD_SCALE, {7: torch.ones(1, 4)}))):
        pass
    with pytest.raises(ValueError, match=r"blocks.0.heads.scale: values must be \[num_configs=2, num_attention_heads=4\]"), intervene(
        model, InterventionPlan(num_configs=2, edits=per_layer(HEAD_SCALE, {0: torch.ones(1, 4)}))
    ):
        pass
    with pytest.raises(ValueError, match=r"blocks.0.mlp.scale: values must be \[num_configs=2\]"), intervene(
        model, InterventionPlan(num_configs=2, edits=per_layer(MLP_SCALE, {0: torch.ones(3)}))
    ):
        pass
    with pytest.raises(ValueError, match=r"hidden_size=64\], got \(1, 63\)"), intervene(
        model, InterventionPlan(edits={site(2, OUTPUT_NORM_SCALE): torch.ones(1, 63)})
    ):
        pass
    with pytest.raises(ValueError, match="must be booleans"), intervene(
        model, InterventionPlan(edits={site(0, HEAD_UNIFORM): torch.ones(1, 4)})
    ):
        pass
    with pytest.raises(TypeError, match=r"site\(layer, point\)"), intervene(
        model, InterventionPlan(edits={(0, "heads.scale"): torch.ones(1, 4)})
    ):
        pass
    with pytest.raises(ValueError, match="unknown edit point 'heads.gate'"):
        site(0, "heads.gate")
    assert str(site(3, MLP_SCALE)) == "blocks.3.mlp.scale"
    eager = tiny()
    with pytest.raises(RuntimeError, match="use_engine"), intervene(eager, InterventionPlan()):
        pass


POST_NORM = [f for f in FAMILIES if f != "modernbert"]
NORM_POINTS = {"attention_norm": ATTENTION_NORM_SCALE, "output_norm": OUTPUT_NORM_SCALE}


def edited_copy(model, values_by_part):
    """A copy of ``model`` whose LayerNorms' weights and biases are multiplied per dimension, at every depth."""
    edited = copy.deepcopy(model)
    parts = structure(edited)
    for part, values in values_by_part.items():
        for norm in dict.fromkeys(getattr(p, part) for p in parts):  # a module shared across depth is edited once
            norm.weight.mul_(values)
            if norm.bias is not None:
                norm.bias.mul_(values)
    return edited


@pytest.mark.parametrize("family", POST_NORM)
def test_layernorm_dimension_edit_equals_editing_the_weights_of_a_copy(family):
    """Scaling a LayerNorm's output dimension is scaling its weight and bias there: three configurations in one pass
    (every depth, the attention norm, the output norm and both; with the first-token cut) against edited copies."""
    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    generator = torch.Generator().manual_seed(3)
    hidden = model.config.hidden_size
    values = {part: torch.rand(3, hidden, generator=generator) * (torch.rand(3, hidden, generator=generator) > 0.1)
              for part in NORM_POINTS}
    configurations = [{"attention_norm": values["attention_norm"][0]}, {"output_norm": values["output_norm"][1]},
                      {part: values[part][2] for part in NORM_POINTS}]
    edits = {}
    for part, point in NORM_POINTS.items():
        rows = torch.stack([c.get(part, torch.ones(hidden)) for c in configurations])
        edits.update(per_layer(point, {layer: rows for layer in range(3)}))
    with torch.no_grad(), intervene(model, InterventionPlan(3, edits)), first_token_output(model):
        together = model(**inputs).logits.reshape(3, 3, -1)
    with torch.no_grad():
        for index, configuration in enumerate(configurations):
            reference = edited_copy(model, configuration)(**inputs).logits
            torch.testing.assert_close(together[index], reference, atol=1e-6, rtol=0)
        assert not torch.allclose(together[2], model(**inputs).logits, atol=1e-3)


def test_layernorm_parts_are_found_and_a_pre_norm_encoder_is_refused():
    bert = use_engine(tiny("bert"))
    parts = structure(bert)
    assert parts[1].attention_norm is bert.bert.encoder.layer[1].attention.output.LayerNorm
    assert parts[1].output_norm is bert.bert.encoder.layer[1].output.LayerNorm
    distil = structure(use_engine(tiny("distilbert")))[0]
    assert (distil.attention_norm, distil.output_norm) == (distil.layer.sa_layer_norm, distil.layer.output_layer_norm)
    modern = use_engine(tiny("modernbert"))
    assert all(p.attention_norm is None and p.output_norm is None for p in structure(modern))
    plan = InterventionPlan(edits={site(1, OUTPUT_NORM_SCALE): torch.zeros(1, 64)})
    with pytest.raises(UnsupportedStructure, match="pre-LayerNorm"), intervene(modern, plan):
        pass


@ALL
def test_zero_mlp_scale_equals_removing_the_mlp(family):
    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    mlp_output = structure(model)[1].mlp_output
    with torch.no_grad():
        with intervene(model, InterventionPlan(edits=per_layer(MLP_SCALE, {1: torch.zeros(1)}))):
            gated = model(**inputs, output_hidden_states=True).hidden_states[-1]
        clean = model(**inputs, output_hidden_states=True).hidden_states[-1]
        # reference: the MLP's output replaced by zeros at depth 1 (for unshared weights: its weights zeroed)
        if depth_layers(model).count(depth_layers(model)[1]) == 1:
            removed = copy.deepcopy(model)
            removed_output = structure(removed)[1].mlp_output
            removed_output.weight.zero_()
            if removed_output.bias is not None:
                removed_output.bias.zero_()
            reference = removed(**inputs, output_hidden_states=True).hidden_states[-1]
        else:
            with track_depth(model) as tracker:
                handle = mlp_output.register_forward_hook(lambda m, a, out: out * 0 if tracker.depth == 1 else None)
                reference = model(**inputs, output_hidden_states=True).hidden_states[-1]
                handle.remove()
    torch.testing.assert_close(gated, reference, atol=1e-5, rtol=0)
    assert not torch.allclose(clean, reference, atol=1e-4)  # ModernBERT initialises its MLP output small
    assert not mlp_output._forward_hooks


@ALL
def test_mlp_and_head_configurations_in_one_pass_equal_separate_passes(family):
    model = use_engine(tiny(family, layers=4))
    inputs = batch()
    mlp = torch.tensor([1.0, 0.0, 0.5])
    scale = torch.ones(3, 4)
    scale[0, 1] = 0.0
    plan = InterventionPlan(num_configs=3, edits={**per_layer(MLP_SCALE, {2: mlp}), **per_layer(HEAD_SCALE, {3: scale})})
    with torch.no_grad(), intervene(model, plan):
        together = model(**inputs).logits.reshape(3, 3, -1)
    assert plan.expand_at_layer == 2
    for config in range(3):
        single = InterventionPlan(edits={**per_layer(MLP_SCALE, {2: mlp[config:config + 1]}), **per_layer(HEAD_SCALE, {3: scale[config:config + 1]})})
        with torch.no_grad(), intervene(model, single):
            separate = model(**inputs).logits
        torch.testing.assert_close(together[config], separate, atol=1e-5, rtol=0)
    # an outer plan's MLP gate does not act inside a nested plan
    with torch.no_grad(), intervene(model, InterventionPlan(edits=per_layer(MLP_SCALE, {2: torch.zeros(1)}))):
        with intervene(model, InterventionPlan()):
            inner = model(**inputs).logits
    with torch.no_grad():
        torch.testing.assert_close(inner, model(**inputs).logits, atol=1e-6, rtol=0)


@ALL
def test_per_example_gates_give_each_examples_own_gradient(family):
    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    labels = torch.tensor([0, 2, 1])
    heads = torch.ones(3, 4, requires_grad=True)
    mlp = torch.ones(3, requires_grad=True)
    plan = InterventionPlan(edits={**per_layer(HEAD_SCALE, {1: heads}), **per_layer(MLP_SCALE, {0: mlp})}, per_example=True)
    loss = torch.nn.functional.cross_entropy
    with intervene(model, plan):
        loss(model(**inputs).logits, labels, reduction="sum").backward()
    for row in range(3):
        one = {k: v[row:row + 1] for k, v in inputs.items()}
        head_gate = torch.ones(1, 4, requires_grad=True)
        mlp_gate = torch.ones(1, requires_grad=True)
        with intervene(model, InterventionPlan(edits={**per_layer(HEAD_SCALE, {1: head_gate}), **per_layer(MLP_SCALE, {0: mlp_gate})})):
            loss(model(**one).logits, labels[row:row + 1]).backward()
        torch.testing.assert_close(heads.grad[row], head_gate.grad[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(mlp.grad[row], mlp_gate.grad[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="one configuration"), intervene(
        model, InterventionPlan(num_configs=2, per_example=True)
    ):
        pass


def test_shared_weights_count_heads_by_depth():
    """ALBERT runs one layer's weights at every depth; a head is (depth, head): an intervention at depth 1 leaves
    depth 0 as it was and acts at depth 1 alone."""
    model = use_engine(tiny("albert", layers=3))
    layers = depth_layers(model)
    assert len(layers) == 3 and len(set(map(id, layers))) == 1
    inputs = batch()
    intact, _ = capture(model, inputs)
    changed, _ = capture(model, inputs, InterventionPlan(edits=per_layer(HEAD_UNIFORM, {1: torch.tensor([[False, True, False, False]])})))
    torch.testing.assert_close(changed[0][0], intact[0][0], atol=0, rtol=0)
    assert not torch.allclose(changed[1][0][:, 1], intact[1][0][:, 1])
    torch.testing.assert_close(changed[1][0][:, [0, 2, 3]], intact[1][0][:, [0, 2, 3]], atol=0, rtol=0)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_batch_expansion_with_a_head_that_reads_the_mask(pooling):
    """ModernBERT's mean pooling reads the input mask after the encoder: configurations are then repeated at the
    input (no prefix reuse) and still equal separate passes."""
    model = use_engine(tiny("modernbert", layers=3, classifier_pooling=pooling))
    inputs = batch()
    uniform = torch.zeros(2, 4, dtype=torch.bool)
    uniform[1, 0] = True
    plan = InterventionPlan(num_configs=2, edits=per_layer(HEAD_UNIFORM, {2: uniform}))
    with torch.no_grad(), intervene(model, plan):
        together = model(**inputs).logits.reshape(2, 3, -1)
    assert plan.expand_at_layer == (0 if pooling == "mean" else 2)
    for config in range(2):
        with torch.no_grad(), intervene(model, InterventionPlan(edits=per_layer(HEAD_UNIFORM, {2: uniform[config:config + 1]}))):
            torch.testing.assert_close(together[config], model(**inputs).logits, atol=1e-5, rtol=0)


def test_deberta_uniform_rows_with_a_float_or_absent_mask():
    """DeBERTa reads a 0/1 mask of any dtype as 'nonzero attends' (and builds a float one when none is given)."""
    model = use_engine(tiny("deberta-v2"))
    inputs = batch()
    plan = lambda: InterventionPlan(edits=per_layer(HEAD_UNIFORM, {1: torch.tensor([[True, False, False, False]])}))  # noqa: E731
    as_long, _ = capture(model, inputs, plan())
    as_float, _ = capture(model, {**inputs, "attention_mask": inputs["attention_mask"].float()}, plan())
    torch.testing.assert_close(as_float[1][0], as_long[1][0], atol=0, rtol=0)
    absent, _ = capture(model, {"input_ids": inputs["input_ids"][:1]}, plan())
    torch.testing.assert_close(absent[1][0][0, 0], torch.full((10, 10), 0.1), atol=1e-7, rtol=0)
    assert absent[1][1].all()


def test_a_plan_acts_on_its_own_model_only():
    model, other = use_engine(tiny("bert")), use_engine(tiny("bert", layers=2))
    inputs = batch()
    with torch.no_grad():
        clean = other(**inputs).logits
        captured = []
        plan = InterventionPlan(edits=per_layer(HEAD_SCALE, {1: torch.zeros(1, 4)}), sink=lambda layer, probs, real: captured.append(layer))
        with intervene(model, plan):
            model(**inputs)
            torch.testing.assert_close(other(**inputs).logits, clean, atol=0, rtol=0)
    assert captured == [0, 1, 2]


def test_gradient_checkpointing_is_refused():
    model = use_engine(tiny("bert"))
    model.gradient_checkpointing_enable()
    with pytest.raises(RuntimeError, match="gradient checkpointing"), intervene(model, InterventionPlan()):
        pass


def test_first_token_output_leaves_an_encoder_without_head_whole():
    from transformers import AutoModel

    model = use_engine(AutoModel.from_config(tiny("bert").config).eval())
    inputs = batch()
    with torch.no_grad():
        full = model(**inputs).last_hidden_state
        with first_token_output(model):
            torch.testing.assert_close(model(**inputs).last_hidden_state, full, atol=0, rtol=0)


@ALL
def test_a_plan_that_only_scales_heads_may_run_fused_attention_with_the_same_logits_and_gradients(family, monkeypatch):
    from bertology_core.engine import attention_function

    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    labels = torch.tensor([0, 2, 1])

    def run(fused: bool):
        monkeypatch.setattr(attention_function, "FUSED_DEVICES", frozenset({"cpu"} if fused else set()))
        calls = []
        original = torch.nn.functional.scaled_dot_product_attention
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                            lambda *a, **k: calls.append(1) or original(*a, **k))
        heads = torch.tensor([[1.0, 0.0, 0.5, 1.0]] * 3, requires_grad=True)
        plan = InterventionPlan(edits={**per_layer(HEAD_SCALE, {1: heads}), **per_layer(MLP_SCALE, {2: torch.ones(3) * 0.5})},
                                per_example=True)
        with intervene(model, plan):
            logits = model(**inputs).logits
            torch.nn.functional.cross_entropy(logits, labels).backward()
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", original)
        return logits.detach(), heads.grad, len(calls)

    eager_logits, eager_grad, eager_calls = run(False)
    fused_logits, fused_grad, fused_calls = run(True)
    assert eager_calls == 0
    # the engine's attention function serves every family but DeBERTa (its own module: always eager)
    assert fused_calls == (0 if family == "deberta-v2" else 3)
    torch.testing.assert_close(fused_logits, eager_logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fused_grad, eager_grad, atol=1e-5, rtol=1e-4)
    # uniform attention and a capture need the probabilities: those layers stay eager
    uniform = InterventionPlan(edits={**per_layer(HEAD_UNIFORM, {0: torch.tensor([[True, False, False, False]])}),
                                      **per_layer(HEAD_SCALE, {1: torch.tensor([[0.0, 1.0, 1.0, 1.0]])})})
    counted = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: counted.append(1) or original(*a, **k))
    results = {}
    for fused in (False, True):
        monkeypatch.setattr(attention_function, "FUSED_DEVICES", frozenset({"cpu"} if fused else set()))
        counted.clear()
        with torch.no_grad(), intervene(model, uniform):
            results[fused] = (model(**inputs).logits, len(counted))
        uniform.sink = lambda layer, probs, real: None
        with torch.no_grad(), intervene(model, uniform):
            model(**inputs)
        uniform.sink = None
        results[fused, "captured"] = len(counted) - results[fused][1]
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-4)
    assert results[False][1] == 0 and results[True][1] == (0 if family == "deberta-v2" else 2)
    assert results[True, "captured"] == 0


# calls that copy between host and device, or wait for the device to read a value
TRANSFERS = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.item, torch.Tensor.tolist,
             torch.Tensor.numpy, torch.Tensor.__bool__, torch.tensor, torch.as_tensor, torch.from_numpy}


class EngineTransfers(torch.overrides.TorchFunctionMode):
    """Records the calls of :data:`TRANSFERS` made from the engine's own code (bertology_core) while it is active; a
    ``.to`` that changes only the dtype (no device argument) copies nothing between devices and is not counted."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in TRANSFERS:
            caller = __import__("sys")._getframe(1)
            module = caller.f_globals.get("__name__", "")
            moves = func is not torch.Tensor.to or "device" in kwargs or any(
                isinstance(a, (torch.device, str)) or (isinstance(a, torch.Tensor)) for a in args[1:])
            if module.startswith("bertology_core") and moves:
                self.found.append(f"{module}:{caller.f_lineno} {getattr(func, '__name__', func)}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("family", ["bert", "deberta-v2", "modernbert"])
def test_no_forward_under_a_plan_copies_between_host_and_device(family):
    """Plans are built on the host (masks, sweeps' configurations): ``intervene`` moves them to the model's device
    once, and no hook inside the forward copies a value or waits for the device (on a GPU each would stall the pass
    at every hooked layer)."""
    model = use_engine(tiny(family))
    heads, hidden = model.config.num_attention_heads, model.config.hidden_size
    plan = InterventionPlan(num_configs=2, edits={
        site(0, HEAD_SCALE): torch.tensor([[1.0] * heads, [0.0] + [1.0] * (heads - 1)]),
        site(1, HEAD_UNIFORM): torch.tensor([[False] * heads, [True] + [False] * (heads - 1)]),
        site(2, MLP_SCALE): torch.tensor([1.0, 0.0]),
        **({site(1, OUTPUT_NORM_SCALE): torch.ones(2, hidden)} if family != "modernbert" else {})})
    plan.sink = lambda layer, probs, real: None
    inputs = batch()
    with torch.no_grad(), intervene(model, plan), first_token_output(model):
        model(**inputs)  # the first pass of a plan: where the values are placed and the configurations compared
        with EngineTransfers() as recorded:
            model(**inputs)
    assert recorded.found == []


def test_a_gate_on_another_device_than_the_model_is_refused_with_the_fix():
    model = use_engine(tiny("bert"))
    gate = torch.ones(1, model.config.num_attention_heads, device="meta", requires_grad=True)
    with pytest.raises(ValueError, match="create the gate on the model's device"), intervene(
            model, InterventionPlan(edits={site(0, HEAD_SCALE): gate})):
        pass
