"""Each rule's memory, time and disk from the sizes of what its jobs read (bertology_core/jobs/needs.py), the fit
that sets them (tools/fit_needs.py), the plan of a run and the free-space check before its first job."""

import json
import shutil
import sys

import numpy as np
import polars as pl
import pytest
from safetensors.torch import load_file

from bertology_core.jobs import needs
from conftest import REPO, TINY_BERT
from workflow_utils import snakemake

sys.path.insert(0, str(REPO / "tools"))
import fit_needs  # noqa: E402


def test_a_jobs_sizes_are_its_models_parameters_and_the_megabytes_of_the_rest(tmp_path):
    parameters = sum(t.numel() for t in load_file(TINY_BERT / "model.safetensors").values())
    (tmp_path / "resolved.json").write_text(json.dumps({"path": str(TINY_BERT)}))
    data = tmp_path / "dev.parquet"
    pl.DataFrame({"x": np.arange(100_000)}).write_parquet(data)
    trained = tmp_path / "model"
    shutil.copytree(TINY_BERT, trained)
    sizes = needs.job_sizes(["resolved.json", "dev.parquet", "model"], root=tmp_path)
    assert sizes.parameters == pytest.approx(parameters / 1e6)  # the largest model counts, once
    assert sizes.read_mb == pytest.approx(100_000 * 8 / 1e6)  # a Parquet file as decoded: 100,000 64-bit values
    (tmp_path / "notes.txt").write_bytes(b"x" * 5000)  # any other file: its bytes
    assert needs.job_sizes(["notes.txt"], root=tmp_path).read_mb == pytest.approx(0.005)
    # an input not written yet: Snakemake's <TBD> (the error names the path as given); a plan's prediction fills it
    with pytest.raises(FileNotFoundError) as missing:
        needs.job_sizes(["resolved.json", "later.parquet"], root=tmp_path)
    assert missing.value.filename == "later.parquet"
    assert needs.job_sizes(["later.parquet"], {"later.parquet": needs.Sizes(0, 7.5)}, tmp_path).read_mb == 7.5
    # a resolved model whose folder is gone says what to do
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "resolved.json").write_text(json.dumps({"path": str(tmp_path / "nowhere")}))
    with pytest.raises(ValueError, match="Fix: delete .*resolved.json and rerun"):
        needs.job_sizes(["gone/resolved.json"], root=tmp_path)


def test_a_training_jobs_largest_batch_is_its_batch_size_times_the_longest_example_of_its_token_files(tmp_path):
    from transformers import AutoTokenizer

    from bertology_core.inputs.batching import TokenFile

    tokenizer = AutoTokenizer.from_pretrained(TINY_BERT)
    words = ["the cat sat", "a much longer sentence than the others by far, " * 6, "dogs"]
    frame = pl.DataFrame({"sentence1": words, "sentence2": [None] * 3, "label": [0, 1, 0]})
    # three row groups: the longest example is found in the middle one's statistics
    TokenFile.write({"train": frame}, tokenizer, 32, tmp_path / "cut.parquet", chunk_rows=1)
    TokenFile.write({"train": frame}, tokenizer, 512, tmp_path / "whole.parquet", chunk_rows=1)
    full = max(len(tokenizer(w)["input_ids"]) for w in words)
    assert 32 < full < 512
    batch = needs.Batch.of({"batch_size": 16, "max_length": 32, "epochs": 3})
    assert needs.job_sizes(["cut.parquet"], root=tmp_path, batch=batch).batch_tokens == pytest.approx(16 * 32 / 1e3)
    batch = needs.Batch.of({"batch_size": 16, "max_length": 512})
    assert needs.job_sizes(["whole.parquet"], root=tmp_path, batch=batch).batch_tokens == pytest.approx(16 * full / 1e3)
    # another Parquet file says nothing of lengths; a job that does not train has no batch
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "other.parquet")
    assert needs.job_sizes(["other.parquet"], root=tmp_path).batch_tokens == 0
    # a token file not written yet (a plan): as long as the cut allows
    assert needs.job_sizes(["later.parquet"], {"later.parquet": needs.Sizes(0, 1.0)}, tmp_path,
                           needs.Batch(16, 512)).batch_tokens == pytest.approx(16 * 512 / 1e3)
    assert needs.training_hyperparameters("evaluate_pretrained", {"hyperparameters": {"batch_size": 1}}) is None
    # the request grows with the batch's word pieces through the model
    need = needs.Need("finetune", needs.Line({"base": 500, "batch_tokens": 200.0}, 1.0),
                      needs.Line({"base": 1}), (needs.Line({"base": 0}),))
    memory = needs.Requests({"finetune": need}).resources("finetune", False, lambda wc: {"batch_size": 16, "max_length": 512})
    assert set(memory) == {"mem_mb", "disk_mb"}
    assert memory["mem_mb"](None, [str(tmp_path / "whole.parquet")], 1) == int(np.ceil(500 + 200.0 * 16 * full / 1e3
                                                                                      + needs.JOB_PROCESS_MB))


def test_only_a_model_folders_weights_count_as_parameters_and_a_stale_model_leaves_the_request_unknown(tmp_path):
    from safetensors.numpy import save_file

    # a file of arrays that is not a model (probe features, a pruning mask) is data the job reads
    (tmp_path / "features").mkdir()
    save_file({"x": np.zeros((1000, 100), dtype=np.float32)}, str(tmp_path / "features" / "layers.safetensors"))
    sizes = needs.job_sizes(["features/layers.safetensors"], root=tmp_path)
    assert sizes.parameters == 0 and sizes.read_mb == pytest.approx(0.4, rel=0.01)
    # a model's weights named file by file (rule resolve_model): the whole folder's, every shard counted
    shards = tmp_path / "sharded"
    shutil.copytree(TINY_BERT, shards)
    weights = load_file(shards / "model.safetensors")
    (shards / "model.safetensors").unlink()
    names = sorted(weights)
    save_file({k: weights[k].numpy() for k in names[: len(names) // 2]}, str(shards / "model-00001-of-00002.safetensors"))
    save_file({k: weights[k].numpy() for k in names[len(names) // 2:]}, str(shards / "model-00002-of-00002.safetensors"))
    whole = sum(t.numel() for t in weights.values()) / 1e6
    assert needs.job_sizes(["sharded/model-00001-of-00002.safetensors"], root=tmp_path).parameters == pytest.approx(whole)
    # a resolved.json whose folder is gone, or that does not parse: unknown for Snakemake (<TBD>), clear for a plan
    (tmp_path / "resolved.json").write_text("{not json")
    with pytest.raises(ValueError, match="Fix: delete it and rerun"):
        needs.job_sizes(["resolved.json"], root=tmp_path)
    need = needs.Need("r", needs.Line({"base": 600}), needs.Line({"base": 5}), (needs.Line({"base": 1}),))
    with pytest.raises(FileNotFoundError, match="resolve_model"):
        needs.Requests({"r": need}).memory("r")(None, [str(tmp_path / "resolved.json")], 1)
    # a new rule with only a memory override asks the floors for its time and disk; with neither, the error says so
    requests = needs.Requests({}, {"new_rule": 3000})
    assert requests.memory("new_rule")(None, 2) == 6000
    assert requests.runtime("new_rule")(None, [], 1) == needs.LEAST["minutes"]
    with pytest.raises(KeyError, match="set compute.mem_mb"):
        needs.Requests({}).resources("other_rule")


def test_every_rule_that_asks_for_resources_has_a_fitted_need():
    import re

    asked = {name for path in (REPO / "rules").glob("*.smk") for name in re.findall(r'requests\("(\w+)"', path.read_text())}
    assert len(asked) > 40
    fitted = set(needs.load())
    assert asked <= fitted | set(needs.BORROWED), f"rules without a fitted need: {sorted(asked - fitted)}"
    # a rule no run has measured yet asks what the rule it borrows from asks, until a measured run fits its own
    requests = needs.Requests(needs.load())
    for rule, lender in needs.BORROWED.items():
        assert rule not in fitted and requests.need(rule) is requests.need(lender)
    assert needs.Requests(needs.load(), {"evaluate_finetuned": 3000}).need("evaluate_finetuned").rule == "evaluate_finetuned"


def test_a_request_is_the_line_times_its_margin_at_least_the_floor_times_the_attempt():
    need = needs.Need("r", needs.Line({"base": 400, "parameters": 10.0, "read_mb": 2.0}, 1.5),
                      needs.Line({"base": 1, "parameters x read_mb x passes": 0.01}, 2.0), (needs.Line({"read_mb": 0.5}, 1.2),))
    sizes = needs.Sizes(parameters=110, read_mb=300)
    assert need.predict("memory_mb", sizes) == 400 + 1100 + 600
    process = needs.JOB_PROCESS_MB  # the Snakemake process beside the script, in a cluster job's allocation
    assert need.request("memory_mb", sizes) == int(np.ceil(2100 * 1.5 + process))
    assert need.request("memory_mb", sizes, attempt=2) == int(np.ceil(2 * (2100 * 1.5 + process)))
    assert need.request("minutes", sizes) == int(np.ceil((1 + 330) * 2))
    # a job that goes over what it reads 50 times (a probe's epochs) asks for 50 times the time, the same memory
    fifty = needs.Sizes(parameters=110, read_mb=300, passes=50)
    assert need.request("minutes", fifty) == int(np.ceil((1 + 330 * 50) * 2))
    assert need.request("memory_mb", fifty) == need.request("memory_mb", sizes)
    assert need.request("memory_mb", needs.Sizes()) == 600 + process  # the base alone
    small = needs.Need("s", needs.Line({"base": 100}, 1.5), need.minutes, need.disk_mb)
    assert small.request("memory_mb", needs.Sizes()) == needs.LEAST["memory_mb"] + process  # never under the floor
    assert need.request("disk_mb", sizes) == int(np.ceil(150 * 1.2))


def test_probes_mixes_greedy_searches_and_outlier_draws_ask_for_time_as_their_settings_say(monkeypatch, tmp_path):
    from test_jobs import plan_of

    from bertology_core.workflow import jobs

    default, job = jobs.passes(plan_of()), {"model": "m", "probed": "pretrained", "task": "QQP", "seed": "1"}
    # config.yaml: 50 epochs, 2 label sets, 3 probe seeds; 5 greedy steps; 100 random draws and the outliers
    assert [default(rule, job, {}) for rule in ("probe_layers", "layer_mix", "disabling_greedy", "outlier_disabling",
                                            "disabling_sweep")] == [50 * 2, 50 * 3 * 2, 5, 101, 1]
    fewer = jobs.passes(plan_of({"layer_mix": {"probe_seeds": [0], "probe": {"max_epochs": 4}},
                                 "disabling": {"per_task": {"QQP": {"greedy_steps": 2}}}}))
    assert fewer("layer_mix", job, {}) == 4 * 1 * 2 and fewer("probe_layers", job, {}) == default("probe_layers", job, {})
    assert fewer("disabling_greedy", job, {}) == 2 and fewer("disabling_greedy", {**job, "task": "RTE"}, {}) == 5
    # a sample of a dev file's examples is that share of a pass over it (the file's rows from its footer)
    sampled = jobs.passes(plan_of({"disabling": {"max_examples": 250}, "outliers": {"max_examples": 100}}))
    pl.DataFrame({"idx": range(1000)}).write_parquet(tmp_path / "dev.parquet")
    dev = {"data": str(tmp_path / "dev.parquet")}
    assert sampled("disabling_sweep", job, dev) == 0.25 and sampled("disabling_greedy", job, dev) == 0.25 * 5
    assert sampled("outlier_disabling", job, dev) == 0.1 * 101
    assert sampled("disabling_sweep", job, {"data": str(tmp_path / "not_yet.parquet")}) == 1.0  # the most it may be
    # the request the workflow binds (rules/common.smk) scales with them, for a job the size of BERT-base's features of
    # the whole treebank (the rehearsal's)
    treebank = needs.Sizes(109.5, 4599.2)
    monkeypatch.setattr(needs, "job_sizes", lambda paths, batch=None: treebank)
    need = needs.load()["layer_mix"]
    minutes = {name: needs.Requests(needs.load(), {}, passes).runtime("layer_mix")(job, ["f"], 1)
               for name, passes in (("fewer", fewer), ("default", default))}
    assert minutes["default"] == need.request("minutes", needs.Sizes(109.5, 4599.2, passes=300))
    assert minutes["default"] > 10 * minutes["fewer"] > 0


def test_a_finished_probe_jobs_passes_are_the_epochs_its_probes_ran_and_the_fit_scales_only_such_rules(tmp_path):
    from test_jobs import plan_of

    from bertology_core.workflow import jobs

    experiment = plan_of()
    # per label set, the mean over layers of the probe's and the control probe's epochs: (4 + 6) / 2 + 10
    pl.DataFrame({"labels": ["upos", "upos", "deprel", "deprel"], "layer": [0, 1, 0, 1], "epochs_run": [4, 4, 10, 10],
                  "control_epochs_run": [6, 6, 10, 10]}).write_parquet(tmp_path / "probes.parquet")
    job = {"model": "m", "probed": "pretrained"}
    assert jobs.passes_run(experiment, "probe_layers", job, {}, {"probes": str(tmp_path / "probes.parquet")}) == 15
    # per label set, the most epochs of its probes times its probe seeds: 7 x 3 + 5 x 3
    pl.DataFrame({"labels": ["upos", "upos", "deprel"], "probe_seeds": [3, 3, 3],
                  "epochs_run_max": [7, 7, 5]}).write_parquet(tmp_path / "cumulative.parquet")
    assert jobs.passes_run(experiment, "layer_mix", job, {}, {"cumulative": str(tmp_path / "cumulative.parquet")}) == 36
    assert jobs.passes_run(experiment, "disabling_greedy", {"task": "RTE"}, {}, {}) == 5  # as its settings say
    assert jobs.passes_run(experiment, "disabling_sweep", {"task": "RTE"}, {}, {}) == 1.0
    # fitted on the passes run: the time per pass of a probe that stopped early, not its most epochs
    rows = [{"run": "r", "rule": rule, "job": f"{rule}{i}", "threads": 1, "parameters": 20.0, "read_mb": 80.0 * (i + 1),
             "batch_tokens": 0.0, "passes": passes, "memory_mb": 900.0, "minutes": 0.3 + 0.002 * 80.0 * (i + 1) * passes,
             "cpu_minutes": 1.0, "output_mb": [0.1], "gives_mb": [0.1]}
            for rule, all_passes in (("probe_layers", (4, 12, 30, 8)), ("disabling_sweep", (1, 1, 1, 1)))
            for i, passes in enumerate(all_passes)]
    found, _ = fit_needs.fit(pl.DataFrame(rows))
    assert found["probe_layers"].minutes.coefficients.get("read_mb x passes", 0) == pytest.approx(0.002, rel=0.05)
    assert not any(term.endswith("x passes") for term in found["disabling_sweep"].minutes.coefficients)


def test_the_fit_recovers_a_known_line_and_puts_every_measured_job_inside_its_request():
    rng = np.random.default_rng(0)
    rows = []
    for parameters in (22.7, 110.0, 335.0):
        for read_mb in rng.uniform(1, 500, 6):
            memory = 300 + 12.0 * parameters + 3.0 * read_mb
            rows.append({"run": "r", "rule": "probe_layers", "job": f"{parameters}/{read_mb:.0f}", "threads": 1, "parameters": parameters,
                         "read_mb": read_mb, "batch_tokens": 0.0, "passes": 1.0, "memory_mb": memory * rng.uniform(0.97, 1.03),
                         "minutes": 0.5 + 0.001 * parameters * read_mb, "cpu_minutes": 1.0,
                         "output_mb": [0.2 * read_mb, 4.0 * parameters], "gives_mb": [0.5 * read_mb, 4.0 * parameters]})
    found, table = fit_needs.fit(pl.DataFrame(rows))
    line = found["probe_layers"].memory_mb.coefficients
    assert line["base"] == pytest.approx(300, rel=0.2) and line["parameters"] == pytest.approx(12.0, rel=0.05)
    assert line["read_mb"] == pytest.approx(3.0, rel=0.05)
    assert (table["peak_mb"] <= table["request_mb"]).all()
    # one line per output: the dump's values and its tokens grow with different sizes
    first, second = found["probe_layers"].disk_mb
    assert first.coefficients["read_mb"] == pytest.approx(0.2) and second.coefficients["parameters"] == pytest.approx(4.0)
    # and what each gives its readers (a Parquet table as decoded: more than its bytes on disk)
    assert found["probe_layers"].gives_mb[0].coefficients["read_mb"] == pytest.approx(0.5)
    # measured at one model size, nothing says how the need grows with the model: the base carries it, no slope
    one = pl.DataFrame([r for r in rows if r["parameters"] == 22.7])
    single, _ = fit_needs.fit(one)
    assert "parameters" not in single["probe_layers"].memory_mb.coefficients
    # a rule that reads a model takes its data a batch at a time: no memory term in it (the probes, which hold their
    # features whole, keep theirs)
    streamed, _ = fit_needs.fit(pl.DataFrame(rows).with_columns(pl.lit("dump_attention").alias("rule")))
    assert "read_mb" not in streamed["dump_attention"].memory_mb.coefficients
    # outputs of nothing, predicted as nothing, do not lift the line for the rest
    sizes = [needs.Sizes(0, r) for r in (0.0, 0.0, 0.0, 10.0, 20.0, 40.0)]
    line = fit_needs.fit_line(sizes, np.array([0.0, 0.0, 0.0, 10.0, 20.0, 40.0]), ("read_mb",), 1.2)
    assert line.coefficients == {"read_mb": pytest.approx(1.0)} and line.margin == pytest.approx(1.2)


def test_the_fitted_file_holds_every_rule_and_reads_back_as_written(tmp_path):
    found = needs.load()
    path = tmp_path / "needs.yaml"
    needs.dump({rule: need for rule, need in found.items() if rule not in needs.UNMEASURED}, path, "a header")
    again = needs.load(path)
    assert again.keys() == found.keys()
    for rule, need in found.items():
        assert again[rule].memory_mb.coefficients == pytest.approx(need.memory_mb.coefficients, rel=1e-5)
        assert again[rule].disk_mb[0].margin == pytest.approx(need.disk_mb[0].margin, abs=1e-3)


def test_a_plan_carries_each_jobs_predicted_outputs_to_the_jobs_that_read_them(tmp_path):
    (tmp_path / "resolved.json").write_text(json.dumps({"path": str(TINY_BERT)}))
    (tmp_path / "dev.parquet").write_bytes(b"x" * 2_000_000)
    line = lambda **c: needs.Line(c, 1.0)  # noqa: E731
    fitted = {
        "finetune": needs.Need("finetune", line(base=1000), line(base=10), (line(parameters=4.0), line(base=1.0))),
        "dump": needs.Need("dump", line(base=800), line(base=5), (line(read_mb=50.0),), gives_mb=(line(read_mb=80.0),)),
        "read_dump": needs.Need("read_dump", line(base=400, read_mb=2.0), line(**{"base": 5, "read_mb x passes": 1.0}),
                                (line(base=0.5),)),
    }
    jobs = [needs.PlannedJob("finetune", ("resolved.json", "dev.parquet"), ("ft/model", "ft/eval.json"), models=("ft/model",)),
            needs.PlannedJob("dump", ("ft/model", "dev.parquet"), ("dump.parquet",)),
            needs.PlannedJob("read_dump", ("dump.parquet", "other.parquet"), ("table.parquet",))]
    plan = needs.plan(jobs, fitted, tmp_path, passes=lambda rule, wildcards, inputs: 3 if rule == "read_dump" else 1)
    parameters = needs.job_sizes(["resolved.json"], root=tmp_path).parameters
    finetune, dump, reader = plan.rows
    assert finetune.disk_mb == pytest.approx(4.0 * parameters + 1.0)
    assert dump.sizes.parameters == pytest.approx(parameters)  # the trained model: the geometry it was trained from
    assert dump.disk_mb == pytest.approx(50.0 * 2.0)  # 50 x the 2 MB of dev it reads
    assert reader.sizes.read_mb == pytest.approx(160.0)  # the dump as it reads it; the input nobody writes counts 0
    assert plan.unknown == ["other.parquet"]
    assert reader.memory_mb == 400 + 2 * 160 + needs.JOB_PROCESS_MB
    assert reader.minutes == 5 + 160 * 3 and dump.minutes == 5  # the reader goes over the dump three times
    assert finetune.checkpoint_mb == pytest.approx(parameters * needs.CHECKPOINT_BYTES_PER_PARAMETER)
    assert plan.needed_mb(jobs_at_once=4) == pytest.approx(plan.results_mb() + finetune.checkpoint_mb)


def test_the_disk_check_names_the_need_the_free_space_and_how_to_go_on(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_FREE_DISK_MB", "1500")
    assert needs.disk_problem(1400, tmp_path, "X") is None
    problem = needs.disk_problem(2600, tmp_path, "--config compute='{check_disk: false}'")
    assert "needs about 2.6 GB of disk" in problem and "1.5 GB are free" in problem
    assert problem.endswith("go on anyway with --config compute='{check_disk: false}'.")
    monkeypatch.delenv("BERTOLOGY_FREE_DISK_MB")
    assert needs.free_mb(tmp_path / "not" / "yet") == pytest.approx(shutil.disk_usage(tmp_path).free / 1e6, rel=0.01)


def test_a_run_stops_before_its_first_job_when_the_disk_is_short_and_goes_on_when_told(tmp_path):
    target = "results/data/MRPC/dev.parquet"
    short = snakemake(tmp_path, target, check=False, env={"BERTOLOGY_FREE_DISK_MB": "0.001"})
    assert short.returncode != 0
    message = short.stdout + short.stderr
    assert "Not enough disk (nothing was run): this run needs about" in message and "are free. Fix: free space" in message
    assert not (tmp_path / target).exists() and not (tmp_path / "logs").exists()
    snakemake(tmp_path, target, "--config", "compute={check_disk: false}", env={"BERTOLOGY_FREE_DISK_MB": "0.001"})
    assert (tmp_path / target).exists()
