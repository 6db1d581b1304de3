"""The checks made when the workflow is parsed (bertology_core.workflow.checks), without Snakemake: each kind of check
lists its problems, the first kind that finds some is the one error the run stops with, and the files' contents are read
only in the main process. (tests/test_workflow.py runs the same checks through snakemake.)"""

from __future__ import annotations

import shutil

from bertology_core.jobs.experiment import Experiment
from bertology_core.workflow import checks, jobs
from conftest import REPO
from test_jobs import load_config

SMOKE = "configs/smoke.yaml"


def plan_of(*overlays) -> Experiment:
    return jobs.experiment(load_config(SMOKE, *overlays), REPO)


def _treebank_copy(tmp_path):
    folder = tmp_path / "ud"
    shutil.copytree(REPO / "tests" / "fixtures" / "ud_smoke", folder)
    return folder


def test_the_smoke_config_passes_every_check_and_its_hand_labels_are_kept():
    plan = plan_of()
    checked = checks.ParseChecks(plan)
    assert [check.name for check in checked.checks()] == [
        "config", "task_files", "treebank_files", "models", "section_texts", "hand_labels", "data"]
    assert checked.first_error() is None
    labels = checked.labels("tiny-bert")
    assert labels is not None and labels.card.endswith("tiny-bert.json") and labels.maps
    assert set(labels.files) == {"labels", "second_pass", "test"}


def test_a_config_choice_problem_is_the_first_error():
    plan = plan_of({"pruning": {"tasks": ["MRPC", "RTE"]}, "data": {"glue_dir": "does/not/exist"}})
    checked = checks.ParseChecks(plan)
    error = checked.first_error()
    assert error.startswith("config:\n  pruning.tasks names RTE, which is not in tasks ['MRPC', 'STS-B']."), error
    assert "not found" not in error  # the files are checked once the config's choices pass
    assert checked.hand_labels == {}


def test_a_missing_glue_folder_names_every_file_and_nothing_later_is_read():
    plan = plan_of({"data": {"glue_dir": "does/not/exist"}})
    missing = checks.missing_task_files(plan)
    assert REPO / "does/not/exist/MRPC/train.tsv" in missing and len(missing) == 4
    checked = checks.ParseChecks(plan)
    error = checked.first_error()
    assert error.startswith("Task data not found: 4 file(s) missing:") and "does/not/exist/MRPC/train.tsv" in error
    assert checked.hand_labels == {}  # the hand labels (and the data) are not read
    assert checks.missing_task_files(plan_of({"data": {"source": "hub", "glue_dir": "does/not/exist"}})) == []


def test_a_missing_treebank_file_is_named_with_the_fix(tmp_path):
    folder = _treebank_copy(tmp_path)
    (folder / "smoke-ud-dev.conllu").unlink()
    error = checks.ParseChecks(plan_of({"treebank": {"dir": str(folder)}})).first_error()
    assert error == ("config 'treebank': CoNLL-U file(s) not found:\n  " + str(folder / "smoke-ud-dev.conllu")
                     + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
                     "UD_English-EWT, or set treebank.dir: null to skip the treebank stages.")


def test_a_bad_treebank_file_is_a_data_problem_read_only_in_the_main_process(tmp_path):
    folder = _treebank_copy(tmp_path)
    path = folder / "smoke-ud-dev.conllu"
    lines = path.read_text().split("\n")
    lines[3] = lines[3].rsplit("\t", 1)[0]  # a token line with 9 fields
    path.write_text("\n".join(lines))
    plan = plan_of({"treebank": {"dir": str(folder)}})
    [problem] = checks.treebank_problems(plan)
    assert "smoke-ud-dev.conllu" in problem
    error = checks.ParseChecks(plan).first_error()
    assert error.startswith("Bad input data (nothing was run):\n") and problem in error
    # a cluster job parses the workflow again: it checks the config and the files, not their contents
    cluster_job = checks.ParseChecks(plan, main_process=False)
    assert [check.name for check in cluster_job.checks()][-1] == "hand_labels"
    assert cluster_job.first_error() is None and cluster_job.labels("tiny-bert") is not None


def test_a_missing_model_folder_names_the_model_and_its_spec():
    error = checks.ParseChecks(plan_of({"models": [{"name": "m", "spec": "./models/missing"}]})).first_error()
    assert error.startswith("config 'models':\n  m: spec './models/missing': folder ")
    assert "models/missing does not exist. Fix: point spec at a save_pretrained() folder" in error
    assert checks.model_problems(plan_of()) == []


def test_a_bad_hand_label_stops_at_its_line_and_one_dev_lacks_is_a_data_problem(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,0,0,0,vertical\nMRPC,pretrained,0,5,1,diagonal\n")
    error = checks.ParseChecks(plan_of({"patterns": {"labels_csv": str(path)}})).first_error()
    assert error.startswith("patterns: ") and "labels.csv:3: field 'layer' = 5 is outside 0..1 for this model" in error

    path.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,9999,0,0,vertical\n")
    plan = plan_of({"patterns": {"labels_csv": str(path)}})
    checked = checks.ParseChecks(plan)
    error = checked.first_error()
    assert error == ("Bad input data (nothing was run):\n" f"{path}:2: field 'idx' = 9999: MRPC's dev split holds no such "
                     "example (in its seeded sample of data.max_eval_examples). Fix: label maps of examples of MRPC dev, or raise "
                     "max_eval_examples.")
    assert checks.ParseChecks(plan, main_process=False).first_error() is None


def test_a_hand_label_naming_an_undeclared_task_is_a_typo_and_one_of_another_declared_task_is_kept(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,0,0,0,vertical\nMRCP,pretrained,1,0,0,vertical\n")
    error = checks.ParseChecks(plan_of({"patterns": {"labels_csv": str(path)}})).first_error()
    assert f"{path}:3: field 'task' = 'MRCP' is not a declared task (did you mean 'MRPC'?)" in error
    path.write_text("task,state,idx,layer,head,label\nMRPC,pretrained,0,0,0,vertical\nQQP,pretrained,1,0,0,vertical\n")
    assert checks.ParseChecks(plan_of({"patterns": {"labels_csv": str(path)}})).first_error() is None


def test_hand_labels_of_a_task_the_config_redeclares_are_warned_about_and_of_a_shipped_one_not():
    assert checks.ParseChecks(plan_of()).label_warnings() == []  # first_error not run: no labels read, nothing to say
    checked = checks.ParseChecks(plan_of())
    assert checked.first_error() is None and checked.label_warnings() == []
    own_mrpc = {"labels": ["not_equivalent", "equivalent"], "metrics": ["accuracy", "f1"],
                "files": {"dir": "tests/fixtures/glue_smoke/MRPC", "splits": {"train": "train.tsv", "dev": "dev.tsv"},
                          "quoting": False, "text": ["#1 String", "#2 String"], "label": "Quality"}}
    checked = checks.ParseChecks(plan_of({"task_declarations": {"MRPC": own_mrpc}}))
    assert checked.first_error() is None
    (warning,) = checked.label_warnings()
    assert "hand labels of tiny-bert" in warning and "name MRPC examples by idx" in warning
    assert "task_declarations.MRPC replaces" in warning and "patterns.labels_dir: null" in warning
    # the same files as the shipped declaration reads (under data.glue_dir): nothing to say
    same = own_mrpc | {"files": own_mrpc["files"] | {"dir": str(REPO / "tests" / "fixtures" / "glue_smoke"), "format": "tsv",
                                                     "splits": {"train": "MRPC/train.tsv", "dev": "MRPC/dev.tsv"}}}
    checked = checks.ParseChecks(plan_of({"task_declarations": {"MRPC": same}}))
    assert checked.first_error() is None and checked.label_warnings() == []
    # a cluster job parses the workflow again: silent
    cluster_job = checks.ParseChecks(plan_of({"task_declarations": {"MRPC": own_mrpc}}), main_process=False)
    assert cluster_job.first_error() is None and cluster_job.label_warnings() == []
    # labels given as one CSV: the warning names that key
    labels_csv = REPO / "tests" / "fixtures" / "pattern_labels" / "tiny-bert.csv"
    checked = checks.ParseChecks(plan_of({"task_declarations": {"MRPC": own_mrpc}, "patterns": {"labels_csv": str(labels_csv)}}))
    assert checked.first_error() is None
    (warning,) = checked.label_warnings()
    assert "patterns.labels_csv: null" in warning


def test_a_section_with_no_text_is_named(tmp_path):
    (tmp_path / "report" / "sections").mkdir(parents=True)
    plan = jobs.experiment(load_config(SMOKE), tmp_path)
    assert checks.missing_section_texts(plan) == [section.anchor for section in plan.sections()]
    assert checks.missing_section_texts(plan_of()) == []
