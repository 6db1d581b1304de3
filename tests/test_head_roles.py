"""Voita et al.'s head roles on hand-built maps, and the Hard Concrete head gates."""

from collections import Counter

import numpy as np
import polars as pl
import pytest
import torch

from bertology_core import finetune, glue, head_gates, head_gates_stats, head_roles, head_roles_stats, models, states
from conftest import GLUE_SMOKE, TINY_BERT

# [CLS] a b c d [SEP]: positions 0 and 5 are special
TOKENS = ["[CLS]", "the", "cat", "zyx", "sat", "[SEP]"]
SEGMENTS = [None, 0, 0, 0, 0, None]
FREQUENCIES = Counter({"the": 100, "cat": 10, "zyx": 1, "sat": 10})


def example() -> head_roles.ExampleTokens:
    return head_roles.ExampleTokens.from_dump_row(TOKENS, SEGMENTS, FREQUENCIES)


def with_keys(table: pl.DataFrame, state: str = "pretrained", seed: int | None = None) -> pl.DataFrame:
    return table.with_columns(pl.lit("MRPC").alias("task"), pl.lit(state).alias("state"), pl.lit(seed, pl.Int64).alias("seed"))


def one_hot_rows(targets: list[int], length: int = 6) -> np.ndarray:
    """A map whose query q puts weight 1 on key targets[q]."""
    attention = np.zeros((length, length))
    attention[np.arange(length), targets] = 1.0
    return attention


def roles_of(*maps: np.ndarray, tokens: head_roles.ExampleTokens | None = None) -> pl.DataFrame:
    """The roles table of one example whose layer 0 holds ``maps`` (one per head)."""
    counts = head_roles.RoleCounts(1, len(maps), 6)
    counts.add(np.stack(maps)[None], tokens or example())
    return counts.table()


def test_example_tokens_mark_special_tokens_and_the_rarest_piece():
    tokens = example()
    assert tokens.real.tolist() == [False, True, True, True, True, False]
    assert tokens.rarest.tolist() == [False, False, False, True, False, False]
    # an unseen piece (count 0) is rarer than any seen one; ties are all rarest
    tied = head_roles.ExampleTokens.from_dump_row(TOKENS, SEGMENTS, Counter({"the": 5}))
    assert tied.rarest.tolist() == [False, False, True, True, True, False]


def test_a_previous_token_head_is_positional_with_offset_minus_one():
    previous = one_hot_rows([0, 0, 1, 2, 3, 4])
    row = roles_of(previous).row(0, named=True)
    assert row["positional_offset"] == -1 and row["positional_share"] == 1.0
    assert row["queries"] == 4  # the special tokens' rows are not read
    # one real query of four looks elsewhere: 3/4 of the time at -1, below Voita's 90%
    mixed = one_hot_rows([0, 0, 1, 2, 1, 4])
    row = roles_of(mixed).row(0, named=True)
    assert row["positional_offset"] == -1 and row["positional_share"] == pytest.approx(0.75)
    roles = head_roles_stats.assign_roles(with_keys(roles_of(previous, mixed)),
                                    head_roles_stats.RoleThresholds())
    assert roles["positional"].to_list() == [True, False]


def test_a_head_attending_to_sep_is_neither_positional_nor_confident():
    to_sep = one_hot_rows([5, 5, 5, 5, 5, 5])
    row = roles_of(to_sep).row(0, named=True)
    assert row["positional_share"] == pytest.approx(0.25)  # offsets 4, 3, 2, 1: one each
    # confidence leaves [SEP] out as a key, as Voita et al. leave out the end-of-sentence token
    assert row["confidence"] == 0.0


def test_confidence_is_the_mean_maximum_weight_over_real_queries_and_keys():
    attention = np.full((6, 6), 0.0)
    attention[1, [1, 2, 3, 4]] = [0.7, 0.1, 0.1, 0.1]
    attention[2, [0, 2]] = [0.6, 0.4]  # its maximum is [CLS]: the largest real weight is 0.4
    attention[3, [3, 5]] = [0.5, 0.5]
    attention[4, [1, 2]] = [0.9, 0.1]
    attention[0, 0] = attention[5, 5] = 1.0  # special queries: not read
    assert roles_of(attention)["confidence"][0] == pytest.approx((0.7 + 0.4 + 0.5 + 0.9) / 4)


def test_rare_share_counts_queries_whose_maximum_is_the_rarest_token():
    to_rare = one_hot_rows([0, 3, 3, 3, 3, 5])
    half = one_hot_rows([0, 3, 3, 1, 1, 5])
    table = roles_of(to_rare, half)
    assert table["rare_share"].to_list() == [1.0, 0.5]
    roles = head_roles_stats.assign_roles(with_keys(table), head_roles_stats.RoleThresholds())
    assert roles["rare"].to_list() == [True, True]  # 0.5 reaches the default threshold
    roles = head_roles_stats.assign_roles(with_keys(table), head_roles_stats.RoleThresholds(rare_share=0.6))
    assert roles["rare"].to_list() == [True, False]
    # no syntactic verdict here: "any role" is known only where a measured role holds
    assert roles["roles"].to_list() == ["rare", "none"] and roles["specialised"].to_list() == [True, None]


def test_counts_add_up_over_examples_of_different_lengths():
    counts = head_roles.RoleCounts(1, 1, 6)
    counts.add(one_hot_rows([0, 0, 1, 2, 3, 4])[None, None], example())
    short = head_roles.ExampleTokens.from_dump_row(["[CLS]", "cat", "sat", "[SEP]"], [None, 0, 0, None], FREQUENCIES)
    counts.add(one_hot_rows([0, 2, 1, 3], 4)[None, None], short)  # +1, -1
    row = counts.table().row(0, named=True)
    assert row["examples"] == 2 and row["queries"] == 6
    assert row["positional_offset"] == -1 and row["positional_share"] == pytest.approx(5 / 6)


def test_syntactic_role_needs_ten_points_over_the_offset_baseline():
    per_head = pl.DataFrame({
        "state": ["pretrained"] * 4, "relation": ["nsubj", "nsubj", "obj", "all"], "direction": ["dep->head"] * 4,
        "layer": [0, 0, 0, 0], "head": [0, 1, 1, 0], "accuracy": [0.75, 0.6, 0.9, 0.99],
    })
    best = pl.DataFrame({"state": ["pretrained"] * 2, "relation": ["nsubj", "obj"], "baseline_accuracy": [0.6, 0.85]})
    margins = head_roles_stats.best_relation_margins(per_head, best)
    assert margins.sort("head").select("head", "best_relation").rows() == [(0, "nsubj"), (1, "obj")]
    roles = with_keys(pl.DataFrame({"layer": [0, 0], "head": [0, 1], "positional_share": [0.1, 0.1], "rare_share": [0.0, 0.0]},
                                   schema_overrides={"layer": pl.Int32, "head": pl.Int32}))
    assigned = head_roles_stats.assign_roles(roles, head_roles_stats.RoleThresholds(), margins).sort("head")
    # head 0: nsubj 0.75 vs 0.60 (+15 points); head 1: best is obj, 0.90 vs 0.85 (+5): not syntactic
    assert assigned["syntactic"].to_list() == [True, False]
    assert assigned["syntactic_relation"].to_list() == ["nsubj", None]
    # a state the probing stage did not score has no syntactic verdict
    other = head_roles_stats.assign_roles(with_keys(roles, "finetuned", 1), head_roles_stats.RoleThresholds(), margins)
    assert other["syntactic"].to_list() == [None, None] and other["specialised"].to_list() == [None, None]


def test_thresholds_must_be_shares():
    with pytest.raises(ValueError, match="positional_share"):
        head_roles_stats.RoleThresholds(positional_share=90)


def test_piece_frequencies_count_the_tokenizers_pieces_without_special_tokens():
    tokenizer = models.load_tokenizer(TINY_BERT)
    counts = head_roles.piece_frequencies(tokenizer, ["the cat sat", "the dog", None])
    pieces = tokenizer.tokenize("the cat sat") + tokenizer.tokenize("the dog")
    assert counts == Counter(pieces)
    assert "[CLS]" not in counts and "[SEP]" not in counts


# ---- Hard Concrete gates --------------------------------------------------------------------------------------------


def test_sampled_gates_lie_in_the_unit_interval_and_hit_both_ends():
    torch.manual_seed(0)
    gates = head_gates.HardConcreteGates(4, 8, head_gates.GateSettings(initial_log_alpha=0.0))
    draws = torch.stack([gates.sample() for _ in range(2000)])
    draws = draws.detach()
    assert float(draws.min()) == 0.0 and float(draws.max()) == 1.0
    assert bool(((draws >= 0) & (draws <= 1)).all())
    assert 0 < float(((draws > 0) & (draws < 1)).float().mean()) < 1


@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 1.5])
def test_expected_l0_matches_its_closed_form(log_alpha):
    """The share of non-zero samples estimates P(g != 0); Louizos et al.'s closed form must agree (4 standard errors)."""
    torch.manual_seed(1)
    gates = head_gates.HardConcreteGates(1, 1, head_gates.GateSettings(initial_log_alpha=log_alpha))
    with torch.no_grad():
        draws = torch.stack([gates.sample() for _ in range(40000)]).reshape(-1)
    estimate = float((draws > 0).float().mean())
    closed = float(gates.open_probability().detach())
    assert abs(estimate - closed) < 4 * np.sqrt(closed * (1 - closed) / draws.numel())
    with torch.no_grad():
        assert float(gates.penalty()) == pytest.approx(closed)  # one layer, one head


def test_penalty_sums_heads_and_averages_layers():
    gates = head_gates.HardConcreteGates(3, 4)
    with torch.no_grad():
        gates.log_alpha[0] = 10.0
        gates.log_alpha[1] = -10.0
    p = gates.open_probability().detach()
    assert float(gates.penalty().detach()) == pytest.approx(float(p.sum(-1).mean()))
    assert float(gates.penalty().detach()) == pytest.approx((4 * p[0, 0] + 4 * p[1, 0] + 4 * p[2, 0]).item() / 3)


def test_evaluation_gates_are_deterministic():
    gates = head_gates.HardConcreteGates(2, 3)
    with torch.no_grad():
        gates.log_alpha.copy_(torch.tensor([[-5.0, 0.0, 5.0], [-2.4, 2.4, 0.3]]))
    gates.eval()
    first, second = gates(), gates()
    assert torch.equal(first, second)
    expected = (torch.sigmoid(gates.log_alpha) * 1.2 - 0.1).clamp(0, 1)
    assert torch.allclose(first, expected)
    assert first[0, 0] == 0.0 and first[0, 2] == 1.0
    gates.train()
    assert not torch.equal(gates(), gates())


def test_bad_gate_settings_are_refused():
    with pytest.raises(ValueError, match="stretch"):
        head_gates.GateSettings(stretch=(0.0, 1.0))
    with pytest.raises(ValueError, match="temperature"):
        head_gates.GateSettings(temperature=2.0)


def classifier():
    return models.load_classifier(TINY_BERT, glue.get_task("SST-2"), states.PRETRAINED, 0)


def smoke_data(task_name: str = "SST-2"):
    task = glue.get_task(task_name)
    frame = glue.read_local(task, "train", GLUE_SMOKE)
    return task, finetune.encode(frame, models.load_tokenizer(TINY_BERT), 32), frame["label"].to_numpy()


def test_open_gates_leave_the_classifier_unchanged_and_closed_ones_equal_masking():
    task, data, labels = smoke_data()
    model = classifier().eval()
    batch = data.collate(list(range(8)))
    with torch.no_grad():
        reference = model(**batch).logits
    gated = head_gates.GatedClassifier(model, 0.1, head_gates.GateSettings(initial_log_alpha=10.0)).eval()
    with torch.no_grad():
        assert float(gated(**batch, labels=torch.tensor(labels[:8])).task_loss) == pytest.approx(
            float(torch.nn.functional.cross_entropy(reference, torch.tensor(labels[:8]))), abs=1e-5)
        gated.gates.log_alpha[1, 0] = -10.0  # layer 1, head 0 closed
        from bertology_core import attention, importance
        masked = importance.StructureMask.for_model(model).without(heads=[(1, 0)])
        with attention.intervene(model, masked.plan()):
            expected = model(**batch).logits
        with attention.intervene(model, gated.evaluation_plan()):
            np.testing.assert_allclose(model(**batch).logits.numpy(), expected.numpy(), atol=1e-6)
    assert gated.kept().sum() == gated.kept().size - 1


def test_frozen_weights_get_no_gradient_and_the_gates_do():
    task, data, labels = smoke_data()
    gated = head_gates.GatedClassifier(classifier(), 0.1, train_weights=False).train()
    output = gated(**data.collate(list(range(8))), labels=torch.tensor(labels[:8]))
    output.loss.backward()
    assert gated.gates.log_alpha.grad is not None and float(gated.gates.log_alpha.grad.abs().sum()) > 0
    assert all(p.grad is None for p in gated.classifier.parameters())
    groups = gated.parameter_groups(finetune.FinetuneConfig())
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0


def run_gates(strength: float, train_weights: bool, seed: int = 3, checkpointer=None):
    task, data, labels = smoke_data()
    config = finetune.FinetuneConfig(batch_size=8, epochs=6, max_length=32, learning_rate=1e-3)
    return head_gates.train_gates(classifier(), task, data, labels, config, strength,
                                  head_gates.GateSettings(learning_rate=0.5), train_weights, seed, checkpointer)


def test_a_stronger_penalty_closes_more_gates_and_training_is_deterministic():
    _, weak = run_gates(0.0, train_weights=True)
    _, again = run_gates(0.0, train_weights=True)
    _, strong = run_gates(50.0, train_weights=True)
    assert weak["gates"] == again["gates"] and weak["loss_curve"] == again["loss_curve"]
    assert strong["heads_kept"] < weak["heads_kept"]
    assert strong["expected_open"] < weak["expected_open"]


def test_gate_training_resumes_from_a_checkpoint(tmp_path, monkeypatch):
    from bertology_core import checkpoint

    _, reference = run_gates(5.0, train_weights=False)

    class Crash(Exception):
        pass

    def crash(name):
        raise Crash

    monkeypatch.setattr(finetune, "failpoint", crash)
    checkpointer = checkpoint.Checkpointer(tmp_path / "ckpt", fingerprint="gates", every_steps=4, every_seconds=None)
    with pytest.raises(Crash):
        run_gates(5.0, train_weights=False, checkpointer=checkpointer)
    monkeypatch.setattr(finetune, "failpoint", lambda name: None)
    _, resumed = run_gates(5.0, train_weights=False, checkpointer=checkpointer)
    assert resumed["resumed_at_step"] == 4
    assert resumed["gates"] == reference["gates"] and resumed["loss_curve"] == reference["loss_curve"]


def test_rank_correlation_over_heads_and_its_interval():
    heads = 12
    roles = pl.DataFrame({
        "task": ["MRPC"] * heads, "state": ["finetuned"] * heads, "seed": [1] * heads, "layer": [h // 4 for h in range(heads)],
        "head": [h % 4 for h in range(heads)], "confidence": np.linspace(0.1, 0.9, heads), "positional_share": np.linspace(0.9, 0.1, heads),
        "rare_share": [0.0] * heads, "specialised": [h == 0 for h in range(heads)],  # one head with a role: too few to rank
    }, schema_overrides={"layer": pl.Int32, "head": pl.Int32})
    targets = roles.select("task", "seed", "layer", "head", pl.lit("Michel importance").alias("target"),
                           (pl.col("confidence") ** 3).alias("value"))
    table = head_roles_stats.rank_correlations(roles, targets, 200, 0.95, 0)
    by_measure = {r["measure"]: r for r in table.iter_rows(named=True)}
    assert by_measure["confidence"]["spearman"] == pytest.approx(1.0) and by_measure["confidence"]["ci_low"] == pytest.approx(1.0)
    assert by_measure["positional_share"]["spearman"] == pytest.approx(-1.0)
    assert np.isnan(by_measure["rare_share"]["spearman"])  # a constant measure has no rank correlation
    assert np.isnan(by_measure["specialised"]["spearman"]) and np.isnan(by_measure["specialised"]["ci_low"])
    assert by_measure["confidence"]["heads"] == heads


def test_gates_table_pairs_every_column_on_the_same_dev_examples():
    labels = np.array([0, 1] * 10)
    right, wrong = labels.copy(), 1 - labels
    frame = pl.DataFrame({"idx": np.arange(20), "label": labels, "gates": right, "gates_binary": np.where(np.arange(20) < 10, right, wrong),
                          "michel": np.where(np.arange(20) < 5, right, wrong), "full": right})
    record = {"task": "MRPC", "seed": 1, "weights": "frozen", "strength": 0.1, "heads_kept": 3, "gates": [[1, 0], [0, 1]],
              "train_examples": 40, "steps": 10, "train_seconds": 1.0}
    row = head_gates_stats.gates_table([record], [frame], {"MRPC": "accuracy"}, 200, 0.95, 0).row(0, named=True)
    assert (row["gates_score"], row["gates_binary_score"], row["michel_score"], row["full_score"]) == (1.0, 0.5, 0.25, 1.0)
    assert row["gates_minus_michel"] == pytest.approx(0.75) and row["binary_minus_michel"] == pytest.approx(0.25)
    assert row["ci_low"] <= 0.75 <= row["ci_high"] and row["binary_ci_low"] <= 0.25 <= row["binary_ci_high"]
    assert row["share_pruned"] == pytest.approx(0.25)


def test_the_claim_compares_frozen_gates_inside_the_fixed_pruning_range():
    from bertology_core import claims

    gates = pl.DataFrame({"task": ["SST-2"] * 4, "seed": [1] * 4, "weights": ["frozen", "frozen", "frozen", "trained"],
                          "strength": [0.01, 0.1, 0.3, 0.1], "heads_kept": [70, 27, 4, 20], "heads": [72] * 4,
                          "share_pruned": [2 / 72, 45 / 72, 68 / 72, 52 / 72], "metric": ["accuracy"] * 4,
                          "gates_minus_michel": [0.0, -0.01, 0.26, -0.02], "binary_minus_michel": [0.01, -0.005, 0.3, 0.0],
                          "binary_ci_low": [-0.01, -0.03, 0.2, -0.02], "binary_ci_high": [0.02, 0.02, 0.4, 0.02]})
    measured = claims.l0_gates_beat_michel(gates)
    # only the frozen gates that prune 10% to 90% of the heads: 27 kept (62.5% pruned)
    assert [(m.scope, m.value) for m in measured] == [("SST-2 seed 1, 27 of 72 heads", -0.005)]
    assert claims.l0_gates_beat_michel(pl.DataFrame({"note": ["no gates"]})) == []


def test_only_fine_tuned_states_take_the_probed_models_syntactic_roles():
    assert head_roles_stats.probed_name("MRPC", "pretrained", None) == "pretrained"
    assert head_roles_stats.probed_name("MRPC", "finetuned", 1) == "MRPC_seed1"
    assert head_roles_stats.probed_name("MRPC", "scratch", 1) is None


def test_importance_targets_give_raw_normalised_importance_and_the_drop_when_disabled():
    importance = pl.DataFrame({"element": ["head", "head", "mlp"], "layer": [0, 0, 0], "head": [0, 1, None],
                               "importance": [0.2, 0.4, 1.0], "normalized": [0.45, 0.9, 1.0]})
    deltas = pl.DataFrame({"mode": ["uniform"] * 4, "kind": ["head", "head", "head", "layer"], "layer": [0, 0, 0, 0],
                           "head": [0, 1, 0, None], "seed": [1, 1, None, 1], "delta": [-0.02, 0.01, -0.5, -0.3],
                           "task": ["MRPC"] * 4, "state": ["finetuned"] * 4})
    targets = head_roles_stats.importance_targets({("MRPC", 1): importance}, [deltas]).sort("target", "head")
    assert targets.filter(pl.col("target") == head_roles_stats.IMPORTANCE)["value"].to_list() == [0.2, 0.4]
    assert targets.filter(pl.col("target") == head_roles_stats.NORMALIZED_IMPORTANCE)["value"].to_list() == [0.45, 0.9]
    assert targets.filter(pl.col("target").str.starts_with("score drop"))["value"].to_list() == [0.02, -0.01]


def test_michel_mask_keeps_the_most_important_heads():
    table = pl.DataFrame({"element": ["head"] * 4 + ["mlp"], "layer": [0, 0, 1, 1, 0], "head": [0, 1, 0, 1, None],
                          "importance": [0.1, 0.4, 0.3, 0.2, 9.0], "normalized": [0.4, 0.1, 0.3, 0.2, 1.0]})
    assert head_gates.michel_mask(table, 2, normalized=True).heads.tolist() == [[True, False], [True, False]]
    assert head_gates.michel_mask(table, 2, normalized=False).heads.tolist() == [[False, True], [True, False]]
    assert head_gates.michel_mask(table, 0).heads_kept == 0
