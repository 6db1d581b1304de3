# What every stage needs: the validated config, its runs table (bertology_core/workflow/runs.py), the checks of the
# config and of the input files it names (before any job), the wildcard constraints, and the few helpers that need
# Snakemake. Rule files define no function: their inputs and params look things up in PLAN (what the config decides by
# itself) or in runs() (what runs under the fitness verdicts).
import functools
import hashlib
import re
from pathlib import Path

import polars as pl
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from bertology_core.data import glue, states, treebank
from bertology_core.models import compatibility
from bertology_core.patterns import pattern_labels
from bertology_core.workflow import code_imports, configuration, runs as run_table
from bertology_core.workflow.runs import FIGURE_FILES, FITNESS_TABLE, GATE_DIR, PRUNE_DIR, TABLE_FILES, TREEBANK_DOWNLOADED

_SCHEMA = yaml.safe_load((Path(workflow.basedir) / "schemas" / "config.schema.yaml").read_text())
# a number written as text ("32", or 2e-5, which YAML 1.1 reads as text) is read as the number the schema asks for
_written = {key: value for key, value in configuration.flatten(config).items() if isinstance(value, str)}
for _key in configuration.numbers_from_strings(config, _SCHEMA):
    if workflow.is_main_process:
        logger.warning(configuration.number_warning(_key, _written.get(_key, "?"), configuration.flatten(config)[_key]))
# the key, the value and what is allowed first (Snakemake's validate leads with a dump of the schema); then
# Snakemake's validate, which also fills in the schema's defaults
if problems := configuration.schema_problems(config, _SCHEMA):
    raise WorkflowError("config does not fit schemas/config.schema.yaml:\n  " + "\n  ".join(problems))
validate(config, schema="../schemas/config.schema.yaml")

REPO = Path(workflow.basedir)
# the runs of every stage, computed once; every choice the config cannot run is named at once, before any job
PLAN = run_table.Plan(config, REPO)
if problems := PLAN.problems():
    raise WorkflowError("config:\n  " + "\n  ".join(problems))
MODEL_JOB_GPUS = config["compute"]["gpus"]


wildcard_constraints:
    model="|".join(re.escape(m) for m in PLAN.models),
    task="|".join(re.escape(t) for t in glue.TASKS),
    split="train|dev|dev_mismatched",
    seed=r"\d+",
    # a fine-tuning run's state, an attention dump's state (trained ones per seed), a probed state
    state="|".join(states.FINE_TUNING),
    dumped=states.DUMPED_PATTERN,
    probed="|".join((states.PRETRAINED, states.RANDOM_WEIGHTS)) + "|(?:" + "|".join(re.escape(t) for t in glue.TASKS) + r")_seed\d+",


# --- the runs under the fitness verdicts -------------------------------------------------------------------------


def runs():
    """What runs under the fitness verdicts (bertology_core.workflow.runs.Runs). Where no verdict decides anything
    (analysis.unfit warn, or no analysis of a model fine-tuned from the pre-trained encoder): what the config runs
    were every model fit. Under skip and fail: the runs under the fitness checkpoint's table, so an input function
    that calls this waits for the checkpoint, and Snakemake asks it again once the table is written."""
    if not PLAN.needs_verdicts:
        return PLAN.every_model_fit
    path = Path(checkpoints.fitness_table.get().output[0])
    return _runs_under(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _runs_under(path, modified):
    """The runs under the verdicts of the fitness table at ``path``, read once per version of it (``modified``)."""
    table = pl.read_parquet(path).select("model", "task", "state", "seed", "fit")
    return PLAN.runs({(m, t, i, int(s)): bool(f) for m, t, i, s, f in table.iter_rows()})


# --- what a rule declares ----------------------------------------------------------------------------------------


def script_code(script):
    """Hash of the library code a workflow script runs: every bertology_core module and script helper it
    imports, followed through their own imports (:func:`bertology_core.workflow.code_imports.reached_modules`). Passed
    as a param (``code=``).

    Snakemake tracks a job's script but not the library the script imports; without this hash a fix in
    the library would not rerun the jobs it changes. The imports are read from the source, so the hash
    cannot miss a module a hand-kept list forgot."""
    digest = hashlib.sha256()
    for module in sorted(code_imports.reached_modules(REPO / "workflow_scripts" / f"{script}.py", REPO)):
        digest.update(module.relative_to(REPO).as_posix().encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()[:16]


def scaled(base):
    """A resource that grows with the attempt, so a job retried after running out of memory or
    time (profiles/slurm sets retries) asks for more: base, 2 x base, 3 x base..."""
    return lambda wildcards, attempt: base * attempt


def dump_file(path):
    """Attention dumps are temp() unless attention.keep_dumps: deleted once every analysis read them."""
    return path if config["attention"]["keep_dumps"] else temp(path)


def report_file(section, path, kind):
    """``path`` (a table's CSV or a figure's PNG) registered with Snakemake's report (``snakemake --report``),
    captioned by the section's text (report/sections/<section>.rst)."""
    return report(path, caption=str(REPO / "report" / "sections" / f"{section}.rst"), category=section, subcategory="{model}",
                  labels={"model": "{model}", kind: Path(path).stem})


def summary_outputs(section, stem):
    """The outputs of the summary of ``section`` at ``stem`` (results/..., as the runs table's SECTIONS declare it)
    for a rule's ``output:`` (``**summary_outputs(...)``), named as the table names them: the files of a table
    (figures.write_table) and/or a figure (figures.save_chart), each written once: the report page reads a table's
    Parquet and a figure's Vega-Lite spec, and each table's CSV and each figure's PNG is registered with Snakemake's
    report (``snakemake --report``)."""
    written = run_table.summary(section, stem.removeprefix("results/"))
    registered = {"table": ".csv", "figure": ".png"}
    kept = [ext for kind in written.files for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES) if ext != registered[kind]]
    outputs = {written.name: multiext(stem, *kept)}
    outputs.update({f"{written.name}_{kind}_report": report_file(section, stem + registered[kind], kind) for kind in written.files})
    return outputs


# --- the input files the config names, checked before any job ----------------------------------------------------


def model_folder(model):
    """The folder of a package or folder spec (relative paths: to the repository); None for a Hub id (fetched and
    checked by rule check_model)."""
    spec = PLAN.models[model]
    if spec.startswith(compatibility.PACKAGE_PREFIX):
        return compatibility.package_model_folder(spec.removeprefix(compatibility.PACKAGE_PREFIX))
    return compatibility.spec_folder(spec, REPO)


def model_files(model):
    """resolve_model's inputs: a folder's config and weights (replacing its weights reruns what used them); for a Hub
    id, the verdict of check_model, ancient(); re-checking it for a changed config never reruns the model's jobs."""
    if PLAN.models[model].startswith(compatibility.PACKAGE_PREFIX):
        return {}
    folder = model_folder(model)
    if folder is None:
        return {"checked": ancient(f"results/models/{model}/checked.json")}
    return {"config": str(folder / "config.json"), "weights": sorted(str(p) for p in folder.glob("*.safetensors"))}


def _model_problems(model):
    """Why a package or folder model cannot be used by this config (architecture, tokenizer, label counts,
    positions). A Hub id is checked by rule check_model, before any other model job."""
    try:
        folder = model_folder(model)
    except compatibility.ModelSpecError as error:
        return [str(error)]
    if folder is None:
        return []
    if not folder.is_dir():
        return [f"folder {folder} does not exist. Fix: point spec at a save_pretrained() folder (relative paths are "
                "relative to the repository), or at a Hub id."]
    if not compatibility.is_hf_folder(folder):
        return [f"folder {folder} has no config.json or no *.safetensors weights. Fix: save the model with "
                "save_pretrained() (safetensors; .bin pickles are refused)."]
    return compatibility.model_problems(folder, **PLAN.model_requirements())


def _read_hand_labels(model):
    """(HandLabels, every label frame by role, with its lines) of ``model``'s hand labels, or None: every line checked
    (for a package or folder model, layers and heads against its config.json); test labels must name maps the
    training labels do not, and a second pass or labeller a subset of them."""
    settings = config["patterns"]
    try:
        if settings["labels_csv"]:
            files, card = {"labels": PLAN.repo_path(settings["labels_csv"])}, None
        else:
            card = pattern_labels.find_label_card(PLAN.repo_path(settings["labels_dir"]) if settings["labels_dir"] else None,
                                                  PLAN.models[model])
            if card is None:
                return None
            files = pattern_labels.LabelCard.read(card).files(card)
        folder = model_folder(model)
        geometry = compatibility.geometry(compatibility.read_config(folder)) if folder is not None else (None, None)
        frames = {role: pattern_labels.read_labels(path, *geometry) for role, path in files.items()}
        if "test" in frames:
            pattern_labels.check_test_disjoint(frames["labels"], frames["test"], files["test"], files["labels"])
        for role in ("second_pass", "second_labeller"):
            if role in frames:
                pattern_labels.check_relabelled_subset(frames["labels"], frames[role], files[role], files["labels"], role)
    except pattern_labels.LabelsError as error:
        raise WorkflowError(f"patterns: {error}") from None
    named = pl.concat([frames[role].select("task", "state", "idx") for role in ("labels", "test") if role in frames])
    return run_table.hand_labels(files, card, named.iter_rows()), frames


def _glue_problems():
    """(problems, dev split by task) of the local GLUE files: every split read and checked once (columns, labels, idx,
    encoding), each problem naming the file and line. (The Hub's data is checked by its prepare_data job.)"""
    problems, dev_frames = [], {}
    for task in PLAN.tasks if config["data"]["source"] == "local" else []:
        for split in ["train", *PLAN.eval_splits(task)]:
            path = glue.local_path(glue.get_task(task), split, PLAN.glue_dir())
            try:
                frame = glue.check_split(glue.get_task(task), glue.read_local(glue.get_task(task), split, PLAN.glue_dir()), str(path))
            except glue.DataError as error:
                problems.append(str(error))
                continue
            if split == "dev":
                dev_frames[task] = frame
    return problems, dev_frames


def _treebank_problems():
    """Format and encoding of the local CoNLL-U files (downloads: checked by prepare_treebank)."""
    problems = []
    for split in PLAN.treebank_splits if config["treebank"]["dir"] else []:
        try:
            treebank.validate(PLAN.treebank_file(split))
        except treebank.TreebankError as error:
            problems.append(str(error))
    return problems


def _hand_label_data_problems(model, dev_frames):
    """Hand labels (training and test) of the dumps this config would make that name a GLUE idx the task's dev split
    (as prepared: subsampled by max_eval_examples) does not hold, each naming the label file's line. ``dev_frames``:
    task -> local dev split. (Against Hub data: checked by labelled_maps.)"""
    if HAND_LABELS[model] is None:
        return []
    labels, frames = HAND_LABELS[model]
    keys = set(PLAN.every_model_fit.of(model).dump_keys)  # the fitness checkpoint cannot be read while parsing
    problems = []
    for task, frame in dev_frames.items():
        sample = glue.subsample(frame, PLAN.data_limits(task)["max_eval_examples"], config["data"]["subsample_seed"])
        held = set(sample["idx"].to_list())
        for role in ("labels", "test"):
            if role not in frames:
                continue
            for state, idx, line in frames[role].filter(pl.col("task") == task).select("state", "idx", "line").iter_rows():
                if f"{task}/{state}" in keys and idx not in held:
                    subsampled = " (in its seeded sample of data.max_eval_examples)" if sample.height < frame.height else ""
                    problems.append(f"{labels.files[role]}:{line}: field 'idx' = {idx}: {task}'s dev split holds no such "
                                    f"example{subsampled}. Fix: label maps of examples of {task} dev, or raise max_eval_examples.")
    return problems


# Fail before the DAG is built, each message naming every missing file and the fix.
if config["data"]["source"] == "local" and (_missing := glue.missing_local_files(PLAN.tasks, PLAN.glue_dir())):
    raise WorkflowError(glue.missing_files_message(_missing, PLAN.glue_dir()))
if _missing := [str(PLAN.treebank_file(s)) for s in PLAN.treebank_splits if config["treebank"]["dir"] and not PLAN.treebank_file(s).is_file()]:
    raise WorkflowError(
        "config 'treebank': CoNLL-U file(s) not found:\n  " + "\n  ".join(_missing)
        + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
        "UD_English-EWT, or set treebank.dir: null to skip the treebank stages."
    )
if _bad_models := [f"  {name}: spec {spec!r}: {problem}" for name, spec in PLAN.models.items() for problem in _model_problems(name)]:
    raise WorkflowError("config 'models':\n" + "\n".join(_bad_models))
if _missing := run_table.section_texts_missing(REPO):
    raise WorkflowError(f"report/sections: no text for the section(s) {_missing} of the runs table. Fix: write "
                        f"report/sections/<anchor>.rst (a paragraph: what the section shows, from which paper).")
# every line of every model's hand labels, read once
HAND_LABELS = {model: _read_hand_labels(model) for model in PLAN.models}


def hand_labels(model):
    """``model``'s hand labels (bertology_core.workflow.runs.HandLabels), or None."""
    return HAND_LABELS[model][0] if HAND_LABELS[model] else None


# The files' contents (about a second for the CPU profile): only in the main process, as a cluster job parses the
# workflow again and need not reread the data.
if workflow.is_main_process:
    _problems, _dev_frames = _glue_problems()
    _problems += _treebank_problems()
    _problems += [problem for model in PLAN.models for problem in _hand_label_data_problems(model, _dev_frames)]
    if _problems:
        raise WorkflowError("Bad input data (nothing was run):\n" + "\n".join(_problems))
