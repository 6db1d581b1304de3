"""Head importance and pruning: gates equal removal, importance equals finite differences, stopping rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology_core.disabling.stats import split_halves
from bertology_core.engine.attention_function import use_engine
from bertology_core.engine.first_token import first_token_output
from bertology_core.engine.intervention import intervene
from bertology_core.engine.plan import HEAD_SCALE, MLP_SCALE, InterventionPlan, per_layer
from bertology_core.engine.structure import depth_layers
from bertology_core.pruning import compaction
from bertology_core.pruning import importance, lottery, stats
from bertology_core.scoring import plans as scoring
from bertology_core.data.tasks import glue_task as get_task
from bertology_core.engine.plan import StructureMask
from test_attention import FAMILIES, batch, tiny
from test_disabling import encoded, sharp_tiny


def logits(model, data, plan=None):
    batch = data.collate(np.arange(len(data)))
    with torch.no_grad(), intervene(model, plan or InterventionPlan()):
        return model(**batch).logits


def test_compacted_model_equals_gating_and_survives_a_round_trip(tmp_path):
    model = use_engine(sharp_tiny(layers=3))
    data = encoded(5)
    mask = StructureMask.for_model(model).without(
        heads=[(0, 1), (0, 3), (2, 0), *[(1, h) for h in range(4)]], mlps=[2]
    )
    gated = logits(model, data, mask.plan())
    assert not torch.allclose(gated, logits(model, data), atol=1e-3)  # the mask matters
    before = compaction.parameter_count(model)
    compact = compaction.compact(model, mask)
    assert compaction.parameter_count(compact) < before
    assert compact.bert.encoder.layer[0].attention.self.query.out_features == 2 * 16
    torch.testing.assert_close(logits(compact, data), gated, atol=1e-5, rtol=0)
    compaction.save_compact(compact, mask, tmp_path / "compact")
    loaded, loaded_mask = compaction.load_compact(tmp_path / "compact")
    assert np.array_equal(loaded_mask.heads, mask.heads) and np.array_equal(loaded_mask.mlps, mask.mlps)
    torch.testing.assert_close(logits(use_engine(loaded), data), gated, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_compaction_predicts_as_the_gated_model_in_every_family(family, tmp_path):
    """Heads cut in two layers (one of them entirely) and one MLP: the compacted model computes the gated one. With
    weights shared across depth (ALBERT) the depths disagree, so nothing can be cut there and the residual mask
    gates it instead."""
    model = use_engine(tiny(family, layers=3))
    inputs = batch()
    mask = StructureMask.for_model(model).without(heads=[(0, 1), (0, 3), *[(1, h) for h in range(4)]], mlps=[2])
    with torch.no_grad(), intervene(model, mask.plan()):
        gated = model(**inputs).logits
    with torch.no_grad():
        assert not torch.allclose(gated, model(**inputs).logits, atol=1e-4)  # the mask matters
    residual = compaction.residual_mask(model, mask)
    before = compaction.parameter_count(model)
    share = compaction.kept_parameter_share(model, mask)
    compact = compaction.compact(model, mask)
    shared = len(set(map(id, depth_layers(model)))) < model.config.num_hidden_layers
    plan = None if residual.heads.all() and residual.mlps.all() else residual.plan()
    assert (plan is not None) == shared
    with torch.no_grad(), intervene(compact, plan or InterventionPlan()):
        compacted = compact(**inputs).logits
    print(f"{family}: max |compacted - gated| logit = {(compacted - gated).abs().max().item():.2e}, "
          f"parameters {before} -> {compaction.parameter_count(compact)}")
    torch.testing.assert_close(compacted, gated, atol=1e-5, rtol=0)
    if shared:  # nothing cut, but the mask's units are counted by depth
        assert compaction.parameter_count(compact) == before and 0.3 < share < 1
    with torch.no_grad(), intervene(compact, plan or InterventionPlan()), first_token_output(compact):
        torch.testing.assert_close(compact(**inputs).logits, gated, atol=1e-5, rtol=0)
    if not shared:
        with pytest.raises(ValueError, match="already compacted"):
            compaction.compact(compact, mask)
        assert compaction.parameter_count(compact) < before
        layers = compaction.parameter_count(torch.nn.ModuleList(depth_layers(model)))
        layers_before = layers + before - compaction.parameter_count(compact)  # the cut parameters are all in the layers
        assert share == pytest.approx(layers / layers_before, abs=1e-12)  # per-depth count = what compaction leaves
        compaction.save_compact(compact, mask, tmp_path / "compact")
        loaded, _ = compaction.load_compact(tmp_path / "compact")
        with torch.no_grad():
            torch.testing.assert_close(use_engine(loaded)(**inputs).logits, gated, atol=1e-5, rtol=0)


def test_gate_importance_matches_finite_differences():
    task = get_task("MRPC")
    model = use_engine(sharp_tiny(layers=2)).double()
    model.config.num_labels = 3  # the tiny model has 3 outputs; labels below stay in range
    data = encoded(4, seed=5)
    labels = np.array([0, 1, 2, 1])
    mask = StructureMask.for_model(model).without(heads=[(1, 2)])
    heads, mlps = importance.gate_importance(model, task, data, labels, mask, batch_size=3, granularity="example")

    def loss(example: int, layer: int, head: int | None, value: float) -> float:
        head_values = torch.from_numpy(mask.heads.astype(np.float64))
        mlp_values = torch.ones(2, dtype=torch.float64)
        if head is None:
            mlp_values[layer] = value
        else:
            head_values[layer, head] = value
        plan = InterventionPlan(edits={**per_layer(HEAD_SCALE, {l: head_values[l][None] for l in range(2)}), **per_layer(MLP_SCALE, {l: mlp_values[l:l + 1] for l in range(2)})})
        batch = data.collate([example])
        with torch.no_grad(), intervene(model, plan):
            out = model(**batch, labels=torch.tensor([int(labels[example])]))
        return float(out.loss)

    epsilon = 1e-4
    for layer, head in [(0, 0), (0, 3), (1, 1), (1, 2), (0, None), (1, None)]:
        centre = 1.0 if head is None else float(mask.heads[layer, head])
        expected = np.mean([
            abs(loss(x, layer, head, centre + epsilon) - loss(x, layer, head, centre - epsilon)) / (2 * epsilon)
            for x in range(len(data))
        ])
        got = mlps[layer] if head is None else heads[layer, head]
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-9)
    assert (heads > 0).all() and (mlps > 0).all()


def _gated_eager_reference(model, data, labels, batch_size, gate_context: bool):
    """Batches in the data's order through the plain eager model (no engine), the batch-*mean* loss backpropagated
    as the reference codes do, through hooks on BERT's modules: each layer's context vectors before the output
    projection (``attention.output.dense``'s input, ``[batch, position, heads * head_dim]``) and MLP outputs
    (``output.dense``'s). With ``gate_context`` one gate per head (and per MLP) shared by the batch multiplies them
    (Prasanna et al.'s head mask). Yields per batch ``(contexts, mlp_outputs, gates, loss, attention_mask)``."""
    layers = model.bert.encoder.layer
    heads = model.config.num_attention_heads
    for start in range(0, len(data), batch_size):
        rows = np.arange(start, min(start + batch_size, len(data)))
        batch = data.collate(rows)
        contexts, outputs = {}, {}
        head_gates = [torch.ones(heads, dtype=torch.float64, requires_grad=True) for _ in layers]
        mlp_gates = [torch.ones(1, dtype=torch.float64, requires_grad=True) for _ in layers]

        def keep_context(depth):
            def hook(module, args):
                context = args[0]
                if gate_context:
                    width = context.shape[-1] // heads
                    context = (context.unflatten(-1, (heads, width)) * head_gates[depth][:, None]).flatten(-2)
                contexts[depth] = context
                return (context,)
            return hook

        def keep_output(depth):
            def hook(module, args, output):
                if gate_context:
                    output = output * mlp_gates[depth]
                outputs[depth] = output
                return output
            return hook

        handles = [layer.attention.output.dense.register_forward_pre_hook(keep_context(d))
                   for d, layer in enumerate(layers)]
        handles += [layer.output.dense.register_forward_hook(keep_output(d)) for d, layer in enumerate(layers)]
        try:
            loss = model(**batch, labels=torch.tensor(labels[rows])).loss  # the batch mean
        finally:
            for handle in handles:
                handle.remove()
        yield contexts, outputs, (head_gates, mlp_gates), loss, batch["attention_mask"]


def _importance_model_and_data():
    model = sharp_tiny(layers=3).double()  # plain eager attention
    model.config.num_labels = 3
    data = encoded(6, seed=11)  # lengths differ: every batch is padded
    labels = np.array([0, 1, 2, 1, 0, 2])
    assert len(set(data.lengths().tolist())) > 2
    return model, data, labels


def test_token_importance_is_michel_et_al_codes_context_dot_product():
    """Michel et al.'s calculate_head_importance by hand: per batch the gradient of the batch-mean loss with respect to
    each head's context vectors, |dot(grad_ctx, ctx)| per position summed over positions and examples, layers below
    the last divided by the real tokens and the last by the examples (only [CLS] has a gradient there). MLPs alike on
    the MLP output. gate_importance differentiates the summed loss: with full batches, the batch size times that."""
    model, data, labels = _importance_model_and_data()
    task, batch_size = get_task("MRPC"), 3
    num_layers, num_heads = 3, model.config.num_attention_heads
    heads_ref, mlps_ref = np.zeros((num_layers, num_heads)), np.zeros(num_layers)
    tokens, padding_seen = 0, False
    for contexts, outputs, _, loss, input_mask in _gated_eager_reference(model, data, labels, batch_size, False):
        depths = range(num_layers)
        grads = torch.autograd.grad(loss, [contexts[d] for d in depths] + [outputs[d] for d in depths])
        for depth in depths:
            ctx = contexts[depth].detach().unflatten(-1, (num_heads, -1))
            grad = grads[depth].unflatten(-1, (num_heads, -1))
            dot = torch.einsum("blhi,blhi->bhl", grad, ctx)
            heads_ref[depth] += dot.abs().sum(-1).sum(0).numpy()
            mlp_dot = torch.einsum("bli,bli->bl", grads[num_layers + depth], outputs[depth].detach())
            mlps_ref[depth] += mlp_dot.abs().sum().item()
            padding = input_mask == 0
            if padding.any():  # padding positions get no gradient at all: only the token count must leave them out
                padding_seen = True
                assert dot.abs().permute(0, 2, 1)[padding].max() < 1e-12
        tokens += int(input_mask.sum())
    assert padding_seen and tokens == int(data.lengths().sum()) < 6 * max(data.lengths())
    heads_ref[:-1] /= tokens
    heads_ref[-1] /= len(data)
    mlps_ref[:-1] /= tokens
    mlps_ref[-1] /= len(data)

    heads, mlps = importance.gate_importance(model, task, data, labels, batch_size=batch_size, granularity="token")
    np.testing.assert_allclose(heads, batch_size * heads_ref, rtol=1e-5, atol=0)
    np.testing.assert_allclose(mlps, batch_size * mlps_ref, rtol=1e-5, atol=0)
    assert (heads > 0).all() and (mlps > 0).all()
    # the default granularity is token; with the summed loss neither the batch size nor the batches' make-up (sorted
    # by length here) matters
    default, _ = importance.gate_importance(model, task, data, labels, batch_size=4)
    np.testing.assert_allclose(default, heads, rtol=1e-9)
    # a removed head or MLP has no context, hence no token importance (its gate's gradient would not be zero)
    mask = StructureMask.for_model(model).without(heads=[(1, 2)], mlps=[0])
    masked_heads, masked_mlps = importance.gate_importance(model, task, data, labels, mask, batch_size=3)
    assert masked_heads[1, 2] == 0 and masked_mlps[0] == 0 and (np.delete(masked_heads.ravel(), 6) > 0).all()


@pytest.mark.parametrize("batch_size", [3, 4])
def test_batch_importance_is_prasanna_et_al_codes_shared_gate(batch_size):
    """Prasanna et al.'s compute_heads_mlps_importance by hand: one gate per head (and MLP) shared by a batch, on the
    context vectors (the same as on the probabilities), batches in the data's order, |gradient of the batch-mean
    loss| summed over batches (the gradients zeroed between batches, which their code forgets) and divided by the
    real tokens. gate_importance gives the configured batch size times that, a constant: with 6 examples in batches
    of 4 the last batch (2 examples) weighs as in their code, not as half a batch."""
    model, data, labels = _importance_model_and_data()
    task = get_task("MRPC")
    heads_ref, mlps_ref = np.zeros((3, model.config.num_attention_heads)), np.zeros(3)
    for _, _, (head_gates, mlp_gates), loss, _ in _gated_eager_reference(model, data, labels, batch_size, True):
        grads = torch.autograd.grad(loss, [*head_gates, *mlp_gates])
        heads_ref += torch.stack([g.abs() for g in grads[:3]]).numpy()
        mlps_ref += torch.cat([g.abs() for g in grads[3:]]).numpy()
    tokens = int(data.lengths().sum())
    heads, mlps = importance.gate_importance(model, task, data, labels, batch_size=batch_size, granularity="batch")
    np.testing.assert_allclose(heads, batch_size * heads_ref / tokens, rtol=1e-5, atol=0)
    np.testing.assert_allclose(mlps, batch_size * mlps_ref / tokens, rtol=1e-5, atol=0)
    if batch_size != 3:
        return
    # the batches' make-up matters: one batch of all six examples gives another importance
    whole, _ = importance.gate_importance(model, task, data, labels, batch_size=6, granularity="batch")
    assert not np.allclose(whole, 2 * heads, rtol=1e-3)
    with pytest.raises(ValueError, match="granularity"):
        importance.gate_importance(model, task, data, labels, granularity="head")


def test_michel_curve_and_lottery_tickets_rank_by_their_own_authors_importance():
    """Michel et al.'s curve (head_importance) at pruning.importance_granularity, token; s-pruning's tickets
    (lottery_pruning) at pruning.ticket_importance_granularity, batch (Prasanna et al.'s), with the batch size that
    makes its batches; set equal, the two jobs get the same settings."""
    from test_jobs import SMOKE, plan_of

    pruning = plan_of(SMOKE).pruning
    michel, ticket = pruning.params("michel"), pruning.params("ticket")
    assert michel["importance_granularity"] == "token" and michel["importance_batch_size"] is None
    assert ticket["importance_granularity"] == "batch" and ticket["importance_batch_size"] == pruning.settings()["batch_size"]
    assert list(michel) == list(ticket) and {k: v for k, v in michel.items() if "granularity" not in k and "batch" not in k} == {
        k: v for k, v in ticket.items() if "granularity" not in k and "batch" not in k}
    same = plan_of(SMOKE, {"pruning": {"ticket_importance_granularity": "token"}}).pruning
    assert same.params("ticket") == same.params("michel") == michel


def test_the_granularities_rank_heads_differently():
    """On the same tiny model and examples, token, example and batch importance are not rescalings of one another
    (not even layer by layer, which the layer normalisation would hide), and they order the heads differently."""
    model, data, labels = _importance_model_and_data()
    task = get_task("MRPC")
    scores = {g: importance.gate_importance(model, task, data, labels, batch_size=3, granularity=g)[0]
              for g in importance.GRANULARITIES}
    normalized = {g: importance.normalize_by_layer(s) for g, s in scores.items()}
    orders = {g: tuple(np.argsort(n, axis=None, kind="stable")) for g, n in normalized.items()}
    print({g: np.round(n, 3).tolist() for g, n in normalized.items()})
    for first, second in [("token", "example"), ("token", "batch"), ("example", "batch")]:
        assert np.abs(normalized[first] - normalized[second]).max() > 0.005, (first, second)
        assert orders[first] != orders[second], (first, second)


@pytest.mark.parametrize("family", [*FAMILIES, "modernbert-mean"])
def test_token_importance_in_every_family(family):
    """What ties token to example importance in any encoder, through the engine's sink (DeBERTa's own attention
    module included) and the MLP output hooks (ALBERT's one module at every depth included): per example and layer
    the sum over positions of |gradient| is at least the |gradient| of the example's gate (their sum); in the last
    layer of a first-token classifier only the first position has a gradient, so there the two are equal (both divided
    by the examples). A mean-pooling head (ModernBERT's option) has every position's gradient in the last layer too,
    divided by the tokens."""
    name, extra = ("modernbert", {"classifier_pooling": "mean"}) if family == "modernbert-mean" else (family, {})
    model = use_engine(tiny(name, layers=3, **extra)).double()
    data, labels = encoded(5, seed=2), np.array([0, 2, 1, 1, 0])
    task = get_task("MRPC")
    token = importance.gate_importance(model, task, data, labels, batch_size=2, granularity="token")
    example = importance.gate_importance(model, task, data, labels, batch_size=2, granularity="example")
    examples, tokens = len(data), int(data.lengths().sum())
    ratios = [got * tokens / (per_example * examples) for got, per_example in zip(token, example)]  # heads, MLPs
    for ratio in ratios:
        assert np.isfinite(ratio).all() and (ratio >= 1 - 1e-12).all()  # sum of |.| >= |sum|, in every layer
    if family != "modernbert-mean":
        for got, per_example in zip(token, example):  # last layer: the first position alone, divided by the examples
            np.testing.assert_allclose(got[-1], per_example[-1], rtol=1e-12)
    else:  # every position of the last layer has a gradient (its MLP runs on all), and they are divided by the tokens
        # (by the examples, the ratio would be at least tokens / examples, here about 8)
        assert ratios[1][-1] > 1.01 and ratios[0][-1].min() < 1 + 1e-9


def test_normalize_by_layer_and_least_important():
    scores = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(importance.normalize_by_layer(scores), [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]])
    keep = np.array([[True, True, False], [True, True, True]])
    # the removed (0, 2) is skipped; ties at 0 go to the lowest (layer, head)
    assert importance.least_important(scores, keep, 3) == [(1, 0), (1, 1), (1, 2)]
    assert importance.least_important(np.array([0.5, 0.1, 0.1]), np.array([True, False, True]), 1) == [(2,)]


def test_iterative_head_pruning_masks_in_importance_order_and_measures_the_prunable_share():
    scores = np.arange(8, dtype=float).reshape(2, 4)  # head (0, 0) least important
    seen: list[StructureMask] = []

    def evaluate(mask: StructureMask) -> float:
        seen.append(mask)
        return {8: 0.80, 6: 0.795, 4: 0.79, 2: 0.70, 0: 0.5}[mask.heads_kept]

    steps = importance.iterative_head_pruning(evaluate, lambda mask: scores, 2, 4, step_share=0.25)
    assert [s.heads_pruned for s in steps] == [0, 2, 4, 6, 8]
    assert not steps[1].mask.heads[0, :2].any() and steps[1].mask.heads[0, 2:].all()
    # 0.795 is within 1% of 0.80, 0.79 is not (0.792 is the bound)
    shares, scores = [s.share_pruned for s in steps], [s.score for s in steps]
    assert stats.prunable_share(shares, scores, tolerance=0.01) == pytest.approx(0.25)
    assert stats.prunable_share(shares, scores, tolerance=0.02) == pytest.approx(0.5)


def test_prune_while_above_stops_at_the_last_subnetwork_keeping_90_percent():
    scores = {0: 0.80, 1: 0.78, 2: 0.73, 3: 0.72, 4: 0.719, 5: 0.79}

    def run(limit: int):
        return lottery.prune_while_above(
            0, lambda s: s + 1 if s < limit else None, lambda s: scores[s], lambda s: 1 - s / 10, keep=0.9
        )

    chosen, history = run(5)
    assert chosen == 3  # 0.72 = 0.9 x 0.80 still counts; 0.719 does not
    assert [it.state for it in history] == [0, 1, 2, 3, 4]  # the failing iteration is recorded, then it stops
    chosen, history = run(2)  # nothing left to prune after state 2
    assert chosen == 2 and len(history) == 3
    # a floor (the best constant prediction's score) stops where keep x full alone would go on
    chosen, history = lottery.prune_while_above(
        0, lambda s: s + 1 if s < 5 else None, lambda s: scores[s], lambda s: 1 - s / 10, keep=0.9, floor=0.73
    )
    assert chosen == 1 and len(history) == 3  # 0.73 is not above the floor


def test_best_constant_score_is_the_majority_class_for_accuracy():
    labels = np.array([1, 1, 1, 0])
    assert lottery.best_constant_score(get_task("RTE"), labels) == 0.75
    assert lottery.best_constant_score(get_task("STS-B"), labels.astype(float)) is None


def test_magnitude_pruning_leaves_the_masks_and_outputs_of_torchs_global_unstructured_pruning():
    import copy

    from torch.nn.utils import prune

    model = sharp_tiny(layers=2)
    reference = copy.deepcopy(model)
    data = encoded(3).collate([0, 1, 2])
    for _ in range(3):  # the second and third steps prune a share of what is left
        masks = lottery.magnitude_prune_step(model, 0.2)
        prune.global_unstructured([(module, "weight") for _, module in lottery.encoder_weights(reference)],
                                  pruning_method=prune.L1Unstructured, amount=0.2)
        expected = lottery.current_weight_masks(reference)
        assert all(torch.equal(masks[name], expected[name]) for name in expected)
        assert torch.equal(model(**data).logits, reference(**data).logits)
    # amounts read as torch reads them: a share (any float type) of the remaining weights, or a count
    before = lottery.kept_weight_share(lottery.current_weight_masks(model))
    assert lottery.kept_weight_share(lottery.magnitude_prune_step(model, np.float32(0.5))) == pytest.approx(before / 2, abs=1e-3)
    kept = sum(int(m.sum()) for m in lottery.current_weight_masks(model).values())
    masks = lottery.magnitude_prune_step(model, 10)
    assert sum(int(m.sum()) for m in masks.values()) == kept - 10
    for bad in (1.5, -0.1, 10**9):
        with pytest.raises(ValueError):
            lottery.magnitude_prune_step(model, bad)


def test_magnitude_pruning_removes_the_smallest_tenth_globally_and_masks_survive_training():
    model = sharp_tiny(layers=2)
    weights = torch.cat([m.weight.detach().abs().reshape(-1) for _, m in lottery.encoder_weights(model)])
    masks = lottery.magnitude_prune_step(model, 0.1)
    assert lottery.kept_weight_share(masks) == pytest.approx(0.9, abs=1e-3)
    kept = torch.cat([masks[n].reshape(-1) for n, _ in lottery.encoder_weights(model)])
    assert weights[~kept].max() <= weights[kept].min()  # one global threshold
    masks = lottery.magnitude_prune_step(model, 0.1)  # 10% of the remaining
    assert lottery.kept_weight_share(masks) == pytest.approx(0.81, abs=1e-3)

    fresh = sharp_tiny(layers=2)
    lottery.apply_weight_masks(fresh, masks)
    optimizer = torch.optim.SGD(fresh.parameters(), lr=1.0)
    data = encoded(3)
    fresh.train()
    fresh(**data.collate([0, 1, 2]), labels=torch.tensor([0, 1, 2])).loss.backward()
    optimizer.step()
    for name, module in lottery.encoder_weights(fresh):
        assert (module.weight[~masks[name]] == 0).all()
    assert lottery.kept_weight_share(lottery.current_weight_masks(fresh)) == pytest.approx(0.81, abs=1e-3)


def test_structured_step_and_subnetwork_samples():
    mask = StructureMask.full(2, 5)
    heads = np.arange(10, dtype=float).reshape(2, 5)
    mlps = np.array([2.0, 1.0])
    step = lottery.structured_prune_step(mask, heads, mlps, head_share=0.2, normalize=False)
    assert step.heads_kept == 8 and not step.heads[0, :2].any() and step.mlps.tolist() == [True, False]
    good = StructureMask(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=bool), np.array([True, False]))
    for seed in range(5):
        bad = lottery.structure_subnetwork(good, "bad", seed)
        rand = lottery.structure_subnetwork(good, "random", seed)
        assert bad.heads_kept == rand.heads_kept == good.heads_kept == 7
        assert bad.mlps_kept == rand.mlps_kept == 1
        assert bad.heads[~good.heads].all()  # fewer pruned (3) than kept (7): all pruned are in, then 4 more
        assert bad.mlps.tolist() == [False, True]
    assert not (lottery.complement_sample(np.array([True, False, False]), np.random.default_rng(0)) & np.array([True, False, False])).any()
    masks = {"a": torch.tensor([True, False, True, True]), "b": torch.tensor([[False, True], [False, False]])}
    magnitudes = {"a": torch.tensor([0.9, 0.1, 0.8, 0.7]), "b": torch.tensor([[0.2, 0.6], [0.3, 0.05]])}
    bad = lottery.weight_subnetwork(masks, "bad", 0, magnitudes)  # the 4 smallest: 0.05, 0.1, 0.2, 0.3
    assert bad["a"].tolist() == [False, True, False, False] and bad["b"].tolist() == [[True, False], [True, True]]
    rand = lottery.weight_subnetwork(masks, "random", 0)
    assert sum(int(m.sum()) for m in rand.values()) == 4


def test_fleiss_kappa_and_survival():
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    same = np.array([[1, 0, 1, 0], [1, 0, 1, 0], [1, 0, 1, 0]])
    assert stats.fleiss_kappa(same) == pytest.approx(1.0)
    assert np.isnan(stats.fleiss_kappa(same[:1]))  # one seed: no agreement to measure
    assert np.isnan(stats.fleiss_kappa(np.ones((3, 5))))  # everything kept: kappa undefined
    # hand computation: 3 raters, 4 subjects with kept-counts 3, 2, 1, 0
    masks = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    p_kept = 6 / 12
    agreement = np.mean([(3 * 2 + 0) / 6, (2 * 1 + 1 * 0) / 6, (1 * 0 + 2 * 1) / 6, (0 + 3 * 2) / 6])
    chance = p_kept**2 + (1 - p_kept) ** 2
    assert stats.fleiss_kappa(masks) == pytest.approx((agreement - chance) / (1 - chance))
    np.testing.assert_allclose(stats.survival(masks), [1.0, 2 / 3, 1 / 3, 0.0])
    # and statsmodels' implementation on random masks of 5 seeds
    rng = np.random.default_rng(0)
    for keep in (0.3, 0.7):
        random_masks = rng.random((5, 200)) < keep
        table, _ = aggregate_raters(random_masks.T.astype(int), n_cat=2)
        assert stats.fleiss_kappa(random_masks) == pytest.approx(fleiss_kappa(table, method="fleiss"))


def test_fleiss_kappa_interval_resamples_the_masked_elements():
    rng = np.random.default_rng(1)
    shared = rng.random(300) < 0.5  # seeds agree on most elements: kappa well above 0
    masks = np.stack([np.where(rng.random(300) < 0.8, shared, ~shared) for _ in range(3)])
    kappa = stats.fleiss_kappa(masks)
    low, high = stats.fleiss_kappa_interval(masks, resamples=2000, seed=0)
    assert low < kappa < high and 0.2 < low and high < 0.6
    # against resampling the subjects directly (the slow way): the same distribution
    draws = np.random.default_rng(5).integers(0, 300, size=(2000, 300))
    direct = np.percentile([stats.fleiss_kappa(masks[:, d]) for d in draws], [2.5, 97.5])
    assert abs(direct[0] - low) < 0.03 and abs(direct[1] - high) < 0.03
    assert all(np.isnan(stats.fleiss_kappa_interval(masks[:1])))  # one seed: nothing to agree on


def test_structured_pruning_phases_refine_the_first_choice_with_the_same_threshold():
    heads_score = np.arange(20, dtype=float).reshape(2, 10)
    mlps_score = np.array([1.0, 0.0])

    def evaluate(mask: StructureMask) -> float:  # drops with every head or MLP removed; MLP 1 is free
        return 1.0 - 0.012 * (20 - mask.heads_kept) - 0.05 * (not mask.mlps[0])

    chosen, history = lottery.structured_pruning(
        StructureMask.full(2, 10), evaluate, lambda mask: (heads_score, mlps_score), head_share=0.2, normalize=False
    )
    phases = [it.phase for it in history]
    assert phases[0] == "heads+mlps" and "heads" in phases and "mlps" in phases
    assert [it.iteration for it in history] == list(range(len(history)))
    best = history[chosen].state
    assert history[chosen].score >= 0.9
    # phase 1: 4 heads + MLP 1 (0.952), then 4 heads + MLP 0 (0.854, stop); phase 2 goes on 2 heads at a
    # time from 16 heads: 14 (0.928), 12 (0.904), 10 (0.880, stop); phase 3: removing MLP 0 fails
    assert best.heads_kept == 12 and best.mlps.tolist() == [True, False]
    assert [round(it.score, 3) for it in history] == [1.0, 0.952, 0.854, 0.928, 0.904, 0.88, 0.854]


def test_seeds_whose_pruning_removed_nothing_have_no_ticket_and_leave_the_table():
    import polars as pl

    rows = [
        ("MRPC", "all", "full", 1, 1.0), ("MRPC", "all", "full", 3, 1.0),
        ("MRPC", "m", "good", 1, 0.7), ("MRPC", "m", "bad", 1, 0.7),
        ("MRPC", "m", "good", 3, 1.0), ("MRPC", "m", "random", 3, 1.0), ("MRPC", "m", "bad", 3, 1.0),
        ("MRPC", "s", "good", 3, 0.5),
    ]
    frame = pl.DataFrame(rows, schema=["task", "method", "kind", "seed", "kept_share"], orient="row")
    # the same seed pruned under the paper protocol found a ticket: only the held-out rows leave
    frame = pl.concat([frame.with_columns(pl.lit("held_out").alias("protocol")),
                       frame.filter(pl.col("seed") == 3).with_columns(pl.lit(0.6).alias("kept_share"), pl.lit("paper").alias("protocol"))])
    kept, left_out = stats.drop_seeds_without_ticket(frame)
    assert left_out == [("MRPC", "m", 3, "held_out")]
    assert sorted(kept.filter(pl.col("protocol") == "held_out").select("method", "kind", "seed").iter_rows()) == [
        ("all", "full", 1), ("all", "full", 3), ("m", "bad", 1), ("m", "good", 1), ("s", "good", 3)]
    assert kept.filter(pl.col("protocol") == "paper").height == 5


def test_held_out_halves_are_disjoint_cover_dev_and_only_half_a_is_sampled():
    import polars as pl

    dev = pl.DataFrame({"idx": np.arange(101), "label": np.r_[np.zeros(60, int), np.ones(41, int)]}).sample(fraction=1.0, shuffle=True, seed=1)
    labels = dev["label"].to_numpy()
    chooses, reports = lottery.protocol_examples(dev, "held_out", stratify=True, split_seed=3)
    assert not (chooses & reports).any() and (chooses | reports).all()  # disjoint, and together all of dev
    assert chooses.sum() == 50 and labels[chooses].sum() == 20  # each class halved (60 -> 30, 41 -> 20 + 21)
    again, _ = lottery.protocol_examples(dev, "held_out", stratify=True, split_seed=3)
    other, _ = lottery.protocol_examples(dev, "held_out", stratify=True, split_seed=4)
    assert np.array_equal(again, chooses) and not np.array_equal(other, chooses)
    # the same halves as the disabling stage's split of the same labels
    assert np.array_equal(chooses, split_halves(labels, True, 3))
    # a sample of the choosing examples is drawn from half A alone; half B is reported whole
    sample, sample_reports = lottery.protocol_examples(dev, "held_out", stratify=True, split_seed=3, examples=10, sample_seed=0)
    assert sample.sum() == 10 and not (sample & ~chooses).any() and np.array_equal(sample_reports, reports)
    # the paper's protocol: all of dev chooses and reports, the same examples; a sample size does not apply to it
    paper, paper_reports = lottery.protocol_examples(dev, "paper", stratify=True)
    assert paper.all() and paper_reports.all()
    paper, paper_reports = lottery.protocol_examples(dev, "paper", stratify=True, examples=10)
    assert paper.all() and paper_reports.all()
    scores = dev.with_columns(pl.col("label").cast(pl.Float64) / 7)  # regression: not stratified
    chooses, reports = lottery.protocol_examples(scores, "held_out", stratify=False, split_seed=0)
    assert chooses.sum() == 50 and reports.sum() == 51
    with pytest.raises(ValueError, match="split_seed"):
        lottery.protocol_examples(dev, "held_out", stratify=True)
    with pytest.raises(ValueError, match="unknown protocol"):
        lottery.protocol_examples(dev, "dev", stratify=True)


@pytest.mark.parametrize("method", ["m", "s"])
def test_the_ticket_is_chosen_on_the_selection_half_alone(method):
    import polars as pl

    from bertology_core.inputs import batching

    task = get_task("MNLI")  # three labels, as the tiny model has
    data = encoded(12, seed=7)
    labels = task.predictions(scoring.evaluate_plan(use_engine(sharp_tiny(layers=2)), data))  # the full model scores 1
    dev = pl.DataFrame({"idx": np.arange(12), "label": labels})
    chooses, reports = lottery.protocol_examples(dev, "held_out", stratify=False, split_seed=0)

    def subset(rows):
        return batching.Encoded(input_ids=[data.input_ids[i] for i in np.flatnonzero(rows)], token_type_ids=None, pad_token_id=0)

    settings = {"rate": 0.5, "max_iterations": 4} if method == "m" else {"head_share": 0.25, "mlps_per_step": 1, "refine": True}

    def run(report_labels, choosing_labels=labels[chooses]):
        return lottery.find_ticket(
            use_engine(sharp_tiny(layers=2)), task, method, "held_out", subset(chooses), choosing_labels, subset(reports),
            report_labels, keep=0.5, keep_above_constant=True, method_settings=settings, importance_data=(data, labels), batch_size=4,
        )

    ticket = run(labels[reports])
    # every report-half label changed, to one class: a floor (best constant score) or a rule reading the report half
    # would move (a constant prediction scores 1 on it)
    relabelled = run(np.full(reports.sum(), (labels[reports][0] + 1) % 3))
    assert ticket.selection_examples == relabelled.selection_examples == 6 and ticket.report_examples == 6
    assert [it.score for it in ticket.history] == [it.score for it in relabelled.history]
    assert ticket.chosen == relabelled.chosen and ticket.floor == relabelled.floor == lottery.best_constant_score(task, labels[chooses])
    assert all(torch.equal(a, relabelled.tensors()[name]) for name, a in ticket.tensors().items())
    # the report half only scores the full model, the tables' reference
    assert ticket.full_report_metrics["accuracy"] == 1.0 and relabelled.full_report_metrics["accuracy"] < 1.0
    assert len(ticket.history) > 1 and ticket.history[0].score == 1.0
    # the choosing half's labels are what the rule sees
    other = run(labels[reports], (labels[chooses] + 1) % 3)
    assert [it.score for it in other.history] != [it.score for it in ticket.history]
    curve = ticket.curve()
    assert curve["chosen"].sum() == 1 and set(curve["protocol"]) == {"held_out"} and set(curve["method"]) == {method}
    summary = ticket.summary()
    assert summary["protocol_label"] == stats.PROTOCOLS["held_out"] and summary["iteration"] == ticket.best.iteration


@pytest.mark.parametrize("method", ["m", "s"])
def test_a_ticket_search_killed_after_a_checkpoint_resumes_to_the_same_ticket(method, tmp_path, monkeypatch):
    """Every score and importance is saved as it comes (here after each); killed at the third save, the rerun replays
    the saved ones without a pass, computes the rest, and finds the ticket an uninterrupted search finds."""
    from bertology_core.inputs import batching
    from bertology_core.models import checkpoint
    from conftest import Crash, crash_at

    task = get_task("MNLI")
    data = encoded(12, seed=7)
    labels = task.predictions(scoring.evaluate_plan(use_engine(sharp_tiny(layers=2)), data))
    chooses = np.arange(12) % 2 == 0
    settings = {"rate": 0.5, "max_iterations": 4} if method == "m" else {"head_share": 0.25, "mlps_per_step": 1, "refine": True}

    def subset(rows):
        return batching.Encoded(input_ids=[data.input_ids[i] for i in np.flatnonzero(rows)], token_type_ids=None, pad_token_id=0)

    def run(saved=None):
        return lottery.find_ticket(
            use_engine(sharp_tiny(layers=2)), task, method, "held_out", subset(chooses), labels[chooses], subset(~chooses),
            labels[~chooses], keep=0.5, method_settings=settings, importance_data=(data, labels), batch_size=4, checkpoint=saved)

    whole = run()
    saved = checkpoint.ArrayCheckpoint(tmp_path / "ticket", "settings", every_seconds=0)
    monkeypatch.setattr(checkpoint, "failpoint", crash_at(3))
    with pytest.raises(Crash):
        run(saved)
    monkeypatch.setattr(checkpoint, "failpoint", lambda name: None)
    passes, evaluate_as_is = [], scoring.evaluate_plan

    def counted(*args, **kwargs):
        passes.append(1)
        return evaluate_as_is(*args, **kwargs)

    monkeypatch.setattr(scoring, "evaluate_plan", counted)
    importance_as_is = lottery.gate_importance

    def counted_importance(*args, **kwargs):
        passes.append("importance")
        return importance_as_is(*args, **kwargs)

    monkeypatch.setattr(lottery, "gate_importance", counted_importance)
    resumed = run(saved)
    assert [it.score for it in resumed.history] == [it.score for it in whole.history] and resumed.chosen == whole.chosen
    assert all(torch.equal(a, resumed.tensors()[name]) for name, a in whole.tensors().items())
    assert resumed.full_report_metrics == whole.full_report_metrics
    resumed_passes = list(passes)
    passes.clear()
    run()
    # the rerun scored (and, s-pruning, measured importance) only what was not saved; a whole search does it all
    assert len(resumed_passes) < len(passes)
    assert resumed_passes.count("importance") < passes.count("importance") or method == "m"
    # a finished search's checkpoint replays it whole, without a pass
    passes.clear()
    assert [it.score for it in run(saved).history] == [it.score for it in whole.history] and not passes


def test_lottery_tables_show_both_protocols_and_their_paired_difference():
    import polars as pl

    rows = []
    for seed, shift in ((1, 0.02), (2, 0.04)):
        for method, kind, half_b in (("all", "full", 0.80), ("s", "good", 0.70), ("s", "bad", 0.60)):
            rows.append(("MRPC", seed, method, kind, "held_out", half_b, half_b + 0.05, half_b, half_b + 0.025, 204, 0.5))
            # the paper's ticket scores higher on dev (chosen on it) and, for good, differs on half B too
            paper_half_b = half_b + (0.01 if kind == "good" else 0.0)
            dev = half_b + shift + (0.01 if kind == "good" else 0.0)
            rows.append(("MRPC", seed, method, kind, "paper", dev, 0.9, paper_half_b, dev, 408, 0.5))
    frame = pl.DataFrame(rows, schema=["task", "seed", "method", "kind", "protocol", "score", "half_a", "half_b", "dev", "examples",
                                       "kept_share"], orient="row")
    frame = frame.with_columns(pl.lit("accuracy").alias("metric"))
    per_seed, table = stats.lottery_tables(frame)
    labels = list(stats.PROTOCOLS.values())
    assert table.select("method", "kind", "protocol").rows() == [
        ("all", "full", labels[0]), ("all", "full", labels[1]), ("s", "good", labels[0]), ("s", "good", labels[1]),
        ("s", "bad", labels[0]), ("s", "bad", labels[1])]
    assert table["seeds"].to_list() == [2] * 6 and table["report_examples"].to_list() == [204, 408] * 3
    paper = table.filter(pl.col("protocol") == labels[1])
    assert paper["minus_held_out_mean"].to_list() == pytest.approx([0.03, 0.04, 0.03])
    # on the same examples (half B) only the good ticket differs between the protocols
    assert paper["half_b_minus_held_out_mean"].to_list() == pytest.approx([0.0, 0.01, 0.0])
    assert paper["half_a_mean"].to_list() == pytest.approx([0.9] * 3)
    held_out = table.filter(pl.col("protocol") == labels[0])
    assert held_out["minus_held_out_mean"].to_list() == held_out["half_b_minus_held_out_mean"].to_list() == [0.0] * 3
    good = per_seed.filter((pl.col("kind") == "good") & (pl.col("protocol") == labels[1])).sort("seed")
    assert good["minus_held_out"].to_list() == pytest.approx([0.03, 0.05])
    assert per_seed.height == 12 and per_seed.select("seed", "kind", "protocol").rows()[:2] == [(1, "full", labels[0]), (1, "full", labels[1])]


def test_report_sets_are_the_protocols_halves_and_score_any_networks_predictions():
    import polars as pl

    dev = pl.DataFrame({"idx": np.arange(100, 140), "label": np.r_[np.zeros(24, int), np.ones(16, int)]}).sample(fraction=1.0, shuffle=True, seed=2)
    sets = stats.report_sets(dev, stratify=True, split_seed=5)
    chooses, reports = lottery.protocol_examples(dev, "held_out", stratify=True, split_seed=5)
    assert set(sets["half_a"]) == set(dev["idx"].filter(pl.Series(chooses))) and set(sets["half_b"]) == set(dev["idx"].filter(pl.Series(reports)))
    assert sorted(sets["dev"]) == list(range(100, 140))
    # a network right on half A only: 1 there, 0 on half B, a half on dev
    predictions = dev.with_columns(pl.when(pl.col("idx").is_in(sets["half_a"].tolist())).then(pl.col("label")).otherwise(1 - pl.col("label")).alias("prediction"))
    scores = stats.scores_on_sets(predictions.reverse(), sets, lambda p, y: float((p == y).mean()))
    assert scores == {"half_a": 1.0, "half_b": 0.0, "dev": 0.5}
    with pytest.raises(ValueError, match="rerun the network"):
        stats.scores_on_sets(predictions.head(10), sets, lambda p, y: 0.0)


def test_a_seed_without_a_ticket_does_not_lower_the_masks_kappa():
    """Two seeds with the same half-size s-pruning mask and one seed whose pruning stopped at iteration 0 (an all-ones
    mask, no ticket): counted as a rater, that seed pulls Fleiss' kappa down to about 0.25, inside Prasanna et al.'s
    0.18-0.32, although the two tickets agree perfectly. Only ticket seeds count, and the table names the other."""
    import polars as pl

    from bertology_core.pruning import summary

    rng = np.random.default_rng(0)
    half = np.zeros(144, dtype=bool)
    half[rng.choice(144, 72, replace=False)] = True
    ticket = {"heads": half.reshape(12, 12), "mlps": np.array([1] * 11 + [0])}
    none = {"heads": np.ones((12, 12), dtype=bool), "mlps": np.ones(12, dtype=bool)}
    assert 0.18 <= stats.fleiss_kappa(np.stack([half, half, np.ones(144, bool)])) <= 0.32  # the artefact
    masks = {("MRPC", "s"): [(1, ticket), (2, ticket), (3, none)]}
    _, stability = summary.survival_and_stability(masks, lambda stack: stats.fleiss_kappa_interval(stack, 200, 0.95, 0))
    heads = stability.filter(pl.col("element") == "heads").row(0, named=True)
    assert heads["seeds"] == 2 and heads["seeds_without_ticket"] == "3"
    assert heads["fleiss_kappa"] == pytest.approx(1.0) and heads["kept_share_min"] == heads["kept_share_max"] == 0.5
    # with three ticket seeds, leaving each out in turn bounds how much one seed moves kappa
    other = {"heads": ~half.reshape(12, 12), "mlps": np.array([1] * 11 + [0])}
    _, stability = summary.survival_and_stability({("MRPC", "s"): [(1, ticket), (2, ticket), (3, other)]}, lambda stack: (0.0, 0.0))
    heads = stability.filter(pl.col("element") == "heads").row(0, named=True)
    assert heads["kappa_loo_max"] == pytest.approx(1.0) and heads["kappa_loo_min"] == pytest.approx(-1.0)


def _saved_ticket_masks(tmp_path, name, state):
    """A ticket's mask as the summary reads it: Ticket.tensors() written by safetensors (as lottery_pruning.py does)
    and read back with safetensors.numpy (as pruning_summary.py does): uint8 arrays."""
    from safetensors.numpy import load_file
    from safetensors.torch import save_file

    ticket = lottery.Ticket("s", "held_out", len(state) - 1, [lottery.Iteration(i, m, 1.0, 1.0) for i, m in enumerate(state)],
                            None, 4, 4, {})
    save_file(ticket.tensors(), tmp_path / f"{name}.safetensors")
    return load_file(tmp_path / f"{name}.safetensors")


def test_seeds_without_a_head_ticket_leave_kappa_and_survival_but_are_named(tmp_path):
    """Three seeds of s-pruning: seed 2's search removed an MLP but no head (no head ticket: an all-ones head mask, as
    a search stopped at iteration 0 writes it), seed 3's heads but no MLP. Each element's kappa, interval, survival
    and kept shares are those of the seeds with a ticket for it alone, and the others are named. m-pruning alike,
    its no-ticket seed first (its all-ones weight masks)."""
    import polars as pl

    from bertology_core.pruning import summary

    full = StructureMask.full(2, 4)
    seed1 = full.without(heads=[(0, 1), (1, 0), (1, 3)], mlps=[1])
    seed2 = full.without(mlps=[0])
    seed3 = full.without(heads=[(0, 1), (0, 2), (1, 0)])
    masks = {seed: _saved_ticket_masks(tmp_path, f"s{seed}", [full, mask]) for seed, mask in ((1, seed1), (2, seed2), (3, seed3))}
    masks[4] = _saved_ticket_masks(tmp_path, "s4", [full])  # stopped at iteration 0: no ticket at all
    assert masks[2]["heads"].dtype == np.uint8 and masks[2]["heads"].all() and masks[4]["mlps"].all()
    seen: list[np.ndarray] = []

    def interval(stack):
        seen.append(stack.copy())
        return -0.5, 0.5

    survival, stability = summary.survival_and_stability({("MRPC", "s"): sorted(masks.items())}, interval)
    heads = stability.filter(pl.col("element") == "heads").row(0, named=True)
    tickets = np.stack([seed1.heads, seed3.heads])
    assert heads["seeds"] == 2 and heads["seeds_without_ticket"] == "2, 4"
    assert heads["fleiss_kappa"] == pytest.approx(stats.fleiss_kappa(tickets))
    assert heads["kappa_max"] == pytest.approx(stats.fleiss_kappa_ceiling(tickets))
    assert heads["kept_share"] == pytest.approx(5 / 8) and heads["kept_share_min"] == heads["kept_share_max"] == 5 / 8
    assert (heads["kappa_ci_low"], heads["kappa_ci_high"]) == (-0.5, 0.5)
    assert np.isnan(heads["kappa_loo_min"]) and np.isnan(heads["kappa_loo_max"])  # two ticket seeds: none to leave out
    mlps = stability.filter(pl.col("element") == "mlps").row(0, named=True)
    assert mlps["seeds"] == 2 and mlps["seeds_without_ticket"] == "3, 4" and mlps["kept_share"] == pytest.approx(0.5)
    # the interval saw the ticket seeds' masks only: heads of seeds 1 and 3, MLPs of seeds 1 and 2
    assert len(seen) == 2 and np.array_equal(seen[0], tickets) and np.array_equal(seen[1], np.stack([seed1.mlps, seed2.mlps]))
    head_survival = survival.filter(pl.col("element") == "head").sort("layer", "head")["survival"].to_numpy()
    np.testing.assert_array_equal(head_survival, tickets.mean(0).ravel())  # 1, 0, 0.5, 1 / 0, 1, 1, 0.5
    mlp_survival = survival.filter(pl.col("element") == "mlp").sort("layer")["survival"].to_list()
    assert mlp_survival == [0.5, 0.5]

    # m-pruning: the no-ticket seed first, its all-ones weight masks
    names = ["bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.1.output.dense"]
    ones = {name: np.ones((2, 3), np.uint8) for name in names}
    two = {names[0]: np.array([[1, 0, 1], [1, 1, 1]], np.uint8), names[1]: np.array([[0, 1, 1], [1, 1, 0]], np.uint8)}
    three = {names[0]: np.array([[1, 0, 0], [1, 1, 1]], np.uint8), names[1]: np.ones((2, 3), np.uint8)}
    survival, stability = summary.survival_and_stability({("MRPC", "m"): [(1, ones), (2, two), (3, three)]}, lambda stack: (0.0, 0.0))
    weights = stability.row(0, named=True)
    flat = np.stack([np.concatenate([m[n].reshape(-1) for n in names]) for m in (two, three)]).astype(bool)
    assert weights["element"] == "weights" and weights["seeds"] == 2 and weights["seeds_without_ticket"] == "1"
    assert weights["fleiss_kappa"] == pytest.approx(stats.fleiss_kappa(flat))
    assert weights["kept_share_min"] == pytest.approx(9 / 12) and weights["kept_share_max"] == pytest.approx(10 / 12)
    assert survival.sort("layer")["survival"].to_list() == pytest.approx([(5 / 6 + 4 / 6) / 2, (4 / 6 + 1) / 2])


def test_the_pruning_summary_tables_from_hand_made_runs():
    """Survival, stability, prunable shares and the subnetwork rows of bertology_core.pruning.summary on inputs
    whose answers are known by hand."""
    import polars as pl

    from bertology_core.pruning import summary

    heads = [np.array([[1, 1], [0, 1]]), np.array([[1, 0], [0, 1]]), np.array([[1, 1], [0, 0]])]
    masks = {("MRPC", "s"): [(seed, {"heads": h, "mlps": np.array([1, 1])}) for seed, h in enumerate(heads, 1)]}
    survival, stability = summary.survival_and_stability(masks, lambda stack: (-1.0, 1.0))
    head_survival = survival.filter(pl.col("element") == "head").sort("layer", "head")["survival"].to_list()
    assert head_survival == pytest.approx([1.0, 2 / 3, 0.0, 2 / 3])
    assert stability.filter(pl.col("element") == "heads")["kept_share"][0] == pytest.approx(7 / 12)
    # every head mask prunes something; no seed pruned an MLP, so the MLP masks have no ticket to compare
    heads_row, mlps_row = (stability.filter(pl.col("element") == e).row(0, named=True) for e in ("heads", "mlps"))
    assert heads_row["kappa_ci_low"] == -1.0 and heads_row["seeds"] == 3
    assert mlps_row["seeds"] == 0 and mlps_row["seeds_without_ticket"] == "1, 2, 3" and np.isnan(mlps_row["kappa_ci_low"])

    curve = pl.DataFrame({"step": [0, 1, 2, 3], "share_pruned": [0.0, 0.25, 0.5, 0.75], "score": [0.80, 0.80, 0.795, 0.5],
                          "heads_pruned": [0, 1, 2, 3], "heads_kept": [[1], [1], [1], [1]]})
    curves = summary.michel_curves({("MRPC", 1): curve})
    assert curves["share_of_full"].to_list() == pytest.approx([1.0, 1.0, 0.99375, 0.625])
    shares = summary.prunable_shares(curves, tolerance=0.01)
    assert shares["prunable_share"][0] == 0.5 and shares["score_at_half"][0] == 0.795

    dev = pl.DataFrame({"idx": list(range(8)), "label": [0, 1] * 4})
    right = dev.with_columns(pl.col("label").alias("prediction"))
    wrong = dev.with_columns((1 - pl.col("label")).alias("prediction"))
    networks = [summary.Network("MRPC", 1, "all", "full", ["held_out", "paper"], right, 1.0),
                summary.Network("MRPC", 1, "s", "bad", ["held_out"], wrong, 0.5)]
    table = summary.subnetwork_table(networks, {"MRPC": dev}, split_seed=0, task_of={"MRPC": get_task("MRPC")})
    assert table.select("kind", "protocol", "score", "examples").rows() == [
        ("full", "held_out", 1.0, 4), ("full", "paper", 1.0, 8), ("bad", "held_out", 0.0, 4)]


def test_weight_masks_are_placed_by_their_module_names_in_every_family():
    from bertology_core.pruning.summary import layer_and_matrix

    assert layer_and_matrix("bert.encoder.layer.3.attention.self.query") == (3, "attention.self.query")
    assert layer_and_matrix("model.layers.11.attn.Wqkv") == (11, "attn.Wqkv")
    assert layer_and_matrix("distilbert.transformer.layer.2.ffn.lin1") == (2, "ffn.lin1")
    assert layer_and_matrix("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn") == (0, "albert_layers.0.ffn")
    for family in FAMILIES:  # every matrix m-pruning masks has a place
        model = tiny(family)
        assert all(layer_and_matrix(name)[0] < model.config.num_hidden_layers for name, _ in lottery.encoder_weights(model))
    with pytest.raises(ValueError, match="no layer number"):
        layer_and_matrix("classifier.dense")


@pytest.mark.parametrize("masked", ["heads and an MLP", "weights"])
def test_a_subnetwork_resumes_from_its_checkpoint_to_the_same_model(tmp_path, monkeypatch, masked):
    """A killed re-fine-tuning of a subnetwork (compacted, or with fixed weight masks) resumes from its checkpoint
    to the same steps and predictions as a run that was never killed."""
    from conftest import GLUE_SMOKE, TINY_BERT, Crash, crashing_at_failpoints

    from bertology_core.data import tasks
    from bertology_core.finetune import training
    from bertology_core.models import checkpoint, loading

    task = get_task("SST-2")
    train, dev = (tasks.read_files(tasks.glue_task(task.name, GLUE_SMOKE), split) for split in ("train", "dev"))
    config = training.FinetuneConfig(batch_size=8, epochs=2, learning_rate=1e-3, max_length=32)
    if masked == "weights":
        generator = torch.Generator().manual_seed(0)
        model = loading.load_classifier(str(TINY_BERT), task, "pretrained", 0)
        mask = {name: torch.rand(module.weight.shape, generator=generator) > 0.3 for name, module in lottery.encoder_weights(model)}
    else:
        mask = StructureMask.full(2, 4).without(heads=[(0, 1), (1, 2), (1, 3)], mlps=[1])

    def run(checkpointer=None):
        return lottery.finetune_subnetwork(str(TINY_BERT), task, 3, train, dev, config, mask, checkpointer=checkpointer)

    reference, reference_predictions = run()
    checkpointer = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="subnetwork", every_steps=4, every_seconds=None)
    with crashing_at_failpoints(monkeypatch), pytest.raises(Crash):
        run(checkpointer)
    resumed, predictions = run(checkpointer)
    assert resumed["resumed_at_step"] == 4 and reference["resumed_at_step"] == 0
    assert resumed["steps"] == reference["steps"] and resumed["final_loss_mean_last_20"] == reference["final_loss_mean_last_20"]
    assert predictions.equals(reference_predictions)
    assert resumed["parameters_kept_share"] == reference["parameters_kept_share"]


def test_a_gradient_pass_the_device_has_no_memory_for_is_halved_and_its_sums_kept():
    """Token and example importance do not depend on the batches (the summed loss): a batch that runs out of memory is
    halved and run again, the sums as they were before it; batch importance, whose batches are its definition, stops."""
    model, data, labels = _importance_model_and_data()
    task = get_task("MRPC")
    expected = importance.gate_importance(model, task, data, labels, batch_size=2, granularity="token")
    def fits_two(module, args, kwargs):  # out of memory on more than two examples, as a GPU would
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("too many rows")

    handle = model.register_forward_pre_hook(fits_two, with_kwargs=True)
    try:
        found = importance.gate_importance(model, task, data, labels, batch_size=6, granularity="token")
        with pytest.raises(torch.OutOfMemoryError):
            importance.gate_importance(model, task, data, labels, batch_size=6, granularity="batch")
    finally:
        handle.remove()
    np.testing.assert_allclose(found[0], expected[0], rtol=1e-9)
    np.testing.assert_allclose(found[1], expected[1], rtol=1e-9)
