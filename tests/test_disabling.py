"""Disabling sweeps: the fast sweep equals plain forwards with the same plan; grouping, halves, greedy."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from bertology_core.disabling import stats, sweeps
from bertology_core.scoring import plans as scoring
from bertology_core.engine.intervention import intervene
from bertology_core.engine.structure import depth_layers
from bertology_core.inputs import batching
from bertology_core.stats.bootstrap import paired_deltas
from test_attention import tiny


def encoded(examples: int = 7, seed: int = 3) -> batching.Encoded:
    """Examples of different lengths (so batches are padded) from a tiny vocabulary."""
    generator = np.random.default_rng(seed)
    ids = [[2, *generator.integers(5, 99, size=int(n)).tolist(), 3] for n in generator.integers(3, 12, size=examples)]
    return batching.Encoded(input_ids=ids, token_type_ids=None, pad_token_id=0)


def sharp_tiny(layers: int = 3):
    """The tiny random model with sharper attention (random init attends almost uniformly, which would
    make uniform disabling a no-op): query and key weights scaled up, and the classifier's too, so that
    every head's effect on the logits is far above float noise."""
    model = tiny(layers=layers)
    with torch.no_grad():
        for layer in depth_layers(model):
            layer.attention.self.query.weight.mul_(6)
            layer.attention.self.key.weight.mul_(6)
        model.classifier.weight.mul_(100)
    return model


@pytest.mark.parametrize("mode", sweeps.MODES)
def test_sweep_equals_a_plain_forward_with_the_same_plan(mode):
    model = sharp_tiny(layers=3)
    data = encoded()
    configs = sweeps.sweep_configurations(3, 4)
    assert len(configs) == 1 + 3 * 4 + 3
    fast = sweeps.evaluate_configurations(model, data, configs, mode, rows_per_pass=10).logits
    naive = sweeps.evaluate_configurations(model, data, configs, mode, reuse_prefix=False, examples_per_batch=2).logits
    for index, config in enumerate(configs):
        # reference: one example at a time (no padding at all), the configuration's plan alone
        for example, ids in enumerate(data.input_ids):
            plan = sweeps.build_plan([config], mode, 3, 4)
            with torch.no_grad(), intervene(model, plan):
                plain = model(input_ids=torch.from_numpy(np.asarray(ids, dtype=np.int64))[None]).logits[0].numpy()
            np.testing.assert_allclose(fast[index, example], plain, atol=1e-4, rtol=0)
            np.testing.assert_allclose(naive[index, example], plain, atol=1e-4, rtol=0)
    # disabling changes something: every head's configuration differs from the intact model somewhere
    assert all(np.abs(fast[i] - fast[0]).max() > 2e-3 for i in range(1, len(configs)))


def test_a_disabled_layer_in_zero_mode_leaves_only_the_attention_bias():
    model = tiny(layers=2)
    data = encoded(3)
    (layer_config,) = [c for c in sweeps.whole_layers(2, 4) if c.layer == 1]
    logits = sweeps.evaluate_configurations(model, data, [layer_config], "zero").logits
    dense = depth_layers(model)[1].attention.output.dense

    def zero_context(module, args):
        return (torch.zeros_like(args[0]),)

    handle = dense.register_forward_pre_hook(zero_context)
    try:
        reference = sweeps.evaluate_configurations(model, data, [sweeps.INTACT], "zero").logits
    finally:
        handle.remove()
    np.testing.assert_allclose(logits, reference, atol=1e-5, rtol=0)


def test_configurations_share_a_pass_from_their_first_differing_layer():
    configs = sweeps.sweep_configurations(3, 2)
    groups = sweeps._groups(configs, 3, reuse_prefix=True)
    first_layers = [{min((l for l, _ in configs[i].disabled), default=2) for i in group} for group in groups]
    assert first_layers == [{0}, {1}, {2}]
    assert sum(len(g) for g in groups) == len(configs) and 0 in groups[-1]  # intact joins the last layer
    # a head every configuration disables does not decide the grouping
    base = {(0, 1)}
    greedy_step = [sweeps.head_set(base | {h}) for h in [(0, 0), (1, 0), (1, 1), (2, 0)]]
    assert [len(g) for g in sweeps._groups(greedy_step, 3, reuse_prefix=True)] == [1, 2, 1]
    assert sweeps._groups(configs, 3, reuse_prefix=False) == [[i] for i in range(len(configs))]


def test_build_plan_rejects_heads_outside_the_model():
    with pytest.raises(ValueError, match="outside the model's 2 x 4"):
        sweeps.build_plan([sweeps.head_set({(2, 0)})], "uniform", 2, 4)
    with pytest.raises(ValueError, match="mode"):
        sweeps.build_plan([sweeps.INTACT], "random", 2, 4)


def test_split_halves_are_stratified_seeded_and_complementary():
    labels = np.array([0] * 10 + [1] * 7)
    selection = stats.split_halves(labels, stratify=True, seed=5)
    assert selection[labels == 0].sum() == 5 and selection[labels == 1].sum() == 3  # odd: extra to report
    assert np.array_equal(selection, stats.split_halves(labels, stratify=True, seed=5))
    assert not np.array_equal(selection, stats.split_halves(labels, stratify=True, seed=6))
    assert stats.split_halves(np.linspace(0, 5, 9), stratify=False, seed=0).sum() == 4


def test_greedy_adds_the_most_helpful_head_until_nothing_helps():
    labels = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
    # accuracy of a set of disabled heads: base 0.5; head A (0, 1) +0.2, head B (1, 0) +0.1 once A is
    # disabled, everything else -0.1
    def accuracy_of(disabled):
        correct = 5 + 2 * ((0, 1) in disabled) + ((1, 0) in disabled and (0, 1) in disabled) - len(disabled - {(0, 1), (1, 0)})
        return correct

    calls = []

    def predicted(config):
        prediction = labels.copy()
        right = accuracy_of(config.disabled)
        prediction[right:] = 1 - prediction[right:]  # the first `right` examples are correct
        return prediction

    def evaluate(configs, reference):
        calls.append(len(configs))
        return np.stack([predicted(c) for c in configs]), np.stack([predicted(reference)] * len(configs))

    heads = [(layer, head) for layer in range(2) for head in range(2)]
    intact, steps = sweeps.greedy_disable(evaluate, labels, "accuracy", heads, max_steps=5)
    assert intact == 0.5
    assert [s.added for s in steps] == [(0, 1), (1, 0)]
    assert [round(s.selection_score, 6) for s in steps] == [0.7, 0.8]
    assert steps[-1].disabled == frozenset({(0, 1), (1, 0)})
    assert calls == [1, 4, 3, 2]  # intact, then each remaining head until no gain
    _, capped = sweeps.greedy_disable(evaluate, labels, "accuracy", heads, max_steps=1)
    assert len(capped) == 1

    def noisy(configs, reference):  # the reference of a pass scores lower than elsewhere: a gain is against it
        predictions, references = evaluate(configs, reference)
        if reference.disabled:
            references[:, 6] = 1 - references[:, 6]  # one more wrong in the pass that holds the chosen set
        return predictions, references

    _, against_own_pass = sweeps.greedy_disable(noisy, labels, "accuracy", heads, max_steps=5)
    assert [s.added for s in against_own_pass] == [(0, 1), (1, 0)]
    assert [round(s.selection_gain, 6) for s in against_own_pass] == [0.2, 0.2]  # 0.8 against 0.6 in its own pass


def test_greedy_search_reuses_the_sweep_and_reports_each_set_on_the_other_half(tmp_path, monkeypatch):
    """The search's first step reads the single-head sweep (no forward pass for it), every chosen set is reported
    on the half it was not chosen on, and its report score equals a plain evaluation of that set on that half."""
    import polars as pl

    from bertology_core.data.tasks import glue_task as get_task
    from bertology_core.stats.metrics import compute_metrics

    task, heads, max_steps = get_task("STS-B"), 8, 3  # regression: every head moves the score (Pearson) a little
    model = sharp_tiny(layers=2)
    data = encoded(examples=24, seed=5)
    # labels are what the model predicts with L1H2 disabled: disabling that head helps
    target = sweeps.evaluate_configurations(model, data, [sweeps.head_set({(0, 1)})], "uniform").logits[0]
    labels = task.predictions(target[None])[0]
    dev = pl.DataFrame({"idx": np.arange(24), "label": labels})
    configs = sweeps.sweep_configurations(2, 4, layers=False)
    scored = sweeps.evaluate_configurations(model, data, configs, "uniform")
    sweep = sweeps.sweep_frame(task, dev, configs, task.predictions(scored.logits),
                                  task.predictions(scored.reference), "uniform")
    selection = stats.split_halves(labels, stratify=False, seed=0)

    def encode(frame):
        return batching.Encoded([data.input_ids[i] for i in frame["idx"]], None, 0)

    settings = sweeps.GreedySettings("uniform", max_steps, 0, 200, 0.95, 0)
    table, computed = sweeps.greedy_search(model, task, dev, selection, encode, sweep, settings, rows_per_pass=16)
    steps = table.height - 1
    assert steps >= 1 and table["step"].to_list() == list(range(steps + 1)) and table["disabled"][0] == "intact"
    # step 1 came from the sweep; each later search step evaluated every head not yet chosen
    assert computed == sum(heads - j for j in range(1, steps + (steps < max_steps)))
    assert table["report_examples"][0] == int((~selection).sum()) and table["selection_examples"][0] == int(selection.sum())
    report, chosen = encode(dev.filter(pl.Series(~selection))), set()
    for row in table.iter_rows(named=True):
        if row["step"]:
            chosen.add((row["layer"], row["head"]))
        config = sweeps.head_set(chosen) if chosen else sweeps.INTACT
        predictions = task.predictions(sweeps.evaluate_configurations(model, report, [config], "uniform").logits)[0]
        assert row["report_score"] == pytest.approx(compute_metrics(task, predictions, labels[~selection])["pearson"])

    # killed after its first saved search step, the rerun replays the saved steps without a pass and ends the same
    from bertology_core.models.checkpoint import ArrayCheckpoint
    from conftest import Crash

    evaluate_as_is, selection_passes = sweeps.evaluate_configurations, []

    def counted(model, data, configs, *args, **kwargs):
        selection_passes.append(len(configs))
        return evaluate_as_is(model, data, configs, *args, **kwargs)

    def crash(name):
        raise Crash

    saved = ArrayCheckpoint(tmp_path / "greedy", "settings", every_seconds=0)
    monkeypatch.setattr(sweeps, "evaluate_configurations", counted)
    monkeypatch.setattr(sweeps, "failpoint", crash)
    with pytest.raises(Crash):
        sweeps.greedy_search(model, task, dev, selection, encode, sweep, settings, rows_per_pass=16, checkpoint=saved)
    assert selection_passes == [heads - 1]
    monkeypatch.setattr(sweeps, "failpoint", lambda name: None)
    selection_passes.clear()
    resumed, resumed_computed = sweeps.greedy_search(model, task, dev, selection, encode, sweep, settings, rows_per_pass=16,
                                                     checkpoint=saved)
    assert resumed.equals(table) and resumed_computed == computed and (tmp_path / "greedy").exists()
    # the rerun scored only the search steps after the saved one, then the report half
    assert sum(selection_passes[:-1]) == computed - (heads - 1)


def test_extremes_are_the_best_and_worst_of_each_kind_with_ties_in_table_order():
    import polars as pl

    pooled = pl.DataFrame({"task": ["MRPC"] * 5, "mode": ["uniform"] * 5, "kind": ["head"] * 4 + ["layer"],
                           "layer": [0, 0, 1, 1, 0], "head": [0, 1, 0, 1, None], "delta": [0.02, -0.05, 0.02, 0.0, -0.1]})
    table = stats.extremes(pooled, 1, ["layer", "head", "delta"])
    assert table.select("kind", "end", "layer", "head", "delta").rows() == [
        ("head", "best", 0, 0, 0.02), ("head", "worst", 0, 1, -0.05), ("layer", "best", 0, None, -0.1), ("layer", "worst", 0, None, -0.1)]


def test_a_pass_the_device_has_no_memory_for_is_halved_and_the_logits_are_unchanged(monkeypatch, caplog):
    """A fake allocator failure for any pass of more than 24 rows (configurations x examples): the sweep halves its
    passes (and keeps them that small) instead of failing, and every logit is the one the unconstrained sweep
    computes."""
    model = sharp_tiny(layers=3)
    data = encoded(examples=9)
    configs = sweeps.sweep_configurations(3, 4)
    reference = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=80).logits
    forward, intervene_as_is, collate_as_is = model.forward, scoring.intervene, data.collate
    pass_size, passes = {}, []

    def counting_configurations(model, plan, **kwargs):  # the configurations sharing the pass about to run
        pass_size["configurations"] = plan.num_configs
        return intervene_as_is(model, plan, **kwargs)

    def counting_examples(examples):
        pass_size["examples"] = len(examples)
        return collate_as_is(examples)

    def small_device(*args, **kwargs):
        passes.append(pass_size["examples"] * pass_size["configurations"])
        if passes[-1] > 24:
            raise torch.OutOfMemoryError("fake: the pass does not fit")
        return forward(*args, **kwargs)

    monkeypatch.setattr(scoring, "intervene", counting_configurations)
    monkeypatch.setattr(data, "collate", counting_examples)
    monkeypatch.setattr(model, "forward", small_device)
    with caplog.at_level("WARNING"):
        constrained = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=80).logits
    np.testing.assert_allclose(constrained, reference, atol=1e-5, rtol=0)
    assert (constrained.argmax(-1) == reference.argmax(-1)).all()
    assert max(passes) > 24 and "out of memory" in caplog.text
    fitted = next(i for i, rows in enumerate(passes) if rows <= 24)
    assert all(rows <= 24 for rows in passes[fitted:])  # once a pass fits, no larger one is tried again


def test_a_sweeps_intact_row_is_the_plain_forward_of_its_pass(monkeypatch):
    """The intact model is scored in every pass of the sweep (each configuration's baseline comes from its own
    batches and padding), and its row is what a plain forward of those examples gives."""
    model = sharp_tiny(layers=3)
    data = encoded(examples=6)
    configs = sweeps.sweep_configurations(3, 4)
    assert configs[0] == sweeps.INTACT
    passes = []
    intervene_as_is = scoring.intervene

    def counting(model, plan, **kwargs):
        passes.append(plan.num_configs)
        return intervene_as_is(model, plan, **kwargs)

    monkeypatch.setattr(scoring, "intervene", counting)
    scored = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=10 * len(configs))
    monkeypatch.undo()
    groups = sweeps._groups(configs, 3, reuse_prefix=True)
    assert passes == [len(g) + (0 not in g) for g in groups]  # one pass per group (every example fits), intact in each
    order = np.argsort(-data.lengths(), kind="stable")  # a pass: every example, sorted by length, padded together
    with torch.no_grad():
        plain = model(**data.collate(order)).logits.numpy()
    np.testing.assert_allclose(scored.logits[0, order], plain, atol=1e-6, rtol=0)
    for index in range(len(configs)):
        np.testing.assert_allclose(scored.reference[index, order], plain, atol=1e-6, rtol=0)
    # the configurations' own rows do not depend on the intact row joining their pass
    alone = sweeps.evaluate_configurations(model, data, configs[1:], "uniform", rows_per_pass=10 * len(configs))
    assert alone.reference is None
    np.testing.assert_allclose(scored.logits[1:], alone.logits, atol=1e-6, rtol=0)


def test_deltas_compare_each_configuration_with_the_intact_row_of_its_own_pass():
    """Where the intact model's predictions differ between passes (as on a GPU), a configuration's delta is taken
    against its own pass's, and identical rows give the single-reference deltas."""
    labels = np.array([0, 1, 0, 1, 1, 0, 1, 0])
    predictions = np.array([labels, labels, 1 - labels])  # intact, a configuration that changes nothing, one that flips all
    indices = np.arange(8)[None, :]
    same = paired_deltas("accuracy", predictions[1:], predictions[0], labels, indices)
    np.testing.assert_allclose(same.delta, [0.0, -1.0])
    per_pass = np.array([labels, labels, labels])
    per_pass[1, :4] = 1 - labels[:4]  # the intact model in the first configuration's pass got half wrong
    own = paired_deltas("accuracy", predictions[1:], per_pass[1:], labels, indices)
    np.testing.assert_allclose(own.delta, [0.5, -1.0])
    np.testing.assert_array_equal(paired_deltas("accuracy", predictions[1:], np.stack([labels] * 2), labels, indices).delta,
                                  same.delta)


def test_a_pass_holds_the_cpu_rows_on_a_cpu_and_the_gpu_cap_on_a_gpu():
    assert scoring.rows_per_pass(torch.device("cpu"), 48, 4096) == 48
    assert scoring.rows_per_pass(torch.device("cuda"), 48, 4096) == 4096


def test_a_sweep_table_holds_each_configuration_once_per_example_in_order():
    from bertology_core.data.tasks import glue_task as get_task

    configs = sweeps.sweep_configurations(2, 3, layers=True)  # heads and layers: layer set, head None for a layer
    n = 4
    dev = pl.DataFrame({"idx": np.arange(10, 10 + n), "label": np.arange(n) % 2})
    predictions = np.arange(len(configs) * n).reshape(len(configs), n) % 2
    frame = sweeps.sweep_frame(get_task("MRPC"), dev, configs, predictions, predictions[::-1], "uniform")
    assert frame.height == len(configs) * n and frame["mode"].unique().to_list() == ["uniform"]
    assert frame.schema["layer"] == pl.Int16 and frame.schema["head"] == pl.Int16 and frame.schema["config"] == pl.String
    for i, config in enumerate(configs):
        rows = frame[i * n : (i + 1) * n]
        assert rows["config"].to_list() == [config.name] * n and rows["kind"].to_list() == [config.kind] * n
        assert rows["layer"].to_list() == [config.layer] * n and rows["head"].to_list() == [config.head] * n
        assert rows["idx"].to_list() == list(range(10, 10 + n)) and rows["prediction"].to_list() == predictions[i].tolist()
    assert frame.filter(pl.col("kind") == "layer")["head"].null_count() == n * 2


def test_the_summary_keeps_every_greedy_search_and_names_each_task_s_metric():
    # a greedy search per swept state: the same (task, seed) twice, both kept; captions name the tasks' own metrics
    from bertology_core.data.tasks import Task, glue_task
    from bertology_core.disabling import summary
    from bertology_core.fitness import verdict_stats

    rows = [{"task": task, "mode": "uniform", "config": name, "kind": kind, "layer": layer, "head": head, "seed": None,
             "metric": metric, "delta": delta, "ci_low": delta - 0.1, "ci_high": delta + 0.1, "seeds": 1,
             "seeds_positive": int(delta > 0), "seeds_negative": int(delta < 0), "delta_std_over_seeds": None,
             "verdict": "none", "examples": 8}
            for task, metric in (("topics", "f1_macro"), ("MRPC", "accuracy"))
            for name, kind, layer, head, delta in (("L1H1", "head", 0, 0, 0.02), ("L1H2", "head", 0, 1, -0.01),
                                                    ("L1", "layer", 0, None, -0.05))]
    deltas = pl.DataFrame(rows, schema_overrides={"seed": pl.Int64, "head": pl.Int64, "delta_std_over_seeds": pl.Float64})
    selection = pl.DataFrame({"task": ["MRPC"], "mode": ["uniform"], "kind": ["head"], "seed": [1]})
    greedy = [(("MRPC", 1), pl.DataFrame({"step": [0], "state": ["finetuned"]})),
              (("MRPC", 1), pl.DataFrame({"step": [0], "state": ["scratch"]}))]
    verdicts = verdict_stats.Verdicts(verdict_stats.verdict_table([]), "m")
    declared = {"topics": Task("topics", ("a", "b", "c"), None, ("f1_macro",)), "MRPC": glue_task("MRPC")}
    outputs = summary.summarise(deltas, selection, greedy, verdicts, declared,
                                summary.DisablingSettings("m", ["uniform"], 0.95, 1, "MRPC 1, topics 1", "all"))
    assert outputs["greedy"].table["state"].to_list() == ["finetuned", "scratch"]
    caption = " ".join(outputs["heads"].figure.to_dict()["title"]["subtitle"])
    assert "accuracy for MRPC; macro F1 for topics" in caption and "Pearson" not in caption
    assert set(outputs) == {"heads", "layers", "extremes", "selection", "greedy"}


def test_a_sweep_killed_after_a_checkpoint_resumes_to_the_same_logits_bit_for_bit(tmp_path, monkeypatch):
    """The sweep saves its finished groups (here after every group) and dies at the first save; the rerun loads them,
    runs only the passes not done and equals an uninterrupted sweep exactly; a finished sweep's checkpoint gives it
    back without a pass. A checkpoint of other settings (another fingerprint) is ignored: that sweep runs every pass."""
    from bertology_core.models.checkpoint import ArrayCheckpoint
    from conftest import Crash

    model = sharp_tiny(layers=3)
    data = encoded(examples=9)
    configs = sweeps.sweep_configurations(3, 4)
    forward, passes = model.forward, []

    def counted(*args, **kwargs):
        passes.append(1)
        return forward(*args, **kwargs)

    def crash(name):
        raise Crash

    def passes_of(**kwargs):
        passes.clear()
        result = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=10, **kwargs)
        return result, len(passes)

    monkeypatch.setattr(model, "forward", counted)
    passes_of()  # the first use of a model also runs the engine's one probe of its structure
    whole, every_pass = passes_of()
    saved = ArrayCheckpoint(tmp_path / "sweep", "settings", every_seconds=0)
    monkeypatch.setattr(scoring, "failpoint", crash)
    with pytest.raises(Crash):
        passes_of(checkpoint=saved)
    before_kill = len(passes)
    assert (tmp_path / "sweep" / "arrays.json").is_file()
    monkeypatch.setattr(scoring, "failpoint", lambda name: None)
    resumed, after_kill = passes_of(checkpoint=saved)
    assert 0 < after_kill < every_pass and before_kill + after_kill == every_pass
    np.testing.assert_array_equal(resumed.logits, whole.logits)
    np.testing.assert_array_equal(resumed.reference, whole.reference)
    # done, the scores are kept until the job has written its outputs: a job killed after this sweep (in a later
    # mode) does not run it again
    done, passes_done = passes_of(checkpoint=saved)
    assert passes_done == 0
    np.testing.assert_array_equal(done.logits, whole.logits)
    again, passes_again = passes_of(checkpoint=ArrayCheckpoint(tmp_path / "sweep", "other settings", every_seconds=None))
    np.testing.assert_array_equal(again.logits, whole.logits)
    assert passes_again == every_pass
